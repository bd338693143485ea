"""Fig. 4."""

from __future__ import annotations

import math
import time

import numpy as np

from attndyn.numeric.attention.figures.common import _fmt, _mpl, _seeds, _settings, _sgd_completed
from attndyn.numeric.attention.tied.examples import d3_model
from attndyn.numeric.attention.tied.noise_flow import noise_corrected_flow
from attndyn.numeric.core.claims import Claim, FigureRun, max_abs

__all__ = ["fig4_noise_check", "plot_noise_check", "fig4"]


def fig4_noise_check(*, d: int = 400, eta: float = 0.01, batch: int = 512, T: float = 1.0,
                     n_t: int = 41, seeds: int = 8, scale: float = 0.5, threads=1,
                     corrections=("noise", "noise+finite-d")) -> dict:
    """Issue 16's flow acceptance at Figure 4's settings (D.3 loss ``(G1 - G2)^2``, tied,
    student 0 and fixed teacher 1, both ``gaussian_init(scale=0.5, seed=1000 + d)`` as
    in :func:`attndyn.numeric.attention.figures.fig4`): ``seeds`` SGD runs (seeds
    ``0..seeds-1``), their mean and standard error, the uncorrected matrix flow and
    the corrected moment-level flows, and the max errors on ``mu_1, q_11, q_12``."""
    from attndyn.numeric.attention.training import gaussian_init, sgd
    model = d3_model()
    W = gaussian_init(model, d, scale=scale, seed=1000 + d)
    S = [w @ w.T for w in W]
    t_eval = np.linspace(0.0, T, n_t)
    names = ["mu_1", "q_11", "q_12"]
    runs = [sgd(model, W, eta=eta, batch=batch, t_eval=t_eval, seed=sd, threads=threads)
            for sd in range(seeds)]
    t = runs[0].t
    Y = np.array([[r.observable(n) for n in names] for r in runs])
    mean = Y.mean(axis=0)
    se = Y.std(axis=0, ddof=1) / math.sqrt(seeds) if seeds > 1 else np.zeros_like(mean)
    theories = {}
    for c in corrections:
        th = noise_corrected_flow(model, S, t, eta=eta, batch=batch, correction=c)
        theories[c] = np.array([th.observable(n) for n in names])
        flow = np.array([th.diagnostics["flow"][th.names.index(n)] for n in names])
    theories["none"] = flow
    out = {"t": t, "names": names, "sgd_mean": mean, "sgd_se": se, "theories": theories,
           "params": {"d": d, "eta": eta, "batch": batch, "T": T, "seeds": seeds,
                      "scale": scale, "eta_d_over_B": eta * d / batch}}
    err = {}
    for c, y in theories.items():
        e = np.abs(mean - y)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, e / np.where(se > 0, se, 1.0), 0.0)
        err[c] = {"max_abs": {n: float(e[i].max()) for i, n in enumerate(names)},
                  "max_z": {n: float(z[i, 1:].max()) for i, n in enumerate(names)}}
    out["errors"] = err
    return out


def plot_noise_check(res: dict, ax=None):
    """SGD mean +- standard error and the uncorrected and corrected theories of
    :func:`fig4_noise_check`, as the difference to the uncorrected flow (three panels
    when ``ax`` is None). Returns the axes."""
    import matplotlib.pyplot as plt
    names = res["names"]
    if ax is None:
        _, ax = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4))
    axes = np.atleast_1d(ax)
    t = res["t"]
    base = res["theories"]["none"]
    for i, n in enumerate(names[:len(axes)]):
        a = axes[i]
        m, se = res["sgd_mean"][i] - base[i], res["sgd_se"][i]
        a.fill_between(t, m - se, m + se, color="0.8", label="SGD mean +- s.e.")
        a.plot(t, m, "k.", ms=3)
        a.plot(t, np.zeros_like(t), "C0-", label="flow (no correction)")
        for j, (c, y) in enumerate(res["theories"].items()):
            if c != "none":
                a.plot(t, y[i] - base[i], f"C{j + 1}--", label=f"correction={c}")
        a.set_xlabel("t = 4 eta n / d")
        a.set_title(f"{n} minus the matrix flow")
    axes[0].legend(fontsize=7)
    return ax


def _tied_truncation_curves(run, model, S, t_short, t_full, orders, obs, ref_short, ref_full,
                            tag):
    """Truncations per order on the short and the full horizon; errors to refs."""
    err_s, err_f, status_f = {}, {}, {}
    for M in orders:
        h = model.hierarchy(M)
        rs = h.integrate(S, t_short, method="truncation")
        rf = h.integrate(S, t_full, method="truncation")
        run.curves[f"truncation/M{M}"] = rs
        run.curves[f"truncation_full/M{M}"] = rf
        err_s[M] = max(max_abs(rs.observable(o)[: len(ref_short[o])] - ref_short[o]) for o in obs)
        n = min(rf.t.size, len(ref_full[obs[0]]))
        err_f[M] = max(max_abs(rf.observable(o)[:n] - ref_full[o][:n]) for o in obs) \
            if rf.t.size == t_full.size else float("inf")
        status_f[M] = int(rf.status)
    run.extra[f"{tag}_err_short"] = {str(k): v for k, v in err_s.items()}
    run.extra[f"{tag}_err_full"] = {str(k): v for k, v in err_f.items()}
    run.extra["truncation_status_full"] = {str(k): v for k, v in status_f.items()}
    return err_s, err_f, status_f


