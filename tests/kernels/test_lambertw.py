"""Tests of the real Lambert W kernel (attndyn.lambertw)."""

from __future__ import annotations

import importlib.util
import math
import pathlib
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import attndyn
import attndyn.kernels.lambertw as _lw
from attndyn.kernels.lambertw import (
    BRANCH_POINT_COEFFS,
    INV_E,
    check_lambertw_args,
    lambertw0_scalar,
    lambertw0_ufunc,
    lambertw_array,
    lambertw_log0_scalar,
    lambertwm1_scalar,
)
from attndyn.numeric.scaling.lambertw import lambertw, lambertw_checked

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def _load_reference_module():
    spec = importlib.util.spec_from_file_location("lambertw_reference",
                                                  DATA / "lambertw_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _load_reference_module()
TOL_AWAY = 4e-16  # acceptance: max relative error away from the branch point
TOL_NEAR = 1e-13  # acceptance: within 1e-12 of -1/e


def _mp_rel(w, z, k):
    with mpmath.workdps(50):
        ref = mpmath.lambertw(mpmath.mpf(float(z)), k)
        assert mpmath.im(ref) == 0
        ref = mpmath.re(ref)
        if not math.isfinite(w):
            return math.inf
        return float(abs((mpmath.mpf(float(w)) - ref) / ref))


# ---------------------------------------------------------------------------
# special values and domain
# ---------------------------------------------------------------------------


def test_inv_e_constant_is_nearest_double_above_one_over_e():
    with mpmath.workdps(40):
        exact = 1 / mpmath.e
        assert float(exact) == INV_E
        assert mpmath.mpf(INV_E) > exact  # so -INV_E is just below -1/e


def test_special_values():
    assert lambertw(0.0) == 0.0
    assert math.copysign(1.0, lambertw(-0.0)) == -1.0
    assert lambertw(-INV_E, 0) == -1.0
    assert lambertw(-INV_E, -1) == -1.0
    assert lambertw(math.e) == 1.0
    assert lambertw(np.inf) == np.inf
    assert lambertw(0.0, -1) == -np.inf
    assert lambertw(-0.0, -1) == -np.inf
    # the omega constant (correctly rounded: 0.5671432904097838); the value goes through
    # libm's exp/log, which may differ by an ulp between platforms, so allow one ulp
    omega = 0.5671432904097838
    assert abs(lambertw(1.0) - omega) <= math.ulp(omega)


@pytest.mark.parametrize("z, k", [
    (-0.5, 0), (np.nextafter(-INV_E, -1.0), 0), (np.nextafter(-INV_E, -1.0), -1),
    (1e-300, -1), (0.1, -1), (np.inf, -1), (-np.inf, 0), (-np.inf, -1), (np.nan, 0),
    (np.nan, -1),
])
def test_nan_outside_domain(z, k):
    assert np.isnan(lambertw(z, k))


def test_checked_wrapper_raises_naming_z():
    with pytest.raises(ValueError, match=r"^z is outside the domain.*branch 0.*-0\.5"):
        lambertw_checked(-0.5)
    with pytest.raises(ValueError, match=r"^z .*branch -1.*0\.25.*index \(1,\)"):
        lambertw_checked([-0.1, 0.25], -1)
    with pytest.raises(ValueError, match="^z"):
        lambertw_checked(np.nan)
    z = np.array([-0.3, 0.0, 5.0])
    np.testing.assert_array_equal(lambertw_checked(z), lambertw(z))
    assert lambertw_checked(0.0, -1) == -np.inf


def test_branch_argument():
    with pytest.raises(ValueError, match="^branch"):
        lambertw(1.0, 1)
    with pytest.raises(ValueError, match="^branch"):
        lambertw_checked(1.0, -2)
    with pytest.raises(TypeError, match="^branch"):
        lambertw(1.0, 0.5)
    with pytest.raises(TypeError, match="^branch"):
        lambertw(1.0, "0")
    assert lambertw(-0.2, np.int64(-1)) == lambertw(-0.2, -1)
    with pytest.raises(TypeError, match="^branch"):  # a float branch is refused (issue 23)
        lambertw(-0.2, -1.0)


def test_bad_z_type():
    with pytest.raises(TypeError, match="^z"):
        lambertw(1 + 1j)
    with pytest.raises(TypeError, match="^z"):
        lambertw("abc")


def test_array_in_array_out():
    z = np.linspace(-0.3, 10.0, 12).reshape(3, 4)
    w = lambertw(z)
    assert isinstance(w, np.ndarray) and w.shape == (3, 4) and w.dtype == np.float64
    assert lambertw([1, 2, 3]).dtype == np.float64
    assert lambertw(np.ones(5, np.float32)).dtype == np.float64
    assert isinstance(lambertw(2.0), np.floating)
    # broadcasting and non-contiguous input
    zz = np.linspace(0.0, 5.0, 20)[::3]
    np.testing.assert_array_equal(lambertw(zz), lambertw(np.ascontiguousarray(zz)))


def test_branch_point_coefficients_match_corless_et_al():
    expected = [Fraction(-1), Fraction(1), Fraction(-1, 3), Fraction(11, 72),
                Fraction(-43, 540), Fraction(769, 17280), Fraction(-221, 8505),
                Fraction(680863, 43545600)]
    assert [float(f) for f in expected] == BRANCH_POINT_COEFFS[:8].tolist()


def _chain_literals(fn) -> dict:
    """The float literals of the assignments ``a0 = ...``..``a3 = ...`` in the source of
    ``fn``, in textual order (a leading minus folded in)."""
    import ast
    import inspect
    import textwrap
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn.py_func)))
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("a0", "a1", "a2", "a3"):
            vals = []
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.USub) \
                        and isinstance(sub.operand, ast.Constant):
                    vals.append(-float(sub.operand.value))
                    sub.operand.value = None  # counted once
                elif isinstance(sub, ast.Constant) and isinstance(sub.value, float):
                    vals.append(float(sub.value))
            out[int(node.targets[0].id[1])] = vals
    return out


