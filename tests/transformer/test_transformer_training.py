"""Training of paper 000's transformer (eq. 2): the exact identity
dL/dt = -|grad L|^2 along gradient flow, SGD, seeds, blow-up, saved results."""

import math

import numpy as np
import pytest

from attndyn.numeric.core.results import IntegrationError, load_result
from attndyn.numeric.transformer import Transformer, build, make_data, train

SETUP = dict(N=2, L=4, d=4, m=32, n=6, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
             token_norm="unit", E_scale=0.5, n_test=32)


def _flow(T=0.2, **kw):
    student, data = build(SETUP, 3)
    return student, data, train(student, data, T=T, method="flow", n_eval=5, rtol=1e-5,
                                atol=1e-8, observe=("theta", "lemma41", "kernel"), **kw)


def test_dL_dt_equals_minus_grad_norm_along_flow():
    student, data, res = _flow()
    assert res.status == 0 and res.success
    thetas = res.diagnostics["matrices"]["theta"]
    assert thetas.shape == (6, student.n_params)
    X, Y = data.X, data.Y
    m = student.copy()
    worst = 0.0
    for th, g2 in zip(thetas, res.observable("grad_norm2")):
        m.set_theta(th)
        _, g = m.loss_and_grad(X, Y)
        v = -g  # the flow's velocity
        # dL/dt = d/ds L(theta + s v) at s = 0, central differences + Richardson
        h = 1e-4 / np.linalg.norm(v)

        def L_at(s):
            m.set_theta(th + s * v)
            R = m._forward(X).F - Y
            return float(np.vdot(R, R) / X.shape[0])

        d1 = (L_at(h) - L_at(-h)) / (2 * h)
        d2 = (L_at(2 * h) - L_at(-2 * h)) / (4 * h)
        dLdt = (4 * d1 - d2) / 3
        worst = max(worst, abs(dLdt + g2) / g2)
    assert worst < 1e-8, worst
    # and the loss decreases along the run
    assert np.all(np.diff(res.observable("loss")) < 0)
    # the layer kernel at any output time, from the kept snapshots
    from attndyn.numeric.transformer import kernel_along, min_eigenvalue
    Ht = kernel_along(res, X, 1)
    assert Ht.shape == (6, 24, 24)
    np.testing.assert_allclose(Ht[0], student.kernel(X, 1), rtol=1e-12, atol=1e-14)
    lam_t = [min_eigenvalue(H) for H in Ht]
    np.testing.assert_allclose(lam_t, res.observable("lambda_min_H_2"), rtol=1e-9, atol=1e-14)


def test_flow_loss_matches_integrated_grad_norm():
    """L(t_k) - L(t_0) = -int |grad L|^2 dt (trapezoid on a fine grid). |grad L|^2
    jumps where a ReLU pattern flips, so the trapezoid rule is only O(dt) here:
    a consistency check; the exact identity is the test above."""
    student, data = build(SETUP, 4)
    res = train(student, data, T=0.005, method="flow", n_eval=25, rtol=1e-8, atol=1e-11)
    L, g2, t = res.observable("loss"), res.observable("grad_norm2"), res.t
    integral = np.concatenate([[0], np.cumsum(0.5 * (g2[1:] + g2[:-1]) * np.diff(t))])
    np.testing.assert_allclose(L[0] - L, integral, rtol=2e-2, atol=1e-6 * L[0])


def test_sgd_full_batch_tends_to_flow_and_is_reproducible():
    student, data = build(SETUP, 5)
    flow = train(student, data, T=0.04, method="flow", n_eval=4, rtol=1e-8, atol=1e-11)
    errs = []
    for lr in (1e-3, 2.5e-4):
        sgd = train(student, data, T=0.04, method="sgd", lr=lr, n_eval=4, batch_fraction=1.0)
        np.testing.assert_allclose(sgd.t, flow.t, rtol=1e-12)
        errs.append(np.max(np.abs(sgd.observable("loss") - flow.observable("loss"))))
    assert errs[1] < errs[0] / 2  # Euler error O(lr)
    a = train(student, data, T=0.1, method="sgd", lr=1e-2, batch_fraction=0.5, seed=7, n_eval=2)
    b = train(student, data, T=0.1, method="sgd", lr=1e-2, batch_fraction=0.5, seed=7, n_eval=2)
    c = train(student, data, T=0.1, method="sgd", lr=1e-2, batch_fraction=0.5, seed=8, n_eval=2)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.y, c.y)
    assert a.params["batch_size"] == 3
    # the input model is untouched unless inplace=True
    np.testing.assert_array_equal(student.theta(), build(SETUP, 5)[0].theta())


