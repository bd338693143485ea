"""Direct optimisation over S (paper 003, appendix E): potential, closed ODE (402)-(404),
SGD agreement, the uninformative manifold, Corollary 7 and eq. (413)."""

import math

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.numeric import matrix_flow
from attndyn.numeric.core.results import IntegrationError
from attndyn.numeric.attention.training import gaussian_init, sgd
from attndyn.symbolic.losses import mse_teacher_student
from attndyn.symbolic.potential import RouteError
from attndyn.numeric.attention.potentials import direct_potential  # builds the numeric route

H = {"linear": lambda x: x,
     "h2": lambda x: (x ** 2 - 1) / sp.sqrt(2),
     "h3": lambda x: (x ** 3 - 3 * x) / sp.sqrt(6)}


def teacher_student(act):
    F = H[act]
    return lambda G: (F(G[0, 0, 0]) - F(G[0, 0, 1])) ** 2 / 2


def s_init(model, d, student=0.7, teacher_var=None, seed=5):
    """Independent Gaussian S_1 (student) and S_2 (teacher): an uninformative start.
    ``teacher_var`` rescales the teacher to Var(G_2) = Omega_22 + Psi_22."""
    S = gaussian_init(model, d, seed=seed, scale=[student, 1.0])
    if teacher_var is not None:
        v = (np.sum(S[1] * S[1]) + np.sum(S[1] * S[1].T)) / d
        S[1] = S[1] * math.sqrt(teacher_var / v)
    return S


# ---------------------------------------------------------------------------
# potential

@pytest.mark.parametrize("L,C", [(1, None), (2, [[1.0, 0.4], [0.4, 1.5]])])
def test_A_B_are_the_price_gradients_of_phi(L, C):
    def loss(G):
        return (G[0, L - 1, 0] - G[L - 1, 0, 1]) ** 2 * G[0, 0, 1] + (G[0, 0, 0] - G[L - 1, L - 1, 1]) ** 2
    pot = attndyn.SModel(2, [0], loss, L=L, C=C).potential
    assert pot.route == "wick"
    Psi, Om = pot.order_parameters["Psi"], pot.order_parameters["Omega"]
    for k in range(2):
        for l in range(2):
            f = 1 if k == l else 2  # a symmetric off-diagonal symbol stands for two entries
            assert sp.simplify(sp.diff(pot.phi, Om[k, l]) - f * pot.grad_Omega[k, l]) == 0
            assert sp.simplify(sp.diff(pot.phi, Psi[k, l]) - f * pot.grad_Psi[k, l]) == 0


def test_linear_teacher_student_potential():
    m = attndyn.SModel(2, [0], teacher_student("linear"))
    pot = m.potential
    half = sp.Rational(1, 2)
    A = sp.Matrix([[half, -half], [-half, half]])
    assert pot.grad_Omega == A and pot.grad_Psi == A  # A = B = H/2
    # the compiled gradients in the same convention, Phi = (Var G_1 + Var G_2)/2 - Cov(G_1, G_2)
    Psi = np.array([[0.3, 0.1], [0.1, 0.2]])
    Om = np.array([[0.9, 0.2], [0.2, 1.1]])
    Ag, Bg, phi = m.gradients(Psi, Om)
    np.testing.assert_allclose(Ag, np.array(A, dtype=float), atol=1e-15)
    np.testing.assert_allclose(Bg, np.array(A, dtype=float), atol=1e-15)
    assert phi == pytest.approx(0.5 * (1.2 + 1.3) - 0.3)


def test_gradients_follow_the_direct_law_layout():
    """SModel.gradients maps (Psi, Omega) to (grad_Omega, grad_Psi) whatever the route."""
    loss = mse_teacher_student("relu")
    m = attndyn.SModel(2, [0], loss)
    assert m.potential.route == "closed"
    Psi = np.array([[0.2, 0.05], [0.05, 0.4]])
    Om = np.array([[1.0, 0.3], [0.3, 0.8]])
    A, B, phi = m.gradients(Psi, Om)
    ev = m.potential.evaluate(Omega=Om, Psi=Psi)
    np.testing.assert_allclose(A, ev["Omega"], rtol=1e-12)
    np.testing.assert_allclose(B, ev["Psi"], rtol=1e-12)
    assert phi == pytest.approx(ev["phi"], rel=1e-12)
    # L = 1: A = B = H/2 depends on Omega + Psi only
    np.testing.assert_allclose(A, B, rtol=1e-12)
    # closed form against quadrature (erf: smooth, Gauss-Hermite converges fast)
    m2 = attndyn.SModel(2, [0], mse_teacher_student("erf"))
    A2, B2, phi2 = m2.gradients(Psi, Om)
    num = direct_potential(mse_teacher_student("erf"), 2, route="numeric")
    g = num.gradients(Omega=Om, Psi=Psi)
    np.testing.assert_allclose(A2, g["Omega"], atol=1e-6)
    np.testing.assert_allclose(B2, g["Psi"], atol=1e-6)
    assert phi2 == pytest.approx(num.phi_at(Omega=Om, Psi=Psi), abs=1e-6)
    # the compiled numeric path of SModel.gradients (Phi read from the moments buffer)
    m3 = attndyn.SModel(2, [0], mse_teacher_student("erf"))
    m3.__dict__["potential"] = num
    A3, B3, phi3 = m3.gradients(Psi, Om)
    np.testing.assert_allclose(A3, A2, atol=1e-6)
    np.testing.assert_allclose(B3, B2, atol=1e-6)
    assert phi3 == pytest.approx(phi2, abs=1e-6)


