"""The tied spectral law of S_1(t) for a free (non-commuting) initial law (paper 003,
Assumption 6): quantiles of the deterministic equivalents along the matrix flow
(numeric/attention/tied/spectral.py), against the limit solver's moments and against the
eigenvalues of the finite-d matrix flow from Wishart draws of the same law."""
import math

import numpy as np
import pytest

import attndyn
from attndyn.numeric import matrix_flow
from attndyn.numeric.attention.limitcore import ks_distance, wasserstein_distance
from attndyn.numeric.attention.tied.limit import limit_flow
from attndyn.numeric.attention.tied.spectral import (SpectralDensity, quantile_moments,
                                                     spectral_density)
from attndyn.symbolic.initial import FreeInit, wishart

# a Marchenko-Pastur student (no atom, no singular edge) and a Wishart teacher of half rank:
# Fig. 4's setting (loss (G1 - G2)^2, one student, one random teacher), free from each other
SIG, ASP = 0.5, 2.0
LAW = FreeInit([wishart(SIG, ASP), wishart(0.7, 0.5)])
T = np.array([0.0, 1.0, 2.0])


def _model():
    return attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)


@pytest.fixture(scope="module")
def small():
    return spectral_density(_model(), LAW, T, sizes=(60, 120), rotations=2, levels=60, seed=1)


def test_free_law_is_a_density(small):
    """Non-negative, integrates to 1 within the stated error, its CDF runs from 0 to 1, and
    the law moves with t by much more than its stated error."""
    r = small
    assert r.status == 0, r.message
    assert r.params["method"] == "equivalents" and r.params["sizes"] == [60, 120]
    assert np.all(np.isfinite(r.density)) and np.all(r.density >= 0)
    mass, merr = r.diagnostics["mass"], r.diagnostics["mass_error"]
    assert np.all(merr < 0.2), merr
    assert np.all(np.abs(mass - 1.0) <= merr), (mass, merr)
    F = r.cdf_values
    assert np.all(np.diff(F, axis=0) >= 0)
    assert np.allclose(F[0], 0.0, atol=1e-12) and np.allclose(F[-1], 1.0, atol=1e-12)
    Q, qerr = r.diagnostics["quantiles"], r.diagnostics["quantile_error"]
    assert np.all(np.diff(Q, axis=0) >= 0)
    moved = np.abs(Q[1:-1, -1] - Q[1:-1, 0])
    assert np.median(moved / (qerr[1:-1, -1] + qerr[1:-1, 0])) > 3
    assert np.all(r.diagnostics["cdf_error"] < 0.05)


def test_free_law_moments_are_the_limit_solvers(small):
    """int y^k drho against the limit solver's Tr S_1^k / d: exact (free subordination) for
    k = 1, 2; deterministic equivalents at the same sizes for k = 3, 4; each within the
    two stated errors. At t = 0 also the Marchenko-Pastur moments in closed form."""
    r = small
    mom, merr = r.diagnostics["moments"], r.diagnostics["moment_error"]
    m = _model()
    exact = limit_flow(m, LAW, T, words=[(0,), (0, 0)])
    assert exact.diagnostics["method"] == "free"
    longer = limit_flow(m, LAW, T, sizes=(60, 120), rotations=2, seed=3,
                        words=[(0, 0, 0), (0, 0, 0, 0)], method="equivalents")
    lim = np.vstack([exact.y, longer.y])
    lerr = np.vstack([exact.diagnostics["error"], longer.diagnostics["error"]])
    assert np.all(np.abs(mom - lim) <= merr + lerr), (mom - lim, merr + lerr)
    s2 = SIG ** 2  # Marchenko-Pastur: E x = s2 a, E x^2 = s2^2 (a^2 + a)
    assert abs(mom[0, 0] - s2 * ASP) <= merr[0, 0]
    assert abs(mom[1, 0] - s2 ** 2 * (ASP ** 2 + ASP)) <= merr[1, 0]
    # the stated errors are not vacuous: well below the moments and their motion
    assert np.all(merr[:2] < 0.1 * np.abs(mom[:2]))
    assert np.abs(mom[1, -1] - mom[1, 0]) > 5 * (merr[1, -1] + merr[1, 0])


