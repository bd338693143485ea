"""Strong recovery under the Polyak-Lojasiewicz condition (paper 003, appendix D.5, Corollary 6).

Setting: one trainable tied student ``S_1 = W_1 W_1^T`` and a fixed teacher
``S_2``, ``L = 1``, weight decay ``gamma``, regularised potential
``Psi(t, q) = Phi(q) + (gamma/2) t_1`` (eq. 374) and ``Delta(t) = Psi - Psi*``
(eq. 380). Along the matrix flow ``dS_1/dt = -(P S_1 + S_1 P)`` with

    P = Gamma_11(q) S_1 + Gamma_12(q) S_2 + (gamma/4) I

(``Gamma`` in the symmetric convention, so ``dPsi = (2/d) Tr(P dS_1)``) the
dissipation is

    -dPsi/dt = (4/d) Tr(P^2 S_1)
             = 4 (Gamma_11^2 mu_111 + 2 Gamma_11 Gamma_12 mu_112 + Gamma_12^2 mu_122)   (gamma = 0)

a function of the words of length 3, so the Polyak-Lojasiewicz ratio of
Assumption 8 (eq. 376),

    c(t) = -(dPsi/dt) / (2 Delta(t)),

is computable at every trajectory point from its moments (finite-``d`` flow and
SGD alike). Assumption 8 asks ``c(t) >= c > 0`` for ``t >= T_0``; then
``Delta(t) <= Delta(T_0) exp(-2c (t - T_0))`` (eq. 382) and ``Delta`` falls below
``eps/2`` by ``T_eps = T_0 + log(2 Delta_0/eps) / (2c)`` (eq. 384), i.e. within
``n_eps = ceil(T_eps d / (4 eta))`` SGD steps (Corollary 6, eq. 378).

Checked case (:func:`check_recovery`, key ``"recovery"``): linear activation
``h1`` (MSE, ``gamma = 0``, so ``Psi* = 0``, reached at ``S_1 = S_2``), student
and teacher Wishart with aspect 4 (factors ``d x 4d``), so the teacher's
spectrum is bounded away from 0. Near the minimiser ``Delta ~ Tr(E^2)/d`` and
``-dPsi/dt ~ (4/d) Tr(E^2 S_2)`` (``E = S_1 - S_2``): the Hessian gives the local
PL constant ``c_H = 2 lambda_min(S_2)``, ``lambda_min -> t_2 (1 - aspect^-1/2)^2``
as ``d -> infinity``. The measured ``c(t)`` decreases along the trajectory
towards ``c_H``, so ``c = c_H`` is the constant Assumption 8 can use on
``[T_0, infinity)`` (checked on the window ``[T_0, T_end]``), and the predicted
rate of the second phase is ``2 c_H = 4 lambda_min(S_2)``.

The ladder: (1) on the finite-``d`` flow, ``2 c(t)`` from the moments against
``-d log Delta/dt`` by differences; (2) the exponent ``log(Delta(T_0)/Delta(T_1))``
measured on SGD, the flow and the exact limit against the predicted
``int_{T_0}^{T_1} 2 c(s) ds`` (SGD: from its own moments; limit: from the flow at
the largest ``d``); (3) the bound (382) with ``c = c_H`` and the time (384)
against the measured first time with ``Delta <= eps/2``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from attndyn.numeric.attention.theorems.cor3 import jsonable, crossing_time, overlap_p12
from attndyn.numeric.core.checks import CheckResult, register
from attndyn.numeric.core.validate import resolve_seed

__all__ = ["pl_ratio", "second_phase", "check_recovery", "RecoveryConfig", "config"]


@dataclass(frozen=True)
class RecoveryConfig:
    """Sizes and settings of one budget of :func:`check_recovery` (tied
    strong recovery, D.5 / Corollary 6): the student's factor aspect and scale, the
    weak-recovery threshold ``c_wr`` that starts the second phase, the horizon ``T_end``
    on ``n_t`` points, the flow and SGD dimensions, the SGD seeds, ``eta`` and batch, and
    the fraction ``eps_fraction`` of ``Delta`` that ends the measured window.

        >>> cfg = config("small")
        >>> isinstance(cfg, RecoveryConfig), cfg.d_flow, cfg.d_sgd
        (True, 48, 24)
    """
    activation: str = "h1"
    aspect: int = 4                 # factor widths d_k = aspect * d
    scale: float = 1.0              # t_k = scale^2
    c_wr: float = 0.1               # T_0: weak recovery |p_12| >= c_wr (eq. 18)
    T_end: float = 4.0
    n_t: int = 161                  # checkpoints on [0, T_end]
    d_flow: int = 80                # the largest-d flow (and its limit)
    d_sgd: int = 32
    n_seeds: int = 3
    eta: float = 0.01
    batch: int = 32
    eps_fraction: float = 0.05      # eps = eps_fraction * Delta(T_0)


_CONFIGS = {"small": RecoveryConfig(d_flow=48, d_sgd=24, n_seeds=2, T_end=4.5, n_t=181),
            "default": RecoveryConfig(),
            "slow": RecoveryConfig(d_flow=160, d_sgd=64, n_seeds=4, eta=0.005, T_end=5.0,
                                   n_t=201)}


def config(budget: str) -> RecoveryConfig:
    """The :class:`RecoveryConfig` of a budget (``"small"``, ``"default"`` or ``"slow"``).

        >>> config("small").activation
        'h1'
    """
    if budget not in _CONFIGS:
        raise ValueError(f"budget must be one of {tuple(_CONFIGS)}, got {budget!r}")
    return _CONFIGS[budget]


def pl_ratio(model, traj, *, student: int = 0, teacher: int = 1, psi_star: float = 0.0) -> dict:
    """``Delta(t)``, the dissipation ``-dPsi/dt`` and the PL ratio ``c(t)`` (eq. 376) at
    every point of a tied trajectory with words up to length 3 (SGD with
    ``order=3`` or a matrix flow with ``order=3``).

    ``Delta = Phi(q) + (gamma/2) t_s - psi_star``; the dissipation is
    ``(4/d) Tr(P^2 S_s)`` with ``P = Gamma_ss S_s + Gamma_st S_t + (gamma/4) I`` (the
    gradient of ``Psi`` in ``S_s``, see the module docstring), written in the words
    ``mu_sss, mu_sst, mu_stt, mu_ss, mu_st, mu_s``. Only for one trainable student
    ``s`` and one fixed teacher ``t`` (``K = 2``).

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> W = model.gaussian_init(12, width=48, seed=3)
        >>> t = np.linspace(0.0, 1.0, 41)
        >>> flow = model.matrix_flow([w @ w.T for w in W], t, order=3)
        >>> pl = pl_ratio(model, flow)
        >>> rate = -np.gradient(np.log(pl["Delta"]), t)
        >>> bool(np.max(np.abs(rate[5:-5] - 2 * pl["c"][5:-5])) < 1e-2 * np.max(rate))
        True
    """
    if model.K != 2 or tuple(model.trainable) != (student,):
        raise ValueError("pl_ratio needs K = 2 with the student as the only trainable index")
    s, r = student, teacher
    g = float(model.weight_decay)
    mu = {w: traj.moment(w) for w in [(s,), (r,), (s, s), (s, r), (r, r), (s, s, s),
                                      (s, s, r), (s, r, r)]}
    n = traj.t.size
    Delta = np.empty(n)
    diss = np.empty(n)
    pot = model.potential
    for i in range(n):
        q = np.array([[mu[(s, s)][i], mu[(s, r)][i]], [mu[(s, r)][i], mu[(r, r)][i]]])
        G = model.gamma(q)
        a, b, e = G[s, s], G[s, r], g / 4.0
        # Tr(P^2 S)/d with P = a S + b T + e I, expanded in words (T fixed, S the student)
        tr = (a * a * mu[(s, s, s)][i] + 2 * a * b * mu[(s, s, r)][i] + b * b * mu[(s, r, r)][i]
              + 2 * a * e * mu[(s, s)][i] + 2 * b * e * mu[(s, r)][i] + e * e * mu[(s,)][i])
        diss[i] = 4.0 * tr
        phi = pot.phi_numeric(q) if pot is not None else math.nan
        Delta[i] = phi + 0.5 * g * mu[(s,)][i] - psi_star
    with np.errstate(divide="ignore", invalid="ignore"):
        c = diss / (2.0 * Delta)
    return {"t": traj.t.copy(), "Delta": Delta, "dissipation": diss, "c": c}


def _integral(t, y, a, b):
    """``int_a^b y dt`` by the trapezoid rule on the samples inside ``[a, b]``
    (``a``, ``b`` sample points)."""
    m = (t >= a - 1e-12) & (t <= b + 1e-12)
    return float(np.trapezoid(y[m], t[m]))


def second_phase(t, Delta, c, T0, T1, c_const) -> dict:
    """Measured against predicted decay on ``[T0, T1]`` (sample points of ``t``).

    ``measured_exponent = log(Delta(T0)/Delta(T1))``; ``predicted_exponent = int 2 c(s) ds``
    (eq. 382); ``mean_rate`` the least-squares slope of ``-log Delta``; ``bound_margin`` the
    largest ``log(Delta(t)/Delta(T0)) + 2 c_const (t - T0)`` (``<= 0`` when
    eq. 382 holds with ``c = c_const``).

        >>> t = np.linspace(0.0, 2.0, 21)
        >>> out = second_phase(t, np.exp(-2 * 0.5 * t), np.full(21, 0.5), 0.5, 1.5, 0.5)
        >>> round(out["measured_exponent"], 6), round(out["predicted_exponent"], 6)
        (1.0, 1.0)
        >>> round(out["mean_rate"], 6), out["bound_margin"] <= 1e-12
        (1.0, True)
    """
    i0, i1 = int(np.argmin(np.abs(t - T0))), int(np.argmin(np.abs(t - T1)))
    seg = slice(i0, i1 + 1)
    lt = np.log(Delta[seg])
    meas = float(lt[0] - lt[-1])
    pred = _integral(t, 2.0 * c, t[i0], t[i1]) if c is not None else math.nan
    rate = float(-np.polyfit(t[seg], lt, 1)[0])
    margin = float(np.max(lt - lt[0] + 2.0 * c_const * (t[seg] - t[i0])))
    return {"T0": float(t[i0]), "T1": float(t[i1]), "measured_exponent": meas,
            "predicted_exponent": pred,
            "exponent_error": abs(meas / pred - 1) if c is not None else math.nan,
            "mean_rate": rate, "local_rate_end": float(2 * c[i1]) if c is not None else math.nan,
            "bound_margin": margin}


def first_below(t, y, level, T0):
    m = np.nonzero((t >= T0) & (y <= level))[0]
    return float(t[m[0]]) if m.size else math.inf


#: acceptance of :func:`check_recovery`
EXPONENT_TOL = 0.10     # |measured / predicted exponent - 1| (SGD noise, finite d)
IDENTITY_TOL = 2e-3     # 2 c(t) vs -d log Delta/dt on the flow (difference error)
MARGIN_TOL = 0.05       # eq. (382) margin allowed for SGD noise (log units)


@register("recovery", "D.5, Cor. 6, eqs. (376)-(384)",
          "strong recovery under the PL condition: predicted vs measured second-phase rate")
def check_recovery(budget, seed) -> CheckResult:
    """Strong recovery (D.5) for the tied ``h1`` teacher-student case (module docstring).

    Held when: the PL ratio from the moments matches ``-d log Delta/dt`` on the flow
    within :data:`IDENTITY_TOL`; ``c(t) > 0`` on ``[T_0, T_end]`` (Assumption 8 on the
    window, with ``c = min(c_min, c_H)``); the measured decay exponents of SGD (each
    seed), the flow and the exact limit are within :data:`EXPONENT_TOL` of
    ``int 2c``; eq. (382) holds (margin <= :data:`MARGIN_TOL`) and every measured
    ``eps/2`` time is at most ``T_eps`` of eq. (384). ``worst`` is the largest exponent
    error.

        >>> r = check_recovery("small", 0)
        >>> r.key, r.verdict
        ('recovery', 'held')
    """
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student

    t_start = time.perf_counter()
    cfg = config(budget)
    ss = resolve_seed(seed)
    s_flow, s_sgd = ss.spawn(2)
    model = TiedModel(2, [0], mse_teacher_student(cfg.activation))
    grid = np.linspace(0.0, cfg.T_end, cfg.n_t)
    lam_lim = cfg.scale ** 2 * (1 - 1 / math.sqrt(cfg.aspect)) ** 2

    # rung 1: the large-d flow, its PL ratio, the identity, and the exact limit
    fr = _flow_rung(model, cfg, s_flow, grid)
    if fr is None:
        return CheckResult("recovery", "D.5, Cor. 6", "not applicable", 1, math.nan, "-",
                           detail=f"no weak recovery (|p_12| < {cfg.c_wr}) by t = {cfg.T_end}")
    # rung 2: SGD at a smaller d, each seed against its own PL ratio and its own flow
    sgd_rows = [_sgd_seed_phase(model, cfg, child, grid)
                for child in s_sgd.spawn(cfg.n_seeds)]

    ph_flow, ph_lim, hits, T_eps = fr["flow"], fr["limit"], fr["hits"], fr["T_eps"]
    errs = [ph_flow["exponent_error"], ph_lim["exponent_error"]] + \
        [p["exponent_error"] for p in sgd_rows]
    worst = float(max(errs))
    margins = [ph_flow["bound_margin"], ph_lim["bound_margin"]] + \
        [p["bound_margin"] for p in sgd_rows]
    # eq. (384) is testable where its T_eps falls inside the measured window
    eps_checks = [(hits[k], T_eps) for k in hits if T_eps <= cfg.T_end] + \
        [(p["T_eps_meas"], p["T_eps_pred"]) for p in sgd_rows if p["T_eps_pred"] <= cfg.T_end]
    eps_ok = all(m <= p for m, p in eps_checks)
    pl_ok = fr["c_min"] > 0 and all(p["c_min"] > 0 for p in sgd_rows)
    ok = (fr["ident"] <= IDENTITY_TOL and pl_ok and worst <= EXPONENT_TOL
          and max(margins) <= MARGIN_TOL and eps_ok)
    measured, expectation, detail = _recovery_text(cfg, fr, sgd_rows, lam_lim, margins,
                                                   eps_checks)
    data = {"config": dict(cfg.__dict__), "T0": fr["T0"], "c_min": fr["c_min"],
            "c_H": fr["c_H"], "lambda_min_limit": lam_lim, "identity_error": fr["ident"],
            "flow": ph_flow, "limit": ph_lim, "T_eps": T_eps, "eps": fr["eps"], "hits": hits,
            "sgd": sgd_rows, "c_trajectory": fr["pl"]["c"][::max(1, cfg.n_t // 40)].tolist()}
    return CheckResult("recovery", "D.5, Cor. 6, eqs. (376)-(384)", "held" if ok else "not held",
                       2 + cfg.n_seeds, worst, measured, bound=EXPONENT_TOL,
                       expectation=expectation, detail=detail, data=jsonable(data),
                       wall_s=time.perf_counter() - t_start)


def _flow_rung(model, cfg, s_flow, grid):
    """The large-d flow and the exact limit: the PL ratio, the identity error, ``T_0``, the
    second-phase exponents and the ``eps/2`` times against eq. (384); ``None`` without weak
    recovery by ``T_end``."""
    from attndyn.numeric.attention.tied.limit import law_of_factors, limit_flow
    W = model.gaussian_init(cfg.d_flow, width=cfg.aspect * cfg.d_flow, scale=cfg.scale,
                            seed=s_flow)
    fl = model.matrix_flow([w @ w.T for w in W], grid, order=3)
    if fl.status != 0:
        raise RuntimeError(f"matrix flow failed: {fl.message}")
    pl = pl_ratio(model, fl)
    T0 = crossing_time(fl.t, overlap_p12(fl), cfg.c_wr)
    if not math.isfinite(T0):
        return None
    T0 = float(grid[np.searchsorted(grid, T0)])
    win = grid >= T0
    fd = -np.gradient(np.log(pl["Delta"]), grid, edge_order=2)
    ident = float(np.max(np.abs(fd[win][1:-1] / (2 * pl["c"][win][1:-1]) - 1)))
    lam_min = float(np.linalg.eigvalsh(W[1] @ W[1].T)[0])
    c_H = 2.0 * lam_min
    c_min = float(np.min(pl["c"][win]))
    c_use = min(c_min, c_H)
    ph_flow = second_phase(grid, pl["Delta"], pl["c"], T0, cfg.T_end, c_use)
    lim = limit_flow(model, law_of_factors(model, W), grid)
    if lim.status != 0:
        raise RuntimeError(f"limit flow failed: {lim.message}")
    D_lim = np.array([model.potential.phi_numeric(np.array([[a, b], [b, e]]))
                      for a, b, e in zip(lim.moment((0, 0)), lim.moment((0, 1)),
                                         lim.moment((1, 1)))])
    ph_lim = second_phase(grid, D_lim, pl["c"], T0, cfg.T_end, c_use)
    D0 = float(pl["Delta"][np.searchsorted(grid, T0)])
    eps = cfg.eps_fraction * D0
    T_eps = T0 + math.log(2 * D0 / eps) / (2 * c_use)         # eq. (384)
    hits = {"flow": first_below(grid, pl["Delta"], eps / 2, T0),
            "limit": first_below(grid, D_lim, eps / 2, T0)}
    return {"pl": pl, "T0": T0, "win": win, "ident": ident, "c_H": c_H, "c_min": c_min,
            "c_use": c_use, "flow": ph_flow, "limit": ph_lim, "eps": eps, "T_eps": T_eps,
            "hits": hits}


def _sgd_seed_phase(model, cfg, child, grid):
    """One SGD seed at ``d_sgd`` against its own PL ratio and its own matrix flow: the
    second phase, the predicted and measured ``eps/2`` times and sample counts."""
    from attndyn.numeric.attention.training import sgd
    a, b = child.spawn(2)
    Ws = model.gaussian_init(cfg.d_sgd, width=cfg.aspect * cfg.d_sgd, scale=cfg.scale,
                             seed=a)
    r = sgd(model, Ws, eta=cfg.eta, batch=cfg.batch, t_eval=grid, seed=b, order=3)
    if r.status != 0:
        raise RuntimeError(f"SGD failed: {r.message}")
    pls = pl_ratio(model, r)
    T0s = crossing_time(r.t, overlap_p12(r), cfg.c_wr)
    T0s = float(r.t[np.searchsorted(r.t, T0s)])
    lam_s = float(np.linalg.eigvalsh(Ws[1] @ Ws[1].T)[0])
    cmin_s = float(np.min(pls["c"][r.t >= T0s]))
    cu = min(cmin_s, 2 * lam_s)
    ph = second_phase(r.t, pls["Delta"], pls["c"], T0s, r.t[-1], cu)
    D0s = float(pls["Delta"][np.searchsorted(r.t, T0s)])
    eps_s = cfg.eps_fraction * D0s
    ph["T_eps_pred"] = T0s + math.log(2 * D0s / eps_s) / (2 * cu)
    ph["T_eps_meas"] = first_below(r.t, pls["Delta"], eps_s / 2, T0s)
    ph["n_eps_pred_samples"] = cfg.batch * math.ceil(ph["T_eps_pred"] * cfg.d_sgd
                                                     / (4 * cfg.eta))
    ph["n_eps_meas_samples"] = (cfg.batch * math.ceil(ph["T_eps_meas"] * cfg.d_sgd
                                                      / (4 * cfg.eta))
                                if math.isfinite(ph["T_eps_meas"]) else math.inf)
    ph.update({"c_min": cmin_s, "c_H": 2 * lam_s, "lambda_min_teacher": lam_s})
    fls = model.matrix_flow([w @ w.T for w in Ws], r.t, order=3)
    ph["flow_exponent"] = second_phase(r.t, pl_ratio(model, fls)["Delta"], None, T0s,
                                       r.t[-1], cu)["measured_exponent"]
    return ph


def _recovery_text(cfg, fr, sgd_rows, lam_lim, margins, eps_checks):
    """``(measured, expectation, detail)`` of :func:`check_recovery`."""
    ph_flow, ph_lim, hits, pl, win = fr["flow"], fr["limit"], fr["hits"], fr["pl"], fr["win"]
    sg_rates = ", ".join(f"{p['mean_rate']:.3f}" for p in sgd_rows)
    measured = (f"second phase t in [{fr['T0']:.2f}, {cfg.T_end:g}]: mean decay rate flow "
                f"{ph_flow['mean_rate']:.3f}, limit {ph_lim['mean_rate']:.3f}, SGD {sg_rates}; "
                f"local rate at the end 2c = {ph_flow['local_rate_end']:.3f} vs Hessian "
                f"2c_H = {2 * fr['c_H']:.3f} (limit {4 * lam_lim:.3f}); worst "
                "|exponent/int 2c - 1|")
    expectation = (f"-dlogDelta/dt = 2c(t) (<= {IDENTITY_TOL:g}); exponents within "
                   f"{EXPONENT_TOL:.0%} of int 2c; eq. (382) with c = {fr['c_use']:.3f}; "
                   f"Delta <= eps/2 by T_eps (eq. 384)")
    detail = (f"h1, gamma = 0, aspect {cfg.aspect}: PL ratio c(t) from the moments decreases "
              f"from {pl['c'][win][0]:.3f} to {pl['c'][win][-1]:.3f} on the window (min "
              f"{fr['c_min']:.3f}, Hessian c_H = 2 lambda_min(S_2) = {fr['c_H']:.3f}); identity "
              f"error {fr['ident']:.1e}; exponent log(Delta(T0)/Delta(T1)) flow "
              f"{ph_flow['measured_exponent']:.3f}"
              f" vs int 2c {ph_flow['predicted_exponent']:.3f}, limit "
              f"{ph_lim['measured_exponent']:.3f}; eq. (382) max margin {max(margins):+.3f}; "
              f"eps = {cfg.eps_fraction:g} Delta(T0) ({len(eps_checks)} instances with T_eps <= "
              f"T_end): T_eps = {fr['T_eps']:.3f} (eq. 384) vs measured "
              f"flow {hits['flow']:.3f}, limit {hits['limit']:.3f}, SGD "
              + ", ".join(f"{p['T_eps_meas']:.3f}/{p['T_eps_pred']:.3f}" for p in sgd_rows)
              + f"; SGD d = {cfg.d_sgd}, eta = {cfg.eta:g}, B = {cfg.batch}; flow d = {cfg.d_flow}")
    return measured, expectation, detail
