"""Fig. 3."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attndyn.numeric.attention.figures.common import (figure_seeds, figure_settings, first_cross,
                                                      fmt, hermite_np, mc_batches, mean_se, mpl,
                                                      quad, sgd_completed, slope)
from attndyn.numeric.core.claims import Claim, FigureRun, max_abs

if TYPE_CHECKING:
    from attndyn.numeric.attention.figures.common import TaskRunner
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.numeric.core.results import Trajectory

# the SGD runs by (curve, seed); one activation's numbers for the claims
_Runs = dict[tuple[str, int], "Trajectory"]
_Per = dict[str, Any]

__all__ = ["fig3"]


def _untied_loss_mc(pairs: Sequence[tuple[np.ndarray, np.ndarray]], acts: Sequence[str], n: int,
                    seed: Any) -> dict[str, tuple[float, float]]:
    """The exact finite-d population loss ``E_x (1/2)(h(G_1) - h(G_2))^2`` at the
    pairs, ``G_k = x^T U_k V_k^T x / sqrt d``, by Monte Carlo: ``{act: (mean, se)}``."""
    M1, M2 = (U @ V.T for U, V in pairs[:2])
    fns = {a: hermite_np(a)[0] for a in acts}
    vals: dict[str, list[float]] = {a: [] for a in acts}
    for X in mc_batches(M1.shape[0], n, seed):
        G1, G2 = quad(X, M1), quad(X, M2)
        for a, h in fns.items():
            vals[a].append(float(np.mean(0.5 * (h(G1) - h(G2)) ** 2)))
    return {a: mean_se(v) for a, v in vals.items()}


def _sym_overlap(r: Trajectory) -> np.ndarray:
    """Tr((M1 + M1^T)(M2 + M2^T)) / (2d) = q1_12 + q2_12 (= Cov(G_1, G_2), one token)."""
    ov: np.ndarray = r.observable("q1_12") + r.observable("q2_12")
    return ov


def _teacher_signal(model: UntiedModel, pairs: Sequence[Any] | None, act: str) -> float:
    """``E[sigma*'(Z_2)]``, ``Z_2 ~ N(m_2, q1_22 + q2_22)`` at the pairs (eq. 49's
    teacher factor; ``pairs=None``: ``Z_2 ~ N(0, 1)``), by Gauss-Hermite quadrature."""
    from numpy.polynomial import hermite_e as He

    if pairs is None:  # the d -> infinity law of a standard Gaussian teacher: N(0, 1)
        m2, v2 = 0.0, 1.0
    else:
        op = model.order_parameters(pairs)
        m2, v2 = float(op["m"][1]), float(op["q1"][1, 1] + op["q2"][1, 1])
    z, w = He.hermegauss(40)
    return float(np.sum(w * hermite_np(act)[1](m2 + math.sqrt(max(v2, 0.0)) * z))
                 / math.sqrt(2 * math.pi))


def _fig3_loss_gap(s: dict[str, Any], acts: Sequence[str]) -> dict[str, Any]:
    """Exact finite-d loss (Monte Carlo) minus the Gaussian-equivalent ``Phi`` at the
    standard Gaussian start of each ``d`` in ``s["mc_d"]`` (the figure's start at its d)."""
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.numeric.attention.untied.coefficients import coefficients
    from attndyn.symbolic.losses import mse_teacher_student

    models = {a: UntiedModel(2, [0], mse_teacher_student(a)) for a in acts}
    out: dict[str, Any] = {"d": list(s["mc_d"]), "gap": {a: [] for a in acts},
                           "se": {a: [] for a in acts}, "phi": {a: [] for a in acts}}
    for dd in s["mc_d"]:
        pairs = gaussian_init(models[acts[0]], dd, seed=3000 + dd)
        op = models[acts[0]].order_parameters(pairs)
        ex = _untied_loss_mc(pairs, acts, int(s["mc_n"]), seed=[6000 + dd])
        for a in acts:
            phi = coefficients(models[a]).phi(op["m"], op["q1"], op["q2"])
            out["phi"][a].append(phi)
            out["gap"][a].append(ex[a][0] - phi)
            out["se"][a].append(ex[a][1])
    return out


def _law_curve(act: str) -> str:
    """The SGD task name of ``act``'s runs from draws of the law (one per seed)."""
    return f"{act}:law"


def _sgd_setup(curve: str, sgd_seed: int, s: dict[str, Any]
               ) -> tuple[UntiedModel, list[Any], np.ndarray, dict[str, Any]]:
    """SGD task of Fig. 3: activation ``curve``, the figure's one standard Gaussian start
    (the theory is from the same matrices), SGD seed ``sgd_seed``; ``"<act>:law"``: a draw
    of the standard Gaussian law of the pairs per seed (``seed=[init_seed, sgd_seed]``), the
    SGD side of the ``d -> infinity`` limit's claim."""
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.symbolic.losses import mse_teacher_student

    act, law = (curve[:-4], True) if curve.endswith(":law") else (curve, False)
    if act not in s["acts"] or (law and act not in s["law_acts"]):
        allowed = list(s["acts"]) + [_law_curve(a) for a in s["law_acts"]]
        raise ValueError(f"fig3: unknown curve {curve!r}; allowed {allowed}")
    m = UntiedModel(2, [0], mse_teacher_student(act))
    pairs = gaussian_init(m, s["d"], seed=np.random.SeedSequence([s["init_seed"], int(sgd_seed)])
                          if law else s["init_seed"])
    return (m, pairs, np.linspace(0.0, s["T"], s["n_t"]),
            {"time": "slow", "_steps_per_unit": s["d"] / s["eta"]})


def _corrected(model: UntiedModel, init: Any, t: np.ndarray, eta: float, batch: int, name: str,
               correction: str, **kw: Any) -> tuple[Trajectory | None, str]:
    """The model's theory ``name`` with ``correction`` from ``init`` (the correction API of
    ``compare``), or ``(None, reason)`` when the model does not take it."""
    try:
        th = model.theory
        corr = th.correction(correction)
        corr.check(name, 2)
        res = corr.apply(th, init, t, name=name, order=2, check=None, words=None,
                         eta=float(eta), batch=int(batch), **kw)
    except Exception as exc:  # noqa: BLE001 - a correction that cannot run is reported, not fatal
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return res, ""


def _fig3_settings(mode: str, seeds: int | Sequence[int] | None, overrides: dict[str, Any]
                   ) -> tuple[dict[str, Any], list[int]]:
    """The figure's settings (recorded in its JSON) and its SGD seeds."""
    noise_kw = {k: overrides.pop(k) for k in ("noise_paths", "noise_dt") if k in overrides}
    s = figure_settings("fig3", mode, overrides)
    seed_list = figure_seeds(seeds, 0, s.pop("seeds"))
    d = s["d"]
    # the linear-noise flow's shift (correction="noise" at any horizon): noise paths and the
    # fast-time step (0.1 instead of 0.2 moved the h1 shifts by at most 0.3 %, d = 80)
    s.update(noise_paths=int(noise_kw.get("noise_paths", 8)),
             noise_dt=float(noise_kw.get("noise_dt", 0.2)), noise_seed=5000 + d)
    s.update(init_seed=3000 + d, sgd_seeds=seed_list, init="standard gaussian_init pairs",
             time="slow tau = eta n/d", observable="q1_12 + q2_12",
             eta_d_over_B=s["eta"] * d / s["batch"],
             law="UntiedLaw([gaussian_pair(1), gaussian_pair(1)]): law runs start from "
                 "gaussian_init(seed=[init_seed, sgd_seed])", limit_seed=4000 + d)
    return s, seed_list


def _theory_vs_sgd(run: FigureRun, act: str, s: dict[str, Any], seed_list: Sequence[int],
                   runs: _Runs) -> _Per:
    """SGD from the figure's one start against the slaved flow from the same matrices, and
    against it plus the untied linear-noise flow's shift (``correction="noise"``, any
    horizon; with the finite-width correction as well where the loss has one): the numbers
    of the claims for ``act``."""
    from attndyn.numeric.attention.figures.common import seed_z
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.numeric.attention.untied.fastslow import untied_flow
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.symbolic.losses import mse_teacher_student

    m = UntiedModel(2, [0], mse_teacher_student(act))
    pairs = gaussian_init(m, s["d"], seed=s["init_seed"])
    ps = []
    for sd in seed_list:
        run.curves[f"{act}/sgd/seed{sd}"] = runs[(act, sd)]
        ps.append(_sym_overlap(runs[(act, sd)]))
    tt = runs[(act, seed_list[0])].t
    f = untied_flow(m, pairs, tt, mode="slaved")
    run.curves[f"{act}/theory_slaved"] = f
    n = min(len(x) for x in ps)  # a diverged run is shorter
    pm = np.mean([x[:n] for x in ps], axis=0)
    th = _sym_overlap(f)
    n = min(th.size, pm.size)
    same = f.t.size == tt.size
    Y = np.array([x[:n] for x in ps])
    out: _Per = {"err": max_abs(th[:n] - pm[:n]) if same else float("inf"),
                 "z": seed_z(Y, th[:n])[:2] if same else (float("inf"),) * 2,
                 "tsig": _teacher_signal(m, pairs, act),
                 "tsig_lim": _teacher_signal(m, None, act)}
    if same:
        out.update(_noise_curves(run, act, m, pairs, tt, f, Y, s))
    pre = (np.abs(th[:n]) < 0.1) & (np.abs(pm[:n]) < 0.1)
    out["err_pre"] = max_abs((th[:n] - pm[:n])[pre]) if pre.any() else float("nan")
    out["esc_th"] = first_cross(tt[:n], np.abs(th[:n]), 0.1)
    out["final"] = (float(pm[-1]), float(th[-1]) if th.size else float("nan"))
    out["esc"] = first_cross(tt, np.abs(pm), 0.1)
    return out


#: the linear-noise flow's shift is drawn up to this d (21 s CPU per curve at d = 80), its
#: finite-d version (the shift along the flow of Phi_d: 51 s for h2, 167 s for h3) up to the next
_NOISE_FLOW_MAX_D = 128
_NOISE_FD_MAX_D = 80


def _noise_curves(run: FigureRun, act: str, m: UntiedModel, pairs: Sequence[Any], tt: np.ndarray,
                  f: Trajectory, Y: np.ndarray, s: dict[str, Any]) -> _Per:
    """The slaved flow plus the linear-noise flow's shift (``correction="noise"``,
    ``noise_method="flow"``) and, where the loss has a finite-width correction (degree
    3-6), the finite-d slaved flow plus the same shift (``"noise+finite-d"``): curves and
    rms z against the SGD runs ``Y``; the shift's stated error in seed standard errors."""
    import copy

    from attndyn.numeric.attention.figures.common import seed_z
    from attndyn.numeric.attention.untied.noise import add_shift
    from attndyn.numeric.attention.untied.noise_flow import noise_flow_shift

    n = Y.shape[1]
    if s["d"] > _NOISE_FLOW_MAX_D:
        return {"no_noise": f"d = {s['d']} > {_NOISE_FLOW_MAX_D}: the linear-noise flow costs "
                            "about d^4 (d^3 products over d / dt steps); not run"}
    c0 = time.process_time()
    try:
        sh = noise_flow_shift(m, pairs, tt, eta=s["eta"], batch=s["batch"],
                              seed=s["noise_seed"], paths=int(s["noise_paths"]),
                              dt=float(s["noise_dt"]), sub_batch=s["d"])
    except (ValueError, ArithmeticError, RuntimeError) as exc:
        return {"no_noise": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    out: _Per = {"noise_cpu_s": time.process_time() - c0}
    fn = copy.deepcopy(f)
    add_shift(m, fn, sh)
    fn.params.update(correction="noise", noise_method="flow")
    run.curves[f"{act}/theory_slaved_noise"] = fn
    out["z_noise"] = seed_z(Y, _sym_overlap(fn)[:n])[:2]
    i1, i2 = sh["names"].index("q1_12"), sh["names"].index("q2_12")
    shift = sh["delta"][i1] + sh["delta"][i2]
    se_seed = Y.std(axis=0, ddof=1)[1:] / math.sqrt(Y.shape[0])
    se_sh = np.hypot(sh["se"][i1], sh["se"][i2])[1:n]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["noise_se_in_seed_se"] = float(np.max(np.where(se_seed > 0, se_sh / se_seed, 0.0)))
    out["noise_shift_max"] = max_abs(shift[:n])
    out["noise_lr_max"] = max_abs((sh["lr"][i1] + sh["lr"][i2])[:n])
    from attndyn.numeric.attention.untied.fastslow import untied_flow
    ff = untied_flow(m, pairs, np.asarray(tt) * s["d"], mode="full")  # with the fast layer
    if ff.status == 0 and ff.t.size == len(tt):
        out["z_full"] = seed_z(Y, _sym_overlap(ff)[:n])[:2]
        out["z_full_noise"] = seed_z(Y, (_sym_overlap(ff) + shift)[:n])[:2]
    fd, _ = _corrected(m, pairs, tt, s["eta"], s["batch"], "slaved", "finite-d", time="slow")
    if fd is not None and fd.t.size == tt.size and act != "h1":  # h1: degree 2, no finite-d term
        run.curves[f"{act}/theory_slaved_finite_d"] = fd
        out["z_fd"] = seed_z(Y, _sym_overlap(fd)[:n])[:2]
        out["z_fd_plus_shift"] = seed_z(Y, (_sym_overlap(fd) + shift)[:n])[:2]
        if s["d"] > _NOISE_FD_MAX_D:
            out["no_noise_fd"] = (f"d = {s['d']} > {_NOISE_FD_MAX_D}: the finite-d linear-noise "
                                  "flow is not run (167 s CPU for h3 at d = 80, about d^4)")
            return out
        try:  # the shift along the finite-d flow itself (its drift is that of Phi_d)
            c1 = time.process_time()
            sh_fd = noise_flow_shift(m, pairs, tt, eta=s["eta"], batch=s["batch"],
                                     seed=s["noise_seed"], paths=int(s["noise_paths"]),
                                     dt=float(s["noise_dt"]), sub_batch=s["d"], finite_d=True)
            out["noise_fd_cpu_s"] = time.process_time() - c1
        except (ValueError, ArithmeticError, RuntimeError) as exc:
            out["no_noise_fd"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            return out
        fdn = copy.deepcopy(fd)
        add_shift(m, fdn, sh_fd)
        run.curves[f"{act}/theory_slaved_noise_finite_d"] = fdn
        out["z_noise_fd"] = seed_z(Y, _sym_overlap(fdn)[:n])[:2]
        j1, j2 = sh_fd["names"].index("q1_12"), sh_fd["names"].index("q2_12")
        se_fd = np.hypot(sh_fd["se"][j1], sh_fd["se"][j2])[1:n]
        with np.errstate(divide="ignore", invalid="ignore"):
            out["noise_fd_se_in_seed_se"] = float(np.max(np.where(se_seed > 0, se_fd / se_seed,
                                                                  0.0)))
    return out


def _limit_vs_law(run: FigureRun, act: str, s: dict[str, Any], seed_list: Sequence[int],
                  runs: _Runs) -> dict[str, Any]:
    """SGD from draws of the standard Gaussian law (one per seed) against the untied
    ``d -> infinity`` limit from that law (``limit_flow``, Richardson over
    ``limit_sizes``): rms z over the plotted times, z at ``tau = 0``, the limit's stated
    error."""
    from attndyn.numeric.attention.figures.common import seed_z
    from attndyn.numeric.attention.untied.limit import UntiedLaw, gaussian_pair, limit_flow
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.symbolic.losses import mse_teacher_student

    m = UntiedModel(2, [0], mse_teacher_student(act))
    ps = []
    for sd in seed_list:
        r = runs[(_law_curve(act), sd)]
        run.curves[f"{act}/sgd_law/seed{sd}"] = r
        ps.append(_sym_overlap(r))
    tt = runs[(_law_curve(act), seed_list[0])].t
    c0 = time.process_time()
    lim = limit_flow(m, UntiedLaw([gaussian_pair(1.0), gaussian_pair(1.0)]), tt,
                     sizes=tuple(s["limit_sizes"]), rotations=int(s["limit_rotations"]),
                     seed=s["limit_seed"])
    out: dict[str, Any] = {"cpu_s": time.process_time() - c0, "status": lim.status,
                           "message": lim.message}
    if lim.status != 0 or lim.t.size != tt.size:
        return out
    run.curves[f"{act}/limit"] = lim
    n = min(len(x) for x in ps)
    Y = np.array([x[:n] for x in ps])
    th = _sym_overlap(lim)[:n]
    err = (lim.error["q1_12"] + lim.error["q2_12"])[:n]
    rms, mx, z = seed_z(Y, th, paired=False)
    se = Y.std(axis=0, ddof=1) / math.sqrt(Y.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        err_se = float(np.max(np.where(se[1:] > 0, err[1:] / se[1:], 0.0))) if n > 1 else 0.0
    out.update(z=(rms, mx), z0=float(z[0]), err=float(np.max(err)), err_in_se=err_se,
               gap=max_abs(th - Y.mean(axis=0)), final=(float(Y[:, -1].mean()), float(th[-1])))
    if s["d"] <= _LAW_FLOW_MAX_D:
        out.update(_draw_flows(m, s, seed_list, tt, Y, th, err))
    return out


#: the per-draw finite-d flows of the limit's claim are run up to this d (cost ~ d^3 a run)
_LAW_FLOW_MAX_D = 400


def _draw_flows(m: UntiedModel, s: dict[str, Any], seed_list: Sequence[int], tt: np.ndarray,
                Y: np.ndarray, th: np.ndarray, err: np.ndarray) -> dict[str, Any]:
    """The finite-d slaved flow from each seed's draw of the law (the limit plus its O(1/d)
    correction at this d): paired rms z against SGD, and the draws' mean minus the limit
    against the limit's stated error."""
    from attndyn.numeric.attention.figures.common import seed_z
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.numeric.attention.untied.fastslow import untied_flow

    n = Y.shape[1]
    rows = []
    for sd in seed_list:
        draw = gaussian_init(m, s["d"], seed=np.random.SeedSequence([s["init_seed"], int(sd)]))
        f = untied_flow(m, draw, tt, mode="slaved")
        if f.status != 0 or f.t.size != tt.size:
            return {"flows_message": f.message}
        rows.append(_sym_overlap(f)[:n])
    F = np.array(rows)
    off = F.mean(axis=0) - th
    return {"z_draws": seed_z(Y, F)[:2], "offset": max_abs(off),
            "offset_within_error": bool(np.all(np.abs(off) <= err))}


def fig3(mode: str = "quick", seeds: int | Sequence[int] | None = None,
         runner: TaskRunner | None = None, **overrides: Any) -> FigureRun:
    """Figure 3: untied attention ``S_k = U_k V_k^T``, single token, MSE
    teacher-student with ``h1``, ``h2``, ``h3``, standard Gaussian
    ``gaussian_init`` pairs (caption). Drawn: the symmetric overlap
    ``Tr((M_1 + M_1^T)(M_2 + M_2^T))/(2d) = q1_12 + q2_12`` on the slow time
    ``tau = eta n / d``, SGD against the fast-slow theory (the slaved matrix
    flow ``untied_flow(mode="slaved")``: means at the critical point ``m*(q)``
    of eq. 29, moments by eqs. 31-32 exactly at this d), and, for ``law_acts``,
    SGD from draws of the standard Gaussian law (one per seed) against the untied
    ``d -> infinity`` limit from that law (``limit_flow``, Theorem 3) with its
    stated error."""
    from attndyn.numeric.attention.figures.common import run_sgd_tasks

    s, seed_list = _fig3_settings(mode, seeds, overrides)
    t0 = time.perf_counter()
    acts = list(s["acts"])
    law_acts = [a for a in s["law_acts"] if a in acts]
    tasks = ([(a, sd) for a in acts for sd in seed_list]
             + [(_law_curve(a), sd) for a in law_acts for sd in seed_list])
    runs = run_sgd_tasks("fig3", s, tasks, runner)
    run = FigureRun("fig3", "Fig. 3: untied, single token, symmetric overlap", s)
    per = {a: _theory_vs_sgd(run, a, s, seed_list, runs) for a in acts}
    lim = {a: _limit_vs_law(run, a, s, seed_list, runs) for a in law_acts}
    hs = [a for a in acts if abs(per[a]["tsig_lim"]) < 1e-9]
    mc = _fig3_loss_gap(s, hs) if hs else {}
    run.extra.update(
        loss_gap=mc, teacher_signal={a: p["tsig"] for a, p in per.items()},
        teacher_signal_limit={a: p["tsig_lim"] for a, p in per.items()},
        theory_rms_z={a: p["z"][0] for a, p in per.items()},
        theory_noise_rms_z={a: p["z_noise"][0] for a, p in per.items() if "z_noise" in p},
        theory_finite_d_rms_z={a: p["z_fd"][0] for a, p in per.items() if "z_fd" in p},
        theory_noise_finite_d_rms_z={a: p["z_noise_fd"][0] for a, p in per.items()
                                     if "z_noise_fd" in p},
        theory_full_rms_z={a: p["z_full"][0] for a, p in per.items() if "z_full" in p},
        theory_full_noise_rms_z={a: p["z_full_noise"][0] for a, p in per.items()
                                 if "z_full_noise" in p},
        theory_finite_d_plus_gaussian_shift_rms_z={a: p["z_fd_plus_shift"][0]
                                                   for a, p in per.items()
                                                   if "z_fd_plus_shift" in p},
        noise_shift={a: {k: p[k] for k in ("noise_shift_max", "noise_lr_max",
                                           "noise_se_in_seed_se", "noise_cpu_s",
                                           "noise_fd_se_in_seed_se", "noise_fd_cpu_s",
                                           "no_noise_fd") if k in p}
                     for a, p in per.items()},
        noise_correction_unavailable={a: p["no_noise"] for a, p in per.items() if "no_noise" in p},
        theory_err={a: p["err"] for a, p in per.items()},
        theory_err_before_escape={a: p["err_pre"] for a, p in per.items()},
        final={a: p["final"] for a, p in per.items()},
        escape_tau={a: p["esc"] for a, p in per.items()},
        escape_tau_theory={a: p["esc_th"] for a, p in per.items()},
        limit={a: {k: v for k, v in r.items() if k != "message"} for a, r in lim.items()})
    _fig3_claims(run, s, seed_list, per, lim, mc)
    run.claims.insert(0, sgd_completed(run))
    run.plotter = _plot_fig3
    run.wall_s = time.perf_counter() - t0
    return run


def _fig3_claims(run: FigureRun, s: dict[str, Any], seed_list: Sequence[int],
                 per: dict[str, _Per], lim: dict[str, dict[str, Any]], mc: dict[str, Any]) -> None:
    """The claims of Fig. 3 from the per-activation numbers."""
    from attndyn.numeric.attention.figures.common import Z_OK, fmt_z

    acts, d = list(s["acts"]), s["d"]
    esc = {a: per[a]["esc"] for a in acts}
    cond = (f"tau <= {s['T']:g}, d = {d}, eta = {s['eta']}, B = {s['batch']} (eta d/B = "
            f"{s['eta'] * d / s['batch']:.3g}), {len(seed_list)} SGD seeds from the one start "
            "of the theory; rms z over the plotted times")
    order = sorted(acts, key=lambda a: esc[a])
    run.extra["escape_order_sgd"] = order
    if len(acts) > 1:
        run.claims.append(Claim(
            "weak recovery is delayed for higher-order activations: SGD escape time "
            + " < ".join(acts),
            all(esc[a] < esc[b] for a, b in zip(acts, acts[1:])),
            ", ".join(f"{a}: tau = {esc[a]:.3g}" for a in acts)
            + f" (first tau with |overlap| >= 0.1); measured order {' < '.join(order)}",
            cond + "; caption of Fig. 3"))
    run.claims.append(Claim(
        "|symmetric overlap| grows to at least 0.1 (weak recovery) in SGD for h1, h2, h3",
        all(np.isfinite(esc[a]) for a in acts),
        ", ".join(f"{a}: final SGD {per[a]['final'][0]:.3f}, theory {per[a]['final'][1]:.3f}, "
                  f"reaches 0.1 at tau = {esc[a]:.3g}" for a in acts), cond))
    sig = [a for a in acts if abs(per[a]["tsig_lim"]) >= 1e-9]
    if sig:
        inf2 = (float("inf"),) * 2
        run.claims.append(Claim(
            "the fast-slow theory (slaved flow) tracks SGD over the whole horizon where the "
            "teacher gives a first-order signal as d -> infinity (eq. 49: "
            + ", ".join(sig) + ")",
            all(min(per[a]["z"][0], per[a].get("z_noise", inf2)[0]) <= Z_OK for a in sig),
            ", ".join(f"{a}: slaved flow {fmt_z(*per[a]['z'])}"
                      + (f", with correction=\"noise\" (the linear-noise flow's shift, at most "
                         f"{fmt(per[a]['noise_shift_max'])} on the overlap, its learning-rate "
                         f"part {fmt(per[a]['noise_lr_max'])}; stated error at most "
                         f"{per[a]['noise_se_in_seed_se']:.2f} seed standard errors) "
                         f"{fmt_z(*per[a]['z_noise'])}"
                         if "z_noise" in per[a]
                         else f", correction=\"noise\" not drawn ({per[a].get('no_noise', '')})")
                      + f"; max |theory - SGD| = {fmt(per[a]['err'])}, escape tau SGD "
                      f"{esc[a]:.3g} / theory {per[a]['esc_th']:.3g}" for a in sig)
            + f" (held when the better theory is within rms z {Z_OK:g})",
            cond + "; E[sigma*'(Z_2)] at the start: "
            + ", ".join(f"{a}: {per[a]['tsig']:+.3f}" for a in acts)
            + "; as d -> infinity (m_2 = O(d^-1/2) -> 0, Var G_2 -> 1): "
            + ", ".join(f"{a}: {per[a]['tsig_lim']:+.3f}" for a in acts)))
    if lim:
        run.claims.append(_limit_claim(s, seed_list, lim))
        # the limit's cost beside the claims, not in them: a claim is the same on every rerun
        run.extra["limit_cpu_s"] = {a: float(r["cpu_s"]) for a, r in lim.items() if "cpu_s" in r}
    hs = [a for a in acts if a not in sig]
    if hs and mc:
        run.claims.append(_loss_gap_claim(s, hs, per, mc))


def _limit_claim(s: dict[str, Any], seed_list: Sequence[int], lim: dict[str, dict[str, Any]]
                 ) -> Claim:
    """Claim: the untied ``d -> infinity`` limit against SGD from draws of its law."""
    from attndyn.numeric.attention.figures.common import Z_OK, fmt_z

    def held(r: dict[str, Any]) -> bool:
        if "z_draws" in r:  # the limit with its finite-d correction at this d
            ok: bool = r["z_draws"][0] <= Z_OK and r["offset_within_error"]
            return ok
        return "z" in r and r["z"][0] <= Z_OK
    meas = []
    for a, r in lim.items():
        if "z" not in r:
            meas.append(f"{a}: limit not available ({r['message'][:160]})")
            continue
        meas.append((f"{a}: SGD against the finite-d slaved flow of its own draw (paired) "
                     f"{fmt_z(*r['z_draws'])}; mean of those flows minus the limit at most "
                     f"{fmt(r['offset'])}, within the limit's stated error: "
                     f"{r['offset_within_error']}; " if "z_draws" in r else f"{a}: ")
                    + f"SGD against the limit itself {fmt_z(*r['z'])}, z at tau = 0 "
                    f"{r['z0']:+.2f}; max |limit - SGD mean| {fmt(r['gap'])}, final SGD "
                    f"{r['final'][0]:.3f} / limit {r['final'][1]:.3f}; limit's stated error "
                    f"{fmt(r['err'])} (at most {r['err_in_se']:.2f} seed standard errors)")
    return Claim(
        "the untied d -> infinity limit (limit_flow from the law, Theorem 3) with its finite-d "
        "correction at this d (the slaved flow of each draw) tracks SGD started from draws of "
        "the same law over the whole horizon (" + ", ".join(lim) + ")",
        all(held(r) for r in lim.values()), "; ".join(meas),
        f"{len(seed_list)} SGD seeds, one draw of UntiedLaw([gaussian_pair(1), gaussian_pair(1)]) "
        f"each (student and teacher), d = {s['d']}, eta d/B = "
        f"{s['eta'] * s['d'] / s['batch']:.3g}; the limit by Richardson over d in "
        f"{tuple(s['limit_sizes'])} ({s['limit_rotations']} Haar rotations each); a draw's "
        "finite-d flow sits O(1/d) above the limit (docs/untied.md: gap ~ d^-0.89), more than the "
        "seed noise of the draws' mean, so the limit is judged with that correction: held when "
        f"the paired rms z <= {Z_OK:g} and the draws' mean flow is within the limit's stated "
        "error at every time (without the per-draw flows, d > "
        f"{_LAW_FLOW_MAX_D}: when SGD is within rms z {Z_OK:g} of the limit itself)")


def _loss_gap_claim(s: dict[str, Any], hs: Sequence[str], per: dict[str, _Per],
                    mc: dict[str, Any]) -> Claim:
    """Claim: ``Phi`` approaches the exact finite-d loss like ``1/d`` (h2, h3)."""
    from attndyn.numeric.attention.figures.common import fmt_z

    sl = {a: slope(mc["d"], [max(g, 1e-300) for g in mc["gap"][a]]) for a in hs}
    return Claim(
        "h2, h3: the theory's Gaussian-equivalent potential Phi approaches the exact finite-d "
        "loss like 1/d (Theorem 1)",
        all(np.isfinite(sl[a]) and sl[a] <= -0.7 and min(mc["gap"][a]) > 0 for a in hs),
        "; ".join(f"{a}: E loss - Phi at the start " + ", ".join(
            f"{fmt(g)} +- {fmt(e)} (d={dd})" for dd, g, e in zip(mc["d"], mc["gap"][a],
                                                                   mc["se"][a]))
            + f", slope in d {sl[a]:.2f}" for a in hs)
        + "; at d = " + str(s["d"]) + " the theory misses SGD by "
        + ", ".join(f"{a}: {fmt(per[a]['err'])}, {fmt_z(*per[a]['z'])} (escape tau SGD "
                    f"{per[a]['esc']:.3g} / theory {per[a]['esc_th']:.3g})"
                    + "".join(f"; {lab} {fmt_z(*per[a][key])}" for key, lab in (
                        ("z_noise", "with correction=\"noise\""),
                        ("z_fd", "with correction=\"finite-d\""),
                        ("z_noise_fd", "with both (the noise shift along the finite-d flow, "
                         f"stated error at most {per[a].get('noise_fd_se_in_seed_se', 0):.2f} "
                         "seed standard errors)")) if key in per[a]) for a in hs),
        f"standard Gaussian starts at each d ({s['mc_n']} inputs); the escape of h2, h3 is "
        "seeded by O(1/d) terms, the same order as this non-Gaussian correction, so at these "
        "d the theory is not expected to follow SGD through the escape")


def _plot_fig3(run: FigureRun, fig: Any = None) -> Any:
    plt = mpl()
    s = run.settings
    mc = run.extra.get("loss_gap") or {}
    if fig is None:
        fig, axs = plt.subplots(1, 2 if mc else 1, figsize=(11, 4.3) if mc else (6.5, 4.3))
        axs = np.atleast_1d(axs)
    else:
        axs = np.atleast_1d(fig.axes)
    ax = axs[0]
    if mc:
        bx = axs[1]
        dd = np.asarray(mc["d"], float)
        for i, act in enumerate(s["acts"]):
            if act in mc["gap"]:
                g = np.asarray(mc["gap"][act])
                bx.errorbar(dd, g, yerr=2 * np.asarray(mc["se"][act]), marker="o",
                            color=f"C{i}", label=f"{act}: $E\\,$loss$_d - \\Phi$ at the start")
                bx.loglog(dd, g[0] * dd[0] / dd, color=f"C{i}", lw=0.7, ls=":")
        bx.set_xscale("log")
        bx.set_yscale("log")
        bx.minorticks_off()
        bx.set_xticks(dd)
        bx.set_xticklabels([f"{x:g}" for x in dd])
        bx.set_xlabel("$d$")
        bx.set_ylabel("finite-d loss minus Gaussian-equivalent $\\Phi$")
        bx.set_title("non-Gaussian correction (Monte Carlo; dotted: $\\propto 1/d$)", fontsize=8)
        bx.legend(fontsize=7)
    for i, act in enumerate(s["acts"]):
        first = True
        for k, r in run.curves.items():
            if k.startswith(f"{act}/sgd/"):
                ax.plot(r.t, _sym_overlap(r), color=f"C{i}", lw=2, alpha=0.6,
                        label=f"{act}: SGD" if first else None)
                first = False
        f = run.curves[f"{act}/theory_slaved"]
        ax.plot(f.t, _sym_overlap(f), color=f"C{i}", ls="--", lw=1.2,
                label=f"{act}: fast-slow theory")
        if f"{act}/limit" in run.curves:
            _plot_limit(ax, run, act, f"C{i}")
        if f"{act}/theory_slaved_noise" in run.curves:
            fn = run.curves[f"{act}/theory_slaved_noise"]
            ax.plot(fn.t, _sym_overlap(fn), color=f"C{i}", ls=":", lw=1.5,
                    label=f"{act}: theory, correction=\"noise\"")
        if f"{act}/theory_slaved_noise_finite_d" in run.curves:
            fn = run.curves[f"{act}/theory_slaved_noise_finite_d"]
            ax.plot(fn.t, _sym_overlap(fn), color=f"C{i}", ls="-.", lw=1.0,
                    label=f"{act}: theory, noise + finite-d")
    ax.set_xlabel("slow time $\\tau = \\eta n/d$")
    ax.set_ylabel("$\\mathrm{Tr}[(M_1+M_1^T)(M_2+M_2^T)]/(2d)$")
    ax.legend(fontsize=7)
    fig.suptitle(f"Fig. 3 (untied, L=1, MSE teacher-student, standard Gaussian init): d={s['d']}, "
                 f"$\\eta$={s['eta']}, B={s['batch']}, seeds {s['sgd_seeds']} [{s['mode']}]",
                 fontsize=9)
    ax.set_title("symmetric overlap: SGD and the fast-slow theory (slaved flow)", fontsize=9)
    fig.tight_layout()
    return fig


def _plot_limit(ax: Any, run: FigureRun, act: str, color: str) -> None:
    """SGD from draws of the law (thin) and the ``d -> infinity`` limit with its stated error."""
    first = True
    for k, r in run.curves.items():
        if k.startswith(f"{act}/sgd_law/"):
            ax.plot(r.t, _sym_overlap(r), color=color, lw=0.6, alpha=0.5,
                    label=f"{act}: SGD, one draw of the law per seed" if first else None)
            first = False
    lim = run.curves[f"{act}/limit"]
    y = _sym_overlap(lim)
    e = lim.error["q1_12"] + lim.error["q2_12"]
    ax.plot(lim.t, y, color="k", ls="-.", lw=1.2, label=f"{act}: limit $d\\to\\infty$ (from the law)")
    ax.fill_between(lim.t, y - e, y + e, color="k", alpha=0.15, lw=0)

