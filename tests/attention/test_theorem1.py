"""Theorem 1 of paper 003 (eqs. 3-4), Corollary 5 (eqs. 78-79) and eq. (67), numerically.

- The mean and covariance of the quadratic forms ``x_i^T S^k_ij x_j / sqrt(d)`` are those of
  eq. (4) (exactly, at any ``d``, by Wick's theorem for Gaussian ``x``): Monte-Carlo check at
  d = 200, 400, 800 against :func:`attndyn.symbolic.gaussian.general_law`.
- ``E[loss]`` at finite ``d`` approaches ``Phi`` as ``d`` grows: exactly (joint cumulants of
  the quadratic forms) for a polynomial loss, and by Monte Carlo for a ReLU loss; the
  decay is printed and asserted (``d^-1/2``, from the third cumulant).
- Eq. (67), matrix denoising: ``Tr[Y S]/d`` is exactly Gaussian with the stated mean and
  variance; ``E[ell]`` matches the untied potential.
"""

import math

import numpy as np
import pytest
import sympy as sp
from sympy.utilities.iterables import multiset_partitions

from attndyn.symbolic.activations import activation
from attndyn.symbolic.gaussian import general_law
from attndyn.symbolic.losses import (denoising_order_parameters, matrix_denoising,
                                     mse_teacher_student)
from attndyn.symbolic.potential import tied_potential, untied_potential

DS = (200, 400, 800)


def _law_numeric(law, mu, Om, Ps):
    subs = {}
    for a in range(law.P):
        subs[law.order_parameters["mu"][a]] = mu[a]
        for b in range(law.P):
            subs[law.order_parameters["Omega"][a, b]] = Om[a, b]
            subs[law.order_parameters["Psi"][a, b]] = Ps[a, b]
    mean = np.array(law.mean.subs(subs), dtype=float).ravel()
    cov = np.array(law.cov.subs(subs), dtype=float)
    return mean, cov


def test_eq4_mean_and_covariance_monte_carlo():
    L, K = 2, 2
    C = np.array([[1.0, 0.3], [0.3, 1.0]])
    law = general_law(L, K, C, merge=False)
    Lc = np.linalg.cholesky(C)
    idx = [(i, j, k) for i in range(L) for j in range(L) for k in range(K)]
    worst = 0.0
    for d in DS:
        rng = np.random.default_rng(1000 + d)
        # random extensive-rank, non-symmetric S^k_ij with a finite Tr S/sqrt(d); k = 1 correlated
        # with k = 0 so that Omega and Psi have off-diagonal structure
        S = {}
        for i in range(L):
            for j in range(L):
                A = rng.standard_normal((d, d)) / np.sqrt(d)
                B = rng.standard_normal((d, d)) / np.sqrt(d)
                S[i, j, 0] = A + (0.5 / np.sqrt(d)) * np.eye(d)
                S[i, j, 1] = 0.6 * A + 0.8 * B.T - (0.3 / np.sqrt(d)) * np.eye(d)
        mats = [S[a] for a in idx]
        P = len(mats)
        mu = np.array([np.trace(M) / np.sqrt(d) for M in mats])
        Om = np.array([[np.sum(Ma * Mb) / d for Mb in mats] for Ma in mats])      # Tr(Sa Sb^T)/d
        Ps = np.array([[np.sum(Ma * Mb.T) / d for Mb in mats] for Ma in mats])    # Tr(Sa Sb)/d
        mean, cov = _law_numeric(law, mu, Om, Ps)
        N = 3000
        Z = rng.standard_normal((L, N, d))
        Xs = [sum(Lc[i, j] * Z[j] for j in range(L)) for i in range(L)]   # x ~ N(0, C (x) I_d)
        G = np.empty((N, P))
        for a, (i, j, k) in enumerate(idx):
            G[:, a] = np.einsum("nd,nd->n", Xs[i] @ S[i, j, k], Xs[j]) / np.sqrt(d)
        m_hat = G.mean(axis=0)
        zm = (m_hat - mean) / np.sqrt(np.diag(cov) / N)
        D = G - m_hat
        prod = D[:, :, None] * D[:, None, :]
        c_hat = prod.mean(axis=0)
        se = prod.std(axis=0, ddof=1) / np.sqrt(N)
        zc = (c_hat - cov) / se
        worst = max(worst, np.abs(zm).max(), np.abs(zc).max())
        print(f"d={d}: max |z| mean {np.abs(zm).max():.2f}, covariance {np.abs(zc).max():.2f}")
    assert worst < 5.0


# -- E[loss] -> Phi ----------------------------------------------------------------------------
# the exact finite-d moments are the theorem check's own (numeric/attention/theorems/thm1.py):
# this test holds them to Phi and to the predicted decay of each cumulant's part
from attndyn.numeric.attention.theorems.thm1 import _moment, _set_partitions, _Traces  # noqa: E402


def test_the_set_partitions_are_sympys():
    for n in range(1, 7):
        ours = sorted(sorted(tuple(b) for b in p) for p in _set_partitions(list(range(n))))
        ref = sorted(sorted(tuple(b) for b in p) for p in multiset_partitions(list(range(n))))
        assert ours == ref


