"""The tied finite-width correction for losses of degree 5-6 (h3): the exact finite-d
population loss from the cumulants of Gaussian quadratic forms, its gradient, its flow."""

import itertools

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.numeric.attention.corrections import (cumulant_terms, polynomial_taylor, qf_moment,
                                                   qf_scale, word_sum, word_traces)
from attndyn.numeric.attention.tied import finite_width as fw
from attndyn.symbolic.losses import mse_teacher_student
from attndyn.symbolic.potential import call_loss, g_array


def _h3():
    return attndyn.TiedModel(2, [0], mse_teacher_student("h3"))


def _odd6():
    # odd and even parts: every pattern (kappa_3, kappa_3 kappa_2, kappa_5, ...) appears
    return attndyn.TiedModel(2, [0], lambda G: G[0, 0, 0] ** 5 * G[0, 0, 1] - 0.5 * G[0, 0, 0] ** 3
                             + G[0, 0, 1] ** 2 * G[0, 0, 0] ** 2 + 0.3 * G[0, 0, 1] ** 5)


def _mats(d, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        W = rng.standard_normal((d, d)) * scale
        out.append(W @ W.T)
    return out


def _qf_route(model, S):
    """E[loss(G)] by Isserlis over set partitions of the quadratic forms (independent route)."""
    d = S[0].shape[0]
    G = g_array(1, model.K)
    syms = [G[0, 0, k] for k in range(model.K)]
    poly = sp.Poly(sp.expand(call_loss(model.loss, G)), *syms)
    tot = 0.0
    for expo, coef in poly.terms():
        mats = [S[k] for k, e in enumerate(expo) for _ in range(e)]
        tot += float(coef) * (qf_moment(mats, [True] * len(mats)) / d ** (len(mats) / 2)
                              if mats else 1.0)
    return tot


@pytest.mark.parametrize("make", [_h3, _odd6])
def test_phi_d_is_the_exact_expectation_at_small_d(make):
    model, d = make(), 5
    S = _mats(d)
    c = polynomial_taylor(model)
    T = word_traces(S, 6)
    kap = {n: qf_scale(n, d) * T[n] for n in T}
    terms, _ = cumulant_terms(c, kap)
    gauss = float(c[0]) + sum(v for lam, v in terms.items() if set(lam) == {2})
    exact = _qf_route(model, S)
    corr = fw.finite_width_potential(model, S)
    assert gauss + corr["total"] == pytest.approx(exact, rel=1e-10)
    assert abs(corr["total"]) > 0.1 * abs(exact)  # a large correction at d = 5: not vacuous
    # the Gaussian part's gradient is the model's Gamma(q) (symmetric convention)
    q = np.array([[np.sum(a * b) / d for b in S] for a in S])
    _, g2 = cumulant_terms(c, {2: kap[2]})
    assert np.allclose(2 * g2[2], model.gamma(q), rtol=1e-10, atol=1e-10)


def test_h3_patterns_and_orders():
    corr = fw.finite_width_potential(_h3(), _mats(8))
    assert corr["kappa3"] == 0.0 and corr.get("kappa5", 0.0) == 0.0  # an even loss
    assert set(corr["patterns"]) == {"4", "6", "4+2", "3+3"}
    assert corr["kappa4"] == pytest.approx(corr["patterns"]["4"] + corr["patterns"]["4+2"]
                                           + corr["patterns"]["3+3"])
    odd = fw.finite_width_potential(_odd6(), _mats(8))
    assert {"3", "3+2", "5"} <= set(odd["patterns"]) and odd["kappa5"] != 0.0


@pytest.mark.parametrize("make", [_h3, _odd6])
def test_gradient_is_the_derivative_of_phi_d(make):
    model, d = make(), 7
    S = _mats(d, seed=3)
    E = np.random.default_rng(4).standard_normal((d, d))
    E = E + E.T
    h = 1e-5
    fp = fw.finite_width_potential(model, [S[0] + h * E, S[1]])["total"]
    fm = fw.finite_width_potential(model, [S[0] - h * E, S[1]])["total"]
    g = fw.finite_width_gradient(model, S)[0]
    assert np.sum(g * E) == pytest.approx((fp - fm) / (2 * h), rel=1e-6)


def test_degree_4_matches_the_explicit_kappa3_kappa4_formula():
    model = attndyn.TiedModel(2, [0], lambda G: G[0, 0, 0] ** 3 * G[0, 0, 1]
                              - G[0, 0, 1] ** 3 + (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    d = 9
    S = _mats(d, seed=5)
    c3, c4 = fw.finite_width_coefficients(model)
    P = (4 / d ** 1.5) * sum(c3[0, l, m] * S[l] @ S[m] for l, m in itertools.product(range(2), repeat=2))
    P = P + (8 / d ** 2) * sum(c4[0, l, m, n] * S[l] @ S[m] @ S[n]
                               for l, m, n in itertools.product(range(2), repeat=3))
    assert np.allclose(fw.finite_width_gradient(model, S)[0], 0.5 * (P + P.T), rtol=1e-12,
                       atol=1e-12)


def test_word_sum_and_traces_by_hand():
    S = _mats(4, seed=6)
    g = np.zeros((2, 2, 2))
    g[0, 1, 1], g[1, 0, 0] = 2.0, -1.0
    assert np.allclose(word_sum(g, S), 2 * S[0] @ S[1] @ S[1] - S[1] @ S[0] @ S[0])
    T = word_traces(S, 5)
    assert T[5][0, 1, 1, 0, 1] == pytest.approx(np.trace(S[0] @ S[1] @ S[1] @ S[0] @ S[1]))


def test_flow_initial_velocity_is_the_exact_mean_drift():
    """dq_12/dt at t = 0 of the finite-width flow against -(d/2)(P S + S P) with P from
    finite differences of Phi_d (no use of the gradient code)."""
    model, d = _h3(), 6
    S = _mats(d, seed=8, scale=0.2)
    h = 1e-7
    res = fw.finite_width_flow(model, S, [0.0, h, 2 * h], rtol=1e-13, atol=1e-15)
    v = (-3 * res.observable("q_12")[0] + 4 * res.observable("q_12")[1]
         - res.observable("q_12")[2]) / (2 * h)
    # directional derivative of Phi (Gaussian + correction) along S_1 -> S_1 + e (S_1 X + X S_1),
    # X = S_2: dq_12/dt = -(d/2) * 2 Tr(P S_1 S_2)/d = -Tr(P (S_1 S_2 + S_2 S_1))/2 ... use FD of Phi_d
    def phi_d(S0):
        q = np.array([[np.sum(a * b) / d for b in (S0, S[1])] for a in (S0, S[1])])
        return model.potential.phi_numeric(q) + fw.finite_width_potential(model, [S0, S[1]])["total"]
    Y = S[0] @ S[1] + S[1] @ S[0]
    e = 1e-6
    fd = (phi_d(S[0] + e * Y) - phi_d(S[0] - e * Y)) / (2 * e)  # = Tr(P Y)
    # dS_1/dt = -(d/2)(P S_1 + S_1 P): dq_12/dt = Tr(dS_1 S_2)/d = -(1/2) Tr(P Y)
    assert v == pytest.approx(-0.5 * fd, rel=1e-5)


def test_monte_carlo_population_loss_h3():
    model, d = _h3(), 10
    S = [w @ w.T for w in model.gaussian_init(d, scale=0.6, seed=1)]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200_000, d))
    G = [(np.einsum("ni,ij,nj->n", x, s, x) - np.trace(s)) / np.sqrt(d) for s in S]
    h3 = lambda z: (z ** 3 - 3 * z) / np.sqrt(6)  # noqa: E731
    L = (h3(G[0]) - h3(G[1])) ** 2 / 2
    q = np.array([[np.sum(a * b) / d for b in S] for a in S])
    gauss = model.potential.phi_numeric(q)
    corr = fw.finite_width_potential(model, S)["total"]
    se = L.std() / np.sqrt(L.size)
    assert abs(L.mean() - gauss - corr) < 4 * se  # measured: 0.8 s.e.
    assert abs(L.mean() - gauss) > 6 * se  # measured: 9.3 s.e. (the degree-6 loss is heavy-tailed)


def test_refusals_and_text():
    S = _mats(5)
    with pytest.raises(ValueError, match="degree <= 6"):
        fw.finite_width_flow(attndyn.TiedModel(2, [0], lambda G: G[0, 0, 0] ** 7), S, [0, 0.1])
    with pytest.raises(ValueError, match="degree <= 4"):
        fw.finite_width_coefficients(_h3())
    txt = fw.finite_width_text(_h3())
    assert "(8/(9 d)) * [60 mu_111 mu_111" in txt and "(kappa_3^2, O(1/d))" in txt
    assert "(kappa_6, O(d^-2))" in txt and "(kappa_4 kappa_2, O(1/d))" in txt


@pytest.mark.slow
def test_initial_drift_against_exact_sgd_drift_monte_carlo():
    """One rung down at Fig. 2's kind of start (Var G = 1, d = 40): dp_12/dt at t = 0 of the
    exact finite-d SGD drift (Monte Carlo over x) against the flow with and without the
    finite-width correction (h2). Measured: 16.3 s.e. (flow) and 0.47 s.e. (finite-d)."""
    from attndyn.numeric.attention.figures.fig2 import _rescale_tied, _tied_p12_drift_mc
    from attndyn.numeric.attention.training import gaussian_init

    model, d = attndyn.TiedModel(2, [0], mse_teacher_student("h2")), 40
    W = _rescale_tied(gaussian_init(model, d, seed=2040))
    S = [w @ w.T for w in W]
    mean, se = _tied_p12_drift_mc(W, "h2", 100_000, seed=[5040])
    h = 1e-5
    rates = []
    for res in (attndyn.matrix_flow(model, S, [0.0, h, 2 * h], order=2),
                fw.finite_width_flow(model, S, [0.0, h, 2 * h])):
        p = res.observable("q_12") - res.observable("mu_1") * res.observable("mu_2")
        rates.append((-3 * p[0] + 4 * p[1] - p[2]) / (2 * h))
    assert abs(mean - rates[0]) > 5 * se
    assert abs(mean - rates[1]) < 3 * se
