"""Corollary 2's constants (paper 003, eq. (14), appendix D.2): the bounds ``C_0``, ``C_1``,
``C_2`` of ``Gamma`` and its derivatives on the ball of radius ``rho`` (:func:`gamma_constants`),
with the proof's radius ``R = (2 C_0 + 1)^2`` (:func:`proof_constants`) or a measured one
(:func:`measured_constants`), and the truncation bound of eq. (14) (:func:`truncation_bound`)."""

from __future__ import annotations

import math

from attndyn.numeric.attention.assumptions import poly_bounds

__all__ = ["gamma_constants", "proof_constants", "measured_constants", "truncation_bound"]


def gamma_constants(model, rho: float) -> dict | None:
    """``C_Gamma = max_kl sup |Gamma_kl|`` and ``L_Gamma`` (Frobenius Lipschitz constant,
    the largest over ``k, l``) on ``||q||_F <= rho``; ``None`` if ``Gamma`` is not a
    polynomial in ``q`` (or the model has no closed-form potential)."""
    pot = getattr(model, "potential", None)
    if pot is None or not hasattr(pot, "gamma") or getattr(pot, "params", ()):
        return None
    K = model.K
    syms = [pot.q[k, l] for k in range(K) for l in range(k, K)]
    diag = [k == l for k in range(K) for l in range(k, K)]
    C, L = 0.0, 0.0
    for k in range(K):
        for l in range(K):
            b = poly_bounds(pot.gamma[k, l], syms, rho)
            if b is None:
                return None
            sup, g = b
            C = max(C, sup)
            # sum_{k<=l} g_kl ds_kl <= sqrt(sum_diag g^2 + sum_off g^2 / 2) ||dq||_F: an
            # off-diagonal symbol stands for two entries of q
            L = max(L, math.sqrt(sum(x * x * (1.0 if dg else 0.5) for x, dg in zip(g, diag))))
    return {"rho": rho, "C_Gamma": C, "L_Gamma": L}


def _cor2_part(model, R: float) -> dict | None:
    K = model.K
    g = gamma_constants(model, K * R * R + 1.0)
    if g is None:
        return None
    gs = 4 * K * g["C_Gamma"] * R + 4 * K * K * g["L_Gamma"] * R ** 3
    return {**g, "R": R, "K": K, "gamma_star_cor2": gs}


def proof_constants(model, C0: float) -> dict | None:
    """The proof's constants from ``C_0 = max_k ||W_k(0)||_op`` (teachers included):
    ``C_* = 2 C_0 + 1``, ``R = C_*^2``, ``C_Gamma``, ``L_Gamma`` on ``U``, Lemma 3's
    ``C_H`` and both conditions on ``gamma``; ``gamma_star`` is the larger."""
    if not (C0 >= 0 and math.isfinite(C0)):
        raise ValueError(f"C0 must be a finite number >= 0, got {C0}")
    Cs = 2.0 * C0 + 1.0
    R = Cs * Cs
    part = _cor2_part(model, R)
    if part is None:
        return None
    K = model.K
    # ||S_l||_op <= C_*^2 and |q_kl| <= C_*^4 on the spectral-bound event
    g = gamma_constants(model, K * Cs ** 4)
    CH = 4.0 * Cs * Cs * K * g["C_Gamma"]   # max_k sum_l |Gamma_kl| <= K C_Gamma
    gl3 = 4.0 * CH * Cs / (Cs - C0)
    return {**part, "version": "proof", "C0": C0, "C_star": Cs, "C_H": CH,
            "gamma_star_lemma3": gl3, "gamma_star": max(gl3, part["gamma_star_cor2"])}


def measured_constants(model, R: float) -> dict | None:
    """The Corollary 2 constants with a measured moment bound ``R`` (see the module
    docstring); ``gamma_star`` is ``gamma*_2`` alone (Lemma 3 is not needed: ``R`` is
    measured along the solution)."""
    part = _cor2_part(model, R)
    if part is None:
        return None
    return {**part, "version": "measured", "gamma_star": part["gamma_star_cor2"]}


def truncation_bound(consts: dict, gamma: float, M: int, length: int) -> dict | None:
    """Eq. (14)/(336): ``min over s_0`` of ``s_0^length (R/s_0)^(M+1) / (1 - kappa(s_0))``
    with ``kappa(s_0) < 1``; ``None`` when ``gamma <= gamma*`` (the premise fails)."""
    from scipy.optimize import minimize_scalar

    if not gamma > consts["gamma_star"]:
        return None
    K, R, C, L = consts["K"], consts["R"], consts["C_Gamma"], consts["L_Gamma"]

    def kappa(s):
        return (4 * K * C * s + 4 * K * K * L * s * s * R) / gamma

    # s_max: kappa(s_max) = 1 (a quadratic in s)
    a, b = 4 * K * K * L * R, 4 * K * C
    s_max = (gamma / b if a == 0 else (-b + math.sqrt(b * b + 4 * a * gamma)) / (2 * a)) \
        if (a or b) else math.inf
    hi = min(s_max, R * 1e6)

    def logb(u):   # s = R + (hi - R) * u, u in (0, 1)
        s = R + (hi - R) * u
        k = kappa(s)
        if not (s > R and k < 1):
            return math.inf
        return length * math.log(s) + (M + 1) * math.log(R / s) - math.log1p(-k)

    r = minimize_scalar(logb, bounds=(1e-12, 1 - 1e-12), method="bounded",
                        options={"xatol": 1e-10})
    s0 = R + (hi - R) * r.x
    return {"bound": math.exp(r.fun), "s0": s0, "kappa": kappa(s0), "c": 1 / (1 - kappa(s0))}
