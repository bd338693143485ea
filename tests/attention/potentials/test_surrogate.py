"""Certified Chebyshev surrogates of Gamma(q) (issue 12): accuracy against closed forms and
an independent quadrature, the compiled kernel, the box that follows the trajectory, the
disk cache, the per-point adaptive quadrature, and the golden scenarios on the surrogate."""

import numpy as np
import pytest

from attndyn.kernels.surrogate import surrogate_grad
from attndyn.numeric.attention.potentials import numeric_potential
from attndyn.numeric.attention.potentials.quadrature import trapezoid_rule
from attndyn.numeric.attention.potentials.surrogate import (BOX_EXIT, SurrogateError, box_around,
                                                 build_surrogate, coordinates, from_coordinates,
                                                 integrate_in_box)
from attndyn.numeric.attention.tied.model import TiedModel
from attndyn.numeric.core.results import IntegrationError
from attndyn.symbolic.losses import mse_teacher_student, softmax_teacher_student
from attndyn.symbolic.potential import tied_potential

import surrogate_reference as R
from golden import SCENARIOS

RTOL, ATOL = 1e-9, 1e-12


def _points(lo, hi, n, seed):
    """``n`` random points of the box plus its corners, as overlap matrices."""
    rng = np.random.default_rng(seed)
    D = lo.size
    C = lo + (hi - lo) * rng.random((n, D))
    corners = np.array(np.meshgrid(*zip(lo, hi), indexing="ij")).reshape(D, -1).T
    K = int(round((np.sqrt(8 * D + 1) - 1) / 2))
    return from_coordinates(np.concatenate([C, corners]), K)


def _assert_within(got, ref, rtol=RTOL, atol=ATOL, what=""):
    err = np.abs(got - ref)
    ok = err <= np.maximum(rtol * np.abs(ref), atol)
    assert ok.all(), (f"{what}: {int((~ok).sum())} entries out of tolerance, worst |err| "
                      f"{err.max():.3g}, worst relative {np.max(err / np.abs(ref)):.3g}")


def _check_pos(got):
    assert np.all(np.isfinite(got))


# -- coordinates and kernel ---------------------------------------------------------------
def test_coordinates_roundtrip():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 3, 3))
    Q = A @ np.swapaxes(A, 1, 2) + 0.1 * np.eye(3)
    C = coordinates(Q)
    assert C.shape == (5, 6)
    assert np.all(np.abs(C[:, 3:]) <= 1)
    np.testing.assert_allclose(from_coordinates(C, 3), Q, rtol=1e-13, atol=1e-15)


@pytest.fixture(scope="module")
def erf_surrogate():
    pot = tied_potential(mse_teacher_student("erf"), 2)
    assert pot.route == "closed"
    box = (np.array([0.4, 0.4, -0.5]), np.array([1.0, 1.0, 0.5]))
    return pot, build_surrogate(pot, box, rtol=RTOL, atol=ATOL, cache=False)


def test_erf_surrogate_against_closed_form(erf_surrogate):
    """Issue acceptance: 200 random PSD q of the box plus its corners, every entry within
    1e-9 relative or 1e-12 absolute of the closed form (arcsine kernel)."""
    pot, sur = erf_surrogate
    assert sur.certificate["passed"] and sur.certificate["max_ratio"] <= 1
    Q = _points(sur.lo, sur.hi, 200, seed=1)
    got = sur.gamma_many(Q)
    _check_pos(got)
    ref = np.array([pot.gamma_numeric(q) for q in Q])
    _assert_within(got, ref, what="erf")


def test_kernel_is_a_grad_sig_function(erf_surrogate):
    """TiedModel takes the surrogate unchanged; the compiled Gamma matches gamma()."""
    pot, sur = erf_surrogate
    model = TiedModel(2, [0], L=1, potential=sur)
    q = np.array([[0.7, 0.2], [0.2, 0.6]])
    np.testing.assert_allclose(model.gamma(q), sur.gamma(q), rtol=1e-15, atol=0)
    _assert_within(sur.gamma(q), pot.gamma_numeric(q))
    # a non-symmetric input is symmetrised, as the other compiled routes do
    qa = q.copy()
    qa[0, 1] += 0.02
    qa[1, 0] -= 0.02
    np.testing.assert_allclose(sur.gamma(qa), sur.gamma(q), rtol=1e-14)


def test_outside_the_box_is_nan_and_counted(erf_surrogate):
    _, sur = erf_surrogate
    p = sur.parameters().copy()
    out = np.empty(4)
    inside = np.array([0.7, 0.1, 0.1, 0.7])
    surrogate_grad(inside, p, out)
    assert np.all(np.isfinite(out)) and p[5] == 0
    for bad in ([1.5, 0.1, 0.1, 0.7], [0.7, 0.6, 0.6, 0.7], [-0.1, 0.0, 0.0, 0.7],
                [np.nan, 0.1, 0.1, 0.7]):
        surrogate_grad(np.array(bad), p, out)
        assert np.all(np.isnan(out))
    assert p[5] == 4
    o = int(p[6])
    np.testing.assert_allclose(p[o:o + 4], [1.5, 0.1, 0.1, 0.7])  # the first exit
    with pytest.raises(ValueError, match="outside the certified box"):
        sur.gamma([[1.5, 0.1], [0.1, 0.7]])
    # wrong sizes: NaN, never a crash
    out3 = np.empty(3)
    surrogate_grad(inside, p, out3)
    assert np.all(np.isnan(out3))