@pytest.mark.parametrize("name, n_chain, ref", [
    ("_start_series", 5, lambda: np.concatenate([[0.0], BRANCH_POINT_COEFFS[1:20]])),
    ("_start_series_w0", 4, lambda: np.concatenate([[0.0], BRANCH_POINT_COEFFS[1:16]])),
    ("_h_tail", 5, lambda: _lw._H_TAIL[:20]),
    ("_h_tail_w0", 4, lambda: _lw._H_TAIL[:16]),
])
def test_literal_polynomials_match_the_coefficient_tables(name, n_chain, ref):
    # the written-out polynomials of the branch-point region: chain r holds the computed
    # coefficients c[r], c[r + 4], ... exactly (every literal checked), and the function
    # agrees to rounding with a plain Horner sum of them on |x| <= 1
    fn = getattr(_lw, name)
    c = ref()
    assert c.size == 4 * n_chain
    lits = _chain_literals(fn)
    assert sorted(lits) == [0, 1, 2, 3]
    for r in range(4):
        assert lits[r] == c[r::4].tolist(), (name, r)
    for x in np.linspace(-1.0, 1.0, 41):
        plain = 0.0
        for ck in c[::-1]:
            plain = plain * x + ck
        assert abs(fn.py_func(x) - plain) <= 4e-16 * max(1.0, abs(plain))


@pytest.mark.parametrize("z, branch, exc", [
    (None, 0, TypeError), ("1.0", 0, TypeError), (b"1.0", 0, TypeError),
    (np.array(["1.0"]), 0, TypeError), (np.array([1.0, None], dtype=object), 0, TypeError),
    (1.0 + 0j, 0, TypeError), (1.0, -1.0, TypeError), (1.0, 0.0, TypeError),
    (1.0, True, TypeError), (1.0, "0", TypeError), (1.0, None, TypeError),
    (1.0, 1, ValueError), (1.0, -2, ValueError),
])
def test_check_lambertw_args_refuses(z, branch, exc):
    with pytest.raises(exc, match="branch|z "):
        check_lambertw_args(z, branch)


def test_check_lambertw_args_accepts_real_numbers():
    arr, k = check_lambertw_args([1, 2], np.int64(-1))
    assert k == -1 and arr.dtype == np.float64 and arr.tolist() == [1.0, 2.0]
    x = np.linspace(0.0, 1.0, 5)
    arr, k = check_lambertw_args(x)
    assert arr is x and k == 0  # float64 input is not copied
    assert check_lambertw_args(np.float32(2.0), 0)[0].dtype == np.float64
    assert check_lambertw_args(True, 0)[0] == 1.0


