"""Tests of the scaling-law bounds of paper 000 (numeric, symbolic, CLI, plots)."""

from __future__ import annotations

import json
import math
import runpy
import subprocess
import sys

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attndyn.numeric import scaling as sc

SIXTH_ROOT_6 = 6.0 ** (1.0 / 6.0)


def pos(lo, hi):
    """Log-uniform-ish positive floats in [lo, hi]."""
    return st.floats(min_value=math.log10(lo), max_value=math.log10(hi)).map(lambda e: 10.0 ** e)


COMPUTE = pos(1e3, 1e300)
XI = pos(1e-2, 3.0)
LD = pos(1.0, 1e4)
CONSTS = dict(alpha=0.7, prefactor=3.0, loss0=2.0, c_stat=0.05)


# ---------------------------------------------------------------------------
# threshold of eq. (3) and its inverse
# ---------------------------------------------------------------------------


def test_threshold_formula():
    N, xi, L, d = 50.0, 0.7, 16.0, 8.0
    expected = N ** 6 * math.log(N * L * d / xi ** 2) / xi ** 2
    assert sc.threshold_compute(N, xi, L, d) == pytest.approx(expected, rel=1e-15)
    assert sc.threshold_time(N, xi, L, d) == pytest.approx(expected / N ** 4, rel=1e-14)
    # below N = xi^2/(L d) the right side of eq. (3) is negative: stage II for all C >= 0
    assert sc.threshold_compute(0.5 * xi ** 2 / (L * d), xi, L, d) < 0
    assert sc.stage(0.0, 0.5 * xi ** 2 / (L * d), xi, L, d) == 2


@settings(deadline=None, max_examples=300)
@given(COMPUTE, XI, LD, LD)
def test_critical_data_size_solves_eq3(C, xi, L, d):
    n = sc.critical_data_size(C, xi, L, d)
    assert math.isfinite(n) and n > 0
    assert sc.threshold_compute(n, xi, L, d) == pytest.approx(C, rel=1e-12)


@settings(deadline=None, max_examples=200)
@given(pos(1e-300, 1e300), pos(1e-3, 1e3), pos(1.0, 1e5), pos(1.0, 1e5))
def test_critical_data_size_against_mpmath(C, xi, L, d):
    """N*(C) to a few ulp over the whole range, including W arguments that
    overflow double precision (they go through the logarithm)."""
    n = sc.critical_data_size(C, xi, L, d)
    with mpmath.workdps(50):
        Cm, xm, Lm, dm = (mpmath.mpf(v) for v in (C, xi, L, d))
        a = 6 * (Lm * dm) ** 6 * Cm / xm ** 10
        ref = xm ** 2 / (Lm * dm) * mpmath.exp(mpmath.lambertw(a) / 6)
        assert abs(mpmath.mpf(n) - ref) <= 2e-15 * ref
        # the paper's form, (C xi^2 / W(C / xi^10))^(1/6) = xi^2 exp(W(C/xi^10)/6)
        n_paper = sc.paper_critical_data_size(C, xi)
        ref_p = xm ** 2 * mpmath.exp(mpmath.lambertw(Cm / xm ** 10) / 6)
        assert abs(mpmath.mpf(n_paper) - ref_p) <= 2e-15 * ref_p


def test_critical_data_size_closed_forms_and_limits():
    C, xi, L, d = 1e20, 0.8, 32.0, 16.0
    w = float(mpmath.lambertw(6 * (L * d) ** 6 * C / xi ** 10))
    n = sc.critical_data_size(C, xi, L, d)
    assert n == pytest.approx((6 * C * xi ** 2 / w) ** (1 / 6), rel=1e-14)
    assert n == pytest.approx(xi ** 2 / (L * d) * math.exp(w / 6), rel=1e-14)
    # C = 0: the logarithm vanishes, N* = xi^2 / (L d), and the limit is continuous
    assert sc.critical_data_size(0.0, xi, L, d) == xi ** 2 / (L * d)
    assert sc.critical_data_size(1e-200, xi, L, d) == pytest.approx(xi ** 2 / (L * d), rel=1e-12)
    assert sc.critical_data_size(np.inf, xi, L, d) == np.inf
    assert sc.optimal_data_size(C, xi, L, d) == n


def test_broadcasting_like_numpy():
    C = np.logspace(3, 30, 4).reshape(4, 1)
    xi = np.array([0.5, 1.0, 2.0])
    out = sc.critical_data_size(C, xi, 8.0, [[4.0]])
    assert out.shape == (4, 3) and out.dtype == np.float64
    for i in range(4):
        for j in range(3):
            assert out[i, j] == sc.critical_data_size(C[i, 0], xi[j], 8.0, 4.0)
    assert isinstance(sc.critical_data_size(1e5, 1.0, 1.0, 1.0), np.floating)


