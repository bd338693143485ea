"""Spectral density of ``S_k(t)`` in the ``d -> infinity`` limit (tied; commuting and free laws).

In the commuting case (at most one non-scalar letter in the initial law, see
:mod:`attndyn.numeric.attention.tied.limit`) every ``S_k(t)`` is a function of the one random
matrix ``S``: on the eigenvector of ``S`` with eigenvalue ``x``, ``S_k(t)`` has the eigenvalue
``lambda_k(t, x)``, which solves the self-consistent per-eigenvalue flow

    d lambda_k(x)/dt = -2 sum_l Gamma_kl(q) lambda_l(x) lambda_k(x) - (gamma/2) lambda_k(x),
    q_kl(t) = int lambda_k(x) lambda_l(x) drho(x)

(paper 003, eq. 11 projected on the eigenbasis; ``rho`` the Marchenko-Pastur law). The law of
the eigenvalues of ``S_k(t)`` is therefore the push-forward of ``rho`` by ``x -> lambda_k(t, x)``::

    F_t(y) = rho({x : lambda_k(t, x) <= y}),
    rho_t(y) = rho(x) / |d lambda_k / dx|   at  y = lambda_k(t, x)   (one branch).

The limit solver integrates the flow on the nodes of a Marchenko-Pastur quadrature; here the
same flow carries extra *tracer* nodes of zero weight on a fine grid of ``theta``
(``x = lambda_- + (lambda_+ - lambda_-) sin^2(theta/2)``), which leave ``q`` unchanged and
sample ``lambda_k(t, .)``. With ``x`` increasing in ``theta`` and the closed-form
Marchenko-Pastur mass of ``[lambda_-, x(theta)]``, the CDF at a tracer is exact; the density
uses ``d lambda / d theta`` from a cubic spline through the tracers. The map must be monotone
in ``x`` (it is for every flow whose per-node right-hand side is ``lambda_k`` times a
function common to all nodes, the Wishart letter of a logistic-type flow included); where it
is not, the result says so and carries the CDF only.

The atom of the law at 0 (aspect < 1) stays an atom, at ``lambda_k(t, 0)``.

Free laws (two or more Wishart letters, asymptotically free: paper 003, Assumption 6). The
object is the law ``rho_t`` of the eigenvalues of ``S_k(t)``, equivalently its resolvent
``g_t(z) = lim Tr (z - S_k(t))^{-1} / d`` (``rho_t(y) = -Im g_t(y + i0) / pi``), the
direction the paper's conclusion points to. The letters no longer share eigenvectors, the
flow mixes them, and no per-eigenvalue map exists; the law is taken from the deterministic
equivalents of :func:`~attndyn.numeric.attention.tied.limit.limit_flow` (spectra the bin
means of the Marchenko-Pastur laws, independent Haar rotations, the same matrices for the
same ``sizes``, ``rotations`` and ``seed``), each integrated by the tied matrix flow: the
spectrum of ``S_k(t)`` is recorded as its quantiles ``Q(p)`` at ``levels`` probabilities
``(i + 1/2)/levels`` plus the two edges, averaged over the rotations, and
``d -> infinity`` is the largest size (default) with the stated error

    err(p) = |Q_{d_m}(p) - Q_{d_{m-1}}(p)| d_{m-1} / (d_m - d_{m-1}) + t_975 se(p),

the ``O(1/d)`` remainder the change between the two largest sizes implies plus the Student
quantile times the standard error over rotations (``extrapolation="richardson"``: in
``1/d`` over all sizes). The CDF is linear between the quantiles; the density is
``dp/dQ`` over quantiles 5 levels apart. ``diagnostics["moments"]`` are the moments
``int y^k drho_t`` (``k = 1..4``) of that law, which converge to the limit solver's
``Tr S_k^k / d``; ``moment_error`` is the quantile error carried to the moments plus the
discretisation into quantiles, measured at the largest size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np


if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from attndyn.numeric.attention.base import AttentionModel, TiedModelLike
    from attndyn.numeric.core.types import ArrayLike, RngLike
    from attndyn.symbolic.initial import FreeInit
from attndyn.numeric.core.validate import check_pos_float, check_t_eval, resolve_seed
from attndyn.numeric.attention.limitcore import SpectralDensity as _SharedSpectralDensity
from attndyn.numeric.attention.limitcore import (check_int, mp_cdf_theta, mp_theta_weight,
                                                 seed_rec, spectral_result,
                                                 check_quantile_args, check_sizes,
                                                 equivalent_quantiles, ks_distance, mp_edges,
                                                 quantile_cdf_error, quantile_levels,
                                                 spectrum_quantiles)
from attndyn.numeric.attention.tied.limit import (check_law, law_record, node_values,
                                                  random_letters, deterministic_equivalents,
                                                  is_commuting, per_node_values)

__all__ = ["spectral_density", "tied_spectral_density", "SpectralDensity", "ks_distance",
           "per_node_values", "quantile_moments"]


class SpectralDensity(_SharedSpectralDensity):
    """The eigenvalue law of ``S_k(t)`` at the output times (``kind="spectral_density"``).

    ``y`` has shape ``(n_grid, n_t)``: the density of the continuous part at the points
    ``grid`` (row ``i`` is named ``rho(grid[i])``). ``diagnostics`` holds ``grid``,
    ``cdf`` (``(n_grid, n_t)``, atoms included), ``support`` (``(2, n_t)``: the image of
    ``[lambda_-, lambda_+]``), ``atom`` (``(2, n_t)``: location and mass of the atom,
    mass 0 without one) and, per time, whether the map was monotone.

    ``rho_t(y) = rho_0(x) / |d lambda(t, x) / dx|`` at ``y = lambda(t, x)``, the image of
    the Marchenko-Pastur density ``rho_0`` under the per-eigenvalue flow of the commuting
    limit (paper 003, eq. 11 per node). For a free law (Assumption 6) the law comes from the
    quantiles of the deterministic equivalents' spectra along the matrix flow, with
    ``quantiles``, ``quantile_error``, ``cdf_error``, ``moments`` and ``moment_error`` in
    ``diagnostics`` (module docstring).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> import numpy as np
    >>> from attndyn.symbolic.initial import FreeInit, scalar, wishart
    >>> law = FreeInit([wishart(0.5), scalar(1)])
    >>> rho = attndyn.spectral_density(model, law, [0.0, 0.2], n_grid=20, tracers=101)
    >>> isinstance(rho, attndyn.SpectralDensity), rho.grid.shape
    (True, (20,))
    >>> bool(np.all(np.diff(rho.cdf_values[:, -1]) >= -1e-12))   # a CDF: non-decreasing
    True
    """

    def plot(self, t_index: int = -1, ax: Axes | None = None, **kw: Any) -> Axes:
        """The density at ``t[t_index]`` (and the atom as a marker); returns the axes."""
        ax = super().plot(t_index, ax=ax, **kw)
        ax.set_xlabel("eigenvalue of $S_k(t)$")
        return ax


def _invert(spline: Any, th_sorted: np.ndarray, y_sorted: np.ndarray, targets: np.ndarray,
            iters: int = 8) -> np.ndarray:
    """``theta`` with ``spline(theta) = target`` for a monotone spline: linear start,
    then safeguarded Newton steps (kept inside the tracer range)."""
    th: np.ndarray = np.interp(targets, y_sorted, th_sorted)
    lo, hi = th_sorted.min(), th_sorted.max()
    for _ in range(iters):
        d1 = spline(th, 1)
        step = np.where(d1 != 0, (spline(th) - targets) / np.where(d1 != 0, d1, 1.0), 0.0)
        th = np.clip(th - step, lo, hi)
    return th


def _tracer_values(model: TiedModelLike, law: FreeInit, wl: int, letter: int, t_eval: np.ndarray,
                   tracers: int, lm: float, lp: float, rtol: float, atol: float, panels: int,
                   per_panel: int, blowup: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, str]:
    """The per-node map ``x -> lambda_letter(t, x)`` on zero-weight tracers: ``(theta, ts, V,
    status, message)``, ``V`` rows the lower edge, the tracers, the upper edge and ``x = 0``."""
    lam_q, w_q = node_values(law, panels, per_panel)
    # tracers: zero weight, uniform in theta (excluding the end points, where the weight
    # vanishes), plus the two edges and the atom's location x = 0
    theta = math.pi * (np.arange(tracers) + 0.5) / tracers
    xs = np.concatenate([[lm], lm + (lp - lm) * np.sin(theta / 2) ** 2, [lp], [0.0]])
    lam_t = np.repeat(lam_q[:, :1], xs.size, axis=1)
    lam_t[wl] = xs
    lam0 = np.concatenate([lam_q, lam_t], axis=1)
    w = np.concatenate([w_q, np.zeros(xs.size)])
    ts, vals, status, message = per_node_values(model, lam0, w, t_eval, rtol=rtol, atol=atol,
                                                blowup=blowup)
    return theta, ts, vals[letter][w_q.size:], status, message   # V: (n_tracer + 3, n_t)


def _tracer_splines(theta: np.ndarray, y_tr: np.ndarray, sigma: float, aspect: float
                    ) -> tuple[np.ndarray, list[Any]]:
    """Per output time: whether the tracer map is monotone, and its cubic spline in theta."""
    n_t = y_tr.shape[1]
    wth = mp_theta_weight(theta, sigma, aspect)
    monotone = np.zeros(n_t, dtype=bool)
    dens_tr = np.full((theta.size, n_t), np.nan)
    from scipy.interpolate import CubicSpline  # here: scipy is heavy at start-up
    splines: list[Any] = [None] * n_t
    for j in range(n_t):
        dy = np.diff(y_tr[:, j])
        monotone[j] = bool(np.all(dy > 0) or np.all(dy < 0))
        if monotone[j]:
            splines[j] = CubicSpline(theta, y_tr[:, j])
            dens_tr[:, j] = wth / np.abs(splines[j](theta, 1))
    return monotone, splines


def _laws_on_grid(grid: np.ndarray, theta: np.ndarray, y_tr: np.ndarray, y_atom: np.ndarray,
                  monotone: np.ndarray, splines: list[Any], sigma: float, aspect: float,
                  atom: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Density and CDF on ``grid`` at every output time, and the tracers' own CDF:
    ``(dens, cdf, tracer_y, tracer_cdf)``."""
    tracers, n_t = y_tr.shape
    total_c = min(1.0, aspect)                      # mass of the continuous part
    Fc = mp_cdf_theta(theta, sigma, aspect)         # continuous mass below x(theta)
    edges_th = math.pi * np.arange(tracers + 1) / tracers
    cell = np.diff(mp_cdf_theta(edges_th, sigma, aspect))   # continuous mass per tracer cell
    dens = np.full((grid.size, n_t), np.nan)
    cdf = np.empty((grid.size, n_t))
    tracer_cdf = np.empty((tracers, n_t))
    tracer_y = np.empty((tracers, n_t))
    for j in range(n_t):
        yy = y_tr[:, j]
        s = np.argsort(yy, kind="stable")
        ys = yy[s]
        if monotone[j]:
            inc = yy[-1] >= yy[0]
            Fs = (Fc if inc else total_c - Fc)[s]
            inside = (grid >= ys[0]) & (grid <= ys[-1])
            th = _invert(splines[j], theta[s], ys, grid[inside])
            dens[:, j] = 0.0
            dens[inside, j] = (mp_theta_weight(th, sigma, aspect)
                               / np.abs(splines[j](th, 1)))
            Fg = mp_cdf_theta(th, sigma, aspect)
        else:  # the CDF from the tracers' cells alone
            Fs = np.cumsum(cell[s]) - cell[s] / 2
        tracer_y[:, j], tracer_cdf[:, j] = ys, Fs
        F = np.interp(grid, ys, Fs, left=0.0, right=total_c)
        if monotone[j]:  # exact mass below theta(y) on the spline's inverse
            F[inside] = Fg if inc else total_c - Fg
        cdf[:, j] = F + np.where(grid >= y_atom[j], atom, 0.0)
    return dens, cdf, tracer_y, tracer_cdf