def test_non_polynomial_losses_go_through_the_theory():
    m = attndyn.SModel(2, [0], lambda G: sp.tanh(G[0, 0, 0] - G[0, 0, 1]) ** 2)
    assert m.potential.route == "numeric"  # tanh of a difference: no closed form
    S = gaussian_init(m, 10, seed=0)
    t = [0, 0.05, 0.1]
    a = m.integrate(S, t)
    b = m.matrix_flow(S, t)
    assert a.success and b.success
    np.testing.assert_allclose(a.y, b.y, atol=1e-8, rtol=1e-7)
    r = sgd(m, S, eta=0.05, batch=8, t_eval=[0, 0.05], seed=0)
    assert r.success
    # a discontinuous loss has no potential gradient: the theory refuses it
    m2 = attndyn.SModel(2, [0], lambda G: sp.Heaviside(G[0, 0, 0] - G[0, 0, 1]))
    with pytest.raises(RouteError, match="discontinuous"):
        m2.integrate(S, [0, 0.1])


@pytest.mark.parametrize("act", ["relu", "erf"])
def test_closed_ode_non_polynomial_mse_matches_the_matrix_flow(act):
    m = attndyn.SModel(2, [0], mse_teacher_student(act), weight_decay=0.1)
    assert m.potential.route == "closed"
    S = gaussian_init(m, 16, seed=3, scale=0.7)
    t = np.linspace(0, 0.5, 6)
    a = m.integrate(S, t)
    b = m.matrix_flow(S, t)
    assert a.success and b.success
    np.testing.assert_allclose(a.y, b.y, atol=1e-8, rtol=1e-7)
    assert np.ptp(a.observable("Psi", 0, 1)) > 1e-2  # the student moves towards the teacher
    assert np.all(np.diff(a.observable("loss")) < 0)


# ---------------------------------------------------------------------------
# the closed ODE is the exact trace projection of the matrix flow

@pytest.mark.parametrize("case", ["linear-decay", "h2-two-students", "L2-C"])
def test_closed_ode_equals_traces_of_the_matrix_flow(case):
    if case == "linear-decay":
        m = attndyn.SModel(2, [0], teacher_student("linear"), weight_decay=0.4)
    elif case == "h2-two-students":
        F = H["h2"]
        m = attndyn.SModel(3, [0, 1], lambda G: (F(G[0, 0, 0]) + F(G[0, 0, 1]) - F(G[0, 0, 2])) ** 2 / 2,
                           weight_decay=0.1)
    else:
        m = attndyn.SModel(2, [0], lambda G: (G[0, 1, 0] - G[1, 0, 1]) ** 2 + (G[0, 0, 0] - G[1, 1, 1]) ** 2,
                           L=2, C=[[1.0, 0.3], [0.3, 0.7]])
    S = gaussian_init(m, 24, seed=3, scale=0.6)
    t = np.linspace(0, 0.6, 7)
    a = m.integrate(S, t)
    b = m.matrix_flow(S, t)
    assert a.success and b.success
    np.testing.assert_allclose(a.y, b.y, atol=2e-8, rtol=1e-7)
    assert np.ptp(a.observable("Psi", 0, 1)) > 1e-3  # something happened