def test_paper_form_against_exact():
    xi, L, d = 1.0, 8.0, 4.0
    # asymptotically the paper's N is 6^(-1/6) of the exact one ...
    r = sc.paper_form_ratio(np.array([1e100, 1e200, 1e300]), xi, L, d)
    assert np.all(np.diff(np.abs(r - SIXTH_ROOT_6 ** -1)) < 0)
    assert abs(r[-1] * SIXTH_ROOT_6 - 1) < 0.02
    # ... and does not solve eq. (3): it lies strictly inside stage II, C*(N_paper) ~ C / 6
    C = 1e300
    n_paper = sc.paper_critical_data_size(C, xi)
    ratio = sc.threshold_compute(n_paper, xi, L, d) / C
    assert 1 / 6 < ratio < 1 / 5
    # the stage-II bound as printed is 6^(1/6) times the exact one for C -> inf
    b_ratio = sc.stage_two_bound_paper(C, xi, c_stat=1.0) / sc.stage_two_bound(C, xi, L, d,
                                                                                c_stat=1.0)
    assert b_ratio == pytest.approx(1 / r[-1], rel=1e-13)
    # closed form of the printed bound
    w = float(mpmath.lambertw(1e30))
    assert sc.stage_two_bound_paper(1e30, 1.0, c_stat=2.0) == pytest.approx(
        2.0 * (1e30 / w) ** (-1 / 6), rel=1e-14)


# ---------------------------------------------------------------------------
# bounds: formulas
# ---------------------------------------------------------------------------


def test_bound_formulas():
    assert sc.training_loss_bound(10.0, 0.1, alpha=2.0, loss0=3.0) == pytest.approx(
        3.0 * math.exp(-2.0 * 0.01 * 10.0), rel=1e-15)
    assert sc.approximation_bound(10.0) == 0.01
    assert sc.generalisation_bound(10.0, 100.0, 0.5, 4.0, 2.0) == pytest.approx(
        (0.4 + 0.5) / 10 + 8 * 0.5 / 100, rel=1e-15)
    C, N, xi = 1e12, 100.0, 0.5
    assert sc.stage_one_bound(C, N, xi, alpha=0.3, prefactor=2.0, loss0=5.0) == pytest.approx(
        10.0 * math.exp(-0.3 * 0.25 * C / N ** 6), rel=1e-14)
    n = sc.critical_data_size(C, xi, 4.0, 2.0)
    assert sc.stage_two_bound(C, xi, 4.0, 2.0, c_stat=0.1) == pytest.approx(0.1 * xi ** 2 / n)
    assert sc.data_law(100.0, 0.5, c_stat=2.0) == pytest.approx(2.0 * 0.25 / 100)
    assert sc.model_law(1e6, 0.5, 0.25) == pytest.approx(0.25 * 1e6 ** -0.25)
    assert sc.model_law(1e6, 0.5, 0.25, scale=3.0) == pytest.approx(0.75 * 1e6 ** -0.25)


def test_time_law_exponent_consistent_and_literal():
    T, N, xi = 1e4, 10.0, 2.0
    consistent = sc.time_law(T, N, xi, c_stat=1.0)
    literal = sc.time_law(T, N, xi, c_stat=1.0, literal=True)
    floor = xi ** 2 / N
    assert consistent - floor == pytest.approx(math.exp(-xi ** 2 * T / N ** 2), rel=1e-14)
    assert literal - floor == pytest.approx(math.exp(-xi ** 4 * T / N ** 4), rel=1e-14)
    # large T: the statistical floor
    assert sc.time_law(np.inf, N, xi, c_stat=1.0) == pytest.approx(floor)


def test_two_stage_bound_is_piecewise():
    N, xi, L, d = 30.0, 0.5, 4.0, 4.0
    cstar = sc.threshold_compute(N, xi, L, d)
    C = np.array([0.0, 0.5 * cstar, cstar, np.nextafter(cstar, np.inf), 10 * cstar])
    b = sc.two_stage_bound(C, N, xi, L, d, **CONSTS)
    s1 = sc.stage_one_bound(C, N, xi, alpha=CONSTS["alpha"], prefactor=CONSTS["prefactor"],
                            loss0=CONSTS["loss0"])
    np.testing.assert_array_equal(b[:3], s1[:3])
    np.testing.assert_allclose(b[3:], CONSTS["c_stat"] * xi ** 2 / N, rtol=1e-15)
    np.testing.assert_array_equal(sc.stage(C, N, xi, L, d), [1, 1, 1, 2, 2])


