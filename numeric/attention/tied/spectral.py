"""Spectral density of ``S_k(t)`` in the ``d -> infinity`` limit (tied, commuting laws).

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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np


if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from attndyn.numeric.attention.base import AttentionModel
    from attndyn.numeric.core.types import ArrayLike, PathLike
    from attndyn.symbolic.initial import FreeInit
from attndyn.numeric.core.validate import check_t_eval
from attndyn.numeric.attention.limitcore import SpectralDensity as _SharedSpectralDensity
from attndyn.numeric.attention.limitcore import (_check_int, _mp_cdf_theta, _mp_theta_weight,
                                                 ks_distance, mp_edges)
from attndyn.numeric.attention.tied.limit import (_check_law, _law_record, _node_values,
                                                  _random_letters, is_commuting,
                                                  per_node_values)

__all__ = ["spectral_density", "tied_spectral_density", "SpectralDensity", "ks_distance",
           "per_node_values"]


class SpectralDensity(_SharedSpectralDensity):
    """The eigenvalue law of ``S_k(t)`` at the output times (``kind="spectral_density"``).

    ``y`` has shape ``(n_grid, n_t)``: the density of the continuous part at the points
    ``grid`` (row ``i`` is named ``rho(grid[i])``). ``diagnostics`` holds ``grid``,
    ``cdf`` (``(n_grid, n_t)``, atoms included), ``support`` (``(2, n_t)``: the image of
    ``[lambda_-, lambda_+]``), ``atom`` (``(2, n_t)``: location and mass of the atom,
    mass 0 without one) and, per time, whether the map was monotone.

    ``rho_t(y) = rho_0(x) / |d lambda(t, x) / dx|`` at ``y = lambda(t, x)``, the image of
    the Marchenko-Pastur density ``rho_0`` under the per-eigenvalue flow of the commuting
    limit (paper 003, eq. 11 per node).

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


def _invert(spline, th_sorted, y_sorted, targets, iters: int = 8):
    """``theta`` with ``spline(theta) = target`` for a monotone spline: linear start,
    then safeguarded Newton steps (kept inside the tracer range)."""
    th = np.interp(targets, y_sorted, th_sorted)
    lo, hi = th_sorted.min(), th_sorted.max()
    for _ in range(iters):
        d1 = spline(th, 1)
        step = np.where(d1 != 0, (spline(th) - targets) / np.where(d1 != 0, d1, 1.0), 0.0)
        th = np.clip(th - step, lo, hi)
    return th


def _tracer_values(model, law, wl, letter, t_eval, tracers, lm, lp, rtol, atol, panels,
                   per_panel, blowup):
    """The per-node map ``x -> lambda_letter(t, x)`` on zero-weight tracers: ``(theta, ts, V,
    status, message)``, ``V`` rows the lower edge, the tracers, the upper edge and ``x = 0``."""
    lam_q, w_q = _node_values(law, panels, per_panel)
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


def _tracer_splines(theta, y_tr, sigma, aspect):
    """Per output time: whether the tracer map is monotone, and its cubic spline in theta."""
    n_t = y_tr.shape[1]
    wth = _mp_theta_weight(theta, sigma, aspect)
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


def _laws_on_grid(grid, theta, y_tr, y_atom, monotone, splines, sigma, aspect, atom):
    """Density and CDF on ``grid`` at every output time, and the tracers' own CDF:
    ``(dens, cdf, tracer_y, tracer_cdf)``."""
    tracers, n_t = y_tr.shape
    total_c = min(1.0, aspect)                      # mass of the continuous part
    Fc = _mp_cdf_theta(theta, sigma, aspect)         # continuous mass below x(theta)
    edges_th = math.pi * np.arange(tracers + 1) / tracers
    cell = np.diff(_mp_cdf_theta(edges_th, sigma, aspect))   # continuous mass per tracer cell
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
            dens[inside, j] = (_mp_theta_weight(th, sigma, aspect)
                               / np.abs(splines[j](th, 1)))
            Fg = _mp_cdf_theta(th, sigma, aspect)
        else:  # the CDF from the tracers' cells alone
            Fs = np.cumsum(cell[s]) - cell[s] / 2
        tracer_y[:, j], tracer_cdf[:, j] = ys, Fs
        F = np.interp(grid, ys, Fs, left=0.0, right=total_c)
        if monotone[j]:  # exact mass below theta(y) on the spline's inverse
            F[inside] = Fg if inc else total_c - Fg
        cdf[:, j] = F + np.where(grid >= y_atom[j], atom, 0.0)
    return dens, cdf, tracer_y, tracer_cdf


