"""Normalised traces of words of matrices, with shared products.

``mu_alpha = Tr(A_{a_1} ... A_{a_n}) / d``. Each word is split into a left
half (its first ceil(n/2) letters) and a right half; ``Tr(P Q) =
sum_ij P_ij Q_ji`` costs O(d^2) once both halves are known. The products of the
halves are built letter by letter and memoised on their prefixes, so every
shared prefix is multiplied once. At order M this needs at most the words of
length <= ceil(M/2) as products, instead of one matrix chain per word.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["word_traces"]


def word_traces(mats, words, transpose=None) -> np.ndarray:
    """Return ``[Tr(prod_{a in w} mats[a]) / d for w in words]``.

    ``mats`` is a sequence of ``d x d`` arrays (letters); ``transpose``
    optionally maps a letter to the letter of its transpose, which is not
    needed here but kept for symmetry with the word algebra.
    """
    mats = _check_mats(mats)
    d = mats[0].shape[0]
    _check_letters(words, len(mats))
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


def _check_mats(mats) -> list[np.ndarray]:
    """Real square ``d x d`` arrays of one ``d >= 1``, as float64."""
    out = []
    for k, m in enumerate(mats):
        if np.iscomplexobj(m):  # the cast would drop the imaginary part
            raise TypeError(f"mats[{k}] must be real, got a complex array")
        out.append(np.asarray(m, dtype=np.float64))
    if not out:
        raise ValueError("mats must hold at least one d x d matrix")
    d = out[0].shape[0] if out[0].ndim == 2 else -1
    for k, m in enumerate(out):
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"mats[{k}] must be a square d x d array, got shape {m.shape}")
        if m.shape[0] != d:
            raise ValueError(f"mats must share the same d, got {d} and {m.shape[0]}")
    if d < 1:
        raise ValueError("mats must be d x d with d >= 1, got d = 0")
    return out


def _check_letters(words, n: int) -> None:
    """Every word non-empty, every letter an int in ``0..n-1`` (a negative one would index
    from the end)."""
    letters: set[Any] = set()
    for w in words:
        w = tuple(w)
        if not w:
            raise ValueError("words must not contain the empty word (its trace is 1)")
        letters.update(w)
    for a in letters:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"word letters must be ints in 0..{n - 1}, got letter {a!r}")
        if not 0 <= a < n:
            raise ValueError(f"word letters must lie in 0..{n - 1}, got letter {a}")
