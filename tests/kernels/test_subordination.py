"""The compiled subordination root of the free limit solver against the Python version
(scipy's brentq on the same residual, numpy dot products)."""

from __future__ import annotations

import numpy as np
import pytest

from subordination_reference import python_subordination as _python_solve

from attndyn.kernels.subordination import (SUBORDINATION_STATUS, subordination_kernel,
                                           subordination_solve)


def _case(seed, t):
    """Teacher nodes ``mu`` and student nodes ``x`` (positive, normalised weights) and the
    free solver's ``phi, g`` after a time ``t`` of a flow with constant rates."""
    rng = np.random.default_rng(seed)
    mu = np.sort(rng.uniform(0.1, 3.0, 64))
    wm = rng.uniform(0.5, 1.5, 64)
    wm /= wm.sum()
    x = np.sort(rng.uniform(0.4, 5.0, 48))
    wx = rng.uniform(0.5, 1.5, 48)
    wx /= wx.sum()
    B, N, a = 0.3 * t, 0.1 * t, 1.5
    g = np.exp(-2.0 * (B * mu + N))
    phi = a * (1.0 - np.exp(-2.0 * (0.3 * mu + 0.1) * t)) / (2.0 * (0.3 * mu + 0.1))
    omega0 = -1.0 / float(wx @ x)
    return phi, g, mu, wm, x, wx, omega0


@pytest.mark.parametrize("seed, t", [(0, 0.0), (1, 0.3), (2, 2.0), (3, 10.0)])
def test_kernel_matches_the_python_brentq(seed, t):
    args = _case(seed, t)
    ref = _python_solve(*args)
    got = subordination_solve(*args)
    # the same iteration; the sums differ from numpy's dot products only in rounding
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    # the root is a root: the residual there is at rounding level
    phi, g, mu, wm, x, wx, _ = args
    om = got[0]
    G = float(wm @ (1.0 / (om - phi)))
    w = 1.0 / G - om
    gx = float(wx @ (x / (w * x - 1.0)))
    assert abs(gx - G) <= 1e-12 * max(1.0, abs(G))


def test_kernel_from_a_far_start_and_from_the_previous_root():
    phi, g, mu, wm, x, wx, omega0 = _case(4, 1.0)
    a = subordination_solve(phi, g, mu, wm, x, wx, omega0)
    b = subordination_solve(phi, g, mu, wm, x, wx, a[0])        # warm start
    c = subordination_solve(phi, g, mu, wm, x, wx, -1e3)         # far below the root
    np.testing.assert_allclose(b, a, rtol=1e-13)
    np.testing.assert_allclose(c, a, rtol=1e-12)


def test_kernel_status_instead_of_raising():
    phi, g, mu, wm, x, wx, omega0 = _case(5, 1.0)
    out = np.zeros(6)
    assert subordination_kernel(phi, g, mu, wm, x, wx, omega0, out) == 0
    assert out[4] >= 2  # residual evaluations counted
    # a non-finite start or entry: status 5, not a hang
    assert subordination_kernel(phi, g, mu, wm, x, wx, np.nan, out) == 5
    for arr in (phi, g, mu, wm, x, wx):
        for bad in (np.nan, np.inf):
            keep = arr[3]
            arr[3] = bad
            assert subordination_kernel(phi, g, mu, wm, x, wx, omega0, out) == 5
            arr[3] = keep
    with pytest.raises(FloatingPointError, match="non-finite"):
        subordination_solve(np.where(phi == phi[0], np.nan, phi), g, mu, wm, x, wx, omega0)
    assert set(SUBORDINATION_STATUS) == {0, 1, 2, 3, 4, 5}


