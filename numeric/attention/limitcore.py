r"""What the d -> infinity limits of every parameterisation share (paper 003, Sec. 4).

The Marchenko-Pastur law of a Wishart initialisation (its edges, a Gauss-Legendre rule in
the angle variable and the ``d`` bin means that stand for its spectrum at finite ``d``),
Haar rotations between the random letters, Richardson extrapolation in ``1/d`` with its
error estimate, and the :class:`LimitTrajectory` result with per-observable errors. The tied
limit (:mod:`.tied.limit`) and the untied one (:mod:`.untied.limit`) both import them here,
so neither parameterisation imports the other.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence, TypeVar, overload

import numpy as np

from attndyn.numeric.core.results import Trajectory

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from attndyn.numeric.core.types import ArrayLike, PathLike

__all__ = ["LimitTrajectory", "SpectralDensity", "ks_distance", "wasserstein_distance",
           "mp_edges", "mp_quadrature", "mp_bin_means", "haar_orthogonal", "richardson",
           "extrapolate", "quantile_levels", "spectrum_quantiles", "equivalent_quantiles",
           "quantile_cdf_error"]


class LimitTrajectory(Trajectory):
    """A :class:`Trajectory` with a per-observable error estimate.

    ``error`` maps each observable name to an array over the output times
    (the same shape as ``moment(word)``); ``diagnostics["error"]`` holds the
    same numbers as an ``(n_obs, n_t)`` array, so they survive save/load.
    """

    @property
    def error(self) -> dict[str, np.ndarray]:
        e = np.asarray(self.diagnostics.get("error", np.full(self.y.shape, np.nan)), float)
        return {n: e[i] for i, n in enumerate(self.names)}

    def moment_error(self, word: Sequence[int]) -> np.ndarray:
        e = np.asarray(self.diagnostics.get("error", np.full(self.y.shape, np.nan)), float)
        row: np.ndarray = e[self._word_index(word)]
        return row


_Law = TypeVar("_Law", bound="SpectralDensity")


class SpectralDensity(Trajectory):
    """An eigenvalue law at the output times (``kind="spectral_density"``), of every
    parameterisation's limit (the tied commuting law of :mod:`.tied.spectral`, the untied
    laws of :func:`.untied.limit.spectral_density`).

    ``y`` has shape ``(n_grid, n_t)``: the density of the continuous part at the points
    ``grid`` (row ``i`` is named ``rho(grid[i])``). ``diagnostics`` holds ``grid``, ``cdf``
    (``(n_grid, n_t)``, atoms included), ``tracer_y``/``tracer_cdf`` (the CDF of the
    continuous part at sorted points, linear in between), ``atom`` (``(2, n_t)``: location
    and mass, mass 0 without one) and ``support`` (``(2, n_t)``).

    For a law ``F_t``, ``rho_t = dF_t/dy`` on its continuous part; :func:`ks_distance` and
    :func:`wasserstein_distance` compare it with the eigenvalues of a finite-``d`` matrix.

    Examples
    --------
    >>> import attndyn
    >>> from attndyn.symbolic.initial import FreeInit, scalar, wishart
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> rho = attndyn.spectral_density(model, FreeInit([wishart(0.5), scalar(1)]), [0.0],
    ...                                n_grid=10, tracers=101)
    >>> isinstance(rho, attndyn.SpectralDensity), rho.grid.shape
    (True, (10,))
    >>> round(float(rho.cdf(1e9)[()]), 6)     # all the mass (atom included) below +infinity
    1.0
    """

    @property
    def grid(self) -> np.ndarray:
        return np.asarray(self.diagnostics["grid"], dtype=float)

    @property
    def density(self) -> np.ndarray:
        return np.asarray(self.y, dtype=float)

    @property
    def cdf_values(self) -> np.ndarray:
        return np.asarray(self.diagnostics["cdf"], dtype=float)

    def cdf(self, y: ArrayLike, t_index: int = -1) -> np.ndarray:
        """``F_t(y)`` at any points ``y`` for the output time ``t[t_index]`` (exact at the
        stored points, interpolated linearly between them; atoms included)."""
        tr_y = np.asarray(self.diagnostics["tracer_y"], dtype=float)[:, t_index]
        tr_F = np.asarray(self.diagnostics["tracer_cdf"], dtype=float)[:, t_index]
        atom_x, atom_m = np.asarray(self.diagnostics["atom"], dtype=float)[:, t_index]
        total_c = float(self.params.get("continuous_mass", 1.0 - atom_m))
        ya = np.asarray(y, dtype=float)
        F = np.interp(ya, tr_y, tr_F, left=0.0, right=total_c)
        out: np.ndarray = F + np.where(ya >= atom_x, atom_m, 0.0)
        return out

    @classmethod
    def load(cls: type[_Law], path: PathLike) -> _Law:
        from attndyn.numeric.core.results import load_result
        r = load_result(path)
        if r.kind != "spectral_density":
            raise ValueError(f"{path} holds a {r.kind!r} result, not a spectral density")
        return cls(**{f: getattr(r, f) for f in ("t", "y", "names", "words", "kind", "params",
                                                 "seed", "status", "message", "diagnostics",
                                                 "inv")})

    def plot(self, t_index: int = -1, ax: Axes | None = None, **kw: Any) -> Axes:
        """The density at ``t[t_index]`` (and an atom as a marker); returns the axes."""
        import matplotlib.pyplot as plt
        if ax is None:
            _, ax = plt.subplots()
        ax.plot(self.grid, self.density[:, t_index], label=f"t = {self.t[t_index]:.3g}", **kw)
        x, m = np.asarray(self.diagnostics["atom"], dtype=float)[:, t_index]
        if m > 0:
            ax.annotate(f"atom {m:.2g}", (x, 0.0))
        ax.set_xlabel(str(self.params.get("spectrum_label", "eigenvalue")))
        ax.set_ylabel("density")
        return ax


def _check_eigenvalues(eigenvalues: ArrayLike) -> np.ndarray:
    ev = np.sort(np.asarray(eigenvalues, dtype=float).ravel())
    if ev.size == 0 or not np.all(np.isfinite(ev)):
        raise ValueError("eigenvalues must be a non-empty array of finite numbers")
    return ev


def ks_distance(res: SpectralDensity, eigenvalues: ArrayLike, t_index: int = -1) -> float:
    """Kolmogorov-Smirnov distance ``sup_y |F_emp(y) - F_t(y)|`` between the eigenvalues of
    a finite-``d`` matrix and a :class:`SpectralDensity` at ``t[t_index]``."""
    ev = _check_eigenvalues(eigenvalues)
    F = res.cdf(ev, t_index)
    n = ev.size
    i = np.arange(1, n + 1)
    return float(max(np.max(np.abs(i / n - F)), np.max(np.abs((i - 1) / n - F))))


def wasserstein_distance(res: SpectralDensity, eigenvalues: ArrayLike, t_index: int = -1,
                         n_points: int = 20001) -> float:
    """``W_1 = int |F_emp(y) - F_t(y)| dy`` between the eigenvalues of a finite-``d`` matrix
    and a :class:`SpectralDensity` at ``t[t_index]`` (trapezoid rule on ``n_points`` points
    spanning both supports)."""
    ev = _check_eigenvalues(eigenvalues)
    tr_y = np.asarray(res.diagnostics["tracer_y"], dtype=float)[:, t_index]
    atom_x = float(np.asarray(res.diagnostics["atom"], dtype=float)[0, t_index])
    lo = min(ev[0], float(tr_y.min()), atom_x)
    hi = max(ev[-1], float(tr_y.max()), atom_x)
    y = np.linspace(lo, hi, int(n_points))
    diff = np.abs(np.searchsorted(ev, y, side="right") / ev.size - res.cdf(y, t_index))
    return float(np.sum((diff[1:] + diff[:-1]) / 2 * np.diff(y)))


def mp_edges(sigma: float, aspect: float) -> tuple[float, float, float]:
    """``(lambda_-, lambda_+) = sigma^2 (1 -+ sqrt(aspect))^2`` and the atom ``(1 - aspect)_+`` at 0."""
    s2 = sigma * sigma
    ra = math.sqrt(aspect)
    return s2 * (1 - ra) ** 2, s2 * (1 + ra) ** 2, max(0.0, 1.0 - aspect)


def mp_theta_weight(theta: np.ndarray, sigma: float, aspect: float) -> np.ndarray:
    """Marchenko-Pastur density times dx/dtheta, ``x = lm + D sin^2(theta/2)``."""
    lm, lp, _ = mp_edges(sigma, aspect)
    D = lp - lm
    s = np.sin(theta / 2)
    c = np.cos(theta / 2)
    return D * D * 4 * s * s * c * c / (8 * math.pi * sigma * sigma * (lm + D * s * s))


def mp_quadrature(sigma: float, aspect: float, panels: int = 48, per_panel: int = 20
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights for ``int f(x) drho_MP(x)`` (continuous part plus the atom).

    Composite Gauss-Legendre in ``theta`` on ``[pi 2^-(j+1), pi 2^-j]``,
    ``j = 0..panels-2``, and one panel on ``[0, pi 2^-(panels-1)]``.
    Exact for the first moments to rounding; see :mod:`.tied.limit`'s docstring.
    """
    if sigma == 0:
        return np.zeros(1), np.ones(1)
    lm, lp, atom = mp_edges(sigma, aspect)
    D = lp - lm
    g, gw = np.polynomial.legendre.leggauss(per_panel)
    edges = [math.pi * 2.0 ** -j for j in range(panels)] + [0.0]
    th_panels: list[np.ndarray] = []
    w_panels: list[np.ndarray] = []
    for hi, lo in zip(edges[:-1], edges[1:]):
        half = (hi - lo) / 2
        t = lo + half * (g + 1)
        th_panels.append(t)
        w_panels.append(gw * half * mp_theta_weight(t, sigma, aspect))
    th = np.concatenate(th_panels)
    w = np.concatenate(w_panels)
    x = lm + D * np.sin(th / 2) ** 2
    if atom > 0:
        x = np.concatenate([[0.0], x])
        w = np.concatenate([[atom], w])
    return x, w


