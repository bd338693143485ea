"""The landed kernels before issue 11 (signed int32/int16 indices, unfused coef * g[ent]),
kept verbatim as the same-run reference of benchmarks/bench_hierarchy.py (not cached)."""
from __future__ import annotations

import numpy as np
from numba import njit, types

__all__ = ["GRAD_SIG", "GRAD_FTYPE", "VALGRAD_SIG", "VALGRAD_FTYPE", "sparse_rhs", "rhs_into"]

GRAD_SIG = types.void(types.float64[::1], types.float64[::1], types.float64[::1])
GRAD_FTYPE = types.FunctionType(GRAD_SIG)
VALGRAD_SIG = types.float64(types.float64[::1], types.float64[::1], types.float64[::1])
VALGRAD_FTYPE = types.FunctionType(VALGRAD_SIG)

_i64 = types.int64[::1]
_f64 = types.float64[::1]

RHS_SIG = types.void(
    _f64,             # y
    GRAD_FTYPE,       # gfun
    _f64,             # gparams
    _i64,             # gather
    _f64,             # consts
    _i64,             # indptr
    types.int32[::1],  # src
    types.int16[::1],  # ent
    types.int16[::1],  # coef
    _f64,             # xbuf (len gather)
    _f64,             # gout (len n_grad)
    _f64,             # g (len n_grad + len consts)
    _f64,             # dy (out)
)


@njit(RHS_SIG)
def sparse_rhs(y, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, dy):
    """Write ``dy = F(y)`` for the sparse bilinear hierarchy into ``dy``."""
    for i in range(gather.size):
        j = gather[i]
        xbuf[i] = y[j] if j >= 0 else 0.0
    gfun(xbuf, gparams, gout)
    ng = gout.size
    for i in range(ng):
        g[i] = gout[i]
    for i in range(consts.size):
        g[ng + i] = consts[i]
    n = dy.size
    for i in range(n):
        acc = 0.0
        for t in range(indptr[i], indptr[i + 1]):
            acc += coef[t] * g[ent[t]] * y[src[t]]
        dy[i] = acc


def rhs_into(system, y, dy=None):
    """Python-level convenience: evaluate the RHS of ``system`` at ``y``.

    ``system`` is any object with the attributes ``gfun, gparams, gather,
    consts, indptr, src, ent, coef, n_grad``.
    """
    y = np.ascontiguousarray(y, dtype=np.float64)
    if dy is None:
        dy = np.empty_like(y)
    xbuf = np.empty(system.gather.size)
    gout = np.empty(system.n_grad)
    g = np.empty(system.n_grad + system.consts.size)
    sparse_rhs(y, system.gfun, system.gparams, system.gather, system.consts, system.indptr,
               system.src, system.ent, system.coef, xbuf, gout, g, dy)
    return dy
STATUS = {
    0: "success: the integration reached the last output time",
    -1: "step size underflow at t = {t:.6g}: the solution is stiff or blows up there; "
        "shorten the horizon or use a higher truncation order with weight decay",
    -2: "maximum number of steps ({steps}) reached at t = {t:.6g}: raise max_steps or "
        "loosen rtol/atol",
    -3: "the state became non-finite or larger than {blowup:.3g} at t = {t:.6g}: the truncated "
        "hierarchy blows up; shorten the horizon, lower the order or add weight decay",
}


def status_message(status: int, t: float, steps: int = 0, blowup: float = 0.0) -> str:
    return STATUS[int(status)].format(t=t, steps=steps, blowup=blowup)


# Dormand-Prince 5(4) tableau
_C2, _C3, _C4, _C5 = 1 / 5, 3 / 10, 4 / 5, 8 / 9
_A21 = 1 / 5
_A31, _A32 = 3 / 40, 9 / 40
_A41, _A42, _A43 = 44 / 45, -56 / 15, 32 / 9
_A51, _A52, _A53, _A54 = 19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729
_A61, _A62, _A63, _A64, _A65 = 9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656
_B1, _B3, _B4, _B5, _B6 = 35 / 384, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84
# error estimate: 5th-order minus embedded 4th-order weights
_E1, _E3, _E4, _E5, _E6, _E7 = (71 / 57600, -71 / 16695, 71 / 1920, -17253 / 339200,
                                22 / 525, -1 / 40)

_f64 = types.float64[::1]
DOPRI_SIG = types.void(
    _f64,               # y0
    types.float64,      # t0
    _f64,               # t_eval (increasing, > t0 or == t0)
    types.float64,      # rtol
    types.float64,      # atol
    types.float64,      # h_init (<= 0: automatic)
    types.float64,      # h_max
    types.int64,        # max_steps
    types.float64,      # blowup
    GRAD_FTYPE, _f64, types.int64[::1], _f64, types.int64[::1],
    types.int32[::1], types.int16[::1], types.int16[::1],
    types.int64,        # n_grad
    types.float64[:, ::1],  # ys (out): len(t_eval) x n
    types.int64[::1],   # info (out): status, n_out, steps, nfev, rejected
    _f64,               # tinfo (out): t reached, last h
)


@njit
def _rms(err, y, ynew, rtol, atol):
    s = 0.0
    for i in range(err.size):
        sc = atol + rtol * max(abs(y[i]), abs(ynew[i]))
        v = err[i] / sc
        s += v * v
    return np.sqrt(s / max(err.size, 1))