def test_blowup_status_and_raise():
    student, data = build(dict(SETUP, omega=1.0), 6)
    res = train(student, data, T=50.0, method="sgd", lr=0.5, n_eval=5, blowup=1e6)
    assert res.status == -1 and "blow-up" in res.message
    assert res.t.size < 6  # stopped early, partial trajectory kept
    with pytest.raises(IntegrationError, match="blow-up"):
        train(student, data, T=50.0, method="sgd", lr=0.5, n_eval=5, blowup=1e6,
              raise_on_failure=True)
    res = train(student, data, T=1.0, method="flow", n_eval=2, blowup=1e-6)
    assert res.status == -1 and "blow-up" in res.message


def test_result_saves_and_loads(tmp_path):
    _, _, res = _flow(T=0.1)
    back = load_result(res.save(tmp_path / "r"))
    assert back.names == res.names and back.kind == "transformer_flow"
    np.testing.assert_array_equal(back.y, res.y)
    assert back.params["model"]["m"] == 32


def test_teacher_data():
    teacher = Transformer(1, 3, 4, 8, eps=1.0, omega=1.0, kappa=0.5, seed=1)
    d1 = make_data(teacher, 5, xi=0.3, seed=2, n_test=7)
    d2 = make_data(teacher, 5, xi=0.3, seed=2, n_test=7)
    np.testing.assert_array_equal(d1.Y, d2.Y)
    np.testing.assert_allclose(np.sqrt(np.mean(d1.X ** 2, -1)), 1.0, rtol=1e-12)
    assert d1.X_test.shape == (7, 3, 4)
    np.testing.assert_allclose(d1.F_test, teacher.forward(d1.X_test), rtol=1e-14)
    big = make_data(teacher, 4000, xi=0.3, seed=3, n_test=1)
    noise = big.Y - teacher.forward(big.X)
    assert abs(noise.std() - 0.3) < 0.01
    with pytest.raises(ValueError, match="xi"):
        make_data(teacher, 5, xi=-1.0, seed=0)


def test_bad_training_arguments():
    student, data = build(SETUP, 0)
    with pytest.raises(ValueError, match="method"):
        train(student, data, T=1.0, method="adam")
    with pytest.raises(ValueError, match="lr"):
        train(student, data, T=1.0, method="sgd")
    with pytest.raises(ValueError, match="lr must be <= T"):
        train(student, data, T=1.0, method="sgd", lr=2.0)
    with pytest.raises(ValueError, match="batch_fraction"):
        train(student, data, T=1.0, method="sgd", lr=0.1, batch_fraction=1.5)
    with pytest.raises(ValueError, match="T must be"):
        train(student, data, T=-1.0)
    with pytest.raises(ValueError, match="Y must have shape"):
        train(student, (data.X, data.Y[:, :2]), T=1.0)
    with pytest.raises(ValueError, match="observe"):
        train(student, data, T=1.0, observe=("hessian",))


def test_flow_blowup_guard_reads_accepted_steps_only():
    # N 4, L 6, d 8, m 128, kappa 1: an RK45 trial stage overshoots to a loss of 4.5e17
    # at t = 0.0047 (the old guard stopped the run there); the accepted steps fall
    # monotonically 5539 -> 2063 by t = 0.0075
    s = dict(N=4, L=6, d=8, m=128, n=4, eps=1.0, omega=1.0, kappa=1.0, xi=0.1,
             token_norm="unit", E_scale=0.5)
    student, data = build(s, 1)
    r = train(student, data, T=0.0075, n_eval=3)
    assert r.status == 0, r.message
    loss = r.observable("loss")
    assert np.all(np.diff(loss) < 0)
    assert loss[-1] < 0.5 * loss[0]
    assert r.diagnostics["n_accepted"] > 10
    # a gradient flow never increases the loss between accepted steps (up to the solver's
    # local error)
    assert r.diagnostics["max_loss_increase"] <= 1e-6 * loss[0]


def test_train_refuses_unbounded_work():
    s = dict(N=1, L=2, d=2, m=8, n=2, eps=1.0, omega=1.0, kappa=1.0, xi=0.1)
    student, data = build(s, 0)
    with pytest.raises(ValueError, match="max_grad"):
        train(student, data, T=1e300)
    with pytest.raises(ValueError, match="max_grad"):
        train(student, data, T=1.0, method="sgd", lr=1e-12)
    with pytest.raises(ValueError, match="solver"):
        train(student, data, T=1.0, solver="Euler")
    with pytest.raises(ValueError, match="231|gradient evaluations"):
        train(student, data, T=50.0, max_grad=50)
    r = train(student, data, T=10.0, max_grad=50, n_eval=2)   # estimate 46: runs, then stops
    assert r.status == -2 and "work limit" in r.message