def _spectral_args(model: TiedModelLike, law: FreeInit, t_eval: ArrayLike, letter: int | None,
                   tracers: int, n_grid: int) -> tuple[np.ndarray, FreeInit, int, int, int, int]:
    """The validated arguments of :func:`spectral_density` and the Wishart letter ``wl``."""
    t_eval = check_t_eval(t_eval)
    law = check_law(model, law)
    rl = random_letters(law)
    if not rl:
        raise ValueError("the law has no Wishart letter: every S_k(t) is a multiple of the "
                         "identity (a point mass), with no density")
    wl = rl[0]
    tr = list(model.trainable)
    if letter is None:
        letter = wl if wl in tr else tr[0]
    letter = check_int(letter, "letter", 0, model.K - 1)
    tracers = check_int(tracers, "tracers", 101, 20001)
    n_grid = check_int(n_grid, "n_grid", 2, 100_000)
    return t_eval, law, wl, letter, tracers, n_grid


def _report_grid(grid: ArrayLike | None, y_lo: np.ndarray, y_hi: np.ndarray, n_grid: int
                 ) -> np.ndarray:
    """The points where the law is reported: ``grid``, or ``n_grid`` over the support."""
    n_t = y_lo.size
    if grid is None:
        lo = float(np.nanmin(np.minimum(y_lo, y_hi))) if n_t else 0.0
        hi = float(np.nanmax(np.maximum(y_lo, y_hi))) if n_t else 1.0
        grid = np.linspace(lo, hi, n_grid)
    gr = np.asarray(grid, dtype=float)
    if gr.ndim != 1 or gr.size < 1 or not np.all(np.isfinite(gr)):
        raise ValueError("grid must be a 1-d array of finite numbers")
    return gr