@pytest.mark.parametrize("bad, exc, match", [
    ({"phi": np.array([0.0, np.nan])}, ValueError, "g must have"),
    ({"g": np.ones(3)}, ValueError, "g must have"),
    ({"wx": np.ones((2, 2))}, ValueError, "wx must be a non-empty 1-d"),
    ({"x": np.zeros(0)}, ValueError, "x must be a non-empty 1-d"),
])
def test_wrapper_checks_the_arrays(bad, exc, match):
    phi, g, mu, wm, x, wx, omega0 = _case(6, 0.5)
    kw = dict(phi=phi, g=g, mu=mu, wm=wm, x=x, wx=wx)
    kw.update(bad)
    with pytest.raises(exc, match=match):
        subordination_solve(kw["phi"], kw["g"], kw["mu"], kw["wm"], kw["x"], kw["wx"], omega0)


def test_domain_of_gx_is_checked():
    # G_X(w) has poles at w = 1/x_j: the kernel refuses w x_max >= 1 (status 1 upstream,
    # FloatingPointError from the wrapper) instead of summing across a pole
    from attndyn.kernels.subordination import _gx
    x = np.array([0.5, 1.0, 2.0])
    wx = np.full(3, 1.0 / 3.0)
    out = np.zeros(3)
    assert _gx(0.1, x, wx, 2.0, out)
    np.testing.assert_allclose(out[:2], [float(wx @ (x / (0.1 * x - 1.0))),
                                         -float(wx @ (x * x / (0.1 * x - 1.0) ** 2))])
    assert not _gx(0.5, x, wx, 2.0, out)
    assert not _gx(np.nan, x, wx, 2.0, out)


def test_wrapper_maps_statuses_to_the_python_errors(monkeypatch):
    import attndyn.kernels.subordination as sub
    args = _case(7, 0.5)
    for status, exc in ((1, FloatingPointError), (2, FloatingPointError),
                        (3, FloatingPointError), (5, FloatingPointError),
                        (4, np.linalg.LinAlgError)):
        monkeypatch.setattr(sub, "subordination_kernel", lambda *a, _s=status: _s)
        with pytest.raises(exc, match=SUBORDINATION_STATUS[status]):
            sub.subordination_solve(*args)


@pytest.mark.parametrize("seed, t", [(8, 0.3), (9, 3.0)])
def test_log_form_matches_the_direct_form(seed, t):
    from attndyn.kernels.subordination import subordination_solve_log
    phi, g, mu, wm, x, wx, omega0 = _case(seed, t)
    a = subordination_solve(phi, g, mu, wm, x, wx, omega0)
    b = subordination_solve_log(np.log1p(phi), np.log(g), mu, wm, x, wx, omega0)
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_log_form_beyond_double_precision():
    # phi = expm1(psi) past 1e308 on the upper nodes (psi up to 900) and g alike: the direct
    # form cannot even hold the arrays; the log form gives the limit in which those nodes
    # drop out of G_Y, and it agrees with the direct form on the nodes that remain when
    # their phi is merely large (psi = 300)
    from attndyn.kernels.subordination import subordination_solve_log
    phi, g, mu, wm, x, wx, omega0 = _case(10, 1.0)
    psi = np.log1p(phi)
    logg = np.log(g)
    psi_big, logg_big = psi.copy(), logg.copy()
    psi_big[32:] += 900.0
    logg_big[32:] += 900.0  # g / (1 + phi) unchanged on those nodes
    psi_mid, logg_mid = psi.copy(), logg.copy()
    psi_mid[32:] += 300.0
    logg_mid[32:] += 300.0
    big = subordination_solve_log(psi_big, logg_big, mu, wm, x, wx, omega0)
    mid = subordination_solve_log(psi_mid, logg_mid, mu, wm, x, wx, omega0)
    assert np.all(np.isfinite(big))
    np.testing.assert_allclose(big, mid, rtol=1e-12, atol=1e-14)
    direct = subordination_solve(np.expm1(psi_mid), np.exp(logg_mid), mu, wm, x, wx, omega0)
    np.testing.assert_allclose(mid, direct, rtol=1e-9, atol=1e-12)
