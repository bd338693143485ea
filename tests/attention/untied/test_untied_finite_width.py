"""The untied finite-width correction: the exact finite-d population loss of a polynomial
loss (non-centred quadratic forms), its gradient flows (full and slaved) and the wiring."""

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.numeric.attention.corrections import qf_moment
from attndyn.numeric.attention.untied.fastslow import untied_flow
from attndyn.numeric.attention.untied.finite_width import (untied_finite_width_flow,
                                                           untied_finite_width_potential)
from attndyn.symbolic.losses import mse_teacher_student
from attndyn.symbolic.potential import call_loss, g_array


def _model(act="h3"):
    return attndyn.UntiedModel(2, [0], mse_teacher_student(act))


def _odd():
    return attndyn.UntiedModel(2, [0], lambda G: G[0, 0, 0] ** 3 * G[0, 0, 1] ** 2
                               + (G[0, 0, 0] - G[0, 0, 1]) ** 2 - 0.2 * G[0, 0, 0] ** 5)


def _order_params(pairs):
    d = pairs[0][0].shape[0]
    Ms = [U @ V.T for U, V in pairs]
    m = np.array([np.trace(M) for M in Ms]) / np.sqrt(d)
    q1 = np.array([[np.sum(a * b) for b in Ms] for a in Ms]) / d
    q2 = np.array([[np.sum(a * b.T) for b in Ms] for a in Ms]) / d
    return m, q1, q2


@pytest.mark.parametrize("make", [_model, _odd])
def test_phi_d_is_the_exact_expectation(make):
    model, d = make(), 6
    pairs = model.gaussian_init(d, seed=2)
    A = [0.5 * (U @ V.T + V @ U.T) for U, V in pairs]
    G = g_array(1, 2)
    syms = [G[0, 0, 0], G[0, 0, 1]]
    poly = sp.Poly(sp.expand(call_loss(model.loss, G)), *syms)
    exact = 0.0
    for expo, coef in poly.terms():  # E[prod (x^T A x)] / d^(n/2), non-centred forms
        mats = [A[k] for k, e in enumerate(expo) for _ in range(e)]
        exact += float(coef) * (qf_moment(mats, [False] * len(mats)) / d ** (len(mats) / 2)
                                if mats else 1.0)
    pot = untied_finite_width_potential(model, pairs)
    assert pot["total"] == pytest.approx(exact, rel=1e-10)
    assert pot["gaussian"] == pytest.approx(model.theory.coefficients.phi(*_order_params(pairs)),
                                            rel=1e-10)
    assert abs(pot["correction"]) > 0.05 * abs(exact)  # not vacuous at d = 6


@pytest.mark.parametrize("mode,T", [("full", 1.0), ("slaved", 0.1)])
def test_gaussian_part_reproduces_untied_flow(mode, T):
    model = _model("h2")
    pairs = model.gaussian_init(10, seed=2)
    t = np.linspace(0.0, T, 4)
    a = untied_finite_width_flow(model, pairs, t, mode=mode, finite=False)
    b = untied_flow(model, pairs, t, mode=mode)
    assert a.status == 0 and b.status == 0
    for name in ("m_1", "tA_1", "q1_11", "q1_12", "q2_12", "mu_M1_Mt2"):
        assert np.allclose(a.observable(name), b.observable(name), rtol=1e-8, atol=1e-10), name
    c = untied_finite_width_flow(model, pairs, t, mode=mode)
    assert np.max(np.abs(c.observable("q1_12") - a.observable("q1_12"))) > 1e-3