def test_integrate_accepts_order_parameters_and_names():
    m = attndyn.SModel(2, [0], teacher_student("linear"))
    S = s_init(m, 30)
    t0, Psi, Om = m.order_parameters(S)
    r1 = m.integrate(S, [0, 0.2, 0.5])
    r2 = m.integrate((t0, Psi, Om), [0, 0.2, 0.5])
    r3 = m.integrate({"t": t0, "Psi": Psi, "Omega": Om}, [0, 0.2, 0.5])
    assert np.array_equal(r1.y, r2.y) and np.array_equal(r1.y, r3.y)
    assert r1.kind == "smodel" and r1.observable("t", 0)[0] == pytest.approx(np.trace(S[0]) / 30)
    assert np.array_equal(r1.observable("Psi", 0, 1), r1.observable("Psi", 1, 0))
    np.testing.assert_allclose(r1.observable("p_Omega", 0, 1),
                               r1.observable("Omega", 0, 1) - r1.observable("t", 0) * r1.observable("t", 1))
    assert r1.observable("loss")[0] == pytest.approx(
        0.5 * (Om[0, 0] + Psi[0, 0] + Om[1, 1] + Psi[1, 1]) - (Om[0, 1] + Psi[0, 1]))
    with pytest.raises(ValueError, match="shape"):
        m.integrate({"t": [0.0], "Psi": Psi, "Omega": Om}, [0, 1])


def test_blowup_gives_status_and_finite_values():
    m = attndyn.SModel(1, [0], lambda G: -G[0, 0, 0] ** 4 / 24)
    r = m.integrate([np.eye(5) * 0.5], np.linspace(0, 50, 11), blowup=1e6)
    assert r.status < 0 and np.all(np.isfinite(r.y)) and r.t.size < 11
    with pytest.raises(IntegrationError):
        m.integrate([np.eye(5) * 0.5], np.linspace(0, 50, 11), blowup=1e6, raise_on_failure=True)


# ---------------------------------------------------------------------------
# SGD over S follows the closed ODE (linear activation)

def _s_linear_errors(d, ratio, B):
    m = attndyn.SModel(2, [0], teacher_student("linear"))
    S = s_init(m, d)
    eta = ratio * B / d
    r = sgd(m, S, eta=eta, batch=B, t_eval=np.linspace(0, 1, 11), seed=0)
    assert r.success, r.message
    th = m.integrate(S, r.t)
    errs = {n: float(np.abs(r.observable(n) - th.observable(n)).max())
            for n in ("t_1", "Psi_12", "Omega_12", "Omega_11")}
    assert np.ptp(th.observable("Psi_12")) > 0.3  # the student learns the teacher
    return errs


def test_s_sgd_follows_the_closed_ode_linear():
    # the acceptance size: d = 300, eta*d/B = 0.1, tau <= 1
    errs = _s_linear_errors(300, 0.1, 300)
    print("\nS-SGD vs closed ODE, linear, d=300, eta*d/B=0.1:", errs)
    assert errs["t_1"] < 3e-3 and errs["Psi_12"] < 3e-3


# ---------------------------------------------------------------------------
# h2, h3: the uninformative manifold is invariant for S, not for tied (Figure 2)

@pytest.mark.parametrize("act,teacher_var", [("h2", 0.25), ("h3", 1.0)])
def test_s_flow_stays_uninformative_while_the_tied_flow_escapes(act, teacher_var):
    m = attndyn.SModel(2, [0], teacher_student(act))
    S = s_init(m, 80, student=0.5, teacher_var=teacher_var)
    t, Psi, Om = m.order_parameters(S)
    t[0] = 0.0  # the d -> infinity uninformative state (Assumption 10)
    Psi[0, 1] = Psi[1, 0] = Om[0, 1] = Om[1, 0] = 0.0
    r = m.integrate((t, Psi, Om), np.linspace(0, 1, 11))
    assert r.success
    for n in ("p_Psi_12", "p_Omega_12", "t_1"):
        assert np.abs(r.observable(n)).max() < 1e-12
    assert np.ptp(r.observable("Omega_11")) > 1e-2  # the student does move
    # tied: same teacher-student loss, independent Gaussian factors (Var G_2 = 2 q_22 ~ 1)
    tm = attndyn.TiedModel(2, [0], teacher_student(act))
    W = gaussian_init(tm, 80, seed=5, scale=0.7)
    f = matrix_flow(tm, [w @ w.T for w in W], np.linspace(0, 1, 11), order=2)
    p12 = f.moment((0, 1)) - f.moment((0,)) * f.moment((1,))
    assert abs(p12[0]) < 2e-2 and p12[-1] > 0.1, p12  # from O(1/d) to O(1)