def test_bad_input():
    pot = tied_potential(mse_teacher_student("erf"), 2)
    good = (np.array([0.4, 0.4, -0.5]), np.array([1.0, 1.0, 0.5]))
    with pytest.raises(ValueError, match="box"):
        build_surrogate(pot, (good[0][:2], good[1][:2]), cache=False)
    with pytest.raises(ValueError, match="correlations"):
        build_surrogate(pot, (good[0], np.array([1.0, 1.0, 1.5])), cache=False)
    with pytest.raises(ValueError, match="variances"):
        build_surrogate(pot, (np.array([0.0, 0.4, -0.5]), good[1]), cache=False)
    with pytest.raises(ValueError, match="lo < hi"):
        build_surrogate(pot, (good[1], good[0]), cache=False)
    with pytest.raises(ValueError, match="rtol"):
        build_surrogate(pot, good, rtol=-1.0, cache=False)
    with pytest.raises(TypeError, match="callable"):
        build_surrogate(42, good, cache=False)
    with pytest.raises(SurrogateError, match="max_nodes"):
        build_surrogate(pot, good, max_nodes=50, cache=False)
    with pytest.raises(ValueError, match="positive diagonals"):
        box_around(np.array([[0.0, 0.0], [0.0, 1.0]]))


def test_disk_cache(tmp_path, monkeypatch):
    """A second build with the same loss, box and tolerance loads from disk."""
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(tmp_path))
    pot = tied_potential(mse_teacher_student("erf"), 2)
    box = (np.array([0.5, 0.5, -0.2]), np.array([0.8, 0.8, 0.2]))
    a = build_surrogate(pot, box, rtol=1e-7, atol=1e-10)
    assert not a.cached
    b = build_surrogate(pot, box, rtol=1e-7, atol=1e-10)
    assert b.cached
    np.testing.assert_array_equal(a.parameters(), b.parameters())
    assert b.certificate == a.certificate
    c = build_surrogate(pot, box, rtol=1e-8, atol=1e-10)  # another tolerance: another entry
    assert not c.cached
    files = list((tmp_path).rglob("sur_*.npz"))
    assert len(files) == 2


# -- accuracy of the numeric routes ------------------------------------------------------------
def test_trapezoid_rule_moments():
    rule = trapezoid_rule(1, 1)
    z, w = rule.nodes[:, 0], rule.weights
    for k, m in [(0, 1.0), (2, 1.0), (4, 3.0), (6, 15.0)]:
        assert abs(w @ z ** k - m) < 1e-13 * m
    assert abs(w @ np.cos(z) - np.exp(-0.5)) < 1e-15


def test_adaptive_quadrature_meets_tol_everywhere():
    """Item 3: the rule calibrated at the identity misses tol at large variances; the
    per-point refinement meets it at every q (erf, checked against the closed form)."""
    exact = tied_potential(mse_teacher_student("erf"), 2)
    num = numeric_potential("tied", mse_teacher_student("erf"), 2, tol=1e-9)
    Q = [np.array([[v1, r * np.sqrt(v1 * v2)], [r * np.sqrt(v1 * v2), v2]])
         for v1, v2, r in [(0.2, 0.3, 0.1), (3.0, 2.0, 0.5), (6.0, 0.5, -0.8), (8.0, 8.0, 0.95)]]
    worst_fixed = 0.0
    for q in Q:
        g, e = num.gamma_adaptive(q, atol=1e-10)
        ref = exact.gamma_numeric(q)
        assert np.max(np.abs(g - ref)) <= 1e-10, q
        assert np.all(e <= 1e-10)
        # the calibrated rule alone (what gamma_at was before issue 25)
        fixed = num._run(np.ascontiguousarray(q.ravel()), num._p).reshape(2, 2)
        worst_fixed = max(worst_fixed, np.max(np.abs(fixed - ref)))
        # gamma_at now refines per call to the potential's own tolerance (1e-9 max norm)
        assert np.max(np.abs(num.gamma_at(q) - ref)) <= 1e-9 * np.max(np.abs(ref)) + 1e-12
    assert worst_fixed > 1e-8  # the fixed rule alone does not (the problem of the issue)


def _numeric_case(name):
    if name == "softmax":
        pot = numeric_potential("tied", softmax_teacher_student(2), 2, 2, tol=1e-8)
        return pot, (lambda Q: R.reference_many(Q, "sigmoid", "softmax"))
    pot = numeric_potential("tied", mse_teacher_student(name), 2, 1, tol=1e-8)
    return pot, (lambda Q: R.reference_many(Q, name, "mse"))


