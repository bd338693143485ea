"""Corollary 8 (F.2): the cone projection P (eqs. 536-537) against its defining property and a
brute-force search, and the untied truncation ladder of eq. (908) (held and fails cases)."""

import itertools
import math

import numpy as np
import pytest

from attndyn.numeric.attention.theorems import cor8_bound as c8
from attndyn.numeric.attention.theorems.cor8_bound import cone_distance, cone_projection
from attndyn.numeric.core.checks import registered


def _in_cone(p1, p2, tol=1e-12):
    return (np.allclose(p1, p1.T, atol=tol) and np.allclose(p2, p2.T, atol=tol)
            and np.linalg.eigvalsh(p1 + p2)[0] >= -tol and np.linalg.eigvalsh(p1 - p2)[0] >= -tol)


def _pair(rng, K):
    return rng.normal(size=(K, K)), rng.normal(size=(K, K))


@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_projection_idempotent_in_cone_nonexpansive(K):
    rng = np.random.default_rng(K)
    for _ in range(20):
        q1, q2 = _pair(rng, K)
        p1, p2 = cone_projection(q1, q2)
        assert _in_cone(p1, p2)
        r1, r2 = cone_projection(p1, p2)
        assert np.allclose(r1, p1, atol=1e-12) and np.allclose(r2, p2, atol=1e-12)
        assert cone_distance(p1, p2) <= 1e-12
        # eq. (537): non-expansive
        o1, o2 = _pair(rng, K)
        s1, s2 = cone_projection(o1, o2)
        lhs = math.sqrt(np.sum((p1 - s1) ** 2) + np.sum((p2 - s2) ** 2))
        rhs = math.sqrt(np.sum((q1 - o1) ** 2) + np.sum((q2 - o2) ** 2))
        assert lhs <= rhs + 1e-12
        # variational inequality of a projection onto a closed convex cone:
        # <q - P q, y - P q> <= 0 for every y in Q, with equality at y = 0 and y = 2 P q
        for _ in range(10):
            a = rng.normal(size=(K, K))
            b = rng.normal(size=(K, K))
            A, B = a @ a.T, b @ b.T
            y1, y2 = A + B, A - B
            assert np.sum((q1 - p1) * (y1 - p1)) + np.sum((q2 - p2) * (y2 - p2)) <= 1e-10
        assert abs(np.sum((q1 - p1) * p1) + np.sum((q2 - p2) * p2)) <= 1e-10


def test_projection_minimal_against_grid_search_K1():
    """K = 1: Q = {|q2| <= q1}; the nearest point of a fine grid of Q is never closer."""
    g = np.linspace(-3, 3, 601)
    X1, X2 = np.meshgrid(g, g, indexing="ij")
    inside = np.abs(X2) <= X1
    c1, c2 = X1[inside], X2[inside]
    for q in [(-1.0, 0.3), (0.2, 1.7), (1.0, -2.5), (-0.4, -0.4), (0.7, 0.1), (-2.0, 2.2)]:
        p1, p2 = cone_projection([[q[0]]], [[q[1]]])
        d_p = math.hypot(q[0] - p1[0, 0], q[1] - p2[0, 0])
        d_grid = np.sqrt((c1 - q[0]) ** 2 + (c2 - q[1]) ** 2).min()
        assert d_p <= d_grid + 1e-12
        assert d_grid - d_p <= 0.01 + 1e-12          # the grid's spacing
    # exact values: (q1, q2) = (0.2, 1.7) lands on the edge q1 = q2 at (0.95, 0.95)
    p1, p2 = cone_projection([[0.2]], [[1.7]])
    assert p1[0, 0] == pytest.approx(0.95) and p2[0, 0] == pytest.approx(0.95)