@pytest.mark.parametrize("act,teacher_var", [("h2", 0.25), ("h3", 1.0)])
def test_s_sgd_stays_uninformative_h2_h3(act, teacher_var):
    # acceptance size; for h3 the residual overlap is a 1/d effect (0.03 at d = 150)
    d, B, ratio = 300, 300, 0.1
    m = attndyn.SModel(2, [0], teacher_student(act))
    S = s_init(m, d, student=0.5, teacher_var=teacher_var)
    r = sgd(m, S, eta=ratio * B / d, batch=B, t_eval=np.linspace(0, 1, 11), seed=0)
    assert r.success, r.message
    worst = max(np.abs(r.observable("p_Psi", 0, 1)).max(), np.abs(r.observable("p_Omega", 0, 1)).max())
    print(f"\nS-SGD {act}, d={d}: max |p_12| up to tau = 1: {worst:.2e}")
    assert worst < 2e-2


# ---------------------------------------------------------------------------
# Corollary 7 and eq. (413)

def test_corollary7_dichotomy():
    verdicts = {}
    for act, tv in (("linear", None), ("h2", 1.0), ("h3", 1.0)):
        m = attndyn.SModel(2, [0], teacher_student(act))
        verdicts[act] = m.corollary7(s_init(m, 60, teacher_var=tv))
    assert verdicts["linear"]["cond414"] and verdicts["linear"]["verdict"].startswith("case 1")
    assert verdicts["linear"]["g_plus"] == pytest.approx(-1.0)  # A12 + B12 = H12 = -1
    for act in ("h2", "h3"):
        assert verdicts[act]["cond417"] and not verdicts[act]["cond414"]
        assert verdicts[act]["verdict"].startswith("case 2")
    # h3 with a teacher of variance != 1: -(3/4)(v1 - 1)(v2 - 1) != 0 on U, so (414) holds
    m = attndyn.SModel(2, [0], teacher_student("h3"))
    c = m.corollary7(s_init(m, 60, teacher_var=2.0))
    assert c["cond414"] and not c["cond417"]
    # an informative start violates Assumption 10
    S = s_init(m, 60, teacher_var=1.0)
    S[0] = S[0] + S[1]
    assert not m.corollary7(S)["assumption10"]
    assert "Assumption 10" in m.corollary7(S)["verdict"]


def test_weak_recovery_sample_complexity():
    m = attndyn.SModel(2, [0], teacher_student("linear"))
    S = s_init(m, 60)
    t, Psi, Om = m.order_parameters(S)
    t[0] = 0.0
    Psi[0, 1] = Psi[1, 0] = Om[0, 1] = Om[1, 0] = 0.0
    wr = m.weak_recovery((t, Psi, Om), c=0.05, d=[100, 1000, 10000])
    tau = wr["tau_c"]
    assert 0 < tau < 1
    d = np.array([100, 1000, 10000])
    # eta = 1/(d log d); ceil of two roundings of one number may differ by one step
    np.testing.assert_allclose(wr["steps"], np.ceil(tau * d ** 2 * np.log(d)), rtol=0, atol=1)
    # at the crossing the overlap equals c on the theory trajectory
    r = m.integrate((t, Psi, Om), [0.0, tau])
    assert max(abs(r.observable("p_Psi", 0, 1)[-1]), abs(r.observable("p_Omega", 0, 1)[-1])) \
        == pytest.approx(0.05, rel=1e-6)
    wr2 = m.weak_recovery((t, Psi, Om), c=0.05, d=200, eta=0.01, batch=64)
    assert wr2["samples"][0] == 64 * math.ceil(tau * 200 / 0.01)
    # h2 from the uninformative state: never (Corollary 7, case 2)
    m2 = attndyn.SModel(2, [0], teacher_student("h2"))
    wr3 = m2.weak_recovery((t, Psi, Om), c=0.05, d=[100, 1000], T_max=5.0)
    assert wr3["tau_c"] == math.inf and np.all(np.isinf(wr3["steps"]))
    with pytest.raises(ValueError, match="c must be"):
        m.weak_recovery((t, Psi, Om), c=0.0, d=100)


def test_weak_recovery_time_matches_sgd_crossing():
    d, B = 120, 120
    m = attndyn.SModel(2, [0], teacher_student("linear"))
    S = s_init(m, d)
    wr = m.weak_recovery(S, c=0.1, d=d, eta=0.1)
    r = sgd(m, S, eta=0.1, batch=B, t_eval=np.linspace(0, 0.5, 51), seed=1)
    p = np.maximum(np.abs(r.observable("p_Psi", 0, 1)), np.abs(r.observable("p_Omega", 0, 1)))
    tau_sgd = r.t[np.argmax(p >= 0.1)]
    assert tau_sgd == pytest.approx(wr["tau_c"], abs=0.02)
    assert wr["steps"][0] == pytest.approx(tau_sgd * d / 0.1, abs=0.02 * d / 0.1 + 1)
