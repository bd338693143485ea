"""Finite width for the untied model: the exact finite-d population loss of a polynomial
loss and its gradient flows (issue 27).

Untied pre-activations ``G_k = x^T M_k x / sqrt(d)``, ``M_k = U_k V_k^T``, depend on ``M_k``
only through its symmetric part ``A_k = (M_k + M_k^T)/2``: ``G_k`` has mean ``m_k = Tr M_k /
sqrt(d)`` and the joint cumulants of Gaussian quadratic forms,

    kappa_n(G_k1, ..., G_kn) = 2^(n-1) sum_{sigma in S_(n-1)} Tr(A_k1 A_sigma(k2) ... A_sigma(kn)) / d^(n/2)

(``n >= 2``; ``kappa_2 = q1 + q2``, the covariance of Theorem 1). For a loss that is a
polynomial of degree ``D <= 6`` in ``G`` the cumulant expansion stops, and with the Taylor
tensors ``c_j(m) = D^j loss(G = m)`` at the mean,

    Phi_d(U, V) = c_0(m) + sum_lambda <c_|lambda|(m), (x)_i kappa_(n_i)> / (prod_i n_i! prod_n mult_n!)

over the block-size patterns ``lambda`` (parts ``>= 2``): exactly ``E[loss(G)]`` at this
``d``. The patterns of 2's only are the Gaussian-equivalent ``Phi(m, q1, q2)`` of the paper;
the others (``kappa_3``: ``O(d^-1/2)``, ``kappa_4``, ``kappa_3^2``: ``O(1/d)``, ...) are the
finite-width correction. Its gradient in ``M_a`` is

    dPhi_d/dM_a = (E_d[l_a] / sqrt(d)) I + sum_n n 2^(n-1) (n-1)! d^(-n/2) sum_w g_n[a, w] A_w1 ... A_w(n-1),

``E_d[l_a] = dPhi_d/dm_a`` (the same expansion applied to ``l_a = dloss/dG_a``) and ``g_n =
dPhi_d/dkappa_n``. SGD's mean drift is this gradient (exact to first order in ``eta``):

- ``mode="full"`` (fast time ``t = eta n``): ``dU_a/dt = -dPhi_d/dM_a V_a - (gamma/d) U_a``,
  ``dV_a/dt = -dPhi_d/dM_a U_a - (gamma/d) V_a`` (the untied flow of ``untied_flow`` with the
  exact potential in place of ``Phi``);
- ``mode="slaved"`` (slow time ``tau = eta n / d``): ``m = m*_d``, the root of ``E_d[l_a] = 0``
  next to the Gaussian critical mean, and ``dU_a/dtau = -beta_a V_a - P_a V_a - gamma U_a``
  (``V`` alike) with ``P_a = d (dPhi_d/dM_a - E_d[l_a] I / sqrt(d))`` and the effective bias
  ``beta_a = -(Tr(P_a V_a V_a^T) + Tr(U_a U_a^T P_a)) / (Tr(U_a U_a^T) + Tr(V_a V_a^T))``
  of eqs. (27), (30).

With only the Gaussian patterns both modes reproduce ``untied_flow`` (the test suite checks
it to 1e-8), so the difference is the finite-width correction alone.
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.kernels.moments import word_traces as _letter_word_traces
from attndyn.numeric.attention.base import Correction, check_model
from attndyn.numeric.attention.corrections import (MAX_FW_DEGREE, cumulant_terms,
                                                   polynomial_taylor, qf_scale, shift_taylor,
                                                   word_sum, word_traces)
from attndyn.numeric.attention.untied.coefficients import UntiedTrajectory
from attndyn.numeric.attention.untied.fastslow import critical_mean
from attndyn.numeric.core.results import IntegrationError
from attndyn.numeric.core.validate import check_t_eval
from attndyn.symbolic import untied as su

__all__ = ["untied_finite_width_taylor", "untied_finite_width_potential",
           "untied_finite_width_flow", "UntiedFiniteWidth"]


def _check_untied(model):
    model = check_model(model)
    if model.sgd_form != "pairs" or model.L != 1 or model.loss is None:
        raise ValueError("the untied finite-width correction needs an untied model with L = 1 "
                         "and a loss callable")
    return model


def untied_finite_width_taylor(model) -> list:
    """``[c_0, ..., c_D]``, the Taylor tensors ``D^j loss(G = 0)`` of an untied ``L = 1`` loss
    that is a polynomial of degree ``D <= 6`` in ``G``; ``ValueError`` for any other loss."""
    return polynomial_taylor(_check_untied(model), MAX_FW_DEGREE)


def _state(pairs):
    """``(A, m, d)``: the symmetric parts of ``M_k = U_k V_k^T``, the means, the width."""
    d = pairs[0][0].shape[0]
    Ms = [U @ V.T for U, V in pairs]
    A = [0.5 * (M + M.T) for M in Ms]
    m = np.array([np.trace(M) for M in Ms]) / math.sqrt(d)
    return A, m, d


def _kappas(A, nmax, finite):
    d = A[0].shape[0]
    T = word_traces(A, nmax if finite else 2)
    return {n: qf_scale(n, d) * Tn for n, Tn in T.items()}


def _expect(c, kap, gaussian=True) -> float:
    """``E p(G) - p(m)`` summed over the patterns (``c`` at the mean)."""
    terms, _ = cumulant_terms(c, kap, gaussian=gaussian)
    return float(sum(terms.values()))


def _mean_grad(c, kap, tr):
    """``(E_d[l_a] for all a, the Jacobian d E_d[l_a]/dm_b on the trainable block)``."""
    K = len(c[1]) if len(c) > 1 else 0
    el = np.zeros(K)
    for a in range(K):
        ca = [cj[a] for cj in c[1:]]
        el[a] = float(ca[0]) + _expect(ca, kap)
    H = np.zeros((len(tr), len(tr)))
    for i, a in enumerate(tr):
        for j, b in enumerate(tr):
            cab = [cj[a, b] for cj in c[2:]]
            H[i, j] = (float(cab[0]) + _expect(cab, kap)) if cab else 0.0
    return el, H


def _root(c0, m, kap, tr, tol=1e-12, maxit=50):
    """Newton on ``E_d[l_a](m) = 0`` for the trainable ``a`` from ``m``: ``(m*, ok)``."""
    m = np.array(m, float)
    for _ in range(maxit + 1):
        el, H = _mean_grad(shift_taylor(c0, m), kap, tr)
        r = el[tr]
        if not np.all(np.isfinite(r)):
            return m, False
        if float(np.abs(r).max(initial=0.0)) <= tol * max(1.0, float(np.abs(c0[0]))):
            return m, True
        try:
            m[tr] -= np.linalg.solve(H, r)
        except np.linalg.LinAlgError:
            return m, False
    return m, False


def _q_gradient(c, kap, A, tr):
    """``{a: sum_n n qf_scale(n, d) sum_w g_n[a, w] A_w...}``: ``dPhi_d/dA_a`` at fixed ``m``."""
    d = A[0].shape[0]
    _, grads = cumulant_terms(c, kap)
    out = {}
    for a in tr:
        P = np.zeros((d, d))
        for n, g in grads.items():
            if np.any(g[a] != 0.0):
                P = P + n * qf_scale(n, d) * word_sum(g[a], A)
        out[a] = 0.5 * (P + P.T)
    return out


def untied_finite_width_potential(model, pairs, m=None) -> dict:
    """``Phi_d`` (``total``: ``E[loss(G)]`` exactly), its Gaussian part ``gaussian`` (Theorem
    1's ``Phi(m, q1, q2)``) and the finite-width correction ``correction`` at the pairs
    ``(U_k, V_k)``; ``E_l`` holds ``E_d[dloss/dG_k]`` (module docstring). ``m``: the means to
    use instead of ``Tr M_k / sqrt(d)`` (e.g. the slaved ``m*_d``; the cumulants stay those
    of the pairs)."""
    model = _check_untied(model)
    pairs = model.check_factors(pairs, "pairs")
    c0 = untied_finite_width_taylor(model)
    A, m_pairs, _ = _state(pairs)
    if m is None:
        m = m_pairs
    else:
        m = np.asarray(m, dtype=float)
        if m.shape != (model.K,) or not np.all(np.isfinite(m)):
            raise ValueError(f"m must be {model.K} finite means, got shape {m.shape}")
    c = shift_taylor(c0, m)
    kap = _kappas(A, len(c0) - 1, True)
    terms, _ = cumulant_terms(c, kap)
    gauss = float(c[0]) + sum(v for lam, v in terms.items() if all(n == 2 for n in lam))
    total = float(c[0]) + sum(terms.values())
    el, _ = _mean_grad(c, kap, [])
    return {"total": float(total), "gaussian": float(gauss), "correction": float(total - gauss),
            "E_l": el}


def untied_finite_width_flow(model, pairs, t_eval, mode: str = "slaved", *, finite: bool = True,
                             rtol: float = 1e-10, atol: float = 1e-12, method: str = "DOP853",
                             blowup: float = 1e100, raise_on_failure: bool = False
                             ) -> UntiedTrajectory:
    """The untied flow of the exact finite-d population loss ``Phi_d`` from ``pairs``
    (module docstring): ``mode="full"`` on the fast time ``t = eta n``, ``mode="slaved"``
    (default) on the slow time ``tau = eta n / d``. ``finite=False`` keeps the Gaussian
    patterns only (the paper's flow, for checks). Rows: the words of length <= 2, ``m_k``,
    ``tA_k``, ``tB_k``, ``q1_kl``, ``q2_kl`` (the SGD names) and ``loss = Phi_d``."""
    if mode not in ("full", "slaved"):
        raise ValueError(f"mode must be 'full' or 'slaved', got {mode!r}")
    model = _check_untied(model)
    pairs = [(np.array(U, float), np.array(V, float))
             for U, V in model.check_factors(pairs, "pairs")]
    t_eval = check_t_eval(t_eval)
    c0 = untied_finite_width_taylor(model)
    nmax = max(len(c0) - 1, 2)
    K, tr, gam = model.K, list(model.trainable), model.weight_decay
    d = pairs[0][0].shape[0]
    if 8.0 * d * d * (2 ** min(nmax, 6) + 8 * K) > 8 * 2 ** 30:
        raise ValueError(f"untied_finite_width_flow at d = {d} needs more than 8 GiB")
    shape = pairs[0][0].shape
    size = int(np.prod(shape))
    warm = {"m": None, "fail": False}
    if mode == "slaved":
        warm["m"] = _slaved_start(model, pairs, c0, nmax, finite, tr)
    rhs = flow_rhs(pairs, tr, shape, size, c0, nmax, finite, mode, gam, d, warm)
    y0 = np.concatenate([np.concatenate([pairs[k][0].ravel(), pairs[k][1].ravel()]) for k in tr])
    if t_eval[-1] > 0:
        ts, Ys, status, message = _solve_flow(rhs, y0, t_eval, mode, rtol, atol, method,
                                              blowup, warm)
    else:
        ts, Ys, status, message = t_eval, np.repeat(y0[:, None], t_eval.size, 1), 0, "success"
    res = _result(model, c0, nmax, finite, ts,
                  [_unpack(pairs, tr, shape, size, Ys[:, j]) for j in range(ts.size)],
                  mode, warm["m"], status, message)
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res


def _unpack(pairs, tr, shape, size, y):
    """The factor pairs with the trainable ones read from the flat state ``y``."""
    cur = list(pairs)
    for j, k in enumerate(tr):
        off = 2 * j * size
        cur[k] = (y[off:off + size].reshape(shape), y[off + size:off + 2 * size].reshape(shape))
    return cur


def _slaved_start(model, pairs, c0, nmax, finite, tr):
    """The finite-d root ``m*_d`` at the start, by Newton from the Gaussian critical mean."""
    cm = critical_mean(model, pairs, warn=False)
    if not cm.success:
        raise ValueError(f"untied_finite_width_flow: no critical mean ({cm.message})")
    A0, _, _ = _state(pairs)
    m_star, ok = _root(c0, cm.m, _kappas(A0, nmax, finite), tr)
    if not ok:
        raise ValueError("untied_finite_width_flow: Newton on E_d[l] = 0 failed from the "
                         "Gaussian critical mean")
    return m_star


def flow_rhs(pairs, tr, shape, size, c0, nmax, finite, mode, gam, d, warm):
    """The vector field of the flat state; in the slaved mode it tracks ``m*_d`` in ``warm``."""
    def rhs(t, y):
        cur = _unpack(pairs, tr, shape, size, y)
        A, m, _ = _state(cur)
        kap = _kappas(A, nmax, finite)
        if mode == "slaved":
            m, ok = _root(c0, warm["m"], kap, tr)
            if not ok:
                warm["fail"] = True
                return np.full(y.size, np.nan)
            warm["m"] = m
        c = shift_taylor(c0, m)
        Pq = _q_gradient(c, kap, A, tr)
        out = []
        if mode == "full":
            el, _ = _mean_grad(c, kap, [])
        for a in tr:
            U, V = cur[a]
            if mode == "full":
                Gm = Pq[a] + (el[a] / math.sqrt(d)) * np.eye(d)
                dU, dV = -Gm @ V - (gam / d) * U, -Gm @ U - (gam / d) * V
            else:
                P = d * Pq[a]
                PV, PU = P @ V, P @ U
                beta = -(np.sum(PV * V) + np.sum(U * PU)) / (np.sum(U * U) + np.sum(V * V))
                dU, dV = -beta * V - PV - gam * U, -beta * U - PU - gam * V
            out.append(np.concatenate([dU.ravel(), dV.ravel()]))
        return np.concatenate(out)
    return rhs


def _solve_flow(rhs, y0, t_eval, mode, rtol, atol, method, blowup, warm):
    """Integrate to ``t_eval[-1] > 0``; the finite outputs, the status and the message."""
    from scipy.integrate import solve_ivp

    from attndyn.numeric.attention.odesolve import budgeted

    def blow(t, y):
        return blowup - np.abs(y).max()
    blow.terminal = True
    with np.errstate(all="ignore"):
        sol = solve_ivp(budgeted(rhs), (0.0, float(t_eval[-1])), y0, method=method,
                        t_eval=t_eval, rtol=rtol, atol=atol, events=blow)
    ts, Ys = sol.t, sol.y
    status = 0 if sol.status == 0 else (-3 if sol.status == 1 else -1)
    ok_cols = np.all(np.isfinite(Ys), axis=0)
    if not ok_cols.all():
        ts, Ys = ts[:int(np.argmin(ok_cols))], Ys[:, :int(np.argmin(ok_cols))]
        status = status or -3
    message = ("success: untied finite-width flow reached the last output time"
               if status == 0 else f"untied finite-width flow ({mode}) stopped at "
               f"{ts[-1] if ts.size else 0.0:.4g}: "
               + ("the root m*_d was lost (Newton failed)" if warm["fail"] else sol.message))
    return ts, Ys, status, message


def _result(model, c0, nmax, finite, ts, states, mode, m_warm, status, message):
    """The rows of :func:`untied_finite_width_flow` (names as the SGD's), with ``loss = Phi_d``."""
    K, tr = model.K, list(model.trainable)
    words = [tuple(w) for w in model.words(2)]
    names = model.observable_names(2)
    rows = []
    m_track = None if m_warm is None else np.array(m_warm, float)
    for cur in states:
        A, m, d = _state(cur)
        kap = _kappas(A, nmax, finite)
        if mode == "slaved":
            m_track, _ = _root(c0, m_track, kap, tr)
            m = m_track
        letters = [X for U, V in cur for X in (U @ V.T, V @ U.T, U @ U.T, V @ V.T)]
        mu = _letter_word_traces(letters, words)  # letters M_k, M_k^T, A_k, B_k (the alphabet's)
        tA = np.array([np.sum(U * U) for U, _ in cur]) / d
        tB = np.array([np.sum(V * V) for _, V in cur]) / d
        Ms = [U @ V.T for U, V in cur]
        q1 = np.array([[np.sum(Ms[k] * Ms[l]) for l in range(K)] for k in range(K)]) / d
        q2 = np.array([[np.sum(Ms[k] * Ms[l].T) for l in range(K)] for k in range(K)]) / d
        c = shift_taylor(c0, m)
        loss = float(c[0]) + _expect(c, kap)
        rows.append(np.concatenate([mu, m, tA, tB, q1.ravel(), q2.ravel(), [loss]]))
    Y = np.array(rows).T if rows else np.zeros((len(names), 0))
    d = states[0][0][0].shape[0] if states else 0
    params = model.params_dict()
    params.update({"d": d, "mode": mode, "finite_width": "all cumulants" if finite else "none",
                   "degree": len(c0) - 1,
                   "time": "t = eta * n (fast)" if mode == "full" else "tau = eta * n / d (slow)"})
    return UntiedTrajectory(t=np.asarray(ts, float), y=Y, names=list(names), words=words,
                            kind=f"untied_finite_width_{mode}", params=params, status=status,
                            message=message, diagnostics={"d": d},
                            inv=su.untied_alphabet(K).inv)


class UntiedFiniteWidth(Correction):
    """``correction="finite-d"`` of the untied theory: the flow of the exact finite-d
    population loss (:func:`untied_finite_width_flow`; polynomial losses of degree <= 6,
    ``L = 1``) for ``theory="flow"`` (fast time inside, reported on the SGD's time) and
    ``"slaved"`` (slow time); no ``eta`` or ``batch``."""

    name = "finite-d"
    needs = ()

    def check(self, theory, order):
        if theory not in (None, "flow", "slaved"):
            raise ValueError(f"correction={self.name!r} applies to theory='flow' or 'slaved', "
                             f"got theory={theory!r}")
        if order is not None and order > 2:
            raise ValueError(f"correction={self.name!r} reports the words of length <= 2 "
                             f"(order <= 2); got order={order}")

    def apply(self, theory, init, t, *, name, order, check, words, eta=None, batch=None,
              time="slow", **options):
        if words is not None:
            raise ValueError(f"correction={self.name!r} reports the words of length <= 2 only "
                             "(no words=)")
        if time not in ("slow", "fast"):
            raise ValueError(f"time must be 'slow' or 'fast', got {time!r}")
        model = theory.model
        pairs = model.check_factors(init, "init")
        d = pairs[0][0].shape[0]
        t = check_t_eval(t)
        opts = {k: options.pop(k) for k in ("rtol", "atol", "method") if k in options}
        if name == "flow":
            tf = t * d if time == "slow" else t
            res = untied_finite_width_flow(model, pairs, tf, mode="full", **opts)
            res.t = res.t / d if time == "slow" else res.t
            return res
        if time != "slow":
            raise ValueError("theory='slaved' lives on the slow time (tau = eta n / d)")
        return untied_finite_width_flow(model, pairs, t, mode="slaved", **opts)

    def flow(self, theory, matrices, t_eval, *, eta=None, batch=None, mode="full", **options):
        return untied_finite_width_flow(theory.model, matrices, t_eval, mode=mode, **options)