# ---------------------------------------------------------------------------
# continuity at the threshold (the paper's claim, and where it fails)
# ---------------------------------------------------------------------------


@settings(deadline=None, max_examples=200)
@given(pos(1.0, 1e40), XI, LD, LD, pos(1e-3, 1e3), pos(1e-3, 1e3))
def test_stages_meet_at_threshold_with_matched_constants(N, xi, L, d, prefactor, loss0):
    """alpha = 1 and c_stat = prefactor loss0 / (L d): continuous for every N."""
    assume(N * L * d / xi ** 2 > 1.0 + 1e-6)  # C*(N) > 0
    c_stat = sc.continuity_constant(L, d, prefactor=prefactor, loss0=loss0)
    kw = dict(alpha=1.0, prefactor=prefactor, loss0=loss0, c_stat=c_stat)
    cstar = sc.threshold_compute(N, xi, L, d)
    below = sc.two_stage_bound(cstar, N, xi, L, d, **kw)
    above = sc.two_stage_bound(np.nextafter(cstar, np.inf), N, xi, L, d, **kw)
    assert sc.stage(cstar, N, xi, L, d) == 1
    assert sc.stage(np.nextafter(cstar, np.inf), N, xi, L, d) == 2
    assert below == pytest.approx(above, rel=1e-12)
    assert sc.threshold_jump(N, xi, L, d, **kw) == pytest.approx(1.0, rel=1e-12)
    # the compute-optimal stage-II bound passes through the same point
    assert sc.stage_two_bound(cstar, xi, L, d, c_stat=c_stat) == pytest.approx(above, rel=1e-12)


@settings(deadline=None, max_examples=200)
@given(pos(1.0, 1e6), XI, LD, LD, st.floats(0.1, 5.0))
def test_stages_jump_otherwise(N, xi, L, d, alpha):
    """alpha != 1: the jump is (N L d / xi^2)^(1 - alpha) times the constant ratio."""
    u = N * L * d / xi ** 2
    assume(u > 1.1 and abs(alpha - 1.0) > 0.05)
    kw = dict(alpha=alpha, prefactor=2.0, loss0=1.5, c_stat=0.3)
    cstar = sc.threshold_compute(N, xi, L, d)
    below = sc.two_stage_bound(cstar, N, xi, L, d, **kw)
    above = sc.two_stage_bound(np.nextafter(cstar, np.inf), N, xi, L, d, **kw)
    jump = sc.threshold_jump(N, xi, L, d, **kw)
    assert below / above == pytest.approx(jump, rel=1e-10)
    assert jump == pytest.approx(3.0 / (0.3 * L * d) * u ** (1 - alpha), rel=1e-12)
    # with the continuity constant for alpha = 1 the stages still do not meet
    c1 = sc.continuity_constant(L, d, prefactor=2.0, loss0=1.5)
    j = sc.threshold_jump(N, xi, L, d, alpha=alpha, prefactor=2.0, loss0=1.5, c_stat=c1)
    assert abs(j - 1.0) >= min(abs(u ** (1 - alpha) - 1.0), 1.0) * 0.999
    assert abs(j - 1.0) > 1e-3


# ---------------------------------------------------------------------------
# monotonicity as claimed
# ---------------------------------------------------------------------------

REL = 1e-13


def _pair(strategy):
    return st.tuples(strategy, strategy).map(sorted)


@settings(deadline=None, max_examples=150)
@given(_pair(COMPUTE), XI, LD, LD)
def test_monotone_in_compute(Cs, xi, L, d):
    c1, c2 = Cs
    assert sc.critical_data_size(c2, xi, L, d) >= sc.critical_data_size(c1, xi, L, d) * (1 - REL)
    b = sc.stage_two_bound([c1, c2], xi, L, d, c_stat=1.0)
    assert b[1] <= b[0] * (1 + REL)
    bp = sc.stage_two_bound_paper([c1, c2], xi, c_stat=1.0)
    assert bp[1] <= bp[0] * (1 + REL)
    s1 = sc.stage_one_bound([c1, c2], 1e5, xi, alpha=1.0, prefactor=1.0, loss0=1.0)
    assert s1[1] <= s1[0]
    # two-stage bound with matched constants: non-increasing in C
    cs = sc.continuity_constant(L, d, prefactor=1.0, loss0=1.0)
    n = sc.critical_data_size(math.sqrt(c1 * c2), xi, L, d)
    tb = sc.two_stage_bound([c1, c2], n, xi, L, d, alpha=1.0, prefactor=1.0, loss0=1.0,
                            c_stat=cs)
    assert tb[1] <= tb[0] * (1 + REL)


