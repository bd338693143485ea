"""Generic array-driven right-hand side of a moment hierarchy.

Every hierarchy in attndyn has the form (paper 003, eqs. 11, 13, 31-32, 402-404)

    dy_i/dt = sum_{t in row i} coef_t * g[ent_t] * y[src_t],
    g = ( f(y[gather], p), consts ),

where ``f`` is a small compiled potential gradient (the ``Gamma_kl`` of the
tied model, say) and ``consts`` holds constants such as the decay
``gamma/2``. The structure arrays come from ``attndyn.symbolic``; ``f`` is a
first-class numba function with the fixed signature ``GRAD_SIG``, so these
kernels compile once for every model, loss and truncation order.

The inner loop runs at the memory-read limit: the (entry, coefficient) pair
of a term is one small *slot* (``uint8``, or ``uint16`` for large alphabets)
into a table ``tab[s] = slot_coef[s] * g[slot_ent[s]]`` filled once per call,
and every index is unsigned (``uint64`` row offsets, ``uint32`` sources), so
numba emits no negative-index wraparound. The product ``tab[s] * y[src]`` is
``(coef * g) * y`` evaluated in the same order as the unfused
``coef * g[ent] * y[src]``, so the result is bit-identical to it.

The kernels do not walk the rows in CSR order but in a *grouped layout*
(:func:`row_layout`): within chunks of ``ROW_CHUNK`` consecutive rows, the rows
are taken in order of their number of terms, with their terms copied into that
order. A run of rows of equal length ends its inner loop at the same count, so
the branch predictor stops missing at every row end (15-20% of the loop at
orders 20-22, measured); the chunks keep the reads of ``y`` local. Each row is
still summed by one loop in its own term order, so the bits do not change.

With ``uint8`` slots and fewer than ``2**24`` moments the kernels read one packed
``uint32`` per term, ``src << 8 | slot`` (:func:`packed_terms`): three loads per term
instead of four. They take four rows of a group at a time (a group's rows have equal
lengths, so the four loops end together), each row in its own accumulator and its own
term order: four independent add chains, the same operations per row, so the same bits.
One thread, CPU time, load 5, same run: 0.55 / 0.57 / 0.72 -> 0.48 / 0.48 / 0.52 ns per
term at orders 16 / 20 / 22 (K = 2; ``benchmarks/bench_hierarchy.py``). ``uint16`` slots,
or ``2**24`` moments and more, keep separate sources and slots (:func:`apply_groups`).

Kernels are compiled (or loaded from numba's cache) on first use, never at
import: :func:`rhs_kernel` returns the compiled dispatcher.
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import numpy as np
from numba import njit, prange, types

__all__ = ["GRAD_SIG", "GRAD_FTYPE", "VALGRAD_SIG", "VALGRAD_FTYPE", "RHS_SIG", "rhs_kernel",
           "rhs_signature", "rhs_into", "fuse_terms", "function_pointer", "fused_system",
           "check_system", "row_blocks", "row_layout", "group_rows", "group_blocks",
           "layout_args", "auto_threads", "ROW_CHUNK", "PARALLEL_TERMS_PER_THREAD",
           "apply_groups", "apply_groups_parallel", "apply_groups_all", "apply_groups_values",
           "apply_groups_values_parallel", "parallel_variant", "launch_threads", "PERMUTE_TERMS",
           "touch_order", "permuted_args", "packed_terms", "kernel_layout", "apply_packed",
           "apply_packed_all", "apply_packed_parallel", "PACK_BITS"]

#: rows per chunk of the grouped layout (see the module docstring): long enough that most
#: chunks hold several rows of each length, short enough that a chunk's reads of ``y``
#: stay in cache (512-4096 measured alike at orders 20-22; all rows in one chunk lost
#: the gain at order 22)
ROW_CHUNK = 1024

GRAD_SIG = types.void(types.float64[::1], types.float64[::1], types.float64[::1])
GRAD_FTYPE = types.FunctionType(GRAD_SIG)
VALGRAD_SIG = types.float64(types.float64[::1], types.float64[::1], types.float64[::1])
VALGRAD_FTYPE = types.FunctionType(VALGRAD_SIG)

_i64 = types.int64[::1]
_f64 = types.float64[::1]
SLOT_TYPES = {np.dtype(np.uint8): types.uint8[::1], np.dtype(np.uint16): types.uint16[::1]}


def rhs_signature(slot_dtype=np.uint8):
    """Signature of the fused RHS kernel for a slot dtype (``uint8`` or ``uint16``)."""
    return types.void(
        _f64,                # y
        GRAD_FTYPE,          # gfun
        _f64,                # gparams
        _i64,                # gather
        _f64,                # consts
        types.uint32[::1],   # rows (grouped layout: the rows in processing order)
        types.uint64[:, ::1],  # groups (length, count, first term, first position)
        types.uint32[::1],   # gsrc (sources in layout order)
        SLOT_TYPES[np.dtype(slot_dtype)],  # gslot (slots in layout order)
        _f64,                # slot_coef
        _i64,                # slot_ent
        _i64,                # gblocks (group-block bounds; one block: serial)
        _f64,                # xbuf (len gather)
        _f64,                # gout (len n_grad)
        _f64,                # g (len n_grad + len consts)
        _f64,                # tab (len slot_coef)
        _f64,                # dy (out)
    )


#: Unfused argument layout ``(y, gfun, gparams, gather, consts, indptr, src, ent, coef, ...)``
#: with the integer dtypes :func:`fuse_terms` accepts; :func:`rhs_into` and
#: :func:`attndyn.kernels.integrate.dopri5_sparse` fuse such a system on the fly.
RHS_SIG = types.void(_f64, GRAD_FTYPE, _f64, _i64, _f64, types.uint64[::1], types.uint32[::1],
                     types.int16[::1], types.int16[::1], _f64, _f64, _f64, _f64)


@njit(cache=True)
def gamma_table(y, gfun, gparams, gather, consts, slot_coef, slot_ent, xbuf, gout, g, tab):
    """``g = (f(y[gather], p), consts)`` and ``tab[s] = slot_coef[s] * g[slot_ent[s]]``."""
    for i in range(gather.size):
        j = gather[i]
        xbuf[i] = y[j] if j >= 0 else 0.0
    gfun(xbuf, gparams, gout)
    ng = gout.size
    for i in range(ng):
        g[i] = gout[i]
    for i in range(consts.size):
        g[ng + i] = consts[i]
    for s in range(tab.size):
        tab[s] = slot_coef[s] * g[slot_ent[s]]


@njit(cache=True)
def apply_rows(indptr, src, slot, tab, y, dy, r0, r1):
    """``dy[i] = sum_t tab[slot[t]] * y[src[t]]`` for rows ``r0 <= i < r1``, terms in order.

    The row index is unsigned too (``r0, r1`` arrive as int64: a signed ``i`` made numba
    wrap ``indptr[i]`` and ``dy[i]`` for negative values, 20-25% of the loop's time,
    measured), and one term cursor ``t`` runs through the rows (CSR rows are adjacent),
    so each row costs one ``indptr`` load. Callers guarantee ``0 <= r0 <= r1 <= n``."""
    one = np.uint64(1)
    t = indptr[np.uint64(r0)]
    for i in range(np.uint64(r0), np.uint64(r1)):
        e = indptr[i + one]
        acc = 0.0
        while t < e:
            acc += tab[slot[t]] * y[src[t]]
            t += one
        dy[i] = acc


@njit(cache=True)
def apply_groups(rows, groups, src, slot, tab, y, dy, g0, g1):
    """``dy[i] = sum_t tab[slot[t]] * y[src[t]]`` over the rows of groups ``g0 <= g < g1``
    of the grouped layout (:func:`row_layout`): group ``g`` holds ``groups[g, 1]`` rows of
    ``groups[g, 0]`` terms each, its terms from ``groups[g, 2]`` on and its rows at
    positions ``groups[g, 3]..`` of ``rows``. Terms of a row are summed in their order;
    every index is unsigned."""
    one = np.uint64(1)
    for g in range(np.uint64(g0), np.uint64(g1)):
        L = groups[g, 0]
        t = groups[g, 2]
        rp = groups[g, 3]
        for _ in range(groups[g, 1]):
            e = t + L
            acc = 0.0
            while t < e:
                acc += tab[slot[t]] * y[src[t]]
                t += one
            dy[rows[rp]] = acc
            rp += one


@njit(cache=True, parallel=True)
def apply_groups_parallel(rows, groups, src, slot, tab, y, dy, gblocks):
    """:func:`apply_groups` over group blocks in parallel (each row still summed in
    order by one thread, so the same bits)."""
    for b in prange(gblocks.size - 1):
        apply_groups(rows, groups, src, slot, tab, y, dy, gblocks[b], gblocks[b + 1])


@njit(cache=True)
def apply_groups_all(rows, groups, src, slot, tab, y, dy, gblocks):
    """:func:`apply_groups` over every group on one thread: the serial twin of
    :func:`apply_groups_parallel` (same arguments; ``gblocks`` unused)."""
    apply_groups(rows, groups, src, slot, tab, y, dy, 0, groups.shape[0])


#: bits of a packed term (:func:`packed_terms`) that hold the slot
PACK_BITS = 8


@njit(cache=True)
def apply_packed(rows, groups, term, tab, y, dy, g0, g1):
    """:func:`apply_groups` on packed terms ``term[t] = src[t] << 8 | slot[t]``
    (:func:`packed_terms`), four rows of a group at a time: each row summed from 0.0 in its
    own term order in its own accumulator, so the same bits as :func:`apply_groups` (four
    independent add chains and three loads per term instead of four: 14-29% faster at
    orders 16-22, measured). Groups of one-term rows (the top order's decay, 46% of the rows
    at order 20) run as a plain loop over their rows: 1.07 -> 0.62 ns per row (measured)."""
    one = np.uint64(1)
    four = np.uint64(4)
    mask = np.uint32(255)
    sh = np.uint32(PACK_BITS)
    for g in range(np.uint64(g0), np.uint64(g1)):
        L = groups[g, 0]
        t = groups[g, 2]
        rp = groups[g, 3]
        c = groups[g, 1]
        if L == one:  # one term per row (the top order's decay): a plain loop over the rows
            for k in range(c):
                p0 = term[t + k]
                dy[rows[rp + k]] = 0.0 + tab[p0 & mask] * y[p0 >> sh]
            continue
        r = np.uint64(0)
        while r + four <= c:
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            a3 = 0.0
            t1 = t + L
            t2 = t1 + L
            t3 = t2 + L
            for j in range(L):
                p0 = term[t + j]
                p1 = term[t1 + j]
                p2 = term[t2 + j]
                p3 = term[t3 + j]
                a0 += tab[p0 & mask] * y[p0 >> sh]
                a1 += tab[p1 & mask] * y[p1 >> sh]
                a2 += tab[p2 & mask] * y[p2 >> sh]
                a3 += tab[p3 & mask] * y[p3 >> sh]
            dy[rows[rp]] = a0
            dy[rows[rp + one]] = a1
            dy[rows[rp + one + one]] = a2
            dy[rows[rp + four - one]] = a3
            t += four * L
            rp += four
            r += four
        while r < c:
            acc = 0.0
            for j in range(L):
                p0 = term[t + j]
                acc += tab[p0 & mask] * y[p0 >> sh]
            dy[rows[rp]] = acc
            t += L
            rp += one
            r += one


@njit(cache=True)
def apply_packed_all(rows, groups, term, slot, tab, y, dy, gblocks):
    """:func:`apply_packed` over every group on one thread, with the argument list of
    :func:`apply_groups_all` (``term`` in place of the sources; ``slot`` unused)."""
    apply_packed(rows, groups, term, tab, y, dy, 0, groups.shape[0])


@njit(cache=True, parallel=True)
def apply_packed_parallel(rows, groups, term, slot, tab, y, dy, gblocks):
    """:func:`apply_packed` over group blocks in parallel (the same bits)."""
    for b in prange(gblocks.size - 1):
        apply_packed(rows, groups, term, tab, y, dy, gblocks[b], gblocks[b + 1])


@njit(cache=True)
def _groups_values(rows, groups, src, val, y, dy, g0, g1):
    # two rows of a group at a time (equal lengths: no tail inside the pair), each summed
    # in its own order: two independent add chains (about 10% at order 16, measured)
    one = np.uint64(1)
    two = np.uint64(2)
    for g in range(np.uint64(g0), np.uint64(g1)):
        L = groups[g, 0]
        t = groups[g, 2]
        rp = groups[g, 3]
        c = groups[g, 1]
        r = np.uint64(0)
        while r + one < c:
            a0 = 0.0
            a1 = 0.0
            t1 = t + L
            for j in range(L):
                a0 += val[t + j] * y[src[t + j]]
                a1 += val[t1 + j] * y[src[t1 + j]]
            dy[rows[rp]] = a0
            dy[rows[rp + one]] = a1
            t += L + L
            rp += two
            r += two
        if r < c:
            acc = 0.0
            for j in range(L):
                acc += val[t + j] * y[src[t + j]]
            dy[rows[rp]] = acc


@njit(cache=True)
def apply_groups_values(rows, groups, src, val, y, dy, gblocks):
    """:func:`apply_groups_all` with the term values ``val[t] = tab[slot[t]]`` spelt out
    (one load less per term, 10-15% faster, measured; the same products): for many
    products with one table, as the Taylor kernel's constant-Gamma recurrence."""
    _groups_values(rows, groups, src, val, y, dy, 0, groups.shape[0])


