"""Paper 000, section 7: the scaling-law figure with measured claims
(``attndyn reproduce scaling``).

:func:`scaling_figure` evaluates the bounds of Theorems 7.1 and 7.2 on grids
(two-stage bound against compute with the stage boundary ``C*(N)`` of eq. (3),
the compute-optimal frontier ``N*(C)``, the time, data and model laws and the
noise drags of section 7.2), checks the claims below on the numbers and returns
a :class:`~attndyn.numeric.core.claims.FigureRun`. The paper hides its
constants; the values used here are parameters, printed on the figure, and
``c_stat`` defaults to :func:`continuity_constant` (the only value for which the
two stages meet at ``C*(N)`` when ``alpha = 1``).

Imports nothing from ``attndyn.numeric.attention`` or ``numeric.transformer``.
"""

from __future__ import annotations

import time

import numpy as np

from attndyn.numeric.core.claims import Claim, FigureRun
from attndyn.numeric.core.results import Trajectory
from attndyn.numeric.scaling import bounds as sc

__all__ = ["SCALING_SETTINGS", "scaling_figure"]

SCALING_SETTINGS = {
    "mini": dict(L=2, d=8, N=100.0, xis=(0.5, 1.0, 2.0), alpha=1.0, prefactor=1.0, loss0=1.0,
                 n_grid=60, ratio_L=128, ratio_d=64),
    "quick": dict(L=2, d=8, N=100.0, xis=(0.5, 1.0, 2.0), alpha=1.0, prefactor=1.0, loss0=1.0,
                  n_grid=400, ratio_L=128, ratio_d=64),
    "full": dict(L=2, d=8, N=100.0, xis=(0.5, 1.0, 2.0), alpha=1.0, prefactor=1.0, loss0=1.0,
                 n_grid=2000, ratio_L=128, ratio_d=64),
}

_RATIO_C = (1e6, 1e12, 1e24, 1e100, 1e300)


def _traj(x, rows, names, kind, params):
    return Trajectory(t=np.asarray(x, float), y=np.vstack([np.asarray(r, float) for r in rows]),
                      names=list(names), kind=kind, params=params,
                      message="evaluated bound (x axis stored as t)")


def scaling_figure(mode: str = "quick", seeds=None, **overrides) -> FigureRun:
    """Evaluate and check the section-7 bounds of paper 000.

    Curves (each a Trajectory whose ``t`` is the x axis): ``two_stage/xi<x>``
    (bound at fixed N, stage-II frontier, exact and paper ``N*(C)``),
    ``frontier_ratio`` (``N_paper/N*`` at ``L = ratio_L``, ``d = ratio_d``,
    ``xi = 1``), ``time_law``, ``data_law``, ``model_law``, ``drags``.
    ``seeds`` is accepted for a uniform interface and ignored (no randomness).

        >>> run = scaling_figure("quick")
        >>> run.all_held
        True
    """
    if mode not in SCALING_SETTINGS:
        raise ValueError(f"mode must be one of {sorted(SCALING_SETTINGS)}, got {mode!r}")
    s = dict(SCALING_SETTINGS[mode])
    for k, v in overrides.items():
        if k not in s:
            raise ValueError(f"scaling: unknown setting {k!r}; allowed {sorted(s)}")
        s[k] = v
    n = s["n_grid"]  # every curve has n_grid points; the rate claims need two
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n_grid must be an int in [2, 10^6], got {n!r}")
    if not 2 <= n <= 10 ** 6:
        raise ValueError(f"n_grid must be an int in [2, 10^6], got {n}")
    if len(np.atleast_1d(s["xis"])) == 0:  # else no curve, and every claim held vacuously
        raise ValueError("xis must list at least one noise level")
    t0 = time.perf_counter()
    L, d = s["L"], s["d"]
    consts = dict(alpha=s["alpha"], prefactor=s["prefactor"], loss0=s["loss0"])
    c_stat = float(sc.continuity_constant(L, d, prefactor=s["prefactor"], loss0=s["loss0"]))
    s.update(mode=mode, c_stat=c_stat, c_stat_rule="continuity_constant(L, d, prefactor, loss0)")
    run = FigureRun("scaling", "Paper 000 section 7: two-stage bound, frontier, laws, drags", s)
    _two_stage_curves(run, s, c_stat, consts)
    _frontier_claim(run, s)
    _rate_claim(run, s, c_stat)
    _continuity_claim(run, s, c_stat, consts)
    Nd = _law_curves(run, s, c_stat)
    _drag_claim(run, s, c_stat, Nd)
    run.plotter = _plot_scaling
    run.wall_s = time.perf_counter() - t0
    return run


