"""Quadrature rules, the compiled law kernel, and numeric potentials of every law."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attndyn.numeric.attention.potentials.quadrature import (choose_rule, gh_rule, rqmc_rules, smolyak_rule,
                                        tensor_rule)
from attndyn.symbolic.gaussian import g_array
from attndyn.symbolic.losses import (mse_teacher_student, softmax_teacher_student,
                                     two_layer_attention)
# the numeric layer's potential functions: the symbolic ones describe the numeric route only
from attndyn.numeric.attention.potentials import (direct_potential, general_potential,
                                                  tied_potential, untied_potential)


def _dfact(n):
    return 1 if n <= 0 else n * _dfact(n - 2)


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 60))
def test_gh_rule_exactness(n):
    z, w = gh_rule(n)
    assert w.sum() == pytest.approx(1.0, rel=1e-13)
    for k in range(0, 2 * n, 2):
        if k > 40:
            break
        assert w @ z ** k == pytest.approx(_dfact(k - 1), rel=1e-10)


def test_tensor_and_sparse_rules():
    r = tensor_rule(3, 6)
    mom = r.weights @ (r.nodes[:, 0] ** 4 * r.nodes[:, 1] ** 2 * r.nodes[:, 2] ** 6)
    assert mom == pytest.approx(3 * 1 * 15, rel=1e-12)
    pr = tensor_rule(3, 12, prune=1e-10)
    assert pr.size < 12 ** 3 and pr.weights.sum() > 1 - 1e-10
    a = np.array([0.3, -0.5, 0.2, 0.4, 0.1, -0.2])
    exact = math.exp(a @ a / 2)
    errs = []
    for level in range(1, 6):
        s = smolyak_rule(6, level)
        assert s.weights.sum() == pytest.approx(1.0, abs=1e-12)
        errs.append(abs(s.weights @ np.exp(s.nodes @ a) - exact))
    assert errs[-1] < 1e-8 and errs[-1] < errs[0] * 1e-5
    # total degree 3 exact at level 1, degree 5 at level 2 (Gauss-Hermite 2i-1 points)
    s = smolyak_rule(4, 2)
    Z = s.nodes
    assert s.weights @ (Z[:, 0] ** 2 * Z[:, 1] ** 2) == pytest.approx(1.0, abs=1e-12)
    assert s.weights @ Z[:, 2] ** 4 == pytest.approx(3.0, abs=1e-12)


def test_rqmc_deterministic_for_a_seed():
    a = rqmc_rules(3, 8, 4, seed=7)
    b = rqmc_rules(3, 8, 4, seed=7)
    c = rqmc_rules(3, 8, 4, seed=8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.nodes, y.nodes)
    assert not np.array_equal(a[0].nodes, c[0].nodes)
    assert not np.array_equal(a[0].nodes, a[1].nodes)


def test_choose_rule_by_dimension_and_error():
    for dim, method in [(1, "tensor"), (4, "tensor"), (6, "sparse"), (12, "rqmc")]:
        a = np.linspace(0.1, 0.3, dim)
        exact = math.exp(a @ a / 2)
        tol = 1e-8 if method != "rqmc" else 1e-3
        rule = choose_rule(dim, lambda r: np.array([r.weights @ np.exp(r.nodes @ a)]), tol=tol,
                           seed=1)
        assert rule.method == method
        est = rule.weights @ np.exp(rule.nodes @ a)
        assert abs(est - exact) <= max(rule.error, 1e-15) * (1 if method != "rqmc" else 2)
    with pytest.raises(ValueError, match="method"):
        choose_rule(2, lambda r: np.zeros(1), method="monte")
    with pytest.raises(ValueError, match="tol"):
        choose_rule(2, lambda r: np.zeros(1), tol=-1)


# -- numeric potentials against closed forms for every law ------------------------------------
def test_untied_numeric_matches_wick_including_m_hessian():
    loss = mse_teacher_student("h2")
    exact = untied_potential(loss, 2)
    num = untied_potential(loss, 2, route="numeric", tol=1e-11)
    vals = dict(m=[0.3, -0.2], q1=[[0.9, 0.2], [0.2, 0.6]], q2=[[0.1, 0.05], [0.05, 0.2]])
    ev = exact.evaluate(**vals)
    g = num.gradients(**vals)
    for name in ("m", "q1", "q2"):
        np.testing.assert_allclose(g[name], ev[name], atol=1e-10)
    np.testing.assert_allclose(g["hess_m"], ev["hess_m"], atol=1e-10)
    assert num.phi_at(**vals) == pytest.approx(ev["phi"], abs=1e-10)


def test_direct_and_general_numeric_match_wick():
    loss = lambda G: (G[0, 0, 0] ** 2 - G[0, 0, 1]) ** 2 + G[0, 0, 0] * G[0, 0, 1] ** 3
    d_exact = direct_potential(loss, 2)
    d_num = direct_potential(loss, 2, route="numeric", tol=1e-11)
    vals = dict(Omega=[[0.7, 0.1], [0.1, 0.5]], Psi=[[0.4, 0.2], [0.2, 0.3]])
    ev, g = d_exact.evaluate(**vals), d_num.gradients(**vals)
    np.testing.assert_allclose(g["Omega"], ev["Omega"], atol=1e-10)
    np.testing.assert_allclose(g["Psi"], ev["Psi"], atol=1e-10)
    gen_exact = general_potential(loss, 2)
    gen_num = general_potential(loss, 2, route="numeric", tol=1e-11)
    gv = dict(mu=[0.2, -0.1], Omega=[[0.7, 0.1], [0.1, 0.5]], Psi=[[0.4, 0.2], [0.2, 0.3]])
    ev, g = gen_exact.evaluate(**gv), gen_num.gradients(**gv)
    for name in ("mu", "Omega", "Psi"):
        np.testing.assert_allclose(g[name], ev[name], atol=1e-10)


def test_stein_and_hessian_modes_agree_for_smooth_loss():
    loss = mse_teacher_student("tanh", "erf")
    h = tied_potential(loss, 2, route="numeric", mode="hessian", tol=1e-10)
    s = tied_potential(loss, 2, route="numeric", mode="stein", method="tensor", tol=1e-10)
    q = np.array([[0.8, 0.25], [0.25, 0.6]])
    (gh, eh), (gs, es) = h.gamma_with_error(q), s.gamma_with_error(q)
    assert np.all(np.abs(gh - gs) <= eh + es + 1e-12)
    with pytest.raises(ValueError, match="non-degenerate"):
        s.gamma_at(np.array([[0.8, 0.8], [0.8, 0.8]]))  # teacher = student: singular
    # the Hessian mode handles the singular covariance
    assert np.all(np.isfinite(h.gamma_at(np.array([[0.8, 0.8], [0.8, 0.8]]))))


def test_singular_covariance_polynomial_exact():
    """Degenerate (PSD, not definite) covariances: Wick is exact, the quadrature too."""
    loss = mse_teacher_student("h3")
    exact = tied_potential(loss, 2)
    num = tied_potential(loss, 2, route="numeric", tol=1e-11)
    q = np.array([[0.5, 0.5], [0.5, 0.5]])      # G_1 = G_2 almost surely
    np.testing.assert_allclose(num.gamma_at(q), exact.gamma_numeric(q), atol=1e-11)
    assert exact.phi_numeric(q) == pytest.approx(0.0, abs=1e-14)


def test_rqmc_potential_deterministic_and_within_error():
    loss = softmax_teacher_student(2)
    a = tied_potential(loss, 2, 2, route="numeric", method="rqmc", tol=1e-3, seed=5)
    b = tied_potential(loss, 2, 2, route="numeric", method="rqmc", tol=1e-3, seed=5)
    np.testing.assert_array_equal(a.parameters(), b.parameters())
    ref = tied_potential(loss, 2, 2, route="numeric", method="tensor", tol=1e-9)
    q = np.array([[0.9, 0.2], [0.2, 0.7]])
    g, err = a.gamma_with_error(q)
    assert np.all(np.abs(g - ref.gamma_at(q)) <= 1.5 * err + 1e-9)


# -- multi-layer multi-head example (appendix B.1) ---------------------------------------------
@pytest.mark.parametrize("heads,output", [(1, "linear"), (2, "softmax")])
def test_two_layer_attention_forms_reproduce_the_network(heads, output):
    """At finite d the network output equals the expression in the effective bilinear forms."""
    ex = two_layer_attention(heads, output)
    Kh = ex.extra["forms_per_network"]
    L, d = 2, 30
    rng = np.random.default_rng(11)
    S0 = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(heads)]
    V0 = [rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(heads)]
    S1 = rng.standard_normal((d, d)) / np.sqrt(d)
    X0 = rng.standard_normal((L, d))
    y_direct = ex.extra["forward"](X0, S0, V0, S1)
    mats = ex.extra["effective_matrices"](S0, V0, S1)
    assert len(mats) == Kh
    G = g_array(L, 2 * Kh)
    y_sym = ex.extra["network_output"](G, 0)
    vals = {}
    for k, M in enumerate(mats):
        F = X0 @ M @ X0.T / np.sqrt(d)
        for i in range(L):
            for j in range(L):
                vals[G[i, j, k]] = F[i, j]
    y_forms = np.array(y_sym.subs(vals).evalf(), dtype=float)
    np.testing.assert_allclose(y_forms, y_direct, rtol=1e-10, atol=1e-12)


def test_two_layer_attention_potential_L1():
    """L = 1: softmax of one token is 1, the loss is a quadratic: Wick (exact) vs the numeric
    route, which finds that the loss depends on one linear combination per network."""
    ex = two_layer_attention(1)
    K = 2 * ex.extra["forms_per_network"]
    exact = untied_potential(ex, K, 1)
    assert exact.route == "wick"
    num = untied_potential(ex, K, 1, route="numeric", tol=1e-11)
    assert num.dim == 1
    rng = np.random.default_rng(0)
    A = rng.standard_normal((K, K)) / K
    vals = dict(m=rng.standard_normal(K) * 0.3, q1=A @ A.T + 0.1 * np.eye(K), q2=0.05 * np.eye(K))
    ev, g = exact.evaluate(**vals), num.gradients(**vals)
    np.testing.assert_allclose(g["q1"], ev["q1"], atol=1e-10)
    np.testing.assert_allclose(g["m"], ev["m"], atol=1e-10)


def test_two_layer_attention_potential_L2_gradient_vs_finite_differences():
    ex = two_layer_attention(1)
    K = 2 * ex.extra["forms_per_network"]
    pot = untied_potential(ex, K, 2, tol=2e-3, seed=3)
    # a continuous gradient: the Hessian itself, not Stein's estimate; the split rule
    # (Gauss-Hermite over the 4 softmax arguments, exact over the other 14 directions)
    assert pot.route == "numeric" and pot.method == "tensor" and pot.mode == "hessian"
    assert pot.dim == 18 and pot.rule.dim == 4
    rng = np.random.default_rng(1)
    A = rng.standard_normal((K, K)) / K
    vals = dict(m=rng.standard_normal(K) * 0.3, q1=A @ A.T + 0.3 * np.eye(K), q2=0.05 * np.eye(K))
    g, err = pot.gradients(with_error=True, **vals)
    h = 1e-4
    for k in range(3):
        dm = np.zeros(K)
        dm[k] = h
        up = pot.phi_at(m=vals["m"] + dm, q1=vals["q1"], q2=vals["q2"])
        dn = pot.phi_at(m=vals["m"] - dm, q1=vals["q1"], q2=vals["q2"])
        # same rule at both points: the finite difference tracks the quadrature's own gradient
        assert (up - dn) / (2 * h) == pytest.approx(g["m"][k], abs=3 * err["m"][k] + 1e-6)