@njit(cache=True, parallel=True)
def apply_groups_values_parallel(rows, groups, src, val, y, dy, gblocks):
    """:func:`apply_groups_values` over group blocks in parallel."""
    for b in prange(gblocks.size - 1):
        _groups_values(rows, groups, src, val, y, dy, gblocks[b], gblocks[b + 1])


def parallel_variant(fn, name: str, **swaps):
    """A copy of the Python function ``fn`` named ``name`` whose globals have ``swaps``
    (the serial helpers it calls replaced by their parallel twins), for ``njit``: the
    distinct name gives it its own numba cache file, so the serial kernel never links the
    threading layer (starting it costs about 0.1 s)."""
    import types as _pytypes
    glb = dict(fn.__globals__)
    glb.update(swaps)
    f = _pytypes.FunctionType(fn.__code__, glb, name, fn.__defaults__, fn.__closure__)
    f.__qualname__ = name
    f.__module__ = fn.__module__
    f.__doc__ = fn.__doc__
    return f


def launch_threads() -> None:
    """Start numba's threading layer: a parallel function loaded from numba's cache needs
    it up before its first call (else LLVM misses the scheduler symbols)."""
    from numba.np.ufunc.parallel import _launch_threads
    _launch_threads()


def _sparse_rhs(y, gfun, gparams, gather, consts, rows, groups, gsrc, gslot, slot_coef,
                slot_ent, gblocks, xbuf, gout, g, tab, dy):
    """Write ``dy = F(y)`` for the sparse bilinear hierarchy into ``dy`` (one thread)."""
    gamma_table(y, gfun, gparams, gather, consts, slot_coef, slot_ent, xbuf, gout, g, tab)
    apply_groups(rows, groups, gsrc, gslot, tab, y, dy, 0, groups.shape[0])


