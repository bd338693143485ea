"""Direct S: checks that a planted bug would fail (issue 25, item 4), each against a
computation written here:

- ``noise+finite-d``: the ODE against the iterated mean map ``y -> y + h G(y)`` it is the
  modified equation of (deterministic, no SGD);
- ``noise`` at ``L = 2`` with a token covariance: ``Lambda^Psi`` and ``Lambda^Omega`` (which
  differ there) from the Gaussian covariance of ``G``, against the ODE's noise rows;
- the structural overlaps ``p_plus``, ``p_minus`` (eqs. 406-408) against the symmetric and
  skew channels of the traceless matrices.
"""

import math

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.direct import noise as nd


def _d3(**kw):
    return attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, **kw)


def test_noise_finite_d_ode_follows_the_iterated_mean_map():
    """G = the closed ODE (402)-(404) plus finite_d_terms (the exact one-step mean per unit
    tau); the mean of SGD is the map y -> y + h G(y), h = eta/d. 25 steps of the map against
    the ODE at tau = n h: the modified equation dy/dtau = G - (h/2) J_G G follows the map to
    3.3e-4 (O(h^2)), while dy/dtau = G alone (integrated here) is 5.6e-3 off and the Euler
    term with the wrong sign 1.1e-2."""
    from scipy.integrate import solve_ivp
    m = _d3(weight_decay=0.5)
    d, eta, B = 20, 0.4, 20
    h = eta / d
    S = m.gaussian_init(d, scale=[1.0, 0.8], seed=3)
    t0, Psi0, Om0 = m.order_parameters(S)
    K = m.K
    y0 = np.concatenate([t0, Psi0.ravel(), Om0.ravel()])

    def G(y):
        dy = m._ode(0.0, y.copy())
        t = y[:K]
        Psi = y[K:K + K * K].reshape(K, K)
        Om = y[K + K * K:].reshape(K, K)
        ap, ao = nd.finite_d_terms(m, t, Psi, Om, eta=eta, batch=B, d=d)
        dy[K:K + K * K] += ap.ravel()
        dy[K + K * K:] += ao.ravel()
        return dy
    n = 25
    ys = [y0]
    for _ in range(n):
        ys.append(ys[-1] + h * G(ys[-1]))
    ys = np.array(ys).T
    taus = h * np.arange(n + 1)
    res = m.integrate(S, taus, correction="noise+finite-d", eta=eta, batch=B, rtol=1e-12,
                      atol=1e-14)
    assert res.status == 0, res.message
    names = ["t_1", "t_2", "Psi_11", "Psi_12", "Psi_21", "Psi_22", "Omega_11", "Omega_12",
             "Omega_21", "Omega_22"]
    ode = np.array([res.y[res.names.index(nm)] for nm in names])
    err = np.max(np.abs(ode - ys))
    plain = solve_ivp(lambda tau, y: G(y), (0.0, taus[-1]), y0, t_eval=taus, rtol=1e-12,
                      atol=1e-14, method="DOP853")
    err_plain = np.max(np.abs(plain.y - ys))
    assert err < 1e-3, err
    assert err_plain > 5e-3 and err < err_plain / 10, (err, err_plain)


