"""Fig. 4."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attndyn.numeric.attention.figures.common import (Z_OK, figure_seeds, figure_settings, fmt,
                                                      mpl, run_sgd_tasks, seed_z, sgd_completed)
from attndyn.numeric.attention.tied.examples import d3_model
from attndyn.numeric.attention.tied.noise_flow import noise_corrected_flow
from attndyn.numeric.core.claims import Claim, FigureRun, max_abs

if TYPE_CHECKING:
    from attndyn.numeric.attention.figures.common import TaskRunner
    from attndyn.numeric.core.results import Trajectory

# one seed's theories {key: {observable: values}}; z per observable (rms, max |z|) per key
Theories = dict[str, dict[str, np.ndarray]]
ZPer = dict[str, tuple[float, float]]

__all__ = ["fig4_noise_check", "plot_noise_check", "fig4"]


def fig4_noise_check(*, d: int = 400, eta: float = 0.01, batch: int = 512, T: float = 1.0,
                     n_t: int = 41, seeds: int = 8, scale: float = 0.5, threads: int | None = 1,
                     corrections: Sequence[str] = ("noise", "noise+finite-d")
                     ) -> dict[str, Any]:
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
    theories: dict[str, np.ndarray] = {}
    for c in corrections:
        th = noise_corrected_flow(model, S, t, eta=eta, batch=batch, correction=c)
        theories[c] = np.array([th.observable(n) for n in names])
        flow = np.array([th.diagnostics["flow"][th.names.index(n)] for n in names])
    theories["none"] = flow
    out: dict[str, Any] = {"t": t, "names": names, "sgd_mean": mean, "sgd_se": se,
                           "theories": theories,
                           "params": {"d": d, "eta": eta, "batch": batch, "T": T,
                                      "seeds": seeds, "scale": scale,
                                      "eta_d_over_B": eta * d / batch}}
    err: dict[str, Any] = {}
    for c, y in theories.items():
        e = np.abs(mean - y)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, e / np.where(se > 0, se, 1.0), 0.0)
        err[c] = {"max_abs": {n: float(e[i].max()) for i, n in enumerate(names)},
                  "max_z": {n: float(z[i, 1:].max()) for i, n in enumerate(names)}}
    out["errors"] = err
    return out


def plot_noise_check(res: dict[str, Any], ax: Any = None) -> Any:
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


def tied_truncation_curves(run: FigureRun, model: Any, S: Sequence[np.ndarray],
                            t_short: np.ndarray, t_full: np.ndarray, orders: Sequence[int],
                            obs: Sequence[str], ref_short: dict[str, np.ndarray],
                            ref_full: dict[str, np.ndarray], tag: str
                            ) -> tuple[dict[int, float], dict[int, float], dict[int, int]]:
    """Truncations per order on the short and the full horizon; errors to refs."""
    err_s: dict[int, float] = {}
    err_f: dict[int, float] = {}
    status_f: dict[int, int] = {}
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


def noise_truncation_curves(run: FigureRun, model: Any, S: Sequence[np.ndarray],
                            t_short: np.ndarray, s: dict[str, Any]) -> dict[int, int]:
    """The truncation at each order with SGD's mini-batch noise rows on the short horizon:

        d mu_alpha/dt = [eq. (11), truncated at M] + (eta d / B) N_alpha(mu)

    (``correction="noise"`` with the figure's ``eta``, ``batch`` and ``d``,
    docs/finite-eta.md), from the same matrices as the uncorrected truncation. Stored as
    ``truncation_noise/M{M}``; returns the status per order (2: not converged in the
    order, from the check at ``M - 2``)."""
    status: dict[int, int] = {}
    for M in s["orders"]:
        r = model.hierarchy(M).integrate(S, t_short, correction="noise", eta=s["eta"],
                                         batch=s["batch"], d=s["d"])
        run.curves[f"truncation_noise/M{M}"] = r
        status[M] = int(r.status)
    return status


def _sgd_setup(curve: str, sgd_seed: int, s: dict[str, Any]
               ) -> tuple[Any, list[Any], np.ndarray, dict[str, Any]]:
    """SGD task of Fig. 4: seed ``i`` starts from its own draw of the law
    (``gaussian_init(scale, seed=[init_seed, i])`` for student and teacher)."""
    from attndyn.numeric.attention.training import gaussian_init

    if curve != "sgd":
        raise ValueError(f"fig4: unknown curve {curve!r}")
    model = d3_model()
    W = gaussian_init(model, s["d"], scale=s["scale"],
                      seed=np.random.SeedSequence([s["init_seed"], sgd_seed]))
    return model, W, np.linspace(0.0, s["T"], s["n_t"]), {"_steps_per_unit": s["d"] / (4 * s["eta"])}


def _tied_theories(model: Any, S: Sequence[np.ndarray], t: np.ndarray, eta: float, batch: int,
                   corrections: Sequence[str]) -> tuple[Theories, Trajectory]:
    """The matrix flow and its corrected versions from one start (same matrices):
    ``{"flow": {obs: y}, "noise": ..., ...}`` on ``mu_1, q_11, q_12``."""
    from attndyn.numeric.attention.flow import matrix_flow

    obs = ["mu_1", "q_11", "q_12"]
    out: Theories = {}
    fl = matrix_flow(model, S, t, order=2)
    out["flow"] = {o: fl.observable(o) for o in obs}
    for c in corrections:
        th = noise_corrected_flow(model, S, t, eta=eta, batch=batch, correction=c)
        out[c] = {o: th.observable(o) for o in obs}
    return out, fl


def paired_z(sgds: Sequence[Trajectory], theories: Sequence[Theories], keys: Sequence[str],
              obs: Sequence[str], mask: np.ndarray | None = None) -> dict[str, ZPer]:
    """rms z (max over observables) of SGD seed i against theory i, per theory key."""
    from attndyn.numeric.attention.figures.common import seed_z

    res: dict[str, ZPer] = {}
    for k in keys:
        per: ZPer = {}
        for o in obs:
            Y = np.array([r.observable(o) for r in sgds])
            T = np.array([th[k][o] for th in theories])
            if mask is not None:
                Y, T = Y[:, mask], T[:, mask]
            rms, mx, _ = seed_z(Y, T)
            per[o] = (rms, mx)
        res[k] = per
    return res


def zworst(per: ZPer) -> float:
    return max(v[0] for v in per.values())


def zdesc(per: ZPer) -> str:
    return ", ".join(f"{o} {v[0]:.2f}" for o, v in per.items())


def fig4(mode: str = "quick", seeds: int | Sequence[int] | None = None,
         runner: TaskRunner | None = None, **overrides: Any) -> FigureRun:
    """Figure 4: the D.3 loss ``(G_1 - G_2)^2`` (tied, L = 1, student 0,
    fixed teacher 1, gamma = 0): truncated hierarchy (eq. 13) at several orders
    against SGD, each also with SGD's mini-batch noise rows (``correction="noise"``,
    short horizon; the truncation-to-SGD claim is judged on these), with the exact ``d -> infinity`` free limit (``limit_flow``)
    over the full horizon, and the finite-d matrix flow with its mini-batch noise
    corrections (``correction="noise"``, ``"noise+finite-d"``: docs/finite-eta.md).

    Initial condition (not in the caption): student and teacher factors drawn from
    ``gaussian_init(scale=0.5)`` (spectra in about [0, 1]), one draw per SGD seed; the
    limit starts from the law ``wishart(0.5, 1)`` of both and is judged against the SGD
    runs over the draws, the finite-d theories against SGD from their own matrices
    (paired per seed). Claims are in seed units: rms z over the plotted times."""
    from attndyn.numeric.attention.tied.limit import limit_flow
    from attndyn.symbolic.initial import FreeInit, wishart

    s = figure_settings("fig4", mode, overrides)
    seed_list = figure_seeds(seeds, 0, s.pop("seeds"))
    t0 = time.perf_counter()
    model = d3_model()
    d, sc = s["d"], s["scale"]
    s.update(init_seed=1000 + d, sgd_seeds=seed_list, loss="(G1 - G2)^2", gamma=0.0,
             eta_d_over_B=s["eta"] * d / s["batch"],
             init=f"gaussian_init(scale={sc}) for student and teacher, one draw per seed "
                  f"(seed [init_seed, i])")
    runs = run_sgd_tasks("fig4", s, [("sgd", sd) for sd in seed_list], runner)
    run = FigureRun("fig4", "Fig. 4: D.3 linear loss, truncation orders vs SGD", s)
    obs = ["mu_1", "q_11", "q_12"]
    sgds = []
    for sd in seed_list:
        run.curves[f"sgd/seed{sd}"] = runs[("sgd", sd)]
        sgds.append(runs[("sgd", sd)])
    t = sgds[0].t
    corrections = ("noise", "noise+finite-d")
    theories, S0, fl0 = _fig4_flows(run, model, s, seed_list, t, corrections)
    law = FreeInit([wishart(sc, 1.0), wishart(sc, 1.0)])
    lim = limit_flow(model, law, t)
    run.curves["limit"] = lim
    short = t <= s["T_short"] + 1e-12
    t_short = t[short]
    err_s, err_f, status_f = tied_truncation_curves(
        run, model, S0, t_short, t, s["orders"], obs,
        {o: fl0.observable(o)[short] for o in obs}, {o: fl0.observable(o) for o in obs}, "to_flow")
    status_n = noise_truncation_curves(run, model, S0, t_short, s)
    zt_s, zt_f, zn_s = _truncation_z(run, s, sgds, theories, obs, t, short)
    zp = paired_z(sgds, theories, ("flow",) + corrections, obs)
    # the per-seed theory rows, for the plot only (kept off run.extra, which is saved; not
    # a field of FigureRun, so set as an attribute)
    plot_rows = {k: {o: [th[k][o] for th in theories] for o in obs}
                 for k in ("flow",) + corrections}
    run.plot_rows = plot_rows  # type: ignore[attr-defined]
    zl: ZPer = {}
    for o in obs:
        Y = np.array([r.observable(o) for r in sgds])
        rms, mx, _ = seed_z(Y, lim.observable(o))
        zl[o] = (rms, mx)
    lim_err = max(float(np.max(lim.error[o])) for o in obs)
    run.extra.update(truncation_z_short={str(k): v for k, v in zt_s.items()},
                     truncation_noise_z_short={str(k): v for k, v in zn_s.items()},
                     truncation_noise_status_short={str(k): v for k, v in status_n.items()},
                     truncation_z_full={str(k): v for k, v in zt_f.items()},
                     paired_rms_z={k: {o: v[0] for o, v in per.items()} for k, per in zp.items()},
                     limit_rms_z={o: v[0] for o, v in zl.items()},
                     limit_stated_error=lim_err)
    truncation_claims(run, s, seed_list, err_s, zt_s, zn_s)
    _theory_claims(run, s, seed_list, sgds, lim, obs, zp, zl, lim_err, corrections)
    _leaving_claim(run, s, zt_f, status_f)
    run.claims.insert(0, sgd_completed(run))
    run.plotter = _plot_fig4
    run.wall_s = time.perf_counter() - t0
    return run


def _fig4_flows(run: FigureRun, model: Any, s: dict[str, Any], seed_list: Sequence[int],
                t: np.ndarray, corrections: Sequence[str]
                ) -> tuple[list[Theories], list[np.ndarray], Trajectory]:
    """Each seed's finite-d theories from its own matrices; seed 0's flow and corrected
    flows as curves. Returns ``(theories, S0, flow0)``."""
    theories: list[Theories] = []
    for i, sd in enumerate(seed_list):
        W = _sgd_setup("sgd", sd, s)[1]
        S = [w @ w.T for w in W]
        th, fl = _tied_theories(model, S, t, s["eta"], s["batch"], corrections)
        theories.append(th)
        if i == 0:
            S0, fl0 = S, fl
            run.curves["flow"] = fl
    for c in corrections:  # seed 0's corrected flows, for the plot
        tr = noise_corrected_flow(model, S0, t, eta=s["eta"], batch=s["batch"], correction=c)
        run.curves[f"flow_{c.replace('+', '_')}"] = tr
    return theories, S0, fl0


def _truncation_z(run: FigureRun, s: dict[str, Any], sgds: Sequence[Trajectory],
                  theories: Sequence[Theories], obs: Sequence[str], t: np.ndarray,
                  short: np.ndarray
                  ) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """rms z of seed 0's run against each truncation (short horizon, full horizon) and
    each noise-corrected truncation (short horizon), in units of one run's seed SD around
    its own flow (max over the observables)."""
    # the seed noise of one run around its own flow (paired residuals): the unit of the
    # truncation-vs-SGD comparisons (seed 0's truncations against seed 0's run)
    resid = {o: np.array([r.observable(o) - th["flow"][o] for r, th in zip(sgds, theories)])
             for o in obs}
    sd1 = {o: resid[o].std(axis=0, ddof=1) if len(sgds) > 1 else np.full(t.size, np.nan)
           for o in obs}

    def z_single(y: np.ndarray, o: str, mask: np.ndarray) -> float:
        e = sgds[0].observable(o)[mask][: y.size] - y[: mask.sum()]
        u = sd1[o][mask][: e.size]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(u > 0, e / np.where(u > 0, u, 1.0), 0.0)
        return float(np.sqrt(np.mean(z[1:] ** 2))) if z.size > 1 else float("nan")

    zt_s: dict[int, float] = {}
    zt_f: dict[int, float] = {}
    zn_s: dict[int, float] = {}
    full = np.ones(t.size, bool)
    for M in s["orders"]:
        rs = run.curves[f"truncation/M{M}"]
        zt_s[M] = max(z_single(rs.observable(o), o, short) for o in obs)
        rn = run.curves[f"truncation_noise/M{M}"]
        zn_s[M] = max(z_single(rn.observable(o), o, short) for o in obs) \
            if rn.t.size == short.sum() else float("inf")
        rf = run.curves[f"truncation_full/M{M}"]
        zt_f[M] = max(z_single(rf.observable(o), o, full) for o in obs) \
            if rf.t.size == t.size else float("inf")
    return zt_s, zt_f, zn_s


def truncation_claims(run: FigureRun, s: dict[str, Any], seed_list: Sequence[int],
                       err_s: dict[int, float], zt_s: dict[int, float],
                       zn_s: dict[int, float]) -> None:
    """The claims on the short horizon: the truncation error falls with the order, to the
    exact hierarchy (the uncorrected truncations, ``err_s``) and to SGD's seed noise (judged
    on the truncations with the noise rows, ``zn_s``; the uncorrected ``zt_s`` reported
    beside them). Without the noise rows the error to SGD stops at SGD's learning-rate bias,
    of relative order ``eta d / B`` at every d, while the seed SD falls like ``d^-1/2``."""
    orders = list(s["orders"])
    es = [err_s[M] for M in orders]
    n = len(seed_list)
    run.claims.append(Claim(
        "truncation error to the exact hierarchy falls with the order M",
        all(a > b for a, b in zip(es, es[1:])),
        "max |err| on t_1, q_11, q_12 vs the matrix flow from the same matrices: "
        + ", ".join(f"M={M}: {fmt(e)}" for M, e in zip(orders, es)),
        f"short horizon t <= {s['T_short']} only; no SGD in this claim"))
    zs = [zn_s[M] for M in orders]
    run.claims.append(Claim(
        "truncation error to SGD falls with M down to SGD's seed noise (judged on the "
        "truncation with SGD's mini-batch noise rows, correction=\"noise\")",
        all(a > b or b <= Z_OK for a, b in zip(zs, zs[1:])) and zs[-1] <= Z_OK,
        "rms z of |SGD - truncation| in units of one run's seed SD (max over mu_1, q_11, "
        "q_12); with the noise rows (judged): "
        + ", ".join(f"M={M}: {z:.2f}" for M, z in zip(orders, zs))
        + "; uncorrected truncation (not judged): "
        + ", ".join(f"M={M}: {zt_s[M]:.2f}" for M in orders),
        f"t <= {s['T_short']}, seed {seed_list[0]}'s run and truncations, the SD of SGD around "
        f"its own flow over {n} seeds; noise rows (eta d/B) N_alpha at eta d/B = "
        f"{s['eta'] * s['d'] / s['batch']:.3g}, first order; held when the error falls with M "
        f"until it is within rms z {Z_OK:g} and the highest order is within it"))


def _theory_claims(run: FigureRun, s: dict[str, Any], seed_list: Sequence[int],
                   sgds: Sequence[Trajectory], lim: Any, obs: Sequence[str],
                   zp: dict[str, ZPer], zl: ZPer, lim_err: float,
                   corrections: tuple[str, ...]) -> None:
    """The claims over the full horizon: the corrected finite-d theory (paired per seed)
    and the limit solver from the law track SGD within the seed noise."""
    d, n = s["d"], len(seed_list)
    best = corrections[-1]
    run.claims.append(Claim(
        f"the finite-d theory with its learning-rate correction (correction=\"{best}\") "
        "tracks SGD from the same matrices within the seed noise over the full horizon",
        zworst(zp[best]) <= Z_OK,
        "; ".join(f"{k}: rms z {zdesc(zp[k])}" for k in ("flow",) + corrections),
        f"paired per seed ({n} seeds, each from its own draw), times 0 < t <= {s['T']}; "
        f"d = {d}, eta d/B = {s['eta'] * d / s['batch']:.3g}; held when rms z <= {Z_OK:g} on "
        "every observable"))
    run.claims.append(Claim(
        "the limit solver (d -> infinity, from the law) tracks SGD started from draws of the "
        "same law within the seed noise over the full horizon",
        zworst(zl) <= Z_OK,
        f"rms z {zdesc(zl)}; z at t = 0 (the finite-d offset of the law's moments, before "
        f"any step): " + ", ".join(f"{o} {seed_z(np.array([r.observable(o)[:1] for r in sgds]), lim.observable(o)[:1])[2][0]:.1f}" for o in obs)
        + f"; max |limit - SGD mean| "
        f"{fmt(max(max_abs(lim.observable(o) - np.mean([r.observable(o) for r in sgds], 0)) for o in obs))}"
        f"; limit's stated error {fmt(lim_err)}",
        f"{n} SGD seeds, one draw of the law each, d = {d}, eta d/B = "
        f"{s['eta'] * d / s['batch']:.3g}; the limit carries no learning-rate correction, so a "
        f"bias of relative order eta d/B remains while the seed SD falls like d^-1/2; held "
        f"when rms z <= {Z_OK:g} on every observable"))


def _leaving_claim(run: FigureRun, s: dict[str, Any], zt_f: dict[int, float],
                   status_f: dict[int, int]) -> None:
    """The claim that every truncation leaves SGD on the full horizon."""
    orders = list(s["orders"])
    zf = [zt_f[M] for M in orders]
    run.claims.append(Claim(
        "every truncation leaves SGD on the full horizon (truncation is a short-time tool)",
        min(zf) > 10 * Z_OK and all(v == 2 for v in status_f.values()),
        "rms z to SGD over [0, T] in units of one run's seed SD: "
        + ", ".join(f"M={M}: {fmt(z)}" for M, z in zip(orders, zf))
        + "; status " + ", ".join(f"M={M}: {status_f[M]}" for M in orders)
        + " (2 = not converged in the order)",
        f"T = {s['T']}, gamma = 0, spectra up to about {4 * s['scale'] * s['scale']:g}; held "
        f"when every order is above rms z {10 * Z_OK:g}"))


def plot_theory_gaps(ax: Any, run: FigureRun, obs: str, keys: Sequence[str],
                      labels: Sequence[str], limit: bool = True) -> Any:
    """SGD minus each theory, mean over seeds +- one standard error (paired: seed i's theory
    from seed i's matrices; the limit from the law)."""
    sg = [v for k, v in run.curves.items() if k.startswith("sgd/")]
    extra = {k: v[obs] for k, v in getattr(run, "plot_rows", {}).items()}
    t = sg[0].t
    Y = np.array([r.observable(obs) for r in sg])
    for j, k in enumerate(keys):
        rows = extra.get(k)
        if rows is None:
            continue
        D = Y - np.asarray(rows)[:, : Y.shape[1]]
        m = D.mean(0)
        se = D.std(0, ddof=1) / np.sqrt(len(sg)) if len(sg) > 1 else np.zeros_like(m)
        ax.fill_between(t, m - se, m + se, color=f"C{j}", alpha=0.2)
        ax.plot(t, m, color=f"C{j}", lw=1.5, label=labels[j])
    if limit and "limit" in run.curves:
        D = Y - run.curves["limit"].observable(obs)[None, : Y.shape[1]]
        m = D.mean(0)
        se = D.std(0, ddof=1) / np.sqrt(len(sg)) if len(sg) > 1 else np.zeros_like(m)
        ax.fill_between(t, m - se, m + se, color="m", alpha=0.15)
        ax.plot(t, m, "m-.", lw=1.2, label="limit ($d\\to\\infty$, from the law)")
    ax.axhline(0.0, color="0.4", lw=0.8)
    return ax


def _plot_fig4(run: FigureRun, fig: Any = None) -> Any:
    plt = mpl()
    s = run.settings
    fig, axs = plt.subplots(1, 3, figsize=(15, 4.2)) if fig is None else (fig, fig.axes)
    ax = axs[0]
    sg = [v for k, v in run.curves.items() if k.startswith("sgd/")]
    for i, r in enumerate(sg):
        ax.plot(r.t, r.observable("q_11"), "k-", lw=1.5, alpha=0.5,
                label="SGD $q_{11}$ (one draw per seed)" if i == 0 else None)
    lim = run.curves["limit"]
    ax.plot(lim.t, lim.observable("q_11"), "C3--", lw=1.5, label="limit solver ($d\\to\\infty$)")
    lo, hi = np.min(lim.observable("q_11")), np.max(lim.observable("q_11"))
    for i, M in enumerate(s["orders"]):
        rf = run.curves[f"truncation_full/M{M}"]
        ax.plot(rf.t, rf.observable("q_11"), color=f"C{i}", lw=1, ls=":",
                label=f"truncation M={M} (seed {s['sgd_seeds'][0]}'s start)")
    ax.axvspan(0, s["T_short"], color="0.9", zorder=0, label="short horizon")
    ax.set_ylim(lo - 0.5 * (hi - lo), hi + 0.8 * (hi - lo))
    ax.set_xlabel("ODE time $t = 4\\eta n/d$")
    ax.set_ylabel("$q_{11}(t) = \\mathrm{Tr}(S_1^2)/d$")
    ax.legend(fontsize=7)
    ax.set_title("$q_{11}$: SGD, limit, truncations", fontsize=9)
    ax = axs[1]
    fl = run.curves["flow"]
    r0 = sg[0]
    for i, M in enumerate(s["orders"]):
        rs = run.curves[f"truncation/M{M}"]
        e = np.abs(rs.observable("q_11") - fl.observable("q_11")[: rs.t.size])
        ax.semilogy(rs.t[1:], np.maximum(e[1:], 1e-16), color=f"C{i}", marker="o", ms=3,
                    label=f"|M={M} - flow|")
        rn = run.curves.get(f"truncation_noise/M{M}")
        if rn is not None:  # runs saved before the noise rows were drawn have none
            e = np.abs(rn.observable("q_11") - fl.observable("q_11")[: rn.t.size])
            ax.semilogy(rn.t[1:], np.maximum(e[1:], 1e-16), color=f"C{i}", ls="--", lw=1,
                        label=f"|M={M} + noise rows - flow|")
    n = run.curves[f"truncation/M{s['orders'][0]}"].t.size
    ax.semilogy(fl.t[1:n], np.maximum(np.abs(r0.observable("q_11")[1:n]
                                             - fl.observable("q_11")[1:n]), 1e-16),
                "k-", lw=2, alpha=0.6, label="|SGD - flow| (one seed: the noise)")
    ax.set_xlabel("ODE time $t$ (short horizon)")
    ax.set_ylabel("error on $q_{11}$ (to the matrix flow at this d)")
    ax.legend(fontsize=7)
    ax.set_title("truncation error falls with the order M", fontsize=9)
    plot_theory_gaps(axs[2], run, "q_11", ("flow", "noise", "noise+finite-d"),
                      ["matrix flow (no correction)", 'correction="noise"',
                       'correction="noise+finite-d"'])
    axs[2].set_xlabel("ODE time $t = 4\\eta n/d$")
    axs[2].set_ylabel("SGD $-$ theory on $q_{11}$ (mean $\\pm$ s.e. over seeds)")
    axs[2].legend(fontsize=7)
    axs[2].set_title("theories against SGD in seed units", fontsize=9)
    fig.suptitle(f"Fig. 4 (D.3, $(G_1-G_2)^2$, tied, L=1, $\\gamma$=0): d={s['d']}, "
                 f"$\\eta$={s['eta']}, B={s['batch']} ($\\eta d/B$={s['eta'] * s['d'] / s['batch']:.3g}), "
                 f"init scale {s['scale']}, seeds {s['sgd_seeds']} [{s['mode']}]", fontsize=9)
    fig.tight_layout()
    return fig