def spectral_density(model: AttentionModel, law: Any, t_eval: ArrayLike,
                     **options: Any) -> _SharedSpectralDensity:
    """The ``d -> infinity`` spectral law of ``S_k(t)`` from the initial law ``law``, through
    the model's theory (``model.theory.spectral_density``): tied models run
    :func:`tied_spectral_density` (below: the eigenvalue law, exact for a commuting law,
    from deterministic equivalents for a free one),
    untied ones :func:`attndyn.numeric.attention.untied.limit.spectral_density` (the
    eigenvalues of the symmetric part of ``S_k = U_k V_k^T``, or its singular values; exact
    for commuting laws, deterministic equivalents otherwise). ``options`` are those of the
    function that runs. Direct S has no limit solver (:class:`CapabilityError`).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> from attndyn.symbolic.initial import FreeInit, scalar, wishart
    >>> rho = attndyn.spectral_density(model, FreeInit([wishart(0.5), scalar(1)]), [0.0, 0.2],
    ...                                n_grid=20, tracers=101)
    >>> rho.status, rho.density.shape
    (0, (20, 2))
    """
    from attndyn.numeric.attention.base import AttentionModel as _Model
    if not isinstance(model, _Model):
        raise TypeError(f"model must be an attndyn model, got {type(model).__name__}")
    # the shared class: a tied model gives this module's subclass, an untied one the base
    res: _SharedSpectralDensity = model.theory.spectral_density(law, t_eval, **options)
    return res