@njit(DOPRI_SIG)
def dopri5_sparse(y0, t0, t_eval, rtol, atol, h_init, h_max, max_steps, blowup,
                  gfun, gparams, gather, consts, indptr, src, ent, coef, n_grad,
                  ys, info, tinfo):
    """Integrate ``dy/dt = F(y)`` of :func:`sparse_rhs` from ``t0`` and write the
    state at each ``t_eval`` into ``ys``; see the module doc for ``info``."""
    n = y0.size
    xbuf = np.empty(gather.size)
    gout = np.empty(n_grad)
    g = np.empty(n_grad + consts.size)
    y = y0.copy()
    k1 = np.empty(n); k2 = np.empty(n); k3 = np.empty(n); k4 = np.empty(n)
    k5 = np.empty(n); k6 = np.empty(n); k7 = np.empty(n)
    yt = np.empty(n); ynew = np.empty(n); err = np.empty(n)
    nfev = 0
    steps = 0
    rejected = 0
    status = 0
    t = t0
    n_out = 0
    # outputs at t0
    while n_out < t_eval.size and t_eval[n_out] <= t0:
        ys[n_out, :] = y
        n_out += 1
    if n_out == t_eval.size:
        info[0] = 0; info[1] = n_out; info[2] = 0; info[3] = 0; info[4] = 0
        tinfo[0] = t; tinfo[1] = 0.0
        return
    sparse_rhs(y, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k1)
    nfev += 1
    for i in range(n):
        if not np.isfinite(k1[i]):
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
            d1 += (k1[i] / sc) ** 2
        d0 = np.sqrt(d0 / n); d1 = np.sqrt(d1 / n)
        h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
        h0 = min(h0, t_eval[t_eval.size - 1] - t)
        for i in range(n):
            yt[i] = y[i] + h0 * k1[i]
        sparse_rhs(yt, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k2)
        nfev += 1
        d2 = 0.0
        for i in range(n):
            sc = atol + rtol * abs(y[i])
            d2 += ((k2[i] - k1[i]) / sc) ** 2
        d2 = np.sqrt(d2 / n) / h0
        dm = max(d1, d2)
        if not np.isfinite(dm):
            h1 = h0 * 1e-3
        elif dm <= 1e-15:
            h1 = max(1e-6, h0 * 1e-3)
        else:
            h1 = (0.01 / dm) ** 0.2
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
        if hs < 10.0 * np.finfo(np.float64).eps * max(abs(t), 1.0):
            if clipped and hs >= 0.0 and t_target - t <= 10.0 * np.finfo(np.float64).eps * max(abs(t), 1.0):
                # already at the output time up to rounding
                ys[n_out, :] = y
                n_out += 1
                continue
            status = -1
            break
        for i in range(n):
            yt[i] = y[i] + hs * _A21 * k1[i]
        sparse_rhs(yt, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k2)
        for i in range(n):
            yt[i] = y[i] + hs * (_A31 * k1[i] + _A32 * k2[i])
        sparse_rhs(yt, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k3)
        for i in range(n):
            yt[i] = y[i] + hs * (_A41 * k1[i] + _A42 * k2[i] + _A43 * k3[i])
        sparse_rhs(yt, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k4)
        for i in range(n):
            yt[i] = y[i] + hs * (_A51 * k1[i] + _A52 * k2[i] + _A53 * k3[i] + _A54 * k4[i])
        sparse_rhs(yt, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k5)
        for i in range(n):
            yt[i] = y[i] + hs * (_A61 * k1[i] + _A62 * k2[i] + _A63 * k3[i] + _A64 * k4[i]
                                 + _A65 * k5[i])
        sparse_rhs(yt, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k6)
        for i in range(n):
            ynew[i] = y[i] + hs * (_B1 * k1[i] + _B3 * k3[i] + _B4 * k4[i] + _B5 * k5[i]
                                   + _B6 * k6[i])
        sparse_rhs(ynew, gfun, gparams, gather, consts, indptr, src, ent, coef, xbuf, gout, g, k7)
        nfev += 6
        steps += 1
        for i in range(n):
            err[i] = hs * (_E1 * k1[i] + _E3 * k3[i] + _E4 * k4[i] + _E5 * k5[i]
                           + _E6 * k6[i] + _E7 * k7[i])
        en = _rms(err, y, ynew, rtol, atol)
        if not np.isfinite(en):
            # a non-finite trial: shrink hard and retry (the underflow check ends it)
            h = hs * 0.1
            rejected += 1
            continue
        if en <= 1.0:
            t = t_target if clipped else t + hs
            bad = False
            for i in range(n):
                y[i] = ynew[i]
                k1[i] = k7[i]
                if not (abs(y[i]) <= blowup):
                    bad = True
            if bad:
                status = -3
                break
            if clipped:
                ys[n_out, :] = y
                n_out += 1
            fac = 10.0 if en == 0.0 else min(10.0, max(0.2, 0.9 * en ** -0.2))
            # after a clipped step keep the proposed size unless the error asks for less
            h = min(h if (clipped and fac >= 1.0) else hs * fac, h_max)
        else:
            h = hs * max(0.2, 0.9 * en ** -0.2)
            rejected += 1
    info[0] = status
    info[1] = n_out
    info[2] = steps
    info[3] = nfev
    info[4] = rejected
    tinfo[0] = t
    tinfo[1] = h