def fig4(mode: str = "quick", seeds=1, **overrides) -> FigureRun:
    """Figure 4: the D.3 loss ``(G_1 - G_2)^2`` (tied, L = 1, student 0,
    fixed teacher 1, gamma = 0): truncated hierarchy (eq. 13) at several orders
    against SGD, with the exact ``d -> infinity`` free limit (``limit_flow``)
    over the full horizon.

    Initial condition (not in the caption): student and teacher factors
    ``gaussian_init(scale=0.5)`` (spectra in about [0, 1]); the limit starts
    from the law ``wishart(0.5, 1)`` of both."""
    from attndyn.numeric.attention.tied.limit import limit_flow
    from attndyn.numeric.attention.training import gaussian_init, sgd
    from attndyn.symbolic.initial import FreeInit, wishart

    s = _settings("fig4", mode, overrides)
    seed_list = _seeds(seeds, 0)
    t0 = time.perf_counter()
    model = d3_model()
    d, sc = s["d"], s["scale"]
    W = gaussian_init(model, d, scale=sc, seed=1000 + d)
    S = [w @ w.T for w in W]
    t_eval = np.linspace(0.0, s["T"], s["n_t"])
    s.update(init_seed=1000 + d, sgd_seeds=seed_list, loss="(G1 - G2)^2", gamma=0.0,
             init=f"gaussian_init(scale={sc}) for student and teacher")
    run = FigureRun("fig4", "Fig. 4: D.3 linear loss, truncation orders vs SGD", s)
    obs = ["mu_1", "q_11", "q_12"]
    sgds = []
    for sd in seed_list:
        r = sgd(model, W, eta=s["eta"], batch=s["batch"], t_eval=t_eval, seed=sd)
        run.curves[f"sgd/seed{sd}"] = r
        sgds.append(r)
    t = sgds[0].t
    mean = {o: np.mean([r.observable(o) for r in sgds], axis=0) for o in obs}
    law = FreeInit([wishart(sc, 1.0), wishart(sc, 1.0)])
    lim = limit_flow(model, law, t)
    run.curves["limit"] = lim
    # the exact hierarchy at this d from the same matrices: no finite-d mismatch of the start
    from attndyn.numeric.attention.flow import matrix_flow

    fl = matrix_flow(model, S, t, order=2)
    run.curves["flow"] = fl
    short = t <= s["T_short"] + 1e-12
    t_short = t[short]
    lim_s = {o: lim.observable(o)[short] for o in obs}
    lim_f = {o: lim.observable(o) for o in obs}
    err_s, err_f, status_f = _tied_truncation_curves(
        run, model, S, t_short, t, s["orders"], obs,
        {o: fl.observable(o)[short] for o in obs}, {o: fl.observable(o) for o in obs}, "to_flow")
    # errors to SGD (mean over seeds)
    sgd_s, sgd_f = {}, {}
    for M in s["orders"]:
        rs = run.curves[f"truncation/M{M}"]
        sgd_s[M] = max(max_abs(rs.observable(o) - mean[o][short]) for o in obs)
        rf = run.curves[f"truncation_full/M{M}"]
        sgd_f[M] = max(max_abs(rf.observable(o) - mean[o]) for o in obs) \
            if rf.t.size == t.size else float("inf")
    lim_sgd_s = max(max_abs(lim_s[o] - mean[o][short]) for o in obs)
    lim_sgd_f = max(max_abs(lim_f[o] - mean[o]) for o in obs)
    run.extra.update(to_sgd_err_short={str(k): v for k, v in sgd_s.items()},
                     to_sgd_err_full={str(k): v for k, v in sgd_f.items()},
                     limit_to_sgd_short=lim_sgd_s, limit_to_sgd_full=lim_sgd_f)
    orders = list(s["orders"])
    es = [err_s[M] for M in orders]
    run.claims.append(Claim(
        "truncation error to the exact hierarchy falls with the order M",
        all(a > b for a, b in zip(es, es[1:])),
        "max |err| on t_1, q_11, q_12 vs the matrix flow from the same matrices: "
        + ", ".join(f"M={M}: {_fmt(e)}" for M, e in zip(orders, es)),
        f"short horizon t <= {s['T_short']} only"))
    floor = 2.0 * lim_sgd_s
    ss = [sgd_s[M] for M in orders]
    ok = all(a > b or b <= floor for a, b in zip(ss, ss[1:])) and ss[-1] < ss[0]
    run.claims.append(Claim(
        "truncation error to SGD falls with M down to SGD's noise floor",
        ok, ", ".join(f"M={M}: {_fmt(e)}" for M, e in zip(orders, ss))
        + f"; floor 2 x (limit vs SGD) = {_fmt(floor)}",
        f"t <= {s['T_short']}, mean of {len(seed_list)} SGD seed(s)"))
    tol = 3e-2
    run.claims.append(Claim(
        "the limit solver tracks SGD over the full horizon",
        lim_sgd_f <= tol,
        f"max |limit - SGD| on t_1, q_11, q_12 over [0, {s['T']}] = {_fmt(lim_sgd_f)} "
        f"(tolerance {tol:g}: learning-rate noise + 1/d); limit's stated error "
        f"{_fmt(max(float(np.max(lim.error[o])) for o in obs))}",
        f"d = {d}, eta d/B = {s['eta'] * d / s['batch']:.3g}"))
    worst_f = min(sgd_f[M] for M in orders)
    run.claims.append(Claim(
        "every truncation leaves SGD on the full horizon (truncation is a short-time tool)",
        worst_f > 10 * max(lim_sgd_f, 1e-3) and all(v == 2 for v in status_f.values()),
        "max |err| to SGD over [0, T]: " + ", ".join(f"M={M}: {_fmt(sgd_f[M])}" for M in orders)
        + "; status " + ", ".join(f"M={M}: {status_f[M]}" for M in orders)
        + " (2 = not converged in the order)",
        f"T = {s['T']}, gamma = 0, spectra up to about {4 * sc * sc:g}"))
    run.claims.insert(0, _sgd_completed(run))
    run.plotter = _plot_fig4
    run.wall_s = time.perf_counter() - t0
    return run


