"""Direct S: the public ``noise_rhs`` against the Gaussian covariance of ``G`` (issue 25,
item 4). The corrected ODE builds its noise rows elsewhere, so a swap of Lambda^Psi and
Lambda^Omega inside ``noise_rhs`` was caught by no test (dev/mutants.py: noise_rhs-swap).

Reference written here: for a loss quadratic in ``G`` the derivatives ``l_ijk`` are linear
in ``G``, and ``Cov(G_abm, G_a'b'm') = C_aa' C_bb' Omega_mm' + C_ab' C_ba' Psi_mm'``
(``G_ijk = (x_i^T S_k x_j - C_ij Tr S_k)/sqrt d``, ``E x_i x_j^T = C_ij I``), so
``E[l_ijk l_i'j'l]`` is a finite sum; ``Lambda^Omega_kl = sum C_ii' C_jj' E[l_ijk l_i'j'l]``,
``Lambda^Psi_kl = sum C_ij' C_ji' E[l_ijk l_i'j'l]`` (the module's eqs. for the noise).
"""

import itertools

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.direct import noise as nd

C = np.array([[1.0, 0.4], [0.4, 1.0]])


def _loss(G):
    # student 0, teacher 1: the student's derivatives reach the teacher's entries
    return G[0, 1, 0] ** 2 + G[0, 0, 0] * G[1, 1, 1] + G[1, 0, 0] * G[1, 0, 1]


def _derivative_tensor():
    """``D[i, j, k, a, b, m]``: ``l_ijk = sum_abm D[i, j, k, a, b, m] G_abm`` for ``_loss``."""
    D = np.zeros((2, 2, 2, 2, 2, 2))
    D[0, 1, 0, 0, 1, 0] = 2.0          # d/dG_010 of G_010^2
    D[0, 0, 0, 1, 1, 1] = 1.0          # d/dG_000 of G_000 G_111
    D[1, 0, 0, 1, 0, 1] = 1.0          # d/dG_100 of G_100 G_101
    return D


def _lambdas(Psi, Om):
    D = _derivative_tensor()
    idx = list(itertools.product(range(2), range(2), range(2)))     # (a, b, m)

    def cov(a, b, m, a2, b2, m2):
        return C[a, a2] * C[b, b2] * Om[m, m2] + C[a, b2] * C[b, a2] * Psi[m, m2]
    Cv = np.array([[cov(*u, *v) for v in idx] for u in idx])
    Dm = D.reshape(8, 8)                 # rows (i, j, k), columns (a, b, m), same order
    El = (Dm @ Cv @ Dm.T).reshape(2, 2, 2, 2, 2, 2)      # E[l_ijk l_i'j'l]
    lam_O, lam_P = np.zeros((2, 2)), np.zeros((2, 2))
    for k, l in itertools.product(range(2), repeat=2):
        for i, j, i2, j2 in itertools.product(range(2), repeat=4):
            e = El[i, j, k, i2, j2, l]
            lam_O[k, l] += C[i, i2] * C[j, j2] * e
            lam_P[k, l] += C[i, j2] * C[j, i2] * e
    return lam_P, lam_O


def test_noise_rhs_at_L2_against_the_gaussian_covariance():
    """``noise_rhs = (eta d / B) chi chi^T Lambda``, Psi row and Omega row, at L = 2 with a
    token covariance and a teacher-student overlap (Lambda^Psi and Lambda^Omega differ by
    more than 20 % here, and the teacher's rows are 0)."""
    model = attndyn.SModel(2, [0], _loss, L=2, C=C.tolist())
    Psi = np.array([[0.9, 0.3], [0.3, 0.7]])
    Om = np.array([[1.2, -0.2], [-0.2, 1.1]])
    lam_P, lam_O = _lambdas(Psi, Om)
    assert abs(lam_P[0, 0] - lam_O[0, 0]) > 0.2 * abs(lam_O[0, 0])
    eta, B, d = 0.3, 5, 40
    eps = eta * d / B
    dPsi, dOm = nd.noise_rhs(model, Psi, Om, eta, B, d)
    chi = np.outer([1.0, 0.0], [1.0, 0.0])
    np.testing.assert_allclose(dPsi, eps * chi * lam_P, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(dOm, eps * chi * lam_O, rtol=1e-10, atol=1e-14)
    # the coefficients themselves, at the same point
    lp, lo = nd.noise_coefficients(model)(Psi, Om)
    assert lp[0, 0] == pytest.approx(lam_P[0, 0], rel=1e-10)
    assert lo[0, 0] == pytest.approx(lam_O[0, 0], rel=1e-10)
