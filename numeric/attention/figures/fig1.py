"""Fig. 1."""

from __future__ import annotations

import time

import numpy as np

from attndyn.numeric.attention.figures.common import _fmt, _mpl, _seeds, _settings, _sgd_completed
from attndyn.numeric.attention.figures.fig4 import _tied_truncation_curves
from attndyn.numeric.core.claims import Claim, FigureRun, max_abs

__all__ = ["fig1"]


def fig1(mode: str = "quick", seeds=1, **overrides) -> FigureRun:
    """Figure 1: tied attention with L = 2 tokens, row-softmax teacher-student
    MSE (``softmax_teacher_student(2)``), gamma = 0: truncated hierarchy at
    several orders against SGD, and the finite-d matrix flow (the exact
    projection of the hierarchy at this d) over the full horizon. The potential
    is non-polynomial: ``Gamma(q)`` comes from the compiled quadrature route.

    Initial condition (not in the caption): ``gaussian_init(scale=0.5)``."""
    from attndyn.numeric.attention.flow import matrix_flow
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.numeric.attention.training import gaussian_init, sgd
    from attndyn.symbolic.losses import softmax_teacher_student

    s = _settings("fig1", mode, overrides)
    seed_list = _seeds(seeds, 0)
    t0 = time.perf_counter()
    model = TiedModel(2, [0], softmax_teacher_student(2), L=2)
    d, sc = s["d"], s["scale"]
    W = gaussian_init(model, d, scale=sc, seed=4000 + d)
    S = [w @ w.T for w in W]
    t_eval = np.linspace(0.0, s["T"], s["n_t"])
    s.update(init_seed=4000 + d, sgd_seeds=seed_list, loss="softmax_teacher_student(L=2)",
             gamma=0.0, route=str(getattr(model.potential, "route", "?")),
             init=f"gaussian_init(scale={sc})")
    run = FigureRun("fig1", "Fig. 1: tied, L = 2, softmax, MSE, truncation orders vs SGD", s)
    obs = ["mu_1", "q_11", "q_12"]
    sgds = []
    for sd in seed_list:
        r = sgd(model, W, eta=s["eta"], batch=s["batch"], t_eval=t_eval, seed=sd)
        run.curves[f"sgd/seed{sd}"] = r
        sgds.append(r)
    t = sgds[0].t
    mean = {o: np.mean([r.observable(o) for r in sgds], axis=0) for o in obs}
    fl = matrix_flow(model, S, t, order=2)
    run.curves["flow"] = fl
    short = t <= s["T_short"] + 1e-12
    fl_s = {o: fl.observable(o)[short] for o in obs}
    fl_f = {o: fl.observable(o) for o in obs}
    err_s, err_f, status_f = _tied_truncation_curves(run, model, S, t[short], t, s["orders"], obs,
                                                     fl_s, fl_f, "to_flow")
    fl_sgd = max(max_abs(fl_f[o] - mean[o]) for o in obs)
    orders = list(s["orders"])
    es = [err_s[M] for M in orders]
    run.extra["flow_to_sgd_full"] = fl_sgd
    run.claims.append(Claim(
        "truncation error to the exact hierarchy (matrix flow) falls with the order M",
        all(a > b for a, b in zip(es, es[1:])),
        ", ".join(f"M={M}: {_fmt(e)}" for M, e in zip(orders, es)),
        f"short horizon t <= {s['T_short']} only; numeric-quadrature potential"))
    sgd_s = {M: max(max_abs(run.curves[f"truncation/M{M}"].observable(o) - mean[o][short])
                    for o in obs) for M in orders}
    run.claims.append(Claim(
        "the highest order matches SGD on the short horizon within the noise",
        sgd_s[orders[-1]] <= max(3.0 * max(max_abs(fl_s[o] - mean[o][short]) for o in obs), 2e-3),
        ", ".join(f"M={M}: {_fmt(sgd_s[M])}" for M in orders)
        + f"; flow vs SGD on the short horizon "
          f"{_fmt(max(max_abs(fl_s[o] - mean[o][short]) for o in obs))}",
        f"t <= {s['T_short']}"))
    tol = 3e-2
    run.claims.append(Claim(
        "the matrix flow (long-horizon theory) tracks SGD over the full horizon",
        fl_sgd <= tol, f"max |flow - SGD| on t_1, q_11, q_12 over [0, {s['T']}] = {_fmt(fl_sgd)} "
                       f"(tolerance {tol:g})", f"d = {d}"))
    from attndyn.numeric.attention.tied.limit import limit_flow
    from attndyn.symbolic.initial import FreeInit, wishart

    lim = limit_flow(model, FreeInit([wishart(sc, 1.0), wishart(sc, 1.0)]), t)
    run.curves["limit"] = lim
    lim_sgd = max(max_abs(lim.observable(o) - mean[o]) for o in obs) \
        if lim.t.size == t.size else float("inf")
    run.extra["limit_to_sgd_full"] = lim_sgd
    run.claims.append(Claim(
        "the limit solver (d -> infinity) tracks SGD over the full horizon",
        lim.status == 0 and lim_sgd <= tol,
        f"max |limit - SGD| on t_1, q_11, q_12 over [0, {s['T']}] = {_fmt(lim_sgd)} "
        f"(tolerance {tol:g}); limit method {lim.diagnostics.get('method')}, status {lim.status}",
        f"law wishart({sc}, 1) for student and teacher; SGD at d = {d}"))
    run.claims.insert(0, _sgd_completed(run))
    run.plotter = _plot_fig1
    run.wall_s = time.perf_counter() - t0
    return run


def _plot_fig1(run, fig=None):
    plt = _mpl()
    s = run.settings
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.2)) if fig is None else (fig, fig.axes)
    fl = run.curves["flow"]
    for j, o in enumerate(["q_11", "q_12"]):
        ax = axs[j]
        for i, (k, r) in enumerate((k, v) for k, v in run.curves.items() if k.startswith("sgd/")):
            ax.plot(r.t, r.observable(o), "k-", lw=2, alpha=0.6, label="SGD" if i == 0 else None)
        ax.plot(fl.t, fl.observable(o), "C3--", lw=1.5, label="matrix flow (exact at this d)")
        if "limit" in run.curves:
            lm = run.curves["limit"]
            ax.plot(lm.t, lm.observable(o), "m-.", lw=1.2, label="limit solver ($d\\to\\infty$)")
        y = fl.observable(o)
        if "limit" in run.curves:
            y = np.concatenate([y, run.curves["limit"].observable(o)])
        lo, hi = float(np.min(y)), float(np.max(y))
        span = max(hi - lo, 1e-3)
        for i, M in enumerate(s["orders"]):
            rf = run.curves[f"truncation_full/M{M}"]
            ax.plot(rf.t, rf.observable(o), color=f"C{i}", ls=":", lw=1.2, label=f"truncation M={M}")
        ax.axvspan(0, s["T_short"], color="0.9", zorder=0, label="short horizon")
        ax.set_ylim(lo - 0.6 * span, hi + 0.6 * span)
        ax.set_xlabel("ODE time $t = 4\\eta n/d$")
        ax.set_ylabel({"q_11": "$q_{11}$", "q_12": "$q_{12}$"}[o])
        ax.legend(fontsize=7)
    fig.suptitle(f"Fig. 1 (tied, L=2, softmax, MSE, $\\gamma$=0): d={s['d']}, $\\eta$={s['eta']}, "
                 f"B={s['batch']}, init scale {s['scale']}, seeds {s['sgd_seeds']} [{s['mode']}]",
                 fontsize=9)
    fig.tight_layout()
    return fig