def _two_stage_curves(run, s, c_stat, consts):
    """The two-stage bound at fixed N, the stage-II frontier and both ``N*(C)`` per xi."""
    L, d, N = s["L"], s["d"], float(s["N"])
    C = np.logspace(0, 60, s["n_grid"])
    for xi in s["xis"]:
        b = sc.two_stage_bound(C, N, xi, L, d, c_stat=c_stat, **consts)
        f = sc.stage_two_bound(C, xi, L, d, c_stat=c_stat)
        ne = sc.critical_data_size(C, xi, L, d)
        npap = sc.paper_critical_data_size(C, xi)
        run.curves[f"two_stage/xi{xi:g}"] = _traj(
            C, [b, f, ne, npap], ["two_stage_bound", "stage_two_frontier", "N_star_exact",
                                  "N_star_paper"], "bound", dict(s, xi=xi))


def _frontier_claim(run, s):
    """Claim 1: the paper's ``N*(C)`` against the exact inverse of eq. (3)."""
    Lr, dr = s["ratio_L"], s["ratio_d"]
    Cr = np.logspace(2, 300, s["n_grid"])
    ratio = sc.paper_form_ratio(Cr, 1.0, Lr, dr)
    run.curves["frontier_ratio"] = _traj(Cr, [ratio], ["N_paper_over_N_exact"], "bound",
                                         dict(L=Lr, d=dr, xi=1.0))
    pts = np.array(_RATIO_C)
    rp = np.asarray(sc.paper_form_ratio(pts, 1.0, Lr, dr), float)
    ne_pts = np.asarray(sc.critical_data_size(pts, 1.0, Lr, dr), float)
    np_pts = np.asarray(sc.paper_critical_data_size(pts, 1.0), float)
    back_exact = np.asarray(sc.threshold_compute(ne_pts, 1.0, Lr, dr), float) / pts
    back_paper = np.asarray(sc.threshold_compute(np_pts, 1.0, Lr, dr), float) / pts
    limit = 6.0 ** (-1.0 / 6.0)
    run.extra.update(ratio_points=dict(zip(map(str, _RATIO_C), rp.tolist())),
                     eq3_residual_exact=float(np.max(np.abs(back_exact - 1))),
                     eq3_C_of_paper_N_over_C=back_paper.tolist())
    run.claims.append(Claim(
        "the paper's N*(C) differs from the exact inverse of eq. (3) by the factor shown",
        bool(np.all(np.diff(rp) < 0) and abs(rp[-1] - limit) < 0.02 and rp[0] < 1.0
             and np.max(np.abs(back_exact - 1)) < 1e-9),
        "N_paper/N* = " + ", ".join(f"{r:.3f} (C={c:.0e})" for c, r in zip(_RATIO_C, rp))
        + f"; limit 6^(-1/6) = {limit:.3f}; exact N* solves eq. (3) to "
          f"{np.max(np.abs(back_exact - 1)):.1e}; C*(N_paper)/C = "
        + ", ".join(f"{v:.2f}" for v in back_paper),
        f"xi = 1, L = {Lr}, d = {dr}"))


def _rate_claim(run, s, c_stat):
    """Claim 2: compute-optimal stage II decays like ``C^(-1/6)`` up to the Lambert-W log."""
    L, d = s["L"], s["d"]
    xi = 1.0
    Cs = np.array([1e20, 1e40, 1e60])
    slope = []
    for c in Cs:
        b1, b2 = sc.stage_two_bound(np.array([c, c * 1.01]), xi, L, d, c_stat=c_stat)
        slope.append(float(np.log(b2 / b1) / np.log(1.01)))
    lead = [-1 / 6 + 1 / (6 * np.log(c)) for c in Cs]  # (log C)^(1/6) correction
    run.claims.append(Claim(
        "the compute-optimal bound decays like C^(-1/6) (log C)^(1/6)",
        all(abs(a - b) < 0.01 for a, b in zip(slope, lead)),
        "d log B / d log C = " + ", ".join(f"{v:.4f} (C={c:.0e})" for c, v in zip(Cs, slope))
        + "; -1/6 + 1/(6 log C) = " + ", ".join(f"{v:.4f}" for v in lead),
        f"xi = 1, L = {L}, d = {d}"))


