r"""Empirical scaling of the excess risk on the synthetic teacher task, beside
the bounds of Theorems 7.1 / 7.2 (evaluated by :mod:`attndyn.numeric.scaling`).

These sweeps run at a fixed ``eps`` and ``n``, outside the theorems' regime; the
experiment in that regime (``eps = xi/N``, ``M ~ N^3``) is
:mod:`attndyn.numeric.transformer.regime_scaling`.

:func:`scaling_sweep` trains students (gradient flow by default) and measures
the excess risk ``E||F(X) - F*(X)||_F^2`` on held-out teacher inputs against

- ``"N"``: the data size ``n`` (bound: the data law ``c_stat xi^2 / N`` of
  Theorem 7.2, ``c_stat`` fitted in log space; and Theorem 6.2 as printed);
- ``"M"``: the model size ``M = N (m d + d^2)`` through the width (bound: the
  model law ``scale xi^2 M^-zeta``, ``zeta`` stated by the caller, ``scale``
  fitted);
- ``"T"``: the training time (bound: Theorem 5.5's ``ER(0) exp(-alpha eps^2 T)``
  with ``alpha = lambda/omega`` measured at initialisation, plus the measured
  floor, the final excess risk). The power-law fit of ``ER - floor`` recorded in
  ``fits["excess_risk"]`` depends on the horizon and the window (the floor is the
  last value): it is a description of one run, not an exponent of the model;
- ``"C"``: the compute ``C = M T |B|`` (Definition 5.4) over a grid of widths
  and times, reduced to its lower envelope (bound: the two-stage bound of
  Theorem 7.1 with ``alpha = lambda/omega``, ``prefactor = 1``,
  ``loss0 = ER(0)`` and ``c_stat`` fitted to the data floor).

Every fitted or stated constant is recorded in the result's ``fits``. The
returned :class:`~attndyn.numeric.transformer.results.Sweep` has rows
``excess_risk``, ``excess_risk_std``, ``loss`` and ``bound_*``.
"""

from __future__ import annotations

import math

import numpy as np

from .kernel import assumption_lambda
from .lemmas import seed_list, build, check_setup
from .results import Sweep, fit_power_law
from .training import train

__all__ = ["scaling_sweep", "plot_scaling"]


def _fit_const(y, shape):
    """``c`` minimising ``sum (log y - log(c shape))^2``."""
    ok = (y > 0) & (shape > 0) & np.isfinite(y)
    return float(np.exp(np.mean(np.log(y[ok]) - np.log(shape[ok])))) if ok.any() else float("nan")


def scaling_sweep(setup, variable, values=None, *, T, seeds=2, n_eval=20, zeta=None,
                  method="flow", **train_kw):
    """Excess risk against ``variable`` in ``"N"``, ``"M"``, ``"T"``, ``"C"``.

    ``values``: data sizes (N), widths (M and C), ignored for T (the run's
    output times are used). ``zeta`` (in (0, 1/3)) is required for ``"M"``.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = scaling_sweep(setup, "N", (1, 2), T=0.2, seeds=2, n_eval=2)
        >>> sw.x_name, sw.x.tolist()
        ('N', [1.0, 2.0])
    """
    if variable not in ("N", "M", "T", "C"):
        raise ValueError(f"variable must be 'N', 'M', 'T' or 'C', got {variable!r}")
    from attndyn.numeric import scaling as sc  # numba-compiled bounds: load on first use

    s = check_setup(setup)
    seeds = seed_list(seeds)
    if variable == "M" and zeta is None:
        raise ValueError("zeta (model-law exponent in (0, 1/3)) is required for variable='M'")
    fits = {}
    status, msgs = 0, []

    def run(st, sd):
        nonlocal status
        student, data = build(st, sd)
        lam = assumption_lambda(student, data.X)
        r = train(student, data, T=T, method=method, n_eval=n_eval, **train_kw)
        if r.status != 0:
            status = r.status
            msgs.append(f"{variable} seed {sd}: {r.message}")
        return r, lam, data

    if variable in ("N", "M"):
        x, names, y = _size_sweep(run, s, variable, values, seeds, zeta, fits, sc)
        x_name = variable
    elif variable == "T":
        x, names, y = _time_sweep(run, s, seeds, fits, sc)
        x_name = "T"
    else:  # compute
        x, names, y = _compute_sweep(run, s, values, seeds, fits, sc)
        x_name = "C"
    return Sweep(x_name, np.asarray(x, dtype=np.float64), names, y, kind=f"scaling_{variable}",
                 params=dict(s, T=float(T), method=method), seeds=seeds, fits=fits,
                 status=status, message="; ".join(msgs) or "ok")


