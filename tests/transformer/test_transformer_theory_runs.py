"""Paper 000 in its own regime: FLOP counts (Lemma E.1), Theorem E.2 under SGD, the
kernel predictor of Corollary E.3, the rate against depth, and the scaling experiment."""

import math

import numpy as np
import pytest

from attndyn.numeric.transformer import Transformer, build
from attndyn.numeric.transformer.flops import flops_breakdown, flops_per_sample
from attndyn.numeric.transformer.ntk import arccos_kernel, ntk_predictor, rate_vs_depth
from attndyn.numeric.transformer.regime_scaling import (exponential_phase, hessian_lambda_max,
                                                        scaling_empirical_figure)
from attndyn.numeric.transformer.sgd_theory import per_sample_gradients, sgd_rate_gap

S = dict(N=1, L=3, d=3, m=16, n=6, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
         token_norm="unit", n_test=32)


def test_flops_leading_term_is_ten_N_L_m_d():
    b = flops_breakdown(2, 4, 8, 64)
    # by hand (N 2, L 4, d 8, m 64): forward per layer 512 + 256 + 80 + 256 + 4096 + 256
    # + 4096 + 64 = 9616; backward per layer 4096 + 512 + 3 * 4096 + 256 + 80 + 256 + 512
    # + 256 + 256 + 1024 + 96 = 15536; plus 4 L d and 2 L d once
    assert b["forward"] == 2 * 9616 + 128 and b["backward"] == 2 * 15536 + 64
    # leading terms 10 N L m d + 3 N L m (the ReLU and its mask)
    big = flops_breakdown(3, 8, 16, 2 ** 16)
    assert abs(big["total"] / big["lemma_e1"] - (10 + 3 / 16)) < 0.01
    assert flops_per_sample(2, 4, 8, 64, backward=False) == b["forward"]
    with pytest.raises(ValueError, match="m must be"):
        flops_per_sample(1, 1, 1, 0)


def test_sgd_rate_gap_is_unbiased_with_the_exact_variance():
    student, data = build(S, 0)
    G = per_sample_gradients(student, data.X, data.Y)
    np.testing.assert_allclose(G.mean(0), student.loss_and_grad(data.X, data.Y)[1], rtol=1e-10,
                               atol=1e-12)
    r = sgd_rate_gap(student, data.X, data.Y, 2, lam=1e-3, n_batches=4000, seed=1)
    # sampled std within 5 % of the finite-population formula; Hoeffding above the quantile
    assert abs(r["std_sampled"] / r["std_exact"] - 1) < 0.05
    assert r["hoeffding"] >= r["quantile"]
    full = sgd_rate_gap(student, data.X, data.Y, 6, lam=1e-3, n_batches=10)
    assert full["quantile"] < 1e-9 * full["expected_rate"] and full["std_exact"] == 0
    with pytest.raises(ValueError, match="batch must be"):
        sgd_rate_gap(student, data.X, data.Y, 7, lam=1e-3)


def test_ntk_predictor_interpolates_and_kernel_matches_monte_carlo():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    w = rng.standard_normal((200000, 4))
    mc = (A @ B.T) * ((A @ w.T > 0).astype(float) @ (B @ w.T > 0).astype(float).T) / w.shape[0]
    np.testing.assert_allclose(arccos_kernel(A, B), mc, atol=0.02)
    X = rng.standard_normal((5, 3, 4))
    Y = rng.standard_normal((5, 3, 4))
    f = ntk_predictor(X, Y)
    np.testing.assert_allclose(f(X), Y, atol=1e-8)        # interpolates the training set


def test_rate_vs_depth_runs():
    sw = rate_vs_depth(S, [1, 2], T=0.2, seeds=1, n_eval=3)
    assert sw.status == 0 and np.all(sw["rate"] > 0) and np.all(sw["eq7_rate"] > 0)


def test_exponential_phase_and_hessian():
    t = np.linspace(0, 5, 40)
    e, r = exponential_phase(t, 1 + np.exp(-2 * t))
    assert e > 5 and abs(r - 2) < 0.2       # log(y - y_end) bends only near the end
    assert exponential_phase(t, 1 + t)[0] == 0.0
    student, data = build(S, 0)
    lmax = hessian_lambda_max(student, data.X, data.Y)
    assert math.isfinite(lmax) and lmax > 0


@pytest.mark.slow  # compiles the scaling-law ufuncs on a cold cache (about 20 s)
def test_scaling_empirical_mini(tmp_path):
    fig = scaling_empirical_figure("mini", steps=60, n_test=16)
    assert len(fig.claims) == 5 and "n2" in fig.curves and "envelope" in fig.curves
    paths = fig.save(tmp_path, png=False)
    assert paths["json"].endswith("scaling-empirical.json")
    with pytest.raises(ValueError, match="seeds"):
        scaling_empirical_figure("mini", seeds=0)
