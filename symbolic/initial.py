"""Moments of standard initialisations in the limit d -> infinity.

Each index ``k`` is initialised either as

- ``wishart(sigma, aspect)``: ``S_k = W_k W_k^T`` with ``W_k`` a ``d x d_k``
  matrix of i.i.d. ``N(0, sigma^2/d)`` entries, ``aspect = d_k / d``. Its
  spectrum is Marchenko-Pastur; its free cumulants are ``kappa_n = aspect *
  sigma^(2n)`` (free Poisson law), so ``mu_(k^n) = sigma^(2n) sum_j
  Narayana(n, j) aspect^j``;
- ``scalar(c)``: ``S_k = c I`` (free cumulants ``kappa_1 = c``, others 0).

Independent random matrices are asymptotically free, so every mixed moment
follows from the free moment-cumulant formula over non-crossing partitions,
with mixed cumulants zero. It is evaluated by a first-block recursion with
memoised sub-words (exact with ``fractions.Fraction`` or SymPy inputs).
Scalar letters are factored out first. Cost grows like ``n^3`` per distinct
sub-word; orders up to about 12 with two random letters take about a second.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from math import comb
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from .hierarchy import TiedStructure

__all__ = ["wishart", "scalar", "narayana_moment", "free_moments", "FreeInit"]


@dataclass(frozen=True)
class Spec:
    kind: str
    a: Any  # a number or a SymPy expression
    b: Any = None


def wishart(sigma: float | Any = 1, aspect: float | Any = 1) -> Spec:
    """``S = W W^T``, ``W`` of shape ``d x (aspect d)`` with ``N(0, sigma^2/d)`` entries.

        >>> w = wishart(sigma=1, aspect=2)
        >>> w
        Spec(kind='wishart', a=1, b=2)
        >>> FreeInit([w])([(0,), (0, 0)])
        [2.0, 6.0]
    """
    _check_finite(sigma, "sigma")
    _check_finite(aspect, "aspect")
    if not (aspect > 0):
        raise ValueError(f"aspect must be > 0 (d_k / d), got {aspect}")
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    return Spec("wishart", sigma, aspect)


def _check_finite(x: Any, name: str) -> None:
    """A plain number must be finite (NaN passes every comparison check as False);
    a SymPy expression is left to its user."""
    if isinstance(x, numbers.Real) and not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {x}")


def scalar(c: float | Any) -> Spec:
    """``S = c I``.

        >>> FreeInit([scalar(2)])([(0,), (0, 0), (0, 0, 0)])
        [2.0, 4.0, 8.0]
    """
    _check_finite(c, "c")
    return Spec("scalar", c)


def narayana_moment(n: int, sigma: float | Any = 1, aspect: float | Any = 1) -> Any:
    """``lim Tr(S^n)/d`` for ``S = W W^T`` (Marchenko-Pastur moments).

        >>> [narayana_moment(n) for n in range(1, 5)]
        [1, 2, 5, 14]
        >>> narayana_moment(2, aspect=2)
        6
    """
    if n == 0:
        return 1
    s2 = sigma * sigma
    return s2 ** n * sum(comb(n, j) * comb(n, j - 1) // n * aspect ** j for j in range(1, n + 1))


#: above this, subsequence codes would overflow int64 (structure_moments sorts rows instead)
_CODE_LIMIT = 2 ** 62


class FreeInit:
    """Limit moments of independent initialisations, one spec per index.

    Use as the ``mu0`` of ``TiedHierarchy.integrate`` (it is callable on a
    list of words), which also lets the convergence ladder get longer moments.

        >>> mu0 = FreeInit([wishart(), scalar(1)])
        >>> mu0([(0,), (0, 0), (0, 1), (0, 0, 0)])
        [1.0, 2.0, 1.0, 5.0]
    """

    def __init__(self, specs: Sequence[Spec]):
        specs = list(specs)
        for k, s in enumerate(specs):
            if not isinstance(s, Spec):
                raise TypeError(f"specs[{k}] must come from wishart(...) or scalar(...)")
        self.specs = specs

        @lru_cache(maxsize=None)
        def kappa(letter: int, n: int) -> Any:
            s = self.specs[letter]
            if s.kind == "scalar":
                return s.a if n == 1 else 0
            return s.b * (s.a * s.a) ** n

        @lru_cache(maxsize=None)
        def m(w: tuple[int, ...]) -> Any:
            n = len(w)
            if n == 0:
                return 1
            c = w[0]
            chain_pos = [j for j in range(n) if w[j] == c]
            # A[(j, s)]: chains 0 = i_1 < ... < i_s = j of letter c, times gap moments
            A = {(0, 1): 1}
            total = 0
            for idx, j in enumerate(chain_pos):
                if j > 0:
                    for i in chain_pos[:idx]:
                        gap = m(w[i + 1:j])
                        if gap == 0:
                            continue
                        for s in range(1, idx + 1):
                            a = A.get((i, s))
                            if a:
                                A[(j, s + 1)] = A.get((j, s + 1), 0) + a * gap
                tail = m(w[j + 1:])
                if tail == 0:
                    continue
                for s in range(1, idx + 2):
                    a = A.get((j, s))
                    if a:
                        total += a * kappa(c, s) * tail
            return total

        self._m = m

    def moment(self, word: Sequence[int]) -> Any:
        w = tuple(int(a) for a in word)
        for a in w:
            if not 0 <= a < len(self.specs):
                raise ValueError(f"word letter {a} out of range 0..{len(self.specs) - 1}")
        factor = 1
        rest = []
        for a in w:
            s = self.specs[a]
            if s.kind == "scalar":
                factor = factor * s.a
            else:
                rest.append(a)
        if factor == 0:
            return 0
        return factor * self._m(tuple(rest))

    def __call__(self, words: Iterable[Sequence[int]]) -> list[float]:
        return [float(self.moment(w)) for w in words]

    def structure_moments(self, structure: TiedStructure) -> NDArray[np.float64]:
        """``self(structure.words)`` as a float64 array in state order, from the words'
        integer codes (a :class:`~attndyn.symbolic.hierarchy.TiedStructure`), without
        making the word tuples.

        :meth:`moment` depends on a word only through its subsequence of scalar letters
        (their product, in order) and its subsequence of random letters (the free
        moment of what is left), so it runs once per distinct pair of subsequences and
        the values are spread over the words by index: the same floats as calling
        ``self`` word by word (order 20, ``K = 2``, one scalar letter: 58k words, 230
        distinct pairs).
        """
        import numpy as np

        from .words import decode
        K = structure.K
        if len(self.specs) != K:  # one spec per index, as the limit solvers require
            raise ValueError(f"the law has {len(self.specs)} specs; the hierarchy needs one "
                             f"per index, K = {K}")
        is_scalar = np.array([s.kind == "scalar" for s in self.specs[:K]])
        out = np.empty(structure.n_moments, dtype=np.float64)
        base = K + 1  # subsequence codes: letters as digits 1..K, so lengths are implied
        for n in range(1, structure.order + 1):
            codes = structure.codes[n]
            if codes.size == 0:
                continue
            if K == 2 and is_scalar[0] != is_scalar[1]:
                # one scalar and one random letter: the number of 1-letters (the bit count
                # of the code) fixes both subsequences
                ones = (np.bitwise_count(codes) if hasattr(np, "bitwise_count")
                        else decode(codes, n, K).sum(axis=1))
                _, first, inv = np.unique(ones, return_index=True, return_inverse=True)
            elif base ** n >= _CODE_LIMIT:  # the codes would overflow: unique rows instead
                D = decode(codes, n, K)
                sc = is_scalar[D]
                P = np.take_along_axis(D, np.argsort(~sc, axis=1, kind="stable"), axis=1)
                _, first, inv = np.unique(np.column_stack([sc.sum(axis=1), P]), axis=0,
                                          return_index=True, return_inverse=True)
            else:
                # letter by letter from the last: the codes of both subsequences
                c = codes.copy()
                sub = {True: np.zeros_like(c), False: np.zeros_like(c)}
                pw = {True: np.ones_like(c), False: np.ones_like(c)}
                for _ in range(n):
                    d = c % K
                    c //= K
                    s_ = is_scalar[d]
                    for flag, m in ((True, s_), (False, ~s_)):
                        sub[flag] += np.where(m, (d + 1) * pw[flag], 0)
                        pw[flag] = np.where(m, pw[flag] * base, pw[flag])
                _, i_s = np.unique(sub[True], return_inverse=True)
                u_r, i_r = np.unique(sub[False], return_inverse=True)
                _, first, inv = np.unique(np.asarray(i_s).reshape(-1) * u_r.size
                                          + np.asarray(i_r).reshape(-1),
                                          return_index=True, return_inverse=True)
            reps = decode(codes[first], n, K).tolist()
            vals = np.array([float(self.moment(w)) for w in reps], dtype=np.float64)
            start = int(structure.offsets[n])
            out[start:start + codes.size] = vals[np.asarray(inv).reshape(-1)]
        return out


def free_moments(specs: Sequence[Spec], words: Iterable[Sequence[int]]) -> list[float]:
    """Limit moments ``mu_w`` of independent initialisations ``specs``.

        >>> free_moments([wishart(), scalar(2)], [(0,), (1,), (0, 1), (0, 0, 1)])
        [1.0, 2.0, 2.0, 4.0]
    """
    return FreeInit(specs)(words)
