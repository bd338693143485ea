"""Hermite expansions, Mehler's formula, closed-form Gaussian expectations, eq. (23)."""

import math
import warnings

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, special

from attndyn.symbolic.activations import X, activation, hermite_activation
from attndyn.symbolic.hermite import (NoClosedForm, eq23_series, expect_1d, gauss_hermite,
                                      hermite_coefficients, mehler_numeric,
                                      multivariate_hermite_coefficients, pair_closed,
                                      pair_mehler)

x, y = sp.symbols("x y", real=True)


def quad_1d(h, m, v):
    """Independent 1-D reference: adaptive quadrature, split at 0."""
    f = sp.lambdify(x, h, modules=[{"Heaviside": lambda t, *a: np.heaviside(t, 0.5),
                                    "erf": special.erf}, "numpy"])
    dens = lambda t: math.exp(-(t - m) ** 2 / (2 * v)) / math.sqrt(2 * math.pi * v)
    s = math.sqrt(v)
    lo, hi = m - 40 * s, m + 40 * s
    pts = [0.0] if lo < 0 < hi else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        return integrate.quad(lambda t: float(f(t)) * dens(t), lo, hi, points=pts, limit=400,
                              epsabs=1e-14, epsrel=1e-13)[0]


def test_paper_hermite_normalisation():
    # paper 003, Figure 2: h2 = (x^2 - 1)/sqrt(2), h3 = (x^3 - 3x)/sqrt(6)
    assert sp.simplify(hermite_activation(2).expr - (X ** 2 - 1) / sp.sqrt(2)) == 0
    assert sp.simplify(hermite_activation(3).expr - (X ** 3 - 3 * X) / sp.sqrt(6)) == 0
    z, w = gauss_hermite(30)
    H = np.array([[float(hermite_activation(k).expr.subs(X, t)) for t in z] for k in range(6)])
    np.testing.assert_allclose(H * w @ H.T, np.eye(6), atol=1e-12)


@pytest.mark.parametrize("h", [
    x ** 3 - x, sp.Max(0, x), sp.Max(0, x) ** 2 * x, x * sp.Heaviside(-x), sp.Abs(x),
    sp.erf(2 * x) * x ** 3, sp.erf(x) + x, x ** 2 * sp.exp(-x ** 2 + x / 3),
])
@pytest.mark.parametrize("m", [0.0, 0.37])
def test_expect_1d_against_quadrature(h, m):
    v = 1.7
    got = float(expect_1d(h, x, sp.Float(m) if m else 0, sp.Float(v)))
    assert got == pytest.approx(quad_1d(h, m, v), rel=1e-11, abs=1e-13)


def test_expect_1d_special_and_rejections():
    v = 0.8
    got = float(expect_1d(sp.erf(x) ** 2, x, 0, sp.Float(v)))
    assert got == pytest.approx(quad_1d(sp.erf(x) ** 2, 0, v), rel=1e-11)
    # delta derivatives: E[delta''(X)] = p''(0)
    p2 = (-1 / v) / math.sqrt(2 * math.pi * v)
    assert float(expect_1d(sp.DiracDelta(x, 2), x, 0, sp.Float(v))) == pytest.approx(p2, rel=1e-12)
    with pytest.raises(NoClosedForm):
        expect_1d(sp.tanh(x) ** 2, x, 0, sp.Float(v))
    with pytest.raises(NoClosedForm):
        expect_1d(sp.erf(x) ** 2, x, sp.Float(0.3), sp.Float(v))


@pytest.mark.parametrize("name", ["relu", "erf", "h3", "abs"])
def test_symbolic_hermite_coefficients(name):
    # a_n = E[f(m + sqrt(v) z) He_n(z)]/n!: symbolic (derivatives) vs adaptive quadrature
    act = activation(name)
    m, v = 0.25, 1.3
    a = hermite_coefficients(act.expr, 7, X, sp.Float(v), sp.Float(m))
    for n in range(8):
        he_n = sp.hermite_prob(n, (x - m) / math.sqrt(v))
        ref = quad_1d(act.expr.subs(X, x) * he_n, m, v) / math.factorial(n)
        assert float(a[n]) == pytest.approx(ref, rel=1e-10, abs=1e-13)
    if name == "h3":
        assert all(sp.simplify(c) == 0 for c in a[4:])