def test_projection_minimal_against_random_search_K2():
    """K = 2: no point of a large random sample of Q (Gram parametrisation, plus points
    perturbed around P(q) and kept when inside Q) is closer than P(q)."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        q1, q2 = _pair(rng, 2)
        q1 = q1 + q1.T
        p1, p2 = cone_projection(q1, q2)
        d_p = cone_distance(q1, q2)
        a = rng.normal(size=(20000, 2, 2))
        b = rng.normal(size=(20000, 2, 2))
        A = a @ np.swapaxes(a, 1, 2)
        B = b @ np.swapaxes(b, 1, 2)
        pa, pb = 0.5 * (p1 + p2), 0.5 * (p1 - p2)
        ea = rng.normal(scale=0.05, size=(20000, 2, 2))
        eb = rng.normal(scale=0.05, size=(20000, 2, 2))
        A2 = pa + 0.5 * (ea + np.swapaxes(ea, 1, 2))
        B2 = pb + 0.5 * (eb + np.swapaxes(eb, 1, 2))
        keep = (np.linalg.eigvalsh(A2)[:, 0] >= 0) & (np.linalg.eigvalsh(B2)[:, 0] >= 0)
        for AA, BB in [(A, B), (A2[keep], B2[keep])]:
            y1, y2 = AA + BB, AA - BB
            d = np.sqrt(((y1 - q1) ** 2).sum(axis=(1, 2)) + ((y2 - q2) ** 2).sum(axis=(1, 2)))
            assert d.min() >= d_p - 1e-12
        assert keep.sum() > 200


def test_projection_fixes_the_cone_and_maps_antisymmetric_parts_away():
    a = np.array([[2.0, 0.5], [0.5, 1.0]])
    b = np.array([[1.0, -0.2], [-0.2, 0.3]])
    p1, p2 = cone_projection(a + b, a - b)
    assert np.allclose(p1, a + b, atol=1e-13) and np.allclose(p2, a - b, atol=1e-13)
    J = np.array([[0.0, 1.0], [-1.0, 0.0]])
    r1, r2 = cone_projection(a + b + J, a - b - 3 * J)
    assert np.allclose(r1, a + b, atol=1e-13) and np.allclose(r2, a - b, atol=1e-13)


@pytest.mark.parametrize("args, exc", [
    (([[1.0, 0.0]], [[1.0, 0.0]]), ValueError),
    ((np.eye(2), np.eye(3)), ValueError),
    (([[math.nan]], [[0.0]]), ValueError),
    ((np.eye(2), "ab"), TypeError),
    ((object(), np.eye(2)), TypeError),
])
def test_projection_bad_input(args, exc):
    with pytest.raises(exc):
        cone_projection(*args)


def test_ladder_bad_input():
    model, pairs = c8._instance(c8.config("small"), 10.0, 0)
    with pytest.raises(ValueError, match="orders"):
        c8.truncation_ladder(model, pairs, 1.0, [2, 4])
    with pytest.raises(ValueError, match="T must"):
        c8.truncation_ladder(model, pairs, -1.0, [2, 4, 6])
    with pytest.raises(ValueError, match="n_heldout"):
        c8.truncation_ladder(model, pairs, 1.0, [2, 4, 6], n_heldout=2)


def test_ladder_fails_outside_the_premise():
    """gamma = 0 (outside gamma > gamma*): the truncation errors do not fall with the order
    (measured per-order ratio > 1), so the ladder must not read as geometric."""
    cfg = c8.config("small")
    model, pairs = c8._instance(cfg, 0.0, 0)
    lad = c8.truncation_ladder(model, pairs, 0.5, (2, 4, 6))
    assert not lad["geometric"]
    assert not (lad["rho"] <= c8.RHO_MAX)


def test_check_cor8_small_holds():
    assert "cor8" in registered()
    r = c8.check_cor8("small", 0)
    assert r.verdict == "held", r.detail
    lad = r.data["ladder"]
    assert 0 < r.worst <= c8.RHO_MAX
    # eq. (908)'s envelope bounds every measured error with the reported constants
    for row in lad["rows"]:
        for w, e in enumerate(row["errors_by_length"], start=1):
            assert e <= lad["C"] * lad["rho"] ** (row["order"] + 1) * lad["s_plus"] ** w \
                * (1 + 1e-9)
        assert row["cone_distance"] <= c8.CONE_TOL
    assert lad["s_minus"] > lad["R"]
    # errors fall with the order for every word length
    rows = lad["rows"]
    for a, b in itertools.pairwise(rows):
        assert all(eb < ea for ea, eb in zip(a["errors_by_length"], b["errors_by_length"]))


@pytest.mark.slow
def test_check_cor8_default_holds():
    r = c8.check_cor8("default", 0)
    assert r.verdict == "held", r.detail
    assert len(r.data["ladder"]["ratios"]) == 3
