"""Corollary 3 of paper 003: tied weak recovery in ``Theta(d^2 log d)`` samples.

Setting (section 3.2). One trainable tied student ``S_1 = W_1 W_1^T`` and one
fixed teacher ``S_2 = W_2 W_2^T``, single token (``L = 1``), MSE loss
``(1/2)(sigma(G_1) - sigma(G_2))^2``. The structural overlap is
``p_12 = Tr(S_1' S_2')/d = q_12 - t_1 t_2`` (eq. 15, ``S' = S - t I``). From an
uninformative start (Assumption 3: ``p_12(0) -> 0``, independent Gaussian
factors) the limiting flow leaves the uninformative manifold with the velocity

    dp_12/dt (0) = -2 Gamma_12(q(0)) t_1(0) p_22                      (eq. 17)

in the ODE time ``t = 4 eta n / d``, ``Gamma`` the potential's gradient in the
symmetric convention (``Gamma_12 = -E[sigma'(G_1) sigma'(G_2)]`` for this loss,
eq. 22). The weak-recovery sample complexity (eq. 18) is the first step ``n``
with ``|p_12| >= c``. Corollary 3 (eqs. 19-21): when ``Gamma_12 != 0`` the
crossing happens at a flow time ``T_wr(c)`` in ``(T_-, T_+]`` independent of
``d``, so ``N_wr = T_wr d / (4 eta_d)`` steps, and at the largest learning rate
of Theorem 2, ``eta_d = c0 / (d log d)``,

    N_wr(c) = B T_wr(c) d^2 log d / (4 c0)     samples (batch B per step).

The ``log d`` comes from the learning-rate scaling; what the numbers test is
that the crossing time ``T_wr`` does not grow with ``d`` (an escape from an
``O(1/d)`` overlap, as for direct optimisation over ``S`` with ``h2``, would
add a ``log d``: ``N ~ d^2 log^2 d``), and that its value is the limit flow's.

The check (:func:`check_cor3`, registered as ``"cor3"``) walks the ladder:

1. eq. (17) against the initial slope of the exact ``d -> infinity`` flow
   (:func:`~attndyn.numeric.attention.tied.limit.limit_flow`, free-probability
   solution for a Wishart student and teacher);
2. SGD crossing times against the finite-``d`` matrix flow from the same
   initial factors (named effect: the update's noise term ``O(eta d / B)``);
3. ``N_wr`` from SGD at several ``d`` and seeds, fitted in log space against
   ``A d^2``, ``A d^2 log d`` and ``A d^2 log^2 d`` (weighted least squares,
   per-point standard errors from the seeds, AIC), the free power ``k`` of
   ``A d^2 (log d)^k`` and the free exponent ``b`` of ``A d^b``, each with its
   standard error;
4. the fitted prefactor ``A`` against ``B T_wr / (4 c0)`` from the limit flow and
   against the linear-escape value ``B T_lin / (4 c0)``, ``T_lin = c / (eq. 17)``.

Measured (see docs/theorems.md): the linear activation ``h1`` is the clean
case (its gradient is linear in ``G``, so the Gaussian-equivalent flow is the
exact expected SGD drift at every ``d``). For ``h2`` the finite-``d`` SGD runs
ahead of the Gaussian-equivalent flow by a correction that shrinks roughly
like ``1/d`` (about 30% of ``p_12`` at ``d = 100``), which biases ``N_wr`` at
the sizes a CPU can reach; the slow budget reports it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from attndyn.numeric.core.checks import CheckResult, register
from attndyn.numeric.core.validate import resolve_seed

__all__ = ["crossing_time", "overlap_p12", "eq17_slopes", "weak_recovery_theory",
           "measure_weak_recovery",
           "fit_scaling", "check_cor3", "Cor3Config", "SCALING_MODELS", "config"]

#: the three laws compared: name -> power ``k`` of ``log d`` in ``A d^2 (log d)^k``
SCALING_MODELS = {"d^2": 0, "d^2 log d": 1, "d^2 log^2 d": 2}


@dataclass(frozen=True)
class Cor3Config:
    """Sizes and settings of one budget of :func:`check_cor3`.

        >>> cfg = config("small")
        >>> isinstance(cfg, Cor3Config), cfg.activation, len(cfg.dims) == len(cfg.seeds)
        (True, 'h1', True)
    """

    activation: str = "h1"
    c: float = 0.1                    # recovery threshold of eq. (18)
    scale: float = math.sqrt(0.5)     # W entries N(0, scale^2/d): t = 1/2, Var G = 1
    c0: float = 1.0                   # eta_d = c0 / (d log d)
    batch: int = 16                   # noise eta d / B = c0 / (B log d)
    dims: tuple = (40, 57, 80, 113, 160)
    seeds: tuple = (6, 5, 4, 3, 3)
    checkpoints: int = 60
    extra_activations: tuple = ()     # reported, not part of the verdict (on dims[:4])


#: ``budget -> Cor3Config``
_CONFIGS = {
    "small": Cor3Config(dims=(24, 34, 48, 68, 96), seeds=(8, 6, 5, 4, 3)),
    "default": Cor3Config(),
    # measured: d = 283 1.4 min a seed at load 1, d = 400 4-8 min a seed at load 2-3 (~d^4 log d)
    "slow": Cor3Config(dims=(50, 71, 100, 141, 200, 283, 400), seeds=(6, 5, 4, 4, 3, 2, 2),
                       extra_activations=("h2",)),
}


def config(budget: str) -> Cor3Config:
    """The :class:`Cor3Config` of a budget (``"small"``, ``"default"`` or ``"slow"``).

        >>> config("small").dims
        (24, 34, 48, 68, 96)
        >>> config("huge")
        Traceback (most recent call last):
            ...
        ValueError: budget must be one of ('small', 'default', 'slow'), got 'huge'
    """
    if budget not in _CONFIGS:
        raise ValueError(f"budget must be one of {tuple(_CONFIGS)}, got {budget!r}")
    return _CONFIGS[budget]


# ---------------------------------------------------------------------------
# crossing times

def crossing_time(t, y, c: float) -> float:
    """First time with ``|y| >= c`` (eq. 18 on a sampled trajectory), by linear
    interpolation of ``|y|`` between the two samples around the crossing.

    ``0.0`` when ``|y(t_0)| >= c``; ``math.inf`` when ``|y|`` stays below ``c``.

        >>> t = np.array([0.0, 1.0, 2.0])
        >>> crossing_time(t, np.array([0.0, 0.1, 0.3]), 0.2)
        1.5
        >>> crossing_time(t, np.array([0.0, 0.1, 0.1]), 0.2)
        inf
    """
    t = np.asarray(t, dtype=float)
    y = np.abs(np.asarray(y, dtype=float))
    if t.ndim != 1 or y.shape != t.shape or t.size == 0:
        raise ValueError(f"t and y must be 1-d arrays of one length, got shapes {t.shape}, "
                         f"{y.shape}")
    if not (isinstance(c, (int, float, np.integer, np.floating)) and not isinstance(c, bool)
            and math.isfinite(c) and c > 0):
        raise ValueError(f"c (recovery threshold) must be a finite number > 0, got {c!r}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise ValueError("t and y must be finite")
    if np.any(np.diff(t) <= 0):
        raise ValueError("t must be strictly increasing")
    hit = np.nonzero(y >= c)[0]
    if hit.size == 0:
        return math.inf
    i = int(hit[0])
    if i == 0:
        return float(t[0])
    y0, y1 = y[i - 1], y[i]
    return float(t[i - 1] + (t[i] - t[i - 1]) * (c - y0) / (y1 - y0))


def overlap_p12(traj, student: int = 0, teacher: int = 1) -> np.ndarray:
    """``p_12 = q_12 - t_1 t_2`` (eq. 15) from a trajectory's word moments.

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> rng = np.random.default_rng(0)
        >>> A, B = rng.standard_normal((2, 8, 8)) / np.sqrt(8)
        >>> S1, S2 = A @ A.T, B @ B.T
        >>> flow = model.matrix_flow([S1, S2], np.array([0.0]), order=2)
        >>> p = overlap_p12(flow)
        >>> p12 = np.trace(S1 @ S2) / 8 - (np.trace(S1) / 8) * (np.trace(S2) / 8)   # eq. (15)
        >>> bool(abs(p[0] - p12) < 1e-12)
        True
    """
    return (traj.moment((student, teacher))
            - traj.moment((student,)) * traj.moment((teacher,)))


# ---------------------------------------------------------------------------
# theory: eq. (17) and the limit flow's crossing time

def _law(scale: float):
    from attndyn.symbolic.initial import FreeInit, wishart
    return FreeInit([wishart(scale, 1.0), wishart(scale, 1.0)])


def eq17_slopes(model, *, scale: float = math.sqrt(0.5), h: float = 1e-4) -> dict:
    """Eq. (17) against the exact limit flow for a student 0 and teacher 1 drawn as square
    Gaussian factors with entries ``N(0, scale^2/d)``: ``t1``, ``t2``, ``p22``,
    ``Gamma12`` at the limit ``q(0)``, ``slope_eq17 = -2 Gamma12 t1 p22`` and the limit
    flow's initial slope ``slope_limit`` (``2 D(h) - D(2h)`` from the difference
    quotients ``D``, error ``O(h^2)``).

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> s = eq17_slopes(model)
        >>> sorted(s)
        ['Gamma12', 'p22', 'q0', 'slope_eq17', 'slope_limit', 't1', 't2']
        >>> bool(abs(s["slope_eq17"] / s["slope_limit"] - 1) < 1e-3)
        True
    """
    from attndyn.numeric.attention.tied.limit import limit_flow
    law = _law(scale)
    words = [(0,), (1,), (0, 0), (0, 1), (1, 1)]
    mu = dict(zip(words, [float(v) for v in law(words)]))
    q0 = np.array([[mu[(0, 0)], mu[(0, 1)]], [mu[(0, 1)], mu[(1, 1)]]])
    t1, t2 = mu[(0,)], mu[(1,)]
    p22 = mu[(1, 1)] - t2 * t2
    g12 = float(model.gamma(q0)[0, 1])
    p = overlap_p12(limit_flow(model, law, np.array([0.0, h, 2 * h])))
    slope_lim = float(2 * (p[1] - p[0]) / h - (p[2] - p[0]) / (2 * h))
    return {"t1": t1, "t2": t2, "p22": p22, "q0": q0.tolist(), "Gamma12": g12,
            "slope_eq17": -2.0 * g12 * t1 * p22, "slope_limit": slope_lim}


def weak_recovery_theory(model, c: float, *, scale: float = math.sqrt(0.5),
                         T_max: float = 3.0, n_grid: int = 31, n_fine: int = 41) -> dict:
    """The theory's side of Corollary 3 for a tied student 0 and teacher 1 drawn as
    square Gaussian factors with entries ``N(0, scale^2/d)`` (Wishart, aspect 1).

    Returns :func:`eq17_slopes`, the linear escape time ``T_lin = c / |slope_eq17|``
    and the limit flow's crossing time ``T_inf`` of ``|p_12| = c`` (``inf`` if not
    before ``T_max``): bracketed on
    ``n_grid`` points of ``[0, T_max]``, then interpolated on ``n_fine`` points of
    the bracket (``grid_step`` is their spacing).

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> th = weak_recovery_theory(model, 0.1, n_grid=11, n_fine=11)
        >>> bool(0 < th["T_lin"] < th["T_inf"] < 3.0) or (th["T_lin"], th["T_inf"])
        True
    """
    from attndyn.numeric.attention.tied.limit import limit_flow
    law = _law(scale)
    out = eq17_slopes(model, scale=scale)
    slope17 = out["slope_eq17"]

    def run(grid):
        lim = limit_flow(model, law, grid)
        if lim.status != 0:
            raise RuntimeError(f"limit flow failed: {lim.message}")
        return lim

    coarse = run(np.linspace(0.0, T_max, n_grid))
    T_c = crossing_time(coarse.t, overlap_p12(coarse), c)
    T_inf, step, msg = T_c, T_max / (n_grid - 1), coarse.message
    if math.isfinite(T_c) and T_c > 0:
        i = int(np.searchsorted(coarse.t, T_c))
        lo, hi = coarse.t[i - 1], coarse.t[i]
        fine_t = np.unique(np.concatenate([np.linspace(0.0, lo, 8), np.linspace(lo, hi, n_fine)]))
        fine = run(fine_t)
        T_inf = crossing_time(fine.t, overlap_p12(fine), c)
        step, msg = (hi - lo) / (n_fine - 1), fine.message
    out.update({"T_lin": c / abs(slope17) if slope17 != 0 else math.inf, "T_inf": T_inf,
                "grid_step": step, "limit_message": msg})
    return out


# ---------------------------------------------------------------------------
# measurement: SGD (and the finite-d flow) at one d

def measure_weak_recovery(model, d: int, c: float, *, n_seeds: int, seed, c0: float = 1.0,
                          batch: int = 16, scale: float = math.sqrt(0.5), T_max: float = 1.0,
                          checkpoints: int = 60, flow: bool = True) -> dict:
    """``N_wr(c)`` (eq. 18) from tied online SGD at dimension ``d`` and ``eta_d = c0/(d log d)``.

    For each of ``n_seeds`` children of ``SeedSequence(seed)``: fresh square
    Gaussian factors (``gaussian_init``, entries ``N(0, scale^2/d)``, an
    uninformative start), one SGD run with ``checkpoints`` checkpoints on
    ``[0, T_max]`` and, with ``flow=True``, the finite-``d`` matrix flow from the
    same factors on the same grid. Crossing times come from
    :func:`crossing_time`; ``steps = ceil(T / dt)`` with ``dt = 4 eta_d / d`` and
    ``samples = batch * steps``. A run that does not reach ``c`` by ``T_max``
    reports ``inf``.

        >>> from attndyn import TiedModel
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = TiedModel(2, [0], mse_teacher_student("h1"))
        >>> r = measure_weak_recovery(model, 16, 0.1, n_seeds=2, seed=0, T_max=0.9, checkpoints=10,
        ...                           flow=False)
        >>> len(r["T_sgd"]), r["d"]
        (2, 16)
    """
    from attndyn.numeric.attention.training import sgd
    for name, v, lo in (("d", d, 4), ("n_seeds", n_seeds, 1), ("checkpoints", checkpoints, 2)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    for name, v in (("c", c), ("c0", c0), ("scale", scale), ("T_max", T_max)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    d = int(d)
    eta = c0 / (d * math.log(d))
    dt = model.time_step(eta, d)
    t_eval = np.linspace(0.0, T_max, checkpoints + 1)
    rows = []
    for child in resolve_seed(seed).spawn(int(n_seeds)):
        s_init, s_sgd = child.spawn(2)
        W = model.gaussian_init(d, scale=scale, seed=s_init)
        r = sgd(model, W, eta=eta, batch=batch, t_eval=t_eval, seed=s_sgd)
        if r.status != 0:
            raise RuntimeError(f"SGD failed at d = {d}: {r.message}")
        p_sgd = r.observable("p", 0, 1)
        T_sgd = crossing_time(r.t, p_sgd, c)
        row = {"T_sgd": T_sgd, "p12_0": float(p_sgd[0]),
               "steps": math.ceil(T_sgd / dt) if math.isfinite(T_sgd) else math.inf,
               "wall_s": float(r.diagnostics["wall_s"])}
        row["samples"] = batch * row["steps"]
        if flow:
            fl = model.matrix_flow([w @ w.T for w in W], r.t, order=2)
            row["T_flow"] = (crossing_time(fl.t, overlap_p12(fl), c) if fl.status == 0
                             else math.nan)
        rows.append(row)
    out = {"d": d, "eta": eta, "dt": dt, "batch": int(batch), "c0": float(c0)}
    for key in rows[0]:
        out[key] = [float(r[key]) for r in rows]
    return out


# ---------------------------------------------------------------------------
# fits

def _wls(X, y, w):
    """Weighted least squares: coefficients, covariance (unscaled), chi^2."""
    Xw = X * np.sqrt(w)[:, None]
    yw = y * np.sqrt(w)
    coef, *_ = np.linalg.lstsq(Xw, yw, rcond=None)
    cov = np.linalg.inv(Xw.T @ Xw)
    res = yw - Xw @ coef
    return coef, cov, float(res @ res)


def fit_scaling(dims, samples, *, se_floor: float = 1e-3) -> dict:
    """Corollary 3's law (eq. 21) tested: fit ``log N_wr`` against ``log d``: the laws of
    :data:`SCALING_MODELS`, a free power of ``log d`` and a free power of ``d``.

    ``samples[i]`` holds the per-seed ``N_wr`` at ``dims[i]``. Each point is the
    mean of ``log N`` over its seeds. Its standard error comes from a pooled model
    of the seed-to-seed spread, because a handful of seeds per ``d`` estimates its
    own variance poorly: ``log s_d^2`` (sample variances, ``ddof = 1``) is fitted
    by least squares weighted by the degrees of freedom against ``log d``,
    ``sigma_d^2 = exp(a) d^(-2 beta)`` (``spread_exponent`` = ``beta``, the finite-d
    fluctuations of the start shrink like ``d^-beta``), and
    ``se_d = max(sigma_d / sqrt(n_d), se_floor)`` (``se_floor``: the resolution of
    the crossing-time interpolation). The per-point ``sd / sqrt(n)`` are reported
    as ``se_own``. Weighted least squares in log space:

    - ``log N = log A + 2 log d + k log log d`` for ``k = 0, 1, 2`` (one free
      parameter ``log A``): ``chi2``, ``AIC = chi2 + 2`` and the Akaike weights;
      ``preferred`` is the lowest AIC;
    - ``k`` free (``log A``, ``k``): ``k_hat`` with its standard error (``k_se``,
      from the weights; ``k_se_scaled`` multiplied by ``sqrt(chi2/dof)`` when that
      exceeds 1);
    - ``log N = log A + b log d``: ``b_hat``, ``b_se``, and ``b_expected[model]``,
      the slope each law has on these ``d`` (``2 + k / mean log d`` roughly).

        >>> dims = [40, 57, 80, 113, 160]
        >>> rng = np.random.default_rng(0)
        >>> samples = [3.0 * d ** 2 * np.log(d) * np.exp(0.01 * rng.standard_normal(4))
        ...            for d in dims]
        >>> fit = fit_scaling(dims, samples)
        >>> fit["preferred"], round(fit["models"]["d^2 log d"]["A"], 1), round(fit["k_hat"], 1)
        ('d^2 log d', 3.0, 1.0)
    """
    dims = np.asarray(dims, dtype=float)
    if dims.ndim != 1 or dims.size < 3 or len(samples) != dims.size:
        raise ValueError("fit_scaling needs at least 3 dimensions, one sample list each")
    ybar, var, n = [], [], []
    for s in samples:
        s = np.asarray(s, dtype=float)
        if s.size < 2 or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise ValueError("each d needs >= 2 finite positive N_wr values")
        ly = np.log(s)
        ybar.append(ly.mean())
        var.append(max(ly.var(ddof=1), 1e-300))
        n.append(ly.size)
    ybar, var, n = np.array(ybar), np.array(var), np.array(n, dtype=float)
    se_own = np.sqrt(var / n)
    cv, _, _ = _wls(np.column_stack([np.ones(dims.size), np.log(dims)]), np.log(var), n - 1)
    sigma2 = np.exp(cv[0] + cv[1] * np.log(dims))
    se = np.maximum(np.sqrt(sigma2 / n), se_floor)
    w = 1.0 / se ** 2
    ld = np.log(dims)
    lld = np.log(ld)
    models = {}
    for name, k in SCALING_MODELS.items():
        coef, cov, chi2 = _wls(np.ones((dims.size, 1)), ybar - 2 * ld - k * lld, w)
        models[name] = {"k": k, "log_A": float(coef[0]), "A": float(math.exp(coef[0])),
                        "log_A_se": float(math.sqrt(cov[0, 0])), "chi2": chi2,
                        "aic": chi2 + 2.0}
    amin = min(m["aic"] for m in models.values())
    z = sum(math.exp(-(m["aic"] - amin) / 2) for m in models.values())
    for m in models.values():
        m["akaike_weight"] = math.exp(-(m["aic"] - amin) / 2) / z
    preferred = min(models, key=lambda n: models[n]["aic"])
    dof = dims.size - 2
    coef, cov, chi2k = _wls(np.column_stack([np.ones_like(ld), lld]), ybar - 2 * ld, w)
    k_se = math.sqrt(cov[1, 1])
    infl = math.sqrt(max(1.0, chi2k / dof)) if dof > 0 else 1.0
    coefb, covb, chi2b = _wls(np.column_stack([np.ones_like(ld), ld]), ybar, w)
    b_expected = {}
    for name, k in SCALING_MODELS.items():
        cb, _, _ = _wls(np.column_stack([np.ones_like(ld), ld]), 2 * ld + k * lld, w)
        b_expected[name] = float(cb[1])
    return {"d": dims.tolist(), "mean_log_N": ybar.tolist(), "se_log_N": se.tolist(),
            "se_own": se_own.tolist(), "spread_exponent": float(-cv[1] / 2),
            "models": models, "preferred": preferred,
            "k_hat": float(coef[1]), "k_se": k_se, "k_se_scaled": k_se * infl,
            "k_chi2": chi2k, "k_dof": dof,
            "b_hat": float(coefb[1]), "b_se": float(math.sqrt(covb[1, 1])),
            "b_se_scaled": float(math.sqrt(covb[1, 1]) * math.sqrt(max(1.0, chi2b / dof))),
            "b_expected": b_expected}


# ---------------------------------------------------------------------------
# the check

def _run_activation(activation, cfg: Cor3Config, ss, progress=None, n_dims=None) -> dict:
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student
    model = TiedModel(2, [0], mse_teacher_student(activation))
    th = weak_recovery_theory(model, cfg.c, scale=cfg.scale)
    if not math.isfinite(th["T_inf"]):
        raise RuntimeError(f"{activation}: the limit flow does not reach c = {cfg.c}")
    T_max = 1.6 * th["T_inf"]
    per_d = []
    dims = cfg.dims[:n_dims]
    children = ss.spawn(len(dims))
    for d, n, ch in zip(dims, cfg.seeds, children):
        per_d.append(measure_weak_recovery(model, d, cfg.c, n_seeds=n, seed=ch, c0=cfg.c0,
                                           batch=cfg.batch, scale=cfg.scale, T_max=T_max,
                                           checkpoints=cfg.checkpoints))
        if progress is not None:
            progress(activation, per_d[-1])
    fit = fit_scaling(dims, [m["samples"] for m in per_d])
    A_fit = fit["models"]["d^2 log d"]["A"]
    A_limit = cfg.batch * th["T_inf"] / (4 * cfg.c0)
    A_lin = cfg.batch * th["T_lin"] / (4 * cfg.c0)
    ladder = [abs(ts / tf - 1) for m in per_d for ts, tf in zip(m["T_sgd"], m["T_flow"])]
    flow_vs_limit = [float(np.mean(m["T_flow"]) / th["T_inf"] - 1) for m in per_d]
    sgd_vs_limit = [float(np.mean(m["T_sgd"]) / th["T_inf"] - 1) for m in per_d]
    return {"activation": activation, "theory": th, "per_d": per_d, "fit": fit,
            "A_fit": A_fit, "A_limit": A_limit, "A_lin": A_lin,
            "prefactor_error": abs(A_fit / A_limit - 1),
            "sgd_vs_flow_max": float(max(ladder)), "flow_vs_limit": flow_vs_limit,
            "sgd_vs_limit": sgd_vs_limit,
            "eq17_error": abs(th["slope_limit"] / th["slope_eq17"] - 1)}


#: acceptance of :func:`check_cor3` (documented in docs/theorems.md)
K_TOL = 0.5            # |k_hat - 1|: halfway to the alternatives k = 0 and k = 2
PREFACTOR_TOL = 0.10   # |A_fit / A_limit - 1|
EQ17_TOL = 1e-5        # eq. (17) against the limit flow's initial slope (O(h^2) quotient)


@register("cor3", "Cor. 3, eqs. (17)-(21)",
          "tied weak recovery: N_wr(c) from SGD fitted against d^2, d^2 log d, d^2 log^2 d")
def check_cor3(budget, seed, progress=None) -> CheckResult:
    """Corollary 3 as a measurement (see the module docstring for the ladder).

    Held when (i) the ``d^2 log d`` law has the lowest AIC of the three,
    (ii) the fitted power of ``log d`` is within :data:`K_TOL` of 1, (iii) the
    fitted prefactor is within :data:`PREFACTOR_TOL` of the limit flow's
    ``B T_wr / (4 c0)`` and (iv) eq. (17) matches the limit flow's initial slope
    within :data:`EQ17_TOL`. ``worst`` is ``|k_hat - 1|``.

        >>> r = check_cor3("small", 0)
        >>> r.key, r.verdict
        ('cor3', 'held')
    """
    t0 = time.perf_counter()
    cfg = config(budget)
    ss = resolve_seed(seed)
    main_ss, extra_ss = ss.spawn(2)
    main = _run_activation(cfg.activation, cfg, main_ss, progress)
    n_extra = max(1, len(cfg.extra_activations))
    extras = [_run_activation(a, cfg, e, progress, n_dims=4)
              for a, e in zip(cfg.extra_activations, extra_ss.spawn(n_extra))]
    fit = main["fit"]
    k_err = abs(fit["k_hat"] - 1.0)
    ok = (fit["preferred"] == "d^2 log d" and k_err <= K_TOL
          and main["prefactor_error"] <= PREFACTOR_TOL and main["eq17_error"] <= EQ17_TOL)
    mods = fit["models"]
    aic = ", ".join(f"{n}: {m['aic']:.1f}" for n, m in mods.items())
    measured = (f"{cfg.activation}, d = {cfg.dims[0]}..{cfg.dims[-1]}: log-power k = "
                f"{fit['k_hat']:.2f} +- {fit['k_se_scaled']:.2f}, exponent b = "
                f"{fit['b_hat']:.3f} +- {fit['b_se_scaled']:.3f} (d^2 log d: "
                f"{fit['b_expected']['d^2 log d']:.3f}); |k - 1|")
    expectation = (f"d^2 log d preferred by AIC, |k - 1| <= {K_TOL}, prefactor within "
                   f"{PREFACTOR_TOL:.0%} of B T_wr/(4 c0), eq. (17) within {EQ17_TOL:g}")
    th = main["theory"]
    detail = (f"AIC {aic} (preferred {fit['preferred']}); prefactor A = {main['A_fit']:.4g} vs "
              f"limit flow {main['A_limit']:.4g} ({main['prefactor_error']:.1%} off) and eq. (17) "
              f"linear escape {main['A_lin']:.4g}; eq. (17) slope {th['slope_eq17']:.4g} vs limit "
              f"{th['slope_limit']:.4g}; SGD vs matrix flow crossing time max "
              f"{main['sgd_vs_flow_max']:.1%}; eta_d = {cfg.c0:g}/(d log d), B = {cfg.batch}, "
              f"c = {cfg.c:g}, gamma = 0 (Assumption 2.4 not imposed; the trajectories stay "
              "bounded)")
    for e in extras:
        f = e["fit"]
        detail += (f"; {e['activation']} (reported, not judged): k = {f['k_hat']:.2f} +- "
                   f"{f['k_se_scaled']:.2f}, preferred {f['preferred']}, SGD crossing vs limit "
                   + ", ".join(f"{v:+.0%}" for v in e["sgd_vs_limit"])
                   + " (finite-d non-Gaussian correction)")
    n_inst = sum(cfg.seeds) + sum(cfg.seeds[:4]) * len(extras)
    data = {"config": {k: (list(v) if isinstance(v, tuple) else v)
                       for k, v in cfg.__dict__.items()},
            "main": main, "extras": extras}
    return CheckResult("cor3", "Cor. 3, eqs. (17)-(21)", "held" if ok else "not held", n_inst,
                       k_err, measured, bound=K_TOL, expectation=expectation, detail=detail,
                       data=jsonable(data), wall_s=time.perf_counter() - t0)


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    return x