def test_branch_region_single_halley_step_is_accurate_at_the_region_ends():
    # the series start with one Halley step (no exp) at the far ends of the branch-point
    # region, where the start is least accurate, against 50-digit mpmath
    for k, z_end in ((0, -0.2681280184142557), (-1, -0.2706705664732254)):
        for z in np.linspace(z_end - 0.02, z_end, 9):
            assert _mp_rel(lambertw(z, k), z, k) <= TOL_AWAY


# ---------------------------------------------------------------------------
# accuracy against 50-digit mpmath
# ---------------------------------------------------------------------------


def test_reference_subsample_is_the_seeded_sample():
    data = np.load(DATA / "lambertw_reference.npz")
    z, branch, region = REF.reference_points(int(data["seed"]))
    idx = data["index"]
    # 10.0**U goes through libm/SIMD pow, whose last bit differs across CPUs: compare
    # with a tolerance far below any change of seed or sampling rule (those move z by O(1))
    np.testing.assert_allclose(z[idx], data["z"], rtol=1e-13, atol=0)
    np.testing.assert_array_equal(branch[idx], data["branch"])
    assert z.size == 100_000
    near = region == 2
    assert np.all(z[near] > -INV_E) and np.all(z[near] - (-1 / math.e) < 1e-12)
    assert int(data["dps"]) == 50


def test_accuracy_on_stored_reference():
    data = np.load(DATA / "lambertw_reference.npz")
    z, k, region = data["z"], data["branch"], data["region"]
    w = np.where(k == 0, lambertw(z, 0), lambertw(np.minimum(z, 0.0), -1))
    assert np.all(np.isfinite(w))
    err = REF.relative_error(w, data["w_hi"], data["w_lo"])
    away, near = err[region < 2], err[region == 2]
    assert away.size >= 3000 and near.size >= 800
    assert away.max() <= TOL_AWAY, (away.max(), z[region < 2][away.argmax()])
    assert near.max() <= TOL_NEAR, (near.max(), z[region == 2][near.argmax()])


def test_relative_error_never_accepts_nan():
    err = REF.relative_error(np.array([np.nan, np.inf, 1.0]), np.ones(3), np.zeros(3))
    assert err[0] == np.inf and err[1] == np.inf and err[2] == 0.0


def test_fresh_random_points_against_mpmath():
    rng = np.random.default_rng(7)
    cases = [(10.0 ** rng.uniform(-300, 300, 60), 0),
             (-(10.0 ** rng.uniform(-300, math.log10(INV_E), 60)), 0),
             (-(10.0 ** rng.uniform(-300, math.log10(INV_E), 60)), -1),
             (-INV_E + 10.0 ** rng.uniform(-15, -0.5, 60), 0),
             (-INV_E + 10.0 ** rng.uniform(-15, -0.5, 60), -1),
             (rng.uniform(-0.36, 3.0, 60), 0),
             (np.array([5e-324, 1e-310, 1e-4, 0.99999, 1.0, 1.0000001, 2.718,
                        1.7976931348623157e308]), 0),
             (np.array([-5e-324, -1e-310, -0.2706705664732254, -0.2706705664732255]), -1)]
    worst = 0.0
    for z, k in cases:
        z = np.where(z > -INV_E, z, np.nextafter(-INV_E, 0.0))
        w = lambertw(z, k)
        worst = max(worst, max(_mp_rel(wi, zi, k) for wi, zi in zip(w, z)))
    assert worst <= TOL_AWAY


def test_region_boundaries_are_seamless():
    # each side of every switch between evaluation forms
    for zc, k in [(-0.2681280184142557, 0), (-0.2706705664732254, -1), (1e-4, 0), (-1e-4, 0),
                  (1.0, 0), (math.e, 0)]:
        zs = [zc]
        for _ in range(3):
            zs = [np.nextafter(zs[0], -np.inf)] + zs + [np.nextafter(zs[-1], np.inf)]
        for z in zs:
            assert _mp_rel(lambertw(z, k), z, k) <= TOL_AWAY


@pytest.mark.slow
def test_full_acceptance_set_against_mpmath():
    """All 10^5 acceptance points (about 15 s of mpmath)."""
    z, k, region = REF.reference_points()
    hi, lo = REF.reference_values(z, k)
    w = np.where(k == 0, lambertw(z, 0), lambertw(np.minimum(z, 0.0), -1))
    err = REF.relative_error(w, hi, lo)
    assert err[region < 2].max() <= TOL_AWAY
    assert err[region == 2].max() <= TOL_NEAR