def mp_cdf_theta(theta: np.ndarray, sigma: float, aspect: float) -> np.ndarray:
    """Mass of the continuous part on ``[lambda_-, x(theta)]`` (closed form)."""
    lm, lp, _ = mp_edges(sigma, aspect)
    s2 = sigma * sigma
    A = s2 * (1 + aspect)
    B = 2 * s2 * math.sqrt(aspect)
    out = B * np.sin(theta) + A * theta
    if aspect != 1.0:
        out = out - 2 * s2 * abs(1 - aspect) * np.arctan(
            math.sqrt(lp / lm) * np.tan(np.minimum(theta, math.pi * (1 - 1e-16)) / 2))
    out = out / (2 * math.pi * s2)
    return np.where(theta >= math.pi, min(1.0, aspect), out)


def _mp_first_theta(theta: np.ndarray, sigma: float, aspect: float) -> np.ndarray:
    """``int_{lambda_-}^{x(theta)} x drho`` (closed form): ``D^2/(8 pi s^2) (theta/2 - sin(2 theta)/4)``."""
    lm, lp, _ = mp_edges(sigma, aspect)
    D = lp - lm
    out: np.ndarray = D * D / (8 * math.pi * sigma * sigma) * (theta / 2 - np.sin(2 * theta) / 4)
    return out


