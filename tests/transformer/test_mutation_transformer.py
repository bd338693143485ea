"""Paper 000's transformer: checks that a planted bug would fail (issue 25, item 4), each
against a computation written here:

- Lemma B.4 part 3 as printed (``form="lemma"``), transcribed literally at N = 2, L = 4;
- Assumption 5.1's ``lambda = lambda_min(H'/omega)`` and Theorem 5.5's ``alpha = lambda /
  omega`` at ``omega = 0.5`` (at ``omega = 1`` a missing or inverted ``/omega`` is invisible).
"""

import math

import numpy as np
import pytest

from attndyn.numeric.core.results import Trajectory
from attndyn.numeric.transformer import Transformer, build, theorem55, train
from attndyn.numeric.transformer.data import rms_normalise
from attndyn.numeric.transformer.gradients import lemma_adjoints
from attndyn.numeric.transformer.kernel import assumption_lambda, kernel_eigenvalues


def _xy(n, L, d, seed=1):
    rng = np.random.default_rng(seed)
    return rms_normalise(rng.standard_normal((n, L, d)), "unit"), rng.standard_normal((n, L, d))


def test_lemma_b4_part3_as_printed_literal_transcription():
    """delta_{2,p} = (2 eps / n)(F_p - Y_p) and delta_{1,p} = (I + G_p) delta_{2,p} with
    G_p = c (sigma_{p,l} I + kappa U Lambda^T diag(1 - e_l/2) J_p Lambda) W D_p A, every
    factor built as a matrix from block 2's attention row sigma_p = softmax row l,
    J_p = diag(sigma_p) - sigma_p sigma_p^T, o_p = Lambda^T sigma_p, D_p = diag(1{W^T o_p > 0})."""
    N, L, d, m, n = 2, 4, 5, 12, 3
    mdl = Transformer(N, L, d, m, eps=0.8, omega=0.7, kappa=0.6, seed=4)
    X, Y = _xy(n, L, d, seed=5)
    c = mdl._forward(X)
    deltas = lemma_adjoints(mdl, c, Y, form="lemma")
    c_ = mdl.omega / math.sqrt(m)
    k = 1
    U, W, A = mdl.U[k], mdl.W[k], mdl.A[k]
    assert W.shape == (d, m) and A.shape == (m, d)
    d2 = (2.0 * mdl.eps / n) * (c.F - Y)
    np.testing.assert_allclose(deltas[1], d2, rtol=1e-13, atol=1e-15)
    want = np.empty_like(d2)
    for i in range(n):
        Lam = c.Lam[k][i]                       # L x d, the input of block 2
        for l in range(L):
            sig = c.P[k][i, l]
            assert sig.sum() == pytest.approx(1.0)
            J = np.diag(sig) - np.outer(sig, sig)
            o = Lam.T @ sig
            Dp = np.diag((W.T @ o > 0).astype(float))
            half = np.eye(L)
            half[l, l] = 0.5
            G = c_ * (sig[l] * np.eye(d) + mdl.kappa * U @ Lam.T @ half @ J @ Lam) @ W @ Dp @ A
            want[i, l] = (np.eye(d) + G) @ d2[i, l]
    np.testing.assert_allclose(deltas[0], want, rtol=1e-11, atol=1e-14 * np.abs(want).max())
    # the printed form differs from the exact adjoint here (L > 1, N > 1)
    exact = lemma_adjoints(mdl, c, Y, form="exact")[0]
    assert np.abs(exact - want).max() > 1e-3 * np.abs(want).max()


def _lambda_by_definition(mdl, X):
    """min over blocks of lambda_min(H'_nu) / omega, H' = <beta_p, beta_q> with beta_p =
    (omega / sqrt m) o_p (x) 1{W^T o_p > 0} (Definition B.5, Assumption 5.1)."""
    c = mdl.hidden(X)
    n, L = X.shape[0], X.shape[1]
    lams = []
    for k in range(mdl.N):
        W = mdl.W[k]
        betas = []
        for p in range(n * L):
            i, l = divmod(p, L)
            o = c.Lam[k][i].T @ c.P[k][i, l]
            ind = (W.T @ o > 0).astype(float)
            betas.append(mdl.omega / math.sqrt(mdl.m) * np.kron(o, ind))
        Bm = np.array(betas)
        lams.append(np.linalg.eigvalsh(Bm @ Bm.T)[0] / mdl.omega)
    return min(lams), lams


def test_assumption_lambda_divides_by_omega():
    """At omega = 0.5 (H' scales as omega^2, lambda as omega): the per-block lambda and
    Assumption 5.1's minimum against the Gram matrix of the betas divided by omega."""
    mdl = Transformer(2, 2, 3, 16, eps=1.0, omega=0.5, kappa=0.4, seed=3)
    X, _ = _xy(2, 2, 3, seed=6)
    lam, per = _lambda_by_definition(mdl, X)
    assert lam > 1e-6
    ev = kernel_eigenvalues(mdl, X)
    for e, want in zip(ev, per):
        assert e["lambda"] == pytest.approx(want, rel=1e-9)
        assert e["Hprime"] == pytest.approx(want * mdl.omega, rel=1e-9)
    assert assumption_lambda(mdl, X) == pytest.approx(lam, rel=1e-9)


def test_theorem55_alpha_is_lambda_over_omega():
    """L(t) = exp(-2 t), lam = 0.5, omega = 0.25, eps = 1: alpha = lam/omega = 2, so the
    predicted rate is 2 and the bound holds with ratio 1 (a missing /omega gives rate 0.5,
    an inverted one 0.125)."""
    t = np.linspace(0, 2, 9)
    traj = Trajectory(t=t, y=np.exp(-2 * t)[None], names=["loss"])
    out = theorem55(traj, lam=0.5, omega=0.25, eps=1.0)
    assert out["alpha"] == pytest.approx(2.0, rel=1e-12)
    assert out["predicted_rate"] == pytest.approx(2.0, rel=1e-12)
    assert out["ratio"] == pytest.approx(1.0, rel=1e-9)
    out = theorem55(traj, lam=0.5, omega=0.25, eps=0.5)
    assert out["predicted_rate"] == pytest.approx(0.5, rel=1e-12)


def test_theorem55_on_a_run_at_omega_half():
    """A short training run at omega = 0.5: the lambda theorem55 measures at theta(0) from
    the inputs is the definition's (Gram of the betas / omega), and its rate lambda/omega
    eps^2."""
    s = dict(N=1, L=2, d=2, m=8, n=2, eps=1.0, omega=0.5, kappa="1/sqrt(m)", xi=0.1,
             token_norm="unit", n_test=8)
    student, data = build(s, 0)
    lam0, _ = _lambda_by_definition(student, data.X)
    res = train(student, data, T=0.2, n_eval=3)
    rep = theorem55(res, omega=0.5, eps=1.0, X=data.X)
    assert rep["lambda_definition"] == pytest.approx(lam0, rel=1e-9)
    assert rep["predicted_rate"] == pytest.approx(lam0 / 0.5, rel=1e-9)