def _size_sweep(run, s, variable, values, seeds, zeta, fits, sc):
    """Data sizes (``"N"``) or widths (``"M"``): the final excess risk per value against the
    data law (``c_stat`` fitted) and Theorem 6.2's printed bound, or the model law (scale
    fitted at ``zeta``). Returns ``(x, names, rows)``; fills ``fits``."""
    xi, Nl, L, d = s["xi"], s["N"], s["L"], s["d"]
    vals = [int(v) for v in values]
    er, ers, ls, lams = [], [], [], []
    for v in vals:
        st = dict(s, n=v) if variable == "N" else dict(s, m=v)
        e, l_, la = [], [], []
        for sd in seeds:
            r, lam, _ = run(st, sd)
            e.append(r.observable("excess_risk")[-1])
            l_.append(r.observable("loss")[-1])
            la.append(lam)
        er.append(np.mean(e))
        ers.append(np.std(e))
        ls.append(np.mean(l_))
        lams.append(np.mean(la))
    er = np.asarray(er)
    if variable == "N":
        x = np.asarray(vals, dtype=np.float64)
        c = _fit_const(er, xi * xi / x)
        fits["c_stat_fitted"] = c
        bounds = {"bound_data_law": sc.data_law(x, xi, c_stat=c),
                  "bound_thm62_printed": sc.generalisation_bound(
                      Nl * (s["m"] * d + d * d), x, xi, L, d)}
    else:
        x = np.asarray([Nl * (m * d + d * d) for m in vals], dtype=np.float64)
        scale = _fit_const(er, xi * xi * x ** (-float(zeta)))
        fits.update(zeta_stated=float(zeta), model_law_scale_fitted=scale)
        bounds = {"bound_model_law": sc.model_law(x, xi, float(zeta), scale=scale)}
    fits["excess_risk"] = fit_power_law(x, er)
    fits["lambda_mean"] = float(np.mean(lams))
    names = ["excess_risk", "excess_risk_std", "loss"] + list(bounds)
    y = np.vstack([er, ers, ls] + [np.asarray(b, dtype=np.float64) for b in bounds.values()])
    return x, names, y


def _time_sweep(run, s, seeds, fits, sc):
    """The excess risk along the run's output times against Theorem 5.5's bound plus the
    measured floor. Returns ``(x, names, rows)``; fills ``fits``."""
    E, Ls, lams = [], [], []
    for sd in seeds:
        r, lam, _ = run(s, sd)
        E.append(r.observable("excess_risk"))
        Ls.append(r.observable("loss"))
        lams.append(lam)
        x = r.t
    k = min(len(e) for e in E)
    E = np.asarray([e[:k] for e in E])
    Ls = np.asarray([e[:k] for e in Ls])
    x = x[:k]
    er = E.mean(0)
    alpha = float(np.mean(lams)) / s["omega"]
    floor = float(er[-1])
    b = sc.training_loss_bound(x, s["eps"], alpha=max(alpha, 1e-300), loss0=er[0]) + floor
    fits.update(alpha_measured=alpha, floor_measured=floor,
                excess_risk=fit_power_law(x[1:], er[1:] - floor))
    names = ["excess_risk", "excess_risk_std", "loss", "bound_thm55_plus_floor"]
    y = np.vstack([er, E.std(0), Ls.mean(0), np.asarray(b)])
    return x, names, y


def _compute_sweep(run, s, values, seeds, fits, sc):
    """Compute ``C = M t |B|``: the lower envelope of the excess risk over widths and times
    against the two-stage bound. Returns ``(x, names, rows)``; fills ``fits``."""
    xi, Nl, L, d = s["xi"], s["N"], s["L"], s["d"]
    vals = [int(v) for v in values]
    pts, lams, er0 = [], [], []
    for m in vals:
        M = Nl * (m * d + d * d)
        for sd in seeds:
            r, lam, data = run(dict(s, m=m), sd)
            B = data.n  # full-batch flow: |B| = n
            for t, e in zip(r.t[1:], r.observable("excess_risk")[1:]):
                pts.append((M * t * B, e))
            lams.append(lam)
            er0.append(r.observable("excess_risk")[0])
    pts = np.asarray(pts)
    grid = np.geomspace(pts[:, 0].min(), pts[:, 0].max(), 12)
    env = np.array([pts[pts[:, 0] <= g, 1].min() for g in grid])
    alpha = float(np.mean(lams)) / s["omega"]
    floor = float(env[-1])
    n = s["n"]
    c = floor * n / (xi * xi) if xi > 0 else float("nan")
    fits.update(alpha_measured=alpha, c_stat_fitted=c, prefactor_stated=1.0,
                loss0_measured=float(np.mean(er0)), excess_risk=fit_power_law(grid, env))
    names = ["excess_risk", "excess_risk_std", "loss"]
    y = [env, np.zeros_like(env), np.full_like(env, np.nan)]
    if xi > 0:
        names.append("bound_two_stage")
        y.append(np.asarray(sc.two_stage_bound(grid, n, xi, L, d, alpha=max(alpha, 1e-300),
                                               prefactor=1.0, loss0=float(np.mean(er0)),
                                               c_stat=c), dtype=np.float64))
        fits["threshold_compute"] = float(sc.threshold_compute(n, xi, L, d))
    return grid, names, np.vstack(y)


def plot_scaling(sweep, ax=None):
    """Log-log plot of the measured excess risk (with its spread) and every
    ``bound_*`` row of a :func:`scaling_sweep` result; returns the axes.

        >>> setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=0.1)
        >>> sw = scaling_sweep(setup, "N", (1, 2), T=0.2, seeds=2, n_eval=2)
        >>> ax = plot_scaling(sw)
        >>> ax.get_xscale(), ax.get_yscale()
        ('log', 'log')
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots()
    x = sweep.x
    er = sweep["excess_risk"]
    sd = sweep["excess_risk_std"]
    ok = x > 0
    ax.errorbar(x[ok], er[ok], yerr=sd[ok], fmt="o-", label="measured excess risk")
    for name in sweep.names:
        if name.startswith("bound_"):
            ax.plot(x[ok], sweep[name][ok], "--", label=name[6:])
    f = sweep.fits.get("excess_risk", {})
    if f:
        ax.set_title(f"{sweep.kind}: fitted exponent {f.get('exponent', float('nan')):.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(sweep.x_name)
    ax.set_ylabel("excess risk")
    ax.legend()
    return ax
