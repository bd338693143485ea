"""Normalised traces of words of matrices, with shared products.

``mu_alpha = Tr(A_{a_1} ... A_{a_n}) / d``. Each word is split into a left
half (its first ceil(n/2) letters) and a right half; ``Tr(P Q) =
sum_ij P_ij Q_ji`` costs O(d^2) once both halves are known. The products of the
halves are built letter by letter and memoised on their prefixes, so every
shared prefix is multiplied once. At order M this needs at most the words of
length <= ceil(M/2) as products, instead of one matrix chain per word.
"""

from __future__ import annotations

import numpy as np

__all__ = ["word_traces"]


def word_traces(mats, words, transpose=None) -> np.ndarray:
    """Return ``[Tr(prod_{a in w} mats[a]) / d for w in words]``.

    ``mats`` is a sequence of ``d x d`` arrays (letters); ``transpose``
    optionally maps a letter to the letter of its transpose, which is not
    needed here but kept for symmetry with the word algebra.
    """
    mats = [np.asarray(m, dtype=np.float64) for m in mats]
    d = mats[0].shape[0]
    cache: dict = {}

    def prod(w: tuple) -> np.ndarray:
        p = cache.get(w)
        if p is not None:
            return p
        if len(w) == 1:
            p = mats[w[0]]
        else:
            p = prod(w[:-1]) @ mats[w[-1]]
        cache[w] = p
        return p

    out = np.empty(len(words))
    for i, w in enumerate(words):
        w = tuple(w)
        n = len(w)
        if n == 1:
            out[i] = np.trace(mats[w[0]]) / d
            continue
        h = (n + 1) // 2
        left = prod(w[:h])
        right = prod(w[h:])
        # Tr(P Q) = sum_ij P_ij Q_ji
        out[i] = np.einsum("ij,ji->", left, right) / d
    return out