@settings(deadline=None, max_examples=150)
@given(COMPUTE, _pair(XI), LD, LD)
def test_monotone_in_noise(C, xis, L, d):
    x1, x2 = xis
    b = sc.stage_two_bound(C, np.array([x1, x2]), L, d, c_stat=1.0)
    assert b[1] >= b[0] * (1 - REL)  # stage II: larger noise, higher bound
    bp = sc.stage_two_bound_paper(C, np.array([x1, x2]), c_stat=1.0)
    assert bp[1] >= bp[0] * (1 - REL)
    g = sc.generalisation_bound(1e3, 1e4, np.array([x1, x2]), L, d)
    assert g[1] >= g[0]
    dl = sc.data_law(1e4, np.array([x1, x2]), c_stat=1.0)
    assert dl[1] >= dl[0]
    ml = sc.model_law(1e6, np.array([x1, x2]), 0.2)
    assert ml[1] >= ml[0]
    # stage I *decreases* with noise (eps = xi/N grows, optimisation is faster)
    s1 = sc.stage_one_bound(C, 10.0, np.array([x1, x2]), alpha=1.0, prefactor=1.0, loss0=1.0)
    assert s1[1] <= s1[0]


@settings(deadline=None, max_examples=150)
@given(_pair(pos(1.0, 1e40)), XI, LD, LD)
def test_monotone_in_data(Ns, xi, L, d):
    n1, n2 = Ns
    N = np.array([n1, n2])
    g = sc.generalisation_bound(1e3, N, xi, L, d)
    assert g[1] <= g[0]
    dl = sc.data_law(N, xi, c_stat=1.0)
    assert dl[1] <= dl[0]
    s1 = sc.stage_one_bound(1e60, N, xi, alpha=1.0, prefactor=1.0, loss0=1.0)
    assert s1[1] >= s1[0]  # stage I grows with N at fixed compute
    if n1 * L * d / xi ** 2 >= 1.0:  # where C*(N) >= 0 it increases with N
        t = sc.threshold_compute(N, xi, L, d)
        assert t[1] >= t[0] * (1 - REL)


@settings(deadline=None, max_examples=150)
@given(_pair(pos(1.0, 1e100)), XI, st.floats(0.01, 0.33))
def test_monotone_in_model_size(Ms, xi, zeta):
    M = np.array(Ms)
    assert np.diff(sc.generalisation_bound(M, 1e4, xi, 8.0, 4.0))[0] <= 0
    assert np.diff(sc.approximation_bound(M))[0] <= 0
    assert np.diff(sc.model_law(M, xi, zeta))[0] <= 0


@settings(deadline=None, max_examples=100)
@given(_pair(pos(1e-3, 1e12)), pos(1.0, 1e4), XI)
def test_monotone_in_time(Ts, N, xi):
    T = np.array(Ts)
    assert np.diff(sc.time_law(T, N, xi, c_stat=1.0))[0] <= 0
    assert np.diff(sc.training_loss_bound(T, xi / N, alpha=1.0, loss0=1.0))[0] <= 0


# ---------------------------------------------------------------------------
# single-variable laws: validity
# ---------------------------------------------------------------------------


def test_model_law_validity():
    N, zeta = 100.0, 0.25
    boundary = sc.model_law_boundary(N, zeta)
    assert boundary == pytest.approx(N ** 6)
    np.testing.assert_array_equal(sc.model_law_valid([1e11, 0.999e12, 1e12, 1e13], N, zeta),
                                  [True, True, False, False])
    # the proof's own crossover xi^2 M^-zeta = xi^2 / N sits at N^(1/zeta) < N^(3/(2 zeta))
    m = sc.model_law_crossover(N, zeta)
    assert sc.model_law(m, 1.0, zeta) == pytest.approx(1.0 / N, rel=1e-12)
    assert m < boundary


@pytest.mark.parametrize("zeta", [0.0, 1.0 / 3.0, -0.1, 0.5, float("nan")])
def test_zeta_outside_open_interval(zeta):
    with pytest.raises(ValueError, match=r"^zeta .*\(0, 1/3\)"):
        sc.model_law(10.0, 1.0, zeta)
    with pytest.raises(ValueError, match="^zeta"):
        sc.model_law_valid(10.0, 10.0, zeta)


def test_time_and_data_law_validity():
    np.testing.assert_array_equal(sc.time_law_valid([999.0, 1000.0], 10.0, m_const=1.0),
                                  [False, True])
    ok = sc.data_law_valid(1e3, 10.0, [199.0, 200.0], 0.5, m_const=1.0, t_const=1.0)
    np.testing.assert_array_equal(ok, [False, True])


# ---------------------------------------------------------------------------
# drags of section 7.2
# ---------------------------------------------------------------------------