def mp_bin_means(sigma: float, aspect: float, d: int) -> np.ndarray:
    """The ``d`` eigenvalues of a deterministic equivalent: the mean of ``x`` over
    each of ``d`` equal-mass quantile bins of the Marchenko-Pastur law (so
    ``Tr S / d`` is exact)."""
    if sigma == 0:
        return np.zeros(d)
    lm, lp, atom = mp_edges(sigma, aspect)
    p = np.arange(d + 1) / d
    pc = np.clip(p - atom, 0.0, None)  # mass inside the continuous part
    mass = min(1.0, aspect)
    pc = np.minimum(pc, mass)
    lo = np.zeros_like(pc)
    hi = np.full_like(pc, math.pi)
    for _ in range(64):  # bisection on the closed-form CDF (monotone in theta)
        mid = (lo + hi) / 2
        below = mp_cdf_theta(mid, sigma, aspect) < pc
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    th = (lo + hi) / 2
    th[pc <= 0] = 0.0
    th[pc >= mass] = math.pi
    first = _mp_first_theta(th, sigma, aspect)
    out: np.ndarray = np.diff(first) * d
    return out


def haar_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-distributed ``d x d`` orthogonal matrix (QR of a Gaussian, signs fixed)."""
    Z = rng.standard_normal((d, d))
    Q, R = np.linalg.qr(Z)
    return Q * np.sign(np.diag(R))


def richardson(values: ArrayLike, sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Extrapolate ``values[i] ~ Y(sizes[i])`` to ``d = inf`` with
    ``Y(d) = Y_inf + sum_{j=1}^{m-1} c_j d^{-j}``; returns ``Y_inf`` and the
    weights ``w`` with ``Y_inf = sum_i w_i values[i]``."""
    h = 1.0 / np.asarray(sizes, float)
    m = h.size
    V = np.vander(h, m, increasing=True)  # columns h^0, h^1, ...
    e0 = np.zeros(m)
    e0[0] = 1.0
    wts = np.linalg.solve(V.T, e0)  # w^T V = e0^T: exact for polynomials of degree m-1 in h
    vals = np.asarray(values, float)
    Y: np.ndarray = np.tensordot(wts, vals, axes=(0, 0))
    return Y, wts