def tied_spectral_density(model: TiedModelLike, law: FreeInit, t_eval: ArrayLike, *,
                          letter: int | None = None,
                          grid: Sequence[float] | np.ndarray | None = None,
                          n_grid: int = 400, tracers: int = 2001, rtol: float | None = None,
                          atol: float | None = None, panels: int = 48, per_panel: int = 20,
                          blowup: float = 1e100, sizes: Sequence[int] | None = None,
                          rotations: int = 2, levels: int = 200, seed: RngLike = 0,
                          extrapolation: str = "largest",
                          max_dim: int = 2048) -> SpectralDensity:
    """The ``d -> infinity`` eigenvalue law of ``S_letter(t)`` from the initial law ``law``.

    Parameters
    ----------
    model : TiedModel
    law : FreeInit
        Independent Wishart and scalar letters (paper 003, Assumption 6: the random letters
        asymptotically free). At most one non-scalar letter: the commuting case, exact (see
        the module docstring). Two or more: the free case, from deterministic equivalents.
    t_eval : array
        Output times (ODE time ``t = 4 eta n / d``).
    letter : int, optional
        Which ``S_k``; default the Wishart letter when it is trainable (commuting), else the
        first trainable letter.
    grid : array, optional
        Points where the density and CDF are reported; default ``n_grid`` points spanning
        the support at every output time.
    tracers : int
        Commuting case: zero-weight nodes that sample ``x -> lambda_k(t, x)`` (101-20001).
    rtol, atol : float, optional
        Integrator tolerances; default ``1e-12, 1e-14`` (commuting: per-node ODE) and
        ``1e-9, 1e-12`` (free: the matrix flows).
    sizes, rotations, seed, levels, extrapolation, max_dim :
        Free case: the equivalents of :func:`~attndyn.numeric.attention.tied.limit.limit_flow`
        (same ``sizes``, ``rotations`` and ``seed`` give the same matrices), integrated by the
        matrix flow; the spectrum's quantiles at ``levels`` probabilities (at most the
        smallest size); ``"largest"`` (default) or ``"richardson"`` in ``1/d``.

    Returns
    -------
    SpectralDensity
        ``density`` (``(n_grid, n_t)``), ``cdf(y, t_index)``, ``grid``; status 0, or the
        flow's failure status and message. Commuting: a map that is not monotone in ``x``
        at some time gives status 3 with the CDF only (density NaN at those times). Free:
        ``diagnostics`` adds ``quantiles``, ``quantile_error``, ``cdf_error`` (the stated
        error in CDF units per time), ``moments`` (``(4, n_t)``: ``int y^k drho``,
        ``k = 1..4``) and ``moment_error``.

    Commuting case: every eigenvalue ``x`` of ``S_letter(0)`` follows its own scalar flow
    ``x -> lambda(t, x)`` (the per-node form of paper 003's eq. 11), so
    ``F_t(lambda(t, x)) = F_0(x)`` for an increasing map, ``F_0`` the Marchenko-Pastur CDF
    of the Wishart letter; the density is ``rho_t(y) = rho_0(x) / |d lambda / dx|``. Free
    case: the quantiles of the spectrum of ``S_letter(t)`` along the matrix flows of the
    deterministic equivalents (module docstring), the finite-size form of the resolvent
    route the paper's conclusion points to.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> from attndyn.symbolic.initial import FreeInit, scalar, wishart
    >>> law = FreeInit([wishart(0.5), scalar(1)])   # Marchenko-Pastur start, teacher S_2 = I
    >>> rho = attndyn.spectral_density(model, law, [0.0, 0.2], n_grid=20, tracers=101)
    >>> rho.status, rho.y.shape
    (0, (20, 2))
    >>> free = FreeInit([wishart(0.5), wishart(0.7, 0.5)])   # a Wishart teacher: free case
    >>> rho = attndyn.spectral_density(model, free, [0.0, 0.2], sizes=(40, 60), levels=20)
    >>> rho.status, rho.params["method"]
    (0, 'equivalents')
    """
    if not is_commuting(check_law(model, law)):
        return _free_spectral(model, law, t_eval, letter, grid, n_grid, sizes, rotations,
                              levels, seed, extrapolation, rtol, atol, blowup, max_dim)
    rtol = 1e-12 if rtol is None else check_pos_float(rtol, "rtol")
    atol = 1e-14 if atol is None else check_pos_float(atol, "atol")
    t_eval, law, wl, letter, tracers, n_grid = _spectral_args(model, law, t_eval, letter,
                                                              tracers, n_grid)

    spec = law.specs[wl]
    sigma, aspect = float(spec.a), float(spec.b)
    lm, lp, atom = mp_edges(sigma, aspect)
    theta, ts, V, status, message = _tracer_values(model, law, wl, letter, t_eval, tracers,
                                                   lm, lp, rtol, atol, panels, per_panel,
                                                   blowup)
    n_t = ts.size
    y_lo, y_tr, y_hi, y_atom = V[0], V[1:-2], V[-2], V[-1]
    monotone, splines = _tracer_splines(theta, y_tr, sigma, aspect)
    grid = _report_grid(grid, y_lo, y_hi, n_grid)
    total_c = min(1.0, aspect)                      # mass of the continuous part
    dens, cdf, tracer_y, tracer_cdf = _laws_on_grid(grid, theta, y_tr, y_atom, monotone,
                                                    splines, sigma, aspect, atom)
    if status == 0 and not monotone.all():
        status = 3
        message = (f"x -> lambda_{letter + 1}(t, x) is not monotone at {int((~monotone).sum())} "
                   "output time(s): the CDF is exact at the tracers there, the density is NaN")
    elif status == 0:
        message = (f"success: exact commuting-case eigenvalue law of S_{letter + 1}(t) "
                   f"({tracers} tracer nodes, {panels}x{per_panel} quadrature nodes)")
    params = model.params_dict()
    params.update({"method": "commuting", "law": law_record(law), "letter": int(letter),
                   "continuous_mass": total_c,
                   "tracers": int(tracers), "rtol": rtol, "atol": atol, "panels": panels,
                   "per_panel": per_panel})
    diag = {"grid": grid, "cdf": cdf, "support": np.vstack([y_lo, y_hi]),
            "atom": np.vstack([y_atom, np.full(n_t, atom)]), "monotone": monotone.tolist(),
            "tracer_y": tracer_y, "tracer_cdf": tracer_cdf}
    return SpectralDensity(t=ts, y=dens, names=[f"rho({g:.6g})" for g in grid], words=None,
                           kind="spectral_density", params=params, status=int(status),
                           message=message, diagnostics=diag)



