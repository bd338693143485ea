"""The exactly solvable example of paper 003, appendix D.3 (eqs. 339-348)."""

import numpy as np
import pytest
import sympy as sp
from scipy.linalg import expm

from attndyn.symbolic.hierarchy import tied_structure
from attndyn.symbolic.printing import tied_equations, word_symbol
from attndyn.symbolic.potential import tied_potential

from conftest import random_psd

LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731


def test_potential_eq_339():
    pot = tied_potential(LOSS, 2)
    q11, q12, q22 = sp.symbols("q_11 q_12 q_22", real=True)
    assert sp.simplify(pot.phi - (2 * q11 + 2 * q22 - 4 * q12)) == 0
    assert pot.gamma == sp.Matrix([[2, -2], [-2, 2]])


def _exact_truncated_solution(order):
    """Solve the truncated linear ODE dmu/dt = A mu exactly: A is nilpotent (it maps
    length n to length n + 1), so exp(A t) is a finite sum."""
    pot = tied_potential(LOSS, 2)
    s = tied_structure(2, [0], order)
    eqs = tied_equations(s, pot.gamma, pot.q, decay=sp.Integer(0))
    syms = [word_symbol(w, 2) for w in s.words]
    A = sp.Matrix([[sp.diff(eq.rhs, x) for x in syms] for eq in eqs])
    t = sp.Symbol("t")
    E = sp.zeros(*A.shape)
    term = sp.eye(A.shape[0])
    for j in range(order + 1):
        E += term * t ** j / sp.factorial(j)
        term = term * A
    assert (term * A).is_zero_matrix  # nilpotent
    init = [sp.Symbol(x.name + "(0)") for x in syms]
    sol = E * sp.Matrix(init)
    return {x.name: sp.expand(v) for x, v in zip(syms, sol)}, {x.name: i for x, i in zip(syms, init)}, t


def test_order_2_reproduces_eq_340():
    sol, i0, t = _exact_truncated_solution(2)
    assert sol["q_11"] == i0["q_11"]
    assert sol["q_12"] == i0["q_12"]
    assert sp.expand(sol["mu_1"] - (i0["mu_1"] - 4 * t * (i0["q_11"] - i0["q_12"]))) == 0


def test_order_3_reproduces_eq_341():
    sol, i0, t = _exact_truncated_solution(3)
    assert sp.expand(sol["q_11"] - (i0["q_11"] - 8 * t * (i0["mu_111"] - i0["mu_112"]))) == 0
    assert sp.expand(sol["q_12"] - (i0["q_12"] - 4 * t * (i0["mu_112"] - i0["mu_122"]))) == 0
    expected = (i0["mu_1"] - 4 * t * (i0["q_11"] - i0["q_12"])
                + 8 * t ** 2 * (2 * i0["mu_111"] - 3 * i0["mu_112"] + i0["mu_122"]))
    assert sp.expand(sol["mu_1"] - expected) == 0


def _riccati_343(S1, S2, t):
    """Eq. (343): S1(t) = [e^{-2 S2 t} S1(0)^{-1} e^{-2 S2 t} + S2^{-1}(I - e^{-4 S2 t})]^{-1}."""
    E = expm(-2 * S2 * t)
    inner = E @ np.linalg.inv(S1) @ E + np.linalg.inv(S2) @ (np.eye(len(S2)) - expm(-4 * S2 * t))
    return np.linalg.inv(inner)


def test_riccati_closed_form_matches_matrix_flow(d3_model):
    from attndyn.numeric import matrix_flow
    rng = np.random.default_rng(5)
    d = 8
    S1 = random_psd(rng, d) + 0.1 * np.eye(d)
    S2 = random_psd(rng, d) + 0.2 * np.eye(d)
    r = matrix_flow(d3_model, [S1, S2], [0.0, 0.3], keep_matrices=True)
    assert np.allclose(r.diagnostics["matrices"][-1, 0], _riccati_343(S1, S2, 0.3), atol=1e-9)


@pytest.mark.parametrize("order", [4, 7, 10])
def test_truncations_are_taylor_polynomials_of_riccati(d3_model, order):
    """At order M, mu_1(t) is the degree M-1 Taylor polynomial of Tr S1(t)/d."""
    rng = np.random.default_rng(order)
    d = 6
    S1 = random_psd(rng, d) + 0.1 * np.eye(d)
    S2 = random_psd(rng, d) + 0.2 * np.eye(d)
    # Taylor coefficients of the Riccati flow S' = 2(S S2 + S2 S) - 4 S^2
    a = [S1]
    for j in range(order):
        conv = sum(a[i] @ a[j - i] for i in range(j + 1))
        a.append((2 * (a[j] @ S2 + S2 @ a[j]) - 4 * conv) / (j + 1))
    ts = np.linspace(0, 0.5, 6)
    taylor = np.array([sum(np.trace(a[j]) / d * t ** j for j in range(order)) for t in ts])
    res = d3_model.hierarchy(order).integrate([S1, S2], ts, rtol=1e-12, atol=1e-14, check=None)
    assert res.success, res.message
    np.testing.assert_allclose(res.moment((0,)), taylor, rtol=1e-9, atol=1e-12)
    # and the Taylor polynomial approaches the closed form (343) as t -> 0
    exact = np.trace(_riccati_343(S1, S2, 0.05)) / d
    assert abs(res.moment((0,))[0] - np.trace(S1) / d) < 1e-14
    assert abs(d3_model.hierarchy(order).integrate([S1, S2], [0, 0.05], check=None).moment((0,))[-1]
               - exact) < 10 * (0.05 / 0.2) ** order


def test_scalar_teacher_eq_348(d3_model):
    """S2 = c I: mu_1(t) = int c lam / (lam + (c - lam) e^{-4ct}) drho_0 (eq. 348); the
    truncations converge to it geometrically in M inside the radius of convergence."""
    c = 1.0
    lam = np.array([0.15, 0.4, 0.4, 0.7, 0.9])
    S1, S2 = np.diag(lam), c * np.eye(lam.size)
    t = np.linspace(0, 0.3, 7)
    exact = np.array([np.mean(c * lam / (lam + (c - lam) * np.exp(-4 * c * s))) for s in t])
    errs = []
    for M in (4, 8, 12, 16, 20):
        r = d3_model.hierarchy(M).integrate([S1, S2], t, rtol=1e-12, atol=1e-14, check=None)
        errs.append(np.abs(r.moment((0,)) - exact).max())
    assert errs[-1] < 1e-8
    assert all(b < a for a, b in zip(errs, errs[1:])), errs
