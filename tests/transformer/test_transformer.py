"""Paper 000's transformer: forward map vs an independent transcription of
eq. (1), the compacted output of section 4.1, Lemma B.4's gradients against
central finite differences and the reverse-mode chain rule, bad input."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attndyn
from attndyn.numeric.transformer import (Transformer, finite_difference_gradients,
                                         good_scalings, lemma_gradients, relative_error)
from attndyn.numeric.transformer.data import rms_normalise


def _model(N=2, L=4, d=5, m=16, seed=0, **kw):
    args = dict(eps=0.7, omega=0.9, kappa=0.5)
    args.update(kw)
    return Transformer(N, L, d, m, seed=seed, **args)


def _xy(n, L, d, seed=1, scale=0.5):
    rng = np.random.default_rng(seed)
    X = rms_normalise(rng.standard_normal((n, L, d)), "unit")
    return X, scale * rng.standard_normal((n, L, d))


def transcribe_eq1(X, Us, Ws, As, E, eps, omega, kappa):
    """Eq. (1) written out sequence by sequence, token by token."""
    out = np.empty_like(X)
    L, d = X.shape[1:]
    m = Ws[0].shape[1]
    for i in range(X.shape[0]):
        H = X[i] + E
        for U, W, A in zip(Us, Ws, As):
            new = np.empty_like(H)
            for l in range(L):
                scores = np.array([kappa * H[l] @ U @ H[j] if j <= l else -np.inf
                                   for j in range(L)])
                w = np.exp(scores - scores[: l + 1].max())
                w /= w.sum()
                o = sum(w[j] * H[j] for j in range(L))
                act = np.array([max(o @ W[:, r], 0.0) for r in range(m)])
                new[l] = omega / math.sqrt(m) * (act @ A) + H[l]
            H = new
        out[i] = eps * H
    return out


@pytest.mark.parametrize("N,L", [(1, 1), (2, 4), (3, 6)])
def test_forward_matches_transcription_and_compact_form(N, L):
    d, m = 4, 12
    mdl = _model(N, L, d, m, seed=3)
    X, _ = _xy(3, L, d)
    p = mdl.parameters()
    ref = transcribe_eq1(X, [q["U"] for q in p], [q["W"] for q in p], [q["A"] for q in p],
                         mdl.E, mdl.eps, mdl.omega, mdl.kappa)
    F = mdl.forward(X)
    np.testing.assert_allclose(F, ref, rtol=1e-12, atol=1e-12)
    # section 4.1: F_p = eps sum_{nu=0}^N mu_{nu,p}, rows p = i L + l
    np.testing.assert_allclose(mdl.compact_output(X), F.reshape(-1, d), rtol=1e-12, atol=1e-12)
    c = mdl.hidden(X)
    assert len(c.Lam) == N + 1 and c.P[0].shape == (3, L, L)
    # causal: attention scores vanish above the diagonal and rows sum to 1
    assert np.all(np.triu(c.P[-1][0], 1) == 0)
    np.testing.assert_allclose(c.P[-1].sum(-1), 1.0, rtol=1e-14)


def test_loss_is_lemma_b3():
    mdl = _model()
    X, Y = _xy(4, 4, 5)
    F = mdl.forward(X)
    assert mdl.loss(X, Y) == pytest.approx(np.sum((F - Y) ** 2) / 4, rel=1e-14)


def _fd_subset(mdl, X, Y, idx, h):
    """Central differences (one Richardson step) of L in the coordinates idx,
    refusing coordinates whose step changes a ReLU pattern."""
    th0 = mdl.theta()
    m2 = mdl.copy()
    pattern0 = [z > 0 for z in mdl._forward(X).Z]

    def L_at(th):
        m2.set_theta(th)
        c = m2._forward(X)
        same = all(np.array_equal(z > 0, p) for z, p in zip(c.Z, pattern0))
        R = c.F - Y
        return float(np.vdot(R, R) / X.shape[0]), same

    out, keep = [], []
    for j in idx:
        e = np.zeros_like(th0)
        e[j] = h
        vals = [L_at(th0 + s * e) for s in (1, -1, 2, -2)]
        if not all(v[1] for v in vals):
            continue
        d1 = (vals[0][0] - vals[1][0]) / (2 * h)
        d2 = (vals[2][0] - vals[3][0]) / (4 * h)
        out.append((4 * d1 - d2) / 3)
        keep.append(j)
    return np.asarray(out), np.asarray(keep, dtype=int)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.sampled_from([1, 2, 3]), L=st.sampled_from([1, 4, 8]), d=st.integers(4, 16),
       m=st.sampled_from([8, 32, 256]), seed=st.integers(0, 2 ** 16),
       eps=st.floats(0.2, 1.5), omega=st.floats(0.2, 1.5))
def test_gradients_match_finite_differences(N, L, d, m, seed, eps, omega):
    mdl = Transformer(N, L, d, m, eps=eps, omega=omega, kappa=1 / math.sqrt(m), seed=seed)
    X, Y = _xy(2, L, d, seed=seed + 1)
    g = mdl.gradients(X, Y)
    flat = np.concatenate([np.concatenate([q["U"].ravel(), q["W"].ravel()]) for q in g])
    rng = np.random.default_rng(seed)
    # coordinates from every layer's U and W
    dd, dm = d * d, d * m
    idx = []
    for k in range(N):
        off = k * (dd + dm)
        idx += list(off + rng.choice(dd, 6, replace=False))
        idx += list(off + dd + rng.choice(dm, 10, replace=False))
    fd, keep = _fd_subset(mdl, X, Y, idx, h=1e-4)
    assert keep.size >= len(idx) // 2  # most coordinates are away from kinks
    ref = flat[keep]
    err = np.linalg.norm(fd - ref) / max(np.linalg.norm(ref), 1e-300)
    assert err < 1e-6, err
    # directional derivative along the gradient (all coordinates at once)
    v = flat / np.linalg.norm(flat)
    for h in (1e-5, 1e-6, 1e-7):   # a shorter step if this one crosses a ReLU kink
        fdv, kv = _fd_subset_dir(mdl, X, Y, v, h)
        if kv:
            break
    assert kv, "every step along the gradient crosses a ReLU kink"
    assert abs(fdv - flat @ v) <= 1e-6 * np.linalg.norm(flat)


def _fd_subset_dir(mdl, X, Y, v, h):
    th0 = mdl.theta()
    m2 = mdl.copy()
    p0 = [z > 0 for z in mdl._forward(X).Z]
    vals = []
    for s in (1, -1, 2, -2):
        m2.set_theta(th0 + s * h * v)
        c = m2._forward(X)
        if not all(np.array_equal(z > 0, p) for z, p in zip(c.Z, p0)):
            return 0.0, False
        R = c.F - Y
        vals.append(float(np.vdot(R, R) / X.shape[0]))
    d1 = (vals[0] - vals[1]) / (2 * h)
    d2 = (vals[2] - vals[3]) / (4 * h)
    return (4 * d1 - d2) / 3, True


@pytest.mark.parametrize("N,L", [(1, 4), (2, 1), (2, 4), (3, 8)])
def test_formula_gradients_equal_reverse_mode(N, L):
    """Lemma B.4 parts 1-2 with the corrected part 3 == the op-by-op chain rule."""
    mdl = _model(N, L, 6, 20, seed=7)
    X, Y = _xy(3, L, 6)
    assert relative_error(lemma_gradients(mdl, X, Y, form="exact"),
                          mdl.gradients(X, Y)) < 1e-12


def test_full_finite_differences_small():
    mdl = _model(2, 3, 3, 6, seed=11)
    X, Y = _xy(2, 3, 3)
    fd = finite_difference_gradients(mdl, X, Y, h=1e-4)
    assert relative_error(fd, mdl.gradients(X, Y)) < 1e-8


def test_lemma_form_exact_only_for_one_layer_or_one_token():
    X4, Y4 = _xy(3, 4, 6)
    X1, Y1 = _xy(3, 1, 6)
    for mdl, X, Y in ((_model(1, 4, 6, 20), X4, Y4), (_model(3, 1, 6, 20), X1, Y1)):
        assert relative_error(mdl.gradients(X, Y, form="lemma"), mdl.gradients(X, Y)) < 1e-12
    mdl = _model(2, 4, 6, 20)
    gap = relative_error(mdl.gradients(X4, Y4, form="lemma"), mdl.gradients(X4, Y4))
    assert gap > 1e-3  # the printed part 3 drops the cross-token paths
    # the last layer's gradient is exact in both forms (delta_N is right)
    gl, ge = mdl.gradients(X4, Y4, form="lemma"), mdl.gradients(X4, Y4)
    assert relative_error([gl[-1]], [ge[-1]]) < 1e-12


def test_parameters_roundtrip_and_save(tmp_path):
    mdl = _model(seed=5)
    p = mdl.parameters()
    assert [sorted(q) for q in p] == [["A", "U", "W"]] * 2
    assert set(np.unique(p[0]["A"])) <= {-1.0, 1.0}
    other = _model(seed=6)
    other.set_parameters(p)
    X, _ = _xy(2, 4, 5)
    np.testing.assert_array_equal(other.forward(X), mdl.forward(X))
    th = mdl.theta()
    assert th.size == mdl.n_params == 2 * (16 * 5 + 25)
    other.set_theta(th + 1.0)
    other.set_theta(th)
    np.testing.assert_array_equal(other.forward(X), mdl.forward(X))
    path = mdl.save(tmp_path / "m")
    back = Transformer.load(path)
    np.testing.assert_array_equal(back.forward(X), mdl.forward(X))
    assert back.config() == mdl.config()


def test_seed_reproducible_and_public_api():
    a = attndyn.Transformer(2, 3, 4, 8, 1.0, 1.0, 0.5, seed=np.random.SeedSequence(4))
    b = attndyn.Transformer(2, 3, 4, 8, 1.0, 1.0, 0.5, seed=np.random.SeedSequence(4))
    np.testing.assert_array_equal(a.theta(), b.theta())
    X, Y = _xy(2, 3, 4)
    g = a.gradients(X, Y)
    assert len(g) == 2 and g[0]["U"].shape == (4, 4) and g[1]["W"].shape == (4, 8)
    H = a.kernel(X, 1)
    assert H.shape == (6, 6)


def test_good_scalings():
    g = good_scalings(2, 4, 8, 64, omega_const=1.0, B=1.0)
    assert g["kappa"] == pytest.approx(1 / 8)
    assert g["omega"] == pytest.approx(1 / (2 * 16 * 8 ** 2.5))
    g2 = good_scalings(2, 4, 8, 64, omega_const=1.0, delta=0.05, b_const=1.0)
    assert g2["B"] == pytest.approx(math.sqrt(math.log(4 * 64 * 8 / 0.05)))
    with pytest.raises(ValueError, match="B"):
        good_scalings(2, 4, 8, 64, omega_const=1.0)


@pytest.mark.parametrize("kw,match", [
    (dict(m=0), "m must be"), (dict(eps=0.0), "eps"), (dict(eps=-1.0), "eps"),
    (dict(eps=float("nan")), "eps"), (dict(omega=0.0), "omega"), (dict(kappa=-2.0), "kappa"),
    (dict(mask="none"), "mask must be 'causal'"), (dict(mask=None), "mask"),
    (dict(N=0), "N must be"), (dict(L=1.5), "L must be"),
])
def test_bad_constructor_arguments(kw, match):
    args = dict(N=2, L=4, d=5, m=8, eps=1.0, omega=1.0, kappa=0.5)
    args.update(kw)
    with pytest.raises((ValueError, TypeError), match=match):
        Transformer(**args, seed=0)


def test_bad_data():
    mdl = _model()
    X, Y = _xy(2, 4, 5)
    with pytest.raises(ValueError, match=r"X must have shape \(n, L, d\) = \(n, 4, 5\)"):
        mdl.forward(X[:, :3])
    with pytest.raises(ValueError, match="X must have shape"):
        mdl.forward(X[..., :4])
    with pytest.raises(ValueError, match="Y must"):
        mdl.loss(X, Y[:1])
    with pytest.raises(ValueError, match="Y must have shape"):
        mdl.loss(X, Y[:, :2])
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="X must be finite"):
        mdl.forward(bad)
    badY = Y.copy()
    badY[1, 2, 3] = np.inf
    with pytest.raises(ValueError, match="Y must be finite"):
        mdl.gradients(X, badY)
    with pytest.raises(ValueError, match="form"):
        mdl.gradients(X, Y, form="paper")
    with pytest.raises(ValueError, match="layer must be in"):
        mdl.kernel(X, 2)
    with pytest.raises(ValueError, match=r"params\[0\]\['W'\]"):
        mdl.set_parameters([{"U": np.zeros((5, 5)), "W": np.zeros((5, 3))}] * 2)
