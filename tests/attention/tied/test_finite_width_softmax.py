"""The finite-d correction for non-polynomial losses (issue 26): the Edgeworth terms of the
tied population loss through O(1/d), checked against closed forms, the exact polynomial
correction, finite differences and a Monte Carlo of the exact finite-d loss (row softmax,
L = 2, Fig. 1's loss)."""

import functools
import itertools

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.numeric.attention.corrections import (edgeworth_terms, hermite_moments, qf_moment,
                                                   sym_tensor)
from attndyn.numeric.attention.potentials.quadrature import tensor_rule
from attndyn.numeric.attention.tied import finite_width as fw
from attndyn.symbolic.losses import mse_teacher_student, softmax_teacher_student


def _mats(d, seed=0, scale=0.5):
    rng = np.random.default_rng([seed, d])
    return [(lambda W: W @ W.T)(rng.standard_normal((d, d)) * scale / np.sqrt(d))
            for _ in range(2)]


@functools.lru_cache(maxsize=1)
def _softmax():
    return attndyn.TiedModel(2, [0], softmax_teacher_student(2), L=2)


def test_hermite_contractions_match_an_exponential_closed_form():
    # g = exp(b.xi): E_N D^n g = b^(x n) exp(|b|^2/2), so every term is closed form
    r = 3
    rule = tensor_rule(r, 24)
    rng = np.random.default_rng(1)
    b = 0.3 * rng.standard_normal(r)
    m = hermite_moments(np.exp(rule.nodes @ b), rule.nodes, rule.weights)
    K3 = sym_tensor(rng.standard_normal((r,) * 3))
    K4 = sym_tensor(rng.standard_normal((r,) * 4))
    terms, G3, G4 = edgeworth_terms(m, K3, K4)
    e = np.exp(b @ b / 2)
    c3 = np.einsum("abc,a,b,c", K3, b, b, b)
    c4 = np.einsum("abcd,a,b,c,d", K4, b, b, b, b)
    np.testing.assert_allclose([terms["kappa3"], terms["kappa4"], terms["kappa3^2"]],
                               [c3 * e / 6, c4 * e / 24, c3 ** 2 * e / 72], rtol=1e-7)
    # the returned derivatives are those of the sum of the three terms
    E3, E4 = sym_tensor(rng.standard_normal((r,) * 3)), sym_tensor(rng.standard_normal((r,) * 4))
    h = 1e-5
    for E, G, args in ((E3, G3, lambda s: (K3 + s * E3, K4)), (E4, G4, lambda s: (K3, K4 + s * E4))):
        fp = sum(edgeworth_terms(m, *args(h))[0].values())
        fm = sum(edgeworth_terms(m, *args(-h))[0].values())
        assert abs((fp - fm) / (2 * h) - np.sum(G * E)) < 1e-8 * max(1.0, abs(np.sum(G * E)))


def test_degree_four_loss_equals_the_exact_polynomial_correction():
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 4 / 4
                              + 0.7 * G[0, 0, 0] ** 3 - G[0, 0, 0] * G[0, 0, 1] ** 2)
    S = _mats(12)
    ew = fw.EdgeworthLoss(model)
    a, b = ew.potential(S), fw.finite_width_potential(model, S)
    assert abs(a["kappa3^2"]) < 1e-12          # no sixth derivative
    np.testing.assert_allclose([a["kappa3"], a["kappa4"]], [b["kappa3"], b["kappa4"]], rtol=1e-9)
    ga, gb = ew.gradient(S)[0], fw.finite_width_gradient(model, S)[0]
    assert np.abs(ga - gb).max() <= 1e-7 * np.abs(gb).max()


def test_degree_six_loss_equals_the_exact_terms_through_one_over_d():
    # h3: the Edgeworth kappa_3 term is every kappa_3 kappa_2^m pattern, the kappa_4 and
    # kappa_3^2 terms every O(1/d) pattern; kappa_5, kappa_6 are left out
    model = attndyn.TiedModel(2, [0], mse_teacher_student("h3"))
    S = _mats(10, 3)
    a, b = fw.EdgeworthLoss(model, nodes=16).potential(S), fw.finite_width_potential(model, S)
    scale = abs(b["kappa4"])
    assert scale > 1e-4
    assert abs(a["kappa3"] - b["kappa3"]) < 1e-8 * scale
    assert abs(a["kappa4"] + a["kappa3^2"] - b["kappa4"]) < 1e-8 * scale