def test_noise_drag_makes_the_bound_constant():
    N = np.logspace(1, 30, 12)
    b = sc.noise_drag_data(N, 0.7, 0.5, c_stat=2.0)
    np.testing.assert_allclose(b, 2.0 * 0.49, rtol=1e-13)
    assert np.all(np.diff(sc.noise_drag_data(N, 0.7, 0.4, c_stat=2.0)) < 0)
    C = np.logspace(3, 290, 12)
    L, d, xi0 = 8.0, 4.0, 0.3
    be = sc.noise_drag_compute(C, xi0, L, d, 0.1, c_stat=1.0)
    w = float(mpmath.lambertw(6 * (L * d) ** 6 / xi0 ** 10))
    np.testing.assert_allclose(be, SIXTH_ROOT_6 ** -1 * xi0 ** (5 / 3) * w ** (1 / 6), rtol=1e-12)
    bp = sc.noise_drag_compute(C, xi0, L, d, 0.1, c_stat=1.0, form="paper")
    wp = float(mpmath.lambertw(xi0 ** -10))
    np.testing.assert_allclose(bp, xi0 ** (5 / 3) * wp ** (1 / 6), rtol=1e-12)
    assert np.all(np.diff(sc.noise_drag_compute(C, xi0, L, d, 0.05, c_stat=1.0)) < 0)
    assert sc.noise_drag_exponent(0.5, "data") == 0.0
    assert sc.noise_drag_exponent(0.1, "compute") == pytest.approx(0.0, abs=1e-17)
    with pytest.raises(ValueError, match="^form"):
        sc.noise_drag_compute(1e5, 1.0, 1.0, 1.0, c_stat=1.0, form="nope")


# ---------------------------------------------------------------------------
# inverse problems
# ---------------------------------------------------------------------------


@settings(deadline=None, max_examples=150)
@given(pos(1e-12, 1.0), XI, LD, LD, pos(1e-3, 10.0))
def test_compute_for_target_on_the_frontier(target, xi, L, d, c_stat):
    C = sc.compute_for_target(target, xi, L, d, c_stat=c_stat)
    if target >= c_stat * L * d:
        assert C == 0.0
        return
    assert C > 0
    assert sc.stage_two_bound(C, xi, L, d, c_stat=c_stat) == pytest.approx(target, rel=1e-12)
    below = sc.stage_two_bound(C * (1 - 1e-6), xi, L, d, c_stat=c_stat)
    # on the flat start of the curve the two values can differ by rounding only
    assert below >= target * (1 - 4 * np.finfo(float).eps)
    if target < 0.99 * c_stat * L * d:  # not on the flat start of the curve
        assert below > target


def test_compute_for_target_at_fixed_n():
    N, xi, L, d = 20.0, 0.5, 4.0, 4.0
    kw = dict(alpha=1.0, prefactor=1.0, loss0=1.0, c_stat=1.0 / 16)
    cstar = sc.threshold_compute(N, xi, L, d)
    floor = kw["c_stat"] * xi ** 2 / N
    # reachable in stage I
    t = 1e-2
    C = sc.compute_for_target(t, xi, L, d, N=N, **kw)
    assert 0 < C < cstar
    assert sc.two_stage_bound(C, N, xi, L, d, **kw) == pytest.approx(t, rel=1e-12)
    assert sc.two_stage_bound(C * (1 - 1e-9), N, xi, L, d, **kw) > t
    # the floor (stage II) is reached just past the threshold
    kw2 = dict(kw, alpha=0.5)
    t2 = floor * 1.01
    assert sc.compute_for_target(t2, xi, L, d, N=N, **kw2) == cstar
    # below the floor: never
    assert sc.compute_for_target(floor * 0.99, xi, L, d, N=N, **kw) == np.inf
    # nothing to do
    assert sc.compute_for_target(2.0, xi, L, d, N=N, **kw) == 0.0
    with pytest.raises(ValueError, match="^alpha is required"):
        sc.compute_for_target(t, xi, L, d, N=N, c_stat=1.0)


