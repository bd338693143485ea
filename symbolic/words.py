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
most significant), which is how the hierarchy generators stay fast at order 20:
:func:`canonical_code_blocks` runs the FKM successor rule on whole arrays of
prenecklace codes, one length at a time, and keeps the words as integers;
tuples are made only when :func:`canonical_words` is asked for them.

Sizes are known before anything is built: :func:`orbit_count` is the exact
number of classes of one length (Burnside's lemma over the dihedral group
twisted by ``inv``), and :func:`check_word_count` refuses an enumeration that
would not fit in memory (or above an explicit ``max_words``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Iterator, Sequence, cast

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
    "canonical_code_blocks",
    "orbit_count",
    "word_count",
    "check_word_count",
    "available_memory",
    "SizeError",
]


def _check_K(K: object) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise TypeError(f"K must be an int >= 1, got {type(K).__name__}")
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    return int(K)


class Alphabet:
    """``K`` letters ``0..K-1`` with a transpose involution ``inv``.

    ``inv=None`` means every letter is its own transpose (tied attention).

        >>> tied, untied = Alphabet(2), Alphabet(4, inv=[1, 0, 3, 2])
        >>> tied.K, untied.K
        (2, 4)
        >>> canonical((1, 0, 0), tied)
        (0, 0, 1)
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

    def __repr__(self) -> str:
        return f"Alphabet(K={self.K}, inv={self.inv})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Alphabet) and (self.K, self.inv) == (other.K, other.inv)

    def __hash__(self) -> int:
        return hash((self.K, self.inv))

    def check_word(self, word: Iterable[Any], name: str = "word") -> tuple[int, ...]:
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


def _as_alphabet(alphabet: Alphabet | int) -> Alphabet:
    """``Alphabet(K)`` for an int ``K`` (not a bool); anything else as given."""
    if isinstance(alphabet, (int, np.integer)) and not isinstance(alphabet, bool):
        return Alphabet(alphabet)
    return cast(Alphabet, alphabet)


def least_rotation(word: Sequence[int]) -> tuple:
    """Lexicographically least rotation of ``word`` (Booth's algorithm, O(n)).

        >>> least_rotation((2, 0, 1, 0))
        (0, 1, 0, 2)
    """
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
    lexicographic order (FKM algorithm).

        >>> list(necklaces(3, 2))
        [(0, 0, 0), (0, 0, 1), (0, 1, 1), (1, 1, 1)]
    """
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


def canonical_words(max_len: int, alphabet: Alphabet | int, min_len: int = 1, *,
                    max_words: int | None = None) -> list:
    """Every canonical word of length ``min_len..max_len``, ordered by length,
    then lexicographically. This is the state-vector order of the hierarchies.

    The size is checked first (:func:`check_word_count`): above ``max_words``
    (default: what fits in the available memory as Python tuples) it raises
    :class:`SizeError` before enumerating anything.

        >>> canonical_words(3, 2)
        [(0,), (1,), (0, 0), (0, 1), (1, 1), (0, 0, 0), (0, 0, 1), (0, 1, 1), (1, 1, 1)]
    """
    alphabet = _as_alphabet(alphabet)
    max_len = _check_len(max_len, "max_len")
    min_len = _check_len(min_len, "min_len")
    n_words = check_word_count(max_len, alphabet, min_len, max_words=max_words,
                               bytes_per_word=_tuple_bytes(max_len), what="canonical words")
    out: list = []
    for n, codes in canonical_code_blocks(max_len, alphabet, min_len=min_len,
                                          max_words=max(n_words, 1)):
        out.extend(map(tuple, decode(codes, n, alphabet.K).tolist()))
    return out


def count_canonical(n: int, alphabet: Alphabet | int) -> int:
    """Number of canonical words of exactly length ``n`` (closed form, :func:`orbit_count`).

        >>> [count_canonical(n, 2) for n in range(1, 9)]
        [2, 3, 4, 6, 8, 13, 18, 30]
    """
    alphabet = _as_alphabet(alphabet)
    return orbit_count(n, alphabet)


def _totient(n: int) -> int:
    out, m, p = n, n, 2
    while p * p <= m:
        if m % p == 0:
            while m % p == 0:
                m //= p
            out -= out // p
        p += 1
    if m > 1:
        out -= out // m
    return out


def _divisors(n: int) -> list:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def bracelet_count(n: int, K: int) -> int:
    """Number of bracelets of length ``n`` over ``K`` colours (OEIS A000029 for
    K = 2), from Burnside's lemma over the dihedral group.

        >>> [bracelet_count(n, 2) for n in range(1, 9)]
        [2, 3, 4, 6, 8, 13, 18, 30]
    """
    K = _check_K(K)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    neck = sum(_totient(d) * K ** (n // d) for d in _divisors(n)) // n
    count: int = ((neck + K ** ((n + 1) // 2)) // 2 if n % 2
                  else (2 * neck + (K + 1) * K ** (n // 2)) // 4)
    return count


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
    """Encode an ``(N, n)`` array of letters as base-``K`` integers.

        >>> encode(np.array([[0, 1, 1], [1, 0, 0]]), 2)
        array([3, 4])
    """
    digits = np.asarray(digits, dtype=np.int64)
    n = digits.shape[-1]
    if n > _max_len_for(K):
        raise ValueError(f"words of length {n} over {K} letters overflow int64 codes")
    weights = K ** np.arange(n - 1, -1, -1, dtype=np.int64)
    return digits @ weights if n else np.zeros(digits.shape[:-1], dtype=np.int64)


def decode(codes: np.ndarray, n: int, K: int) -> np.ndarray:
    """Inverse of :func:`encode`: ``(N,)`` codes to an ``(N, n)`` letter array.

    The letters are filled position by position into contiguous rows and the result is
    that array's transposed view (each fill a contiguous pass; strided fills were most of
    the first integrate's word list at order 24, measured).

        >>> decode(np.array([3, 4]), 3, 2)
        array([[0, 1, 1],
               [1, 0, 0]])
    """
    codes = np.asarray(codes, dtype=np.int64)
    out = np.empty((n, codes.size), dtype=np.int64)
    c = codes.ravel().copy()
    b = _bits(K)
    if b:  # K = 2**b: masks and shifts instead of int64 division
        mask = np.int64(K - 1)
        for j in range(n - 1, -1, -1):
            np.bitwise_and(c, mask, out=out[j])
            np.right_shift(c, b, out=c)
    else:
        for j in range(n - 1, -1, -1):
            np.divmod(c, K, out=(c, out[j]))
    return np.moveaxis(out.reshape((n,) + codes.shape), 0, -1)


def _bits(K: int) -> int:
    """``b`` with ``K == 2**b`` (shifts and masks instead of division), else 0."""
    return K.bit_length() - 1 if K > 1 and K & (K - 1) == 0 else 0


def _min_rotation_codes(codes: np.ndarray, n: int, K: int) -> np.ndarray:
    if n <= 1:
        same: np.ndarray = codes.copy()
        return same
    best: np.ndarray = codes.copy()
    c = codes.copy()
    b = _bits(K)
    if b:  # rotate left by one letter: ((c << b) & mask) | (c >> b (n-1)), in place
        mask = np.int64((1 << (b * n)) - 1)
        shift = np.int64(b * (n - 1))
        hi = np.empty_like(c)
        for _ in range(n - 1):
            np.right_shift(c, shift, out=hi)
            np.left_shift(c, b, out=c)
            np.bitwise_and(c, mask, out=c)
            np.bitwise_or(c, hi, out=c)
            np.minimum(best, c, out=best)
        return best
    top = np.int64(K) ** (n - 1)
    for _ in range(n - 1):
        c = (c % top) * K + c // top
        np.minimum(best, c, out=best)
    return best


def _transpose_codes(codes: np.ndarray, n: int, alphabet: Alphabet) -> np.ndarray:
    """Codes of the reversed-and-transposed words, by integer arithmetic (no digit matrix)."""
    K = alphabet.K
    x = codes.copy()
    rev = np.zeros_like(codes)
    inv = None if alphabet._identity else np.asarray(alphabet.inv, dtype=np.int64)
    b = _bits(K)
    if b:
        d = np.empty_like(x)
        for _ in range(n):
            np.bitwise_and(x, K - 1, out=d)
            np.left_shift(rev, b, out=rev)
            np.bitwise_or(rev, d if inv is None else inv[d], out=rev)
            np.right_shift(x, b, out=x)
        return rev
    for _ in range(n):
        d = x % K
        rev *= K
        rev += d if inv is None else inv[d]
        x //= K
    return rev


def canonical_codes(codes: np.ndarray, n: int, alphabet: Alphabet) -> np.ndarray:
    """Vectorised :func:`canonical` on base-``K`` codes of words of length ``n``.

        >>> codes = encode(np.array([[1, 0, 0], [0, 1, 1]]), 2)
        >>> decode(canonical_codes(codes, 3, Alphabet(2)), 3, 2)
        array([[0, 0, 1],
               [0, 1, 1]])
    """
    K = alphabet.K
    codes = np.asarray(codes, dtype=np.int64)
    r1 = _min_rotation_codes(codes, n, K)
    r2 = _min_rotation_codes(_transpose_codes(codes, n, alphabet), n, K)
    canon: np.ndarray = np.minimum(r1, r2, out=r1)
    return canon


def canonical_code_blocks(max_len: int, alphabet: Alphabet | int, min_len: int = 1, *,
                          max_words: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(n, codes)`` for ``n = min_len..max_len``: the sorted base-``K``
    codes of the canonical words of length ``n`` (state order within a length).

    Vectorised Fredricksen-Kessler-Maiorana: a prenecklace ``a_1..a_j`` with
    Lyndon period ``p`` extends by a letter ``b >= a_{j+1-p}`` (period kept
    when equal, ``j + 1`` when larger); it is a necklace when ``p`` divides its
    length. A necklace is canonical when no rotation of its transpose is
    smaller. The size is checked first (:func:`check_word_count`).

        >>> [(n, decode(c, n, 2).tolist()) for n, c in canonical_code_blocks(2, 2)]
        [(1, [[0], [1]]), (2, [[0, 0], [0, 1], [1, 1]])]
    """
    alphabet = _as_alphabet(alphabet)
    max_len = _check_len(max_len, "max_len")
    min_len = _check_len(min_len, "min_len")
    check_word_count(max_len, alphabet, min_len, max_words=max_words, bytes_per_word=48,
                     what="canonical words")
    K = alphabet.K
    if max_len > _max_len_for(K):
        raise SizeError(f"words of length {max_len} over {K} letters overflow 64-bit codes "
                        f"(at most {_max_len_for(K)})")
    if K == 1:
        for n in range(min_len, max_len + 1):
            yield n, np.zeros(1, dtype=np.int64)
        return
    pre = np.arange(K, dtype=np.int64)      # prenecklaces of length j (codes)
    per = np.ones(K, dtype=np.int64)        # their Lyndon periods
    for j in range(1, max_len + 1):
        if j > 1:
            # reference letter a_{j-p} (1-based) of each length-(j-1) prenecklace
            ref = (pre // np.int64(K) ** (per - 1)) % K
            new_pre, new_per = [], []
            for b in range(K):
                keep = ref <= b
                if not keep.any():
                    continue
                new_pre.append(pre[keep] * K + b)
                new_per.append(np.where(ref[keep] == b, per[keep], j))
            pre = np.concatenate(new_pre)
            per = np.concatenate(new_per)
        if j < min_len:
            continue
        neck = pre[j % per == 0]
        canon = neck[_min_rotation_codes(_transpose_codes(neck, j, alphabet), j, K) >= neck]
        yield j, np.sort(canon)


# ---------------------------------------------------------------------------
# sizes before building

class SizeError(ValueError):
    """A requested enumeration or hierarchy would not fit (raised before building).

        >>> issubclass(SizeError, ValueError)
        True
    """


def _check_len(n: object, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {n!r}")
    if n < 1:
        raise ValueError(f"{name} must be an int >= 1, got {n}")
    return int(n)


def _tuple_bytes(n: int) -> int:
    """Bytes one word of length ``n`` costs as a Python tuple in a list."""
    return 56 + 8 * n + 8


def available_memory() -> int:
    """Bytes of memory available to this process now: ``MemAvailable`` of
    ``/proc/meminfo`` (or ``sysconf`` pages), capped by a cgroup v2 limit.

        >>> available_memory() > 0
        True
    """
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            avail = 4 * 2 ** 30
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            lim = f.read().strip()
        if lim != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                cur = int(f.read().strip())
            avail = min(avail, max(int(lim) - cur, 0))
    except (OSError, ValueError):
        pass
    return int(avail)


def orbit_count(n: int, alphabet: Alphabet | int) -> int:
    """Exact number of canonical words of length ``n``: orbits of ``K**n`` words
    under rotations and reversal-with-transpose (Burnside's lemma).

    With ``f`` letters fixed by ``inv``, the ``n`` rotations fix
    ``sum_{d | n} phi(d) K^(n/d)`` words in total, and the ``n`` reflections fix
    ``n f K^((n-1)/2)`` (``n`` odd) or ``(n/2) (f^2 K^(n/2-1) + K^(n/2))``
    (``n`` even); the count is their sum over ``2n``. For ``inv`` the identity
    (``f = K``) these are the bracelet numbers (OEIS A000029 for ``K = 2``).

        >>> orbit_count(4, 2), orbit_count(4, Alphabet(4, inv=[1, 0, 3, 2]))
        (6, 39)
    """
    alphabet = _as_alphabet(alphabet)
    n = _check_len(n, "n")
    K = alphabet.K
    f = sum(1 for a in range(K) if alphabet.inv[a] == a)
    rot = sum(_totient(d) * K ** (n // d) for d in _divisors(n))
    if n % 2:
        refl = n * f * K ** ((n - 1) // 2)
    else:
        refl = (n // 2) * (f * f * K ** (n // 2 - 1) + K ** (n // 2))
    total, rem = divmod(rot + refl, 2 * n)
    assert rem == 0
    return int(total)


def word_count(max_len: int, alphabet: Alphabet | int, min_len: int = 1,
               cap: int | None = None) -> int:
    """Number of canonical words of lengths ``min_len..max_len``.

    With ``cap`` it stops as soon as the total exceeds ``cap`` and returns a
    number ``> cap`` (a lower bound), so that a huge ``max_len`` costs nothing:
    every length ``n`` holds at least ``K**n / (2n)`` words.

        >>> word_count(3, 2)
        9
        >>> word_count(10 ** 6, 2, cap=100) > 100
        True
    """
    alphabet = _as_alphabet(alphabet)
    max_len = _check_len(max_len, "max_len")
    min_len = _check_len(min_len, "min_len")
    K = alphabet.K
    if max_len < min_len:
        return 0
    if K == 1:
        return max_len - min_len + 1
    total = 0
    for n in range(min_len, max_len + 1):
        if cap is not None and n * math.log(K) - math.log(2 * n) > math.log(cap + 1) + 1:
            return max(cap + 1, total)
        total += orbit_count(n, alphabet)
        if cap is not None and total > cap:
            return total
    return total


def check_word_count(max_len: int, alphabet: Alphabet, min_len: int = 1, *,
                     max_words: int | None = None, bytes_per_word: int = 48,
                     what: str = "words") -> int:
    """Count the canonical words before enumerating them and refuse above a limit.

    The limit is ``max_words`` when given, else the number of words whose
    ``bytes_per_word`` fit in :func:`available_memory`. Returns the count;
    raises :class:`SizeError` (a ``ValueError``) with the estimate otherwise.

        >>> check_word_count(3, Alphabet(2))
        9
        >>> check_word_count(30, Alphabet(2), max_words=10 ** 6)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        attndyn.symbolic.words.SizeError: words up to length 30 over K = 2 letters: at least 1.42e+06 classes...
    """
    if max_words is None:
        limit = max(available_memory() // max(int(bytes_per_word), 1), 1)
        source = (f"the available memory ({available_memory() / 2 ** 30:.1f} GiB at "
                  f"{bytes_per_word} bytes per word)")
    else:
        if isinstance(max_words, bool) or not isinstance(max_words, (int, np.integer)) \
                or max_words < 1:
            raise ValueError(f"max_words must be an int >= 1, got {max_words!r}")
        limit = int(max_words)
        source = f"max_words = {limit}"
    n = word_count(max_len, alphabet, min_len, cap=limit)
    if n > limit:
        raise SizeError(
            f"{what} up to length {max_len} over K = {alphabet.K} letters: at least {n:.3g} "
            f"classes (~{n * bytes_per_word / 2 ** 30:.3g} GiB), above the limit of {limit:.3g} "
            f"set by {source}; lower the length/order or raise the limit explicitly")
    return n


def iter_words(words: Iterable) -> Iterator[tuple]:
    for w in words:
        yield tuple(int(a) for a in w)
