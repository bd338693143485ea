"""The split rule of the compiled Gaussian quadrature (attndyn.kernels.quadrature): a loss
quadratic in all but a few directions is integrated by Gauss-Hermite over those and exactly
over the rest. Checked against an independent one-dimensional evaluation (the loss below
is quadratic in G_1..G_5 given G_0, so conditioning on G_0 leaves a 1-D integral, done by
the trapezoidal rule, spectrally accurate for the sigmoid), for the Python calls and the
compiled ladder (whose rungs share one copy of the law's maps)."""

import math

import numpy as np
import pytest

from attndyn.numeric.attention.potentials.numeric import _simplex, numeric_potential

K = 6


def _loss(G):
    g = [G[0, 0, k] for k in range(K)]
    import sympy as sp
    sig = 1 / (1 + sp.exp(-g[0]))
    return sig * (g[1] + g[2]) ** 2 + g[3] * g[4] + sp.exp(g[0] / 2) * g[5]


def _phi(q):
    """E loss for G_00k of the tied law (covariance 2 q at L = 1, C = 1), conditioning on
    G_0 (plain numpy)."""
    q = 2 * np.asarray(q)
    z = np.arange(-14.0, 14.0, 0.01)
    w = np.exp(-z * z / 2)
    w /= w.sum()
    s00 = q[0, 0]
    g0 = np.sqrt(s00) * z
    c = q[0, 1] + q[0, 2]                      # Cov(G_1 + G_2, G_0)
    v = q[1, 1] + q[2, 2] + 2 * q[1, 2]        # Var(G_1 + G_2)
    cond2 = (c / s00 * g0) ** 2 + v - c * c / s00
    sig = 1 / (1 + np.exp(-g0))
    # E[exp(G_0/2) G_5] = E[exp(G_0/2) (q05/q00) G_0] = (q05 / 2) exp(q00 / 8)
    return float(w @ (sig * cond2)) + q[3, 4] + 0.5 * q[0, 5] * math.exp(s00 / 8)


def _gamma(q, h=1e-5):
    """Symmetric-convention gradient of _phi by central differences."""
    out = np.empty((K, K))
    for k in range(K):
        for l in range(K):
            E = np.zeros((K, K))
            E[k, l] += h
            E[l, k] += h if k != l else 0.0
            out[k, l] = (_phi(q + E) - _phi(q - E)) / (2 * h) / (2 if k != l else 1)
    return out


def _q(var, rho):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((K, K))
    R = A @ A.T + K * np.eye(K)
    R /= np.sqrt(np.outer(np.diag(R), np.diag(R)))
    R[0, 1] = R[1, 0] = rho
    lam, V = np.linalg.eigh(R)
    R = (V * np.clip(lam, 1e-3, None)) @ V.T
    R /= np.sqrt(np.outer(np.diag(R), np.diag(R)))
    return R * np.sqrt(np.outer(var, var))


@pytest.fixture(scope="module")
def pot():
    return numeric_potential("tied", _loss, K, 1, tol=1e-9)


def test_simplex_rule_is_exact_to_degree_two():
    E = _simplex(5)
    assert E.shape == (6, 5)
    assert np.abs(E.mean(axis=0)).max() < 1e-14
    assert np.abs(E.T @ E / 6 - np.eye(5)).max() < 1e-13


def test_split_is_found_and_exact(pot):
    assert pot.mode == "hessian" and pot.dim == 5 and pot.rule.dim == 1    # G_1 + G_2 enter together
    assert any("split rule" in n for n in pot.notes)
    for q in (np.eye(K), _q(np.geomspace(0.03, 3.0, K), 0.98), _q(np.geomspace(3.0, 0.03, K), -0.98)):
        ref = _gamma(q)
        g, err = pot.gamma_with_error(q)
        assert np.abs(g - ref).max() <= 1e-9 * np.abs(ref).max() + 1e-8, (g - ref)
        assert abs(pot.moments(q=q)[0] - _phi(q)) <= 1e-8 * abs(_phi(q))   # calibrated rule


def test_compiled_split_ladder_meets_tol(pot):
    f, p = pot.gradient_function(), pot.parameters()
    assert len(pot.ladder) >= 3 and all("dim 1" in r for r in pot.ladder)
    pot.reset_report()
    for q in (_q(np.geomspace(0.03, 3.0, K), 0.98), _q(np.full(K, 3.0), -0.98)):
        out = np.empty(K * K)
        f(np.ascontiguousarray(q.ravel()), p, out)
        ref = _gamma(q)
        assert np.abs(out.reshape(K, K) - ref).max() <= 1e-9 * np.abs(ref).max() + 1e-8
    rep = pot.error_report()
    assert rep["calls"] == 2 and rep["over_tolerance"] == 0 and rep["within_tolerance"]