def test_optimal_data_size_minimises_the_bound():
    C, xi, L, d = 1e24, 1.0, 8.0, 4.0
    kw = dict(alpha=1.0, prefactor=1.0, loss0=1.0)
    kw["c_stat"] = sc.continuity_constant(L, d, prefactor=1.0, loss0=1.0)
    n_star = sc.optimal_data_size(C, xi, L, d)
    N = n_star * np.logspace(-0.5, 0.5, 2001)
    b = sc.two_stage_bound(C, N, xi, L, d, **kw)
    assert abs(N[np.argmin(b)] / n_star - 1) < 2e-3
    assert b.min() == pytest.approx(sc.stage_two_bound(C, xi, L, d, c_stat=kw["c_stat"]),
                                    rel=1e-3)


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("call, name", [
    (lambda: sc.critical_data_size(-1.0, 1.0, 1.0, 1.0), "C"),
    (lambda: sc.stage_two_bound(-1e-300, 1.0, 1.0, 1.0, c_stat=1.0), "C"),
    (lambda: sc.critical_data_size([1.0, np.nan], 1.0, 1.0, 1.0), "C"),
    (lambda: sc.threshold_compute(0.0, 1.0, 1.0, 1.0), "N"),
    (lambda: sc.threshold_compute(-5.0, 1.0, 1.0, 1.0), "N"),
    (lambda: sc.generalisation_bound(10.0, 0.0, 1.0, 1.0, 1.0), "N"),
    (lambda: sc.critical_data_size(1.0, 0.0, 1.0, 1.0), "xi"),
    (lambda: sc.critical_data_size(1.0, -2.0, 1.0, 1.0), "xi"),
    (lambda: sc.data_law(10.0, [1.0, 0.0], c_stat=1.0), "xi"),
    (lambda: sc.critical_data_size(1.0, 1.0, 0.5, 1.0), "L"),
    (lambda: sc.threshold_compute(1.0, 1.0, 4.0, 0.0), "d"),
    (lambda: sc.model_law(0.0, 1.0, 0.2), "M"),
    (lambda: sc.time_law(-1.0, 1.0, 1.0, c_stat=1.0), "T"),
    (lambda: sc.stage_one_bound(1.0, 1.0, 1.0, alpha=0.0, prefactor=1.0, loss0=1.0), "alpha"),
    (lambda: sc.stage_two_bound(1.0, 1.0, 1.0, 1.0, c_stat=None), "c_stat"),
    (lambda: sc.compute_for_target(0.0, 1.0, 1.0, 1.0, c_stat=1.0), "target"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError) as exc:
        call()
    assert str(exc.value).startswith(name + " ")


def test_bad_input_reports_index():
    with pytest.raises(ValueError, match=r"got N = -2\.0 \(at index \(1,\)\)"):
        sc.threshold_compute([1.0, -2.0], 1.0, 1.0, 1.0)


# ---------------------------------------------------------------------------
# grids
# ---------------------------------------------------------------------------


def test_evaluate_grid():
    C = np.logspace(3, 30, 5)
    xi = [0.5, 1.0]
    axes, res = sc.evaluate_grid(["critical_N", "stage2"], C=C, xi=xi, L=8.0, d=4.0, c_stat=0.2)
    assert list(axes) == ["C", "xi"]
    assert res["critical_N"].shape == (5, 2)
    np.testing.assert_array_equal(res["critical_N"][:, 1], sc.critical_data_size(C, 1.0, 8, 4))
    with pytest.raises(ValueError, match="needs c_stat"):
        sc.evaluate(["stage2"], C=C, xi=1.0, L=1.0, d=1.0)
    with pytest.raises(ValueError, match="unknown quantity"):
        sc.evaluate(["nope"])


# ---------------------------------------------------------------------------
# symbolic side
# ---------------------------------------------------------------------------


def test_symbolic_module_does_not_load_numba():
    code = ("import sys, attndyn.symbolic.scaling as s; s.latex_all(); "
            "print('numba' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False"


def test_symbolic_solution_is_lambert_w():
    import sympy as sp

    from attndyn.symbolic import scaling as ss

    sol = ss.solve_threshold()
    assert sol.has(sp.LambertW)
    assert ss.verify_inverse() is True
    assert ss.verify_inverse(sol) is True
    assert ss.verify_inverse(ss.paper_critical_data_size()) is False
    f = sp.lambdify([ss.C, ss.xi, ss.L, ss.d], sol, "mpmath")
    for C, xi, L, d in [(1e10, 0.5, 8.0, 4.0), (1e100, 2.0, 128.0, 64.0), (1e3, 1.0, 1.0, 1.0)]:
        with mpmath.workdps(30):
            assert float(f(C, xi, L, d)) == pytest.approx(sc.critical_data_size(C, xi, L, d),
                                                          rel=1e-14)


def test_symbolic_bounds_match_numeric():
    import sympy as sp

    from attndyn.symbolic import scaling as ss

    vals = {ss.C: 1e20, ss.N: 37.0, ss.M: 1e6, ss.T: 300.0, ss.xi: 0.8, ss.L: 8.0, ss.d: 4.0,
            ss.eps: 0.02, ss.zeta: 0.2, ss.alpha: 0.9, ss.C_poly: 2.0, ss.L_0: 1.5,
            ss.c_stat: 0.1}

    def ev(expr):
        return float(sp.N(expr.subs(vals), 30))

    kw = dict(alpha=0.9, prefactor=2.0, loss0=1.5)
    assert ev(ss.threshold_compute()) == pytest.approx(sc.threshold_compute(37.0, 0.8, 8, 4))
    assert ev(ss.critical_data_size()) == pytest.approx(sc.critical_data_size(1e20, 0.8, 8, 4))
    assert ev(ss.stage_one_bound()) == pytest.approx(sc.stage_one_bound(1e20, 37.0, 0.8, **kw))
    assert ev(ss.stage_two_bound()) == pytest.approx(
        sc.stage_two_bound(1e20, 0.8, 8, 4, c_stat=0.1), rel=1e-13)
    assert ev(ss.stage_two_bound_paper()) == pytest.approx(
        sc.stage_two_bound_paper(1e20, 0.8, c_stat=0.1), rel=1e-13)
    assert ev(ss.generalisation_bound()) == pytest.approx(
        sc.generalisation_bound(1e6, 37, 0.8, 8, 4))
    assert ev(ss.training_loss_bound()) == pytest.approx(
        sc.training_loss_bound(300.0, 0.02, alpha=0.9, loss0=1.5))
    assert ev(ss.threshold_jump()) == pytest.approx(
        sc.threshold_jump(37.0, 0.8, 8, 4, c_stat=0.1, **kw), rel=1e-12)
    assert ev(ss.time_law()) == pytest.approx(
        sc.time_law(300.0, 37.0, 0.8, c_stat=0.1, **kw), rel=1e-13)
    assert ev(ss.time_law(literal=True)) == pytest.approx(
        sc.time_law(300.0, 37.0, 0.8, c_stat=0.1, literal=True, **kw), rel=1e-13)
    assert ev(ss.model_law()) == pytest.approx(sc.model_law(1e6, 0.8, 0.2))
    assert ev(ss.model_law_crossover()) == pytest.approx(sc.model_law_crossover(37.0, 0.2))


def test_symbolic_drags_are_constant():
    from attndyn.symbolic import scaling as ss

    assert not ss.noise_drag_data().has(ss.N)
    assert not ss.noise_drag_compute().has(ss.C)
    assert not ss.noise_drag_compute(form="paper").has(ss.C)
    assert ss.noise_drag_compute(power=0.05).has(ss.C)


def test_symbolic_latex():
    from attndyn.symbolic import scaling as ss

    tex = ss.latex_all()
    assert "W\\left(" in tex["stage_two_bound"] and "W\\left(" in tex["critical_data_size"]
    assert "\\log" in tex["threshold_compute"]
    assert tex["stage_two_leading"] == ss.latex("stage_two_leading")
    with pytest.raises(ValueError, match="unknown bound"):
        ss.latex("nope")


def test_asymptotic_expansion_gives_log_corrected_power_law():
    import sympy as sp

    from attndyn.symbolic import scaling as ss

    # de Bruijn's series converges to W as terms are added
    z = mpmath.mpf(10) ** 50
    errs = []
    for order in range(4):
        approx = sp.N(ss.lambertw_asymptotic(sp.Float(10) ** 50, order), 30)
        errs.append(abs(mpmath.mpf(str(approx)) - mpmath.lambertw(z)))
    assert all(a > b for a, b in zip(errs, errs[1:]))
    # stage II -> c 6^(-1/6) xi^(5/3) C^(-1/6) (log C)^(1/6): the ratio tends to 1, slowly
    sub = {ss.xi: 1, ss.L: 8, ss.d: 4, ss.c_stat: 1}
    exact = ss.stage_two_bound().subs(sub)
    lead = ss.stage_two_leading().subs(sub)
    ratios = []
    for e in (10, 100, 1000, 10000):
        c = sp.Integer(10) ** e
        ratios.append(float(sp.N((exact / lead).subs(ss.C, c), 30)))
    assert all(abs(a - 1) > abs(b - 1) for a, b in zip(ratios, ratios[1:]))
    assert abs(ratios[-1] - 1) < 1e-3
    # the order-2 asymptotic form is much closer than the leading term
    asym = ss.stage_two_asymptotic(2).subs(sub)
    c = sp.Integer(10) ** 100
    r2 = float(sp.N((exact / asym).subs(ss.C, c), 30))
    assert abs(r2 - 1) < abs(ratios[1] - 1) / 10


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _cli(capsys, *argv):
    from attndyn.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_table(capsys):
    rc, out, err = _cli(capsys, "scaling", "--C", "1e6:1e30:5", "--xi", "1", "--L", "128",
                        "--d", "64", "--c-stat", "1")
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("# xi = 1")
    assert lines[1].split()[:2] == ["C", "critical_N"]
    assert len(lines) == 2 + 5
    row = lines[2].split()
    assert float(row[1]) == pytest.approx(sc.critical_data_size(1e6, 1.0, 128, 64), rel=1e-5)


def test_cli_json(capsys):
    rc, out, _ = _cli(capsys, "scaling", "two_stage", "stage", "--C", "1e10,1e40", "--N", "1e5",
                      "--xi", "1", "--L", "8", "--d", "4", "--alpha", "1", "--prefactor", "1",
                      "--loss0", "1", "--c-stat", "1", "--json")
    assert rc == 0
    data = json.loads(out)["result"]
    assert data["columns"] == ["C", "two_stage", "stage"]
    assert [r["stage"] for r in data["rows"]] == [1.0, 2.0]
    assert data["rows"][1]["two_stage"] == pytest.approx(1e-5)
    assert data["fixed"]["N"] == 1e5


def test_cli_infinite_values_in_json(capsys):
    rc, out, _ = _cli(capsys, "scaling", "critical_N", "--C", "0,inf", "--xi", "1", "--L", "1",
                      "--d", "1", "--json")
    assert rc == 0
    assert [r["critical_N"] for r in json.loads(out)["result"]["rows"]] == [1.0, "inf"]


@pytest.mark.parametrize("argv, word", [
    (["--C", "-1", "--xi", "1", "--L", "1", "--d", "1"], "C"),
    (["threshold_compute", "--N", "0", "--xi", "1", "--L", "1", "--d", "1"], "N"),
    (["--C", "10", "--xi", "0", "--L", "1", "--d", "1"], "xi"),
    (["--C", "10", "--xi", "1", "--L", "0.5", "--d", "1"], "L"),
    (["--C", "10", "--xi", "1", "--L", "1", "--d", "0"], "d"),
    (["model_law", "--M", "10", "--xi", "1", "--zeta", "0.4"], "zeta"),
    (["stage2", "--C", "10", "--xi", "1", "--L", "1", "--d", "1"], "--c-stat"),
    (["--C", "1:2:x"], "--C"),
    (["nope"], "nope"),
    ([], "nothing to evaluate"),
])
def test_cli_errors_exit_nonzero_with_one_line(capsys, argv, word):
    rc, out, err = _cli(capsys, "scaling", *argv)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("attndyn scaling: error: ")
    assert word in err


def test_cli_list_and_latex(capsys):
    rc, out, _ = _cli(capsys, "scaling", "--list")
    assert rc == 0 and "critical_N" in out and "c_stat" in out
    rc, out, _ = _cli(capsys, "scaling", "--latex")
    assert rc == 0 and "W\\left(" in out


def test_cli_subprocess_exit_code():
    out = subprocess.run([sys.executable, "-m", "attndyn", "scaling", "--C", "-5", "--xi", "1",
                          "--L", "1", "--d", "1"], capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "C" in out.stderr


# ---------------------------------------------------------------------------
# plots and the example
# ---------------------------------------------------------------------------


def test_plots_return_axes():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from attndyn.numeric.scaling import plots as sp

    C = np.logspace(10, 40, 50)
    ax = sp.plot_two_stage(C, [0.5, 1.0], 1e4, 8.0, 4.0, alpha=1.0, prefactor=1.0, loss0=1.0,
                           c_stat=1 / 32)
    assert len(ax.lines) >= 4
    assert sp.plot_phase_diagram(C, [0.5, 1.0], 8.0, 4.0) is not None
    fig, axes = plt.subplots(1, 3)
    out = sp.plot_single_variable_laws(np.logspace(0, 6, 20), np.logspace(1, 5, 20),
                                       np.logspace(2, 30, 20), 1.0, c_stat=0.1, drag_xi0=1.0,
                                       axes=axes)
    assert list(out) == list(axes)
    plt.close("all")


def test_example_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "scaling_laws.py"
    mod = runpy.run_path(str(path))
    out = tmp_path / "laws.png"
    mod["main"](str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("z,branch,exc", [(None, 0, TypeError), ("1.0", 0, TypeError),
                                          (-0.2, -1.0, TypeError), (0.5, True, TypeError),
                                          (np.array(["1"]), 0, TypeError), (1 + 0j, 0, TypeError),
                                          (0.5, 2, ValueError)])
def test_lambertw_front_end_refuses_what_it_would_have_guessed(z, branch, exc):
    """Issue 23's silent cases: lambertw(None) was NaN, "1.0" was parsed, branch=-1.0 taken."""
    from attndyn.numeric.scaling.lambertw import lambertw, lambertw_checked
    for f in (lambertw, lambertw_checked):
        with pytest.raises(exc, match="z must|branch must"):
            f(z, branch)
