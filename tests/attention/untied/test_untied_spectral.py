"""The spectral law of the untied S_k(tau) = U_k V_k^T as d -> infinity
(numeric/attention/untied/limit.py: spectral_density): exact in the commuting case against a
closed form, the free case against finite-d eigenvalues, and the d-scan (slow)."""

import math

import numpy as np
import pytest

from attndyn.numeric.attention.limitcore import SpectralDensity
from attndyn.numeric.attention.training import gaussian_init
from attndyn.numeric.attention.untied.fastslow import untied_flow
from attndyn.numeric.attention.untied.limit import (DiagonalLaw, UntiedLaw, _node_run, branch_law,
                                                    gaussian_pair, ks_distance, limit_flow,
                                                    spectral_density, wasserstein_distance)
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.symbolic.losses import mse_teacher_student

C, P = 0.7, 0.8
SIGNS = ((1, 1, P / 2), (-1, -1, P / 2), (1, -1, (1 - P) / 2), (-1, 1, (1 - P) / 2))


def _sign_law(c=C):
    """docs/untied.md's exact case: x uniform on [0.2, 1.8], student u = eps sqrt(x),
    v = sqrt(x), teacher u = zeta sqrt(c), v = sqrt(c), P(eps = zeta) = P."""
    br = [(pr, lambda x, e=e, z=z: np.vstack([e * np.sqrt(x), z * math.sqrt(c) * np.ones_like(x)]),
           lambda x: np.vstack([np.sqrt(x), math.sqrt(c) * np.ones_like(x)]))
          for e, z, pr in SIGNS]
    return branch_law(br, (0.2, 1.8))


def _exact_cdf(y, gamma, tau, a=0.2, b=1.8):
    """F(y) = P(s <= y), s = eps sigma(tau, x), sigma logistic with rho = 4 c eps zeta - 2 gamma
    and inverse x = sigma rho / (rho E - 4 sigma (E - 1)), E = exp(rho tau)."""
    F = np.zeros_like(y)
    for eps, zeta, pr in SIGNS:
        rho = 4 * C * eps * zeta - 2 * gamma
        E = math.exp(rho * tau)
        sig = np.maximum(eps * y, 0.0)
        with np.errstate(all="ignore"):
            x = sig * rho / (rho * E - 4 * sig * (E - 1))
        # sig = 0: below every node; beyond the range of sigma(tau, .): above every node
        x = np.where(sig == 0, a - 1, np.where(np.isfinite(x) & (x >= 0), x, b + 1))
        below = np.clip((x - a) / (b - a), 0.0, 1.0)     # P(sigma <= sig)
        F += pr * (below if eps == 1 else 1.0 - below)
    return F


@pytest.mark.parametrize("gamma", [0.0, 0.3])
def test_commuting_spectral_law_is_exact(gamma):
    model = UntiedModel(2, [0], mse_teacher_student("h1"), weight_decay=gamma)
    t = np.array([0.0, 0.5, 1.0])
    r = spectral_density(model, _sign_law(), t, tracers=1001, n_grid=20000)
    assert r.status == 0 and r.params["method"] == "commuting"
    for j in range(t.size):
        ex = _exact_cdf(r.grid, gamma, t[j])
        assert np.abs(r.cdf_values[:, j] - ex).max() < 2e-6          # O(h^2), h = 1.6e-3
        assert np.abs(r.cdf(r.grid, j) - ex).max() < 2e-6
    # the moments of the law are the limit flow's: int y drho = mu(M_1), int y^2 = q1_11
    lim = limit_flow(model, _sign_law(), t)
    y = np.asarray(r.diagnostics["tracer_y"])[:, -1]
    F = np.asarray(r.diagnostics["tracer_cdf"])[:, -1]
    mid, dF = (y[1:] + y[:-1]) / 2, np.diff(F)
    assert abs(mid @ dF - lim.moment((0,))[-1]) < 1e-5
    assert abs((mid ** 2) @ dF - lim.observable("q1_11")[-1]) < 1e-5
    # the density is the CDF's derivative (trapezoid on the fine grid; at tau = 1 the law
    # is peaked near c, measured 1.8e-3)
    g = r.grid
    for j in range(t.size):
        cum = np.concatenate([[0.0], np.cumsum((r.density[1:, j] + r.density[:-1, j]) / 2
                                               * np.diff(g))])
        assert np.abs(cum - r.cdf_values[:, j]).max() < 5e-3


