"""Appendix B examples B.2-B.4 as library losses (issue 18, part 6).

For each example:

- the loss expression is the network's loss averaged over its latent randomness (gates,
  pointers): at fixed tokens ``X`` the SymPy loss at ``G(X)`` equals the mean of the
  explicit forward pass over many latent draws (4 standard errors);
- Gaussian equivalence (Theorem 1): the mean of the forward pass over sampled tokens at
  finite ``d`` equals the untied potential ``Phi(m, q1, q2)`` of the effective matrices
  within ``4 sqrt(se^2 + err^2)`` (``se`` the Monte-Carlo standard error, ``err`` the
  potential's quadrature error estimate); a perturbed teacher is far outside it (the
  check can fail);
- spec strings go through the safe parser;
- one dynamics run each (slow): the loss on the tied parameterisation, SGD against the
  finite-d matrix flow from the same start.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from attndyn.symbolic.gaussian import g_array
from attndyn.symbolic.losses import (autoregressive, bilinear_order_parameters,
                                     loss_from_spec, multi_step_reasoning, multiple_location)


def _rand(rng, d, s=1.5):
    return rng.standard_normal((d, d)) * s / math.sqrt(d)


def _example(name, d, rng):
    """(loss, L, effective matrices, forward(X, g), perturbed matrices, perturbed forward)"""
    if name == "B.2":
        loss, L = autoregressive(2, 1), 2
        W, M, V, Vs = ([_rand(rng, d)] for _ in range(4))
        mats = loss.extra["effective_matrices"](W, M, V, Vs)
        fw = lambda X, g: loss.extra["forward"](X, W, M, V, Vs, g)  # noqa: E731
        bad = lambda X, g: loss.extra["forward"](X, W, M, V, [1.5 * Vs[0]], g)  # noqa: E731
        bmats = loss.extra["effective_matrices"](W, M, V, [1.5 * Vs[0]])
    elif name == "B.3":
        loss, L = multiple_location(2, "tanh"), 2
        W, Ws = _rand(rng, d), _rand(rng, d)
        mats = [W, Ws]
        fw = lambda X, g: loss.extra["forward"](X, W, Ws, g)  # noqa: E731
        bad = lambda X, g: loss.extra["forward"](X, 6.0 * W, Ws, g)  # noqa: E731
        bmats = [6.0 * W, Ws]
    else:
        loss, L = multi_step_reasoning(3), 3
        ms = [_rand(rng, d) for _ in range(6)]
        mats = ms
        fw = lambda X, g: loss.extra["forward"](X, *ms, g)  # noqa: E731
        bad = lambda X, g: loss.extra["forward"](X, *ms[:5], 2.0 * ms[5], g)  # noqa: E731
        bmats = ms[:5] + [2.0 * ms[5]]
    return loss, L, mats, fw, bmats, bad


def _loss_at(loss, L, K, G_values):
    G = g_array(L, K)
    expr = loss(G)
    f = sp.lambdify([G[i, j, k] for i in range(L) for j in range(L) for k in range(K)], expr,
                    "numpy")
    return float(f(*G_values.ravel()))


@pytest.mark.parametrize("name", ["B.2", "B.3", "B.4"])
def test_loss_is_the_forward_pass_averaged_over_latents(name):
    """At fixed tokens, loss(G(X)) = E_latent[forward(X)] (the expansion in the forms)."""
    d = 30
    rng = np.random.default_rng(2)
    loss, L, mats, fw, _, _ = _example(name, d, rng)
    K = len(mats)
    X = rng.standard_normal((L, d))
    Gv = np.array([[[X[i] @ M @ X[j] / math.sqrt(d) for M in mats] for j in range(L)]
                   for i in range(L)])
    exact = _loss_at(loss, L, K, Gv)
    g = np.random.default_rng(3)
    vals = np.array([fw(X, g) for _ in range(6000)])
    se = vals.std() / math.sqrt(vals.size)
    assert abs(vals.mean() - exact) <= 4 * se + 1e-12, (vals.mean(), exact, se)


@pytest.mark.parametrize("name", ["B.2", "B.3", "B.4"])
def test_forward_mean_matches_the_gaussian_equivalent_potential(name):
    """Theorem 1 on the example: E_X[forward] at d = 150 against Phi of the effective
    matrices' (m, q1, q2), at the example's weights and at perturbed ones, whose Phi differs
    by more than the tolerance (so a wrong potential would be caught)."""
    from attndyn.numeric.attention.potentials import untied_potential
    d, N = 150, 3000
    rng = np.random.default_rng(5)
    loss, L, mats, fw, bmats, bad = _example(name, d, rng)
    K = len(mats)
    pot = untied_potential(loss, K, L, tol=5e-3, method="rqmc", seed=1)
    phi = pot.phi_at(**bilinear_order_parameters(mats))
    err = float(pot.error)
    g = np.random.default_rng(6)
    vals = np.array([fw(g.standard_normal((L, d)), g) for _ in range(N)])
    se = vals.std() / math.sqrt(N)
    tol = 4 * math.hypot(se, err)
    assert abs(vals.mean() - phi) <= tol, (vals.mean(), phi, se, err)
    phi_b = pot.phi_at(**bilinear_order_parameters(bmats))
    badv = np.array([bad(g.standard_normal((L, d)), g) for _ in range(N)])
    tol_b = 4 * math.hypot(badv.std() / math.sqrt(N), err)
    assert abs(badv.mean() - phi_b) <= tol_b, (badv.mean(), phi_b)
    assert abs(phi_b - phi) > max(tol, tol_b)


def test_bilinear_order_parameters_are_the_exact_moments():
    d = 40
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    par = bilinear_order_parameters([A, B])
    assert par["m"][0] == pytest.approx(np.trace(A) / math.sqrt(d))
    assert par["q1"][0, 1] == pytest.approx(np.sum(A * B) / d)
    assert par["q2"][0, 1] == pytest.approx(np.trace(A @ B) / d)
    with pytest.raises(ValueError, match="square"):
        bilinear_order_parameters([A, B[:, :3]])


def test_specs_and_bad_input():
    assert loss_from_spec("autoregressive:heads=1", 5, 2)[0].name == "autoregressive:L=2,heads=1"
    assert loss_from_spec("multilocation:act=h2", 2, 2)[0].name == "multilocation:L=2,act=h2"
    assert loss_from_spec("reasoning", 6, 3)[0].name == "reasoning:L=3"
    for spec, K, L, frag in [("autoregressive:heads=1", 4, 2, "needs K >= 5"),
                             ("autoregressive:heads=1", 6, 2, "exactly K = 5"),
                             ("autoregressive:heads=99", 5, 2, "heads"),
                             ("multilocation:act=__import__('os')", 2, 2, "unknown activation"),
                             ("multilocation", 2, 4, "L in"),
                             ("reasoning", 6, 1, "L in"),
                             ("reasoning:heads=2", 6, 3, "unknown options")]:
        with pytest.raises(ValueError, match=frag):
            loss_from_spec(spec, K, L)
    with pytest.raises(ValueError, match="heads"):
        autoregressive(2, 0)
    with pytest.raises(ValueError, match="polarity"):
        multiple_location(2, polarity=[[1, 0], [1, 1]])
    with pytest.raises(ValueError, match="L"):
        multi_step_reasoning(1)


# -- one dynamics run each (slow: the numeric potentials make every flow step a quadrature) -----
@pytest.mark.slow
@pytest.mark.parametrize("name", ["B.2", "B.3", "B.4"])
def test_dynamics_tied_sgd_tracks_the_matrix_flow(name):
    """The example's loss on the tied parameterisation (every form S_k = W_k W_k^T, the
    student forms trainable): SGD against the finite-d matrix flow from the same factors,
    t in [0, 0.3], d = 40, eta = 0.02, B = 64. Named effects: the update noise
    (eta d / B = 0.0125), the finite-d non-Gaussian correction and the quadrature error."""
    from attndyn.numeric.attention.potentials import tied_potential
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.numeric.attention.training import sgd
    loss, L = {"B.2": (autoregressive(2, 1), 2), "B.3": (multiple_location(2), 2),
               "B.4": (multi_step_reasoning(3), 3)}[name]
    K = loss.min_K
    st = loss.extra["student_forms"]
    pot = tied_potential(loss, K, L, tol=5e-3, method="rqmc", seed=3)
    m = TiedModel(K, st, loss, L=L, potential=pot)
    d = 40
    W = m.gaussian_init(d, scale=0.7, seed=1)
    te = np.linspace(0, 0.3, 4)
    fl = m.matrix_flow([w @ w.T for w in W], te, order=2, rtol=1e-5, atol=1e-8)
    assert fl.status == 0, fl.message
    runs = [sgd(m, W, eta=0.02, batch=64, t_eval=te, seed=s) for s in (2, 3)]
    moved = 0.0
    for w in [(k,) for k in st] + [(st[0], k) for k in range(K)]:
        f = fl.moment(w)
        s = np.mean([r.moment(w) for r in runs], axis=0)
        moved = max(moved, abs(f[-1] - f[0]))
        assert np.max(np.abs(s - f)) <= 0.02 * max(1.0, np.max(np.abs(f))), (w, f, s)
    assert moved > 0.02      # the flow moved: the comparison is not of two constants