def test_softmax_terms_converge_in_the_nodes_and_the_odd_term_vanishes():
    model = _softmax()
    S = _mats(10, 1)
    p12, p20 = (fw.EdgeworthLoss(model, nodes=n).potential(S) for n in (12, 16))
    assert fw.EdgeworthLoss(model).r == 4      # D_i = G_i0 - G_i1, student and teacher
    assert abs(p12["kappa3"]) < 1e-14          # the loss is even in G
    assert abs(p12["total"] - p20["total"]) < 1e-6 * abs(p20["total"])


def test_gaussian_part_is_the_paper_potential():
    # Phi(q) of the rule against Gamma = dPhi/dq of the exact route (loss of degree 4, L = 2)
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 1, 0] - G[1, 1, 1]) ** 2 * G[0, 0, 0] ** 2
                              + G[1, 0, 0] * G[0, 1, 1], L=2)
    ew = fw.EdgeworthLoss(model, nodes=8)
    q = np.array([[0.3, 0.1], [0.1, 0.2]])
    h = 1e-5
    for k, l in ((0, 0), (0, 1), (1, 1)):
        E = np.zeros((2, 2))
        E[k, l] = E[l, k] = h
        fd = (ew.moments(q + E)[1][0] - ew.moments(q - E)[1][0]) / (2 * h)
        gam = model.gamma(q)[k, l] * (1.0 if k == l else 2.0)
        assert abs(fd - gam) < 1e-7 * max(1.0, abs(gam)), (k, l, fd, gam)


def test_softmax_gradient_matches_finite_differences():
    model = _softmax()
    ew = fw.edgeworth_loss(model)
    S = _mats(10, 2)
    g = ew.gradient(S)[0]
    rng = np.random.default_rng(5)
    V = rng.standard_normal((10, 10))
    V = V + V.T
    d, h = 10, 1e-4

    def total(S0):
        mats = [S0, S[1]]
        t = ew.terms_at(ew._q(mats), fw.word_traces(mats, 4), d)[0]
        return t["kappa3"] + t["kappa4"] + t["kappa3^2"]
    fd = (total(S[0] + h * V) - total(S[0] - h * V)) / (2 * h)
    assert abs(fd - np.sum(g * V)) < 1e-4 * abs(fd)


# ---------------------------------------------------------------------------
# Monte Carlo of the exact finite-d population loss, with control variates of known mean


def _sample_loss(ew, S, n, rng):
    """Per-sample loss and the reduced variables ``v`` for ``n`` draws of (x_0, x_1)."""
    d = S[0].shape[0]
    X0, X1 = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    forms = {}
    for k in range(2):
        A0, A1, tr = X0 @ S[k], X1 @ S[k], np.trace(S[k])
        forms[0, 0, k] = (np.einsum("ni,ni->n", A0, X0) - tr) / np.sqrt(d)
        forms[0, 1, k] = np.einsum("ni,ni->n", A0, X1) / np.sqrt(d)
        forms[1, 1, k] = (np.einsum("ni,ni->n", A1, X1) - tr) / np.sqrt(d)
    U = np.array([forms[i, j, k] for i, j, k in ew.index])
    return np.asarray(ew._f(U), dtype=float), ew.R @ U


def _mc_loss(ew, S, n, seed):
    """Control-variate Monte Carlo of E_d[loss]: the monomials of v of degree <= 4, whose
    exact finite-d means come from Isserlis over set partitions (qf_moment)."""
    d = S[0].shape[0]
    N = [sum(np.kron(ew.B[c, k], S[k]) for k in range(2)) for c in range(ew.r)]
    mons = [m for deg in range(1, 5) for m in itertools.combinations_with_replacement(range(ew.r), deg)]
    EP = np.array([qf_moment([N[c] for c in m], [True] * len(m)) / d ** (len(m) / 2) for m in mons])
    f, v = _sample_loss(ew, S, n, np.random.default_rng(seed))
    P = np.stack([np.prod(v[list(m)], axis=0) for m in mons], axis=1)
    Pc = P - P.mean(0)
    beta = np.linalg.lstsq(Pc, f - f.mean(), rcond=None)[0]
    z = f - (P - EP) @ beta
    return z.mean(), z.std(ddof=1) / np.sqrt(n)


def test_softmax_correction_against_monte_carlo_d20():
    """At d = 20 the Gaussian-equivalent Phi(q) misses the exact finite-d loss by hundreds
    of standard errors; the Edgeworth terms remove most of it (measured: 83%; the rest,
    O(d^-2), falls 4x per doubling of d, docs/finite-eta.md)."""
    ew = fw.edgeworth_loss(_softmax())
    S = _mats(20, 0)
    mc, se = _mc_loss(ew, S, 100_000, 7)
    p = ew.potential(S)
    gap, res = mc - p["gaussian"], mc - p["gaussian"] - p["total"]
    assert abs(gap) > 50 * se, (gap, se)
    assert abs(res) < 0.3 * abs(gap), (gap, res, se)


