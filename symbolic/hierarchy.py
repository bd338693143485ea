"""The tied moment hierarchy (paper 003, eq. 11) as integer structure arrays.

For tied attention ``S_k = W_k W_k^T`` the population gradient flow in ODE time
``t = 4 eta n / d`` is (MATH.md)::

    dS_k/dt = - sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k,   k trainable.

Taking normalised traces ``mu_alpha = Tr(S_{a_1} ... S_{a_n}) / d`` gives the
hierarchy (eq. 11): for every position ``p`` of ``alpha`` that holds a
trainable letter ``k = a_p``,

    d mu_alpha / dt  +=  - sum_l Gamma_kl [ mu_{alpha[:p] (l k) alpha[p+1:]}
                                           + mu_{alpha[:p] (k l) alpha[p+1:]} ]
                         - (gamma/2) mu_alpha .

Truncation at order ``M`` (eq. 13) sets every moment longer than ``M`` to 0.

The system is stored as a sparse bilinear form ``dy_i = sum_t coef_t *
g[ent_t] * y[src_t]`` in CSR order by target ``i``. The vector ``g`` holds the
``K*K`` entries of ``Gamma`` (row-major) followed by the decay ``gamma/2``.
The generator works on whole arrays of words encoded as base-``K`` integers, so
order 20 (tens of thousands of moments, millions of terms) builds in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import numpy as np

from .words import Alphabet, canonical, canonical_codes, canonical_words, encode

__all__ = ["TiedStructure", "tied_structure", "check_order", "check_trainable"]


def check_order(order, name: str = "order") -> int:
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {order!r}")
    if order < 1:
        raise ValueError(f"{name} must be an int >= 1, got {order}")
    return int(order)


def check_trainable(trainable, K: int) -> tuple:
    if isinstance(trainable, (int, np.integer)) and not isinstance(trainable, bool):
        trainable = (trainable,)
    try:
        tr = tuple(trainable)
    except TypeError:
        raise TypeError(f"trainable must be a sequence of indices in 0..{K - 1}") from None
    out = []
    for k in tr:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"trainable indices must be ints in 0..{K - 1}, got {k!r}")
        if not 0 <= k < K:
            raise ValueError(f"trainable index {k} out of range: allowed 0..{K - 1}")
        out.append(int(k))
    if len(set(out)) != len(out):
        raise ValueError(f"trainable indices must be distinct, got {tr}")
    return tuple(sorted(out))


@dataclass(frozen=True, eq=False)
class TiedStructure:
    """Integer structure of the truncated tied hierarchy.

    Attributes
    ----------
    K, trainable, order:
        Alphabet size, trainable letters, truncation order ``M``.
    words:
        Canonical words (tuples of 0-based letters), in state-vector order:
        by length, then lexicographic.
    indptr, src, ent, coef:
        CSR form of ``dy[i] = sum_{t in indptr[i]:indptr[i+1]}
        coef[t] * g[ent[t]] * y[src[t]]``; ``g[k*K + l] = Gamma_kl`` and
        ``g[K*K] = gamma / 2``.
    gather:
        ``K*K`` state indices of ``q_kl = mu_(k,l)`` (row-major), ``-1`` where
        the truncation sets them to 0 (``order < 2``).
    """

    K: int
    trainable: tuple
    order: int
    words: list
    indptr: np.ndarray
    src: np.ndarray
    ent: np.ndarray
    coef: np.ndarray
    gather: np.ndarray
    _codes: list = field(repr=False)  # sorted canonical codes per length
    _offsets: np.ndarray = field(repr=False)

    @property
    def alphabet(self) -> Alphabet:
        return Alphabet(self.K)

    @property
    def n_moments(self) -> int:
        return len(self.words)

    @property
    def n_terms(self) -> int:
        return int(self.src.size)

    @property
    def n_entries(self) -> int:
        """Length of the coefficient vector ``g`` (Gamma entries + decay)."""
        return self.K * self.K + 1

    @cached_property
    def _lookup(self) -> dict:
        return {w: i for i, w in enumerate(self.words)}

    def index(self, word: Sequence[int]) -> int:
        """State index of any word (canonicalised first)."""
        w = self.alphabet.check_word(word)
        if len(w) == 0:
            raise ValueError("word must have length >= 1 (the empty trace is 1)")
        if len(w) > self.order:
            raise ValueError(
                f"word {w} has length {len(w)} > truncation order {self.order}; "
                "longer moments are set to 0 by the truncation (eq. 13)")
        return self._lookup[canonical(w)]

    def lengths(self) -> np.ndarray:
        return np.fromiter((len(w) for w in self.words), dtype=np.int64, count=len(self.words))

    def terms(self):
        """Iterate ``(target, source, (k, l) or 'decay', coef)`` in CSR order."""
        K = self.K
        for i in range(self.n_moments):
            for t in range(self.indptr[i], self.indptr[i + 1]):
                e = int(self.ent[t])
                key = "decay" if e == K * K else (e // K, e % K)
                yield i, int(self.src[t]), key, int(self.coef[t])


def tied_structure(K: int, trainable, order: int) -> TiedStructure:
    """Build the truncated tied hierarchy of eq. (11) at order ``M = order``.

    The terms of all words of one length are generated together: every
    insertion ``(l k)`` / ``(k l)`` at a trainable position is one array
    operation, and canonicalisation plus index lookup are vectorised.
    """
    alphabet = Alphabet(K)
    K = alphabet.K
    M = check_order(order)
    tr = check_trainable(trainable, K)
    is_tr = np.zeros(K, dtype=bool)
    is_tr[list(tr)] = True

    words = canonical_words(M, alphabet)
    by_len: list = [None] * (M + 2)
    codes: list = [np.zeros(0, dtype=np.int64)] * (M + 2)
    offsets = np.zeros(M + 2, dtype=np.int64)
    start = 0
    for n in range(1, M + 1):
        ws = words[start:start + _count_len(words, start, n)]
        by_len[n] = np.asarray(ws, dtype=np.int64).reshape(len(ws), n)
        codes[n] = encode(by_len[n], K)
        offsets[n] = start
        start += len(ws)
    offsets[M + 1] = start

    tgt_parts, src_parts, ent_parts, coef_parts = [], [], [], []
    for n in range(1, M + 1):
        D = by_len[n]
        N = D.shape[0]
        if N == 0:
            continue
        tgt = offsets[n] + np.arange(N, dtype=np.int64)
        ntr = is_tr[D].sum(axis=1)
        has = ntr > 0
        # decay: -(gamma/2) * (number of trainable letters) * mu_alpha
        tgt_parts.append(tgt[has])
        src_parts.append(tgt[has])
        ent_parts.append(np.full(int(has.sum()), K * K, dtype=np.int64))
        coef_parts.append(-ntr[has])
        if n + 1 > M:
            continue  # the Gamma terms reference words of length n+1 > M: truncated
        for p in range(n):
            rows = np.flatnonzero(is_tr[D[:, p]])
            if rows.size == 0:
                continue
            Dp = D[rows]
            k = Dp[:, p]
            for l in range(K):
                col = np.full((rows.size, 1), l, dtype=np.int64)
                after = np.concatenate([Dp[:, :p + 1], col, Dp[:, p + 1:]], axis=1)   # (k l)
                before = np.concatenate([Dp[:, :p], col, Dp[:, p:]], axis=1)         # (l k)
                for new in (after, before):
                    cc = canonical_codes(encode(new, K), n + 1, alphabet)
                    pos = np.searchsorted(codes[n + 1], cc)
                    tgt_parts.append(tgt[rows])
                    src_parts.append(offsets[n + 1] + pos)
                    ent_parts.append(k * K + l)
                    coef_parts.append(np.full(rows.size, -1, dtype=np.int64))

    n_mom = len(words)
    if tgt_parts:
        tgt_all = np.concatenate(tgt_parts)
        src_all = np.concatenate(src_parts)
        ent_all = np.concatenate(ent_parts)
        coef_all = np.concatenate(coef_parts)
        # merge duplicates (same target, entry and source)
        n_ent = K * K + 1
        key = (tgt_all * n_ent + ent_all) * n_mom + src_all
        uniq, inv = np.unique(key, return_inverse=True)
        csum = np.bincount(inv, weights=coef_all, minlength=uniq.size)
        keep = csum != 0
        uniq, csum = uniq[keep], csum[keep]
        src_u = uniq % n_mom
        rest = uniq // n_mom
        ent_u = rest % n_ent
        tgt_u = rest // n_ent
    else:
        tgt_u = src_u = ent_u = np.zeros(0, dtype=np.int64)
        csum = np.zeros(0)
    indptr = np.zeros(n_mom + 1, dtype=np.int64)
    np.cumsum(np.bincount(tgt_u, minlength=n_mom), out=indptr[1:])

    lookup = {w: i for i, w in enumerate(words)}
    gather = np.full(K * K, -1, dtype=np.int64)
    if M >= 2:
        for k in range(K):
            for l in range(K):
                gather[k * K + l] = lookup[canonical((k, l))]
    return TiedStructure(
        K=K, trainable=tr, order=M, words=words,
        indptr=indptr, src=src_u.astype(np.int32), ent=ent_u.astype(np.int16),
        coef=csum.astype(np.int16), gather=gather,
        _codes=codes, _offsets=offsets,
    )


def _count_len(words, start, n):
    j = start
    while j < len(words) and len(words[j]) == n:
        j += 1
    return j - start
