"""Adaptive high-order Taylor integration of the sparse hierarchy, in numba.

For a polynomial potential the hierarchy (paper 003, eq. 11) is bilinear,

    dy_i/dt = sum_{t in row i} coef_t * g[ent_t](x) * y[src_t],   x = y[gather],

with ``g = (Gamma(x), consts)`` and every ``Gamma_kl`` a polynomial in the
length-2 moments ``x``. Writing ``y(t0 + tau) = sum_k Y_k tau^k`` (and the same
for ``x`` and ``g``), the Taylor coefficients follow from Cauchy products on the
same structure arrays::

    (k + 1) Y_{k+1}[i] = sum_e sum_{j=0..k} g_j[e] * Z_{k-j}[e, i],
    Z_m[e, i] = sum_{t in row i, ent_t = e} coef_t * Y_m[src_t],

and ``g_j = [Gamma(x)]_j`` comes from Taylor arithmetic on the monomials of the
Gamma polynomial (a *program*: each monomial is a product of ``x`` entries whose
partial products are kept as series). When ``Gamma`` is constant (a quadratic
loss) only ``j = 0`` survives and each order costs one fused sparse product.

Step size and order follow Jorba and Zou (2005), as heyoka does: the order is
``p = ceil(-ln(tol)/2) + 1`` and the step is ``rho / e^2 * exp(-0.7/(p-1))``
with ``rho = min_{j in {p-1, p}} (s / ||Y_j||_inf)^{1/j}`` and ``s = max(1,
||y||_inf)`` (relative error for large states, absolute for small ones). The
truncated Taylor polynomial also gives the state at every output time inside a
step (dense output), so steps are never clipped except at the last output.

Status codes are those of :mod:`attndyn.kernels.integrate`: 0 success, -1 step
size underflow, -2 maximum number of steps, -3 non-finite state or ``|y| >
blowup``.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref
from types import SimpleNamespace

import numpy as np
from numba import njit, types

from . import rhs as _rhs
from .rhs import (SLOT_TYPES, apply_groups_values, apply_groups_values_parallel,
                  auto_threads, check_system, group_blocks, launch_threads, layout_args,
                  parallel_variant)

__all__ = ["taylor_kernel", "taylor_signature", "run_taylor", "taylor_order", "check_program",
           "prepare_taylor", "run_prepared", "plain_pages"]

_f64 = types.float64[::1]
_i64 = types.int64[::1]


def taylor_order(tol: float) -> int:
    """Jorba-Zou order for a tolerance: ``ceil(-ln(tol) / 2) + 1``, within 4..40."""
    return int(min(max(math.ceil(-math.log(tol) / 2.0) + 1, 4), 40))


def taylor_signature(slot_dtype=np.uint8):
    return types.void(
        _f64,               # y0
        types.float64,      # t0
        _f64,               # t_eval (non-decreasing)
        types.float64,      # tol
        types.int64,        # order p
        types.float64,      # h_max
        types.int64,        # max_steps
        types.float64,      # blowup
        _i64, _f64,         # gather, consts
        types.uint32[::1], types.uint64[:, ::1],  # rows, groups (grouped layout)
        types.uint32[::1], SLOT_TYPES[np.dtype(slot_dtype)],  # gsrc, gslot
        _f64, _i64,         # slot_coef, slot_ent
        types.uint32[::1], types.uint64[:, ::1], types.uint32[::1], _f64,  # constant-Gamma
        # layout (crows, cgroups, csrc, cval: nonzero terms, values spelt out) or empty
        _i64,               # cgblocks (its group blocks for the threads)
        _i64, _i64, _f64, _i64,  # program: mono_ptr, mono_vars, mono_coef, mono_out
        types.int64,        # n_grad
        types.boolean,      # constant Gamma
        types.float64[:, ::1],  # Y: workspace for the coefficients, (p + 1) x len(y0)
        types.float64[:, ::1],  # ys (out)
        _i64,               # info (out): status, n_out, steps, nfev, rejected (0)
        _f64,               # tinfo (out): t reached, last h
        _f64,               # yend (out): the state at the t reached
    )


@njit(cache=True)
def _gamma_coef(k, X, mono_ptr, mono_vars, mono_coef, mono_out, PP, pp_ptr, gk):
    """``gk = [Gamma(x)]_k`` from the coefficients ``X[0..k]`` of ``x``; the partial
    products of monomial ``m`` live in rows ``pp_ptr[m]..`` of ``PP``."""
    for e in range(gk.size):
        gk[e] = 0.0
    for m in range(mono_ptr.size - 1):
        a = mono_ptr[m]
        b = mono_ptr[m + 1]
        if b == a:
            if k == 0:
                gk[mono_out[m]] += mono_coef[m]
            continue
        r0 = pp_ptr[m]
        PP[r0, k] = X[k, mono_vars[a]]
        for r in range(1, b - a):
            v = mono_vars[a + r]
            acc = 0.0
            for j in range(k + 1):
                acc += PP[r0 + r - 1, j] * X[k - j, v]
            PP[r0 + r, k] = acc
        gk[mono_out[m]] += mono_coef[m] * PP[r0 + b - a - 1, k]


_ABS_BITS = np.int64(0x7FFFFFFFFFFFFFFF)


@njit(cache=True)
def _absmax(v, buf):
    """``max_i |v_i|`` (NaN if any entry is NaN) as the largest sign-cleared bit pattern:
    for non-negative doubles the bit order is the value order and NaN patterns lie above
    inf, so this integer maximum vectorises without fast-math (7x the float loop, measured);
    ``buf`` is a one-entry scratch for the bits-to-float view."""
    b = v.view(np.int64)
    m = np.int64(0)
    for i in range(b.size):
        a = b[i] & _ABS_BITS
        m = a if a > m else m
    bi = buf.view(np.int64)
    bi[0] = m
    return buf[0]


@njit(cache=True)
def _horner(Y, p, tau, out):
    """``out[i] = sum_k Y[k, i] tau^k`` by Horner's rule, ``k`` outer so the loop over
    ``i`` vectorises, four coefficients per pass over ``out`` (each entry sees the same
    operations in the same order; 33 -> 21 us at order 16, measured)."""
    n = out.size
    for i in range(n):
        out[i] = Y[p, i]
    k = p - 1
    while k >= 3:
        a = Y[k]
        b = Y[k - 1]
        c = Y[k - 2]
        d = Y[k - 3]
        for i in range(n):
            out[i] = (((out[i] * tau + a[i]) * tau + b[i]) * tau + c[i]) * tau + d[i]
        k -= 4
    while k >= 0:
        a = Y[k]
        for i in range(n):
            out[i] = out[i] * tau + a[i]
        k -= 1


@njit(cache=True)
def _split_rows(rows, groups, src, slot, slot_coef, slot_u, y, Zk, acc):
    """``Zk[u, i] = sum_{t in row i, u(t) = u} coef_t * y[src_t]`` (grouped layout)."""
    nu = acc.size
    one = np.uint64(1)
    for g in range(groups.shape[0]):
        L = groups[g, 0]
        t = groups[g, 2]
        rp = groups[g, 3]
        for _ in range(groups[g, 1]):
            for u in range(nu):
                acc[u] = 0.0
            e = t + L
            while t < e:
                s = slot[t]
                acc[slot_u[s]] += slot_coef[s] * y[src[t]]
                t += one
            i = rows[rp]
            for u in range(nu):
                Zk[u, i] = acc[u]
            rp += one


# One long function on purpose: the step loop carries its workspaces and running state
# (t, h, n_out, status) across 30 arguments; its parts are already helpers (_gamma_coef,
# _split_rows, _horner, _absmax, apply_groups_values), and what is left is the control flow.
def _taylor(y0, t0, t_eval, tol, p, h_max, max_steps, blowup, gather, consts, rows, groups,
            src, slot, slot_coef, slot_ent, crows, cgroups, csrc, cval, cgblocks, mono_ptr,
            mono_vars, mono_coef, mono_out,
            n_grad, const_gamma, Y, ys, info, tinfo, yend):
    n = y0.size
    nx = gather.size
    n_e = n_grad + consts.size
    # Y (the workspace, (p + 1) x n): rows 0..p are written before they are read
    X = np.zeros((p + 1, nx))
    G = np.zeros((p + 1, n_e))
    n_pp = 0
    pp_ptr = np.zeros(mono_ptr.size, dtype=np.int64)
    for m in range(mono_ptr.size - 1):
        pp_ptr[m] = n_pp
        n_pp += mono_ptr[m + 1] - mono_ptr[m]
    PP = np.zeros((max(n_pp, 1), p + 1))
    tab = np.empty(slot_coef.size)
    dy = np.empty(n)
    # entries used by the structure, and each slot's entry in that list
    used = np.zeros(n_e, dtype=np.int64) - 1
    nu = 0
    for s in range(slot_ent.size):
        if used[slot_ent[s]] < 0:
            used[slot_ent[s]] = nu
            nu += 1
    slot_u = np.empty(slot_ent.size, dtype=np.int64)
    for s in range(slot_ent.size):
        slot_u[s] = used[slot_ent[s]]
    used_ent = np.empty(nu, dtype=np.int64)
    for e in range(n_e):
        if used[e] >= 0:
            used_ent[used[e]] = e
    Z = np.zeros((1, 1, 1)) if const_gamma else np.zeros((p + 1, nu, n))
    acc = np.empty(nu)
    nbuf = np.zeros(1)
    y = y0.copy()
    t = t0
    n_out = 0
    steps = 0
    nfev = 0
    status = 0
    h = 0.0
    tiny = 10.0 * np.finfo(np.float64).eps
    safety = np.exp(-2.0) * np.exp(-0.7 / (p - 1))
    t_end = t_eval[t_eval.size - 1]
    while n_out < t_eval.size and t_eval[n_out] <= t0:
        ys[n_out, :] = y
        n_out += 1
    while n_out < t_eval.size:
        if steps >= max_steps:
            status = -2
            break
        for i in range(n):
            Y[0, i] = y[i]
        bad = False
        for k in range(p):
            for i in range(nx):
                j = gather[i]
                X[k, i] = Y[k, j] if j >= 0 else 0.0
            _gamma_coef(k, X, mono_ptr, mono_vars, mono_coef, mono_out, PP, pp_ptr, G[k])
            if k == 0:
                for i in range(consts.size):
                    G[0, n_grad + i] = consts[i]
                for s in range(tab.size):
                    tab[s] = slot_coef[s] * G[0, slot_ent[s]]
            inv = 1.0 / (k + 1)
            if const_gamma:
                # two rows at a time (rhs._groups_values); the parallel kernel's copy of
                # this function calls the parallel twin
                apply_groups_values(crows, cgroups, csrc, cval, Y[k], Y[k + 1], cgblocks)
                yk1 = Y[k + 1]
                for i in range(n):
                    yk1[i] *= inv
            else:
                _split_rows(rows, groups, src, slot, slot_coef, slot_u, Y[k], Z[k], acc)
                for i in range(n):
                    Y[k + 1, i] = 0.0
                for j in range(k + 1):
                    for u in range(nu):
                        gj = G[j, used_ent[u]]
                        if gj == 0.0:
                            continue
                        zr = Z[k - j, u]
                        for i in range(n):
                            Y[k + 1, i] += gj * zr[i]
                for i in range(n):
                    Y[k + 1, i] *= inv
            nfev += 1
        # radius of convergence from the last two coefficients (Jorba-Zou)
        ymax = _absmax(Y[0], nbuf)
        sc = max(1.0, ymax)
        rho = np.inf
        for j in (p - 1, p):
            nj = _absmax(Y[j], nbuf)
            if not np.isfinite(nj):
                bad = True
            elif nj > 0.0:
                rho = min(rho, (sc / nj) ** (1.0 / j))
        if bad:
            status = -3
            break
        h = safety * rho
        h = min(h, h_max)
        last = t + h >= t_end
        if last:
            h = t_end - t
        if h < tiny * max(abs(t), 1.0) and not last:
            status = -1
            break
        # dense output inside the step (Horner), then the new state; Horner runs over
        # the whole vector per coefficient (the same operations per entry, vectorised)
        n_before = n_out
        new_state = False
        while n_out < t_eval.size and (t_eval[n_out] <= t + h or last):
            tau = t_eval[n_out] - t
            _horner(Y, p, tau, ys[n_out])
            if tau == h:  # the output time is the step's end: the same polynomial value
                for i in range(n):
                    y[i] = ys[n_out, i]
                new_state = True
            n_out += 1
        if not new_state:
            _horner(Y, p, h, y)
        for i in range(n):
            if not (abs(y[i]) <= blowup):
                bad = True
        steps += 1
        if bad:
            status = -3
            n_out = n_before  # outputs of a step that ends non-finite are not kept
            break
        t = t_end if last else t + h
    info[0] = status
    info[1] = n_out
    info[2] = steps
    info[3] = nfev
    info[4] = 0
    tinfo[0] = t
    tinfo[1] = h
    for i in range(n):
        yend[i] = y[i]


_compiled: dict = {}


def taylor_kernel(slot_dtype=np.uint8, parallel: bool = False):
    """The compiled Taylor kernel (:func:`taylor_signature`), compiled or loaded from
    numba's cache on the first call; one specialisation serves every order and loss.
    ``parallel=True``: the kernel whose constant-Gamma products run their group blocks on
    numba's threads (a separate function: the one-thread kernel never starts them)."""
    key = (np.dtype(slot_dtype), bool(parallel))
    k = _compiled.get(key)
    if k is None:
        fn = _taylor
        if parallel:
            launch_threads()
            fn = parallel_variant(_taylor, "_taylor_parallel",
                                  apply_groups_values=apply_groups_values_parallel)
        k = _compiled[key] = njit(taylor_signature(key[0]), cache=True)(fn)
    return k