# ---------------------------------------------------------------------------
# free case: the spectra of the deterministic equivalents along the matrix flow

def _free_args(model: TiedModelLike, law: FreeInit, letter: int | None, n_grid: int,
               sizes: Sequence[int] | None, rotations: int, levels: int, extrapolation: str,
               rtol: float | None, atol: float | None, max_dim: int
               ) -> tuple[int, int, list[int], int, int, float, float]:
    """The validated free-case arguments (one-line errors naming each)."""
    tr = list(model.trainable)
    if letter is None:
        letter = tr[0] if tr else random_letters(law)[0]
    letter = check_int(letter, "letter", 0, model.K - 1)
    n_grid = check_int(n_grid, "n_grid", 2, 100_000)
    sizes = check_sizes(sizes)
    max_dim = check_int(max_dim, "max_dim", 2)
    if sizes[-1] > max_dim:  # the work bound first
        raise ValueError(f"sizes: d = {sizes[-1]} exceeds max_dim = {max_dim} (a d x d flow "
                         f"needs about {16 * sizes[-1] ** 2 * 14 / 2**30:.1f} GiB)")
    sizes, rotations, levels, rtol, atol = check_quantile_args(sizes, rotations, levels,
                                                               extrapolation, rtol, atol)
    return letter, n_grid, sizes, rotations, levels, rtol, atol