def _gh2(f, vx, vy, c, n=120, mx=0.0, my=0.0):
    z, w = gauss_hermite(n)
    Lc = np.linalg.cholesky(np.array([[vx, c], [c, vy]]))
    Z1, Z2 = np.meshgrid(z, z, indexing="ij")
    W = np.outer(w, w)
    X1 = mx + Lc[0, 0] * Z1
    Y1 = my + Lc[1, 0] * Z1 + Lc[1, 1] * Z2
    return float(np.sum(W * f(X1, Y1)))


def _relu_pair_polar(vx, vy, c):
    """E[relu(X) relu(Y)] in polar coordinates: exact radial integral, Gauss-Legendre in angle."""
    Lc = np.linalg.cholesky(np.array([[vx, c], [c, vy]]))
    # G = Lc (cos t, sin t) r; relu(X) relu(Y) is r^2 * h(t) on the sector where both > 0
    ang = lambda t: (Lc[0, 0] * np.cos(t), Lc[1, 0] * np.cos(t) + Lc[1, 1] * np.sin(t))
    # kink angles: X = 0 and Y = 0
    k1 = math.pi / 2
    k2 = math.atan2(-Lc[1, 0], Lc[1, 1])
    cuts = sorted({(k % (2 * math.pi)) for k in (k1, k1 + math.pi, k2, k2 + math.pi)})
    cuts = cuts + [cuts[0] + 2 * math.pi]
    t, w = np.polynomial.legendre.leggauss(80)
    tot = 0.0
    for a, b in zip(cuts[:-1], cuts[1:]):
        tt = (a + b) / 2 + (b - a) / 2 * t
        X1, Y1 = ang(tt)
        tot += (b - a) / 2 * np.sum(w * np.maximum(X1, 0) * np.maximum(Y1, 0))
    return tot * 2 / (2 * math.pi)   # int r^3 e^{-r^2/2} dr = 2


def test_pair_closed_forms():
    vx, vy, c = 1.3, 0.8, 0.55
    cases = [
        (sp.erf(x), sp.erf(2 * y), lambda a, b: special.erf(a) * special.erf(2 * b)),
        (x ** 2 - x, y ** 3, lambda a, b: (a ** 2 - a) * b ** 3),
    ]
    for f, g, fn in cases:
        got = float(pair_closed(f, g, x, y, 0, 0, sp.Float(vx), sp.Float(vy), sp.Float(c)))
        assert got == pytest.approx(_gh2(fn, vx, vy, c), rel=1e-12)
    got = float(pair_closed(sp.Max(0, x), sp.Max(0, y), x, y, 0, 0, sp.Float(vx), sp.Float(vy),
                            sp.Float(c)))
    assert got == pytest.approx(_relu_pair_polar(vx, vy, c), rel=1e-12)
    # ReLU x erf: linear in c (Price: d/dc = E[erf'(Y) theta(X)] does not depend on c)
    got = float(pair_closed(sp.Max(0, x), sp.erf(y), x, y, 0, 0, sp.Float(vx), sp.Float(vy),
                            sp.Float(c)))
    ref = integrate.dblquad(
        lambda b, a: a * special.erf(b) * math.exp(-0.5 * np.array([a, b]) @ np.linalg.solve(
            [[vx, c], [c, vy]], [a, b])) / (2 * math.pi * math.sqrt(vx * vy - c * c)),
        0, 30, -30, 30, epsabs=1e-13)[0]
    assert got == pytest.approx(ref, rel=1e-9)
    # a polynomial side with means: conditioning
    got = float(pair_closed(sp.Max(0, x), y ** 3, x, y, sp.Float(0.2), sp.Float(-0.1),
                            sp.Float(vx), sp.Float(vy), sp.Float(c)))
    ref = integrate.dblquad(
        lambda b, a: a * (b ** 3) * math.exp(-0.5 * np.array([a - 0.2, b + 0.1]) @ np.linalg.solve(
            [[vx, c], [c, vy]], [a - 0.2, b + 0.1])) / (2 * math.pi * math.sqrt(vx * vy - c * c)),
        0, 30, -30, 30, epsabs=1e-13)[0]
    assert got == pytest.approx(ref, rel=1e-9)
    with pytest.raises(NoClosedForm):
        pair_closed(sp.tanh(x), sp.tanh(y), x, y, 0, 0, sp.Float(vx), sp.Float(vy), sp.Float(c))