def check_program(program, nx: int, n_grad: int):
    """Validate a Gamma program ``(mono_ptr, mono_vars, mono_coef, mono_out)``."""
    ptr, var, coef, out = program
    for name, a, dt in (("mono_ptr", ptr, np.int64), ("mono_vars", var, np.int64),
                        ("mono_coef", coef, np.float64), ("mono_out", out, np.int64)):
        if a.dtype != dt or a.ndim != 1 or not a.flags.c_contiguous:
            raise TypeError(f"{name} must be a contiguous 1-d {np.dtype(dt).name} array")
    if ptr.size != coef.size + 1 or out.size != coef.size or ptr[0] != 0 \
            or ptr[-1] != var.size or np.any(np.diff(ptr) < 0):
        raise ValueError("inconsistent Gamma program arrays")
    if var.size and (var.min() < 0 or var.max() >= nx):
        raise ValueError(f"program variables must lie in 0..{nx - 1}")
    if out.size and (out.min() < 0 or out.max() >= n_grad):
        raise ValueError(f"program outputs must lie in 0..{n_grad - 1}")
    if not np.all(np.isfinite(coef)):
        raise ValueError("program coefficients must be finite")


_PROGRAMS: dict = {}


def _checked_program(program, nx: int, n_grad: int) -> bool:
    """:func:`check_program`, once per set of program array objects (and ``nx, n_grad``):
    repeated integrate calls skip the re-check. Returns whether Gamma is constant."""
    arrs = tuple(program)
    if len(arrs) != 4:
        raise TypeError("program must be (mono_ptr, mono_vars, mono_coef, mono_out)")
    key = (id(arrs[0]), nx, n_grad)
    hit = _PROGRAMS.get(key)
    if hit is not None and all(r() is a for r, a in zip(hit[0], arrs)):
        return hit[1]
    check_program(arrs, nx, n_grad)
    const = bool(np.all(np.diff(arrs[0]) == 0))
    try:
        refs = tuple(weakref.ref(a) for a in arrs)
    except TypeError:
        return const
    if hit is None:
        weakref.finalize(arrs[0], _PROGRAMS.pop, key, None)
    _PROGRAMS[key] = (refs, const)
    return const


