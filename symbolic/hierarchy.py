"""The tied moment hierarchy (paper 003, eq. 11) as integer structure arrays.

For tied attention ``S_k = W_k W_k^T`` the population gradient flow in ODE time
``t = 4 eta n / d`` is (MATH.md)::

    dS_k/dt = - sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k,   k trainable.

Taking normalised traces ``mu_alpha = Tr(S_{a_1} ... S_{a_n}) / d`` gives the
hierarchy (eq. 11): for every position ``p`` of ``alpha`` that holds a
trainable letter ``k = a_p``::

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

import hashlib
import math
import os
from functools import cached_property
from typing import Any, Iterator, Sequence

import numpy as np
from numpy.typing import NDArray

from . import words as _words
from .words import (Alphabet, SizeError, canonical, canonical_code_blocks,
                    canonical_codes, check_word_count, encode, orbit_count)

__all__ = ["TiedStructure", "tied_structure", "check_order", "check_trainable", "check_K",
           "estimate_tied_size", "log10_tied_size", "check_tied_size", "SizeError", "MAX_K", "STRUCTURE_VERSION",
           "gamma_program"]

#: Largest alphabet: the ``K*K`` Gamma entries and the decay index a slot table of
#: 16-bit entries, and the symbolic potential has ``K*K`` entries.
MAX_K = 255
#: Bumped whenever the layout or the order of the structure arrays changes (disk cache key).
STRUCTURE_VERSION = 2
#: Peak bytes per stored term while building (measured: benchmarks/bench_hierarchy.py) and
#: bytes per term held afterwards (src uint32 + slot uint8, with per-moment arrays folded in).
BUILD_BYTES_PER_TERM = 60
HELD_BYTES_PER_TERM = 6
#: Build throughput used for the time estimate in refusals (seconds per term, one core).
BUILD_SECONDS_PER_TERM = 2e-7


def check_K(K: object, name: str = "K") -> int:
    """An alphabet size ``1 <= K <= MAX_K``.

        >>> check_K(2)
        2
        >>> check_K(0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: K must be an int in 1..255...
    """
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise TypeError(f"{name} must be an int in 1..{MAX_K}, got {K!r}")
    if not 1 <= K <= MAX_K:
        raise ValueError(f"{name} must be an int in 1..{MAX_K} (K*K Gamma entries must fit the "
                         f"16-bit entry index of the hierarchy), got {K}")
    return int(K)


def check_order(order: object, name: str = "order") -> int:
    """A truncation order ``M >= 1`` (eq. 13) as an int; ``TypeError`` (not an int) or
    ``ValueError`` (below 1) naming ``name`` otherwise.

        >>> check_order(12)
        12
        >>> check_order(0)
        Traceback (most recent call last):
            ...
        ValueError: order must be an int >= 1, got 0
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {order!r}")
    if order < 1:
        raise ValueError(f"{name} must be an int >= 1, got {order}")
    return int(order)


def check_trainable(trainable: Sequence[int] | int, K: int) -> tuple[int, ...]:
    """The trainable letters (one index or a sequence) as a sorted tuple of distinct ints
    in ``0..K-1``; ``TypeError`` or ``ValueError`` otherwise.

        >>> check_trainable([0], 2), check_trainable(1, 3)
        ((0,), (1,))
        >>> check_trainable([2], 2)
        Traceback (most recent call last):
            ...
        ValueError: trainable index 2 out of range: allowed 0..1
    """
    items: Any = trainable  # validated here: anything may arrive
    if isinstance(items, (int, np.integer)) and not isinstance(items, bool):
        items = (items,)
    try:
        tr = tuple(items)
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


def estimate_tied_size(K: int, n_trainable: int, order: int, cap: int | None = None) -> tuple:
    """``(n_moments, n_terms)`` of the order-``M`` tied hierarchy before building it.

    ``n_moments`` is exact (:func:`~attndyn.symbolic.words.orbit_count`);
    ``n_terms`` is the number of generated terms before duplicates merge, an
    upper estimate of the stored terms: each word of length ``n < M`` has on
    average ``n * n_trainable / K`` trainable letters, each giving ``2K`` Gamma
    terms, plus one decay term. With ``cap`` it stops once ``n_terms > cap``.

        >>> n_moments, n_terms = estimate_tied_size(2, 1, 4)
        >>> n_moments == tied_structure(2, [0], 4).n_moments, n_terms >= n_moments
        (True, True)
    """
    A = Alphabet(check_K(K))
    M = check_order(order)
    moments = 0
    terms = 0
    for n in range(1, M + 1):
        if cap is not None and n * math.log(K) - math.log(2 * n) > math.log(cap + 1) + 1:
            return max(moments, cap + 1), max(terms, cap + 1)
        N = orbit_count(n, A) if K > 1 else 1
        moments += N
        if n_trainable:
            terms += N + (2 * n * n_trainable * N if n < M else 0)
        if cap is not None and max(moments, terms) > cap:
            return moments, terms
    return moments, terms


def _log10_sum(logs: list[float]) -> float:
    top = max(logs)
    return top + math.log10(sum(10.0 ** (x - top) for x in logs))


def log10_tied_size(K: int, n_trainable: int, order: int) -> tuple[float, float]:
    """``log10`` of the whole ``(n_moments, n_terms)`` of :func:`estimate_tied_size`,
    for a refusal's message at any order (the capped estimate stops early).

    Exact counts (:func:`~attndyn.symbolic.words.orbit_count`) up to length 256, then
    the bracelet asymptote ``K^n / (2n)``; for ``K >= 2`` only the last 64 lengths count
    (the earlier ones add less than ``2^-64`` relative); ``K = 1`` in closed form.

        >>> [round(10 ** x) for x in log10_tied_size(2, 1, 4)] == list(
        ...     estimate_tied_size(2, 1, 4))
        True
    """
    M = check_order(order)
    if K == 1:  # one word per length
        return math.log10(M), math.log10(M + n_trainable * M * (M - 1))
    moments, terms = [], []
    for n in range(max(1, M - 64), M + 1):
        lN = math.log10(orbit_count(n, K)) if n <= 256 else n * math.log10(K) - math.log10(2 * n)
        moments.append(lN)
        terms.append(lN + math.log10(1 + (2 * n * n_trainable if n < M else 0)))
    return _log10_sum(moments), _log10_sum(terms)


def _approx(log10_x: float) -> str:
    return f"{10.0 ** log10_x:.3g}" if log10_x < 300 else f"10^{log10_x:.0f}"


def check_tied_size(K: int, trainable: Sequence[int], order: int,
                    max_terms: int | None = None) -> tuple[int, int]:
    """Refuse a hierarchy that would not fit, before anything is built.

    The limit is ``max_terms`` when given, else the number of terms whose build
    peak (``BUILD_BYTES_PER_TERM``) fits in the available memory. Returns the
    estimate ``(n_moments, n_terms)``; raises :class:`SizeError` (a
    ``ValueError``) naming the sizes, memory and time otherwise.

        >>> check_tied_size(2, [0], 4)[0]
        15
        >>> check_tied_size(2, [0], 40, max_terms=10 ** 6)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        attndyn.symbolic.words.SizeError: the order-40 tied hierarchy (K = 2, trainable [0]) has ~2.82e+10 moments and ~1.13e+12 terms...
    """
    K = check_K(K)
    tr = check_trainable(trainable, K)
    M = check_order(order)
    if max_terms is None:
        mem = _words.available_memory()
        limit = max(mem // BUILD_BYTES_PER_TERM, 1)
        source = (f"the available memory ({mem / 2 ** 30:.1f} GiB at {BUILD_BYTES_PER_TERM} "
                  "bytes per term while building; pass max_terms= to raise it)")
    else:
        if isinstance(max_terms, bool) or not isinstance(max_terms, (int, np.integer)) \
                or max_terms < 1:
            raise ValueError(f"max_terms must be an int >= 1, got {max_terms!r}")
        limit = int(max_terms)
        source = f"max_terms = {limit}"
    moments, terms = estimate_tied_size(K, len(tr), M, cap=limit)
    if max(moments, terms) > limit:
        # the capped estimate stopped past the limit: state the whole size
        lm, lt = log10_tied_size(K, len(tr), M)
        gib = _approx(lt + math.log10(BUILD_BYTES_PER_TERM / 2 ** 30))
        raise SizeError(
            f"the order-{M} tied hierarchy (K = {K}, trainable {list(tr)}) has ~{_approx(lm)} "
            f"moments and ~{_approx(lt)} terms (build ~{gib} GiB, "
            f"~{_approx(lt + math.log10(BUILD_SECONDS_PER_TERM))} s), above the limit of "
            f"{limit:.3g} terms set by {source}; lower the order")
    if moments >= 2 ** 32 - 1:
        raise SizeError(f"the order-{M} hierarchy has {moments} moments: more than the 32-bit "
                        "source index holds; lower the order")
    return moments, terms


class TiedStructure:
    """Integer structure of the truncated tied hierarchy.

    Attributes
    ----------
    K, trainable, order:
        Alphabet size, trainable letters, truncation order ``M``.
    codes, offsets:
        ``codes[n]``: sorted base-``K`` codes of the canonical words of length
        ``n`` (state order); their state indices start at ``offsets[n]``.
    indptr, src, slot, slot_coef, slot_ent:
        CSR form of ``dy[i] = sum_{t in indptr[i]:indptr[i+1]}
        tab[slot[t]] * y[src[t]]`` with ``tab[s] = slot_coef[s] * g[slot_ent[s]]``;
        ``g[k*K + l] = Gamma_kl`` and ``g[K*K] = gamma / 2``. Within a row the
        terms are sorted by (entry, source), the decay term last. Indices are
        unsigned (``uint64`` offsets, ``uint32`` sources, ``uint8``/``uint16``
        slots) so the compiled loop needs no negative-index wraparound.
    ent, coef:
        The per-term entry and integer coefficient (``tab`` unfused), made on demand.
    words:
        Canonical words as tuples, made on demand (by length, then lexicographic).
    gather:
        ``K*K`` state indices of ``q_kl = mu_(k,l)`` (row-major), ``-1`` where
        the truncation sets them to 0 (``order < 2``).

    Examples
    --------
    >>> st = tied_structure(2, [0], 3)
    >>> isinstance(st, TiedStructure), st.K, st.order, st.n_moments
    (True, 2, 3, 9)
    """

    def __init__(self, K: int, trainable: Sequence[int], order: int, codes: list[np.ndarray],
                 offsets: np.ndarray, indptr: np.ndarray, src: np.ndarray, slot: np.ndarray,
                 slot_coef: np.ndarray, slot_ent: np.ndarray, gather: np.ndarray) -> None:
        self.K, self.trainable, self.order = int(K), tuple(trainable), int(order)
        self.codes, self.offsets = codes, offsets
        self.indptr, self.src, self.slot = indptr, src, slot
        self.slot_coef, self.slot_ent, self.gather = slot_coef, slot_ent, gather
        #: ``(path, stamp)`` of the cache file holding these arrays (set by
        #: :func:`tied_structure`), under which kernels may keep layouts made from them
        self.cache_id: tuple[str, str] | None = None

    def __repr__(self) -> str:
        return (f"TiedStructure(K={self.K}, trainable={self.trainable}, order={self.order}, "
                f"n_moments={self.n_moments}, n_terms={self.n_terms})")

    @property
    def alphabet(self) -> Alphabet:
        return Alphabet(self.K)

    @property
    def n_moments(self) -> int:
        return int(self.offsets[self.order + 1])

    @property
    def n_terms(self) -> int:
        return int(self.src.size)

    @property
    def n_entries(self) -> int:
        """Length of the coefficient vector ``g`` (Gamma entries + decay)."""
        return self.K * self.K + 1

    @property
    def nbytes(self) -> int:
        """Bytes held by the structure arrays."""
        return int(sum(a.nbytes for a in (self.indptr, self.src, self.slot, self.slot_coef,
                                          self.slot_ent, self.gather, self.offsets))
                   + sum(c.nbytes for c in self.codes))

    @cached_property
    def words(self) -> list:
        import gc
        import struct
        out: list = []
        # the letters as one contiguous uint8 row per word (K <= MAX_K = 255), unpacked
        # into tuples by struct in C, with the cyclic collector paused (the tuples hold
        # ints only): 0.31 -> 0.19 s CPU at order 24 (743199 words) against zipping one
        # list per letter position; made by the first integrate
        enabled = gc.isenabled()
        gc.disable()
        try:
            for n in range(1, self.order + 1):
                if self.codes[n].size:
                    # numpy arrays are buffers; numpy's stubs say so from Python 3.12 only
                    out.extend(struct.iter_unpack(
                        f"{n}B", _letters(self.codes[n], n, self.K)))  # type: ignore[arg-type]
        finally:
            if enabled:
                gc.enable()
        return out

    @cached_property
    def ent(self) -> np.ndarray:
        ent: np.ndarray = self.slot_ent.astype(np.int16)[self.slot]
        return ent

    @cached_property
    def coef(self) -> np.ndarray:
        coef: np.ndarray = self.slot_coef.astype(np.int16)[self.slot]
        return coef

    def indices_of_codes(self, codes: np.ndarray, n: int) -> np.ndarray:
        """State indices of canonical base-``K`` codes of length ``n`` (vectorised)."""
        c = self.codes[n]
        pos = np.searchsorted(c, codes)
        if pos.size and (pos.max() >= c.size or np.any(c[pos] != codes)):
            raise ValueError("a code is not canonical at this length")
        idx: np.ndarray = self.offsets[n] + pos
        return idx

    def index(self, word: Sequence[int]) -> int:
        """State index of any word (canonicalised first)."""
        w = self.alphabet.check_word(word)
        if len(w) == 0:
            raise ValueError("word must have length >= 1 (the empty trace is 1)")
        if len(w) > self.order:
            raise ValueError(
                f"word {w} has length {len(w)} > truncation order {self.order}; "
                "longer moments are set to 0 by the truncation (eq. 13)")
        c = encode(np.asarray([canonical(w)], dtype=np.int64), self.K)
        return int(self.indices_of_codes(c, len(w))[0])

    def labels(self) -> list:
        """Plain-text names in state order, as :func:`attndyn.symbolic.printing.word_label`
        writes them (``mu_1``, ``q_12``, ``mu_112``), made from the codes without tuples."""
        if self.K > 9:
            from .printing import word_label
            return [word_label(w, self.K) for w in self.words]
        parts: list = []
        for n in range(1, self.order + 1):
            c = self.codes[n]
            if c.size == 0:
                continue
            head = b"q_" if n == 2 else b"mu_"
            # one ASCII line per name, split into str objects in C (0.15-0.24 -> 0.08 s at
            # order 24 against numpy's fixed-width str.tolist)
            h = len(head)
            chars = np.empty((c.size, h + n + 1), dtype=np.uint8)
            chars[:, :h] = np.frombuffer(head, dtype=np.uint8)
            chars[:, h:h + n] = _letters(c, n, self.K)
            chars[:, h:h + n] += ord("1")
            chars[:, -1] = ord("\n")
            parts.append(chars.tobytes())
        return b"".join(parts).decode("ascii").split("\n")[:-1] if parts else []

    def lengths(self) -> np.ndarray:
        return np.repeat(np.arange(1, self.order + 1, dtype=np.int64),
                         np.diff(self.offsets[1:self.order + 2]))

    def terms(self) -> Iterator[tuple[int, int, tuple[int, int] | str, int]]:
        """Iterate ``(target, source, (k, l) or 'decay', coef)`` in CSR order."""
        K = self.K
        ent, coef = self.ent, self.coef
        for i in range(self.n_moments):
            for t in range(int(self.indptr[i]), int(self.indptr[i + 1])):
                e = int(ent[t])
                key = "decay" if e == K * K else (e // K, e % K)
                yield i, int(self.src[t]), key, int(coef[t])

    # -- disk cache -------------------------------------------------------------
    _ARRAYS = ("offsets", "indptr", "src", "slot", "slot_coef", "slot_ent", "gather")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the arrays to ``path`` (``.npz``, no pickles), atomically."""
        path = os.fspath(path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, K=np.int64(self.K), trainable=np.asarray(self.trainable, np.int64),
                     order=np.int64(self.order), version=np.int64(STRUCTURE_VERSION),
                     allcodes=np.concatenate([self.codes[n] for n in range(1, self.order + 1)]),
                     **{a: getattr(self, a) for a in self._ARRAYS})
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], K: int, trainable: Sequence[int],
             order: int) -> TiedStructure | None:
        """Read a structure saved by :meth:`save`; ``None`` if it does not match or is damaged."""
        try:
            with np.load(os.fspath(path), allow_pickle=False) as z:
                if (int(z["version"]) != STRUCTURE_VERSION or int(z["K"]) != K
                        or tuple(z["trainable"].tolist()) != tuple(trainable)
                        or int(z["order"]) != order):
                    return None
                arr = {a: z[a] for a in cls._ARRAYS}
                allcodes = z["allcodes"]
        except Exception:  # a damaged or foreign file is rebuilt, never trusted
            return None
        off, indptr, src = arr["offsets"], arr["indptr"], arr["src"]
        n_mom = int(off[-1]) if off.size == order + 2 else -1
        ok = (off.dtype == np.int64 and n_mom == allcodes.size and allcodes.dtype == np.int64
              and indptr.dtype == np.uint64 and indptr.size == n_mom + 1
              and src.dtype == np.uint32 and arr["slot"].dtype in (np.uint8, np.uint16)
              and arr["slot"].size == src.size and int(indptr[-1]) == src.size
              and arr["slot_coef"].dtype == np.float64 and arr["slot_ent"].dtype == np.int64
              and arr["slot_coef"].size == arr["slot_ent"].size and arr["gather"].size == K * K
              and (src.size == 0 or (int(src.max()) < n_mom
                                     and int(arr["slot"].max()) < arr["slot_coef"].size))
              and bool(np.all(np.diff(indptr.astype(np.int64)) >= 0))
              and (arr["slot_ent"].size == 0 or (arr["slot_ent"].min() >= 0
                                                 and arr["slot_ent"].max() <= K * K)))
        if not ok:
            return None
        codes = [np.zeros(0, dtype=np.int64)] + [
            allcodes[off[n]:off[n + 1]] for n in range(1, order + 1)] + [np.zeros(0, np.int64)]
        return cls(K, trainable, order, codes, off, indptr, src, arr["slot"], arr["slot_coef"],
                   arr["slot_ent"], arr["gather"])


def _letters(codes: np.ndarray, n: int, K: int) -> np.ndarray:
    """The letters of base-``K`` codes of length ``n`` as a C-contiguous ``(N, n)`` uint8
    array (``K <= MAX_K``): filled position by position into contiguous uint8 rows and
    transposed once, without :func:`decode`'s ``(N, n)`` int64 array (143 MB of fresh pages
    at order 24, most of the word list's and the names' first-call cost)."""
    out = np.empty((n, codes.size), dtype=np.uint8)
    c = np.array(codes, dtype=np.int64)
    d = np.empty_like(c)
    b = K.bit_length() - 1 if K > 1 and K & (K - 1) == 0 else 0
    for j in range(n - 1, -1, -1):
        if b:
            np.bitwise_and(c, K - 1, out=d)
            np.right_shift(c, b, out=c)
        else:
            np.divmod(c, K, out=(c, d))
        out[j] = d
    return np.ascontiguousarray(out.T)


def _cache_path(folder: str | os.PathLike[str], K: int, tr: tuple[int, ...], M: int) -> str:
    key = hashlib.sha256(repr(("tied", K, tr, M, STRUCTURE_VERSION)).encode()).hexdigest()[:20]
    return os.path.join(os.fspath(folder), f"tied_{key}.npz")


def tied_structure(K: int, trainable: Sequence[int], order: int, *,
                   max_terms: int | None = None,
                   cache_dir: str | os.PathLike[str] | None = None) -> TiedStructure:
    """Build the truncated tied hierarchy of eq. (11) at order ``M = order``.

    The size is estimated first and refused above ``max_terms`` (default: what
    the available memory holds, :func:`check_tied_size`). Words stay base-``K``
    integer codes: every insertion ``(l k)`` / ``(k l)`` at a trainable position
    is integer arithmetic on a block of codes, canonicalisation and the index
    lookup are vectorised, and duplicate terms merge block by block, so the
    build peak stays a few tens of bytes per stored term. With ``cache_dir``
    (a private folder) the arrays are saved there and reused, keyed by
    ``(K, trainable, order, STRUCTURE_VERSION)``.

        >>> st = tied_structure(2, [0], 4)
        >>> st.n_moments, st.words[:5]
        (15, [(0,), (1,), (0, 0), (0, 1), (1, 1)])
    """
    K = check_K(K)
    M = check_order(order)
    tr = check_trainable(trainable, K)
    _, est_terms = check_tied_size(K, tr, M, max_terms)
    path = None
    if cache_dir is not None and est_terms >= _CACHE_MIN_TERMS:
        path = _cache_path(cache_dir, K, tr, M)
        if os.path.exists(path):
            s = TiedStructure.load(path, K, tr, M)
            if s is not None:
                s.cache_id = _cache_stamp(path)
                return s
    s = _build(K, tr, M)
    if path is not None:
        try:
            s.save(path)
            s.cache_id = _cache_stamp(path)
        except OSError:
            pass  # the cache is an optimisation only
    return s


def _cache_stamp(path: str) -> tuple[str, str] | None:
    """``(path, stamp)`` naming the contents of a structure file: its key (in ``path``),
    size and modification time, so that a rewritten file gets new derived files."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path, f"{os.path.basename(path)}:{st.st_size}:{st.st_mtime_ns}"


_CACHE_MIN_TERMS = 20000  # smaller structures build faster than a file loads
_CHUNK_TERMS = 1 << 20  # generated terms per merge block: bounds the build temporaries


def _build(K: int, tr: tuple, M: int) -> TiedStructure:
    """The structure arrays of the tied hierarchy (eq. 13), built in bounded chunks of rows."""
    alphabet = Alphabet(K)
    is_tr = np.zeros(K, dtype=bool)
    is_tr[list(tr)] = True
    n_ent = K * K + 1
    codes, offsets = _word_codes(K, tr, M, alphabet)
    n_mom = int(offsets[M + 1])
    counts = np.zeros(n_mom, dtype=np.int64)
    src_parts: list = []
    slot_parts: list = []
    slots = _SlotTable(n_ent)
    Kp = [np.int64(K) ** j for j in range(M + 2)]
    for n in range(1, M + 1):
        C = codes[n]
        N = C.size
        if N == 0 or not tr:
            continue
        N1 = codes[n + 1].size if n < M else 0
        per_row = 2 * K * n + 1
        R = max(1, _CHUNK_TERMS // per_row)
        if N1:
            R = max(1, min(R, (2 ** 62) // (n_ent * N1)))
        for a in range(0, N, R):
            c = C[a:a + R]
            r = c.size
            digits = [((c // Kp[n - 1 - p]) % K) for p in range(n)]
            ntr = np.zeros(r, dtype=np.int64)
            for d in digits:
                ntr += is_tr[d]
            keys = (_gamma_keys(c, digits, n, K, is_tr, Kp, codes[n + 1], alphabet, n_ent, N1)
                    if n < M else [])
            g_src, g_tgt, g_slot = _gamma_terms(keys, N1, n_ent, slots, offsets[n + 1])
            del keys
            src_c, slot_c, row_len = _chunk_rows(r, ntr, g_src, g_tgt, g_slot,
                                                 offsets[n] + a, slots, K)
            counts[offsets[n] + a:offsets[n] + a + r] = row_len
            src_parts.append(src_c)
            slot_parts.append(slot_c)
    return _assemble(K, tr, M, codes, offsets, counts, src_parts, slot_parts, slots.pairs)


def _word_codes(K: int, tr: tuple[int, ...], M: int, alphabet: Alphabet
                ) -> tuple[list[np.ndarray], np.ndarray]:
    """The canonical word codes per length ``1..M`` and the moment offsets of each length."""
    codes: list = [np.zeros(0, dtype=np.int64)] * (M + 2)
    offsets = np.zeros(M + 2, dtype=np.int64)
    for n, c in canonical_code_blocks(M, alphabet, max_words=max(
            estimate_tied_size(K, len(tr), M)[0], 1)):
        codes[n] = c
    for n in range(1, M + 1):
        offsets[n + 1] = offsets[n] + codes[n].size
    return codes, offsets


class _SlotTable:
    """The slot table: ``(|coef|, ent) -> slot id``, assigned in order of first appearance."""

    def __init__(self, n_ent: int):
        self.n_ent = n_ent
        self.lut = np.full(4 * n_ent, -1, dtype=np.int64)
        self.pairs: list = []

    def __call__(self, absc: np.ndarray, ent: np.ndarray) -> np.ndarray:
        """The slot ids of the pairs ``(absc, ent)``, new pairs getting the next ids."""
        pair = absc * self.n_ent + ent
        top = int(pair.max()) if pair.size else 0
        if top >= self.lut.size:  # grow (at least double) the lookup table
            self.lut = np.concatenate([self.lut, np.full(max(top + 1, self.lut.size), -1,
                                                         np.int64)])
        lut = self.lut
        new = np.unique(pair[lut[pair] < 0])
        for p in new.tolist():
            lut[p] = len(self.pairs)
            self.pairs.append(p)
        ids: np.ndarray = lut[pair]
        return ids


def _gamma_keys(c: np.ndarray, digits: Sequence[np.ndarray], n: int, K: int, is_tr: np.ndarray,
                Kp: Sequence[int], next_codes: np.ndarray, alphabet: Alphabet, n_ent: int,
                N1: int) -> list[np.ndarray]:
    """The Gamma terms of a chunk of words as packed keys ``(row, entry, source)``."""
    keys = []
    for p in range(n):
        rows = np.flatnonzero(is_tr[digits[p]])
        if rows.size == 0:
            continue
        cp = c[rows]
        k = digits[p][rows]
        wa, wb = Kp[n - 1 - p], Kp[n - p]
        hi_a, lo_a = cp // wa, cp % wa   # (k l): l goes after position p
        hi_b, lo_b = cp // wb, cp % wb   # (l k): l goes before position p
        base = rows * n_ent + k * K
        for l in range(K):
            for new in ((hi_a * K + l) * wa + lo_a, (hi_b * K + l) * wb + lo_b):
                pos = np.searchsorted(next_codes, canonical_codes(new, n + 1, alphabet))
                keys.append((base + l) * N1 + pos)
    return keys


def _gamma_terms(keys: list[np.ndarray], N1: int, n_ent: int, slots: _SlotTable,
                 src_offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct Gamma terms of the keys (sorted): source moments, target rows, slots."""
    if not keys:
        g = np.zeros(0, dtype=np.int64)
        return g, g, g
    uk, cnt = np.unique(np.concatenate(keys), return_counts=True)
    keys.clear()  # the caller's list: free the raw keys before the split below
    g_src = uk % N1
    rest = uk // N1
    del uk
    g_ent = rest % n_ent
    g_tgt = rest // n_ent
    del rest
    g_slot = slots(cnt, g_ent)
    g_src += src_offset
    return g_src, g_tgt, g_slot


def _chunk_rows(r: int, ntr: np.ndarray, g_src: np.ndarray, g_tgt: np.ndarray, g_slot: np.ndarray,
                row0: int, slots: _SlotTable, K: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One chunk's rows: the Gamma terms in sorted order, each row's decay term last."""
    has = ntr > 0
    row_len = np.bincount(g_tgt, minlength=r) + has
    start = np.zeros(r + 1, dtype=np.int64)
    np.cumsum(row_len, out=start[1:])
    total = int(start[-1])
    src_c = np.empty(total, dtype=np.uint32)
    slot_c = np.empty(total, dtype=np.uint16)
    shift = np.concatenate([[0], np.cumsum(has)])[:-1] if r else np.zeros(0, np.int64)
    gpos = np.arange(g_src.size, dtype=np.int64) + shift[g_tgt]
    src_c[gpos] = g_src
    slot_c[gpos] = g_slot
    drow = np.flatnonzero(has)
    dpos = start[drow + 1] - 1
    src_c[dpos] = row0 + drow
    slot_c[dpos] = slots(ntr[drow], np.full(drow.size, K * K, dtype=np.int64))
    return src_c, slot_c, row_len


def _assemble(K: int, tr: tuple[int, ...], M: int, codes: list[np.ndarray],
              offsets: np.ndarray, counts: np.ndarray,
              src_parts: list[np.ndarray], slot_parts: list[np.ndarray],
              slot_pairs: list[int]) -> TiedStructure:
    """The TiedStructure from the chunks' rows (the lists are emptied as they are joined)."""
    n_ent = K * K + 1
    n_mom = int(offsets[M + 1])
    n_slots = len(slot_pairs)
    sdt = np.uint8 if n_slots <= 256 else np.uint16
    slot = (np.concatenate([s.astype(sdt, copy=False) for s in slot_parts]) if slot_parts
            else np.zeros(0, dtype=sdt))
    slot_parts.clear()
    src = np.concatenate(src_parts) if src_parts else np.zeros(0, dtype=np.uint32)
    src_parts.clear()
    indptr = np.zeros(n_mom + 1, dtype=np.uint64)
    np.cumsum(counts, out=indptr[1:])
    pairs = np.asarray(slot_pairs, dtype=np.int64)
    slot_coef = -(pairs // n_ent).astype(np.float64)
    slot_ent = pairs % n_ent
    gather = np.full(K * K, -1, dtype=np.int64)
    if M >= 2:
        for k in range(K):
            for l in range(K):
                cc = encode(np.asarray([canonical((k, l))], dtype=np.int64), K)
                gather[k * K + l] = offsets[2] + int(np.searchsorted(codes[2], cc[0]))
    return TiedStructure(K, tr, M, codes, offsets, indptr, src, slot, slot_coef, slot_ent, gather)


def gamma_program(gamma: Any, q: Any, subs: dict[Any, Any] | None = None,
                  K: int | None = None) -> tuple[NDArray[np.int64], NDArray[np.int64],
                                                 NDArray[np.float64], NDArray[np.int64]] | None:
    """The Gamma polynomial as a Taylor-arithmetic *program* for the Taylor integrator.

    ``gamma`` is the ``K x K`` SymPy matrix ``Gamma(q)`` (eq. 91) in the overlap
    symbols ``q`` (``q[k, l]`` is read from ``x[k*K + l]``, the same layout as the
    compiled gradient's input); ``subs`` maps parameter symbols to numbers.
    Returns ``(mono_ptr, mono_vars, mono_coef, mono_out)``: monomial ``m`` is
    ``mono_coef[m] * prod(x[mono_vars[mono_ptr[m]:mono_ptr[m+1]]])`` added to
    ``Gamma.ravel()[mono_out[m]]``. ``None`` if an entry is not a polynomial in
    ``q`` with finite real coefficients (then the Runge-Kutta integrators apply).

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> from attndyn.symbolic.potential import tied_potential
        >>> pot = tied_potential(mse_teacher_student("h2"), K=2)
        >>> prog = gamma_program(pot.gamma, pot.q)
        >>> len(prog)
        4
    """
    import sympy as sp

    from .parse import as_sympy

    K = int(gamma.shape[0]) if K is None else int(K)
    index: dict[Any, int] = {}
    for k in range(K):
        for l in range(K):
            index.setdefault(q[k, l], k * K + l)
    qsyms = list(index)
    ptr, var, coef, out = [0], [], [], []
    for k in range(K):
        for l in range(K):
            e = as_sympy(gamma[k, l], f"gamma[{k}, {l}]")
            if subs:
                e = e.xreplace(subs)
            if e.free_symbols - set(qsyms):
                return None
            try:
                poly = sp.Poly(sp.expand(e), *qsyms) if qsyms else None
            except sp.PolynomialError:
                return None
            terms = poly.terms() if poly is not None else [((), e)]
            for exps, c in terms:
                if c == 0:
                    continue
                try:
                    cf = complex(c)
                except (TypeError, ValueError):
                    return None
                if cf.imag != 0 or not math.isfinite(cf.real):
                    return None
                for s_, a in zip(qsyms, exps):
                    var.extend([index[s_]] * int(a))
                ptr.append(len(var))
                coef.append(cf.real)
                out.append(k * K + l)
    return (np.asarray(ptr, dtype=np.int64), np.asarray(var, dtype=np.int64),
            np.asarray(coef, dtype=np.float64), np.asarray(out, dtype=np.int64))