def _flow_spectra(model: TiedModelLike, mats: list[np.ndarray], t_eval: np.ndarray, letter: int,
                  rtol: float, atol: float, blowup: float) -> list[np.ndarray] | str:
    """The ascending eigenvalues of ``S_letter(t)`` at every output time along the tied
    matrix flow from ``mats`` (its fast form; the eigenvalues need no rotation back), or
    the failure message."""
    from attndyn.numeric.attention.odesolve import deadline, solve_flow, TimeLimitReached
    from attndyn.numeric.attention.tied.flow import tied_fast_system
    rhs, y0, full, _ = tied_fast_system(model, mats)
    if y0.size == 0 or t_eval[-1] == 0.0:
        return [np.linalg.eigvalsh(mats[letter])] * t_eval.size
    sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, blowup=blowup,
                     what="tied matrix flow")
    if sol.status == -4:  # the enclosing time_budget is spent
        raise TimeLimitReached(deadline()[1])
    if sol.status != 0 or sol.t.size != t_eval.size:
        return sol.message
    return [np.linalg.eigvalsh(full(sol.y[:, n], False)[letter]) for n in range(t_eval.size)]


def _equivalents_spectra(model: TiedModelLike, law: FreeInit, t_eval: np.ndarray, letter: int,
                         sizes: Sequence[int], rotations: int, seed: RngLike, p: np.ndarray,
                         rtol: float, atol: float, blowup: float
                         ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, str]:
    """Per size: the mean over rotations of the quantiles at ``p`` of the spectrum of
    ``S_letter(t)`` along the equivalents' flows, their standard error, and the mean traces
    ``Tr S^k / d`` (``k = 1..4``): ``((means, ses, traces), message)``. The matrices are
    those of :func:`~attndyn.numeric.attention.tied.limit.limit_flow`'s equivalents with
    the same ``sizes``, ``rotations`` and ``seed``."""
    kids = resolve_seed(seed).spawn(len(sizes))
    means: list[np.ndarray] = []
    ses: list[np.ndarray] = []
    traces: list[np.ndarray] = []
    for d, kid in zip(sizes, kids):
        run_list: list[np.ndarray] = []
        tr: list[list[list[float]]] = []
        for r_ss in kid.spawn(rotations):
            mats = deterministic_equivalents(model, law, d, np.random.default_rng(r_ss))
            spectra = _flow_spectra(model, mats, t_eval, letter, rtol, atol, blowup)
            if isinstance(spectra, str):
                return None, f"matrix flow at d = {d} failed: {spectra}"
            run_list.append(np.array([spectrum_quantiles(ev, p) for ev in spectra]).T)
            tr.append([[np.mean(ev ** k) for ev in spectra] for k in range(1, 5)])
        runs = np.array(run_list)                # (rotations, levels + 2, n_t)
        means.append(runs.mean(axis=0))
        ses.append(runs.std(axis=0, ddof=1) / math.sqrt(rotations) if rotations > 1
                   else np.zeros_like(runs[0]))
        traces.append(np.mean(tr, axis=0))       # (4, n_t)
    return (np.array(means), np.array(ses), np.array(traces)), ""


