"""Untied attention: checks that a planted bug would fail (issue 25, item 4), each against a
computation written here from the matrices or from a closed-form potential:

- ``psi_beta`` (eqs. 27, 30) against ``psi`` from the traces of the finite-d matrices;
- the fast flow (28) at its start against ``-(tA + tB) dPhi/dm`` of a closed-form ``Phi``.
"""

import math

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.untied import fastslow as ut


def _pairs(d, seed, su=(1.5, 0.6), te=(0.8, 0.9)):
    """Student and teacher factors with tA != tB and means away from 0."""
    rng = np.random.default_rng(seed)
    out = []
    for a, b in (su, te):
        U = a * rng.standard_normal((d, d)) / math.sqrt(d) + 0.3 * np.eye(d)
        V = b * rng.standard_normal((d, d)) / math.sqrt(d) + 0.2 * np.eye(d)
        out.append((U, V))
    return out


def test_psi_beta_against_the_matrices():
    """Loss (G_0 - G_1)^2: a^(1)_kl = a^(2)_kl = E[d^2 loss/dG_k dG_l]/2 = [[1, -1], [-1, 1]]
    (closed form), and psi_0 = (2/d) sum_l sum_r a^(r)_0l [Tr(M^(r)_l B_0) + Tr(A_0 M^(r)_l)]
    with M^(1) = M, M^(2) = M^T, A = U U^T, B = V V^T (the trace of the finite-d flow,
    dm/dt = -(tA + tB) Phi_m - psi / sqrt d); beta = -psi / (tA + tB)."""
    model = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    d = 40
    pairs = _pairs(d, 5)
    a = np.array([[1.0, -1.0], [-1.0, 1.0]])
    Ms = [U @ V.T for U, V in pairs]
    U0, V0 = pairs[0]
    A0, B0 = U0 @ U0.T, V0 @ V0.T
    psi0 = 0.0
    for l in range(2):
        for Mr in (Ms[l], Ms[l].T):
            psi0 += a[0, l] * (np.trace(Mr @ B0) + np.trace(A0 @ Mr))
    psi0 *= 2.0 / d
    tA, tB = np.trace(A0) / d, np.trace(B0) / d
    assert abs(tA - tB) > 0.3 * (tA + tB) / 2   # A and B letters are told apart
    psi, beta = ut.psi_beta(model, pairs)
    assert psi[0] == pytest.approx(psi0, rel=1e-10)
    assert beta[0] == pytest.approx(-psi0 / (tA + tB), rel=1e-10)
    assert psi[1] == 0.0 and beta[1] == 0.0   # the teacher's entries
    assert abs(psi0) > 0.1


def test_fast_flow_initial_slope_against_the_m_gradient():
    """Loss G_0^3/3 - G_0 G_1: Phi = (m_0^3 + 3 m_0 v_0)/3 - m_0 m_1 - c_01 with v_0 = q1_00 +
    q2_00, so dPhi/dm_0 = m_0^2 + v_0 - m_1; eq. (28): dm_0/dt(0) = -(tA + tB) dPhi/dm_0,
    against a one-sided difference of the flow's output at t = 0, h, 2h."""
    model = attndyn.UntiedModel(2, [0], lambda G: G[0, 0, 0] ** 3 / 3 - G[0, 0, 0] * G[0, 0, 1])
    d = 30
    pairs = _pairs(d, 8)
    (U0, V0), (U1, V1) = pairs
    M0, M1 = U0 @ V0.T, U1 @ V1.T
    m0, m1 = np.trace(M0) / math.sqrt(d), np.trace(M1) / math.sqrt(d)
    v0 = (np.sum(M0 * M0) + np.sum(M0 * M0.T)) / d
    tA, tB = np.sum(U0 * U0) / d, np.sum(V0 * V0) / d
    grad = m0 ** 2 + v0 - m1
    want = -(tA + tB) * grad
    assert abs(want) > 0.1 and abs(tA - tB) > 0.1
    h = 1e-6
    res = ut.fast_flow(model, pairs, [0.0, h, 2 * h], rtol=1e-13, atol=1e-15)
    assert res.status == 0, res.message
    m = res.y[res.names.index("m_1")]
    slope = (-3 * m[0] + 4 * m[1] - m[2]) / (2 * h)
    assert m[0] == pytest.approx(m0, rel=1e-12)
    assert res.y[res.names.index("grad_m_1")][0] == pytest.approx(grad, rel=1e-9)
    assert slope == pytest.approx(want, rel=1e-6)