_WORK = threading.local()
#: largest coefficient workspace kept between calls (per thread): order 20 at p = 13 fits;
#: above it only a prepared system (:func:`prepare_taylor`) keeps its own
WORKSPACE_KEEP_BYTES = 8 * 2 ** 20


def plain_pages(size: int) -> np.ndarray:
    """``size`` float64 (at least one) on fresh private anonymous pages mapped without the
    transparent huge-page advice numpy gives arrays of 4 MiB and more: with THP in
    ``madvise`` mode an advised first touch may compact memory in the kernel first (0.02
    to 0.7 s of system time in a first order-24 integrate, for its 79 MiB workspace,
    measured; its 20k small-page faults cost 0.04-0.08 s, and a kept workspace on them
    ran the kernel 1-2% slower than on huge pages). Unmapped when the array and its views
    are gone."""
    nbytes = max(int(size), 1) * 8
    if not hasattr(mmap, "MAP_ANONYMOUS"):  # no anonymous private maps (Windows)
        return np.empty(nbytes // 8)
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(m, dtype=np.float64)


def _workspace(rows: int, n: int, keep=None) -> np.ndarray:
    """A ``rows x n`` float64 work array, reused between calls of one thread when small
    (a fresh 0.5 MB array per order-16 call cost ~20 us of page faults, measured). A
    larger one is kept on ``keep`` (a prepared system's thread-local: the largest one
    that thread used, freed with the preparation or the thread) on :func:`plain_pages`,
    so a first call pays small-page faults once and never a compaction, and repeats
    fault nothing; without ``keep`` it is a fresh ``np.empty``. Its contents are
    arbitrary: the kernel writes every row it reads first."""
    size = rows * n
    if size * 8 > WORKSPACE_KEEP_BYTES:
        if keep is None:
            return np.empty((rows, n))
        buf = getattr(keep, "buf", None)
        if buf is None or buf.size < size:
            keep.buf = None  # the old pages go before the new ones are mapped
            buf = keep.buf = plain_pages(size)
        return buf[:size].reshape(rows, n)
    buf = getattr(_WORK, "buf", None)
    if buf is None or buf.size < size:
        buf = _WORK.buf = np.empty(max(size, 1))
    return buf[:size].reshape(rows, n)


_NO_LAYOUT = (np.zeros(0, dtype=np.uint32), np.zeros((0, 4), dtype=np.uint64),
              np.zeros(0, dtype=np.uint32), np.zeros(0))
_CONST: dict = {}


def _const_layout(s, program) -> tuple:
    """The constant-Gamma operator of ``s``: ``(rows, groups, src, val)``, the grouped
    layout (:func:`attndyn.kernels.rhs.group_rows`) of the terms whose value
    ``val = slot_coef[slot] * g[slot_ent[slot]]`` is not zero (``g = (Gamma, consts)``,
    Gamma from the program as the kernel's order-0 step adds it up, so the same values).
    Zero terms (the decay without weight decay: a sixth of them at order 16) would only
    add zeros to the Taylor coefficients. Made once per set of array objects."""
    arrs = (s.indptr, s.src, s.slot, s.slot_coef, s.slot_ent, s.consts) + tuple(program)
    key = id(s.indptr)
    hit = _CONST.get(key)
    if hit is not None and len(hit[0]) == len(arrs) and all(
            r() is a for r, a in zip(hit[0], arrs)):
        return hit[1]
    tab = _const_values(s, program)
    from .rhs import group_rows
    # compiled: one pass counting each row's nonzero terms, one copying them (the numpy
    # gathers, masks and sorts before cost 0.74 s of a first integrate at order 24, now 0.07)
    lay = group_rows(s.indptr, s.src, s.slot, values=tab)
    out_t = (lay.rows, lay.groups, lay.src, lay.slot)
    try:
        refs = tuple(weakref.ref(a) for a in arrs)
    except TypeError:
        return out_t
    if hit is None:
        weakref.finalize(s.indptr, _CONST.pop, key, None)
    _CONST[key] = (refs, out_t)
    return out_t


def _const_values(s, program) -> np.ndarray:
    """``slot_coef[slot] * g[slot_ent[slot]]`` per slot for a constant program, with
    ``g = (Gamma, consts)`` added up as the kernel's order-0 step does."""
    ptr, var, coef, out = program
    g = np.zeros(s.n_grad + s.consts.size)
    for m in range(coef.size):  # constant program: every monomial is a bare coefficient
        g[out[m]] += coef[m]
    g[s.n_grad:] = s.consts
    tab: np.ndarray = s.slot_coef * g[s.slot_ent]
    return tab


def _const_operator(s, program, cache):
    """``(clay, touch)``: the constant operator's layout (renumbered by ``touch`` from
    :data:`~attndyn.kernels.rhs.PERMUTE_TERMS` terms on, else ``touch`` is ``None``), read
    from the files of ``cache`` when they hold it, else made (and written there)."""
    files = None
    if cache is not None and s.src.size >= CACHE_MIN_TERMS:
        from . import _layoutcache
        files = _layoutcache.const_files(cache, s, _const_values(s, program))
        hit = _layoutcache.load_const_operator(files, s)
        if hit is not None:
            return hit
    clay = _const_layout(s, program)
    touch = None
    if clay[2].size >= _rhs.PERMUTE_TERMS:  # the moments in first-touch order
        touch = _const_touch(s, program, clay)
        clay = (touch.rows, clay[1], touch.src, clay[3])
    if files is not None:
        _layoutcache.save_const_operator(files, clay, touch)
    return clay, touch


#: structure terms from which :func:`prepare_taylor` keeps the constant operator on disk
#: (order 20, 455721 terms: read and checked in 4 ms against 7 ms to make it; below, the
#: files cost about what they save)
CACHE_MIN_TERMS = 200_000


def prepare_taylor(system, program, cache: tuple[str, str] | None = None,
                   keep_workspace: bool = True) -> SimpleNamespace:
    """The checked, fixed arguments of the Taylor kernel for a fused ``system`` and a Gamma
    ``program``: every array validated (:func:`~attndyn.kernels.rhs.check_system`,
    :func:`check_program`) and the layout made once, for :func:`run_prepared`. The
    arrays must not be changed afterwards (a hierarchy owns and never rebinds them).

    ``cache = (path, stamp)`` keeps the constant operator (its grouped layout and touch
    order) in files named after ``path`` (a file of the caller's cache folder) and a
    digest of ``stamp`` (which must name the structure arrays' contents, e.g. the
    structure file's key and modification time) and the operator's values; a file that
    does not match or is damaged is rebuilt (:func:`load_const_operator`).

    ``keep_workspace``: each thread running it keeps its coefficient workspace above
    :data:`WORKSPACE_KEEP_BYTES` (``(p + 1) n`` float64, 79 MiB at order 24 and p = 13)
    while the preparation lives (:func:`_workspace`)."""
    check_system(system)
    const = _checked_program(program, system.gather.size, system.n_grad)
    s = system
    touch = None
    gather = s.gather
    if const:  # only the constant operator is used: the full layout is not even made
        clay, touch = _const_operator(s, program, cache)
        lay = _NO_LAYOUT[:3] + (s.slot[:0],)
        n_par = clay[2].size
        if touch is not None:
            gather = touch.gather
    else:
        touch, *lay, gather = _rhs.permuted_args(s)
        clay = _NO_LAYOUT
        n_par = 0
    head = (gather, s.consts) + tuple(lay) + (s.slot_coef, s.slot_ent) + tuple(clay)
    tail = tuple(program) + (s.n_grad, const)
    return SimpleNamespace(n=s.indptr.size - 1, slot_dtype=s.slot.dtype, head=head, tail=tail,
                           n_par=n_par, blocks1=group_blocks(clay[1], 1), kernel1=None,
                           touch=touch, work=threading.local() if keep_workspace else None)


_TOUCH: dict = {}


def _const_touch(s, program, clay):
    """:func:`attndyn.kernels.rhs.touch_order` of the constant operator ``clay`` of ``s``,
    made once per constant layout (kept while it lives)."""
    key = id(clay[2])
    hit = _TOUCH.get(key)
    if hit is not None and hit[0]() is clay[2]:
        return hit[1]
    o = _rhs.touch_order(clay[0], clay[2], s.gather, s.indptr.size - 1)
    try:
        ref = weakref.ref(clay[2])
    except TypeError:
        return o
    if hit is None:
        weakref.finalize(clay[2], _TOUCH.pop, key, None)
    _TOUCH[key] = (ref, o)
    return o


def run_prepared(prep, y0, t_eval, tol, max_steps, blowup, h_max, order=None, t0=0.0,
                 threads=None):
    """:func:`run_taylor` on arguments made by :func:`prepare_taylor` (the per-call part:
    the state, the output times, the order and the output arrays)."""
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    t_eval = np.ascontiguousarray(t_eval, dtype=np.float64)
    if y0.ndim != 1 or y0.size != prep.n:
        raise ValueError(f"the state has length {y0.size}, the system {prep.n} rows")
    p = taylor_order(tol) if order is None else int(order)
    if not 2 <= p <= 60:
        raise ValueError(f"order must be an int in 2..60, got {p}")
    ys = np.empty((t_eval.size, y0.size))  # rows past info[1] are not outputs
    info = np.zeros(6, dtype=np.int64)
    tinfo = np.zeros(2)
    yend = np.empty(y0.size)
    if prep.n_par < 2 * _rhs.PARALLEL_TERMS_PER_THREAD:  # auto_threads gives 1 below
        nthr = 1
        kern = prep.kernel1
        if kern is None:
            kern = prep.kernel1 = taylor_kernel(prep.slot_dtype, False)
        blocks = prep.blocks1
    else:
        nthr = auto_threads(prep.n_par, threads)
        kern = taylor_kernel(prep.slot_dtype, nthr > 1)
        blocks = group_blocks(prep.head[-3], nthr)
    touch = prep.touch
    kern(y0 if touch is None else y0[touch.perm], float(t0), t_eval, float(tol), p,
         float(h_max), int(max_steps), float(blowup), *prep.head, blocks, *prep.tail,
         _workspace(p + 1, y0.size, prep.work), ys, info, tinfo, yend)
    info[5] = nthr
    if touch is not None:  # back to the state order (every entry has the same bits)
        # np.take keeps the rows C-contiguous (``ys[:, new]`` is Fortran-ordered, which
        # gave the caller's compiled transposition a second specialisation to load)
        ys = np.take(ys, touch.new, axis=1)
        yend = yend[touch.new]
    return ys, info, tinfo, yend, p


def run_taylor(system, program, y0, t_eval, tol, max_steps, blowup, h_max, order=None,
               t0=0.0, threads=None):
    """Integrate a fused ``system`` with a polynomial Gamma ``program`` from ``y0`` at
    ``t0``. ``order`` defaults to :func:`taylor_order` of ``tol``. Returns
    ``(ys, info, tinfo, yend, order)``; every array is checked before the kernel runs.
    ``info`` holds status, outputs, steps, coefficient orders computed, 0 and, last, the
    threads used (:func:`attndyn.kernels.rhs.auto_threads`, at most ``threads``; only the
    constant-Gamma products use more than one)."""
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    check_system(system, y0.size)
    # a one-off preparation: its large workspace is a plain fresh array, as before
    prep = prepare_taylor(system, program, keep_workspace=False)
    return run_prepared(prep, y0, t_eval, tol, max_steps, blowup,
                        h_max, order=order, t0=t0, threads=threads)
