"""Corollary 8 (paper 003, appendix F.2): truncations of the untied slow hierarchy, and the
projection ``P`` onto the covariance cone.

The cone (eq. 536). The untied order parameters are the pair ``q = (q1, q2)``,
``q1_kl = Tr(M_k M_l^T)/d``, ``q2_kl = Tr(M_k M_l)/d``; the admissible set is the closed
convex cone

    Q = {(q1, q2) in S_K x S_K : q1 + q2 >= 0, q1 - q2 >= 0}   (PSD order).

``P`` is the orthogonal projection of ``R^{KxK} x R^{KxK}`` (Frobenius norm on the pair)
onto ``Q`` (eq. 537). With ``a = (q1 + q2)/2``, ``b = (q1 - q2)/2`` the map
``(q1, q2) -> (a, b)`` is ``1/sqrt 2`` times an isometry and ``Q`` becomes
``S_K^+ x S_K^+``, so ``P`` projects ``a`` and ``b`` separately onto the PSD cone
(symmetric part, negative eigenvalues set to 0) and maps back (:func:`cone_projection`).
The truncated slow system (905)-(907) uses the extended field ``V_ext`` of eq. (542),
which evaluates ``m*`` and ``a^(r)_kl`` at ``P(q(mu))``; the hierarchy of
:mod:`attndyn.numeric.attention.untied.hierarchy` evaluates them at ``q(mu)`` itself, so
the two agree exactly while ``q(mu^(M))`` stays in ``Q``. :func:`truncation_ladder`
measures that distance along every truncated trajectory.

The bound (908): for ``M >= M0(T)`` the order-``M`` truncation exists on ``[0, T]`` and

    sup_{tau <= T} |mu^(M)_alpha(tau) - mu_alpha(tau)| <= C_T (R / s_-)^(M+1) s_+^|alpha|,

``R = C_*^2`` (Lemma 17), ``R < s_- < s_+``, under the conditions of Theorem 3 (which
include ``gamma > gamma*``, Assumption 4.5). The constants ``C_T, s_pm, M0, gamma*`` come
from the Ovsyannikov theorem and Lemma 25 and are not given, so what can be measured is the
*form*: a geometric decay in ``M`` with a ratio ``rho = R/s_- < 1`` and a geometric growth
in the word length, with one constant for all ``M``. The reference solution is the
finite-``d`` slaved flow (``untied_flow(mode="slaved")``), whose normalised traces solve the
slow hierarchy exactly at that ``d`` (the oracle the proof's stability lemma applies to; ``R``
is measured along it as ``sup_tau max_k max(||U_k||_op^2, ||V_k||_op^2)``, a bound on every
letter's operator norm and so on ``|mu_alpha| <= R^|alpha|``, eq. 897).

:func:`truncation_ladder` measures ``e(M, w)`` (the largest error over the words of length
``w`` and the horizon), the per-order ratios ``rho_j = max_w (e(M_j+1, w)/e(M_j, w))^(1/step)``
between successive orders, and the envelope of (908) with ``rho = max_j rho_j``,
``s_+ = max(s_fit, 1.01 R/rho)`` (``s_fit`` the word-length growth fitted by least squares)
and ``C_T`` the smallest constant bounding every measured error. ``rho`` must stay below 1
(``s_- > R``); the check asks :data:`RHO_MAX`. As a stricter, reported test of "``C_T``
independent of ``M``", the envelope fitted on the lower orders alone (least squares, ``C``
raised to bound them) is extrapolated to the highest order (``heldout_ratio``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from attndyn.numeric.core.checks import CheckResult, register
from attndyn.numeric.core.validate import resolve_seed

__all__ = ["cone_projection", "cone_distance", "truncation_ladder", "check_cor8",
           "Cor8Config", "config"]


def _as_square(x, name):
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real K x K array, got {type(x).__name__}") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 1 or a.shape[0] > 4096:
        raise ValueError(f"{name} must be a square K x K array with 1 <= K <= 4096, "
                         f"got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def _psd_part(a):
    s = 0.5 * (a + a.T)
    w, v = np.linalg.eigh(s)
    return (v * np.maximum(w, 0.0)) @ v.T


def cone_projection(q1, q2):
    """``P(q1, q2)``: the orthogonal projection onto the untied covariance cone (eqs. 536-537).

    ``Q = {(q1, q2) symmetric: q1 + q2 >= 0, q1 - q2 >= 0}``. With ``a = (q1 + q2)/2`` and
    ``b = (q1 - q2)/2``, ``||q1 - p1||_F^2 + ||q2 - p2||_F^2 = 2 (||a - a'||_F^2 +
    ||b - b'||_F^2)``, so the nearest point is ``(a+ + b+, a+ - b+)`` with ``x+`` the
    nearest PSD matrix to ``x`` (its symmetric part with the negative eigenvalues set to 0).
    Returns the pair ``(p1, p2)``; ``P`` is idempotent and non-expansive (eq. 537).

        >>> q1 = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> q2 = np.array([[2.0, 0.0], [0.0, 0.5]])
        >>> p1, p2 = cone_projection(q1, q2)
        >>> p1.tolist(), p2.tolist()
        ([[1.5, 0.0], [0.0, 1.0]], [[1.5, 0.0], [0.0, 0.5]])
        >>> cone_projection(q1, 0.5 * q1)[1].tolist()
        [[0.5, 0.0], [0.0, 0.5]]
    """
    q1 = _as_square(q1, "q1")
    q2 = _as_square(q2, "q2")
    if q1.shape != q2.shape:
        raise ValueError(f"q1 and q2 must have the same shape, got {q1.shape} and {q2.shape}")
    a = _psd_part(0.5 * (q1 + q2))
    b = _psd_part(0.5 * (q1 - q2))
    return a + b, a - b


def cone_distance(q1, q2) -> float:
    """Frobenius distance of the pair ``(q1, q2)`` to the cone ``Q`` (eqs. 536-537):
    ``sqrt(||q1 - p1||_F^2 + ||q2 - p2||_F^2)`` with ``(p1, p2) = P(q1, q2)``.

        >>> q1 = np.eye(2)
        >>> round(cone_distance(q1, 0.5 * q1), 12)
        0.0
        >>> round(cone_distance(q1, np.array([[2.0, 0.0], [0.0, 0.5]])), 6)
        0.707107
    """
    p1, p2 = cone_projection(q1, q2)
    return float(math.sqrt(np.sum((np.asarray(q1) - p1) ** 2)
                           + np.sum((np.asarray(q2) - p2) ** 2)))


@dataclass(frozen=True)
class Cor8Config:
    """Sizes and settings of one budget of :func:`check_cor8` (Corollary 8):
    the untied instance (activation, ``d``, weight decay ``gamma``, horizon ``T`` on
    ``n_t`` points), the even and odd truncation orders, the highest orders held out of the
    error fit, the Gaussian factor scales of student and teacher, the teacher's mean, and the instance outside the premise
    (``gamma_outside``, ``T_outside``).

        >>> cfg = config("small")
        >>> isinstance(cfg, Cor8Config), cfg.orders, cfg.d
        (True, (2, 4, 6), 30)
    """
    activation: str = "h1"
    d: int = 30
    gamma: float = 10.0             # Theorem 3 asks gamma > gamma* (not explicit)
    T: float = 1.0                  # slow-time horizon
    n_t: int = 11
    orders: tuple = (2, 4, 6, 8)    # even: q(mu^(M)) stays in Q (odd orders leave it)
    odd_orders: tuple = (3, 5)      # reported: their q(mu^(M)) leaves Q
    n_heldout: int = 1              # the highest orders, predicted by the fit on the others
    scales: tuple = (0.5, 1.0)      # Gaussian factor scales of student, teacher
    teacher_mean: float = 0.2       # teacher factors + teacher_mean * I (a non-zero mean)
    gamma_outside: float = 0.0      # the reported instance outside the premise
    T_outside: float = 0.5


_CONFIGS = {"small": Cor8Config(orders=(2, 4, 6), odd_orders=(3,)),
            "default": Cor8Config(),
            "slow": Cor8Config(d=48, odd_orders=(3, 5, 7))}


def config(budget: str) -> Cor8Config:
    """The :class:`Cor8Config` of a budget (``"small"``, ``"default"`` or ``"slow"``).

        >>> config("small").orders
        (2, 4, 6)
    """
    if budget not in _CONFIGS:
        raise ValueError(f"budget must be one of {tuple(_CONFIGS)}, got {budget!r}")
    return _CONFIGS[budget]


#: acceptance of :func:`check_cor8`
RHO_MAX = 0.5           # every per-order error ratio (geometric convergence with margin)
CONE_TOL = 1e-10        # distance of q(mu^(M)) to Q along a truncated trajectory


def _instance(cfg, gamma, seed):
    import attndyn
    from attndyn.symbolic.losses import mse_teacher_student
    model = attndyn.UntiedModel(2, [0], mse_teacher_student(cfg.activation), weight_decay=gamma)
    pairs = model.gaussian_init(cfg.d, scale=list(cfg.scales), seed=seed)
    U, V = pairs[1]
    eye = np.eye(cfg.d)
    pairs[1] = (U + cfg.teacher_mean * eye, V + cfg.teacher_mean * eye)
    return model, pairs


def truncation_ladder(model, pairs, T: float, orders, *, n_t: int = 11,
                      n_heldout: int = 1, report_orders=()) -> dict:
    """Truncation errors of the untied slow hierarchy against the finite-``d`` slaved flow
    (eq. 908), and the distance of ``q(mu^(M))`` to the cone ``Q`` (eq. 893).

    For each order ``M`` in ``orders``: whether the truncation reaches ``T`` (status),
    ``e(M, w) = sup_{tau <= T} max_{|alpha| = w} |mu^(M)_alpha - mu_alpha|`` for
    ``w = 1..M``, and ``sup_tau dist(q(mu^(M)), Q)``. The envelope
    ``C rho^(M+1) s^w`` is fitted (least squares in ``log e``, then ``C`` raised to bound
    every fitted point) on all but the ``n_heldout`` highest orders; ``heldout_ratio`` is the
    largest ``e / envelope`` on the held-out orders (``<= 1``: predicted by a constant
    independent of ``M``). ``ratios``: per-order decay ratios between successive orders;
    ``rho = max(ratios)``, ``s_plus``, ``C``: the envelope of (908) bounding every error;
    ``geometric``: every order reached ``T`` and ``rho <= RHO_MAX``. ``R`` is measured along
    the flow (module docstring).
    ``report_orders`` are measured the same way (``rows_reported``) and not fitted.

        >>> import attndyn
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> model = attndyn.UntiedModel(2, [0], mse_teacher_student("h1"), weight_decay=10.0)
        >>> pairs = model.gaussian_init(8, scale=[0.5, 1.0], seed=0)
        >>> lad = truncation_ladder(model, pairs, 0.2, (2, 4, 6), n_t=5)
        >>> lad["geometric"], sorted(lad)[:3]
        (True, ['C', 'R', 'T'])
    """
    from attndyn.numeric.attention.untied.fastslow import untied_flow

    orders = sorted(int(o) for o in orders)
    report_orders = sorted(int(o) for o in report_orders)
    _check_ladder_args(orders, report_orders, n_heldout, T)
    tau = np.linspace(0.0, float(T), int(n_t))
    top = model.hierarchy(orders[-1])
    flow = untied_flow(model, pairs, tau, mode="slaved", words=top.words, keep_pairs=True)
    if flow.status != 0:
        raise RuntimeError(f"slaved flow failed: {flow.message}")
    R = _flow_radius(model, pairs, flow)
    look = {tuple(w): i for i, w in enumerate(top.words)}
    rows = [_ladder_row(model, pairs, tau, flow, look, M) for M in orders + report_orders]
    rows, reported = rows[:len(orders)], rows[len(orders):]
    out = {"R": float(R), "orders": orders, "rows": rows, "rows_reported": reported,
           "T": float(T)}
    out.update(_fit_envelope(rows, n_heldout, R))
    return out


def _check_ladder_args(orders, report_orders, n_heldout, T):
    """The orders (at least 3 in 2..8), reported orders, held-out count and horizon of
    :func:`truncation_ladder`."""
    if len(orders) < 3 or orders[0] < 2 or orders[-1] > 8:
        raise ValueError(f"orders must hold at least 3 orders in 2..8, got {orders}")
    if report_orders and (report_orders[0] < 2 or report_orders[-1] > orders[-1]):
        raise ValueError(f"report_orders must lie in 2..{orders[-1]}, got {report_orders}")
    if not (isinstance(n_heldout, int) and 1 <= n_heldout <= len(orders) - 2):
        raise ValueError(f"n_heldout must be an int in 1..{len(orders) - 2}, got {n_heldout!r}")
    if not (math.isfinite(T) and 0 < T <= 100):
        raise ValueError(f"T must be in (0, 100], got {T!r}")


def _flow_radius(model, pairs, flow):
    """``R``: the largest ``||U||^2``, ``||V||^2`` (spectral) along the slaved flow and over
    the fixed teachers."""
    R = max(max(np.linalg.norm(U, 2) ** 2, np.linalg.norm(V, 2) ** 2)
            for st in flow.diagnostics["pairs"] for k in model.trainable for U, V in [st[k]])
    return max(R, max(max(np.linalg.norm(U, 2) ** 2, np.linalg.norm(V, 2) ** 2)
                      for k in range(model.K) if k not in model.trainable
                      for U, V in [pairs[k]]))


def _ladder_row(model, pairs, tau, flow, look, M):
    """One order of the ladder: its status, errors by word length against the flow and the
    largest distance of ``q(mu^(M))`` to the cone."""
    from attndyn.numeric.attention.untied.coefficients import low_from_words
    h = model.hierarchy(M)
    r = h.integrate(pairs, tau, check=None)
    n = r.t.size
    idx = np.array([look[tuple(w)] for w in h.words])
    err = np.abs(r.y[:h.n_moments, :n] - flow.y[idx, :n])
    lens = np.array([len(w) for w in h.words])
    e = [float(err[lens == w].max()) if n else math.nan for w in range(1, M + 1)]
    dist = 0.0
    for j in range(n):
        _, _, q1, q2 = low_from_words(model.K, h.words, r.y[:h.n_moments, j])
        dist = max(dist, cone_distance(q1, q2))
    return {"order": M, "n_moments": h.n_moments, "status": int(r.status),
            "tau_reached": float(r.t[-1]) if n else 0.0, "reached": r.status == 0,
            "errors_by_length": e, "cone_distance": dist, "message": r.message[:160]}


def _fit_envelope(rows, n_heldout, R) -> dict:
    """The envelope ``C rho^(M+1) s^w`` of eq. (908): the per-order ratios, the fit on all
    but the ``n_heldout`` highest orders, the held-out ratio, ``s_-``, ``s_+``, ``C``."""
    fit_rows = [row for row in rows[:-n_heldout] if row["reached"]]
    held = rows[-n_heldout:]
    if len(fit_rows) < 2 or not all(row["reached"] for row in rows):
        return {"rho": math.nan, "ratios": [], "s": math.nan, "C": math.nan,
                "s_plus": math.nan, "s_minus": math.nan,
                "heldout_ratio": math.inf, "geometric": False}
    # per-order decay ratio between successive orders, worst word length
    ratios = []
    for a, b in zip(rows[:-1], rows[1:]):
        step = b["order"] - a["order"]
        ratios.append(max((eb / ea) ** (1.0 / step) for ea, eb in
                          zip(a["errors_by_length"], b["errors_by_length"]) if ea > 0))
    X, y = [], []
    for row in fit_rows:
        for w, ev in enumerate(row["errors_by_length"], start=1):
            if ev > 0:
                X.append([1.0, row["order"] + 1.0, float(w)])
                y.append(math.log(ev))
    coef = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)[0]
    lrho, ls = float(coef[1]), float(coef[2])
    logC = max(yy - lrho * x[1] - ls * x[2] for x, yy in zip(X, y))
    heldout = max(ev * math.exp(-(logC + lrho * (row["order"] + 1) + ls * w)) for row in held
                  for w, ev in enumerate(row["errors_by_length"], start=1))
    # the envelope of eq. (908) over every order: rho = the largest measured ratio,
    # s_+ >= s_- = R / rho, C_T the smallest constant that bounds every error
    rho = max(ratios)
    s_minus = R / rho if rho > 0 else math.inf
    s_plus = max(math.exp(ls), 1.01 * s_minus)
    C_T = max(ev / (rho ** (row["order"] + 1) * s_plus ** w) for row in rows
              for w, ev in enumerate(row["errors_by_length"], start=1))
    return {"rho": rho, "ratios": ratios, "rho_fit": math.exp(lrho), "s": math.exp(ls),
            "s_minus": s_minus, "s_plus": s_plus, "C": C_T, "heldout_ratio": heldout,
            "geometric": bool(rho <= RHO_MAX)}


@register("cor8", "F.2, Cor. 8, eqs. (536), (892)-(908)",
          "untied truncations: geometric convergence in the order, q(mu^(M)) in the cone")
def check_cor8(budget, seed) -> CheckResult:
    """Corollary 8 on an untied ``h1`` teacher-student instance (module docstring).

    Held when every (even) order reaches ``T``, every per-order error ratio is at most
    :data:`RHO_MAX`, and ``q(mu^(M))`` stays in ``Q`` (distance <= :data:`CONE_TOL`, so the
    code's truncation is the paper's ``V_ext`` system (905)). The ``gamma = 0`` instance
    (outside the premise ``gamma > gamma*``) and the odd orders (whose ``q`` leaves ``Q``)
    are reported, not judged. ``worst`` is the largest per-order ratio ``rho``.

        >>> r = check_cor8("small", 0)
        >>> r.key, r.verdict
        ('cor8', 'held')
    """
    t_start = time.perf_counter()
    cfg = config(budget)
    ss = resolve_seed(seed)
    s_in, = ss.spawn(1)
    model, pairs = _instance(cfg, cfg.gamma, s_in)
    lad = truncation_ladder(model, pairs, cfg.T, cfg.orders, n_t=cfg.n_t,
                            n_heldout=cfg.n_heldout, report_orders=cfg.odd_orders)
    model0, _ = _instance(cfg, cfg.gamma_outside, s_in)
    out0 = truncation_ladder(model0, pairs, cfg.T_outside, cfg.orders[:3], n_t=cfg.n_t,
                             n_heldout=1, report_orders=cfg.odd_orders[:1])
    cone = max(r["cone_distance"] for r in lad["rows"])
    reached = all(r["reached"] for r in lad["rows"])
    ok = reached and lad["geometric"] and cone <= CONE_TOL
    e1 = ", ".join(f"{r['errors_by_length'][0]:.1e}" for r in lad["rows"])
    e0 = ", ".join(f"{r['errors_by_length'][0]:.1e}" + ("" if r["reached"] else
                                                         f" (stopped at {r['tau_reached']:.2f})")
                   for r in out0["rows"])
    odd = "; ".join(f"M = {r['order']}: {r['cone_distance']:.1e}"
                    for r in lad["rows_reported"] + out0["rows_reported"])
    rat = ", ".join(f"{x:.3f}" for x in lad["ratios"])
    measured = (f"largest per-order error ratio over M = {list(cfg.orders)} (ratios {rat}); "
                f"eq. (908) envelope C_T = {lad['C']:.3g}, s_+ = {lad['s_plus']:.3g}; held-out "
                f"order {cfg.orders[-1]} / envelope of the lower orders "
                f"{lad['heldout_ratio']:.2f}")
    detail = (f"h1, d = {cfg.d}, gamma = {cfg.gamma:g}, T = {cfg.T:g}: length-1 errors at "
              f"M = {list(cfg.orders)}: {e1}; R = {lad['R']:.3f} (s_- = R/rho = "
              f"{lad.get('s_minus', math.nan):.2f}); max dist(q(mu^(M)), Q) = {cone:.1e}. "
              f"Outside the premise (gamma = {cfg.gamma_outside:g}, T = {cfg.T_outside:g}, "
              f"reported): {e0}; max cone distance "
              f"{max(r['cone_distance'] for r in out0['rows']):.1e}. Odd orders (reported; the "
              f"paper's V_ext would project q there): max dist(q, Q) {odd}")
    data = {"config": dict(cfg.__dict__), "ladder": lad, "outside_premise": out0}
    from attndyn.numeric.attention.theorems.cor3 import jsonable
    return CheckResult("cor8", "F.2, Cor. 8, eq. (908)", "held" if ok else "not held",
                       len(cfg.orders), float(lad["rho"]), measured, bound=RHO_MAX,
                       expectation=(f"every order reaches T; per-order ratio <= {RHO_MAX:g} "
                                    f"(rho = R/s_- < 1); q(mu^(M)) in Q within {CONE_TOL:g}"),
                       detail=detail, data=jsonable(data),
                       wall_s=time.perf_counter() - t_start)