@pytest.mark.parametrize("make", [_model, _odd])
def test_full_flow_velocity_is_minus_the_gradient_of_phi_d(make):
    """``dtA_1/dt(0) = -(2/d) d/de Phi_d(U_1 (1 + e))`` (gamma = 0): the flow against finite
    differences of the exact potential, no use of the gradient code."""
    model, d = make(), 7
    pairs = [(0.5 * U, 0.5 * V) for U, V in model.gaussian_init(d, seed=5)]
    h = 1e-7
    res = untied_finite_width_flow(model, pairs, [0.0, h, 2 * h], mode="full", rtol=1e-13,
                                   atol=1e-15)
    y = res.observable("tA_1")
    v = (-3 * y[0] + 4 * y[1] - y[2]) / (2 * h)
    e = 1e-6
    U, V = pairs[0]
    fp = untied_finite_width_potential(model, [(U * (1 + e), V), pairs[1]])["total"]
    fm = untied_finite_width_potential(model, [(U * (1 - e), V), pairs[1]])["total"]
    assert v == pytest.approx(-(2.0 / d) * (fp - fm) / (2 * e), rel=1e-5)


def test_slaved_mean_is_the_root_of_the_exact_mean_gradient():
    model = _model("h3")
    pairs = model.gaussian_init(12, seed=3)
    res = untied_finite_width_flow(model, pairs, [0.0, 0.01], mode="slaved")
    assert res.status == 0
    m = np.array([res.observable("m_1")[0], res.observable("m_2")[0]])
    pot = untied_finite_width_potential(model, pairs, m=m)
    assert abs(pot["E_l"][0]) < 1e-9
    # and it is not the Gaussian root: the finite-width part moves it
    gauss = untied_flow(model, pairs, [0.0, 0.01], mode="slaved").observable("m_1")[0]
    assert abs(gauss - m[0]) > 1e-4
    assert abs(untied_finite_width_potential(model, pairs, m=[gauss, m[1]])["E_l"][0]) > 1e-4


def test_wiring_and_refusals():
    model = _model("h3")
    th = model.theory
    corr = th.correction("finite-d")
    for other in ("hierarchy", "limit"):
        with pytest.raises(ValueError, match="applies to theory='flow' or 'slaved'"):
            corr.check(other, 2)
    pairs = model.gaussian_init(8, seed=1)
    t = np.linspace(0.0, 0.02, 3)
    res = corr.apply(th, pairs, t, name="slaved", order=2, check=None, words=None)
    assert res.names == model.observable_names(2) and res.status == 0
    fl = corr.apply(th, pairs, t, name="flow", order=2, check=None, words=None)
    assert fl.t[-1] == pytest.approx(t[-1])  # reported on the SGD's slow time
    with pytest.raises(ValueError, match="degree <= 6"):
        untied_finite_width_flow(attndyn.UntiedModel(1, [0], lambda G: G[0, 0, 0] ** 7),
                                 [(np.eye(3), np.eye(3))], t)
    with pytest.raises(ValueError, match="mode"):
        untied_finite_width_flow(model, pairs, t, mode="fast")


@pytest.mark.slow
def test_finite_width_flow_tracks_sgd_h3_in_seed_units():
    """One rung down: untied h3 SGD (6 seeds, one standard Gaussian start, d = 40, eta d/B =
    0.001) against the full flow with and without the correction, symmetric overlap
    ``q1_12 + q2_12`` over tau <= 0.5. Measured: rms z 8.2 (Gaussian) and 3.5 (finite-d)."""
    from attndyn.numeric.attention.figures.common import seed_z
    from attndyn.numeric.attention.training import gaussian_init, sgd

    model, d = _model("h3"), 40
    pairs = gaussian_init(model, d, seed=3040)
    t = np.linspace(0.0, 0.5, 11)

    def sym(r):
        return r.observable("q1_12") + r.observable("q2_12")
    Y = np.array([sym(sgd(model, pairs, eta=0.01, batch=400, t_eval=t, seed=s)) for s in range(6)])
    gauss = seed_z(Y, sym(untied_flow(model, pairs, t * d, mode="full")))[0]
    fd = seed_z(Y, sym(untied_finite_width_flow(model, pairs, t * d, mode="full")))[0]
    assert gauss > 5.0 and fd < 0.6 * gauss
