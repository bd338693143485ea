"""Corollary 2's constants, eq. (14) and Assumption 3 (paper 003): checks that a planted bug
would fail (issue 25, item 4). The constants are compared with their exact values for losses
whose Gamma is known in closed form, the truncation bound with a brute-force minimum of
eq. (14) written here, Assumption 3's moments with traces computed here.
"""

import math

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.tied import assumptions as TA
from attndyn.numeric.attention.tied import bounds as B


def _tied(loss, gamma=0.0):
    return attndyn.TiedModel(2, [0], loss, weight_decay=gamma)


# Gamma_kl = E[d^2 loss / dG_k dG_l] with Cov(G) = 2 q (L = 1):
#   G_0^4       -> Gamma_00 = 12 E G_0^2 = 24 q_00
#   G_0^2 G_1^2 -> Gamma_00 = 4 q_11, Gamma_01 = 8 q_01, Gamma_11 = 4 q_00
#   G_0^6       -> Gamma_00 = 30 E G_0^4 = 30 * 3 (2 q_00)^2 = 360 q_00^2
CASES = {
    "quartic": (lambda G: G[0, 0, 0] ** 4,
                lambda q: np.array([[24 * q[0, 0], 0.0], [0.0, 0.0]]),
                # C: sup over the ball of |24 q_00| = 24 rho; L: |dGamma| = 24 |dq_00|
                lambda rho: (24 * rho, 24.0)),
    "mixed": (lambda G: G[0, 0, 0] ** 2 * G[0, 0, 1] ** 2,
              lambda q: np.array([[4 * q[1, 1], 8 * q[0, 1]], [8 * q[0, 1], 4 * q[0, 0]]]),
              # the documented bound sum |c| rho^deg (8 rho); L: Gamma_01 = 8 q_01 changes by
              # 8 |dq_01| <= 8 ||dq||_F / sqrt 2 (q_01 is two entries of q), with equality
              lambda rho: (8 * rho, 8 / math.sqrt(2))),
    "sextic": (lambda G: G[0, 0, 0] ** 6,
               lambda q: np.array([[360 * q[0, 0] ** 2, 0.0], [0.0, 0.0]]),
               lambda rho: (360 * rho ** 2, 720 * rho)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gamma_constants_are_exact_for_known_gamma(case):
    """C_Gamma and L_Gamma on ||q||_F <= rho for Gammas known in closed form (the Lipschitz
    constant is attained: a smaller L_Gamma is wrong, not just loose); the closed forms
    are checked against the model's Gamma first."""
    loss, gam, consts = CASES[case]
    m = _tied(loss)
    q = np.array([[0.7, 0.2], [0.2, 0.5]])
    np.testing.assert_allclose(m.gamma(q), gam(q), rtol=1e-12, atol=1e-12)
    for rho in (0.5, 2.0):
        c = B.gamma_constants(m, rho)
        C, L = consts(rho)
        assert c["C_Gamma"] == pytest.approx(C, rel=1e-12)
        assert c["L_Gamma"] == pytest.approx(L, rel=1e-12)
    # L is attained: two points of the ball whose difference quotient equals it
    rho = 2.0
    c = B.gamma_constants(m, rho)
    if case == "mixed":
        q1, q2 = np.array([[0.0, 0.5], [0.5, 0.0]]), np.array([[0.0, -0.5], [-0.5, 0.0]])
    else:
        q1, q2 = np.diag([rho, 0.0]), np.diag([rho * 0.999, 0.0])
    quot = np.abs(m.gamma(q1) - m.gamma(q2)).max() / np.linalg.norm(q1 - q2)
    assert quot == pytest.approx(c["L_Gamma"], rel=2e-3)


@pytest.mark.parametrize("case", ["quartic", "mixed"])
def test_cor2_gamma_star_exact(case):
    """gamma*_2 = 4 K C_Gamma R + 4 K^2 L_Gamma R^3 with the constants on the ball of radius
    K R^2 + 1 (measured R) and R = (2 C_0 + 1)^2 (proof)."""
    loss, _, consts = CASES[case]
    m = _tied(loss)
    K = 2
    for R in (0.5, 1.3):
        C, L = consts(K * R * R + 1.0)
        c = B.measured_constants(m, R)
        assert c["gamma_star"] == pytest.approx(4 * K * C * R + 4 * K * K * L * R ** 3, rel=1e-12)
    p = B.proof_constants(m, 0.4)
    R = (2 * 0.4 + 1) ** 2
    C, L = consts(K * R * R + 1.0)
    assert p["R"] == pytest.approx(R) and p["L_Gamma"] == pytest.approx(L, rel=1e-12)
    assert p["gamma_star_cor2"] == pytest.approx(4 * K * C * R + 4 * K * K * L * R ** 3, rel=1e-12)


def _brute_eq14(K, C, L, R, gamma, M, length, n=400_001):
    """min over s in (R, s_max) of s^length (R/s)^(M+1) / (1 - kappa(s)), kappa(s) =
    (4 K C s + 4 K^2 L s^2 R) / gamma, on a dense grid then refined by a finer one around
    the best point."""
    def f(s):
        k = (4 * K * C * s + 4 * K * K * L * s * s * R) / gamma
        with np.errstate(divide="ignore", invalid="ignore"):
            v = length * np.log(s) + (M + 1) * np.log(R / s) - np.log1p(-k)
        return np.where((s > R) & (k < 1), v, np.inf)
    a, b = 4 * K * K * L * R, 4 * K * C
    s_max = (-b + math.sqrt(b * b + 4 * a * gamma)) / (2 * a) if a else gamma / b
    s = np.linspace(R, s_max, n)[1:-1]
    v = f(s)
    i = int(np.argmin(v))
    lo, hi = s[max(i - 1, 0)], s[min(i + 1, s.size - 1)]
    s2 = np.linspace(lo, hi, n)
    v2 = f(s2)
    j = int(np.argmin(v2))
    return math.exp(v2[j]), s2[j]


@pytest.mark.parametrize("case", ["quartic", "mixed"])
def test_truncation_bound_is_the_minimum_of_eq14(case):
    """truncation_bound against a brute-force minimum of eq. (14) over s_0, with gamma a few
    times gamma*: bound and minimiser agree; the L_Gamma part of kappa is not negligible
    (dropping it moves the bound by more than 1 %)."""
    loss, _, consts = CASES[case]
    m = _tied(loss)
    K, R = 2, 0.6
    c = B.measured_constants(m, R)
    C, L = consts(K * R * R + 1.0)
    gamma = 3.0 * c["gamma_star"]
    for M, length in ((4, 2), (8, 3)):
        got = B.truncation_bound(c, gamma, M, length)
        want, s0 = _brute_eq14(K, C, L, R, gamma, M, length)
        assert got["bound"] == pytest.approx(want, rel=1e-7)
        assert got["s0"] == pytest.approx(s0, rel=1e-3)
        assert got["kappa"] == pytest.approx((4 * K * C * s0 + 4 * K * K * L * s0 ** 2 * R) / gamma,
                                             rel=1e-3)
        no_L, _ = _brute_eq14(K, C, 0.0, R, gamma, M, length)
        assert abs(no_L - want) > 0.01 * want


# -- Assumption 3 ------------------------------------------------------------------------------

def _moments(S1, S2):
    d = S1.shape[0]
    A = S1 - np.trace(S1) / d * np.eye(d)
    Bc = S2 - np.trace(S2) / d * np.eye(d)
    return {"p12": np.trace(A @ Bc) / d, "mu112c": np.trace(A @ A @ Bc) / d,
            "mu122c": np.trace(A @ Bc @ Bc) / d, "t1": np.trace(S1) / d,
            "p22": np.trace(Bc @ Bc) / d, "p11": np.trace(A @ A) / d}


def test_assumption_3_returns_the_mixed_moments():
    """The returned p_12, Tr(S1°^2 S2°)/d, Tr(S1° S2°^2)/d, t_1, p_22 against traces of
    non-commuting matrices (S° = S - t I), and the normalised values."""
    m = _tied(lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    d = 30
    rng = np.random.default_rng(7)
    W1 = rng.standard_normal((d, d)) / math.sqrt(d)
    W2 = rng.standard_normal((d, d)) / math.sqrt(d) + 0.4 * W1 @ W1
    S1, S2 = W1 @ W1.T, W2 @ W2.T
    v = TA.assumption_3(m, [W1, W2])
    ref = _moments(S1, S2)
    for key in ("p12", "mu112c", "mu122c", "t1", "p22"):
        assert v.values[key] == pytest.approx(ref[key], rel=1e-10, abs=1e-14), key
    # the two cubic moments differ here, so a swapped or miswritten one is seen
    assert abs(ref["mu112c"] - ref["mu122c"]) > 0.1 * abs(ref["mu112c"])
    s1, s2 = math.sqrt(ref["p11"]), math.sqrt(ref["p22"])
    want = [abs(ref["p12"]) / (s1 * s2), abs(ref["mu112c"]) / (s1 * s1 * s2),
            abs(ref["mu122c"]) / (s1 * s2 * s2)]
    np.testing.assert_allclose(v.values["normalised"], want, rtol=1e-10)


def test_assumption_3_fails_on_a_cubic_moment_with_p12_zero():
    """p_12 = 0 exactly but Tr(S1°^2 S2°)/d of order 1: the student is informative through
    the cubic moment alone, so the verdict must fail on it (and hold when that moment is
    removed too)."""
    m = _tied(lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    d = 40
    rng = np.random.default_rng(2)
    b = rng.standard_normal(d)
    b -= b.mean()
    a = b ** 2 - np.mean(b ** 2)
    a -= (a @ b) / (b @ b) * b            # Tr(A B) = 0 with A = diag(a), B = diag(b)
    S1 = np.diag(2.0 + 0.5 * a / np.abs(a).max())
    S2 = np.diag(2.0 + b / np.abs(b).max())
    ref = _moments(S1, S2)
    assert abs(ref["p12"]) < 1e-14
    v = TA.assumption_3(m, [S1, S2])   # PSD matrices S_k themselves
    assert v.values["p12"] == pytest.approx(0.0, abs=1e-14)
    assert v.values["mu112c"] == pytest.approx(ref["mu112c"], rel=1e-10)
    assert v.values["mu122c"] == pytest.approx(ref["mu122c"], rel=1e-10)
    worst = max(v.values["normalised"])
    assert worst > v.values["tol"], (worst, v.values)
    assert v.holds is False and "informative" in v.message
