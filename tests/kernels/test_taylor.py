"""The adaptive Taylor integrator (issue 11, item 2) against DOP853 at tight tolerance, the
exact D.3 solutions, and the failure statuses of the Runge-Kutta integrators."""

import numpy as np
import pytest
from numba import njit

import attndyn
from attndyn.kernels.rhs import GRAD_SIG
from attndyn.kernels.taylor import taylor_order
from attndyn.symbolic.initial import FreeInit, scalar, wishart

from conftest import random_psd

LINEAR = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731
QUARTIC = lambda G: (G[0, 0, 0] + G[0, 0, 1] - G[0, 0, 2]) ** 2 + G[0, 0, 0] ** 4 / 10  # noqa: E731


def _err(a, b):
    return float(np.abs(a.y - b.y).max() / max(1.0, np.abs(b.y).max()))


@pytest.mark.parametrize("K,tr,loss,gamma,order,T", [
    (2, (0,), LINEAR, 0.0, 12, 0.1),
    (2, (0,), LINEAR, 8.0, 14, 0.5),
    (3, (0, 1), QUARTIC, 0.5, 8, 0.05),
    (2, (0, 1), lambda G: (G[0, 0, 0] * G[0, 0, 1] - 0.3) ** 2 + G[0, 0, 1] ** 6 / 6, 0.2, 8, 0.1),
])
def test_taylor_matches_dop853_at_tight_tolerance(K, tr, loss, gamma, order, T):
    model = attndyn.TiedModel(K, tr, loss, weight_decay=gamma)
    h = model.hierarchy(order)
    init = FreeInit([wishart(0.3, 0.5)] * (K - 1) + [scalar(0.5)])
    t = np.linspace(0, T, 5)
    ref = h.integrate(init, t, rtol=1e-13, atol=1e-15, check=None, integrator="dop853")
    for rtol in (1e-8, 1e-12):
        r = h.integrate(init, t, rtol=rtol, atol=rtol * 1e-2, check=None, integrator="taylor")
        assert r.success, r.message
        assert r.diagnostics["integrator"] == "taylor"
        assert r.diagnostics["taylor_order"] == taylor_order(rtol)
        assert np.array_equal(r.t, t)
        assert _err(r, ref) < 20 * rtol, (rtol, _err(r, ref))


def test_auto_picks_taylor_for_polynomial_potentials(d3_model):
    h = d3_model.hierarchy(6)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    r = h.integrate(init, [0, 0.1], check=None)
    assert r.diagnostics["integrator"] == "taylor" and r.params["integrator"] == "taylor"
    d = h.integrate(init, [0, 0.1], check=None, integrator="dopri5")
    assert d.diagnostics["integrator"] == "dopri5"
    assert _err(r, d) < 1e-9


def test_taylor_reproduces_the_exact_d3_truncation(d3_model):
    """At order M the D.3 truncation is the degree M-1 Taylor polynomial of the Riccati
    flow S' = 2(S S2 + S2 S) - 4 S^2 (tests/attention/tied/test_exact_d3.py); so is the Taylor result."""
    rng = np.random.default_rng(4)
    d, M = 6, 9
    S1 = random_psd(rng, d) + 0.1 * np.eye(d)
    S2 = random_psd(rng, d) + 0.2 * np.eye(d)
    a = [S1]
    for j in range(M):
        conv = sum(a[i] @ a[j - i] for i in range(j + 1))
        a.append((2 * (a[j] @ S2 + S2 @ a[j]) - 4 * conv) / (j + 1))
    ts = np.linspace(0, 0.5, 6)
    exact = np.array([sum(np.trace(a[j]) / d * t ** j for j in range(M)) for t in ts])
    res = d3_model.hierarchy(M).integrate([S1, S2], ts, rtol=1e-12, atol=1e-14, check=None,
                                          integrator="taylor")
    assert res.success, res.message
    np.testing.assert_allclose(res.moment((0,)), exact, rtol=1e-11, atol=1e-13)
    # the truncated system is nilpotent: a Taylor order >= M integrates it in one step
    assert res.diagnostics["steps"] <= 2