def _sparse_rhs_parallel(y, gfun, gparams, gather, consts, rows, groups, gsrc, gslot,
                         slot_coef, slot_ent, gblocks, xbuf, gout, g, tab, dy):
    """:func:`_sparse_rhs` with the group blocks on numba's threads."""
    gamma_table(y, gfun, gparams, gather, consts, slot_coef, slot_ent, xbuf, gout, g, tab)
    apply_groups_parallel(rows, groups, gsrc, gslot, tab, y, dy, gblocks)


def _sparse_rhs_packed(y, gfun, gparams, gather, consts, rows, groups, gterm, gslot, slot_coef,
                       slot_ent, gblocks, xbuf, gout, g, tab, dy):
    """:func:`_sparse_rhs` on packed terms (``gterm``: :func:`packed_terms`; ``gslot``
    unused)."""
    gamma_table(y, gfun, gparams, gather, consts, slot_coef, slot_ent, xbuf, gout, g, tab)
    apply_packed(rows, groups, gterm, tab, y, dy, 0, groups.shape[0])


def _sparse_rhs_packed_parallel(y, gfun, gparams, gather, consts, rows, groups, gterm, gslot,
                                slot_coef, slot_ent, gblocks, xbuf, gout, g, tab, dy):
    """:func:`_sparse_rhs_packed` with the group blocks on numba's threads."""
    gamma_table(y, gfun, gparams, gather, consts, slot_coef, slot_ent, xbuf, gout, g, tab)
    apply_packed_parallel(rows, groups, gterm, gslot, tab, y, dy, gblocks)