def _continuity_claim(run, s, c_stat, consts):
    """Claim 3: continuity at the stage boundary (``alpha = 1``, ``c_stat`` the continuity
    constant); with ``alpha = 1/2`` the bound jumps."""
    L, d = s["L"], s["d"]
    Ns = np.array([1e2, 1e4, 1e6])
    jump = np.asarray(sc.threshold_jump(Ns, 1.0, L, d, c_stat=c_stat, **consts), float)
    jump_half = np.asarray(sc.threshold_jump(Ns, 1.0, L, d, c_stat=c_stat, alpha=0.5,
                                             prefactor=s["prefactor"], loss0=s["loss0"]), float)
    run.extra.update(jump=jump.tolist(), jump_alpha_half=jump_half.tolist())
    run.claims.append(Claim(
        "stage I and stage II meet at C*(N)",
        bool(np.all(np.abs(jump - 1) < 1e-9)),
        "stage I / stage II at C*(N): " + ", ".join(f"{j:.6g} (N={m:.0e})" for m, j in zip(Ns, jump))
        + "; with alpha = 1/2 instead: " + ", ".join(f"{j:.3g}" for j in jump_half),
        "only for alpha = 1 and c_stat = prefactor loss0 / (L d); otherwise the bound jumps"))


def _law_curves(run, s, c_stat):
    """The single-variable laws of Theorem 7.2 as curves and the time-law claim; returns the
    data grid the drags reuse."""
    n = s["n_grid"]
    T = np.logspace(0, 8, n)
    Nt = [1e2, 1e3]
    run.curves["time_law"] = _traj(T, [sc.time_law(T, m, 1.0, c_stat=c_stat, alpha=s["alpha"],
                                                   prefactor=s["prefactor"], loss0=s["loss0"])
                                       for m in Nt], [f"N={m:g}" for m in Nt], "bound", s)
    Nd = np.logspace(1, 8, n)
    run.curves["data_law"] = _traj(Nd, [sc.data_law(Nd, x, c_stat=c_stat) for x in (0.5, 1, 2)]
                                   + [sc.noise_drag_data(Nd, 1.0, 0.5, c_stat=c_stat)],
                                   ["xi=0.5", "xi=1", "xi=2", "drag xi=N^1/2"], "bound", s)
    Mg = np.logspace(0, 12, n)
    run.curves["model_law"] = _traj(Mg, [sc.model_law(Mg, 1.0, z) for z in (0.1, 0.2, 0.3)],
                                    ["zeta=0.1", "zeta=0.2", "zeta=0.3"], "bound", s)
    tl = run.curves["time_law"].y[0]
    floor = c_stat / Nt[0]
    run.claims.append(Claim(
        "time law: exponential decay in T down to the floor c_stat xi^2/N",
        bool(np.all(np.diff(tl) <= 0) and abs(tl[-1] / floor - 1) < 1e-6 and tl[0] > 2 * floor),
        f"N={Nt[0]:g}: bound {tl[0]:.3g} at T=1, {tl[-1]:.6g} at T=1e8; floor {floor:.6g}",
        "xi = 1; derived exponent exp(-alpha xi^2 T/N^2) (the printed one has xi^4/N^4)"))
    return Nd


def _drag_claim(run, s, c_stat, Nd):
    """The noise drags of section 7.2 as a curve and their claim."""
    L, d = s["L"], s["d"]
    drag_d = sc.noise_drag_data(Nd, 1.0, 0.5, c_stat=c_stat)
    Cd = np.logspace(5, 60, s["n_grid"])
    drag_c = sc.noise_drag_compute(Cd, 1.0, L, d, 0.1, c_stat=c_stat)
    drag_c2 = sc.noise_drag_compute(Cd, 1.0, L, d, 0.05, c_stat=c_stat)
    run.curves["drags"] = _traj(Cd, [drag_c, drag_c2], ["xi=C^0.1 (exact)", "xi=C^0.05 (exact)"],
                                "bound", s)
    rel_d = float(np.ptp(drag_d) / np.mean(drag_d))
    rel_c = float(np.ptp(drag_c) / np.mean(drag_c))
    sl2 = float(np.log(drag_c2[-1] / drag_c2[0]) / np.log(Cd[-1] / Cd[0]))
    run.claims.append(Claim(
        "noise drags: xi ~ N^(1/2) flattens the data law, xi ~ C^(1/10) flattens the frontier",
        rel_d < 1e-12 and rel_c < 1e-9 and sl2 < -0.05,
        f"relative spread: data drag {rel_d:.1e} over N in [1e1, 1e8], compute drag {rel_c:.1e} "
        f"over C in [1e5, 1e60]; xi = C^0.05 still decays, slope {sl2:.4f} "
        f"(5p/3 - 1/6 = {5 * 0.05 / 3 - 1 / 6:.4f} up to the log)",
        "exact drags (the paper's W(C/xi^10) form differs by the factor of claim 1)"))


