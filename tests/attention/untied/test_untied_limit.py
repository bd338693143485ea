"""The untied d -> infinity limit (numeric/attention/untied/limit.py)."""

import math
import warnings

import numpy as np
import pytest

from attndyn.kernels.moments import word_traces
from attndyn.numeric.attention.tied.limit import limit_flow as public_limit_flow
from attndyn.numeric.attention.untied.coefficients import letter_mats
from attndyn.numeric.attention.untied.fastslow import untied_flow
from attndyn.numeric.attention.untied.limit import (DiagonalLaw, UntiedLaw, equivalent_pairs,
                                                    gaussian_pair, limit_flow)
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.symbolic.losses import mse_teacher_student


def _logistic(x, rho, tau):
    """|s|(tau) for d|s|/dtau = |s| (rho - 4 |s|), |s|(0) = x (docs/untied.md)."""
    if rho == 0.0:
        return x / (1 + 4 * x * tau)
    e = math.exp(rho * tau) if np.isscalar(tau) else np.exp(rho * tau)
    return rho * x * e / (rho + 4 * x * (e - 1))


def _sign_law(x, wx, c, p):
    """Student u = eps sqrt(x), v = sqrt(x); teacher u = zeta sqrt(c), v = sqrt(c); the four
    sign pairs (eps, zeta) with P(eps = zeta) = p, symmetric under the global flip."""
    us, vs, ut, vt, w = [], [], [], [], []
    for eps, zeta, pr in ((1, 1, p / 2), (-1, -1, p / 2), (1, -1, (1 - p) / 2),
                          (-1, 1, (1 - p) / 2)):
        us.append(eps * np.sqrt(x))
        vs.append(np.sqrt(x))
        ut.append(zeta * math.sqrt(c) * np.ones_like(x))
        vt.append(math.sqrt(c) * np.ones_like(x))
        w.append(pr * wx)
    cat = np.concatenate
    return DiagonalLaw([cat(us), cat(ut)], [cat(vs), cat(vt)], cat(w))


def _exact_rows(x, wx, c, p, gamma, tau):
    """tA = tB = E|s|, q1_11 = E s^2, q1_12 = E[s w] of the closed form (docs/untied.md)."""
    sp = _logistic(x[:, None], 4 * c - 2 * gamma, tau[None, :])    # eps = zeta
    sm = _logistic(x[:, None], -4 * c - 2 * gamma, tau[None, :])   # eps = -zeta
    tA = wx @ (p * sp + (1 - p) * sm)
    q11 = wx @ (p * sp ** 2 + (1 - p) * sm ** 2)
    q12 = c * (wx @ (p * sp - (1 - p) * sm))
    return tA, q11, q12


@pytest.mark.parametrize("gamma", [0.0, 0.3])
def test_commuting_exact_h1(gamma):
    """The per-node limit solver against the closed-form solution to 1e-10."""
    g, gw = np.polynomial.legendre.leggauss(40)
    x, wx = 1.0 + 0.8 * g, gw / 2          # uniform law on [0.2, 1.8]
    c, p = 0.7, 0.8
    model = UntiedModel(2, [0], mse_teacher_student("h1"), weight_decay=gamma)
    law = _sign_law(x, wx, c, p)
    tau = np.linspace(0.0, 1.0, 11)
    res = limit_flow(model, law, tau)
    assert res.status == 0 and res.params["method"] == "commuting"
    tA, q11, q12 = _exact_rows(x, wx, c, p, gamma, tau)
    for name, ref in (("tA_1", tA), ("tB_1", tA), ("q1_11", q11), ("q2_11", q11),
                      ("q1_12", q12), ("q2_12", q12)):
        assert np.abs(res.observable(name) - ref).max() < 1e-10, name
        assert res.error[name].max() < 1e-9
    assert np.abs(res.observable("m_1")).max() < 1e-12          # m* = m_2 = 0 for h1
    assert res.moment((0,)).max() < 1e-12                       # mu(M_1) stays 0
    if gamma == 0.0:  # the continuous law: the Gauss-Legendre nodes are exact to 1e-12
        from scipy.integrate import quad
        for j in (5, 10):
            ref = quad(lambda xx: p * _logistic(xx, 4 * c, tau[j])
                       + (1 - p) * _logistic(xx, -4 * c, tau[j]), 0.2, 1.8,
                       epsabs=1e-13, epsrel=1e-12)[0] / 1.6
            assert abs(res.observable("tA_1")[j] - ref) < 1e-10


