"""Words: canonical forms, necklace/bracelet enumeration, counts (issue 2, item 2)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attndyn.symbolic.words import (Alphabet, bracelet_count, canonical, canonical_codes,
                                    canonical_words, count_canonical, encode, least_rotation,
                                    necklaces)


def test_bracelet_numbers_k2():
    # OEIS A000029
    assert [bracelet_count(n, 2) for n in range(1, 11)] == [2, 3, 4, 6, 8, 13, 18, 30, 46, 78]
    assert [count_canonical(n, 2) for n in range(1, 13)] == [bracelet_count(n, 2) for n in range(1, 13)]


@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_counts_match_bracelet_sums(K):
    M = {1: 12, 2: 12, 3: 7, 4: 5}[K]
    words = canonical_words(M, K)
    assert len(words) == sum(bracelet_count(n, K) for n in range(1, M + 1))
    assert len(set(words)) == len(words)
    assert words == sorted(words, key=lambda w: (len(w), w))


def test_necklaces_are_least_rotations():
    for n in range(1, 9):
        got = list(necklaces(n, 3))
        brute = sorted({least_rotation(w) for w in itertools.product(range(3), repeat=n)})
        assert got == brute


@pytest.mark.parametrize("inv", [None, (1, 0), (1, 0, 2), (0, 2, 1, 3)])
def test_enumeration_equals_brute_force_classes(inv):
    K = 2 if inv is None else len(inv)
    A = Alphabet(K, inv)
    for n in range(1, 7):
        brute = sorted({canonical(w, A) for w in itertools.product(range(K), repeat=n)})
        assert canonical_words(n, A, min_len=n) == brute


words_st = st.integers(1, 4).flatmap(
    lambda K: st.tuples(st.just(K), st.lists(st.integers(0, K - 1), min_size=1, max_size=12)))


@settings(deadline=None, max_examples=200)
@given(words_st, st.booleans(), st.integers(0, 20))
def test_canonical_invariant_under_trace_symmetries(Kw, use_inv, shift):
    K, w = Kw
    inv = tuple(range(K))
    if use_inv and K >= 2:
        inv = (1, 0) + tuple(range(2, K))
    A = Alphabet(K, inv)
    w = tuple(w)
    c = canonical(w, A)
    r = shift % len(w)
    rotated = w[r:] + w[:r]
    transposed = A.transpose(w)
    assert canonical(rotated, A) == c
    assert canonical(transposed, A) == c
    assert canonical(c, A) == c
    # vectorised version agrees
    code = encode(np.array([w]), K)
    assert canonical_codes(code, len(w), A)[0] == encode(np.array([c]), K)[0]


def test_bad_alphabet():
    with pytest.raises(ValueError, match="K"):
        Alphabet(0)
    with pytest.raises(TypeError, match="K"):
        Alphabet(2.0)
    with pytest.raises(ValueError, match="involution"):
        Alphabet(3, (1, 2, 0))
