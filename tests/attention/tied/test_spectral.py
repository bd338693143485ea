"""Spectral density of S(t) in the d -> infinity limit (commuting laws; the free case is
tested in test_spectral_free.py)."""
import math

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.tied.spectral import (SpectralDensity, ks_distance, per_node_values,
                                                spectral_density)
from attndyn.symbolic.initial import FreeInit, scalar, wishart


def _d3():
    return attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)


def _quartic():
    return attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 4)


def _mp_density(x, sig, asp):
    s2 = sig * sig
    lm, lp = s2 * (1 - math.sqrt(asp)) ** 2, s2 * (1 + math.sqrt(asp)) ** 2
    out = np.zeros_like(x)
    ok = (x > lm) & (x < lp)
    out[ok] = np.sqrt((lp - x[ok]) * (x[ok] - lm)) / (2 * math.pi * s2 * x[ok])
    return out, lm, lp


@pytest.mark.parametrize("sig,asp", [(0.5, 0.5), (1.0, 1.0), (0.7, 2.0)])
def test_d3_density_matches_the_logistic_pushforward(sig, asp):
    """Loss (G1 - G2)^2, S_2 = c I: lambda(t, x) = c x E / (c + x (E - 1)), E = e^{4ct}
    (paper 003, eqs. 347-348), so rho_t(y) = rho_MP(x(y)) dx/dy in closed form."""
    c = 1.0
    t = np.array([0.0, 0.1, 0.3])
    r = spectral_density(_d3(), FreeInit([wishart(sig, asp), scalar(c)]), t)
    assert r.status == 0, r.message
    for j, tt in enumerate(t):
        E = math.exp(4 * c * tt)
        y = r.grid
        den = c * E - y * (E - 1)
        x = c * y / den
        exact, lm, lp = _mp_density(x, sig, asp)
        exact = exact * c * c * E / den ** 2
        ok = (x > lm + 1e-3 * (lp - lm)) & (x < lp - 1e-3 * (lp - lm))
        assert ok.sum() > 100
        err = np.max(np.abs(r.density[ok, j] - exact[ok])) / np.max(exact[ok])
        assert err < 1e-7, (tt, err)
        # the CDF: atom plus the continuous mass, total 1
        assert abs(r.cdf_values[-1, j] - 1.0) < 1e-12
        atom = max(0.0, 1.0 - asp)
        assert abs(r.cdf(np.array([-1e-9]), j)[0]) < 1e-15
        assert abs(r.cdf(np.array([1e-300]), j)[0] - atom) < 1e-12


def test_per_eigenvalue_flow_is_the_matrix_flow():
    """One rung down: with equal weights 1/d the per-eigenvalue flow is the matrix flow of a
    Wishart student against a scalar teacher (they commute)."""
    from attndyn.numeric import matrix_flow
    rng = np.random.default_rng(3)
    d = 60
    W = rng.standard_normal((d, 2 * d)) * 0.7 / math.sqrt(d)
    S = W @ W.T
    t = np.array([0.0, 0.5, 2.0])
    m = _quartic()
    fl = matrix_flow(m, [S, np.eye(d)], t)
    ts, lam, st, _ = per_node_values(m, np.vstack([np.linalg.eigvalsh(S), np.ones(d)]),
                                     np.full(d, 1.0 / d), t)
    assert st == 0
    np.testing.assert_allclose(lam[0].mean(axis=0), fl.moment((0,)), rtol=1e-9)
    np.testing.assert_allclose((lam[0] ** 2).mean(axis=0), fl.moment((0, 0)), rtol=1e-9)


def test_finite_d_eigenvalues_approach_the_limit_law():
    """KS distance between the eigenvalues of the finite-d flow (quartic loss: Gamma depends
    on q, so the finite-d traces feed back) and the limit law falls like 1/d."""
    sig, asp = 0.7, 2.0
    t = np.array([0.0, 0.5, 2.0])
    m = _quartic()
    r = spectral_density(m, FreeInit([wishart(sig, asp), scalar(1.0)]), t)
    assert r.status == 0
    sizes = (200, 400, 800)
    ks = []
    for d in sizes:
        vals = []
        for s in range(3):
            rng = np.random.default_rng([d, s])
            W = rng.standard_normal((d, int(asp * d))) * sig / math.sqrt(d)
            ev = np.linalg.eigvalsh(W @ W.T)
            _, lam, st, _ = per_node_values(m, np.vstack([ev, np.ones(d)]),
                                            np.full(d, 1.0 / d), t)
            assert st == 0
            vals.append(ks_distance(r, lam[0, :, -1], -1))
        ks.append(np.mean(vals))
    slope = np.polyfit(np.log(sizes), np.log(ks), 1)[0]
    assert ks[0] > ks[1] > ks[2]
    assert -1.4 < slope < -0.6, (ks, slope)
    # the law moved: at t = 2 it is far from the initial one in KS
    assert ks_distance(r, r.diagnostics["tracer_y"][:, 0][::7], -1) > 10 * ks[0]


def test_save_load_and_bad_input(tmp_path):
    m = _d3()
    law = FreeInit([wishart(0.5, 2.0), scalar(1.0)])
    r = spectral_density(m, law, [0.0, 0.1], n_grid=50, tracers=201)
    p = r.save(tmp_path / "rho.npz")
    back = SpectralDensity.load(p)
    np.testing.assert_array_equal(back.density, r.density)
    np.testing.assert_allclose(back.cdf(r.grid, 1), r.cdf(r.grid, 1))
    # a free (non-commuting) law is no longer refused: tests/attention/tied/test_spectral_free.py
    free = spectral_density(m, FreeInit([wishart(0.5, 2.0), wishart(1.0, 1.0)]), [0.0, 0.1],
                            sizes=(20, 30), levels=20)
    assert free.status == 0 and free.params["method"] == "equivalents"
    with pytest.raises(ValueError, match="letter"):
        spectral_density(m, law, [0.0], letter=5)
    with pytest.raises(ValueError, match="tracers"):
        spectral_density(m, law, [0.0], tracers=10**9)
    with pytest.raises(ValueError, match="point mass"):
        spectral_density(m, FreeInit([scalar(0.5), scalar(1.0)]), [0.0])
    with pytest.raises(ValueError, match="eigenvalues"):
        ks_distance(r, [np.nan])