_compiled: dict = {}
_RHS_FNS = {(False, False): _sparse_rhs, (True, False): _sparse_rhs_parallel,
            (False, True): _sparse_rhs_packed, (True, True): _sparse_rhs_packed_parallel}


def rhs_kernel(slot_dtype=np.uint8, parallel: bool = False, packed: bool = False):
    """The compiled fused RHS kernel (signature :func:`rhs_signature`), compiled or
    loaded from numba's cache on the first call, then reused for every order and loss.

    ``parallel=True`` runs the group blocks (``gblocks``, :func:`group_blocks`) on
    numba's threads; each row is still summed in order by one thread, so the result is
    the same bits. The arguments after ``consts`` are :func:`layout_args` of the system,
    then ``slot_coef, slot_ent, gblocks`` and the work buffers. ``packed=True`` (``uint8``
    slots only): the sources argument holds the packed terms (:func:`packed_terms`) and
    the slots argument is not read (the same bits, :func:`apply_packed`).
    """
    if packed and np.dtype(slot_dtype) != np.uint8:
        raise ValueError("packed terms need uint8 slots")
    key = (np.dtype(slot_dtype), bool(parallel), bool(packed))
    k = _compiled.get(key)
    if k is None:
        if parallel:
            launch_threads()
        fn = _RHS_FNS[key[1:]]
        k = _compiled[key] = njit(rhs_signature(key[0]), cache=True)(fn)
    return k


def row_blocks(indptr, n_blocks: int) -> np.ndarray:
    """Bounds of ``n_blocks`` contiguous row blocks holding about equal numbers of terms
    (``[0, n]`` for one block: the serial loop)."""
    n = indptr.size - 1
    if n_blocks <= 1 or n < 2 * n_blocks:
        return np.array([0, n], dtype=np.int64)
    targets = np.linspace(0, int(indptr[-1]), n_blocks + 1)[1:-1]
    cuts = np.searchsorted(indptr.astype(np.int64), targets)
    b = np.unique(np.concatenate([[0], cuts, [n]])).astype(np.int64)
    return np.ascontiguousarray(b)


@njit(cache=True)
def _layout_order(lens, chunk, rows, groups):
    """Rows by chunk of ``chunk`` rows, then by length (stable: then by row) into ``rows``;
    one line ``(length, count, first term, first position)`` per run of equal lengths in a
    chunk into ``groups`` (``lens.size`` lines at most). Returns the number of groups."""
    n = lens.size
    ng = 0
    term = 0
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        order = np.argsort(lens[c0:c1], kind="mergesort")
        for k in range(c1 - c0):
            p = c0 + k
            r = c0 + order[k]
            rows[p] = r
            L = lens[r]
            if k == 0 or L != groups[ng - 1, 0]:
                groups[ng, 0] = L
                groups[ng, 1] = 0
                groups[ng, 2] = term
                groups[ng, 3] = p
                ng += 1
            groups[ng - 1, 1] += 1
            term += L
    return ng