def test_expected_loss_approaches_phi_exact_cumulants():
    """Polynomial loss, tied (centred) forms with non-commuting random PSD S_k: the finite-d
    expectation from the joint cumulants vs Phi; the cubic term decays as d^-1/2."""
    g1, g2 = sp.symbols("g1 g2", real=True)
    h2 = activation("h2")
    loss_expr = (h2(g1) - h2(g2)) ** 2 / 2 + g1 ** 2 * g2
    loss = lambda G: loss_expr.subs({g1: G[0, 0, 0], g2: G[0, 0, 1]})
    pot = tied_potential(loss, 2)
    poly = sp.Poly(sp.expand(loss_expr), g1, g2)
    biases, parts = [], []
    for d in DS:
        rng = np.random.default_rng(d)
        W1 = rng.standard_normal((d, d // 2)) / np.sqrt(d)
        W2 = rng.standard_normal((d, d // 2)) / np.sqrt(d)
        mats = [W1 @ W1.T, W2 @ W2.T + 0.3 * (W1 @ W1.T)]
        q = np.array([[np.sum(a * b) / d for b in mats] for a in mats])
        cache = {}
        tr = _Traces(mats)
        e_d = 0.0
        by_degree = {3: 0.0, 4: 0.0}
        for (a, b), coef in poly.terms():
            word = [0] * a + [1] * b
            mom = _moment(tr, word, d, cache) if word else 1.0
            e_d += float(coef) * mom
            if a + b == 3:     # Gaussian part 0: the whole moment is kappa_3
                by_degree[3] += float(coef) * mom
            if a + b == 4:     # minus the Gaussian (Wick) part: kappa_4
                gauss = sum(math.prod(2 * q[word[i], word[j]] for i, j in pairing)
                            for pairing in _pairings(list(range(4))))
                by_degree[4] += float(coef) * (mom - gauss)
        bias = e_d - pot.phi_numeric(q)
        assert bias == pytest.approx(by_degree[3] + by_degree[4], rel=1e-9, abs=1e-12)
        biases.append(bias)
        parts.append(by_degree)
        print(f"d={d}: E_d[loss] - Phi = {bias:+.5f} = {by_degree[3]:+.5f} (kappa_3, x sqrt d "
              f"{by_degree[3] * math.sqrt(d):+.4f}) {by_degree[4]:+.5f} (kappa_4, x d "
              f"{by_degree[4] * d:+.4f})")
    assert abs(biases[0]) > abs(biases[1]) > abs(biases[2])
    assert 1.8 < parts[0][3] / parts[2][3] < 2.2     # sqrt(800/200) = 2
    assert 3.5 < parts[0][4] / parts[2][4] < 4.5     # 800/200 = 4


def _pairings(items):
    if not items:
        yield []
        return
    a = items[0]
    for i in range(1, len(items)):
        rest = items[1:i] + items[i + 1:]
        for p in _pairings(rest):
            yield [(a, items[i])] + p


def test_expected_loss_approaches_phi_monte_carlo_relu():
    """ReLU teacher-student (closed-form Phi), commuting spectra (x is rotation invariant, so
    G_k = sum_i lambda^k_i (z_i^2 - 1)/sqrt(d)): the bias decays like d^-1/2."""
    pot = tied_potential(mse_teacher_student("relu"), 2)
    assert pot.route == "closed"
    rng = np.random.default_rng(7)
    rows = []
    for d in DS:
        u = (np.arange(d) + 0.5) / d
        lam = np.stack([2 * u, 1 + 0.8 * np.sin(3 * u)]).T
        q = lam.T @ lam / d
        N, ch = 200_000, 20_000
        s = s2 = 0.0
        for _ in range(N // ch):
            z = rng.standard_normal((ch, d), dtype=np.float32)
            G = ((z * z - 1) @ lam.astype(np.float32)).astype(np.float64) / np.sqrt(d)
            ell = 0.5 * (np.maximum(G[:, 0], 0) - np.maximum(G[:, 1], 0)) ** 2
            s += ell.sum()
            s2 += (ell * ell).sum()
        m = s / N
        se = math.sqrt((s2 / N - m * m) / N)
        rows.append((d, m - pot.phi_numeric(q), se))
        print(f"d={d}: E[loss] - Phi = {m - pot.phi_numeric(q):+.5f} +- {se:.5f}")
    (_, b0, s0), (_, b1, s1), (_, b2, s2_) = rows
    assert b0 - b1 > 2 * math.hypot(s0, s1) and b1 - b2 > 2 * math.hypot(s1, s2_)
    assert 1.4 < b0 / b2 < 2.8


def test_eq67_denoising_exact_gaussian():
    d, N = 40, 20_000
    rng = np.random.default_rng(67)
    A = rng.standard_normal((d, d))
    S_star = (A + A.T) / 2
    B = rng.standard_normal((d, d))
    S = (B + B.T) * d / 4           # ||S||_F^2 ~ d^3 / 4: an O(1) noise term
    par = denoising_order_parameters(S, S_star)
    m, v = par["m"][0], par["q1"][0, 0] + par["q2"][0, 0]
    vals = np.empty(N)
    for n in range(N):
        Z = rng.standard_normal((d, d))
        Z = (Z + Z.T) / np.sqrt(2 * d)    # GOE: E Z_ab Z_cd = (d_ac d_bd + d_ad d_bc)/d
        vals[n] = np.sum((S_star + Z) * S) / d
    assert abs(vals.mean() - m) < 5 * math.sqrt(v / N)
    assert vals.var() == pytest.approx(v, rel=5 * math.sqrt(2 / N))
    loss = matrix_denoising("(a - 1)**2/2 + a**3/10")
    pot = untied_potential(loss, 1)
    phi = pot.evaluate(**par)["phi"]
    ell = (vals - 1) ** 2 / 2 + vals ** 3 / 10
    assert phi == pytest.approx(ell.mean(), abs=5 * ell.std() / math.sqrt(N))
