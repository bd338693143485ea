"""Words (multi-indices) and their trace-canonical forms.

A word ``alpha = (a_1, ..., a_n)`` over an alphabet of ``K`` letters stands for
the normalised trace ``mu_alpha = Tr(S_{a_1} ... S_{a_n}) / d`` (paper 003,
eq. 11). The trace is invariant under

- cyclic rotation: ``Tr(A B C) = Tr(B C A)``;
- reversal with transposition: ``Tr(A B C) = Tr(C^T B^T A^T)``.

The *transpose involution* ``inv`` maps a letter to the letter of its
transpose. For tied attention every ``S_k`` is symmetric, so ``inv`` is the
identity and the classes are bracelets; for untied attention ``M`` and
``M^T`` are two letters swapped by ``inv``.

The canonical representative of a class is its lexicographically smallest
member. Enumeration uses the Fredricksen-Kessler-Maiorana necklace algorithm
(constant amortised time per necklace) and keeps the necklaces that are also
minimal under reversal-with-transpose; it never filters all ``K**n`` tuples.

Vectorised versions work on words encoded as base-``K`` integers (first letter
most significant), which is how the hierarchy generators stay fast at order 20.
"""

from __future__ import annotations

from math import gcd
from typing import Iterable, Iterator, Sequence

import numpy as np

__all__ = [
    "Alphabet",
    "canonical",
    "least_rotation",
    "necklaces",
    "canonical_words",
    "count_canonical",
    "bracelet_count",
    "encode",
    "decode",
    "canonical_codes",
]


def _check_K(K) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise TypeError(f"K must be an int >= 1, got {type(K).__name__}")
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    return int(K)


class Alphabet:
    """``K`` letters ``0..K-1`` with a transpose involution ``inv``.

    ``inv=None`` means every letter is its own transpose (tied attention).
    """

    __slots__ = ("K", "inv", "_identity")

    def __init__(self, K: int, inv: Sequence[int] | None = None):
        self.K = _check_K(K)
        if inv is None:
            inv = tuple(range(self.K))
        inv = tuple(int(i) for i in inv)
        if len(inv) != self.K or sorted(inv) != list(range(self.K)):
            raise ValueError(f"inv must be a permutation of 0..{self.K - 1}, got {inv}")
        if any(inv[inv[a]] != a for a in range(self.K)):
            raise ValueError(f"inv must be an involution (inv[inv[a]] == a), got {inv}")
        self.inv = inv
        self._identity = all(inv[a] == a for a in range(self.K))

    def __repr__(self):
        return f"Alphabet(K={self.K}, inv={self.inv})"

    def __eq__(self, other):
        return isinstance(other, Alphabet) and (self.K, self.inv) == (other.K, other.inv)

    def __hash__(self):
        return hash((self.K, self.inv))

    def check_word(self, word, name: str = "word") -> tuple:
        try:
            w = tuple(word)
        except TypeError:
            raise TypeError(f"{name} must be a sequence of ints in 0..{self.K - 1}") from None
        for a in w:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
                raise TypeError(f"{name} must contain ints in 0..{self.K - 1}, got {a!r}")
            if not 0 <= a < self.K:
                raise ValueError(f"{name} letters must lie in 0..{self.K - 1}, got {a}")
        return tuple(int(a) for a in w)

    def transpose(self, word: Sequence[int]) -> tuple:
        """Reversal with transposition: ``(a_1..a_n) -> (inv a_n .. inv a_1)``."""
        return tuple(self.inv[a] for a in reversed(word))


def least_rotation(word: Sequence[int]) -> tuple:
    """Lexicographically least rotation of ``word`` (Booth's algorithm, O(n))."""
    s = tuple(word)
    n = len(s)
    if n <= 1:
        return s
    ss = s + s
    f = [-1] * (2 * n)
    k = 0
    for j in range(1, 2 * n):
        sj = ss[j]
        i = f[j - k - 1]
        while i != -1 and sj != ss[k + i + 1]:
            if sj < ss[k + i + 1]:
                k = j - i - 1
            i = f[i]
        if sj != ss[k + i + 1]:
            if sj < ss[k]:
                k = j
            f[j - k] = -1
        else:
            f[j - k] = i + 1
    return ss[k:k + n]


def canonical(word: Sequence[int], alphabet: Alphabet | None = None) -> tuple:
    """Canonical form of ``word`` under rotation and reversal-with-transpose.

    >>> canonical((1, 0, 0))
    (0, 0, 1)
    """
    w = tuple(int(a) for a in word)
    if alphabet is None:
        inv = None
    else:
        inv = alphabet.inv
    r1 = least_rotation(w)
    rev = tuple(reversed(w)) if inv is None else tuple(inv[a] for a in reversed(w))
    r2 = least_rotation(rev)
    return min(r1, r2)