def test_noise_rows_at_L2_are_lambda_psi_and_lambda_omega():
    """L = 2, C = [[1, 0.4], [0.4, 1]], loss G_01^2 + G_00 G_11 (derivatives l_00 = G_11,
    l_01 = 2 G_01, l_11 = G_00, l_10 = 0). With Cov(G_ij, G_i'j') = C_ii' C_jj' Omega + C_ij'
    C_ji' Psi (one index, E G = 0): Lambda^Omega = sum C_ii' C_jj' E[l_ij l_i'j'] and
    Lambda^Psi = sum C_ij' C_ji' E[l_ij l_i'j'] (they differ by > 20 % here). The
    corrected ODE's velocity minus the uncorrected one is (eta d / B) Lambda on the Psi and
    Omega rows and 0 on t."""
    C = np.array([[1.0, 0.4], [0.4, 1.0]])
    m = attndyn.SModel(1, [0], lambda G: G[0, 1, 0] ** 2 + G[0, 0, 0] * G[1, 1, 0], L=2,
                       C=C.tolist())
    d = 12
    rng = np.random.default_rng(3)
    S = [rng.standard_normal((d, d)) / math.sqrt(d) + 0.3 * np.eye(d)]
    t, Psi, Om = m.order_parameters(S)
    om, ps = float(Om[0, 0]), float(Psi[0, 0])

    def cov(i, j, i2, j2):
        return C[i, i2] * C[j, j2] * om + C[i, j2] * C[j, i2] * ps
    # l_ij = sum_ab D[i, j, a, b] G_ab
    D = np.zeros((2, 2, 2, 2))
    D[0, 0, 1, 1] = 1.0
    D[0, 1, 0, 1] = 2.0
    D[1, 1, 0, 0] = 1.0
    idx = [(i, j) for i in range(2) for j in range(2)]
    El = np.zeros((2, 2, 2, 2))   # E[l_ij l_i'j']
    for (i, j) in idx:
        for (i2, j2) in idx:
            El[i, j, i2, j2] = sum(D[i, j, a, b] * D[i2, j2, a2, b2] * cov(a, b, a2, b2)
                                   for (a, b) in idx for (a2, b2) in idx)
    lam_O = sum(C[i, i2] * C[j, j2] * El[i, j, i2, j2] for (i, j) in idx for (i2, j2) in idx)
    lam_P = sum(C[i, j2] * C[j, i2] * El[i, j, i2, j2] for (i, j) in idx for (i2, j2) in idx)
    assert abs(lam_P - lam_O) > 0.2 * abs(lam_O)
    eta, B = 0.3, 5
    eps = eta * d / B
    ode, params = nd.noise_setup(m, S, correction="noise", eta=eta, batch=B, d=None)
    y0 = np.array([t[0], ps, om])
    diff = ode(0.0, y0.copy()) - m._ode(0.0, y0.copy())
    assert diff[0] == 0.0
    assert diff[1] == pytest.approx(eps * lam_P, rel=1e-9)   # Psi row
    assert diff[2] == pytest.approx(eps * lam_O, rel=1e-9)   # Omega row
    # the same through the public integrator, on a short horizon
    tau = 1e-4
    a = m.integrate(S, [0.0, tau], correction="noise", eta=eta, batch=B, rtol=1e-13, atol=1e-15)
    b = m.integrate(S, [0.0, tau], rtol=1e-13, atol=1e-15)
    for nm, lam in (("Psi", lam_P), ("Omega", lam_O)):
        delta = a.observable(nm, 0, 0)[-1] - b.observable(nm, 0, 0)[-1]
        assert delta == pytest.approx(eps * lam * tau, rel=1e-3), nm


def test_p_plus_p_minus_are_the_symmetric_and_skew_channels():
    """p_+ = Tr(sym(S1°) sym(S2°))/d and p_- = Tr(skew(S1°) skew(S2°)^T)/d with S° = S - t I
    (eqs. 406-408: (p_Omega +- p_Psi)/2), from non-symmetric matrices, in the ODE's rows,
    the matrix flow's and the SGD runner's."""
    m = attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    d = 9
    rng = np.random.default_rng(4)
    S = [rng.standard_normal((d, d)) / math.sqrt(d) + c * np.eye(d) for c in (0.4, -0.3)]
    I = np.eye(d)
    Sc = [s - np.trace(s) / d * I for s in S]
    sym = [(x + x.T) / 2 for x in Sc]
    skw = [(x - x.T) / 2 for x in Sc]
    want = {}
    for k in range(2):
        for l in range(2):
            want[("p_plus", k, l)] = np.sum(sym[k] * sym[l]) / d
            want[("p_minus", k, l)] = np.sum(skw[k] * skw[l]) / d
    assert abs(want[("p_minus", 0, 1)]) > 1e-3 and abs(want[("p_plus", 0, 1)]) > 1e-3
    ode = m.integrate(S, [0.0])
    flow = m.matrix_flow(S, [0.0])
    from attndyn.numeric.attention.direct.runner import SRunner
    run = SRunner(m, S)
    obs = dict(zip(run.names, run.observables()))
    for key, v in want.items():
        assert ode.observable(*key)[0] == pytest.approx(v, rel=1e-12, abs=1e-15), key
        assert flow.observable(*key)[0] == pytest.approx(v, rel=1e-12, abs=1e-15), key
    from attndyn.numeric.attention.base import obs_key
    for key, v in want.items():
        assert obs[obs_key(*key)] == pytest.approx(v, rel=1e-12, abs=1e-15), key
