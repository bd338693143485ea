"""The untied fast-slow theory (paper 003, section 4, appendix F), compiled and checked.

Notation (time scales for ``U <- U - eta (batch-mean grad) - (eta gamma/d) U``
and the same for ``V``): fast time ``t = eta n``, slow time ``tau = eta n / d``.
``M_k = U_k V_k^T``, ``A_k = U_k U_k^T``, ``B_k = V_k V_k^T``,
``m_k = Tr M_k / sqrt d``, ``tA_k = Tr A_k / d``, ``tB_k = Tr B_k / d``,
``q1_kl = Tr(M_k M_l^T)/d``, ``q2_kl = Tr(M_k M_l)/d``.

- Potential ``Phi(m, q1, q2) = E loss(G)`` with ``E G_ijk = C_ij m_k`` and
  ``Cov(G_ijk, G_i'j'l) = C_ii' C_jj' q1_kl + C_ij' C_ji' q2_kl`` (eq. 4).
  Gradients ``a^(r)_kl = dPhi/dq^(r)_kl`` with every matrix entry an
  independent variable (the convention of eqs. 32 and 42; for ``L = 1``
  ``a^(1) = a^(2) = E[d^2 loss/dG_k dG_l]/2``, half of the total derivative
  that eq. 48 quotes) and the ``m``-Hessian, from one compiled function.
- Fast flow (28): ``dm_k/dt = -(tA_k + tB_k) dPhi/dm_k`` for trainable ``k``,
  the moments frozen.
- Critical mean (29): ``m*(q)`` is the root of ``dPhi/dm_K = 0`` that the fast
  flow reaches from ``m(0)`` (integrated to equilibrium, then Newton on the
  ``m``-Hessian); Assumption 5 asks the Hessian to be positive definite there.
- ``psi_k = 2 sum_l sum_r a^(r)_kl [mu(M^(r)_l, B_k) + mu(A_k, M^(r)_l)]``
  (eq. 27) and ``beta_k = -psi_k / (tA_k + tB_k)`` (eq. 30).
- Slow hierarchy (31)-(32): :class:`UntiedHierarchy`, run by the generic sparse
  RHS kernel and the Dormand-Prince integrator with one compiled coefficient
  function (``m*`` by warm-started Newton, ``a^(r)``, ``beta``) of signature
  ``GRAD_SIG``.
- Finite-d matrix flow (:func:`untied_flow`), the gradient flow of
  ``Phi(m(U, V), q(U, V))`` with weight decay, on the fast time::

      dU/dt = -(Phi_m / sqrt d) V - (2/d) P V - (gamma/d) U
      dV/dt = -(Phi_m / sqrt d) U - (2/d) P^T U - (gamma/d) V,
      P_k = sum_l a^(1)_kl M_l + a^(2)_kl M_l^T;

  and its slaved limit on the slow time, ``m = m*(q)``::

      dU/dtau = -beta V - 2 P V - gamma U,   dV/dtau = -beta U - 2 P^T U - gamma V,

  whose normalised traces solve the slow hierarchy exactly at any ``d``.
- Weak recovery (section 4.2, F.3): eq. (42), Corollary 4, ``N_wr(c)`` (eq. 41).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.kernels.moments import word_traces
from attndyn.numeric.attention.untied.coefficients import (as_state, letter_mats, low_from_words,
                                                           obs, pair_order_parameters, ROOT_FAILED,
                                                           RootError, SlowState, coefficients,
                                                           UntiedTrajectory)
from attndyn.numeric.core.results import IntegrationError
from attndyn.numeric.core.validate import check_pos_float, check_t_eval
from attndyn.symbolic import untied as su
from attndyn.symbolic.words import canonical

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from scipy.integrate import OdeSolution

    from attndyn.numeric.attention.base import UntiedModelLike
    from attndyn.numeric.attention.untied.coefficients import UntiedCoefficients
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import ArrayLike

# one pair (U_k, V_k); the products M^(r)_l V_k, M^(r)_l U_k of trainable k (products);
# the gradients of the potential by name (UntiedCoefficients.gradients)
_Pair = tuple[np.ndarray, np.ndarray]
_Prods = dict[int, list[tuple[_Pair, _Pair]]]
_Grads = dict[str, Any]
_Rhs = Callable[[float, np.ndarray], np.ndarray]

__all__ = ["CriticalMean", "fast_flow", "critical_mean", "psi_beta", "untied_flow",
           "eq42_velocity", "exact_overlap_velocity", "corollary4", "weak_recovery_time",
           "slaved_velocity"]


# ---------------------------------------------------------------------------
# compiled pieces


# ---------------------------------------------------------------------------
# the kernels, called in one place each (their signatures may change)


# ---------------------------------------------------------------------------
# the potential of one model


# ---------------------------------------------------------------------------
# slow states


# ---------------------------------------------------------------------------
# fast flow (28) and the critical mean (29)


def _fast_rhs(th: UntiedCoefficients, tA: np.ndarray, tB: np.ndarray, q1: np.ndarray,
              q2: np.ndarray, m_full: np.ndarray, tr: list[int]) -> _Rhs:
    D = tA + tB
    K = th.K

    def f(t: float, y: np.ndarray) -> np.ndarray:
        m = m_full.copy()
        m[tr] = y
        g = th.gradients(m, q1, q2)["grad_m"]
        dm: np.ndarray = -(D[tr] * g[tr])
        return dm
    return f


def fast_flow(model: UntiedModelLike, init: Any, t_eval: ArrayLike, *, rtol: float = 1e-10,
              atol: float = 1e-12,
              m_max: float = 1e6, raise_on_failure: bool = False) -> UntiedTrajectory:
    """Integrate the fast flow (28) from ``init`` (pairs ``(U_k, V_k)``, a
    :class:`SlowState` or a dict ``{m, tA, tB, q1, q2}``).

    ``dm_k/dt = -(tA_k(0) + tB_k(0)) dPhi/dm_k(m, q1(0), q2(0))`` for trainable
    ``k`` on the fast time ``t = eta n``; the moments stay frozen and the fixed
    means stay at ``m_k(0)``. Returns rows ``m_k`` and ``grad_m_k``; status -3
    when ``|m|`` exceeds ``m_max`` (no root in reach: the flow runs away).
    """
    from scipy.integrate import solve_ivp
    th = coefficients(model)
    m0, tA, tB, q1, q2, d = as_state(model, init)
    t_eval = check_t_eval(t_eval)
    tr = list(model.trainable)
    f = _fast_rhs(th, tA, tB, q1, q2, m0, tr)

    def run_away(t: float, y: np.ndarray) -> float:
        return m_max - float(np.abs(y).max())
    run_away.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attribute
    if t_eval[-1] > 0:
        sol = solve_ivp(f, (0.0, float(t_eval[-1])), m0[tr], method="DOP853", t_eval=t_eval,
                        rtol=rtol, atol=atol, events=run_away)
        ts, Y = sol.t, sol.y
        status = 0 if sol.status == 0 else (-3 if sol.status == 1 else -1)
        message = ("success: fast flow (28) reached the last output time" if status == 0 else
                   f"fast flow stopped at t = {ts[-1] if ts.size else 0.0:.4g}: " + (
                       f"|m| > m_max = {m_max:g}: the m-gradient has no root in reach of m(0)"
                       if status == -3 else sol.message))
    else:
        ts, Y, status, message = t_eval, np.repeat(m0[tr][:, None], t_eval.size, 1), 0, "success"
    K = model.K
    rows = np.empty((2 * K, ts.size))
    for j in range(ts.size):
        m = m0.copy()
        m[tr] = Y[:, j]
        rows[:K, j] = m
        rows[K:, j] = th.gradients(m, q1, q2)["grad_m"]
    params = model.params_dict()
    params.update({"time": "t = eta * n (fast)", "rtol": rtol, "atol": atol, "d": d})
    res = UntiedTrajectory(t=np.asarray(ts, float), y=rows,
                           names=[obs("m", k) for k in range(K)] + [obs("grad_m", k) for k in range(K)],
                           kind="untied_fast_flow", params=params, status=status, message=message,
                           diagnostics={"tA": tA.tolist(), "tB": tB.tolist(), "q1": q1.tolist(),
                                        "q2": q2.tolist()}, inv=su.untied_alphabet(K).inv)
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res


@dataclass
class CriticalMean:
    """Result of :func:`critical_mean`: the root ``m*`` of eq. (29) and how it was reached.

    ``m``: all ``K`` means (fixed ones at ``m_k(0)``); ``label``: which root;
    ``status``: 0 found, negative on failure (``message`` says why);
    ``stable``: the ``m``-Hessian on the trainable block is positive definite
    (Assumption 5); ``unstable_start``: ``m(0)`` sits on a critical point with a
    negative curvature direction (the symmetric root), so fluctuations decide.
    """

    m: np.ndarray
    m0: np.ndarray
    label: str
    status: int
    message: str
    stable: bool
    unstable_start: bool
    diagnostics: dict

    @property
    def success(self) -> bool:
        return self.status == 0


def newton(th: UntiedCoefficients, m: ArrayLike, q1: np.ndarray, q2: np.ndarray,
            tr: list[int], tol: float = 1e-12, maxit: int = 50
            ) -> tuple[np.ndarray, bool, int, float]:
    m = np.array(m, float)
    for it in range(maxit + 1):
        g = th.gradients(m, q1, q2)
        r = g["grad_m"][tr]
        if not np.all(np.isfinite(r)):
            return m, False, it, np.inf
        res = float(np.abs(r).max()) if r.size else 0.0
        if res <= tol:
            return m, True, it, res
        H = g["hess_m"][np.ix_(tr, tr)]
        try:
            step = np.linalg.solve(H, r)
        except np.linalg.LinAlgError:
            return m, False, it, res
        m[tr] -= step
        if not np.all(np.isfinite(m)):
            return m, False, it, np.inf
    return m, False, maxit, res


def _label(m: np.ndarray, tr: list[int], stable: bool, zero_tol: float = 1e-9) -> str:
    parts = []
    for k in tr:
        v = m[k]
        sign = "0" if abs(v) <= zero_tol * max(1.0, np.abs(m).max()) else ("+" if v > 0 else "-")
        parts.append(f"m*_{k + 1} = {v:+.6g} ({sign})")
    return ("stable" if stable else "NOT stable") + " root " + ", ".join(parts)


def critical_mean(model: UntiedModelLike, init: Any, *, t_max: float = 1e4, eq_tol: float = 1e-9,
                  newton_tol: float = 1e-12, bl_tol: float = 1e-3, m_max: float = 1e3,
                  probe: float = 1e-3, warn: bool = True, raise_on_failure: bool = False
                  ) -> CriticalMean:
    """The critical mean ``m*(q)`` of eq. (29) that the fast flow (28) reaches from ``m(0)``.

    The fast flow is integrated to equilibrium (``max |dm/dt| <= eq_tol``) and
    then polished by Newton's method on the ``m``-Hessian. Reported: the root
    (``label``), the boundary-layer time ``t_bl`` (first fast time with
    ``|m(t) - m*|_inf <= bl_tol max(1, |m*|)``), the residual, the Hessian's
    eigenvalues on the trainable block and Assumption 5 (all positive).

    When ``m(0)`` is already a critical point with a negative curvature
    direction (for ``h2``, the symmetric point ``m = 0``), the deterministic
    flow stays there but the point is unstable and fluctuations decide: a
    warning says so, ``unstable_start`` is True, and ``diagnostics
    ["alternatives"]`` lists the roots reached from ``m(0) +- probe v`` along
    the most negative curvature direction ``v``.

    Failures (status < 0, or :class:`RootError` with ``raise_on_failure``):
    the flow runs past ``|m| > m_max`` (-3: the m-gradient has no root near
    ``m(0)``), does not settle by ``t_max`` (-2), or Newton does not converge (-1).
    """
    th = coefficients(model)
    m0, tA, tB, q1, q2, d = as_state(model, init)
    tr = list(model.trainable)
    t_max = check_pos_float(t_max, "t_max")
    D = tA + tB
    if np.any(D[tr] <= 0):
        raise ValueError("tA_k + tB_k must be > 0 for every trainable k (Assumption 4.4)")
    diag = {"m0": m0.tolist(), "d": d}

    def fail(status: int, msg: str) -> CriticalMean:
        res = CriticalMean(m=m0.copy(), m0=m0, label="no root", status=status, message=msg,
                           stable=False, unstable_start=False, diagnostics=diag)
        if raise_on_failure:
            raise RootError(msg)
        return res

    g0 = th.gradients(m0, q1, q2)
    if not np.all(np.isfinite(g0["grad_m"])):
        return fail(-4, "the m-gradient of the potential is not finite at m(0)")
    H0 = g0["hess_m"][np.ix_(tr, tr)]
    r0 = float(np.abs(g0["grad_m"][tr]).max())
    ev0, evec0 = np.linalg.eigh(0.5 * (H0 + H0.T))
    unstable_start = bool(r0 <= eq_tol and ev0[0] < 0)
    if r0 <= eq_tol:
        m_end = m0.copy()
        diag["fast_flow"] = "m(0) is already critical: the fast flow (28) does not move"
    else:
        m_end, why = _settle_fast_flow(th, m0, tA, tB, q1, q2, tr, t_max, eq_tol, m_max, diag)
        if m_end is None:
            assert why is not None  # a failed settle says why
            return fail(*why)
    m_star, ok, iters, res = newton(th, m_end, q1, q2, tr, tol=newton_tol)
    diag.update({"newton_iterations": iters, "residual": res})
    if not ok:
        return fail(-1, f"Newton's method on the m-Hessian did not converge from the fast "
                        f"flow's end point m = {m_end[tr]} (residual {res:.3g})")
    if np.abs(m_star - m_end).max() > 1e-3 * max(1.0, np.abs(m_end).max()):
        return fail(-1, f"Newton jumped from the fast flow's end point {m_end[tr]} to another "
                        f"root {m_star[tr]}; tighten eq_tol")
    ev, stable = _root_curvature(th, m_star, q1, q2, tr, diag)
    diag["t_boundary_layer"] = _boundary_layer_time(diag, m_star, tr, bl_tol)
    diag["bl_tol"] = bl_tol
    label = _label(m_star, tr, stable)
    msg = f"success: {label}, reached by the fast flow (28) from m(0) = {np.round(m0[tr], 6)}"
    if unstable_start:
        diag["alternatives"] = alts = _alternative_roots(
            model, m0, evec0[:, 0], tr, probe, dict(tA=tA, tB=tB, q1=q1, q2=q2),
            dict(t_max=t_max, eq_tol=eq_tol, newton_tol=newton_tol, m_max=m_max))
        msg = _unstable_message(m0[tr], ev0[0], probe, alts)
        if warn:
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
    elif not stable and warn:
        msg += f"; Assumption 5 fails: the m-Hessian has eigenvalue {ev[0]:.4g} <= 0 at the root"
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return CriticalMean(m=m_star, m0=m0, label=label, status=0, message=msg, stable=stable,
                        unstable_start=unstable_start, diagnostics=diag)


def _settle_fast_flow(th: UntiedCoefficients, m0: np.ndarray, tA: np.ndarray, tB: np.ndarray,
                      q1: np.ndarray, q2: np.ndarray, tr: list[int], t_max: float,
                      eq_tol: float, m_max: float, diag: dict[str, Any]
                      ) -> tuple[np.ndarray | None, tuple[int, str] | None]:
    """Run the fast flow (28) from ``m0`` until it settles: ``(m_end, None)``, or ``(None,
    (status, message))`` when it fails, runs off or does not settle by ``t_max``."""
    from scipy.integrate import solve_ivp
    f = _fast_rhs(th, tA, tB, q1, q2, m0, tr)

    def settled(t: float, y: np.ndarray) -> float:
        return float(np.abs(f(t, y)).max()) - eq_tol
    settled.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attribute

    def run_away(t: float, y: np.ndarray) -> float:
        return m_max - float(np.abs(y).max())
    run_away.terminal = True  # type: ignore[attr-defined]
    sol = solve_ivp(f, (0.0, t_max), m0[tr], method="DOP853", rtol=1e-10, atol=1e-13,
                    events=[settled, run_away], dense_output=True)
    if sol.status == -1:
        return None, (-1, f"fast flow (28) failed: {sol.message}")
    if sol.t_events[1].size:
        return None, (-3, f"no root of the m-gradient in reach of m(0) = {m0[tr]}: the fast "
                          f"flow (28) runs off to |m| > {m_max:g} by t = {sol.t[-1]:.4g}")
    if not sol.t_events[0].size:
        return None, (-2, f"the fast flow (28) did not settle by t_max = {t_max:g} "
                          f"(max |dm/dt| = {abs(f(0, sol.y[:, -1])).max():.3g} > eq_tol)")
    m_end = m0.copy()
    m_end[tr] = sol.y[:, -1]
    diag["t_settled"] = float(sol.t[-1])
    diag["_dense"] = sol.sol
    return m_end, None


def _boundary_layer_time(diag: dict[str, Any], m_star: np.ndarray, tr: list[int],
                         bl_tol: float) -> float:
    """First fast time with ``|m(t) - m*|_inf <= bl_tol max(1, |m*|)`` on the fast flow's
    dense output (popped from ``diag``); 0 when the flow did not move."""
    dense: OdeSolution | None = diag.pop("_dense", None)
    if dense is None:
        return 0.0
    ts = np.linspace(0.0, diag["t_settled"], 4001)
    dev = np.abs(dense(ts) - m_star[tr][:, None]).max(axis=0)
    thr = bl_tol * max(1.0, float(np.abs(m_star).max()))
    inside = np.flatnonzero(dev <= thr)
    return float(ts[inside[0]]) if inside.size else float(diag["t_settled"])


def _root_curvature(th: UntiedCoefficients, m_star: np.ndarray, q1: np.ndarray, q2: np.ndarray,
                    tr: list[int], diag: dict[str, Any]) -> tuple[np.ndarray, bool]:
    """The ``m``-Hessian's eigenvalues at the root (trainable block) and Assumption 5."""
    g = th.gradients(m_star, q1, q2)
    Hs = g["hess_m"][np.ix_(tr, tr)]
    ev = np.linalg.eigvalsh(0.5 * (Hs + Hs.T))
    stable = bool(ev[0] > 0)
    diag["hessian_eigenvalues"] = ev.tolist()
    diag["assumption5"] = stable
    return ev, stable


