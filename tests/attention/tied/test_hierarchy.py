"""The tied hierarchy (eq. 11) against its definition and against the matrix flow."""

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import attndyn
from attndyn.kernels.moments import word_traces
from attndyn.symbolic.hierarchy import tied_structure
from attndyn.symbolic.words import Alphabet, canonical

from conftest import random_psd


def definition_terms(K, trainable, M, words):
    """Eq. (11) term by term, with plain Python canonicalisation (the slow oracle)."""
    A = Alphabet(K)
    out = defaultdict(int)
    for w in words:
        n = len(w)
        ntr = sum(1 for a in w if a in trainable)
        if ntr:
            out[(w, w, "decay")] -= ntr
        if n + 1 > M:
            continue
        for p, k in enumerate(w):
            if k not in trainable:
                continue
            for l in range(K):
                for new in (w[:p] + (l, k) + w[p + 1:], w[:p] + (k, l) + w[p + 1:]):
                    out[(w, canonical(new, A), (k, l))] -= 1
    return {key: c for key, c in out.items() if c != 0}


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 3).flatmap(lambda K: st.tuples(
    st.just(K), st.sets(st.integers(0, K - 1)), st.integers(1, 7 if K < 3 else 5))))
def test_structure_equals_definition(args):
    K, trainable, M = args
    s = tied_structure(K, sorted(trainable), M)
    got = {(s.words[i], s.words[j], key): c for i, j, key, c in s.terms()}
    assert got == definition_terms(K, set(trainable), M, s.words)


def test_lengths_and_gather():
    s = tied_structure(2, [0], 4)
    assert s.words[:5] == [(0,), (1,), (0, 0), (0, 1), (1, 1)]
    assert list(s.gather) == [2, 3, 3, 4]
    assert list(tied_structure(2, [0], 1).gather) == [-1] * 4
    assert s.index((1, 0)) == 3 and s.index((1, 0, 0)) == s.index((0, 0, 1))
    with pytest.raises(ValueError, match="order"):
        s.index((0, 0, 0, 0, 0))


@settings(deadline=None, max_examples=15)
@given(st.integers(1, 3), st.data())
def test_rhs_is_trace_of_matrix_flow(K, data):
    """At any finite d, d/dt of Tr(word)/d under the matrix flow equals the hierarchy's
    right-hand side for words of length < M (exact projection, MATH.md)."""
    trainable = sorted(data.draw(st.sets(st.integers(0, K - 1), min_size=1)))
    gamma = data.draw(st.sampled_from([0.0, 0.7]))
    seed = data.draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    # a loss whose Gamma depends on q: sum of squares and a quartic
    def loss(G):
        e = sum((k + 1) * G[0, 0, k] for k in range(K))
        return e ** 2 + G[0, 0, 0] ** 4 / 10
    model = attndyn.TiedModel(K, trainable, loss, weight_decay=gamma)
    M = 5
    h = model.hierarchy(M)
    d = 7
    S = [random_psd(rng, d) for _ in range(K)]
    y = h.moments_from_matrices(S)
    dy = h.rhs(y)
    q = np.array([[np.trace(S[k] @ S[l]) / d for l in range(K)] for k in range(K)])
    Gm = model.gamma(q)
    dS = [np.zeros((d, d)) for _ in range(K)]
    for k in trainable:
        dS[k] = -sum(Gm[k, l] * (S[l] @ S[k] + S[k] @ S[l]) for l in range(K)) - gamma / 2 * S[k]
    for i, w in enumerate(h.words):
        if len(w) >= M:
            continue
        exact = 0.0
        for p in range(len(w)):
            mats = [S[a] if j != p else dS[a] for j, a in enumerate(w)]
            P = np.eye(d)
            for m in mats:
                P = P @ m
            exact += np.trace(P) / d
        assert dy[i] == pytest.approx(exact, rel=1e-10, abs=1e-12), w


@settings(deadline=None, max_examples=50)
@given(st.integers(1, 3).flatmap(lambda K: st.tuples(
    st.just(K), st.lists(st.integers(0, K - 1), min_size=1, max_size=7))), st.integers(0, 2**31))
def test_moments_from_matrices_equivalent_words(Kw, seed):
    K, w = Kw
    w = tuple(w)
    rng = np.random.default_rng(seed)
    S = [random_psd(rng, 5) for _ in range(K)]
    A = Alphabet(K)
    variants = [w[r:] + w[:r] for r in range(len(w))] + [A.transpose(w)]
    vals = word_traces(S, variants + [canonical(w, A)])
    assert np.allclose(vals, vals[0], rtol=1e-12, atol=1e-14)
    P = np.eye(5)
    for a in w:
        P = P @ S[a]
    assert vals[0] == pytest.approx(np.trace(P) / 5, rel=1e-12)


def test_moments_from_matrices_shared_prefix_matches_naive(d3_model):
    rng = np.random.default_rng(3)
    S = [random_psd(rng, 9), random_psd(rng, 9)]
    h = d3_model.hierarchy(8)
    y = h.moments_from_matrices(S)
    for i in rng.choice(h.n_moments, 20, replace=False):
        P = np.eye(9)
        for a in h.words[i]:
            P = P @ S[a]
        assert y[i] == pytest.approx(np.trace(P) / 9, rel=1e-12)


@pytest.mark.parametrize("integrator", ["taylor", "dopri5", "dop853"])
def test_kernel_reused_across_orders(d3_model, integrator):
    """One compiled kernel serves every order: no new specialisation is compiled."""
    import numpy as _np
    from attndyn.kernels import integrate as _rk, taylor as _tay
    rng = np.random.default_rng(0)
    S = [random_psd(rng, 10), random_psd(rng, 10)]
    r = d3_model.hierarchy(4).integrate(S, [0, 0.01], check=None, integrator=integrator)
    assert r.diagnostics["integrator"] == integrator
    kernel = (_tay.taylor_kernel if integrator == "taylor" else _rk.rk_kernel)(_np.uint8)
    n_sigs = len(kernel.signatures)
    for M in (5, 9, 13):
        d3_model.hierarchy(M).integrate(S, [0, 0.01], check=None, integrator=integrator)
    assert len(kernel.signatures) == n_sigs == 1


@pytest.mark.parametrize("name", ["d3-decay", "three-indices-quartic", "h2-teacher-student",
                                  "two-tokens-correlated"])
def test_fused_rhs_is_the_unfused_sum_bit_for_bit(name):
    """The fused kernel (slot table, unsigned indices) adds coef * g[ent] * y[src] in the same
    order per row as the unfused definition: pure IEEE arithmetic, so the same bits."""
    from golden import SCENARIOS
    sc = next(s for s in SCENARIOS if s.name == name)
    model = sc.model()
    h = model.hierarchy(sc.order)
    y = h.moments_from_matrices(sc.matrices())
    y = y * (1.0 + 0.1 * np.random.default_rng(1).standard_normal(y.size))
    dy = h.rhs(y)
    s = h.structure
    K = model.K
    q = np.array([[y[s.gather[k * K + l]] for l in range(K)] for k in range(K)])
    g = list(model.gamma(q).ravel()) + [model.weight_decay / 2.0]
    ent, coef, src, ip = s.ent.tolist(), s.coef.tolist(), s.src.tolist(), s.indptr.tolist()
    yl = y.tolist()
    for i in range(s.n_moments):
        acc = 0.0
        for t in range(ip[i], ip[i + 1]):
            acc += float(coef[t]) * g[ent[t]] * yl[src[t]]
        assert dy[i] == acc, (i, dy[i], acc)