def _plot_scaling(run, fig=None):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from attndyn.numeric.scaling import plots

    s = run.settings
    L, d, N, c_stat = s["L"], s["d"], s["N"], s["c_stat"]
    fig, axs = plt.subplots(2, 3, figsize=(15, 8.5)) if fig is None else (fig, fig.axes)
    axs = np.asarray(axs).reshape(2, 3)
    C = run.curves[f"two_stage/xi{s['xis'][0]:g}"].t
    plots.plot_two_stage(C, s["xis"], N, L, d, alpha=s["alpha"], prefactor=s["prefactor"],
                         loss0=s["loss0"], c_stat=c_stat, ax=axs[0, 0])
    axs[0, 0].set_xlabel("compute $C$")
    axs[0, 0].set_ylabel("excess-risk bound")
    axs[0, 0].set_title(f"Thm 7.1: two-stage bound, N={N:g}; dotted: $C^*(N)$", fontsize=9)
    plots.plot_phase_diagram(C, s["xis"], L, d, ax=axs[0, 1])
    r = run.curves[f"two_stage/xi{s['xis'][0]:g}"]
    axs[0, 1].loglog(C, r.observable("N_star_paper"), "k:", lw=1,
                     label=f"paper's $N^*(C)$, xi={s['xis'][0]:g}")
    axs[0, 1].legend(fontsize=7, loc="lower right")
    axs[0, 1].set_xlabel("compute $C$")
    axs[0, 1].set_ylabel("data-set size $N$ (frontier $N^*(C)$)")
    axs[0, 1].set_title("compute-optimal frontier, eq. (3)", fontsize=9)
    ax = axs[0, 2]
    fr = run.curves["frontier_ratio"]
    # log10 C on a linear axis: matplotlib's log axis overflows near C = 1e300
    ax.plot(np.log10(fr.t), fr.y[0], "C0-", label="$N_{paper}/N^*$")
    for c in _RATIO_C:
        v = float(np.interp(np.log10(c), np.log10(fr.t), fr.y[0]))
        ax.annotate(f"{v:.3f}", (np.log10(c), v), fontsize=7, textcoords="offset points",
                    xytext=(2, 4))
    ax.axhline(6 ** (-1 / 6), color="k", ls=":", lw=1, label="$6^{-1/6}$ = 0.742")
    ax.set_xlabel("$\\log_{10}$ compute $C$")
    ax.set_ylabel("$N_{paper}(C)/N^*(C)$")
    ax.set_title(f"paper's W(C/xi^10) form vs exact, xi=1, L={fr.params['L']}, "
                 f"d={fr.params['d']}", fontsize=9)
    ax.legend(fontsize=7)
    plots.plot_time_law(run.curves["time_law"].t, [1e2, 1e3], 1.0, c_stat=c_stat,
                        alpha=s["alpha"], prefactor=s["prefactor"], loss0=s["loss0"],
                        ax=axs[1, 0])
    axs[1, 0].set_xlabel("training time $T$")
    axs[1, 0].set_ylabel("bound (xi = 1)")
    plots.plot_data_law(run.curves["data_law"].t, [0.5, 1.0, 2.0], c_stat=c_stat, drag_xi0=1.0,
                        ax=axs[1, 1])
    axs[1, 1].set_xlabel("data-set size $N$")
    axs[1, 1].set_ylabel("bound $c_{stat}\\,\\xi^2/N$")
    ax = axs[1, 2]
    plots.plot_model_law(run.curves["model_law"].t, 1e3, 1.0, (0.1, 0.2, 0.3), ax=ax)
    dr = run.curves["drags"]
    ax2 = ax.twiny()
    ax2.loglog(dr.t, dr.y[0], "k--", lw=1, label="compute drag $\\xi=C^{0.1}$")
    ax2.loglog(dr.t, dr.y[1], "k-.", lw=1, label="compute drag $\\xi=C^{0.05}$")
    ax2.set_xlabel("compute $C$ (drags, black)", fontsize=8)
    ax2.legend(fontsize=7, loc="upper right")
    ax.set_xlabel("model size $M$")
    ax.set_ylabel("bound")
    ax.set_title("model law (Thm 7.2), N=1e3, and the noise drags", fontsize=9, pad=22)
    fig.suptitle(f"Paper 000 section 7 bounds. Constants: L={L}, d={d}, alpha={s['alpha']}, "
                 f"prefactor={s['prefactor']}, L(0,D)={s['loss0']}, "
                 f"c_stat=prefactor L(0,D)/(L d)={c_stat:.4g} [{s['mode']}]", fontsize=10)
    fig.tight_layout()
    return fig