@njit(cache=True)
def _layout_slots(ip, src, slot, chunk):
    """The grouped layout with the slots: ``(rows, groups (int64), src, slot)``, each row's
    terms in their order (one compiled entry point: one cache load on first use)."""
    n = ip.size - 1
    lens = np.empty(n, dtype=np.int64)
    for i in range(n):
        lens[i] = ip[i + 1] - ip[i]
    rows = np.empty(n, dtype=np.uint32)
    groups = np.empty((max(n, 1), 4), dtype=np.int64)
    ng = _layout_order(lens, chunk, rows, groups)
    total = ip[n] - ip[0]
    osrc = np.empty(total, dtype=np.uint32)
    oslot = np.empty(total, dtype=slot.dtype)
    q = 0
    for p in range(n):
        r = rows[p]
        for t in range(ip[r], ip[r + 1]):
            osrc[q] = src[t]
            oslot[q] = slot[t]
            q += 1
    return rows, groups[:ng], osrc, oslot


@njit(cache=True)
def _layout_values(ip, src, slot, values, chunk):
    """:func:`_layout_slots` of the terms whose value ``values[slot]`` is not zero, the
    values spelt out (float64) in place of the slots."""
    n = ip.size - 1
    lens = np.zeros(n, dtype=np.int64)
    total = 0
    for i in range(n):
        c = 0
        for t in range(ip[i], ip[i + 1]):
            if values[slot[t]] != 0.0:
                c += 1
        lens[i] = c
        total += c
    rows = np.empty(n, dtype=np.uint32)
    groups = np.empty((max(n, 1), 4), dtype=np.int64)
    ng = _layout_order(lens, chunk, rows, groups)
    osrc = np.empty(total, dtype=np.uint32)
    oval = np.empty(total, dtype=np.float64)
    q = 0
    for p in range(n):
        r = rows[p]
        for t in range(ip[r], ip[r + 1]):
            v = values[slot[t]]
            if v != 0.0:
                osrc[q] = src[t]
                oval[q] = v
                q += 1
    return rows, groups[:ng], osrc, oval


def group_rows(indptr, src, slot, chunk: int = ROW_CHUNK, values=None) -> SimpleNamespace:
    """The grouped layout of a CSR structure (see the module docstring).

    Returns a namespace with ``rows`` (uint32, the rows in processing order: by chunk
    of ``chunk`` rows, then by number of terms, then by row), ``groups`` (uint64,
    one line ``(length, count, first term, first position)`` per run of equal-length
    rows of a chunk), and ``src``, ``slot``: the terms copied into that order, each row's
    terms in their own order. ``indptr, src, slot`` must have been checked
    (:func:`check_system`). With ``values`` (float64, one per slot) only the terms whose
    value ``values[slot]`` is not zero are kept and ``slot`` holds their values (float64)
    instead: the constant operator of the Taylor kernel. Compiled passes (a stable sort
    of each chunk's 1024 rows, one copy of the terms): 0.15-0.4 s of numpy sorts and
    gathers at order 24 before."""
    ip = np.ascontiguousarray(indptr, dtype=np.int64)
    n = ip.size - 1
    if n >= 2 ** 32:
        raise ValueError(f"{n} rows: more than the grouped layout's 32-bit row index holds")
    src = np.ascontiguousarray(src)
    slot = np.ascontiguousarray(slot)
    chunk = max(int(chunk), 1)
    if values is None:
        rows, groups, gsrc, gslot = _layout_slots(ip, src, slot, chunk)
    else:
        values = np.ascontiguousarray(values, dtype=np.float64)
        rows, groups, gsrc, gslot = _layout_values(ip, src, slot, values, chunk)
    return SimpleNamespace(rows=rows, groups=np.ascontiguousarray(groups, dtype=np.uint64),
                           src=gsrc, slot=gslot, n_rows=n, n_terms=int(gsrc.size))


def group_blocks(groups, n_blocks: int) -> np.ndarray:
    """Bounds of ``n_blocks`` contiguous group blocks holding about equal numbers of terms
    (``[0, n_groups]`` for one block)."""
    ng = groups.shape[0]
    if n_blocks <= 1 or ng < 2 * n_blocks:
        return np.array([0, ng], dtype=np.int64)
    first = groups[:, 2].astype(np.int64)
    total = int(first[-1] + groups[-1, 0] * groups[-1, 1])
    cuts = np.searchsorted(first, np.linspace(0, total, n_blocks + 1)[1:-1])
    return np.ascontiguousarray(np.unique(np.concatenate([[0], cuts, [ng]])), dtype=np.int64)