def test_free_law_uses_the_limit_solvers_equivalents(small):
    """Same sizes, rotations and seed: the same matrices as limit_flow's equivalents (the
    mean Tr S_1^2 / d per size agrees to the integrator's tolerance); same seed, same law."""
    r = small
    lf = limit_flow(_model(), LAW, T, sizes=(60, 120), rotations=2, seed=1,
                    words=[(0,), (0, 0)], method="equivalents")
    per_size = np.asarray(r.diagnostics["traces_per_size"])     # (sizes, 4, n_t)
    np.testing.assert_allclose(per_size[:, :2], lf.diagnostics["means"], rtol=1e-6,
                               atol=1e-9)
    again = spectral_density(_model(), LAW, T, sizes=(60, 120), rotations=2, levels=60,
                             seed=1)
    np.testing.assert_array_equal(again.density, r.density)


def test_quantile_moments_of_a_uniform_and_a_two_point_law():
    p = np.linspace(0, 1, 11)
    Q = np.stack([2 + 3 * p, np.where(p < 0.5, -1.0, 1.0)], axis=1)
    Q[5, 1] = -1.0  # mass 0.5 at -1, 0.4 at 1, and 0.1 uniform on [-1, 1] in between
    mom = quantile_moments(p, Q, 4)
    for k in range(1, 5):  # the first column: uniform on [2, 5]
        assert mom[k - 1, 0] == pytest.approx((5 ** (k + 1) - 2 ** (k + 1)) / (3 * (k + 1)))
    assert mom[0, 1] == pytest.approx(-0.1)
    assert mom[1, 1] == pytest.approx(0.9 + 0.1 / 3)
    assert mom[2, 1] == pytest.approx(-0.1)


def test_save_load_and_bad_input(small, tmp_path):
    back = SpectralDensity.load(small.save(tmp_path / "free.npz"))
    np.testing.assert_array_equal(back.density, small.density)
    np.testing.assert_allclose(back.cdf(small.grid, 1), small.cdf(small.grid, 1))
    m = _model()
    with pytest.raises(ValueError, match="levels"):
        spectral_density(m, LAW, [0.0], sizes=(20, 40), levels=30)
    with pytest.raises(ValueError, match="extrapolation"):
        spectral_density(m, LAW, [0.0], sizes=(20, 40), levels=20, extrapolation="cubic")
    with pytest.raises(ValueError, match="max_dim"):
        spectral_density(m, LAW, [0.0], sizes=(20, 10**5))
    with pytest.raises(ValueError, match="rotations"):
        spectral_density(m, LAW, [0.0], sizes=(20, 40), levels=20, rotations=0)
    with pytest.raises(ValueError, match="sizes"):
        spectral_density(m, LAW, [0.0], sizes=(40,), levels=20)
    with pytest.raises(ValueError, match="letter"):
        spectral_density(m, LAW, [0.0], sizes=(20, 40), levels=20, letter=2)


def _draw_spectra(m, d, s, t):
    """Eigenvalues of S_1(t) along matrix_flow from one draw of LAW at size d."""
    rng = np.random.default_rng([27, d, s])
    W1 = rng.standard_normal((d, int(ASP * d))) * SIG / math.sqrt(d)
    W2 = rng.standard_normal((d, d // 2)) * 0.7 / math.sqrt(d)
    fl = matrix_flow(m, [W1 @ W1.T, W2 @ W2.T], t, keep_matrices=True, rtol=1e-9,
                     atol=1e-12)
    assert fl.status == 0, fl.message
    return [np.linalg.eigvalsh(fl.diagnostics["matrices"][j][0]) for j in range(t.size)]


def test_finite_d_eigenvalues_approach_the_free_law():
    """KS and Wasserstein-1 distances between the eigenvalues of the finite-d matrix flow
    (draws of the same law) and the free law fall with d at every time, about like 1/d
    (measured: KS 0.040, 0.025, 0.013 at t = 0 and 0.049, 0.021, 0.013 at t = 2; about 4 s
    of CPU; the d = 400-1600 table is in docs/theorems.md)."""
    m = _model()
    t = np.array([0.0, 2.0])
    r = spectral_density(m, LAW, t, sizes=(200, 400), rotations=2, levels=200, seed=0)
    assert r.status == 0, r.message
    sizes, draws = (50, 100, 200), 3
    ks, w1 = np.zeros((len(sizes), t.size)), np.zeros((len(sizes), t.size))
    for i, d in enumerate(sizes):
        for s in range(draws):
            for j, ev in enumerate(_draw_spectra(m, d, s, t)):
                ks[i, j] += ks_distance(r, ev, j) / draws
                w1[i, j] += wasserstein_distance(r, ev, j) / draws
    for dist in (ks, w1):
        assert np.all(np.diff(dist, axis=0) < 0), dist
        slope = np.polyfit(np.log(sizes), np.log(dist), 1)[0]
        assert np.all((slope < -0.6) & (slope > -1.5)), (dist, slope)