def quantile_moments(p: np.ndarray, Q: np.ndarray, k_max: int = 4) -> np.ndarray:
    """``int y^k dF`` (``k = 1..k_max``) of the law whose CDF is linear between the points
    ``(Q_i, p_i)``: on each piece ``y`` is uniform, with ``E y^k = sum_j Q_i^j
    Q_{i+1}^(k-j) / (k + 1)``. ``Q``: ``(n_levels, n_t)``; returns ``(k_max, n_t)``.

    Examples
    --------
    >>> import numpy as np
    >>> quantile_moments(np.array([0.0, 1.0]), np.array([[0.0], [1.0]]), 3).ravel()  # U(0, 1)
    array([0.5       , 0.33333333, 0.25      ])
    """
    dp = np.diff(p)[:, None]
    a, b = Q[:-1], Q[1:]
    return np.array([np.sum(dp * sum(a ** j * b ** (k - j) for j in range(k + 1)) / (k + 1),
                            axis=0) for k in range(1, k_max + 1)])


def _moment_errors(p: np.ndarray, Q: np.ndarray, err: np.ndarray, Q_top: np.ndarray,
                   traces_top: np.ndarray) -> np.ndarray:
    """The stated error of :func:`quantile_moments`: the quantile error carried to first
    order (``sum dp k |Q|^(k-1) err``) plus the discretisation into quantiles, measured at
    the largest size (its quantile law's moments against its own ``Tr S^k / d``)."""
    dp = np.diff(p)[:, None]
    qa = np.maximum(np.abs(Q[:-1]), np.abs(Q[1:]))
    ea = np.maximum(err[:-1], err[1:])
    carried = np.array([np.sum(dp * k * qa ** (k - 1) * ea, axis=0) for k in range(1, 5)])
    out: np.ndarray = carried + np.abs(quantile_moments(p, Q_top) - traces_top)
    return out