def test_mehler_exact_for_polynomials_and_bounded_otherwise():
    vx, vy, c = sp.symbols("v_x v_y c", positive=True)
    h3 = hermite_activation(3).expr
    f, g = h3.subs(X, x), h3.subs(X, y)
    series, bound, exact = pair_mehler(f, g, x, y, 0, 0, vx, vy, c, 10)
    assert exact and bound == 0
    assert sp.simplify(series - pair_closed(f, g, x, y, 0, 0, vx, vy, c)) == 0
    # ReLU with means: truncated series within its Parseval bound
    vals = dict(vx=1.1, vy=0.9, c=0.45)
    s, b, ex = pair_mehler(sp.Max(0, x), sp.Max(0, y), x, y, sp.Float(0.3), sp.Float(-0.2),
                           sp.Float(vals["vx"]), sp.Float(vals["vy"]), sp.Float(vals["c"]), 8)
    assert not ex
    ref = integrate.dblquad(
        lambda bb, a: a * bb * math.exp(-0.5 * np.array([a - 0.3, bb + 0.2]) @ np.linalg.solve(
            [[1.1, 0.45], [0.45, 0.9]], [a - 0.3, bb + 0.2])) / (2 * math.pi * math.sqrt(0.99 - 0.45 ** 2)),
        0, 30, 0, 30, epsabs=1e-13)[0]
    err = abs(float(s) - ref)
    assert err <= float(b)
    assert float(b) < 50 * err + 1e-9   # the bound is not vacuous


def test_mehler_numeric_tanh_bound():
    vx, vy, c = 1.2, 0.7, 0.5
    val, bound = mehler_numeric(np.tanh, np.tanh, vx, vy, c, order=30, n_quad=200)
    ref = _gh2(lambda a, b: np.tanh(a) * np.tanh(b), vx, vy, c, n=200)
    assert abs(val - ref) <= bound + 1e-14
    assert bound < 1e-6


@settings(deadline=None, max_examples=30)
@given(st.floats(0.2, 3.0), st.floats(0.2, 3.0), st.floats(-0.95, 0.95))
def test_relu_arccos_kernel_hypothesis(vx, vy, rho):
    c = rho * math.sqrt(vx * vy)
    got = float(pair_closed(sp.Max(0, x), sp.Max(0, y), x, y, 0, 0, sp.Float(vx), sp.Float(vy),
                            sp.Float(c)))
    assert got == pytest.approx(_relu_pair_polar(vx, vy, c), rel=1e-11, abs=1e-14)


# -- eq. (23): -[grad Phi]_12 = (1/2) sum_nu rho^|nu| nu! ||H_nu||^2 at q11 = q22 -------------
def _tied_gamma12(loss, K, L, q):
    from attndyn.symbolic.potential import tied_potential
    pot = tied_potential(loss, K, L)
    if hasattr(pot, "gamma_numeric"):
        return pot.gamma_numeric(q)[0, 1]
    return pot.gamma_at(q)[0, 1]