def test_singular_values_fold_the_symmetric_law():
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    sym = spectral_density(model, _sign_law(), [0.4], tracers=501)
    sing = spectral_density(model, _sign_law(), [0.4], tracers=501, spectrum="singular")
    y = np.linspace(0.05, 1.5, 30)
    # no mass at 0: F_sing(y) = F(y) - F(-y)
    assert np.abs(sing.cdf(y, 0) - (sym.cdf(y, 0) - sym.cdf(-y, 0))).max() < 1e-3
    assert sing.grid.min() >= 0


def test_finite_diagonal_pairs_approach_the_commuting_law():
    """d diagonal pairs drawn from the law (the finite-d slaved flow of the commuting
    case): the Wasserstein distance to the limit law falls with d."""
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    t = np.array([0.5])
    r = spectral_density(model, _sign_law(), t, tracers=501)
    w = {}
    for d in (50, 800):
        vals = []
        for s in range(3):
            rng = np.random.default_rng([d, s])
            x = rng.uniform(0.2, 1.8, d)
            k = rng.choice(4, size=d, p=[sg[2] for sg in SIGNS])
            eps = np.array([SIGNS[i][0] for i in k])
            zeta = np.array([SIGNS[i][1] for i in k])
            fin = DiagonalLaw([eps * np.sqrt(x), zeta * math.sqrt(C)],
                              [np.sqrt(x), math.sqrt(C) * np.ones(d)])
            _, _, st, _, _, Y = _node_run(model, fin, t, [], 1e-10, 1e-12, 1e-12, 1e100)
            assert st == 0
            vals.append(wasserstein_distance(r, Y[:d, 0] * Y[d:, 0], 0))
        w[d] = np.mean(vals)
    assert w[800] < w[50] / 2          # d^-1/2: a factor 4 expected


def test_free_law_against_finite_d_eigenvalues():
    """Fig. 3's law (h1, standard Gaussian pairs): the equivalents' spectral law against
    the symmetric part of the slaved flow from a Gaussian draw; its second moment is the
    limit's (q1_11 + q2_11)/2."""
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    law = UntiedLaw([gaussian_pair(1), gaussian_pair(1)])
    t = np.array([0.0, 0.3])
    r = spectral_density(model, law, t, sizes=(60, 120), rotations=2, levels=40, seed=1)
    assert r.status == 0 and r.params["method"] == "equivalents"
    assert np.all(np.isfinite(r.diagnostics["cdf_error"]))
    Q = np.asarray(r.diagnostics["quantiles"])
    assert np.all(np.diff(Q, axis=0) >= 0)
    # second moment at tau = 0: (q1 + q2)/2 = (1 + 0)/2 for standard square pairs
    assert abs(np.mean(Q[1:-1, 0] ** 2) - 0.5) < 0.05
    pairs = gaussian_init(model, 150, seed=2)
    fo = untied_flow(model, pairs, t, mode="slaved", words=[], keep_pairs=True)
    for j in range(t.size):
        U, V = fo.diagnostics["pairs"][j][0]
        H = U @ V.T
        ev = np.linalg.eigvalsh((H + H.T) / 2)
        assert ks_distance(r, ev, j) < 0.06
        assert wasserstein_distance(r, ev, j) < 0.06
    # a law that moved: the spectrum at tau = 0.3 is not the one at 0
    assert np.abs(Q[:, 1] - Q[:, 0]).max() > 0.02