def test_scalar_teacher_eq_348_with_taylor(d3_model):
    c, lam = 1.0, np.array([0.15, 0.4, 0.7, 0.9])
    S1, S2 = np.diag(lam), c * np.eye(lam.size)
    t = np.linspace(0, 0.3, 7)
    exact = np.array([np.mean(c * lam / (lam + (c - lam) * np.exp(-4 * c * s))) for s in t])
    r = d3_model.hierarchy(20).integrate([S1, S2], t, rtol=1e-12, atol=1e-14, check=None,
                                         integrator="taylor")
    assert np.abs(r.moment((0,)) - exact).max() < 1e-8


@pytest.mark.parametrize("integrator", ["taylor", "dopri5", "dop853"])
def test_statuses_blowup_and_max_steps(integrator):
    # an anti-loss: the flow grows; with blowup = 10 the run must stop with status -3
    model = attndyn.TiedModel(2, [0], lambda G: -(G[0, 0, 0] - G[0, 0, 1]) ** 2)
    h = model.hierarchy(8)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    r = h.integrate(init, np.linspace(0, 5, 11), check=None, blowup=10.0, integrator=integrator,
                    method="truncation")
    assert r.status == -3 and not r.success and "larger than 10" in r.message
    assert r.t.size < 11 and np.all(np.abs(r.y) <= 10.0)
    # a long horizon with weight decay needs many steps of every integrator
    h = attndyn.TiedModel(2, [0], LINEAR, weight_decay=8.0).hierarchy(16)
    r = h.integrate(init, [0, 5.0], rtol=1e-12, check=None, max_steps=2, integrator=integrator,
                    method="truncation")
    assert r.status == -2 and "maximum number of steps" in r.message
    from attndyn.numeric.core.results import IntegrationError
    with pytest.raises(IntegrationError, match="maximum number of steps"):
        h.integrate(init, [0, 5.0], rtol=1e-12, check=None, max_steps=2, integrator=integrator,
                    method="truncation", raise_on_failure=True)


@pytest.mark.parametrize("integrator", ["taylor", "dopri5"])
def test_finite_time_singularity_stops(integrator):
    """-G^4 makes Gamma = -c q: dS/dt ~ +q S^2 blows up in finite time, truncation or not."""
    model = attndyn.TiedModel(1, [0], lambda G: -G[0, 0, 0] ** 4)
    h = model.hierarchy(6)
    r = h.integrate(FreeInit([wishart(1, 1)]), [0, 10.0], check=None, integrator=integrator,
                    method="truncation")
    assert r.status in (-1, -3), r.message
    assert r.diagnostics["t_reached"] < 10.0


def test_integrator_choice_validated(d3_model):
    h = d3_model.hierarchy(4)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    with pytest.raises(ValueError, match="integrator"):
        h.integrate(init, [0, 0.1], integrator="rk4")

    @njit(GRAD_SIG)
    def grad(x, p, out):  # constant Gamma of the D.3 loss, as a numeric potential
        out[0] = 2.0; out[1] = -2.0; out[2] = -2.0; out[3] = 2.0

    class Numeric:
        def gradient_function(self):
            return grad

        def parameters(self):
            return np.zeros(0)

    hn = attndyn.TiedModel(2, [0], potential=Numeric()).hierarchy(4)
    r = hn.integrate(init, [0, 0.1], check=None)
    assert r.diagnostics["integrator"] == "dopri5"  # no polynomial: auto falls back
    with pytest.raises(ValueError, match="polynomial"):
        hn.integrate(init, [0, 0.1], check=None, integrator="taylor")
    ref = h.integrate(init, [0, 0.1], check=None, integrator="dopri5")
    assert _err(r, ref) < 1e-12


def test_dense_output_grid(d3_model):
    """Output times inside one Taylor step come from the series; duplicates and t = 0 too."""
    h = d3_model.hierarchy(10)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    t = np.array([0.0, 0.0, 0.01, 0.01, 0.02, 0.05, 0.1])
    r = h.integrate(init, t, rtol=1e-12, atol=1e-14, check=None, integrator="taylor")
    ref = h.integrate(init, t, rtol=1e-13, atol=1e-15, check=None, integrator="dop853")
    assert np.array_equal(r.t, t) and _err(r, ref) < 1e-11
    assert np.array_equal(r.y[:, 0], h.initial_state(init))