@pytest.mark.parametrize("name", ["tanh", "gelu"])
def test_numeric_surrogate_small(name):
    """tanh and GELU (numeric source, no closed form) on a small box at the issue's
    tolerance, certified against the independent trapezoid reference."""
    pot, ref = _numeric_case(name)
    box = (np.array([0.5, 0.45, 0.1]), np.array([0.7, 0.6, 0.3]))
    sur = build_surrogate(pot, box, rtol=RTOL, atol=ATOL, reference=ref, n_check=4, cache=False)
    assert sur.certificate["passed"]
    Q = _points(sur.lo, sur.hi, 6, seed=3)
    _assert_within(sur.gamma_many(Q), ref(Q), what=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tanh", "gelu", "softmax"])
def test_numeric_surrogate_200_points(name):
    """Issue acceptance: 200 random q of the box plus the corners against the independent
    adaptive trapezoid quadrature, every entry within 1e-9 relative or 1e-12 absolute."""
    pot, ref = _numeric_case(name)
    if name == "softmax":
        box = (np.array([0.6, 0.7, 0.3]), np.array([0.85, 0.8, 0.42]))  # Figure 1's region
    else:
        box = (np.array([0.4, 0.4, -0.5]), np.array([1.0, 1.0, 0.5]))
    # certified against the independent reference (the default, the source at 1% of the
    # budget, is beyond double-precision quadrature where the budget is atol = 1e-12)
    sur = build_surrogate(pot, box, rtol=RTOL, atol=ATOL, n_check=20, reference=ref)
    assert sur.certificate["passed"]
    Q = _points(sur.lo, sur.hi, 200, seed=4)
    _assert_within(sur.gamma_many(Q), ref(Q), what=name)


# -- trajectories ---------------------------------------------------------------------------------
def _h2_case():
    sc = next(s for s in SCENARIOS if s.name == "h2-teacher-student")
    model = sc.model()
    S = sc.matrices()
    q0 = np.array([[np.trace(a @ b) / sc.d for b in S] for a in S])
    return sc, model, S, q0


def test_box_exit_stop_and_extend():
    """A trajectory that leaves the box stops with BOX_EXIT and a message naming the box,
    or continues on an extended box with the result of a large box from the start."""
    sc, model, S, q0 = _h2_case()
    pot = model.potential
    t = np.linspace(0, sc.horizon, 5)
    tight = box_around(q0, 0.002, 0.001)  # q_00 moves by about 1% on the horizon
    sur = build_surrogate(pot, tight, rtol=1e-10, atol=1e-12, cache=False)
    res, _ = integrate_in_box(model, 8, S, t, surrogate=sur, on_exit="stop", check=None)
    assert res.status == BOX_EXIT and not res.success
    assert "certified box" in res.message and "q00 in [" in res.message
    with pytest.raises(IntegrationError):
        integrate_in_box(model, 8, S, t, surrogate=sur, on_exit="stop", check=None,
                         raise_on_failure=True)

    ext, sur2 = integrate_in_box(model, 8, S, t, surrogate=sur, on_exit="extend", check=None)
    assert ext.success, ext.message
    assert ext.diagnostics["box_extensions"] >= 1
    big = build_surrogate(pot, (0.9 * sur2.lo, 1.1 * sur2.hi), rtol=1e-10, atol=1e-12,
                          cache=False)
    ref, _ = integrate_in_box(model, 8, S, t, surrogate=big, on_exit="stop", check=None)
    assert ref.success and ref.diagnostics["box_extensions"] == 0
    exact = model.hierarchy(8).integrate(S, t, check=None)
    np.testing.assert_allclose(ext.y, ref.y, rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(ext.y, exact.y, rtol=1e-8, atol=1e-11)


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_golden_on_surrogate(sc):
    """The golden scenarios (polynomial losses) with the surrogate in place of the exact
    route: the hierarchy still reproduces the exact matrix flow."""
    from attndyn.numeric import matrix_flow
    model = sc.model()
    S = sc.matrices()
    t = np.linspace(0, sc.horizon, 6)
    flow = matrix_flow(model, S, t, order=2)
    q0 = np.array([[np.trace(a @ b) / sc.d for b in S] for a in S])
    sur = build_surrogate(model.potential, box_around(q0, 0.3, 0.1), rtol=1e-11, atol=1e-13,
                          cache=False)
    res, _ = integrate_in_box(model, sc.order, S, t, surrogate=sur, on_exit="extend",
                              rtol=1e-12, atol=1e-14, conv_tol=sc.tol)
    assert res.success, res.message
    for w in [(k,) for k in range(sc.K)] + [(k, l) for k in range(sc.K) for l in range(k, sc.K)]:
        np.testing.assert_allclose(res.moment(w), flow.moment(w), atol=10 * sc.tol, rtol=0,
                                   err_msg=f"{sc.name}: {w}")


def test_n_check_is_bounded_before_any_work():
    """Issue 23 D9: build_surrogate(n_check=10**9) ran for minutes before failing."""
    from attndyn.numeric.attention.potentials.surrogate import MAX_CHECK, build_surrogate
    with pytest.raises(ValueError, match=rf"n_check must be in 0\.\.{MAX_CHECK}"):
        build_surrogate(lambda Q: Q, [[0.0, 1.0]], K=1, n_check=10**9)