@pytest.mark.parametrize("act", ["h2", "h3", "erf"])
def test_eq23_L1(act):
    from attndyn.symbolic.losses import mse_teacher_student
    s = activation(act)
    q22, rho = 0.7, 0.35
    q = np.array([[q22, rho * q22], [rho * q22, q22]])
    gamma12 = _tied_gamma12(mse_teacher_student(act), 2, 1, q)
    # A(z) = F'(sqrt(q22) B^(1/2) z) B^(1/2), B = 2 for L = 1
    dF = sp.lambdify(X, sp.diff(s.expr, X), modules=[{"erf": special.erf}, "numpy"])
    A = lambda Z: np.sqrt(2.0) * dF(np.sqrt(2 * q22) * Z[:, 0])[:, None] * np.ones((len(Z), 1))
    coeffs = multivariate_hermite_coefficients(A, 1, order=40, n_quad=80)
    assert -gamma12 == pytest.approx(eq23_series(coeffs, rho), rel=1e-10)


def test_eq23_L2():
    """L = 2, C = I, F = entrywise h2 of the 2 x 2 matrix (exact, finite series) and a
    row-softmax F (truncated series vs the numeric potential)."""
    from attndyn.symbolic.losses import mse_teacher_student
    L, q22, rho = 2, 0.6, 0.3
    q = np.array([[q22, rho * q22], [rho * q22, q22]])
    # B_(ij),(i'j') = d_ii' d_jj' + d_ij' d_ji' ; B^(1/2) = sqrt(2) P_sym
    idx = [(i, j) for i in range(L) for j in range(L)]
    B = np.array([[float((i == a) * (j == b) + (i == b) * (j == a)) for (a, b) in idx]
                  for (i, j) in idx])
    ev, U = np.linalg.eigh(B)
    Bh = U @ np.diag(np.sqrt(np.clip(ev, 0, None))) @ U.T
    gamma12 = _tied_gamma12(mse_teacher_student("h2"), 2, L, q)
    h2p = lambda g: np.sqrt(2.0) * g           # h2'(g)

    def A_h2(Z):
        G = np.sqrt(q22) * Z @ Bh.T            # rows: G_(ij)
        J = np.zeros((len(Z), 4, 4))           # d F_(ij) / d G_(i'j') = h2'(G_ij) delta
        for a in range(4):
            J[:, a, a] = h2p(G[:, a])
        return (J @ Bh).reshape(len(Z), -1)
    coeffs = multivariate_hermite_coefficients(A_h2, 4, order=2, n_quad=4)
    assert -gamma12 == pytest.approx(eq23_series(coeffs, rho), rel=1e-12)

    # row-softmax F: truncated series (order 8, rho^9 ~ 2e-5 of a small tail) vs the
    # numeric potential of the softmax teacher-student loss
    from attndyn.numeric.attention.potentials import tied_potential  # builds the numeric route
    from attndyn.symbolic.losses import softmax_teacher_student
    pot = tied_potential(softmax_teacher_student(2), 2, L, tol=1e-9)
    assert pot.route == "numeric"
    g12, err = pot.gamma_with_error(q)

    def A_soft(Z):
        G = (np.sqrt(q22) * Z @ Bh.T).reshape(len(Z), 2, 2)
        e = np.exp(G - G.max(axis=2, keepdims=True))
        S = e / e.sum(axis=2, keepdims=True)               # S[n, i, j]
        J = np.zeros((len(Z), 4, 4))
        for i in range(2):
            for j in range(2):
                for k in range(2):                        # dS_ij / dG_ik
                    J[:, 2 * i + j, 2 * i + k] = S[:, i, j] * ((j == k) - S[:, i, k])
        return (J @ Bh).reshape(len(Z), -1)
    coeffs = multivariate_hermite_coefficients(A_soft, 4, order=8, n_quad=12)
    series = eq23_series(coeffs, rho)
    assert -g12[0, 1] == pytest.approx(series, rel=1e-5)
    assert series > 0   # the escape direction of eq. (17) exists