def necklaces(n: int, K: int) -> Iterator[tuple]:
    """All necklaces (least rotations) of length ``n`` over ``K`` letters, in
    lexicographic order (FKM algorithm)."""
    K = _check_K(K)
    if n < 1:
        return
    a = [0] * (n + 1)  # a[0] is a sentinel; the word is a[1..n]
    yield tuple(a[1:])
    while True:
        # successor of a prenecklace: bump the last letter below K-1, then
        # repeat the prefix periodically; it is a necklace iff its period divides n
        i = n
        while i > 0 and a[i] == K - 1:
            i -= 1
        if i == 0:
            return
        a[i] += 1
        for j in range(i + 1, n + 1):
            a[j] = a[j - i]
        if n % i == 0:
            yield tuple(a[1:])


def canonical_words(max_len: int, alphabet: Alphabet | int, min_len: int = 1) -> list:
    """Every canonical word of length ``min_len..max_len``, ordered by length,
    then lexicographically. This is the state-vector order of the hierarchies."""
    if isinstance(alphabet, (int, np.integer)) and not isinstance(alphabet, bool):
        alphabet = Alphabet(alphabet)
    out: list = []
    for n in range(min_len, max_len + 1):
        neck = list(necklaces(n, alphabet.K))
        if not neck:
            continue
        arr = np.asarray(neck, dtype=np.int64)
        codes = encode(arr, alphabet.K)
        keep = canonical_codes(codes, n, alphabet) == codes
        out.extend(neck[i] for i in np.flatnonzero(keep))
    return out


def count_canonical(n: int, alphabet: Alphabet | int) -> int:
    """Number of canonical words of exactly length ``n``."""
    if isinstance(alphabet, (int, np.integer)) and not isinstance(alphabet, bool):
        alphabet = Alphabet(alphabet)
    return len(canonical_words(n, alphabet, min_len=n))


def _totient(n: int) -> int:
    return sum(1 for k in range(1, n + 1) if gcd(n, k) == 1)


def bracelet_count(n: int, K: int) -> int:
    """Number of bracelets of length ``n`` over ``K`` colours (OEIS A000029 for
    K = 2), from Burnside's lemma over the dihedral group."""
    K = _check_K(K)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    neck = sum(_totient(d) * K ** (n // d) for d in range(1, n + 1) if n % d == 0) // n
    if n % 2:
        return (neck + K ** ((n + 1) // 2)) // 2
    return (2 * neck + (K + 1) * K ** (n // 2)) // 4


# ---------------------------------------------------------------------------
# vectorised integer codes

def _max_len_for(K: int) -> int:
    if K == 1:
        return 1 << 30  # every code is 0
    n = 1
    while K ** (n + 1) < 2 ** 62:
        n += 1
    return n


def encode(digits: np.ndarray, K: int) -> np.ndarray:
    """Encode an ``(N, n)`` array of letters as base-``K`` integers."""
    digits = np.asarray(digits, dtype=np.int64)
    n = digits.shape[-1]
    if n > _max_len_for(K):
        raise ValueError(f"words of length {n} over {K} letters overflow int64 codes")
    weights = K ** np.arange(n - 1, -1, -1, dtype=np.int64)
    return digits @ weights if n else np.zeros(digits.shape[:-1], dtype=np.int64)


def decode(codes: np.ndarray, n: int, K: int) -> np.ndarray:
    """Inverse of :func:`encode`: ``(N,)`` codes to an ``(N, n)`` letter array."""
    codes = np.asarray(codes, dtype=np.int64)
    out = np.empty(codes.shape + (n,), dtype=np.int64)
    c = codes.copy()
    for j in range(n - 1, -1, -1):
        out[..., j] = c % K
        c //= K
    return out


def _min_rotation_codes(codes: np.ndarray, n: int, K: int) -> np.ndarray:
    if n <= 1:
        return codes.copy()
    top = np.int64(K) ** (n - 1)
    best = codes.copy()
    c = codes.copy()
    for _ in range(n - 1):
        c = (c % top) * K + c // top
        np.minimum(best, c, out=best)
    return best


def canonical_codes(codes: np.ndarray, n: int, alphabet: Alphabet) -> np.ndarray:
    """Vectorised :func:`canonical` on base-``K`` codes of words of length ``n``."""
    K = alphabet.K
    codes = np.asarray(codes, dtype=np.int64)
    r1 = _min_rotation_codes(codes, n, K)
    digits = decode(codes, n, K)[:, ::-1]
    if not alphabet._identity:
        digits = np.asarray(alphabet.inv, dtype=np.int64)[digits]
    r2 = _min_rotation_codes(encode(digits, K), n, K)
    return np.minimum(r1, r2)


def iter_words(words: Iterable) -> Iterator[tuple]:
    for w in words:
        yield tuple(int(a) for a in w)