def test_save_load_and_plot(tmp_path):
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    r = spectral_density(model, _sign_law(), [0.0, 0.2], tracers=101, n_grid=50)
    path = r.save(tmp_path / "sd")
    back = SpectralDensity.load(path)
    assert np.allclose(back.cdf(r.grid, 1), r.cdf(r.grid, 1))
    import matplotlib
    matplotlib.use("Agg")
    ax = back.plot(1)
    assert ax.get_xlabel().startswith("eigenvalue")


def test_bad_input():
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    with pytest.raises(ValueError, match="spectrum"):
        spectral_density(model, _sign_law(), [0.0], spectrum="complex")
    with pytest.raises(TypeError, match="discrete"):
        spectral_density(model, DiagonalLaw([[1.0, 2.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]),
                         [0.0])
    law = UntiedLaw([gaussian_pair(1), gaussian_pair(1)])
    with pytest.raises(ValueError, match="levels"):
        spectral_density(model, law, [0.0], sizes=(20, 40), levels=100)
    with pytest.raises(ValueError, match="extrapolation"):
        spectral_density(model, law, [0.0], extrapolation="cubic")
    with pytest.raises(ValueError, match="tracers"):
        spectral_density(model, _sign_law(), [0.0], tracers=10**9)
    with pytest.raises(ValueError, match="letter"):
        spectral_density(model, _sign_law(), [0.0], letter=2)
    with pytest.raises(ValueError, match="sum to 1"):
        branch_law([(0.5, np.sqrt, np.sqrt)], (0.2, 1.8))
    with pytest.raises(ValueError, match="interval"):
        branch_law([(1.0, np.sqrt, np.sqrt)], (1.8, 0.2))
    with pytest.raises(ValueError, match="branch map"):
        spectral_density(model, branch_law([(1.0, lambda x: x[:2], lambda x: x[:2])], (0.2, 1.8)),
                         [0.0])


@pytest.mark.slow
def test_free_law_d_scan():
    """The finite-d slaved flow from Gaussian draws approaches the free spectral law:
    the Wasserstein distance at d = 400 is below the one at d = 100 (3 draws each)."""
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    law = UntiedLaw([gaussian_pair(1), gaussian_pair(1)])
    t = np.array([0.0, 0.5])
    r = spectral_density(model, law, t, sizes=(200, 400), rotations=4, levels=100, seed=3)
    w = {}
    for d in (100, 400):
        vals = []
        for s in range(3):
            fo = untied_flow(model, gaussian_init(model, d, seed=1000 * d + s), t, mode="slaved",
                             words=[], keep_pairs=True)
            U, V = fo.diagnostics["pairs"][-1][0]
            H = U @ V.T
            vals.append(wasserstein_distance(r, np.linalg.eigvalsh((H + H.T) / 2), -1))
        w[d] = np.mean(vals)
    assert w[400] < w[100] / 1.5


def test_the_public_spectral_density_dispatches_on_the_model():
    """``attndyn.spectral_density`` runs the model's own law: the untied one here (same
    numbers as the untied function), the tied one for a tied model, and refuses direct S."""
    import attndyn
    from attndyn.numeric.attention.base import CapabilityError
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    pub = attndyn.spectral_density(model, _sign_law(), [0.0, 0.2], tracers=101, n_grid=50)
    own = spectral_density(model, _sign_law(), [0.0, 0.2], tracers=101, n_grid=50)
    np.testing.assert_array_equal(pub.density, own.density)
    assert isinstance(pub, attndyn.SpectralDensity)
    tied = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    r = attndyn.spectral_density(tied, FreeInit([wishart(0.5), scalar(1)]), [0.0, 0.1],
                                 n_grid=10, tracers=101)
    assert r.params["method"] == "commuting" and r.status == 0
    with pytest.raises(CapabilityError, match="spectral law"):
        attndyn.spectral_density(attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2),
                                 None, [0.0])
    with pytest.raises(TypeError, match="model must be"):
        attndyn.spectral_density("tied", None, [0.0])