@pytest.mark.slow
def test_softmax_residual_falls_faster_than_one_over_d():
    """d = 20, 40, 80: the uncorrected gap falls about as 1/d, the corrected residual
    about as 1/d^2 (1e6 draws per point, control variates)."""
    ew = fw.edgeworth_loss(_softmax())
    gaps, ress, ses = [], [], []
    for d in (20, 40, 80):
        S = _mats(d, 0)
        mc, se = _mc_loss(ew, S, 1_000_000, 11)
        p = ew.potential(S)
        gaps.append(mc - p["gaussian"])
        ress.append(mc - p["gaussian"] - p["total"])
        ses.append(se)
    slope_gap = np.polyfit(np.log([20, 40, 80]), np.log(np.abs(gaps)), 1)[0]
    assert -1.3 < slope_gap < -0.6, gaps
    assert abs(ress[1]) > 5 * ses[1]
    assert abs(ress[1] / ress[0]) < 0.4, (ress, ses)   # 1/d would give 0.5, 1/d^2 0.25
    assert abs(ress[2]) < 0.1 * abs(gaps[2]), (gaps, ress, ses)


# ---------------------------------------------------------------------------
# the flow and its dispatch


def test_edgeworth_flow_follows_the_corrected_gradient():
    # a loss with a closed-form Gamma (degree 7 > 6: the Edgeworth route, asked for by nodes=)
    model = attndyn.TiedModel(2, [0], lambda G: 0.1 * G[0, 0, 0] ** 7 + (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    d = 8
    S = _mats(d, 4)
    h = 1e-4
    res = fw.finite_width_flow(model, S, [0.0, h, 2 * h], rtol=1e-12, atol=1e-14, nodes=8)
    assert res.status == 0 and res.params["finite_width_route"].startswith("edgeworth")
    q = np.array([[np.sum(a * b) / d for b in S] for a in S])
    Gam = model.gamma(q)
    Pc = fw.edgeworth_loss(model, 8).gradient(S)[0]
    assert np.abs(Pc).max() > 1e-3
    P = 2.0 * (Gam[0, 0] * S[0] + Gam[0, 1] * S[1]) / d
    P = 0.5 * (P + P.T) + Pc
    dS = -(d / 2.0) * (P @ S[0] + S[0] @ P)
    for name, pred in (("mu_1", np.trace(dS) / d), ("q_11", 2 * np.sum(S[0] * dS) / d),
                       ("q_12", np.sum(S[1] * dS) / d)):
        y = res.observable(name)
        slope = (-3.0 * y[0] + 4.0 * y[1] - y[2]) / (2 * h)  # one-sided, O(h^2)
        assert abs(slope - pred) < 1e-5 * max(1.0, abs(pred)), name


@pytest.mark.slow
def test_softmax_finite_d_correction_through_matrix_flow():
    model = _softmax()
    S = _mats(8, 4)
    t = [0.0, 0.05, 0.1]
    res = attndyn.matrix_flow(model, S, t, correction="finite-d", rtol=1e-10, atol=1e-12)
    plain = attndyn.matrix_flow(model, S, t, order=2)
    assert res.status == 0 and res.params["finite_width_route"].startswith("edgeworth")
    assert res.params["directions"] == 4
    # the correction moves q_11 by O(1/d) of its change
    dq = abs(plain.observable("q_11")[2] - plain.observable("q_11")[0])
    diff = abs(res.observable("q_11")[2] - plain.observable("q_11")[2])
    assert 1e-4 * dq < diff < dq


def test_dispatch_and_refusals():
    S = _mats(5)
    seventh = attndyn.TiedModel(2, [0], lambda G: G[0, 0, 0] ** 7)
    with pytest.raises(ValueError, match="degree <= 6.*nodes="):
        fw.finite_width_flow(seventh, S, [0, 0.1])
    assert fw.finite_width_route(seventh, nodes=8)[0] == "edgeworth"
    sig = attndyn.TiedModel(2, [0], lambda G: (1 / (1 + sp.exp(-G[0, 0, 0])) - G[0, 0, 1]) ** 2)
    assert fw.finite_width_route(sig)[0] == "edgeworth"   # L = 1, not a polynomial
    assert fw.finite_width_route(attndyn.TiedModel(2, [0], mse_teacher_student("h3")))[0] \
        == "polynomial"
    with pytest.raises(ValueError, match="nodes must be an int in 4..40"):
        fw.EdgeworthLoss(_softmax(), nodes=2)