def _plot_fig4(run, fig=None):
    plt = _mpl()
    s = run.settings
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.2)) if fig is None else (fig, fig.axes)
    ax = axs[0]
    sg = [v for k, v in run.curves.items() if k.startswith("sgd/")]
    for i, r in enumerate(sg):
        ax.plot(r.t, r.observable("q_11"), "k-", lw=2, alpha=0.6,
                label="SGD $q_{11}$" if i == 0 else None)
    lim = run.curves["limit"]
    ax.plot(lim.t, lim.observable("q_11"), "C3--", lw=1.5, label="limit solver ($d\\to\\infty$)")
    lo, hi = np.min(lim.observable("q_11")), np.max(lim.observable("q_11"))
    for i, M in enumerate(s["orders"]):
        rf = run.curves[f"truncation_full/M{M}"]
        ax.plot(rf.t, rf.observable("q_11"), color=f"C{i}", lw=1, ls=":",
                label=f"truncation M={M}")
    ax.axvspan(0, s["T_short"], color="0.9", zorder=0, label="short horizon")
    ax.set_ylim(lo - 0.5 * (hi - lo), hi + 0.8 * (hi - lo))
    ax.set_xlabel("ODE time $t = 4\\eta n/d$")
    ax.set_ylabel("$q_{11}(t) = \\mathrm{Tr}(S_1^2)/d$")
    ax.legend(fontsize=7)
    ax.set_title("$q_{11}$: SGD, limit, truncations", fontsize=9)
    ax = axs[1]
    sg_mean = np.mean([r.observable("q_11") for r in sg], axis=0)
    fl = run.curves["flow"]
    for i, M in enumerate(s["orders"]):
        rs = run.curves[f"truncation/M{M}"]
        e = np.abs(rs.observable("q_11") - fl.observable("q_11")[: rs.t.size])
        ax.semilogy(rs.t[1:], np.maximum(e[1:], 1e-16), color=f"C{i}", marker="o", ms=3,
                    label=f"|M={M} - flow|")
    n = run.curves[f"truncation/M{s['orders'][0]}"].t.size
    ax.semilogy(fl.t[1:n], np.maximum(np.abs(sg_mean[1:n] - fl.observable("q_11")[1:n]), 1e-16),
                "k-", lw=2, alpha=0.6, label="|SGD - flow| (lr noise)")
    ax.set_xlabel("ODE time $t$ (short horizon)")
    ax.set_ylabel("error on $q_{11}$ (to the matrix flow at this d)")
    ax.legend(fontsize=7)
    ax.set_title("truncation error falls with the order M", fontsize=9)
    fig.suptitle(f"Fig. 4 (D.3, $(G_1-G_2)^2$, tied, L=1, $\\gamma$=0): d={s['d']}, "
                 f"$\\eta$={s['eta']}, B={s['batch']}, init scale {s['scale']}, "
                 f"seeds {s['sgd_seeds']} [{s['mode']}]", fontsize=9)
    fig.tight_layout()
    return fig