def extrapolate(means: ArrayLike, ses: ArrayLike, sizes: Sequence[int], rotations: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Richardson limit of per-size means and its error estimate (docstring of :mod:`.tied.limit`):
    ``t * stat + sys`` with ``stat`` the standard error propagated through the Richardson
    weights and taken uniform in time per observable (its maximum over the output
    times: a few rotations estimate it poorly at any one time), ``t`` the 97.5% Student
    quantile for the pooled ``sum (rotations - 1)`` degrees of freedom, and ``sys`` the
    change of the extrapolation without the smallest size (two sizes: the whole
    correction ``|Y_inf - Y(d_2)|``), plus rounding. Returns ``(Y, err, stat, sys, w)``."""
    from scipy.stats import t as student_t
    means_a = np.asarray(means, float)
    ses_a = np.asarray(ses, float)
    Y, wts = richardson(means_a, sizes)
    stat = np.sqrt(np.tensordot(wts ** 2, ses_a ** 2, axes=(0, 0)))
    if stat.ndim == 2 and stat.shape[1]:
        stat = np.repeat(stat.max(axis=1, keepdims=True), stat.shape[1], axis=1)
    dof = len(sizes) * (rotations - 1)
    factor = float(student_t.ppf(0.975, dof)) if dof >= 1 else 0.0
    if len(sizes) >= 3:
        Y2, _ = richardson(means_a[1:], sizes[1:])
        sys = np.abs(Y - Y2)
    else:
        sys = np.abs(Y - means_a[-1])
    sys = sys + 1e-12 * np.maximum(1.0, np.abs(Y))  # rounding of the traces
    return Y, factor * stat + sys, factor * stat, sys, wts


def check_sizes(sizes: Sequence[int] | None) -> list[int]:
    """The finite sizes of the deterministic equivalents, sorted: at least two distinct
    ints >= 2 (default ``(200, 400)``); the Richardson extrapolation in ``d`` needs two."""
    try:
        out = sorted(int(s) for s in ((200, 400) if sizes is None else sizes))
    except (TypeError, ValueError):
        raise TypeError("sizes must be a sequence of ints >= 2") from None
    if len(out) < 2 or out[0] < 2 or len(set(out)) != len(out):
        raise ValueError(f"sizes must hold at least two distinct ints >= 2, got {out}")
    return out


def check_quantile_args(sizes: Sequence[int] | None, rotations: object, levels: object,
                        extrapolation: str, rtol: float | None, atol: float | None
                        ) -> tuple[list[int], int, int, float, float]:
    """The shared arguments of a free law's spectral density from the quantiles of its
    deterministic equivalents (tied and untied), checked with one-line errors naming each:
    ``(sizes, rotations, levels, rtol, atol)``; ``levels`` may not exceed the smallest size
    (the quantiles of a ``d``-point spectrum)."""
    from attndyn.numeric.core.validate import check_pos_float

    rotations = check_int(rotations, "rotations", 1)
    levels = check_int(levels, "levels", 10, 100_000)
    if extrapolation not in ("largest", "richardson"):
        raise ValueError("extrapolation must be 'largest' or 'richardson', got "
                         f"{extrapolation!r}")
    rtol = 1e-9 if rtol is None else check_pos_float(rtol, "rtol")
    atol = 1e-12 if atol is None else check_pos_float(atol, "atol")
    out = check_sizes(sizes)
    if levels > out[0]:
        raise ValueError(f"levels must be at most the smallest size {out[0]}, got {levels}")
    return out, rotations, levels, rtol, atol


def check_int(v: object, name: str, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or (
            hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ValueError(f"{name} must be an int {rng}, got {v!r}")
    return int(v)


def seed_rec(seed: Any) -> int | None:
    try:
        return int(seed)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------
# spectral laws: the shared result builder and the free case's quantile machinery
# (the tied free law of :mod:`.tied.spectral` and the untied one of :mod:`.untied.limit`)

def quantile_levels(levels: int) -> np.ndarray:
    """The probabilities ``0, (i + 1/2)/levels (i < levels), 1`` at which a free law's
    quantiles are recorded (the two ends are the spectrum's edges).

    >>> quantile_levels(4)
    array([0.   , 0.125, 0.375, 0.625, 0.875, 1.   ])
    """
    return np.concatenate([[0.0], (np.arange(levels) + 0.5) / levels, [1.0]])


def spectrum_quantiles(ev: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Quantiles at ``p`` of the ascending eigenvalues ``ev``: the ``i``-th eigenvalue sits
    at probability ``(i + 1/2)/n``, linear in between, the edges at ``p = 0, 1``.

    >>> spectrum_quantiles(np.array([1.0, 2.0, 3.0, 4.0]), quantile_levels(2))
    array([1. , 1.5, 3.5, 4. ])
    """
    q: np.ndarray = np.interp(p * ev.size - 0.5, np.arange(ev.size), ev)
    return q


def equivalent_quantiles(means: np.ndarray, ses: np.ndarray, sizes: Sequence[int], rotations: int,
                         extrapolation: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``d -> infinity`` quantiles from the equivalents' per-size mean quantiles
    ``means`` (``(n_sizes, n_levels, n_t)``) and their standard errors over rotations:
    ``(Q, err)``, ``Q`` made non-decreasing in the level.

    ``"largest"``: the largest size, ``err = |Q(d_m) - Q(d_{m-1})| d_{m-1}/(d_m - d_{m-1})``
    (the ``O(1/d)`` remainder the change between the two largest sizes implies) plus the
    Student 97.5% quantile (``n_sizes (rotations - 1)`` degrees of freedom) times the
    standard error; ``"richardson"``: :func:`extrapolate` in ``1/d`` with its error.

    >>> means = np.array([[[0.0], [1.1], [2.0]], [[0.0], [1.05], [2.0]]])  # sizes 100, 200
    >>> Q, err = equivalent_quantiles(means, np.zeros_like(means), [100, 200], 1, "largest")
    >>> Q.ravel(), err.ravel().round(12)
    (array([0.  , 1.05, 2.  ]), array([0.  , 0.05, 0.  ]))
    """
    if extrapolation == "richardson":
        Q, err, _, _, _ = extrapolate(means, ses, sizes, rotations)
    else:  # the largest size; its O(1/d) error is the change from the next size
        Q = means[-1]
        dof = len(sizes) * (rotations - 1)
        from scipy.stats import t as student_t  # scipy: lazily
        fac = float(student_t.ppf(0.975, dof)) if dof >= 1 else 0.0
        err = np.abs(means[-1] - means[-2]) * sizes[-2] / (sizes[-1] - sizes[-2]) \
            + fac * ses[-1]
    return np.maximum.accumulate(Q, axis=0), err


def quantile_cdf_error(res: SpectralDensity, Q: np.ndarray, err: np.ndarray) -> np.ndarray:
    """The stated quantile error in CDF units, per output time: ``err(Q)`` times the
    density of ``res`` at ``Q``, worst interior level."""
    return np.array([
        float(np.max(err[1:-1, j] * np.interp(Q[1:-1, j], res.grid, res.density[:, j])))
        for j in range(Q.shape[1])])


def cells_cdf(lo: np.ndarray, hi: np.ndarray, mass: np.ndarray, y: np.ndarray, chunk: int = 256
               ) -> tuple[np.ndarray, np.ndarray]:
    """``F(y) = sum_c mass_c clip((y - lo_c)/(hi_c - lo_c), 0, 1)``: the CDF of a map linear
    on each cell ``c`` (a step where ``lo_c = hi_c``), and its density."""
    width = hi - lo
    flat = width <= 0
    inv = np.where(flat, 0.0, 1.0 / np.where(flat, 1.0, width))
    F = np.empty(y.size)
    rho = np.empty(y.size)
    for i in range(0, y.size, chunk):
        yy = y[i:i + chunk, None]
        frac = np.where(flat, (yy >= lo).astype(float), np.clip((yy - lo) * inv, 0.0, 1.0))
        F[i:i + chunk] = frac @ mass
        rho[i:i + chunk] = ((yy >= lo) & (yy < hi) & ~flat) @ (mass * inv)
    return F, rho



_SD = TypeVar("_SD", bound=SpectralDensity)
_Cells = tuple[np.ndarray, np.ndarray, np.ndarray]
_Quantiles = tuple[np.ndarray, np.ndarray]


@overload
def spectral_result(ts: np.ndarray, cells: _Cells | None, quant: _Quantiles | None,
                     grid: ArrayLike | None, n_grid: int, status: int, message: str,
                     params: dict[str, Any], diag: dict[str, Any], seed: int | None = None
                     ) -> SpectralDensity: ...


@overload
def spectral_result(ts: np.ndarray, cells: _Cells | None, quant: _Quantiles | None,
                     grid: ArrayLike | None, n_grid: int, status: int, message: str,
                     params: dict[str, Any], diag: dict[str, Any], seed: int | None = None, *,
                     cls: type[_SD]) -> _SD: ...


def spectral_result(ts: np.ndarray, cells: _Cells | None, quant: _Quantiles | None,
                     grid: ArrayLike | None, n_grid: int, status: int, message: str,
                     params: dict[str, Any], diag: dict[str, Any], seed: int | None = None,
                     cls: type[SpectralDensity] = SpectralDensity) -> SpectralDensity:
    """The :class:`SpectralDensity` (or its subclass ``cls``) from per-time cells
    (commuting) or quantiles (free)."""
    n_t = ts.size
    if cells is None and quant is None:
        g = np.zeros(0) if grid is None else np.asarray(grid, dtype=float)
        empty = np.zeros((g.size, 0))
        diag.update({"grid": g, "cdf": empty, "tracer_y": np.zeros((0, 0)),
                     "tracer_cdf": np.zeros((0, 0)), "atom": np.zeros((2, 0)),
                     "support": np.zeros((2, 0))})
        return cls(t=ts[:0], y=empty, names=[f"rho({z:.6g})" for z in g],
                   kind="spectral_density", params=params, status=int(status),
                   message=message, diagnostics=diag, seed=seed)
    if cells is not None:
        lo, hi, mass = cells
        support = np.vstack([lo.min(axis=1), hi.max(axis=1)])
    else:
        assert quant is not None  # both None returned above
        p, Q = quant
        support = np.vstack([Q[0], Q[-1]])
    gr = np.asarray(np.linspace(float(support[0].min()), float(support[1].max()), n_grid)
                    if grid is None else grid, dtype=float)
    if gr.ndim != 1 or gr.size < 1 or not np.all(np.isfinite(gr)):
        raise ValueError("grid must be a 1-d array of finite numbers")
    dens = np.zeros((gr.size, n_t))
    cdf = np.zeros((gr.size, n_t))
    tr_y: list[np.ndarray] = []
    tr_F: list[np.ndarray] = []
    for j in range(n_t):
        if cells is not None:
            pts = np.unique(np.concatenate([lo[j], hi[j]]))
            F, _ = cells_cdf(lo[j], hi[j], mass, pts)
            cdf[:, j], dens[:, j] = cells_cdf(lo[j], hi[j], mass, gr)
        else:
            pts, F = Q[:, j], p
            cdf[:, j] = np.interp(gr, pts, F, left=0.0, right=1.0)
            k = 5  # dp/dQ over quantiles k levels apart
            mid = (Q[k:, j] + Q[:-k, j]) / 2
            dq = Q[k:, j] - Q[:-k, j]
            rho = np.where(dq > 0, (p[k:] - p[:-k]) / np.where(dq > 0, dq, 1.0), 0.0)
            inside = (gr >= Q[0, j]) & (gr <= Q[-1, j])
            dens[inside, j] = np.interp(gr[inside], mid, rho)
        tr_y.append(pts)
        tr_F.append(F)
    n_pts = max(len(a) for a in tr_y)
    # pad per-time point lists to one array (repeat the last point: F is flat there)
    ty = np.array([np.pad(a, (0, n_pts - a.size), mode="edge") for a in tr_y]).T
    tf = np.array([np.pad(a, (0, n_pts - a.size), mode="edge") for a in tr_F]).T
    diag.update({"grid": gr, "cdf": cdf, "tracer_y": ty, "tracer_cdf": tf,
                 "atom": np.vstack([np.zeros(n_t), np.zeros(n_t)]), "support": support})
    return cls(t=np.asarray(ts, float), y=dens, names=[f"rho({z:.6g})" for z in gr],
               kind="spectral_density", params=params, status=int(status), message=message,
               diagnostics=diag, seed=seed)