def _spectral_args(model, law, t_eval, letter, tracers, n_grid):
    """The validated arguments of :func:`spectral_density` and the Wishart letter ``wl``."""
    t_eval = check_t_eval(t_eval)
    law = _check_law(model, law)
    if not is_commuting(law):
        raise ValueError("spectral_density is exact for commuting laws (at most one non-scalar "
                         "letter); for this law use the eigenvalues of matrix_flow at finite d")
    rl = _random_letters(law)
    if not rl:
        raise ValueError("the law has no Wishart letter: every S_k(t) is a multiple of the "
                         "identity (a point mass), with no density")
    wl = rl[0]
    tr = list(model.trainable)
    if letter is None:
        letter = wl if wl in tr else tr[0]
    letter = _check_int(letter, "letter", 0, model.K - 1)
    tracers = _check_int(tracers, "tracers", 101, 20001)
    n_grid = _check_int(n_grid, "n_grid", 2, 100_000)
    return t_eval, law, wl, letter, tracers, n_grid


def _report_grid(grid, y_lo, y_hi, n_grid):
    """The points where the law is reported: ``grid``, or ``n_grid`` over the support."""
    n_t = y_lo.size
    if grid is None:
        lo = float(np.nanmin(np.minimum(y_lo, y_hi))) if n_t else 0.0
        hi = float(np.nanmax(np.maximum(y_lo, y_hi))) if n_t else 1.0
        grid = np.linspace(lo, hi, n_grid)
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 1 or grid.size < 1 or not np.all(np.isfinite(grid)):
        raise ValueError("grid must be a 1-d array of finite numbers")
    return grid


def spectral_density(model: AttentionModel, law: Any, t_eval: ArrayLike,
                     **options: Any) -> SpectralDensity:
    """The ``d -> infinity`` spectral law of ``S_k(t)`` from the initial law ``law``, through
    the model's theory (``model.theory.spectral_density``): tied models run
    :func:`tied_spectral_density` (below: the eigenvalue law, exact for a commuting law),
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
    return model.theory.spectral_density(law, t_eval, **options)


def tied_spectral_density(model: AttentionModel, law: FreeInit, t_eval: ArrayLike, *,
                          letter: int | None = None,
                          grid: Sequence[float] | np.ndarray | None = None,
                          n_grid: int = 400, tracers: int = 2001, rtol: float = 1e-12,
                          atol: float = 1e-14, panels: int = 48, per_panel: int = 20,
                          blowup: float = 1e100) -> SpectralDensity:
    """The ``d -> infinity`` eigenvalue law of ``S_letter(t)`` for a commuting initial law.

    Parameters
    ----------
    model : TiedModel
    law : FreeInit
        At most one non-scalar (Wishart) letter: the commuting case, where the limit is
        exact (see the module docstring). Other laws are refused: there the limit solver
        has no per-eigenvalue map (use the eigenvalues of ``matrix_flow`` at finite ``d``).
    t_eval : array
        Output times (ODE time ``t = 4 eta n / d``).
    letter : int, optional
        Which ``S_k``; default the Wishart letter when it is trainable, else the first
        trainable letter.
    grid : array, optional
        Points where the density and CDF are reported; default ``n_grid`` points spanning
        the support at every output time.
    tracers : int
        Zero-weight nodes that sample ``x -> lambda_k(t, x)`` (odd, 101-20001).

    Returns
    -------
    SpectralDensity
        ``density`` (``(n_grid, n_t)``), ``cdf(y, t_index)``, ``grid``; status 0, or the
        limit flow's failure status and message; a map that is not monotone in ``x`` at
        some time gives status 3 with the CDF only (density NaN at those times).

    In the commuting case every eigenvalue ``x`` of ``S_letter(0)`` follows its own scalar
    flow ``x -> lambda(t, x)`` (the per-node form of paper 003's eq. 11), so
    ``F_t(lambda(t, x)) = F_0(x)`` for an increasing map, ``F_0`` the Marchenko-Pastur CDF of
    the Wishart letter; the density is ``rho_t(y) = rho_0(x) / |d lambda / dx|``.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> from attndyn.symbolic.initial import FreeInit, scalar, wishart
    >>> law = FreeInit([wishart(0.5), scalar(1)])   # Marchenko-Pastur start, teacher S_2 = I
    >>> rho = attndyn.spectral_density(model, law, [0.0, 0.2], n_grid=20, tracers=101)
    >>> rho.status, rho.y.shape
    (0, (20, 2))
    """
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
    params.update({"method": "commuting", "law": _law_record(law), "letter": int(letter),
                   "continuous_mass": total_c,
                   "tracers": int(tracers), "rtol": rtol, "atol": atol, "panels": panels,
                   "per_panel": per_panel})
    diag = {"grid": grid, "cdf": cdf, "support": np.vstack([y_lo, y_hi]),
            "atom": np.vstack([y_atom, np.full(n_t, atom)]), "monotone": monotone.tolist(),
            "tracer_y": tracer_y, "tracer_cdf": tracer_cdf}
    return SpectralDensity(t=ts, y=dens, names=[f"rho({g:.6g})" for g in grid], words=None,
                           kind="spectral_density", params=params, status=int(status),
                           message=message, diagnostics=diag)