def _unstable_message(m0: np.ndarray, ev0: float, probe: float,
                      alts: list[dict[str, Any]]) -> str:
    """The message of a start on an unstable critical point, with the roots reached nearby."""
    return (f"m(0) = {np.round(m0, 6)} sits on an unstable critical point of Phi in m "
            f"(Hessian eigenvalue {ev0:.4g} < 0): the deterministic fast flow stays on "
            "this symmetric root, but any fluctuation leaves it; roots reached from "
            f"m(0) +- {probe:g} v: " + "; ".join(a["label"] for a in alts))


def _alternative_roots(model: UntiedModelLike, m0: np.ndarray, v: np.ndarray, tr: list[int],
                       probe: float, moments: dict[str, Any], kw: dict[str, Any]
                       ) -> list[dict[str, Any]]:
    """The roots reached from ``m0 +- probe v`` (``v`` the most negative curvature direction)."""
    alts = []
    for sgn in (1.0, -1.0):
        mp = m0.copy()
        mp[tr] = m0[tr] + sgn * probe * v
        alt = critical_mean(model, dict(m=mp, **moments), warn=False, **kw)
        alts.append({"m0": mp.tolist(), "m": alt.m.tolist(), "label": alt.label,
                     "status": alt.status})
    return alts


def psi_beta(model: UntiedModelLike, init: Any, m_star: ArrayLike | None = None
             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``psi`` (eq. 27) and ``beta = -psi/(tA + tB)`` (eq. 30) at a slow state.

    ``init``: pairs ``(U_k, V_k)`` (exact finite-d moments) or a
    :class:`SlowState` holding the length-2 words. ``m_star`` defaults to
    :func:`critical_mean`. Entries of fixed indices are 0.
    """
    th = coefficients(model)
    K = model.K
    tr = list(model.trainable)
    if isinstance(init, SlowState):
        words, mu = init.words, init.mu
    else:
        pairs = model.check_factors(init, "pairs")
        words = [w for w in su.untied_words(K, 2)]
        mats, _ = letter_mats(pairs)
        mu = word_traces(mats, words)
    st = SlowState(words=words, mu=mu, m0=as_state(model, init)[0])
    if m_star is None:
        cm = critical_mean(model, st, warn=False, raise_on_failure=True)
        m_star = cm.m
    tA, tB, q1, q2 = low_from_words(K, words, mu)
    g = th.gradients(m_star, q1, q2)
    alph = su.untied_alphabet(K)
    look = {w: i for i, w in enumerate(words)}
    psi = np.zeros(K)
    for k in tr:
        s = 0.0
        for l in range(K):
            for r, a in ((1, g["a1"]), (2, g["a2"])):
                Mr = su.mr(l, r)
                s += a[k, l] * (mu[look[canonical((Mr, 4 * k + su.B), alph)]]
                                + mu[look[canonical((4 * k + su.A, Mr), alph)]])
        psi[k] = 2.0 * s
    beta = np.zeros(K)
    beta[tr] = -psi[tr] / (tA[tr] + tB[tr])
    return psi, beta


# ---------------------------------------------------------------------------
# the slow hierarchy


# ---------------------------------------------------------------------------
# finite-d matrix flow

def flow_terms(th: UntiedCoefficients, pairs: Sequence[_Pair], tr: list[int],
                fixed_M: dict[int, np.ndarray] | None = None
                ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """``M_k`` (the fixed ones from ``fixed_M``), the means and the overlaps."""
    K = len(pairs)
    d = pairs[0][0].shape[0]
    Ms = [fixed_M[k] if (fixed_M is not None and k in fixed_M) else U @ V.T
          for k, (U, V) in enumerate(pairs)]
    m = np.array([np.trace(Mk) for Mk in Ms]) / math.sqrt(d)
    q1 = np.array([[np.sum(Ms[k] * Ms[l]) for l in range(K)] for k in range(K)]) / d
    q2 = np.array([[np.sum(Ms[k] * Ms[l].T) for l in range(K)] for k in range(K)]) / d
    return Ms, m, q1, q2


def products(pairs: Sequence[_Pair], Ms: list[np.ndarray], tr: list[int]) -> _Prods:
    """``M^(r)_l V_k`` and ``M^(r)_l U_k`` for trainable ``k`` (r = 1: M_l, r = 2: M_l^T)."""
    out: _Prods = {}
    for k in tr:
        U, V = pairs[k]
        out[k] = [((Ml @ V, Ml.T @ V), (Ml @ U, Ml.T @ U)) for Ml in Ms]
    return out


def velocity(pairs: Sequence[_Pair], prods: _Prods, g: _Grads, tr: list[int],
              coef_m: np.ndarray, scale_p: float, gamma_s: float) -> list[_Pair]:
    """``dU_k = -c_k V_k - s (P_k V_k) - gamma_s U_k``, ``dV_k = -c_k U_k - s (P_k^T U_k) - gamma_s V_k``."""
    out = []
    for k in tr:
        U, V = pairs[k]
        PV = np.zeros_like(V)
        PtU = np.zeros_like(U)
        for l, ((MV, MtV), (MU, MtU)) in enumerate(prods[k]):
            a1, a2 = g["a1"][k, l], g["a2"][k, l]
            if a1 != 0.0:
                PV += a1 * MV
                PtU += a1 * MtU
            if a2 != 0.0:
                PV += a2 * MtV
                PtU += a2 * MU
        dU = -coef_m[k] * V - scale_p * PV - gamma_s * U
        dV = -coef_m[k] * U - scale_p * PtU - gamma_s * V
        out.append((dU, dV))
    return out


def _psi_finite(g: _Grads, pairs: Sequence[_Pair], prods: _Prods, k: int, d: int) -> float:
    """``psi_k`` (eq. 27) from finite-d matrices: ``Tr(M B_k)/d + Tr(A_k M)/d =
    (<M V_k, V_k> + <U_k, M U_k>)/d`` for ``M = M^(r)_l``."""
    U, V = pairs[k]
    s = 0.0
    for l, ((MV, MtV), (MU, MtU)) in enumerate(prods[k]):
        s += g["a1"][k, l] * (np.sum(MV * V) + np.sum(U * MU))
        s += g["a2"][k, l] * (np.sum(MtV * V) + np.sum(U * MtU))
    psi: float = 2.0 * s / d
    return psi


def _beta_finite(g: _Grads, pairs: Sequence[_Pair], prods: _Prods, tr: list[int], K: int,
                 d: int) -> np.ndarray:
    beta = np.zeros(K)
    for k in tr:
        U, V = pairs[k]
        beta[k] = -_psi_finite(g, pairs, prods, k, d) / ((np.sum(U * U) + np.sum(V * V)) / d)
    return beta


def slaved_velocity(model: UntiedModelLike, pairs: Sequence[_Pair], m_star: ArrayLike
                    ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """``(dU_k/dtau, dV_k/dtau)`` of the slaved flow at the pairs, with ``m = m_star``."""
    th = coefficients(model)
    tr = list(model.trainable)
    d = pairs[0][0].shape[0]
    Ms, _, q1, q2 = flow_terms(th, pairs, tr)
    g = th.gradients(m_star, q1, q2)
    prods = products(pairs, Ms, tr)
    beta = _beta_finite(g, pairs, prods, tr, model.K, d)
    return velocity(pairs, prods, g, tr, beta, 2.0, model.weight_decay)


def untied_flow(model: UntiedModelLike, pairs: Sequence[Any], t_eval: ArrayLike,
                mode: str = "full", *, order: int = 2,
                words: Sequence[Sequence[int]] | None = None,
                rtol: float = 1e-10, atol: float = 1e-12, method: str = "DOP853",
                blowup: float = 1e100, newton_tol: float = 1e-12, keep_pairs: bool = False,
                max_bytes: float = 8 * 2**30, raise_on_failure: bool = False) -> UntiedTrajectory:
    """The finite-d untied matrix flow from ``pairs = [(U_k, V_k)]``.

    ``mode="full"``: the gradient flow of ``Phi(m(U, V), q(U, V))`` with weight
    decay on the fast time ``t = eta n`` (module docstring); its traces are the
    SGD drift (exact for linear activations, ``O(1/d)`` otherwise).
    ``mode="slaved"``: the slow-time limit with ``m = m*(q)`` (the root the
    fast flow reaches from ``m(0)``, followed by Newton) and the effective bias
    ``beta`` of eq. (30) from the finite-d moments; its traces are an exact
    solution of the slow hierarchy (31)-(32) at this ``d``, the oracle of every
    truncation. ``t_eval`` is in the mode's own time (fast ``t`` or slow ``tau``).

    Rows: every word up to ``order`` (or ``words``), then ``m_k``, ``tA_k``,
    ``tB_k``, ``q1_kl``, ``q2_kl`` for all ``k, l`` (the SGD names). In the full
    mode ``diagnostics["handover"]`` reports the boundary-layer time of (28)
    and ``|m - m*(q)|`` along the run; in the slaved mode ``m`` is ``m*(q)``.
    The memory of the dense products is estimated first and refused above
    ``max_bytes``.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> pairs = attndyn.gaussian_init(model, 8, rng=0)
    >>> r = attndyn.untied_flow(model, pairs, [0.0, 0.05])
    >>> r.status, r.names[:4]
    (0, ['mu_M1', 'mu_A1', 'mu_B1', 'mu_M2'])
    """
    if mode not in ("full", "slaved"):
        raise ValueError(f"mode must be 'full' or 'slaved', got {mode!r}")
    th = coefficients(model)
    pairs = model.check_factors(pairs, "pairs")
    t_eval = check_t_eval(t_eval)
    K = model.K
    d = pairs[0][0].shape[0]
    tr = list(model.trainable)
    # dense d x d products: about (12 + 4K) of them live at once, plus the integrator's stages
    need = 8.0 * d * d * (12 + 4 * K) + 8.0 * 12 * sum(2 * pairs[k][0].size for k in tr)
    if need > max_bytes:
        raise ValueError(f"untied_flow at d = {d} needs about {need / 2**30:.3g} GiB, above "
                         f"max_bytes = {max_bytes / 2**30:.3g} GiB; lower d or raise max_bytes")
    alph = su.untied_alphabet(K)
    if words is None:
        words = model.words(su.check_order(order))
    else:
        words = [canonical(alph.check_word(w, "words"), alph) for w in words]
    cm0 = critical_mean(model, pairs, warn=(mode == "slaved"))
    if mode == "slaved" and not cm0.success:
        if raise_on_failure:
            raise RootError(cm0.message)
        return _flow_result(model, words, t_eval[:0], [], [], d, mode, ROOT_FAILED,
                            f"root search failed: {cm0.message}", {"root": cm0.label})
    packer = _Packer(pairs, tr)
    warm = {"m": cm0.m.copy() if cm0.success else None, "fail": False}
    rhs = flow_rhs(th, model, pairs, packer, mode, warm, newton_tol)
    y0 = np.concatenate([np.concatenate([pairs[k][0].ravel(), pairs[k][1].ravel()]) for k in tr])
    ts, Ys, status, message = _integrate_flow(rhs, y0, t_eval, mode, method, rtol, atol, blowup,
                                              warm)
    states = [packer.unpack(Ys[:, j]) for j in range(ts.size)]
    diag = {"root": cm0.label, "root_status": cm0.status, "unstable_start": cm0.unstable_start,
            "assumption5": cm0.stable}
    m_rows = _means_and_handover(th, states, ts, cm0, tr, mode, d, newton_tol, diag)
    res = _flow_result(model, words, ts, states, m_rows, d, mode, status, message, diag)
    if keep_pairs:
        res.diagnostics["pairs"] = states
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res


class _Packer:
    """The trainable pairs as one flat state vector and back (the fixed ones from ``pairs``)."""

    def __init__(self, pairs: Sequence[_Pair], tr: list[int]) -> None:
        self.pairs, self.tr = list(pairs), tr
        self.shapes = [pairs[k][0].shape for k in tr]
        self.sizes = [int(np.prod(s)) for s in self.shapes]

    def unpack(self, y: np.ndarray) -> list[_Pair]:
        cur = list(self.pairs)
        off = 0
        for j, k in enumerate(self.tr):
            n, sh = self.sizes[j], self.shapes[j]
            cur[k] = (y[off:off + n].reshape(sh), y[off + n:off + 2 * n].reshape(sh))
            off += 2 * n
        return cur

    @staticmethod
    def pack(vel: Sequence[_Pair]) -> np.ndarray:
        return np.concatenate([np.concatenate([dU.ravel(), dV.ravel()]) for dU, dV in vel])


def flow_rhs(th: UntiedCoefficients, model: UntiedModelLike, pairs: Sequence[_Pair],
              packer: _Packer, mode: str, warm: dict[str, Any], newton_tol: float) -> _Rhs:
    """The right-hand side of the full flow (fast time) or the slaved flow (slow time);
    the slaved one follows ``m*(q)`` by Newton from ``warm["m"]`` (a failure sets
    ``warm["fail"]`` and returns NaN, which stops the integrator)."""
    K, tr, gamma = model.K, packer.tr, model.weight_decay
    d = pairs[0][0].shape[0]
    fixed_M = {k: pairs[k][0] @ pairs[k][1].T for k in range(K) if k not in tr}

    def rhs_full(t: float, y: np.ndarray) -> np.ndarray:
        cur = packer.unpack(y)
        Ms, m, q1, q2 = flow_terms(th, cur, tr, fixed_M)
        g = th.gradients(m, q1, q2)
        return packer.pack(velocity(cur, products(cur, Ms, tr), g, tr,
                                     g["grad_m"] / math.sqrt(d), 2.0 / d, gamma / d))

    def rhs_slaved(t: float, y: np.ndarray) -> np.ndarray:
        cur = packer.unpack(y)
        Ms, _, q1, q2 = flow_terms(th, cur, tr, fixed_M)
        m, ok, _, _ = newton(th, warm["m"], q1, q2, tr, tol=newton_tol)
        if not ok:
            warm["fail"] = True
            return np.full(y.size, np.nan)
        warm["m"] = m
        g = th.gradients(m, q1, q2)
        prods = products(cur, Ms, tr)
        beta = _beta_finite(g, cur, prods, tr, K, d)
        return packer.pack(velocity(cur, prods, g, tr, beta, 2.0, gamma))
    return rhs_full if mode == "full" else rhs_slaved


def _integrate_flow(rhs: _Rhs, y0: np.ndarray, t_eval: np.ndarray, mode: str, method: str,
                    rtol: float, atol: float, blowup: float, warm: dict[str, Any]
                    ) -> tuple[np.ndarray, np.ndarray, int, str]:
    """``(ts, Ys, status, message)`` of ``solve_ivp`` on the flow, cut at the first
    non-finite column; status -3 for a blow-up, -1 for a solver failure, ROOT_FAILED when
    the slaved root was lost."""
    from scipy.integrate import solve_ivp

    def blow(t: float, y: np.ndarray) -> float:
        return blowup - float(np.abs(y).max())
    blow.terminal = True  # type: ignore[attr-defined]  # solve_ivp's event attribute
    if not t_eval[-1] > 0:
        return t_eval, np.repeat(y0[:, None], t_eval.size, 1), 0, "success"
    with np.errstate(all="ignore"):
        from attndyn.numeric.attention.odesolve import budgeted, check_horizon_work, deadline
        if deadline() is None:  # no time limit: refuse a run of unbounded work
            kept = dict(warm)  # the estimate's evaluations must not move the Newton start
            check_horizon_work(rhs, y0, float(t_eval[-1]), method, f"untied matrix flow ({mode})")
            warm.clear()
            warm.update(kept)
        sol = solve_ivp(budgeted(rhs), (0.0, float(t_eval[-1])), y0, method=method,
                        t_eval=t_eval,
                        rtol=rtol, atol=atol, events=blow)
    # no output time reached: scipy leaves y and t as empty lists
    ts, Ys = np.asarray(sol.t, dtype=np.float64), np.asarray(sol.y, dtype=np.float64)
    Ys = Ys.reshape(y0.size, ts.size)
    status = 0 if sol.status == 0 else (-3 if sol.status == 1 else -1)
    if warm["fail"] and status != 0:
        status = ROOT_FAILED
    ok_cols = np.all(np.isfinite(Ys), axis=0)
    if not ok_cols.all():
        first = int(np.argmin(ok_cols))
        ts, Ys = ts[:first], Ys[:, :first]
        status = status or -3
    message = (f"success: untied matrix flow ({mode}) reached the last output time"
               if status == 0 else f"untied matrix flow ({mode}) stopped at "
               f"{'t' if mode == 'full' else 'tau'} = {ts[-1] if ts.size else 0.0:.4g}: "
               + ("the root m*(q) was lost (Newton failed)" if status == ROOT_FAILED
                  else sol.message))
    return ts, Ys, status, message


def _means_and_handover(th: UntiedCoefficients, states: list[list[_Pair]], ts: np.ndarray,
                        cm0: CriticalMean, tr: list[int], mode: str, d: int,
                        newton_tol: float, diag: dict[str, Any]) -> list[np.ndarray]:
    """The rows of ``m``: ``m*(q)`` followed by Newton (slaved) or the finite-d ``m``
    (full); in the full mode ``diag["handover"]`` gets the fast-to-slow hand-over."""
    m_slaved = []
    m_track = cm0.m.copy() if cm0.success else None
    gaps = []
    for cur in states:
        _, m_fin, q1, q2 = flow_terms(th, cur, tr)
        if m_track is not None:
            mm, ok, _, _ = newton(th, m_track, q1, q2, tr, tol=newton_tol)
            m_track = mm if ok else m_track
            gaps.append(float(np.abs(m_fin[tr] - mm[tr]).max()) if ok else np.nan)
        m_slaved.append(m_track.copy() if (mode == "slaved" and m_track is not None) else m_fin)
    if mode == "full" and cm0.success:
        t_bl = float(cm0.diagnostics.get("t_boundary_layer", 0.0))
        j = int(np.searchsorted(ts, t_bl)) if ts.size else 0
        diag["handover"] = {"t_boundary_layer": t_bl, "tau_boundary_layer": t_bl / d,
                            "gap_at_handover": gaps[min(j, len(gaps) - 1)] if gaps else None,
                            "gap": gaps, "root": cm0.label}
    return m_slaved

def _flow_result(model: UntiedModelLike, words: Sequence[Sequence[int]], ts: np.ndarray,
                 states: Sequence[Sequence[_Pair]], means: Sequence[np.ndarray], d: int,
                 mode: str, status: int, message: str, diag: dict[str, Any]
                 ) -> UntiedTrajectory:
    K = model.K
    rows = []
    for cur, m in zip(states, means):
        mats, _ = letter_mats(cur)
        _, tA, tB, q1, q2 = pair_order_parameters(cur)
        rows.append(np.concatenate([word_traces(mats, words), m, tA, tB, q1.ravel(), q2.ravel()]))
    names = ([su.word_name(w, K) for w in words] + [obs("m", k) for k in range(K)]
             + [obs("tA", k) for k in range(K)] + [obs("tB", k) for k in range(K)]
             + [obs("q1", k, l) for k in range(K) for l in range(K)]
             + [obs("q2", k, l) for k in range(K) for l in range(K)])
    Y = np.array(rows).T if rows else np.zeros((len(names), 0))
    params = model.params_dict()
    params.update({"d": d, "mode": mode,
                   "time": "t = eta * n (fast)" if mode == "full" else "tau = eta * n / d (slow)"})
    diag = dict(diag)
    diag["d"] = d
    return UntiedTrajectory(t=np.asarray(ts, float), y=Y, names=names,
                            words=[tuple(w) for w in words], kind=f"untied_flow_{mode}",
                            params=params, status=status, message=message, diagnostics=diag,
                            inv=su.untied_alphabet(K).inv)


# ---------------------------------------------------------------------------
# weak recovery (section 4.2, appendix F.3)

def _check_st(model: UntiedModelLike, student: int, teacher: int) -> tuple[int, int]:
    K = model.K
    s, t = int(student), int(teacher)
    for nm, v in (("student", s), ("teacher", t)):
        if not 0 <= v < K:
            raise ValueError(f"{nm} index {v} out of range: allowed 0..{K - 1}")
    if s == t:
        raise ValueError("student and teacher must differ")
    if s not in model.trainable:
        raise ValueError(f"student {s} must be trainable (trainable = {model.trainable})")
    if t in model.trainable:
        raise ValueError(f"teacher {t} must be fixed (trainable = {model.trainable})")
    return s, t


def eq42_velocity(model: UntiedModelLike, init: Any, *, student: int = 0, teacher: int = 1,
                  m_star: ArrayLike | None = None) -> NDArray[np.float64]:
    """Eq. (42): ``d(q1_st, q2_st)/d tau (0) = -2 D_s(0) Q2 g*_st`` with
    ``D_s = tA_s + tB_s``, ``Q2 = [[q1_tt, q2_tt], [q2_tt, q1_tt]]`` and
    ``g* = (a1_st, a2_st)`` at ``(m*, q(0))`` (convention of eq. 32, not the
    total derivative of eq. 48). Valid under Assumption 6 (free student and teacher)."""
    s, t = _check_st(model, student, teacher)
    m0, tA, tB, q1, q2, _ = as_state(model, init)
    if m_star is None:
        m_star = critical_mean(model, init, warn=False, raise_on_failure=True).m
    g = coefficients(model).gradients(m_star, q1, q2)
    Q2 = np.array([[q1[t, t], q2[t, t]], [q2[t, t], q1[t, t]]])
    gs = np.array([g["a1"][s, t], g["a2"][s, t]])
    vel: NDArray[np.float64] = -2.0 * (tA[s] + tB[s]) * Q2 @ gs
    return vel


def exact_overlap_velocity(model: UntiedModelLike, pairs: Sequence[Any], *, student: int = 0,
                           teacher: int = 1) -> NDArray[np.float64]:
    """``d(q1_st, q2_st)/d tau`` of the slaved flow at finite-d pairs, exactly
    (from the matrix velocities, no freeness assumption)."""
    s, t = _check_st(model, student, teacher)
    pairs = model.check_factors(pairs, "pairs")
    d = pairs[0][0].shape[0]
    cm = critical_mean(model, pairs, warn=False, raise_on_failure=True)
    vel = slaved_velocity(model, pairs, cm.m)
    j = list(model.trainable).index(s)
    dU, dV = vel[j]
    U, V = pairs[s]
    dM = dU @ V.T + U @ dV.T
    Mt = pairs[t][0] @ pairs[t][1].T
    dq: NDArray[np.float64] = np.array([np.sum(dM * Mt), np.sum(dM * Mt.T)]) / d
    return dq


def corollary4(model: UntiedModelLike, init: Any, *, student: int = 0, teacher: int = 1,
               tol: float | None = None, c_d: float = 4.0) -> dict[str, Any]:
    """Diagnose Corollary 4's dichotomy at ``init`` (pairs, state or dict).

    Computes the fast phase's root ``m*`` at the initial state, ``g*_st =
    (a1_st, a2_st)`` there and the eq. (42) velocity ``-2 D_s Q2 g*``. Case (i)
    (eq. 43: weak recovery after ``Theta(d/eta)`` steps) when ``|Q2 g*|_inf >
    tol``; case (ii) (eq. 46) when the cross-gradients ``a^(r)_st`` vanish on
    the free manifold, probed at ``q1_st = q2_st = 0`` with the student's
    moments rescaled by 1/2, 1 and 2; otherwise Corollary 4 is silent.

    At finite ``d`` (pairs, or a state with ``d``) the tolerance is ``tol =
    c_d / d``: a free finite-d state keeps overlaps ``q_st = O(1/d)`` and so
    cross-gradients of that size, which must not be announced as recovery.
    With no ``d`` (a dict state without ``"d"``) ``tol = 1e-10``.
    """
    s, t = _check_st(model, student, teacher)
    m0, tA, tB, q1, q2, d = as_state(model, init)
    if tol is None:
        tol = c_d / d if d else 1e-10
    tol = check_pos_float(tol, "tol")
    th = coefficients(model)
    state = dict(m=m0, tA=tA, tB=tB, q1=q1, q2=q2)
    cm = critical_mean(model, state, warn=False)
    if not cm.success:
        return {"case": "undetermined", "verdict": f"no critical mean: {cm.message}",
                "root": cm.label, "tol": tol, "cond43": False, "cond46": False}
    g = th.gradients(cm.m, q1, q2)
    gs = np.array([g["a1"][s, t], g["a2"][s, t]])
    Q2 = np.array([[q1[t, t], q2[t, t]], [q2[t, t], q1[t, t]]])
    q2g = Q2 @ gs
    v = -2.0 * (tA[s] + tB[s]) * q2g
    cond43 = bool(np.abs(q2g).max() > tol)
    worst = 0.0
    for f in (0.5, 1.0, 2.0):
        probe = dict(m=m0, tA=tA.copy(), tB=tB.copy(), q1=q1.copy(), q2=q2.copy())
        probe["tA"][s] *= f
        probe["tB"][s] *= f
        for q in (probe["q1"], probe["q2"]):
            q[s, t] = q[t, s] = 0.0
            q[s, s] *= f * f
        c2 = critical_mean(model, probe, warn=False)
        if c2.success:
            g2 = th.gradients(c2.m, probe["q1"], probe["q2"])
            worst = max(worst, abs(g2["a1"][s, t]), abs(g2["a2"][s, t]))
        else:
            worst = np.inf
    cond46 = bool(worst <= tol)
    if cond43:
        verdict = ("case (i), eq. (43) holds: Q2 g* != 0, weak recovery after Theta(d/eta) steps, "
                   "Theta(d^2 log d) samples at eta ~ 1/(d log d)")
        case = "i"
    elif cond46:
        verdict = ("case (ii), eq. (46) holds: the cross-gradients vanish on the free manifold; "
                   "no weak recovery on the d^2 log d sample scale")
        case = "ii"
    else:
        verdict = ("neither (43) nor (46) at this tolerance: Q2 g* is below it here but the "
                   "cross-gradients do not vanish on the free manifold; Corollary 4 is silent")
        case = "undetermined"
    if cm.unstable_start:
        verdict += ("; NOTE: m(0) sits on an unstable symmetric root, so fluctuations pick the "
                    "root the fast phase reaches (see root_alternatives)")
    return {"case": case, "verdict": verdict, "g_star": gs, "Q2g": q2g, "velocity": v,
            "m_star": cm.m, "root": cm.label, "unstable_start": cm.unstable_start,
            "root_alternatives": cm.diagnostics.get("alternatives"), "cond43": cond43,
            "cond46": cond46, "cross_gradient_on_free": worst, "tol": tol,
            "student": s, "teacher": t}


def weak_recovery_time(result: Trajectory, c: float, *, student: int = 0, teacher: int = 1,
                       eta: float | None = None) -> dict[str, Any]:
    """``N_wr(c)`` of eq. (41) read off a trajectory (hierarchy, flow or SGD).

    Returns ``{"time": first output time with max(|q1_st|, |q2_st|) >= c (None
    if never), "n": the SGD step count it means (slow time ``n = tau d / eta``,
    fast ``n = t / eta``; needs ``eta`` and, for slow time, ``d``)}``. Resolution
    is that of the output times.
    """
    c = check_pos_float(c, "c")
    q1 = result.observable("q1", student, teacher)
    q2 = result.observable("q2", student, teacher)
    hit = np.flatnonzero(np.maximum(np.abs(q1), np.abs(q2)) >= c)
    tm = float(result.t[hit[0]]) if hit.size else None
    n = None
    if tm is not None and eta is not None:
        eta = check_pos_float(eta, "eta")
        slow = "tau" in str(result.params.get("time", "tau"))
        d: Any = result.params.get("d")
        if slow and d is None:
            raise ValueError("slow-time results need params['d'] to convert to steps")
        n = int(math.ceil(tm * (d if slow else 1) / eta - 1e-9))
    return {"time": tm, "n": n, "c": c, "max_overlap": float(np.max(np.maximum(np.abs(q1), np.abs(q2))))}


# ---------------------------------------------------------------------------
# the model protocol's theory (compare)


