"""The exact per-layer kernel K_nu (Jacobian Gram of the block) against finite
differences, Definition B.5 as its a_r -> 1 special case, and Lemma 4.1 with it."""

import numpy as np
import pytest

from attndyn.numeric.transformer import Transformer, build, lemma41
from attndyn.numeric.transformer.data import rms_normalise
from attndyn.numeric.transformer.kernel import (block_output, exact_kernel, kernel_eigenvalues,
                                                layer_kernel)


def _fd_jacobian(model, X, k, h=1e-5):
    """Central differences (one Richardson step) of vec(mu_k) in (vec U_k, vec W_k) at fixed
    block input: an (nLd, d^2 + d m) matrix."""
    Lam = model._forward(X).Lam[k]
    U0, W0 = model.U[k], model.W[k]
    cols = []
    for which, base in (("U", U0), ("W", W0)):
        for j in range(base.size):
            def mu(s):
                P = base.copy().ravel()
                P[j] += s
                P = P.reshape(base.shape)
                kw = {"U": P} if which == "U" else {"W": P}
                return block_output(model, Lam, k, **kw).ravel()
            d1 = (mu(h) - mu(-h)) / (2 * h)
            d2 = (mu(2 * h) - mu(-2 * h)) / (4 * h)
            cols.append((4 * d1 - d2) / 3)
    return np.array(cols).T


@pytest.mark.parametrize("N,L,d,m,n,layer,seed", [(1, 3, 3, 8, 2, 0, 0), (2, 3, 2, 6, 2, 1, 1),
                                                  (3, 2, 3, 5, 2, 1, 2)])
def test_exact_kernel_equals_finite_difference_gram(N, L, d, m, n, layer, seed):
    model = Transformer(N, L, d, m, 1.0, 1.0, 0.7, seed=seed)
    X = rms_normalise(np.random.default_rng(seed + 10).standard_normal((n, L, d)))
    # ReLU kinks: the steps (<= 2e-5) move every pre-activation by far less than its margin
    margin = float(np.abs(model._forward(X).Z[layer]).min())
    assert margin > 1e-3
    J = _fd_jacobian(model, X, layer)
    K_fd = J @ J.T
    K = exact_kernel(model, X, layer)
    assert K.shape == (n * L * d, n * L * d)
    err = np.abs(K - K_fd).max() / np.abs(K).max()
    assert err < 1e-7, err
    # the two parts are the U and W columns of the Jacobian
    JU = J[:, :d * d]
    np.testing.assert_allclose(exact_kernel(model, X, layer, part="U"), JU @ JU.T,
                               atol=1e-7 * np.abs(K).max())


def test_definition_b5_is_the_exact_kernel_with_every_a_r_replaced_by_ones():
    model = Transformer(2, 4, 3, 16, 1.0, 0.8, 0.5, seed=3)
    X = rms_normalise(np.random.default_rng(4).standard_normal((3, 4, 3)))
    for k in range(2):
        H = layer_kernel(model, X, k)
        K1 = exact_kernel(model, X, k, A=np.ones((16, 3)))
        np.testing.assert_allclose(K1, np.kron(H, np.ones((3, 3))), rtol=1e-12,
                                   atol=1e-13 * np.abs(H).max())
        # with the real A only the a = b diagonal of the W part agrees (a_rk^2 = 1)
        KW = exact_kernel(model, X, k, part="W")
        HW = layer_kernel(model, X, k, part="W")
        for a in range(3):
            np.testing.assert_allclose(KW[a::3, a::3], HW, rtol=1e-12, atol=1e-14)
        assert np.abs(KW - np.kron(HW, np.eye(3))).max() > 1e-3 * np.abs(HW).max()


def test_lemma41_with_the_exact_kernel_is_exact():
    s = dict(N=2, L=4, d=4, m=32, n=4, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
             token_norm="unit", E_scale=0.5)
    student, data = build(s, 0)
    r = lemma41(student, data.X, data.Y, kernel="exact")
    assert r["rel_gap"] < 1e-12 and r["rel_gap_exact"] < 1e-12
    assert r["rel_gap_definition"] > 1e-4          # Definition B.5's kernel is not exact
    r2 = lemma41(student, data.X, data.Y)
    assert r2["rel_gap"] == r2["rel_gap_definition"] == r["rel_gap_definition"]
    ev = kernel_eigenvalues(student, data.X, kernel="exact")
    assert len(ev) == 2 and all(np.isfinite(e["lambda"]) for e in ev)
    with pytest.raises(ValueError, match="kernel must be"):
        lemma41(student, data.X, data.Y, kernel="ntk")


def test_assumption_sweep_and_theorem55_report_both_kernels():
    from attndyn.numeric.transformer import assumption_sweep, theorem55, train
    s = dict(N=1, L=2, d=2, m=8, n=2, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
             token_norm="unit", n_test=8)
    sw = assumption_sweep(s, "m", [4, 16], seeds=2, kernel="exact")
    np.testing.assert_array_equal(sw["lambda_mean"], sw["lambda_mean_exact"])
    assert np.all(np.isfinite(sw["lambda_mean_definition"]))
    # nL = 4 > m = 4 is false, nL = 4 <= m: at m = 4 K^W may be PD; at nL > m it is singular
    sw2 = assumption_sweep(dict(s, n=4), "m", [2], seeds=2)
    assert sw2["fraction_pd_exact"][0] == 0.0              # n L = 8 > m = 2
    student, data = build(s, 0)
    res = train(student, data, T=0.5, n_eval=4)
    rep = theorem55(res, omega=1.0, eps=1.0, X=data.X, kernel="exact")
    assert rep["lambda"] == rep["lambda_exact"]
    assert set(rep) >= {"ratio_definition", "ratio_exact", "holds_exact"}
    rep2 = theorem55(res, lam=rep["lambda_definition"], omega=1.0, eps=1.0)
    assert rep2["ratio"] == pytest.approx(rep["ratio_definition"])
