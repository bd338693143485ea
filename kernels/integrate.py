"""Adaptive explicit Runge-Kutta integration of the sparse hierarchy, in numba.

Two embedded pairs share one kernel: Dormand-Prince 5(4) (``"dopri5"``, as
scipy's RK45) and Dormand-Prince 8(5,3) (``"dop853"``, as scipy's DOP853, whose
coefficients are copied from scipy, BSD licence). The integrator hits every
requested output time exactly (the step is clipped to the next output time),
controls the local error with ``atol + rtol*max(|y|, |y_new|)`` in the RMS norm,
and never hangs or returns NaN silently: it stops with a status code.

Status codes (``STATUS``)::

    0  success: reached the last output time;
   -1  step size underflow: the step fell below 10 ulp of t (stiffness or a
       finite-time blow-up just ahead);
   -2  maximum number of steps reached;
   -3  the state became non-finite or exceeded ``blowup`` in absolute value;
   -4  the wall-clock limit was reached (set by the Python driver between step chunks).

The kernel is compiled (or loaded from numba's cache) on first use:
:func:`rk_kernel`. It takes the fused structure of :mod:`attndyn.kernels.rhs` in its
grouped layout (:func:`attndyn.kernels.rhs.kernel_layout`: with ``uint8`` slots the packed
terms ``src << 8 | slot``, four rows at a time, the same bits per RHS entry).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._layoutcache import cached_kernel_layout
from .rhs import (GRAD_FTYPE, SLOT_TYPES, apply_groups_all, apply_groups_parallel,
                  apply_packed_all, apply_packed_parallel, auto_threads, check_system,
                  fused_system, gamma_table, group_blocks, kernel_layout, launch_threads,
                  parallel_variant)

__all__ = ["rk_kernel", "rk_signature", "run_rk", "TABLEAUX", "dopri5_sparse", "STATUS",
           "status_message"]

STATUS = {
    0: "success: the integration reached the last output time",
    -1: "step size underflow at t = {t:.6g}: the solution is stiff or blows up there; "
        "shorten the horizon or use a higher truncation order with weight decay",
    -2: "maximum number of steps ({steps}) reached at t = {t:.6g}: raise max_steps or "
        "loosen rtol/atol",
    -3: "the state became non-finite or larger than {blowup:.3g} at t = {t:.6g}: the truncated "
        "hierarchy blows up; shorten the horizon, lower the order or add weight decay",
    -4: "wall-clock limit of {limit:.3g} s reached at t = {t:.6g} after {steps} steps: raise "
        "time_limit or shorten the horizon",
}


def status_message(status: int, t: float, steps: int = 0, blowup: float = 0.0,
                   limit: float = 0.0) -> str:
    return STATUS[int(status)].format(t=t, steps=steps, blowup=blowup, limit=limit)


# ---------------------------------------------------------------------------
# tableaux: A (s x s), B (s), C (s), E (s + 1, on the stages and f(y_new)), E3 (DOP853 only)

_DP5_A = np.zeros((6, 6))
_DP5_A[1, :1] = [1 / 5]
_DP5_A[2, :2] = [3 / 40, 9 / 40]
_DP5_A[3, :3] = [44 / 45, -56 / 15, 32 / 9]
_DP5_A[4, :4] = [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729]
_DP5_A[5, :5] = [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656]
_DP5_B = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84])
_DP5_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0])
# 5th-order minus embedded 4th-order weights
_DP5_E = np.array([71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40])

_DOP853_C = np.array([0.0, 0.05260015195876773, 0.0789002279381516, 0.1183503419072274, 0.2816496580927726, 0.3333333333333333, 0.25, 0.3076923076923077, 0.6512820512820513, 0.6, 0.8571428571428571, 1.0])
_DOP853_A = np.zeros((12, 12))
_DOP853_A[1, 0] = 0.05260015195876773
_DOP853_A[2, 0] = 0.0197250569845379
_DOP853_A[2, 1] = 0.0591751709536137
_DOP853_A[3, 0] = 0.02958758547680685
_DOP853_A[3, 2] = 0.08876275643042054
_DOP853_A[4, 0] = 0.2413651341592667
_DOP853_A[4, 2] = -0.8845494793282861
_DOP853_A[4, 3] = 0.924834003261792
_DOP853_A[5, 0] = 0.037037037037037035
_DOP853_A[5, 3] = 0.17082860872947386
_DOP853_A[5, 4] = 0.12546768756682242
_DOP853_A[6, 0] = 0.037109375
_DOP853_A[6, 3] = 0.17025221101954405
_DOP853_A[6, 4] = 0.06021653898045596
_DOP853_A[6, 5] = -0.017578125
_DOP853_A[7, 0] = 0.03709200011850479
_DOP853_A[7, 3] = 0.17038392571223998
_DOP853_A[7, 4] = 0.10726203044637328
_DOP853_A[7, 5] = -0.015319437748624402
_DOP853_A[7, 6] = 0.008273789163814023
_DOP853_A[8, 0] = 0.6241109587160757
_DOP853_A[8, 3] = -3.3608926294469414
_DOP853_A[8, 4] = -0.868219346841726
_DOP853_A[8, 5] = 27.59209969944671
_DOP853_A[8, 6] = 20.154067550477894
_DOP853_A[8, 7] = -43.48988418106996
_DOP853_A[9, 0] = 0.47766253643826434
_DOP853_A[9, 3] = -2.4881146199716677
_DOP853_A[9, 4] = -0.590290826836843
_DOP853_A[9, 5] = 21.230051448181193
_DOP853_A[9, 6] = 15.279233632882423
_DOP853_A[9, 7] = -33.28821096898486
_DOP853_A[9, 8] = -0.020331201708508627
_DOP853_A[10, 0] = -0.9371424300859873
_DOP853_A[10, 3] = 5.186372428844064
_DOP853_A[10, 4] = 1.0914373489967295
_DOP853_A[10, 5] = -8.149787010746927
_DOP853_A[10, 6] = -18.52006565999696
_DOP853_A[10, 7] = 22.739487099350505
_DOP853_A[10, 8] = 2.4936055526796523
_DOP853_A[10, 9] = -3.0467644718982196
_DOP853_A[11, 0] = 2.273310147516538
_DOP853_A[11, 3] = -10.53449546673725
_DOP853_A[11, 4] = -2.0008720582248625
_DOP853_A[11, 5] = -17.9589318631188
_DOP853_A[11, 6] = 27.94888452941996
_DOP853_A[11, 7] = -2.8589982771350235
_DOP853_A[11, 8] = -8.87285693353063
_DOP853_A[11, 9] = 12.360567175794303
_DOP853_A[11, 10] = 0.6433927460157636
_DOP853_B = np.array([0.054293734116568765, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034, 0.04471061572777259])
_DOP853_E3 = np.array([-0.18980075407240762, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003, -5.801203960010585, -0.4226823213237919, -0.1521609496625161, 0.20136540080403034, 0.02265179219836082, 0.0])
_DOP853_E5 = np.array([0.01312004499419488, 0.0, 0.0, 0.0, 0.0, -1.2251564463762044, -0.4957589496572502, 1.6643771824549864, -0.35032884874997366, 0.3341791187130175, 0.08192320648511571, -0.022355307863886294, 0.0])


#: name -> (A, B, C, E, E3, error order, norm kind): kind 0 is the RMS norm of scipy's
#: RK45, kind 1 the combined 5th/3rd-order estimate of DOP853.
TABLEAUX = {
    "dopri5": (_DP5_A, _DP5_B, _DP5_C, _DP5_E, np.zeros(7), 4, 0),
    "dop853": (_DOP853_A, _DOP853_B, _DOP853_C, _DOP853_E5, _DOP853_E3, 7, 1),
}

_f64 = types.float64[::1]


def rk_signature(slot_dtype=np.uint8):
    return types.void(
        _f64,               # y0
        types.float64,      # t0
        _f64,               # t_eval (non-decreasing, >= t0)
        types.float64,      # rtol
        types.float64,      # atol
        types.float64,      # h_init (<= 0: automatic)
        types.float64,      # h_max
        types.int64,        # max_steps
        types.float64,      # blowup
        types.float64[:, ::1], _f64, _f64, _f64, _f64,  # A, B, C, E, E3
        types.int64,        # error order
        types.int64,        # norm kind
        GRAD_FTYPE, _f64, types.int64[::1], _f64,       # gfun, gparams, gather, consts
        types.uint32[::1], types.uint64[:, ::1],        # rows, groups (grouped layout)
        types.uint32[::1], SLOT_TYPES[np.dtype(slot_dtype)],  # gsrc, gslot
        _f64, types.int64[::1], types.int64[::1],       # slot_coef, slot_ent, gblocks
        types.int64,        # n_grad
        types.float64[:, ::1],  # ys (out): len(t_eval) x n
        types.int64[::1],   # info (out): status, n_out, steps, nfev, rejected
        _f64,               # tinfo (out): t reached, last h
        _f64,               # yend (out): the state at the t reached
    )


@njit(cache=True)
def _f(y, gfun, gparams, gather, consts, rows, groups, src, slot, slot_coef, slot_ent, blocks,
       xbuf, gout, g, tab, dy):
    gamma_table(y, gfun, gparams, gather, consts, slot_coef, slot_ent, xbuf, gout, g, tab)
    # one thread; the parallel kernel's copy of this function calls apply_groups_parallel
    apply_groups_all(rows, groups, src, slot, tab, y, dy, blocks)


#: entries per block of the stage combinations: the accumulators of one block (4 KiB) stay
#: in L1 while the stages stream past them
_BLK = 512


@njit(cache=True)
def _stage_sum(Kst, a, ns, i0, m, acc):
    """``acc[i] = sum_{j < ns} a[j] * Kst[j, i0 + i]`` for ``i < m``, the sum over ``j`` in
    order from 0.0: the same operations as the entry-by-entry loop, but with the stages as
    contiguous passes over the block (loop interchange), four stages per pass, so the loop
    over ``i`` vectorises (2.5-3x the entry-by-entry loop at 5-12 stages, measured)."""
    ac = acc[:m]
    for i in range(m):
        ac[i] = 0.0
    j = 0
    while j + 4 <= ns:
        k0 = Kst[j, i0:i0 + m]
        k1 = Kst[j + 1, i0:i0 + m]
        k2 = Kst[j + 2, i0:i0 + m]
        k3 = Kst[j + 3, i0:i0 + m]
        a0 = a[j]
        a1 = a[j + 1]
        a2 = a[j + 2]
        a3 = a[j + 3]
        for i in range(m):
            ac[i] = (((ac[i] + a0 * k0[i]) + a1 * k1[i]) + a2 * k2[i]) + a3 * k3[i]
        j += 4
    while j < ns:
        k0 = Kst[j, i0:i0 + m]
        a0 = a[j]
        for i in range(m):
            ac[i] = ac[i] + a0 * k0[i]
        j += 1


@njit(cache=True)
def _combine(Kst, a, ns, y, hs, out, acc):
    """``out[i] = y[i] + hs * sum_{j < ns} a[j] * Kst[j, i]`` block by block
    (:func:`_stage_sum`); a stage whose weight is zero still adds its ``0 * K`` (the same
    bits as the entry-by-entry loop, NaN kept)."""
    n = y.size
    for i0 in range(0, n, _BLK):
        m = min(_BLK, n - i0)
        _stage_sum(Kst, a, ns, i0, m, acc)
        yy = y[i0:i0 + m]
        oo = out[i0:i0 + m]
        for i in range(m):
            oo[i] = yy[i] + hs * acc[i]


@njit(cache=True, error_model="numpy")
def _err_norm(Kst, E, E3, kind, h, y, ynew, rtol, atol, scale, err):
    """The error norm of the embedded pair; ``err`` is a work array of ``2 * _BLK``
    entries. The stage sums ``sum_j E[j] K[j, i]`` are made block by block
    (:func:`_stage_sum`), then squared and summed entry by entry in order: the same bits as
    the entry-by-entry loop. The scales and quotients run as loops of their own that
    vectorise: ``max`` spelt as a select and numpy's division (Python's checks the divisor
    for zero in every iteration; ``scale >= atol > 0`` here): 4.0 / 4.4 / 5.5 -> 3.2 / 3.3 /
    4.4 ns per entry at orders 16 / 20 / 22 (DP5(4), one thread, load 9-10, measured; the
    ordered sum of squares, one add chain, is most of what is left)."""
    n = y.size
    ns = E.size
    e5 = err[:_BLK]
    e3 = err[_BLK:]
    s = 0.0
    s5 = 0.0
    s3 = 0.0
    for i0 in range(0, n, _BLK):
        m = min(_BLK, n - i0)
        sc = scale[i0:i0 + m]
        for i in range(m):
            a = abs(y[i0 + i])
            b = abs(ynew[i0 + i])
            sc[i] = atol + rtol * (a if a >= b else b)  # max(a, b) for a NaN-free state
        _stage_sum(Kst, E, ns, i0, m, e5)
        if kind == 0:
            for i in range(m):
                e5[i] = h * e5[i] / sc[i]
            for i in range(m):
                s += e5[i] * e5[i]
            continue
        _stage_sum(Kst, E3, ns, i0, m, e3)
        for i in range(m):
            e5[i] = e5[i] / sc[i]
            e3[i] = e3[i] / sc[i]
        for i in range(m):
            s5 += e5[i] * e5[i]
            s3 += e3[i] * e3[i]
    if kind == 0:
        return np.sqrt(s / max(n, 1))
    if s5 == 0.0 and s3 == 0.0:
        return 0.0
    den = s5 + 0.01 * s3
    return abs(h) * s5 / np.sqrt(den * max(n, 1))


# One long function on purpose: the step loop carries its stages, dense output and running
# state across 30 arguments; the RHS, the stage combinations and the error norm are
# helpers already, and what is left is the step-size control flow.
def _rk(y0, t0, t_eval, rtol, atol, h_init, h_max, max_steps, blowup, A, B, C, E, E3,
        err_order, kind, gfun, gparams, gather, consts, rows, groups, src, slot, slot_coef,
        slot_ent, blocks, n_grad, ys, info, tinfo, yend):
    n = y0.size
    s = B.size
    xbuf = np.empty(gather.size)
    gout = np.empty(n_grad)
    g = np.empty(n_grad + consts.size)
    tab = np.empty(slot_coef.size)
    Kst = np.empty((s + 1, n))
    y = y0.copy()
    yt = np.empty(n)
    ynew = np.empty(n)
    scale = np.empty(n)
    err = np.empty(2 * _BLK)
    acc = np.empty(_BLK)
    expo = -1.0 / (err_order + 1.0)
    nfev = 0
    steps = 0
    rejected = 0
    status = 0
    t = t0
    n_out = 0
    tiny = 10.0 * np.finfo(np.float64).eps
    while n_out < t_eval.size and t_eval[n_out] <= t0:
        ys[n_out, :] = y
        n_out += 1
    yend[:] = y
    if n_out == t_eval.size:
        info[0] = 0; info[1] = n_out; info[2] = 0; info[3] = 0; info[4] = 0
        tinfo[0] = t; tinfo[1] = h_init
        return
    k0 = Kst[0]
    _f(y, gfun, gparams, gather, consts, rows, groups, src, slot, slot_coef, slot_ent, blocks,
       xbuf, gout, g, tab, k0)
    nfev += 1
    for i in range(n):
        if not np.isfinite(k0[i]):
            info[0] = -3; info[1] = n_out; info[2] = 0; info[3] = nfev; info[4] = 0
            tinfo[0] = t; tinfo[1] = 0.0
            return
    # initial step (Hairer, Norsett & Wanner II.4)
    h = h_init
    if h <= 0.0:
        d0 = 0.0; d1 = 0.0
        for i in range(n):
            sc = atol + rtol * abs(y[i])
            d0 += (y[i] / sc) ** 2
            d1 += (k0[i] / sc) ** 2
        d0 = np.sqrt(d0 / n); d1 = np.sqrt(d1 / n)
        h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
        h0 = min(h0, t_eval[t_eval.size - 1] - t)
        for i in range(n):
            yt[i] = y[i] + h0 * k0[i]
        k1 = Kst[1]
        _f(yt, gfun, gparams, gather, consts, rows, groups, src, slot, slot_coef, slot_ent, blocks,
           xbuf, gout, g, tab, k1)
        nfev += 1
        d2 = 0.0
        for i in range(n):
            sc = atol + rtol * abs(y[i])
            d2 += ((k1[i] - k0[i]) / sc) ** 2
        d2 = np.sqrt(d2 / n) / h0
        dm = max(d1, d2)
        if not np.isfinite(dm):
            h1 = h0 * 1e-3
        elif dm <= 1e-15:
            h1 = max(1e-6, h0 * 1e-3)
        else:
            h1 = (0.01 / dm) ** (1.0 / (err_order + 1.0))
        h = min(100.0 * h0, h1)
    h = min(h, h_max)
    while n_out < t_eval.size:
        if steps >= max_steps:
            status = -2
            break
        t_target = t_eval[n_out]
        clipped = False
        hs = h
        if t + hs >= t_target:
            hs = t_target - t
            clipped = True
        if hs < tiny * max(abs(t), 1.0):
            if clipped and hs >= 0.0 and t_target - t <= tiny * max(abs(t), 1.0):
                ys[n_out, :] = y  # already at the output time up to rounding
                n_out += 1
                continue
            status = -1
            break
        for st in range(1, s):
            _combine(Kst, A[st], st, y, hs, yt, acc)
            _f(yt, gfun, gparams, gather, consts, rows, groups, src, slot, slot_coef, slot_ent,
               blocks, xbuf, gout, g, tab, Kst[st])
        _combine(Kst, B, s, y, hs, ynew, acc)
        _f(ynew, gfun, gparams, gather, consts, rows, groups, src, slot, slot_coef, slot_ent,
           blocks, xbuf, gout, g, tab, Kst[s])
        nfev += s
        steps += 1
        en = _err_norm(Kst, E, E3, kind, hs, y, ynew, rtol, atol, scale, err)
        if not np.isfinite(en):
            h = hs * 0.1  # a non-finite trial: shrink hard and retry (underflow ends it)
            rejected += 1
            continue
        if en <= 1.0:
            t = t_target if clipped else t + hs
            bad = False
            for i in range(n):
                y[i] = ynew[i]
                Kst[0, i] = Kst[s, i]
                if not (abs(y[i]) <= blowup):
                    bad = True
            if bad:
                status = -3
                break
            if clipped:
                ys[n_out, :] = y
                n_out += 1
            fac = 10.0 if en == 0.0 else min(10.0, max(0.2, 0.9 * en ** expo))
            # after a clipped step keep the proposed size unless the error asks for less
            h = min(h if (clipped and fac >= 1.0) else hs * fac, h_max)
        else:
            h = hs * max(0.2, 0.9 * en ** expo)
            rejected += 1
    info[0] = status
    info[1] = n_out
    info[2] = steps
    info[3] = nfev
    info[4] = rejected
    tinfo[0] = t
    tinfo[1] = h
    for i in range(n):
        yend[i] = y[i]


_compiled: dict = {}


_VARIANTS = {(True, False): ("_parallel", apply_groups_parallel),
             (False, True): ("_packed", apply_packed_all),
             (True, True): ("_packed_parallel", apply_packed_parallel)}


def rk_kernel(slot_dtype=np.uint8, parallel: bool = False, packed: bool = False):
    """The compiled Runge-Kutta kernel (:func:`rk_signature`), compiled or loaded from
    numba's cache on the first call; one specialisation serves every order and loss.
    ``parallel=True``: the kernel whose right-hand side runs its group blocks on numba's
    threads (a separate function, so the one-thread kernel never starts them).
    ``packed=True`` (``uint8`` slots): the sources argument holds the packed terms
    (:func:`attndyn.kernels.rhs.packed_terms`) and the slots are not read; the RHS has the
    same bits (:func:`attndyn.kernels.rhs.apply_packed`)."""
    if packed and np.dtype(slot_dtype) != np.uint8:
        raise ValueError("packed terms need uint8 slots")
    key = (np.dtype(slot_dtype), bool(parallel), bool(packed))
    k = _compiled.get(key)
    if k is None:
        fn = _rk
        if parallel:
            launch_threads()
        if parallel or packed:
            suffix, apply = _VARIANTS[key[1:]]
            f_var = njit(cache=True)(parallel_variant(
                _f.py_func, "_f" + suffix, apply_groups_all=apply))
            fn = parallel_variant(_rk, "_rk" + suffix, _f=f_var)
        k = _compiled[key] = njit(rk_signature(key[0]), cache=True)(fn)
    return k


def run_rk(method, system, y0, t_eval, rtol, atol, max_steps, blowup, h_max, h_init=0.0,
           t0=0.0, threads=None, cache=None):
    """Integrate a fused ``system`` (see :func:`attndyn.kernels.rhs.fused_system`) from
    ``y0`` at ``t0`` with ``method`` (``"dopri5"`` or ``"dop853"``). Returns
    ``(ys, info, tinfo, yend)``; shapes and indices are checked before the kernel runs.
    ``info`` holds status, outputs, steps, RHS evaluations, rejected steps and, last, the
    threads used: :func:`attndyn.kernels.rhs.auto_threads` of the number of terms, at most
    ``threads`` (the same bits for any number). ``cache = (path, stamp)`` (see
    :func:`attndyn.kernels.taylor.prepare_taylor`) keeps the layout of a large system on
    disk (:func:`attndyn.kernels._layoutcache.cached_kernel_layout`)."""
    if method not in TABLEAUX:
        raise ValueError(f"method must be one of {sorted(TABLEAUX)}, got {method!r}")
    A, B, C, E, E3, order, kind = TABLEAUX[method]
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    t_eval = np.ascontiguousarray(t_eval, dtype=np.float64)
    check_system(system, y0.size)
    ys = np.zeros((t_eval.size, y0.size))
    info = np.zeros(6, dtype=np.int64)
    tinfo = np.zeros(2)
    yend = np.empty(y0.size)
    s = system
    # from PERMUTE_TERMS on the kernel runs in the moments' first-touch order: each RHS entry
    # has the same bits, the error norm sums in another order (steps equal to rounding)
    touch, rows, groups, src, slot, gather, packed = (
        kernel_layout(s) if cache is None else cached_kernel_layout(s, cache))
    nthr = auto_threads(s.src.size, threads)
    rk_kernel(s.slot.dtype, nthr > 1, packed)(
        y0 if touch is None else y0[touch.perm], float(t0), t_eval, float(rtol), float(atol),
        float(h_init), float(h_max), int(max_steps), float(blowup), A, B, C, E, E3, order, kind,
        s.gfun, s.gparams, gather, s.consts, rows, groups, src, slot, s.slot_coef, s.slot_ent,
        group_blocks(groups, nthr), s.n_grad, ys, info, tinfo, yend)
    info[5] = nthr
    if touch is not None:
        ys = np.take(ys, touch.new, axis=1)  # C-ordered, as without the touch order
        yend = yend[touch.new]
    return ys, info, tinfo, yend


def dopri5_sparse(y0, t0, t_eval, rtol, atol, h_init, h_max, max_steps, blowup,
                  gfun, gparams, gather, consts, indptr, src, ent, coef, n_grad,
                  ys, info, tinfo):
    """The unfused call of earlier versions: fuses ``(ent, coef)`` into slots, checks
    every array, runs DP5(4) and writes ``ys``, ``info``, ``tinfo`` in place (in the
    kernels' layout, :func:`attndyn.kernels.rhs.kernel_layout`, as :func:`run_rk`)."""
    from types import SimpleNamespace
    s = fused_system(SimpleNamespace(gfun=gfun, gparams=gparams, gather=gather, consts=consts,
                                     indptr=indptr, src=src, ent=ent, coef=coef, n_grad=n_grad))
    y0 = np.ascontiguousarray(y0, dtype=np.float64)
    check_system(s, y0.size)
    t_eval = np.ascontiguousarray(t_eval, dtype=np.float64)
    if ys.shape != (t_eval.size, y0.size) or info.size < 5 or tinfo.size < 2:
        raise ValueError("ys must be len(t_eval) x len(y0), info >= 5 and tinfo >= 2 entries")
    A, B, C, E, E3, order, kind = TABLEAUX["dopri5"]
    touch, rows, groups, src, slot, gather, packed = kernel_layout(s)
    out = ys if touch is None else np.empty_like(ys)
    rk_kernel(s.slot.dtype, False, packed)(
        y0 if touch is None else y0[touch.perm], float(t0), t_eval, float(rtol), float(atol),
        float(h_init), float(h_max), int(max_steps), float(blowup), A, B, C, E, E3, order, kind,
        s.gfun, s.gparams, gather, s.consts, rows, groups, src, slot, s.slot_coef, s.slot_ent,
        group_blocks(groups, 1), s.n_grad, out, info, tinfo, np.empty(y0.size))
    if touch is not None:
        ys[...] = out[:, touch.new]
