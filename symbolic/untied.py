"""The untied slow hierarchy (paper 003, eqs. 26, 31-32) as integer structure arrays.

Untied attention ``S_k = U_k V_k^T`` has the alphabet (eq. 26)
``{M_k, M_k^T, A_k, B_k}`` with ``M_k = U_k V_k^T``, ``A_k = U_k U_k^T``,
``B_k = V_k V_k^T``. Letter ``4k + kind`` is ``M_k`` (kind 0), ``M_k^T`` (1),
``A_k`` (2) or ``B_k`` (3); the transpose involution swaps ``M_k`` and
``M_k^T`` and fixes ``A_k`` and ``B_k``. A word ``alpha`` stands for
``mu_alpha = Tr(Z_1 ... Z_w) / d``, invariant under rotation and under
reversal-with-transpose (:mod:`.words`).

On the slow time ``tau = eta n / d`` the moments obey (eq. 32), for every
position ``i`` of ``alpha`` holding a trainable letter of index ``k = k_i``,

    d mu_alpha / d tau += - beta_k T_i^bias(mu)
                          - 2 sum_l sum_{r=1,2} a^(r)_kl T^diff_{i,l,r}(mu)
                          - 2 gamma mu_alpha,

with ``M^(1)_l = M_l``, ``M^(2)_l = M_l^T`` and ``r-bar`` swapping them. The
substitutions (eq. 31) replace the letter ``Z_i`` by

=========  ====================  ==========================================
``Z_i``    ``T^bias``            ``T^diff_{l, r}``
=========  ====================  ==========================================
``M_k``    ``A_k + B_k``         ``M^(r)_l B_k + A_k M^(r)_l``
``M_k^T``  ``A_k + B_k``         ``B_k M^(rb)_l + M^(rb)_l A_k``
``A_k``    ``M_k + M_k^T``       ``M^(r)_l M_k^T + M_k M^(rb)_l``
``B_k``    ``M_k + M_k^T``       ``M^(rb)_l M_k + M_k^T M^(r)_l``
=========  ====================  ==========================================

They are the normalised-trace projection of the slaved matrix flow
``dU/dtau = -beta V - 2 P V - gamma U``, ``dV/dtau = -beta U - 2 P^T U - gamma V``,
``P_k = sum_l a^(1)_kl M_l + a^(2)_kl M_l^T``: the decay counts ``-2 gamma``
per trainable letter because every letter is bilinear in ``(U, V)``.

Storage: the sparse bilinear form ``dy_i = sum_t coef_t g[ent_t] y[src_t]`` of
:mod:`attndyn.kernels.rhs`, in CSR order by target. The coefficient vector is

    g = (beta_0..beta_{K-1}, a^(1).ravel(), a^(2).ravel(), gamma),

so ``n_grad = K + 2 K^2`` state-dependent entries and one constant. The bias
terms have ``coef = -1``, the diffusion terms ``coef = -2`` and the decay
``coef = -2 |alpha|_K``. Truncation ``Pi_M`` (eq. 892) sets every moment
longer than ``M`` to 0: the diffusion terms of words of length ``M`` are dropped.

``gather`` lists the state indices the compiled coefficient function reads
(``-1`` where truncated): ``tA_k, tB_k`` (``2K``), ``q1_kl = mu(M_k, M_l^T)`` and
``q2_kl = mu(M_k, M_l)`` (``2K^2``, row-major) and, for eq. (27),
``mu(M^(r)_l, B_k)`` and ``mu(A_k, M^(r)_l)`` (``4K^2``, index
``((k K + l) 2 + r - 1) 2 + {0: MB, 1: AM}``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import sympy as sp

from .hierarchy import check_order, check_trainable
from .words import Alphabet, canonical, canonical_codes, canonical_words, encode

__all__ = [
    "M", "MT", "A", "B", "untied_alphabet", "letter_names", "letter_latex", "untied_words",
    "bias_substitution", "diff_substitution", "UntiedStructure", "untied_structure",
    "gather_size", "untied_equations", "untied_text", "untied_latex", "word_name",
    "check_untied_order", "reference_terms", "closed_letters", "estimate_size", "coefficient_symbols",
]

M, MT, A, B = 0, 1, 2, 3  # letter kinds; letter = 4 k + kind
# a column of letters, one per word of a block (the substitutions of eq. 31)
_Col = np.ndarray


def untied_alphabet(K: int) -> Alphabet:
    """The ``4K`` letters ``M_k, M_k^T, A_k, B_k`` with the transpose involution.

        >>> a = untied_alphabet(1)
        >>> a.K
        4
    """
    inv = []
    for k in range(int(K)):
        inv += [4 * k + MT, 4 * k + M, 4 * k + A, 4 * k + B]
    return Alphabet(4 * int(K), inv)


def letter_names(K: int) -> list:
    """Plain names, 1-based: ``M1, Mt1, A1, B1, M2, ...``.

        >>> letter_names(2)
        ['M1', 'Mt1', 'A1', 'B1', 'M2', 'Mt2', 'A2', 'B2']
    """
    out = []
    for k in range(K):
        out += [f"M{k + 1}", f"Mt{k + 1}", f"A{k + 1}", f"B{k + 1}"]
    return out


def letter_latex(K: int) -> list:
    r"""LaTeX names of the ``4K`` untied letters in the order of :func:`letter_names`:
    ``M_{k}``, ``M_{k}^\top``, ``A_{k}``, ``B_{k}``.

        >>> print(letter_latex(1)[1])
        M_{1}^\top
    """
    out = []
    for k in range(K):
        out += [f"M_{{{k + 1}}}", f"M_{{{k + 1}}}^\\top", f"A_{{{k + 1}}}", f"B_{{{k + 1}}}"]
    return out


def word_name(word: Sequence[int], K: int) -> str:
    """``mu_M1_Mt2`` (the names the SGD observables use).

        >>> word_name((0, 1), K=2)
        'mu_M1_Mt1'
    """
    names = letter_names(K)
    return "mu_" + "_".join(names[a] for a in word)


def check_untied_order(order: object, name: str = "order") -> int:
    """A truncation order ``M >= 2`` of the untied hierarchy (eq. 892: the overlaps are
    words of length 2); ``TypeError`` or ``ValueError`` naming ``name`` otherwise.

        >>> check_untied_order(4)
        4
        >>> check_untied_order(1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: order must be an int >= 2 for the untied hierarchy...
    """
    M_ = check_order(order, name)
    if M_ < 2:
        raise ValueError(f"{name} must be an int >= 2 for the untied hierarchy (the overlaps "
                         f"q1, q2 are words of length 2; eq. 892 truncates at M >= 2), got {M_}")
    return M_


def untied_words(K: int, order: int) -> list:
    """Canonical words over ``{M_k, M_k^T, A_k, B_k}`` of length ``1..order``.

        >>> untied_words(1, 2)[:6]
        [(0,), (2,), (3,), (0, 0), (0, 1), (0, 2)]
    """
    return canonical_words(check_order(order), untied_alphabet(K))


def mr(l: int, r: int) -> int:
    """Letter of ``M^(r)_l``: ``M_l`` for r = 1, ``M_l^T`` for r = 2."""
    return 4 * l + (M if r == 1 else MT)


def bias_substitution(word: Sequence[int], i: int) -> list:
    """``T_i^bias`` of eq. (31) by its definition: the list of words it sums.

        >>> bias_substitution((0, 1), 0)
        [(2, 1), (3, 1)]
    """
    w = tuple(word)
    k, kind = divmod(w[i], 4)
    if kind in (M, MT):
        reps = [(4 * k + A,), (4 * k + B,)]
    else:
        reps = [(4 * k + M,), (4 * k + MT,)]
    return [w[:i] + rep + w[i + 1:] for rep in reps]


def diff_substitution(word: Sequence[int], i: int, l: int, r: int) -> list:
    """``T^diff_{i,l,r}`` of eq. (31) by its definition: the list of words it sums.

        >>> diff_substitution((0, 1), 0, 0, 1)
        [(0, 3, 1), (2, 0, 1)]
    """
    w = tuple(word)
    k, kind = divmod(w[i], 4)
    rb = 3 - r
    Ak, Bk, Mk, MTk = 4 * k + A, 4 * k + B, 4 * k + M, 4 * k + MT
    if kind == M:
        reps = [(mr(l, r), Bk), (Ak, mr(l, r))]
    elif kind == MT:
        reps = [(Bk, mr(l, rb)), (mr(l, rb), Ak)]
    elif kind == A:
        reps = [(mr(l, r), MTk), (Mk, mr(l, rb))]
    else:
        reps = [(mr(l, rb), Mk), (MTk, mr(l, r))]
    return [w[:i] + rep + w[i + 1:] for rep in reps]


def gather_size(K: int) -> int:
    """Length ``2K + 2K^2 + 4K^2`` of :attr:`UntiedStructure.gather`: the state indices of
    ``mu_{A_k}``, ``mu_{B_k}``, ``q1_kl``, ``q2_kl`` and the mixed words the compiled
    coefficient function reads.

        >>> gather_size(2)
        28
    """
    return 2 * K + 2 * K * K + 4 * K * K


def _gather(K: int, lookup: dict, alphabet: Alphabet) -> np.ndarray:
    out = np.full(gather_size(K), -1, dtype=np.int64)

    def idx(w: tuple[int, ...]) -> int:
        i: int = lookup.get(canonical(w, alphabet), -1)
        return i
    for k in range(K):
        out[k] = idx((4 * k + A,))
        out[K + k] = idx((4 * k + B,))
    base = 2 * K
    for k in range(K):
        for l in range(K):
            out[base + k * K + l] = idx((4 * k + M, 4 * l + MT))
            out[base + K * K + k * K + l] = idx((4 * k + M, 4 * l + M))
    base = 2 * K + 2 * K * K
    for k in range(K):
        for l in range(K):
            for r in (1, 2):
                j = base + ((k * K + l) * 2 + r - 1) * 2
                out[j] = idx((mr(l, r), 4 * k + B))
                out[j + 1] = idx((4 * k + A, mr(l, r)))
    return out


@dataclass(frozen=True, eq=False)
class UntiedStructure:
    """Integer structure of the truncated slow hierarchy (eqs. 31-32, 892).

    ``indptr, src, ent, coef`` are the CSR form of ``dy[i] = sum_t coef[t] *
    g[ent[t]] * y[src[t]]`` with ``g = (beta, a1.ravel(), a2.ravel(), gamma)``;
    see the module docstring for ``gather``.

        >>> st = untied_structure(2, [0], 2)
        >>> isinstance(st, UntiedStructure), st.order, len(st.words)
        (True, 2, 17)
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
    letters: tuple
    _offsets: np.ndarray = field(repr=False)

    @property
    def alphabet(self) -> Alphabet:
        return untied_alphabet(self.K)

    @property
    def n_moments(self) -> int:
        return len(self.words)

    @property
    def n_terms(self) -> int:
        return int(self.src.size)

    @property
    def n_grad(self) -> int:
        """State-dependent coefficients: ``beta`` (K), ``a^(1)``, ``a^(2)`` (K^2 each)."""
        return self.K + 2 * self.K * self.K

    @property
    def n_entries(self) -> int:
        return self.n_grad + 1

    @cached_property
    def _lookup(self) -> dict:
        return {w: i for i, w in enumerate(self.words)}

    def index(self, word: Sequence[int]) -> int:
        """State index of any word (canonicalised first)."""
        w = self.alphabet.check_word(word)
        if len(w) == 0:
            raise ValueError("word must have length >= 1 (the empty trace is 1)")
        if len(w) > self.order:
            raise ValueError(f"word {w} has length {len(w)} > truncation order {self.order}; "
                             "Pi_M sets longer moments to 0 (eq. 892)")
        bad = sorted(set(w) - set(self.letters))
        if bad:
            raise ValueError(f"word {w} uses the letters {bad}, outside this hierarchy's "
                             f"letters {self.letters} (a fixed index's A_l, B_l never enter "
                             "eq. 32 of the others; build it with letters='all' to track them)")
        i: int = self._lookup[canonical(w, self.alphabet)]
        return i

    def entry(self, e: int) -> tuple[Any, ...]:
        """``('beta', k)``, ``('a', r, k, l)`` or ``('decay',)`` for a ``g`` index."""
        K = self.K
        e = int(e)
        if e < K:
            return ("beta", e)
        if e < K + 2 * K * K:
            r, rest = divmod(e - K, K * K)
            return ("a", r + 1, rest // K, rest % K)
        return ("decay",)

    def terms(self) -> Iterator[tuple[int, int, tuple[Any, ...], int]]:
        """Iterate ``(target, source, entry, coef)`` in CSR order."""
        for i in range(self.n_moments):
            for t in range(self.indptr[i], self.indptr[i + 1]):
                yield i, int(self.src[t]), self.entry(self.ent[t]), int(self.coef[t])


def closed_letters(K: int, trainable: Iterable[int]) -> tuple[int, ...]:
    """The letters the slow hierarchy needs: all four of a trainable index, only
    ``M_l, M_l^T`` of a fixed one.

    Eq. (31) inserts ``A_k, B_k, M_k, M_k^T`` of the trainable index ``k`` and
    ``M_l^(r)`` of any index ``l``, so the words over these letters are closed
    under (32) and contain every input of ``m*``, ``beta`` and ``a^(r)``. Words
    holding a fixed index's ``A_l`` or ``B_l`` never feed back into them.

        >>> closed_letters(2, [0])
        (0, 1, 2, 3, 4, 5)
    """
    tr = set(trainable)
    out = []
    for k in range(K):
        out += [4 * k + M, 4 * k + MT] + ([4 * k + A, 4 * k + B] if k in tr else [])
    return tuple(out)


def _sub_alphabet(K: int, letters: Sequence[int]
                  ) -> tuple[tuple[int, ...], Alphabet, np.ndarray]:
    full = untied_alphabet(K)
    letters = tuple(sorted(set(int(a) for a in letters)))
    pos = {a: i for i, a in enumerate(letters)}
    if any(full.inv[a] not in pos for a in letters):
        raise ValueError("the letters must be closed under transposition")
    sub = Alphabet(len(letters), [pos[full.inv[a]] for a in letters])
    to_sub = np.full(full.K, -1, dtype=np.int64)
    for a, i in pos.items():
        to_sub[a] = i
    return letters, sub, to_sub


def estimate_size(n_letters: int, order: int) -> float:
    """About how many canonical words of length <= ``order`` over ``n_letters`` letters
    (classes under rotation and reversal: ``n^w / (2 w)`` per length), before building;
    ``inf`` beyond a float.

        >>> round(estimate_size(6, 4)), estimate_size(6, 10 ** 9)
        (210, inf)
    """
    total = 0.0
    for w in range(1, order + 1):
        try:
            total += n_letters ** w / (2.0 * w)
        except OverflowError:  # the int n^w does not fit a float: stop here
            return math.inf
    return total


def untied_structure(K: int, trainable: Sequence[int] | int, order: int,
                     letters: Sequence[int] | str | None = None, *,
                     max_moments: float | None = 2e6) -> UntiedStructure:
    """Build the slow hierarchy (eq. 32) truncated at ``M = order`` (eq. 892).

    All words of one length are rewritten together: each substitution of
    eq. (31) at one position is one array operation, followed by vectorised
    canonicalisation and a sorted-code lookup, as for the tied hierarchy.

    ``letters`` (default :func:`closed_letters`) restricts the words to a
    sub-alphabet closed under (31) and under transposition; ``"all"`` keeps
    every letter of eq. (26). The restriction is exact, not an approximation:
    the dropped words never enter the equations of the kept ones.

    The size is estimated first (:func:`estimate_size`) and refused above
    ``max_moments`` (about 2e6 moments, some 40e6 terms, by default).

        >>> st = untied_structure(2, [0], 2)
        >>> [word_name(w, 2) for w in st.words][:4]
        ['mu_M1', 'mu_A1', 'mu_B1', 'mu_M2']
    """
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f"K must be an int >= 1, got {K!r}")
    K = int(K)
    alphabet = untied_alphabet(K)
    Mo = check_untied_order(order)
    tr = check_trainable(trainable, K)
    letters, sub, to_sub = _sub_alphabet(K, _check_letters(K, tr, letters, alphabet))
    NS = sub.K
    est = estimate_size(NS, Mo)
    if max_moments is not None and est > max_moments:
        about = (f"about {est:.3g} moments (and ~{20 * est:.3g} terms)" if math.isfinite(est)
                 else "more than 1e+308 moments")
        raise ValueError(f"the order-{Mo} untied hierarchy over {NS} letters has {about}, "
                         "above max_moments = "
                         f"{max_moments:.3g}; lower the order or raise max_moments")
    is_tr = np.zeros(alphabet.K, dtype=bool)
    for k in tr:
        is_tr[4 * k:4 * k + 4] = True
    words, by_len, codes, offsets = _words_by_length(canonical_words(Mo, sub), Mo, NS,
                                                     np.asarray(letters, dtype=np.int64))
    n_grad = K + 2 * K * K
    parts = _slow_terms(K, Mo, by_len, codes, offsets, is_tr, sub, to_sub, decay=n_grad)
    indptr, src_u, ent_u, csum = _merge_terms(parts, len(words), n_grad + 1)
    lookup = {w: i for i, w in enumerate(words)}
    return UntiedStructure(K=K, trainable=tr, order=Mo, words=words, indptr=indptr,
                           src=src_u.astype(np.int32), ent=ent_u.astype(np.int16),
                           coef=csum.astype(np.int16), gather=_gather(K, lookup, alphabet),
                           letters=letters, _offsets=offsets)


def _check_letters(K: int, tr: tuple[int, ...], letters: Sequence[int] | str | None,
                   alphabet: Alphabet) -> tuple[int, ...]:
    """The letters of :func:`untied_structure`: ``None`` the closed set, ``"all"`` every
    letter, or a sequence that contains the closed set."""
    if letters is None:
        return closed_letters(K, tr)
    if isinstance(letters, str):
        if letters != "all":
            raise ValueError(f"letters must be None, 'all' or a sequence of letters, got {letters!r}")
        return tuple(range(4 * K))
    letters = alphabet.check_word(letters, "letters")
    need = closed_letters(K, tr)
    if not set(need) <= set(letters):
        raise ValueError(f"letters must contain the closed set {need} (eq. 31 inserts them)")
    return letters


def _words_by_length(swords: Sequence[tuple[int, ...]], Mo: int, NS: int, lut: np.ndarray
                     ) -> tuple[list[tuple[int, ...]], list[Any], list[np.ndarray],
                                np.ndarray]:
    """The canonical words over the sub-alphabet grouped by length: the words in the full
    alphabet, the letter arrays per length, their sorted codes and the offsets."""
    words: list = []
    by_len: list[Any] = [None] * (Mo + 2)
    codes = [np.zeros(0, dtype=np.int64)] * (Mo + 2)
    offsets = np.zeros(Mo + 2, dtype=np.int64)
    start = 0
    lens = np.fromiter((len(w) for w in swords), dtype=np.int64, count=len(swords))
    for n in range(1, Mo + 1):
        cnt = int(np.sum(lens == n))
        Ds = np.asarray(swords[start:start + cnt], dtype=np.int64).reshape(cnt, n)
        codes[n] = encode(Ds, NS)
        by_len[n] = lut[Ds]
        words.extend(map(tuple, by_len[n].tolist()))
        offsets[n] = start
        start += cnt
    offsets[Mo + 1] = start
    return words, by_len, codes, offsets


def _splice(Dp: np.ndarray, p: int, *cols: np.ndarray) -> np.ndarray:
    """The words ``Dp`` with the letter at position ``p`` replaced by the columns ``cols``."""
    return np.concatenate([Dp[:, :p]] + [c[:, None] for c in cols] + [Dp[:, p + 1:]], axis=1)


def _diffusion_pairs(kind: int, Mr: _Col, Mrb: _Col, Ak: _Col, Bk: _Col, Mk: _Col,
                     MTk: _Col) -> tuple[tuple[_Col, _Col], tuple[_Col, _Col]]:
    """The two letter pairs eq. (31) inserts for a letter of ``kind`` (the diffusion terms
    through ``M_l^(r)``, ``Mr``, and its transpose ``Mrb``)."""
    if kind == M:
        return ((Mr, Bk), (Ak, Mr))
    if kind == MT:
        return ((Bk, Mrb), (Mrb, Ak))
    if kind == A:
        return ((Mr, MTk), (Mk, Mrb))
    return ((Mrb, Mk), (MTk, Mr))


def _slow_terms(K: int, Mo: int, by_len: list[Any], codes: list[np.ndarray],
                offsets: np.ndarray, is_tr: np.ndarray, sub: Alphabet, to_sub: np.ndarray,
                decay: int) -> list[tuple[np.ndarray, ...]]:
    """The terms ``(target, source, entry, coefficient)`` of eq. (32) truncated at ``Mo``,
    one array group per substitution of eq. (31) at one position (the decay entry is
    ``decay``)."""
    NS = sub.K
    parts: list = []  # (tgt, src, ent, coef)

    def add(tgt: np.ndarray, new: np.ndarray, n_new: int, ent: int | np.ndarray,
            c: int) -> None:
        cs = to_sub[new]
        if cs.size and cs.min() < 0:  # pragma: no cover - closed_letters guarantees this
            raise AssertionError("a substitution left the sub-alphabet")
        cc = canonical_codes(encode(cs, NS), n_new, sub)
        pos = np.searchsorted(codes[n_new], cc)
        parts.append((tgt, offsets[n_new] + pos, ent, np.full(tgt.size, c, dtype=np.int64)))

    for n in range(1, Mo + 1):
        D = by_len[n]
        N = D.shape[0]
        if N == 0:
            continue
        tgt_all = offsets[n] + np.arange(N, dtype=np.int64)
        ntr = is_tr[D].sum(axis=1)
        has = ntr > 0
        parts.append((tgt_all[has], tgt_all[has], np.full(int(has.sum()), decay, dtype=np.int64),
                      -2 * ntr[has]))
        for p in range(n):
            lett = D[:, p]
            for kind in (M, MT, A, B):
                rows = np.flatnonzero(is_tr[lett] & (lett % 4 == kind))
                if rows.size == 0:
                    continue
                Dp = D[rows]
                tgt = tgt_all[rows]
                k = Dp[:, p] // 4
                # T^bias: same length, coefficient -beta_k
                if kind in (M, MT):
                    reps = (4 * k + A, 4 * k + B)
                else:
                    reps = (4 * k + M, 4 * k + MT)
                for rep in reps:
                    add(tgt, _splice(Dp, p, rep), n, k, -1)
                if n + 1 > Mo:
                    continue  # Pi_M: the diffusion terms reach length n + 1 > M
                Ak, Bk, Mk, MTk = 4 * k + A, 4 * k + B, 4 * k + M, 4 * k + MT
                for l in range(K):
                    for r in (1, 2):
                        Mr = np.full(rows.size, mr(l, r), dtype=np.int64)
                        Mrb = np.full(rows.size, mr(l, 3 - r), dtype=np.int64)
                        ent = K + (r - 1) * K * K + k * K + l
                        for a, b in _diffusion_pairs(kind, Mr, Mrb, Ak, Bk, Mk, MTk):
                            add(tgt, _splice(Dp, p, a, b), n + 1, ent, -2)
    return parts


def _merge_terms(parts: list[tuple[np.ndarray, ...]], n_mom: int, n_ent: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The terms merged into CSR rows: ``(indptr, src, ent, coef)``, duplicates summed,
    zeros dropped, each row sorted by source (memory locality)."""
    tgt_a = np.concatenate([q[0] for q in parts])
    src_a = np.concatenate([q[1] for q in parts])
    ent_a = np.concatenate([np.asarray(q[2], dtype=np.int64) for q in parts])
    coef_a = np.concatenate([q[3] for q in parts])
    key = (tgt_a * n_mom + src_a) * n_ent + ent_a
    uniq, inv = np.unique(key, return_inverse=True)
    csum = np.rint(np.bincount(inv, weights=coef_a, minlength=uniq.size)).astype(np.int64)
    keep = csum != 0
    uniq, csum = uniq[keep], csum[keep]
    if csum.size and np.abs(csum).max() > np.iinfo(np.int16).max:  # pragma: no cover
        raise ValueError("a merged coefficient overflows int16")
    ent_u = uniq % n_ent
    rest = uniq // n_ent
    src_u = rest % n_mom
    tgt_u = rest // n_mom
    indptr = np.zeros(n_mom + 1, dtype=np.int64)
    np.cumsum(np.bincount(tgt_u, minlength=n_mom), out=indptr[1:])
    return indptr, src_u, ent_u, csum


def reference_terms(K: int, trainable: Sequence[int] | int, order: int,
                    letters: Sequence[int] | None = None) -> dict[Any, int]:
    """Eqs. (31)-(32) recomputed from their definition, word by word (slow; for tests).

    Returns ``{(target word, entry, source word): coef}`` with the entries as
    :meth:`UntiedStructure.entry` names them.

        >>> ref = reference_terms(2, [0], 2)
        >>> len(ref) > 0, all(isinstance(c, int) for c in ref.values())
        (True, True)
    """
    alphabet = untied_alphabet(K)
    Mo = check_untied_order(order)
    tr = set(check_trainable(trainable, K))
    keep = set(closed_letters(K, tr) if letters is None else letters)
    out: dict = {}

    def put(key: Any, c: int) -> None:
        out[key] = out.get(key, 0) + c
        if out[key] == 0:
            del out[key]
    for w in canonical_words(Mo, alphabet):
        if not set(w) <= keep:
            continue
        ntr = sum(1 for a in w if a // 4 in tr)
        if ntr:
            put((w, ("decay",), w), -2 * ntr)
        for i, a in enumerate(w):
            k = a // 4
            if k not in tr:
                continue
            for nw in bias_substitution(w, i):
                put((w, ("beta", k), canonical(nw, alphabet)), -1)
            if len(w) + 1 > Mo:
                continue
            for l in range(K):
                for r in (1, 2):
                    for nw in diff_substitution(w, i, l, r):
                        put((w, ("a", r, k, l), canonical(nw, alphabet)), -2)
    return out


# -- printing in the paper's notation --------------------------------------------------------

def _word_symbol(w: Sequence[int], K: int) -> sp.Symbol:
    return sp.Symbol(word_name(w, K), real=True)


def _word_tex(w: Sequence[int], K: int) -> str:
    names = letter_latex(K)
    return r"\bar\mu_{(" + ", ".join(names[a] for a in w) + ")}"


def coefficient_symbols(K: int) -> tuple:
    """``beta_k`` and ``a^(r)_kl`` symbols (1-based names ``beta_1``, ``a1_12``).

        >>> beta, a = coefficient_symbols(1)
        >>> beta, sorted(str(s) for s in a.values())
        ([beta_1], ['a1_11', 'a2_11'])
    """
    beta = [sp.Symbol(f"beta_{k + 1}", real=True) for k in range(K)]
    a = {(r, k, l): sp.Symbol(f"a{r}_{k + 1}{l + 1}" if K < 10 else f"a{r}_{k + 1}_{l + 1}",
                              real=True)
         for r in (1, 2) for k in range(K) for l in range(K)}
    return beta, a


def untied_equations(structure: UntiedStructure, decay: Any = sp.Symbol("gamma", real=True)
                     ) -> list[Any]:
    """SymPy equations ``d mu_alpha / d tau = ...`` of eq. (32) truncated by eq. (892).

    The substitutions ``T^bias`` and ``T^diff`` are written out as the words
    they produce; ``beta_k`` (eq. 30) and ``a^(r)_kl = dPhi/dq^(r)_kl`` stay
    symbols (they depend on the state through ``m*(q)``, eq. 29).

        >>> eqs = untied_equations(untied_structure(2, [0], 2))
        >>> len(eqs)
        17
    """
    K = structure.K
    syms = [_word_symbol(w, K) for w in structure.words]
    beta, a = coefficient_symbols(K)
    tau = sp.Symbol("tau", real=True)
    eqs = []
    for i in range(structure.n_moments):
        rhs = sp.Integer(0)
        for t in range(structure.indptr[i], structure.indptr[i + 1]):
            e = structure.entry(structure.ent[t])
            c = int(structure.coef[t])
            src = syms[int(structure.src[t])]
            if e[0] == "beta":
                rhs += c * beta[e[1]] * src
            elif e[0] == "a":
                rhs += c * a[e[1:]] * src
            else:
                rhs += c * decay * src
        lhs = sp.Derivative(sp.Function(syms[i].name)(tau), tau)
        eqs.append(sp.Eq(lhs, sp.expand(rhs)))
    return eqs


def untied_text(eqs: Sequence[Any]) -> str:
    """Plain text of :func:`untied_equations`, one line ``dmu_alpha/dtau = ...`` per
    equation (eq. 32 truncated by eq. 892).

        >>> text = untied_text(untied_equations(untied_structure(2, [0], 2))[:1])
        >>> text.split(" = ")[0], "- beta_1*mu_A1" in text
        ('dmu_M1/dtau', True)
    """
    return "\n".join(f"d{eq.lhs.expr.func.__name__}/dtau = {sp.sstr(eq.rhs)}" for eq in eqs)


def untied_latex(eqs: Sequence[Any], structure: UntiedStructure) -> str:
    r"""LaTeX of :func:`untied_equations` in an ``aligned`` environment, with
    ``beta_k`` and ``a^(r)_kl = dPhi/dq^(r)_kl`` in the paper's notation.

        >>> st = untied_structure(2, [0], 2)
        >>> tex = untied_latex(untied_equations(st)[:1], st)
        >>> tex.startswith("\\begin{aligned}")
        True
    """
    K = structure.K
    ren = {_word_symbol(w, K): sp.Symbol(_word_tex(w, K)) for w in structure.words}
    beta, a = coefficient_symbols(K)
    ren.update({b: sp.Symbol(rf"\bar\beta_{{{k + 1}}}") for k, b in enumerate(beta)})
    ren.update({s: sp.Symbol(rf"\partial_{{q^{{({r})}}_{{{k + 1}{l + 1}}}}}\Phi")
                for (r, k, l), s in a.items()})
    rows = []
    for eq, w in zip(eqs, structure.words):
        rows.append(rf"\frac{{d {_word_tex(w, K)}}}{{d\tau}} &= {sp.latex(eq.rhs.xreplace(ren))}")
    return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"