# ---------------------------------------------------------------------------
# identities (hypothesis)
# ---------------------------------------------------------------------------


@settings(deadline=None, max_examples=200)
@given(st.floats(min_value=-INV_E, max_value=1e300, allow_nan=False))
def test_identity_w_exp_w_principal(z):
    w = float(lambertw(z))
    with mpmath.workdps(60):
        if z == 0.0:
            assert w == 0.0
            return
        res = abs(mpmath.mpf(w) * mpmath.exp(mpmath.mpf(w)) - mpmath.mpf(z)) / abs(mpmath.mpf(z))
        # an error e in w moves w e^w by (1 + w) e relatively; the branch point itself
        # (-INV_E, just outside the domain) returns exactly -1
        tol = TOL_AWAY * (1 + abs(w)) * 1.01 + (1e-32 if z == -INV_E else 0.0)
        assert float(res) <= tol


@settings(deadline=None, max_examples=200)
@given(st.floats(min_value=-INV_E, max_value=-1e-300, allow_nan=False))
def test_identity_w_exp_w_lower(z):
    w = float(lambertw(z, -1))
    assert w <= -1.0
    with mpmath.workdps(60):
        res = abs(mpmath.mpf(w) * mpmath.exp(mpmath.mpf(w)) - mpmath.mpf(z)) / abs(mpmath.mpf(z))
        tol = TOL_AWAY * (1 + abs(w)) * 1.01 + (1e-32 if z == -INV_E else 0.0)
        assert float(res) <= tol


@settings(deadline=None, max_examples=100)
@given(st.floats(min_value=-700.0, max_value=1e300, allow_nan=False))
def test_log_argument_form(ell):
    w = lambertw_log0_scalar(ell)
    with mpmath.workdps(50):
        ref = mpmath.lambertw(mpmath.exp(mpmath.mpf(ell)))
        assert abs(mpmath.mpf(w) - ref) <= 5e-16 * abs(ref)


def test_monotone():
    z = np.concatenate([-np.logspace(np.log10(INV_E) - 1e-9, -300, 4000), [0.0],
                        np.logspace(-300, 300, 4000)])
    w = lambertw(z)
    assert np.all(np.diff(w) >= 0)
    zm = z[z < 0]
    assert np.all(np.diff(lambertw(zm, -1)) <= 0)


def test_agrees_with_scipy():
    from scipy.special import lambertw as sp_lambertw

    rng = np.random.default_rng(3)
    z = np.concatenate([10.0 ** rng.uniform(-20, 20, 500), rng.uniform(-INV_E, 0, 500)])
    np.testing.assert_allclose(lambertw(z), sp_lambertw(z).real, rtol=1e-13)
    zm = rng.uniform(-INV_E, -1e-10, 500)
    np.testing.assert_allclose(lambertw(zm, -1), sp_lambertw(zm, -1).real, rtol=1e-13)


# ---------------------------------------------------------------------------
# use from jitted code
# ---------------------------------------------------------------------------


@njit
def _jitted_sum(z):
    s = 0.0
    for i in range(z.size):
        s += lambertw0_scalar(z[i]) + lambertwm1_scalar(-abs(z[i]) / 10.0)
    return s


@njit
def _jitted_ufunc(z):
    return lambertw0_ufunc(z) * 2.0


def test_usable_inside_njit():
    z = np.linspace(0.0, 3.0, 17)
    expected = float(np.sum(lambertw(z)) + np.sum(lambertw(-np.abs(z) / 10.0, -1)))
    assert _jitted_sum(z) == pytest.approx(expected, rel=1e-15)
    np.testing.assert_array_equal(_jitted_ufunc(z), 2.0 * lambertw(z))


def test_parallel_array_kernel():
    z = np.linspace(-INV_E, 50.0, 1001)
    out = np.empty_like(z)
    np.testing.assert_array_equal(lambertw_array(z, 0, out), lambertw(z))
    zm = np.linspace(-INV_E, -1e-3, 101)
    np.testing.assert_array_equal(lambertw_array(zm, -1, np.empty_like(zm)), lambertw(zm, -1))


def test_public_name():
    assert attndyn.lambertw is lambertw