#: terms per thread from which the kernels add a thread (the group blocks of one call are
#: split between threads; each call pays the threads' start, some 10 us): below about a
#: million terms one thread was as fast as two on the 2-core benchmark machine, at 1.8
#: million (order 22) two were 1.7x faster (benchmarks/bench_hierarchy.py, quiet machine)
PARALLEL_TERMS_PER_THREAD = 500_000


def auto_threads(n_terms: int, limit: int | None = None) -> int:
    """Threads the kernels use for ``n_terms`` terms: ``n_terms //
    PARALLEL_TERMS_PER_THREAD``, at least 1, at most numba's thread count (set by
    ``NUMBA_NUM_THREADS``, lowered by ``numba.set_num_threads``) and ``limit``. Below two
    threads' worth numba's threading layer is not even started."""
    want = max(1, int(n_terms) // PARALLEL_TERMS_PER_THREAD)
    if limit is not None:
        want = min(want, max(1, int(limit)))
    if want <= 1:
        return 1
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        return 1
    return max(1, min(want, numba.get_num_threads()))


_LAYOUTS: dict = {}


def row_layout(s) -> SimpleNamespace:
    """The grouped layout (:func:`group_rows`) of a checked fused system ``s``, made once
    per set of ``indptr, src, slot`` array objects and kept while ``indptr`` lives."""
    key = id(s.indptr)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is s.indptr and hit[1]() is s.src and hit[2]() is s.slot:
        return hit[3]
    lay = group_rows(s.indptr, s.src, s.slot)
    if lay.n_terms != s.src.size or lay.rows.size != s.indptr.size - 1:
        raise ValueError("the grouped layout does not match the system")  # never expected
    try:
        refs = (weakref.ref(s.indptr), weakref.ref(s.src), weakref.ref(s.slot))
    except TypeError:  # arrays that take no weak reference: not cached
        return lay
    if hit is None:
        weakref.finalize(s.indptr, _LAYOUTS.pop, key, None)
    _LAYOUTS[key] = refs + (lay,)
    return lay


def layout_args(s) -> tuple:
    """``(rows, groups, gsrc, gslot)``: the layout arguments of the kernels for ``s``."""
    lay = row_layout(s)
    return lay.rows, lay.groups, lay.src, lay.slot


#: terms from which the kernels keep the state in the first-touch order of its moments
#: (:func:`touch_order`). The fused loop alone at orders 20 / 22 / 24 (K = 2, one thread,
#: load 14) ran 0.68 / 1.35 / 1.49 ns per term in state order and 0.60 / 0.96 / 1.10 in that
#: order, but whole runs gained less (the stage vectors share the cache; the state is
#: permuted in and out per call): Taylor to t = 0.1 at order 24 158 -> 136 ms, at 22 equal,
#: at 20 slower; DP5(4) at 22 4% faster, at 20 2% slower. So only the largest systems
PERMUTE_TERMS = 4_000_000


@njit(cache=True)
def _first_touch(src, n):
    """``new[j]``: the rank of moment ``j`` in order of its first reference in ``src``
    (moments never referenced follow, in their order)."""
    new = np.full(n, -1, np.int64)
    c = 0
    for t in range(src.size):
        j = src[t]
        if new[j] < 0:
            new[j] = c
            c += 1
    for j in range(n):
        if new[j] < 0:
            new[j] = c
            c += 1
    return new


def touch_order(rows, src, gather, n: int) -> SimpleNamespace:
    """The moments renumbered in order of first reference by the terms in layout order, so
    that the sources a run of rows reads lie close together (the canonical state order
    scatters a row's sources over the block of longer words, which leaves L2 from order 22
    on). Returns ``new`` (state index -> internal index), ``perm`` (internal -> state: the
    internal state is ``y[perm]``) and ``rows``, ``src``, ``gather`` renumbered. Every row
    keeps its terms in their order, so each entry of the RHS has the same bits."""
    src = np.ascontiguousarray(src)
    new = _first_touch(src, int(n))
    perm = np.empty(n, dtype=np.int64)
    perm[new] = np.arange(n, dtype=np.int64)
    g = np.asarray(gather, dtype=np.int64)
    return SimpleNamespace(
        new=new, perm=perm, rows=_renumbered(new, np.ascontiguousarray(rows)),
        src=_renumbered(new, src),
        gather=np.ascontiguousarray(np.where(g >= 0, new[np.maximum(g, 0)], -1), dtype=np.int64))


@njit(cache=True)
def _renumbered(new, idx):
    """``new[idx]`` as uint32 in one compiled pass (numpy's gather made an int64 copy of
    the 6.3 million terms at order 24 and cast it: 0.12 s of a first integrate)."""
    out = np.empty(idx.size, dtype=np.uint32)
    for t in range(idx.size):
        out[t] = new[idx[t]]
    return out


def permuted_args(s):
    """``(order, rows, groups, src, slot, gather)`` for the kernels: the layout of ``s`` and
    ``order`` = :func:`touch_order` from :data:`PERMUTE_TERMS` terms on (the kernel then
    runs on ``y[order.perm]``; its outputs go back by ``[..., order.new]``), else ``None``
    and the state order. Made once per layout."""
    lay = row_layout(s)
    if lay.n_terms < PERMUTE_TERMS:
        return None, lay.rows, lay.groups, lay.src, lay.slot, s.gather
    po = getattr(lay, "touch", None)
    if po is None or po[0] is not s.gather:
        po = lay.touch = (s.gather, touch_order(lay.rows, lay.src, s.gather, lay.n_rows))
    o = po[1]
    return o, o.rows, lay.groups, o.src, lay.slot, o.gather


def packed_terms(src, slot, n: int):
    """``src << 8 | slot`` as one ``uint32`` per term (the kernels' packed terms,
    :func:`apply_packed`), or ``None`` where it does not fit: slots wider than ``uint8`` or
    ``n >= 2**24`` moments.

    >>> import numpy as np
    >>> packed_terms(np.array([3, 0], np.uint32), np.array([7, 255], np.uint8), 4).tolist()
    [775, 255]
    >>> packed_terms(np.array([3], np.uint32), np.array([7], np.uint16), 4) is None
    True
    """
    if np.dtype(slot.dtype) != np.uint8 or int(n) >= 2 ** (32 - PACK_BITS):
        return None
    term = np.left_shift(src, np.uint32(PACK_BITS), dtype=np.uint32)
    term |= slot
    return term


def kernel_layout(s):
    """``(order, rows, groups, src, slot, gather, packed)``: :func:`permuted_args` of ``s``
    with, where :func:`packed_terms` fit, the packed terms in place of ``src`` and
    ``packed = True`` (the kernels then read no ``slot``). Made once per layout."""
    order, rows, groups, src, slot, gather = permuted_args(s)
    lay = row_layout(s)
    hit = getattr(lay, "packed", None)
    if hit is None or hit[0] is not src:
        hit = lay.packed = (src, packed_terms(src, slot, lay.n_rows))
    if hit[1] is None:
        return order, rows, groups, src, slot, gather, False
    return order, rows, groups, hit[1], slot, gather, True


def function_pointer(fn, sig=GRAD_SIG):
    """``fn`` as a first-class function address when it is a dispatcher compiled for
    ``sig``: passing the address instead of the dispatcher saves numba's per-call
    conversion (about 0.15 ms per kernel call, measured), which dominated short runs."""
    from numba.core.registry import CPUDispatcher
    from numba.core.types.function_type import CompileResultWAP
    if isinstance(fn, CPUDispatcher):
        cres = fn.overloads.get(sig.args)
        if cres is not None:
            return CompileResultWAP(cres)
    return fn


def fuse_terms(ent, coef, n_entries: int):
    """``(slot, slot_coef, slot_ent)`` of unfused per-term ``ent, coef`` arrays."""
    ent = np.asarray(ent).astype(np.int64)
    coef = np.asarray(coef).astype(np.int64)
    if ent.size and (ent.min() < 0 or ent.max() >= n_entries):
        raise ValueError(f"ent must lie in 0..{n_entries - 1}")
    pair = coef * n_entries + ent
    uniq, inv = np.unique(pair, return_inverse=True)
    if uniq.size > 65536:
        raise ValueError(f"{uniq.size} distinct (entry, coefficient) pairs: more than a 16-bit "
                         "slot holds")
    sdt = np.uint8 if uniq.size <= 256 else np.uint16
    slot_ent = np.ascontiguousarray(uniq - np.floor_divide(uniq, n_entries) * n_entries,
                                    dtype=np.int64)
    slot_coef = np.ascontiguousarray((uniq - slot_ent) // n_entries, dtype=np.float64)
    return np.ascontiguousarray(inv.ravel(), dtype=sdt), slot_coef, slot_ent


def fused_system(system):
    """A namespace with the fused arrays of ``system`` (which has either ``slot,
    slot_coef, slot_ent`` or the unfused ``ent, coef``), validated for the kernel."""
    blocks = getattr(system, "blocks", None)
    if blocks is None:  # one block: the serial loop over every row
        blocks = np.array([0, np.asarray(system.indptr).size - 1])
    if getattr(system, "slot", None) is None:
        n_grad = int(system.n_grad)
        slot, slot_coef, slot_ent = fuse_terms(system.ent, system.coef,
                                               n_grad + np.asarray(system.consts).size)
    else:
        slot, slot_coef, slot_ent = system.slot, system.slot_coef, system.slot_ent
    s = SimpleNamespace(
        gfun=function_pointer(system.gfun), gparams=np.ascontiguousarray(system.gparams, dtype=np.float64),
        gather=np.ascontiguousarray(system.gather, dtype=np.int64),
        consts=np.ascontiguousarray(system.consts, dtype=np.float64),
        indptr=np.ascontiguousarray(system.indptr, dtype=np.uint64),
        src=np.ascontiguousarray(system.src, dtype=np.uint32),
        slot=np.ascontiguousarray(slot), slot_coef=np.ascontiguousarray(slot_coef, np.float64),
        slot_ent=np.ascontiguousarray(slot_ent, dtype=np.int64), n_grad=int(system.n_grad),
        blocks=np.ascontiguousarray(blocks, dtype=np.int64))
    check_system(s)
    return s


def check_system(s, n: int | None = None) -> None:
    """Validate a fused system before it enters a kernel: dtypes, contiguity, and every
    index in range (a bad array would make the kernel read out of bounds)."""
    n_rows = s.indptr.size - 1
    if n is not None and n != n_rows:
        raise ValueError(f"the state has length {n}, the system {n_rows} rows")
    done = getattr(s, "_checked", None)
    if done is not None and len(done) == len(_CHECKED) + 1 and done[-1] == s.n_grad and all(
            x is getattr(s, a) for x, a in zip(done, _CHECKED)):
        return  # checked before with these very array objects (repeated integrate calls)
    for name, dt in (("indptr", np.uint64), ("src", np.uint32), ("slot_coef", np.float64),
                     ("slot_ent", np.int64), ("gather", np.int64), ("consts", np.float64),
                     ("gparams", np.float64), ("blocks", np.int64)):
        a = getattr(s, name)
        if a.dtype != dt or a.ndim != 1 or not a.flags.c_contiguous:
            raise TypeError(f"{name} must be a contiguous 1-d {np.dtype(dt).name} array")
    if np.dtype(s.slot.dtype) not in SLOT_TYPES or s.slot.ndim != 1 \
            or not s.slot.flags.c_contiguous:
        raise TypeError("slot must be a contiguous 1-d uint8 or uint16 array")
    n_terms = s.src.size
    if s.slot.size != n_terms or (n_rows >= 0 and int(s.indptr[-1]) != n_terms) \
            or int(s.indptr[0]) != 0 or np.any(np.diff(s.indptr.astype(np.int64)) < 0):
        raise ValueError("indptr must be non-decreasing from 0 to the number of terms")
    if n_terms and (int(s.src.max()) >= n_rows or int(s.slot.max()) >= s.slot_coef.size):
        raise ValueError("src or slot out of range")
    n_g = s.n_grad + s.consts.size
    if s.slot_ent.size != s.slot_coef.size or (
            s.slot_ent.size and (s.slot_ent.min() < 0 or s.slot_ent.max() >= n_g)):
        raise ValueError(f"slot_ent must lie in 0..{n_g - 1}")
    if s.gather.size and s.gather.max() >= n_rows:
        raise ValueError("gather out of range")
    b = s.blocks
    if b.size < 2 or b[0] != 0 or b[-1] != n_rows or np.any(np.diff(b) < 0):
        raise ValueError("blocks must be non-decreasing row bounds from 0 to the number of rows")
    try:  # the objects themselves (not ids), so rebinding any of them forces a new check
        s._checked = tuple(getattr(s, a) for a in _CHECKED) + (s.n_grad,)
    except AttributeError:  # not a namespace that takes attributes: check every time
        pass


_CHECKED = ("indptr", "src", "slot", "slot_coef", "slot_ent", "gather", "consts", "gparams",
            "blocks", "gfun")


def rhs_into(system, y, dy=None, threads: int | None = None):
    """Python-level convenience: evaluate the RHS of ``system`` at ``y``.

    ``system`` is any object with ``gfun, gparams, gather, consts, indptr, src,
    n_grad`` and either the fused ``slot, slot_coef, slot_ent`` or the unfused
    ``ent, coef``. The state length and every index are checked first. ``threads``
    caps the threads (default: :func:`auto_threads` of the number of terms); the
    result has the same bits for any number.
    """
    s = fused_system(system)
    y = np.ascontiguousarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-d array, got shape {y.shape}")
    check_system(s, y.size)
    if dy is None:
        dy = np.empty_like(y)
    elif dy.shape != y.shape or dy.dtype != np.float64 or not dy.flags.c_contiguous:
        raise ValueError("dy must be a contiguous float64 array shaped like y")
    xbuf = np.empty(s.gather.size)
    gout = np.empty(s.n_grad)
    g = np.empty(s.n_grad + s.consts.size)
    tab = np.empty(s.slot_coef.size)
    order, rows, groups, gsrc, gslot, gather, packed = kernel_layout(s)
    nthr = auto_threads(s.src.size, threads)
    out = dy if order is None else np.empty_like(dy)
    rhs_kernel(s.slot.dtype, parallel=nthr > 1, packed=packed)(
        y if order is None else y[order.perm], s.gfun, s.gparams, gather, s.consts, rows,
        groups, gsrc, gslot, s.slot_coef, s.slot_ent, group_blocks(groups, nthr), xbuf, gout,
        g, tab, out)
    if order is not None:
        np.take(out, order.new, out=dy)
    return dy