def _free_spectral(model: TiedModelLike, law: FreeInit, t_eval: ArrayLike, letter: int | None,
                   grid: ArrayLike | None, n_grid: int, sizes: Sequence[int] | None,
                   rotations: int, levels: int, seed: RngLike, extrapolation: str,
                   rtol: float | None, atol: float | None, blowup: float,
                   max_dim: int) -> SpectralDensity:
    """spectral_density for a free (non-commuting) law: quantiles of the equivalents."""
    t_eval = check_t_eval(t_eval)
    letter, n_grid, sizes, rotations, levels, rtol, atol = _free_args(
        model, law, letter, n_grid, sizes, rotations, levels, extrapolation, rtol, atol,
        max_dim)
    p = quantile_levels(levels)
    out, msg = _equivalents_spectra(model, law, t_eval, letter, sizes, rotations, seed, p,
                                    rtol, atol, blowup)
    params = model.params_dict()
    params.update({"method": "equivalents", "law": law_record(law), "letter": int(letter),
                   "continuous_mass": 1.0, "sizes": sizes, "rotations": rotations,
                   "levels": levels, "extrapolation": extrapolation, "rtol": rtol,
                   "atol": atol})
    diag: dict[str, Any] = {}
    if out is None:
        return spectral_result(t_eval[:0], None, None, grid, n_grid, -3,
                                f"spectral density failed: {msg}", params, diag,
                                cls=SpectralDensity)
    means, ses, traces = out
    Qm, err = equivalent_quantiles(means, ses, sizes, rotations, extrapolation)
    diag.update({"levels": p, "quantiles": Qm, "quantile_error": err,
                 "quantiles_per_size": means, "quantile_se_per_size": ses,
                 "traces_per_size": traces,
                 "moments": quantile_moments(p, Qm),
                 "moment_error": _moment_errors(p, Qm, err, means[-1], traces[-1])})
    how = (f"Richardson over sizes {sizes}" if extrapolation == "richardson" else
           f"the size {sizes[-1]} (error from the change since {sizes[-2]})")
    message = (f"success: d -> infinity eigenvalue law of S_{letter + 1}(t) (free law) from "
               f"{how} ({rotations} rotation(s) each), largest quantile error "
               f"{float(err[1:-1].max()):.2g}")
    res = spectral_result(t_eval, None, (p, Qm), grid, n_grid, 0, message, params, diag,
                           seed_rec(seed), cls=SpectralDensity)
    res.diagnostics["cdf_error"] = quantile_cdf_error(res, Qm, err)
    res.diagnostics["mass"], res.diagnostics["mass_error"] = _density_mass(res, levels)
    return res


def _density_mass(res: _SharedSpectralDensity, levels: int, k: int = 5
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``int rho dy`` on the grid (trapezoid) per time, and the error it may carry: the
    density is ``dp/dQ`` over ``k`` levels, held constant on the half-window at each edge,
    which misplaces at most the half-window's mass ``(k - 1/2)/(2 levels)`` per edge, plus
    the trapezoid's resolution on the grid, at most ``max(h) max(rho)``."""
    g, rho = res.grid, res.density
    if g.size < 2 or rho.shape[1] == 0:
        return np.zeros(rho.shape[1]), np.full(rho.shape[1], np.inf)
    h = np.diff(g)
    mass = np.sum(h[:, None] * (rho[1:] + rho[:-1]) / 2, axis=0)
    return mass, (k - 0.5) / levels + h.max() * rho.max(axis=0)