def test_commuting_equals_diagonal_flow():
    """Equal weights on n nodes: the finite-d slaved flow of the diagonal pairs (h2, decay)."""
    rng = np.random.default_rng(0)
    n = 30
    model = UntiedModel(2, [0], mse_teacher_student("h2"), weight_decay=0.1)
    u, v = rng.standard_normal((2, n)), rng.standard_normal((2, n))
    law0 = DiagonalLaw(u, v)
    pairs = law0.pairs()
    law = DiagonalLaw(u, v, means=model.order_parameters(pairs)["m"])
    tau = np.linspace(0.0, 0.4, 5)
    res = limit_flow(model, law, tau, order=3)
    flow = untied_flow(model, pairs, tau, mode="slaved", order=3, rtol=1e-12, atol=1e-14)
    idx = [flow.names.index(nm) for nm in res.names]
    assert np.abs(flow.y[idx] - res.y).max() < 1e-8
    assert abs(law.moment((0, 3, 3)) - np.mean(u[0] * v[0] * v[0] ** 4)) < 1e-12


def test_gaussian_law_moments():
    """Planar-pairing moments of Gaussian pairs against finite-d draws (error ~ 1/d)."""
    model = UntiedModel(2, [0], mse_teacher_student("h2"))
    law = UntiedLaw([gaussian_pair(0.8, 0.5, scale_v=1.2), gaussian_pair(1.0, 2.0)])
    words = model.words(3)
    lim = law(words)
    assert law.moment((2,)) == pytest.approx(0.64) and law.moment((3,)) == pytest.approx(1.44)
    assert law.moment((2, 2)) == pytest.approx(0.64 ** 2 * (1 + 1 / 0.5))
    assert law.moment((0, 1)) == pytest.approx(0.64 * 1.44 / 0.5)  # q1 = tA tB / aspect
    assert law.moment((0, 0)) == pytest.approx(0.0)          # q2 = 0 (free U, V)
    rng = np.random.default_rng(1)
    d = 400
    pairs = []
    for b in law.blocks:
        r = int(b.aspect * d)
        pairs.append((rng.standard_normal((d, r)) * b.scale_u / math.sqrt(r),
                      rng.standard_normal((d, r)) * b.scale_v / math.sqrt(r)))
    fin = word_traces(letter_mats(pairs)[0], words)
    nz = np.abs(lim) > 1e-12
    assert np.max(np.abs(fin - lim)[nz] / np.abs(lim[nz])) < 0.05


def test_equivalent_pairs_law():
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    law = UntiedLaw([gaussian_pair(1.0, mean=0.3), gaussian_pair(0.7, 0.5)])
    pairs = equivalent_pairs(model, law, 64, 3)
    op = model.order_parameters(pairs)
    assert op["m"] == pytest.approx([0.3, 0.0], abs=1e-12)
    assert op["tA"] == pytest.approx([1.0, 0.49], rel=1e-3)
    assert pairs[1][0].shape == (64, 32)


def test_equivalents_and_dispatch():
    """Richardson over rotated equivalents; the public limit_flow dispatches on the model."""
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    law = UntiedLaw([gaussian_pair(1.0), gaussian_pair(1.0)])
    tau = np.linspace(0.0, 0.2, 3)
    res = public_limit_flow(model, law, tau, sizes=(24, 48), rotations=2, seed=1)
    assert res.status == 0 and res.params["method"] == "equivalents"
    assert np.all(np.isfinite(res.diagnostics["error"]))
    # tA starts at the law's 1 exactly (bin-mean spectra) and the overlap grows (h1 signal)
    assert res.observable("tA_1")[0] == pytest.approx(1.0, abs=1e-12)
    assert res.observable("q1_12")[-1] > 0.05


def test_bad_input():
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    with pytest.raises(TypeError, match="law"):
        limit_flow(model, [1, 2], [0, 1])
    with pytest.raises(ValueError, match="K = 2"):
        limit_flow(model, UntiedLaw([gaussian_pair()]), [0, 1])
    with pytest.raises(ValueError, match="aspect"):
        gaussian_pair(aspect=0)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        DiagonalLaw([[1.0, 2.0]], [[1.0, 1.0]], [0.3, 0.3])
    with pytest.raises(ValueError, match="method"):
        limit_flow(model, UntiedLaw([gaussian_pair()] * 2), [0, 1], method="commuting")
    with pytest.raises(ValueError, match="sizes"):
        limit_flow(model, UntiedLaw([gaussian_pair()] * 2), [0, 1], sizes=(10,))
