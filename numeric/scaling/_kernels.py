"""Compiled kernels and ufuncs of the scaling-law bounds of paper 000.

The validating public API is :mod:`attndyn.numeric.scaling.bounds`, which imports this
module on first use (numba compiles or loads the ``*_ufunc`` signatures at import). The
extended-exponent helpers are in :mod:`attndyn.kernels.extfloat`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, vectorize

from attndyn.kernels.extfloat import (EBIG, INF, LN2, LN2_HI, LN2_LO, xdiv, xexp, xf,  # noqa: F401
                                      xle, xlog, xmul, xn, xpow, xval)
from attndyn.kernels.lambertw import lambertw0_scalar, lambertw_log0_scalar

_LOG6 = 1.791759469228055  # log 6

# ---------------------------------------------------------------------------
# compiled kernels
# ---------------------------------------------------------------------------
#
# Extended-exponent arithmetic. Every bound is a product of powers of its
# inputs (times a logarithm or an exponential), and for finite inputs its
# intermediate products can leave the float range although the result does
# not, or the result is out of range and a plain formula gives inf * 0 = NaN.
# So the kernels hold a non-negative finite number as a pair (m, e) meaning
# m * 2**e. The mantissa m is kept inside (1e-150, 1e150), renormalised with
# math.frexp only when it leaves that band: a product or quotient of two such
# mantissas never overflows or turns subnormal, and it rounds exactly as the
# same plain float operation does (scaling by a power of 2 is exact). So
# inside the float range the results are bit for bit those of the direct
# formulas (same operations, same order) at almost the same speed; outside it
# nothing overflows or underflows until the final ldexp, which gives inf or 0
# only when the true value is beyond the float range.
# Infinite inputs (C, N, M, T = inf) are handled first, by their limits.

@njit(cache=True)
def _ok(x):
    """A plain intermediate that certainly neither overflowed nor went subnormal."""
    return x > 1e-300 and x < 1e300


# Fast paths. A plain float operation whose result is normal rounds exactly as the
# same operation on extended numbers does (renormalising by a power of 2 changes no
# rounding). So each kernel first runs the plain formula, in the same order as its
# extended version, and checks every intermediate with _ok; if all pass, the result is
# bit for bit the extended one, without the exponent bookkeeping. Otherwise (NaN
# returned as the signal) the extended version runs.


@njit(cache=True)
def _log_u(Nm, Ne, xm, xe, ldm, lde):
    """``log(u)``, ``u = N L d / xi^2`` (eq. 3), without overflow."""
    am, ae = xmul(Nm, Ne, ldm, lde)
    bm, be = xmul(xm, xe, xm, xe)
    um, ue = xdiv(am, ae, bm, be)
    return xlog(um, ue)


@njit(cache=True)
def _threshold_x(Nm, Ne, xm, xe, ldm, lde):
    """``C*(N) = N^6 log(u) / xi^2`` (a float; may be negative) from extended
    ``N``, ``xi`` and ``L d``."""
    lu = _log_u(Nm, Ne, xm, xe, ldm, lde)
    if lu == 0.0:
        return 0.0
    am, ae = xmul(Nm, Ne, Nm, Ne)
    am, ae = xmul(am, ae, Nm, Ne)
    n3m, n3e = xdiv(am, ae, xm, xe)  # N^3 / xi
    rm, re = xmul(n3m, n3e, n3m, n3e)
    lm, le = xf(abs(lu))
    rm, re = xmul(rm, re, lm, le)
    v = xval(rm, re)
    return v if lu > 0.0 else -v


@njit(cache=True)
def _threshold_fast(N, xi, L, d):
    ld = L * d
    a = N * ld
    b = xi * xi
    u = a / b
    n2 = N * N
    n3 = n2 * N / xi
    if not (_ok(ld) and _ok(a) and _ok(b) and _ok(u) and _ok(n2) and _ok(n2 * N) and _ok(n3)):
        return np.nan
    lu = math.log(u)
    if lu == 0.0:
        return 0.0
    s = n3 * n3
    r = s * lu
    return r if _ok(s) and _ok(abs(r)) else np.nan


@njit(cache=True)
def threshold_compute_kernel(N, xi, L, d):
    """Right side of eq. (3): ``N^6 log(N L d / xi^2) / xi^2``."""
    if N == INF:
        return INF
    r = _threshold_fast(N, xi, L, d)
    if r == r:
        return r
    Lm, Le = xf(L)
    dm, de = xf(d)
    ldm, lde = xmul(Lm, Le, dm, de)
    Nm, Ne = xf(N)
    xm, xe = xf(xi)
    return _threshold_x(Nm, Ne, xm, xe, ldm, lde)


@njit(cache=True)
def _w_of_threshold(Cm, Ce, xm, xe, ldm, lde):
    """W0(6 (L d)^6 C / xi^10), without overflow."""
    l2m, l2e = xmul(ldm, lde, ldm, lde)
    l6m, l6e = xmul(l2m, l2e, l2m, l2e)
    l6m, l6e = xmul(l6m, l6e, l2m, l2e)
    x2m, x2e = xmul(xm, xe, xm, xe)
    x4m, x4e = xmul(x2m, x2e, x2m, x2e)
    x10m, x10e = xmul(x4m, x4e, x4m, x4e)
    x10m, x10e = xmul(x10m, x10e, x2m, x2e)
    sm, se = xf(6.0)
    am, ae = xmul(sm, se, Cm, Ce)
    am, ae = xmul(am, ae, l6m, l6e)
    am, ae = xdiv(am, ae, x10m, x10e)
    a = xval(am, ae)
    if a < 1e300 and a > 1e-300:
        return lambertw0_scalar(a)
    return lambertw_log0_scalar(xlog(am, ae))


@njit(cache=True)
def _sixth_root_of_ratio(nm, ne, pm, pe, qm, qe):
    """Refine ``n ~ (p q)^(1/6)`` by one Newton step, without forming ``p q``."""
    n3m, n3e = xmul(nm, ne, nm, ne)
    n3m, n3e = xmul(n3m, n3e, nm, ne)
    am, ae = xdiv(pm, pe, n3m, n3e)
    bm, be = xdiv(qm, qe, n3m, n3e)
    rm, re = xmul(am, ae, bm, be)
    rho = xval(rm, re)
    fm, fe = xf(1.0 + (rho - 1.0) / 6.0)
    return xmul(nm, ne, fm, fe)


@njit(cache=True)
def _critical_x(C, xm, xe, ldm, lde):
    """``N*(C)`` extended, for a finite ``C >= 0`` (see module docstring)."""
    am, ae = xdiv(xm, xe, ldm, lde)
    n0m, n0e = xmul(xm, xe, am, ae)  # xi^2 / (L d) = N*(0)
    if C == 0.0:
        return n0m, n0e
    Cm, Ce = xf(C)
    w = _w_of_threshold(Cm, Ce, xm, xe, ldm, lde)
    em, ee = xexp(w / 6.0)
    nm, ne = xmul(n0m, n0e, em, ee)
    if w < 1.0:  # exp form: the absolute error of w is tiny
        return nm, ne
    # N^6 = 6 C xi^2 / w: one Newton step removes the w/6 rounding of exp
    wm, we = xf(w)
    pm, pe = xdiv(Cm, Ce, wm, we)
    sm, se = xf(6.0)
    qm, qe = xmul(sm, se, xm, xe)
    qm, qe = xmul(qm, qe, xm, xe)
    return _sixth_root_of_ratio(nm, ne, pm, pe, qm, qe)


@njit(cache=True)
def _ld(L, d):
    Lm, Le = xf(L)
    dm, de = xf(d)
    return xmul(Lm, Le, dm, de)


@njit(cache=True)
def critical_data_size_kernel(C, xi, L, d):
    """Exact inverse of eq. (3): ``N*(C)`` (see module docstring)."""
    if C == INF:
        return INF
    r = _critical_fast(C, xi, L * d)
    if r == r:
        return r
    ldm, lde = _ld(L, d)
    xm, xe = xf(xi)
    nm, ne = _critical_x(C, xm, xe, ldm, lde)
    return xval(nm, ne)


@njit(cache=True)
def _critical_fast(C, xi, ld):
    """:func:`_critical_x` with plain floats (NaN: an intermediate left the range)."""
    if not (_ok(ld) and _ok(xi)):
        return np.nan
    t = xi / ld
    n0 = xi * t
    if not (_ok(t) and _ok(n0)):
        return np.nan
    if C == 0.0:
        return n0
    l2 = ld * ld
    l4 = l2 * l2
    l6 = l4 * l2
    x2 = xi * xi
    x4 = x2 * x2
    x8 = x4 * x4
    x10 = x8 * x2
    c6 = 6.0 * C
    num = c6 * l6
    if not (_ok(l2) and _ok(l4) and _ok(l6) and _ok(x2) and _ok(x4) and _ok(x8) and _ok(x10)
            and _ok(c6) and _ok(num)):
        return np.nan
    a = num / x10
    if a < 1e300 and a > 1e-300:
        w = lambertw0_scalar(a)
    else:
        xm, xe = xf(xi)
        ldm, lde = xf(ld)
        Cm, Ce = xf(C)
        w = _w_of_threshold(Cm, Ce, xm, xe, ldm, lde)
    if not w < 4200.0:  # exp(w / 6) would leave the range
        return np.nan
    n = n0 * math.exp(w / 6.0)
    if not _ok(n):
        return np.nan
    if w < 1.0:
        return n
    p = C / w
    q = 6.0 * xi * xi
    n3 = n * n * n
    pa = p / n3
    qa = q / n3
    if not (_ok(p) and _ok(6.0 * xi) and _ok(q) and _ok(n * n) and _ok(n3) and _ok(pa)
            and _ok(qa)):
        return np.nan
    rho = pa * qa
    return n * (1.0 + (rho - 1.0) / 6.0)


@njit(cache=True)
def _paper_x(C, xm, xe):
    """The paper's ``(C xi^2 / W0(C / xi^10))^(1/6)`` extended, finite ``C >= 0``."""
    x2m, x2e = xmul(xm, xe, xm, xe)
    if C == 0.0:
        return x2m, x2e  # limit C -> 0: W(x) ~ x
    x4m, x4e = xmul(x2m, x2e, x2m, x2e)
    x10m, x10e = xmul(x4m, x4e, x4m, x4e)
    x10m, x10e = xmul(x10m, x10e, x2m, x2e)
    Cm, Ce = xf(C)
    am, ae = xdiv(Cm, Ce, x10m, x10e)
    a = xval(am, ae)
    if a < 1e300 and a > 1e-300:
        w = lambertw0_scalar(a)
    else:
        w = lambertw_log0_scalar(xlog(am, ae))
    em, ee = xexp(w / 6.0)
    nm, ne = xmul(x2m, x2e, em, ee)  # (C x2 / w)^(1/6) with C/xi^10 = w e^w
    if w < 1.0:
        return nm, ne
    wm, we = xf(w)
    pm, pe = xdiv(Cm, Ce, wm, we)
    return _sixth_root_of_ratio(nm, ne, pm, pe, x2m, x2e)


@njit(cache=True)
def paper_critical_data_size_kernel(C, xi):
    """The paper's ``(C xi^2 / W0(C / xi^10))^(1/6)`` (proof of Thm F.7)."""
    if C == INF:
        return INF
    xm, xe = xf(xi)
    nm, ne = _paper_x(C, xm, xe)
    return xval(nm, ne)


@njit(cache=True)
def paper_form_ratio_kernel(C, xi, L, d):
    """``N_paper(C) / N*(C)``; at ``C = inf`` its limit ``6^(-1/6)``."""
    if C == INF:
        return 6.0 ** (-1.0 / 6.0)
    xm, xe = xf(xi)
    ldm, lde = _ld(L, d)
    am, ae = _paper_x(C, xm, xe)
    bm, be = _critical_x(C, xm, xe, ldm, lde)
    rm, re = xdiv(am, ae, bm, be)
    return xval(rm, re)


@njit(cache=True)
def _decay(pm, pe, x):
    """``p exp(-x)`` for an extended ``p`` and ``x >= 0`` (or inf)."""
    if x == INF:
        return 0.0
    em, ee = xexp(-x)
    rm, re = xmul(pm, pe, em, ee)
    return xval(rm, re)


@njit(cache=True)
def stage_one_kernel(C, N, xi, alpha, prefactor, loss0):
    """Stage I of Theorem 7.1: ``prefactor exp(-alpha xi^2 C / N^6) loss0``."""
    pm, pe = xf(prefactor)
    lm, le = xf(loss0)
    pm, pe = xmul(pm, pe, lm, le)
    if C == INF:
        return 0.0
    if N == INF:  # no decay resolved
        return xval(pm, pe)
    n2 = N * N
    n3 = n2 * N
    a1 = alpha * xi
    a2 = a1 * xi
    b = C / n3
    a3 = a2 * b
    x = a3 / n3
    pl = prefactor * loss0
    if (_ok(n2) and _ok(n3) and _ok(a1) and _ok(a2) and (C == 0.0 or (_ok(b) and _ok(a3)
            and _ok(x))) and (loss0 == 0.0 or _ok(pl))):
        if x > 1500.0:  # pl e^-x < 1e300 e^-1500 = 1e-351: rounds to 0
            return 0.0
        if x < 690.0:
            r = pl * math.exp(-x)
            if loss0 == 0.0 or _ok(r):
                return r
    Nm, Ne = xf(N)
    n3m, n3e = xmul(Nm, Ne, Nm, Ne)
    n3m, n3e = xmul(n3m, n3e, Nm, Ne)
    am, ae = xf(alpha)
    xm, xe = xf(xi)
    am, ae = xmul(am, ae, xm, xe)
    am, ae = xmul(am, ae, xm, xe)
    Cm, Ce = xf(C)
    bm, be = xdiv(Cm, Ce, n3m, n3e)
    am, ae = xmul(am, ae, bm, be)
    am, ae = xdiv(am, ae, n3m, n3e)
    return _decay(pm, pe, xval(am, ae))


@njit(cache=True)
def _floor(c_stat, xm, xe, nm, ne):
    """``c_stat xi^2 / n`` (extended ``xi``, ``n``) as a float."""
    cm, ce = xf(c_stat)
    am, ae = xmul(cm, ce, xm, xe)
    bm, be = xdiv(xm, xe, nm, ne)
    rm, re = xmul(am, ae, bm, be)
    return xval(rm, re)


@njit(cache=True)
def _stage_two_x(C, xm, xe, ldm, lde, c_stat):
    if C == INF:
        return 0.0
    nm, ne = _critical_x(C, xm, xe, ldm, lde)
    return _floor(c_stat, xm, xe, nm, ne)


@njit(cache=True)
def stage_two_kernel(C, xi, L, d, c_stat):
    """Stage II (exact form): ``c_stat xi^2 / N*(C)``."""
    if C != INF:
        n = _critical_fast(C, xi, L * d)
        a = c_stat * xi
        b = xi / n
        r = a * b
        if n == n and _ok(n) and _ok(a) and _ok(b) and _ok(r):
            return r
    xm, xe = xf(xi)
    ldm, lde = _ld(L, d)
    return _stage_two_x(C, xm, xe, ldm, lde, c_stat)


@njit(cache=True)
def _stage_two_paper_x(C, xm, xe, c_stat):
    if C == INF:
        return 0.0
    nm, ne = _paper_x(C, xm, xe)
    # xi^(5/3) (C/W)^(-1/6) = xi^2 / (C xi^2 / W)^(1/6)
    return _floor(c_stat, xm, xe, nm, ne)


@njit(cache=True)
def stage_two_paper_kernel(C, xi, c_stat):
    """Stage II as printed: ``c_stat xi^(5/3) (C / W0(C/xi^10))^(-1/6)``."""
    xm, xe = xf(xi)
    return _stage_two_paper_x(C, xm, xe, c_stat)


@njit(cache=True)
def _data_floor(N, xi, c_stat):
    """``c_stat xi^2 / N`` (0 at ``N = inf``)."""
    if N == INF:
        return 0.0
    a = c_stat * xi
    b = xi / N
    r = a * b
    if _ok(a) and _ok(b) and _ok(r):
        return r
    xm, xe = xf(xi)
    Nm, Ne = xf(N)
    return _floor(c_stat, xm, xe, Nm, Ne)


@njit(cache=True)
def two_stage_kernel(C, N, xi, L, d, alpha, prefactor, loss0, c_stat):
    """Fixed-N bound: stage I for C <= C*(N), ``c_stat xi^2 / N`` beyond."""
    cstar = threshold_compute_kernel(N, xi, L, d)
    if C <= cstar:
        return stage_one_kernel(C, N, xi, alpha, prefactor, loss0)
    return _data_floor(N, xi, c_stat)


@njit(cache=True)
def stage_kernel(C, N, xi, L, d):
    """1 (compute-starved, C <= C*(N)) or 2 (data-limited, C > C*(N))."""
    return 1.0 if C <= threshold_compute_kernel(N, xi, L, d) else 2.0


@njit(cache=True)
def compute_for_target_frontier_kernel(target, xi, L, d, c_stat):
    """Least C with ``c_stat xi^2 / N*(C) <= target`` (stage II frontier)."""
    ldm, lde = _ld(L, d)
    xm, xe = xf(xi)
    cm, ce = xf(c_stat)
    tm, te = xf(target)
    am, ae = xmul(cm, ce, xm, xe)
    bm, be = xdiv(xm, xe, tm, te)
    nm, ne = xmul(am, ae, bm, be)  # N_t = c_stat xi^2 / target
    # N_t <= N*(0) = xi^2 / (L d)  <=>  c_stat L d <= target: compared without xi's rounding
    qm, qe = xmul(cm, ce, ldm, lde)
    if xle(qm, qe, tm, te):  # reached at C = 0 already
        return 0.0
    return _threshold_x(nm, ne, xm, xe, ldm, lde)


@njit(cache=True)
def compute_for_target_fixed_n_kernel(target, N, xi, L, d, alpha, prefactor, loss0, c_stat):
    """Least C with ``two_stage_bound(C, N) <= target`` (inf if never)."""
    tm, te = xf(target)
    if N == INF:
        fm, fe = 0.0, np.int64(0)
    else:
        xm, xe = xf(xi)
        Nm, Ne = xf(N)
        cm, ce = xf(c_stat)
        am, ae = xmul(cm, ce, xm, xe)
        bm, be = xdiv(xm, xe, Nm, Ne)
        fm, fe = xmul(am, ae, bm, be)  # the stage-II floor c_stat xi^2 / N
    reach = xle(fm, fe, tm, te)
    cstar = threshold_compute_kernel(N, xi, L, d)
    if cstar < 0.0:  # every C >= 0 is past the threshold: stage II only
        return 0.0 if reach else INF
    pm, pe = xf(prefactor)
    lm, le = xf(loss0)
    b0m, b0e = xmul(pm, pe, lm, le)
    if xle(b0m, b0e, tm, te):
        c1 = 0.0
    elif N == INF:
        c1 = INF
    else:
        rm, re = xdiv(b0m, b0e, tm, te)
        lr = xlog(rm, re)
        Nm, Ne = xf(N)
        n3m, n3e = xmul(Nm, Ne, Nm, Ne)
        n3m, n3e = xmul(n3m, n3e, Nm, Ne)
        lm, le = xf(lr)
        am, ae = xmul(n3m, n3e, lm, le)
        bm, be = xf(alpha)
        xm, xe = xf(xi)
        bm, be = xmul(bm, be, xm, xe)
        bm, be = xmul(bm, be, xm, xe)
        am, ae = xdiv(am, ae, bm, be)
        am, ae = xmul(n3m, n3e, am, ae)
        c1 = xval(am, ae)
    if c1 <= cstar:
        return c1
    if reach:
        return cstar  # the infimum: any C > C*(N) reaches the floor
    return INF


@njit(cache=True)
def threshold_time_kernel(N, xi, L, d):
    """``T*(N) = N^2 log(N L d / xi^2) / xi^2``."""
    if N == INF:
        return INF
    ldm, lde = _ld(L, d)
    Nm, Ne = xf(N)
    xm, xe = xf(xi)
    lu = _log_u(Nm, Ne, xm, xe, ldm, lde)
    if lu == 0.0:
        return 0.0
    qm, qe = xdiv(Nm, Ne, xm, xe)
    qm, qe = xmul(qm, qe, qm, qe)
    lm, le = xf(abs(lu))
    rm, re = xmul(qm, qe, lm, le)
    v = xval(rm, re)
    return v if lu > 0.0 else -v


@njit(cache=True)
def _prod3(a, b, c):
    """``a b c`` (a float) without intermediate overflow."""
    am, ae = xf(a)
    bm, be = xf(b)
    cm, ce = xf(c)
    am, ae = xmul(am, ae, bm, be)
    return xmul(am, ae, cm, ce)


@njit(cache=True)
def training_loss_kernel(T, eps, alpha, loss0):
    """``loss0 exp(-alpha eps^2 T)`` (Theorem 5.5)."""
    if T == INF:
        return 0.0
    am, ae = _prod3(alpha, eps, eps)
    tm, te = xf(T)
    am, ae = xmul(am, ae, tm, te)
    lm, le = xf(loss0)
    return _decay(lm, le, xval(am, ae))


@njit(cache=True)
def generalisation_kernel(M, N, xi, L, d):
    """``(4/M + xi)/M + L d xi / N`` (Theorem 6.2)."""
    first = (4.0 / M + xi) / M
    if N == INF:
        return first
    am, ae = _prod3(L, d, xi)
    Nm, Ne = xf(N)
    am, ae = xdiv(am, ae, Nm, Ne)
    return first + xval(am, ae)


@njit(cache=True)
def threshold_jump_kernel(N, xi, L, d, alpha, prefactor, loss0, c_stat):
    """``prefactor loss0 / (c_stat L d) (N L d / xi^2)^(1 - alpha)``."""
    pm, pe = xf(prefactor)
    lm, le = xf(loss0)
    pm, pe = xmul(pm, pe, lm, le)
    qm, qe = _prod3(c_stat, L, d)
    pm, pe = xdiv(pm, pe, qm, qe)
    if alpha == 1.0:
        return xval(pm, pe)
    if N == INF:
        return INF if alpha < 1.0 else 0.0
    Nm, Ne = xf(N)
    um, ue = _prod3(N, L, d)
    xm, xe = xf(xi)
    bm, be = xmul(xm, xe, xm, xe)
    um, ue = xdiv(um, ue, bm, be)
    wm, we = xpow(um, ue, 1.0 - alpha)
    rm, re = xmul(pm, pe, wm, we)
    return xval(rm, re)


@njit(cache=True)
def continuity_kernel(L, d, prefactor, loss0):
    """``prefactor loss0 / (L d)``."""
    pm, pe = xf(prefactor)
    lm, le = xf(loss0)
    pm, pe = xmul(pm, pe, lm, le)
    ldm, lde = _ld(L, d)
    rm, re = xdiv(pm, pe, ldm, lde)
    return xval(rm, re)


@njit(cache=True)
def time_law_kernel(T, N, xi, c_stat, alpha, prefactor, loss0, literal):
    """``prefactor loss0 exp(-x) + c_stat xi^2 / N`` with ``x = alpha eps^2 T``
    (``literal``: ``alpha eps^4 T``), ``eps = xi / N``."""
    floor = _data_floor(N, xi, c_stat)
    pm, pe = xf(prefactor)
    lm, le = xf(loss0)
    pm, pe = xmul(pm, pe, lm, le)
    if N == INF:  # eps = 0: no decay resolved
        x = 0.0
    elif T == INF:
        x = INF
    else:
        xm, xe = xf(xi)
        Nm, Ne = xf(N)
        qm, qe = xdiv(xm, xe, Nm, Ne)
        em, ee = xmul(qm, qe, qm, qe)  # eps^2
        am, ae = xf(alpha)
        am, ae = xmul(am, ae, em, ee)
        tm, te = xf(T)
        am, ae = xmul(am, ae, tm, te)
        if literal != 0.0:
            am, ae = xmul(am, ae, em, ee)
        x = xval(am, ae)
    return _decay(pm, pe, x) + floor


@njit(cache=True)
def data_law_kernel(N, xi, c_stat):
    """``c_stat xi^2 / N``."""
    return _data_floor(N, xi, c_stat)


@njit(cache=True)
def model_law_kernel(M, xi, zeta, scale):
    """``scale xi^2 M^(-zeta)``; ``M^(-zeta)`` is always a normal float for
    ``0 < zeta < 1/3``."""
    if M == INF:
        return 0.0
    am, ae = _prod3(scale, xi, xi)
    pm, pe = xf(M ** (-zeta))
    rm, re = xmul(am, ae, pm, pe)
    return xval(rm, re)


@njit(cache=True)
def _ge_const_power(X, k, N, p, div):
    """``X >= k N^p / div`` (``p`` = 2 or 3, exact comparison of extended numbers)."""
    if X == INF:
        return True
    if N == INF:
        return False
    Nm, Ne = xf(N)
    am, ae = xmul(Nm, Ne, Nm, Ne)
    if p == 3:
        am, ae = xmul(am, ae, Nm, Ne)
    km, ke = xf(k)
    am, ae = xmul(km, ke, am, ae)
    dm, de = xf(div)
    am, ae = xdiv(am, ae, dm, de)
    Xm, Xe = xf(X)
    return xle(am, ae, Xm, Xe)


@njit(cache=True)
def time_law_valid_kernel(M, N, m_const):
    """``M >= m_const N^3``."""
    return 1.0 if _ge_const_power(M, m_const, N, 3, 1.0) else 0.0


@njit(cache=True)
def data_law_valid_kernel(M, N, T, xi, m_const, t_const):
    """``M >= m_const N^3`` and ``T >= t_const N^2 / xi``."""
    ok = _ge_const_power(M, m_const, N, 3, 1.0) and _ge_const_power(T, t_const, N, 2, xi)
    return 1.0 if ok else 0.0


@njit(cache=True)
def noise_drag_data_kernel(N, xi0, power, c_stat):
    """``c_stat xi(N)^2 / N`` with ``xi(N) = xi0 N^power``."""
    if N == INF:  # c_stat xi0^2 N^(2 power - 1)
        if 2.0 * power > 1.0:
            return INF
        if 2.0 * power < 1.0:
            return 0.0
        am, ae = _prod3(c_stat, xi0, xi0)
        return xval(am, ae)
    Nm, Ne = xf(N)
    pm, pe = xpow(Nm, Ne, power)
    xm, xe = xf(xi0)
    xm, xe = xmul(xm, xe, pm, pe)
    return _floor(c_stat, xm, xe, Nm, Ne)


@njit(cache=True)
def noise_drag_compute_kernel(C, xi0, L, d, power, c_stat, paper):
    """Stage-II bound at ``xi(C) = xi0 C^power`` (``paper``: the printed form)."""
    if C == INF:  # ~ C^(5 power / 3 - 1/6): constant along the path at power = 1/10
        if 10.0 * power > 1.0:
            return INF
        if 10.0 * power < 1.0:
            return 0.0
        C = 1.0
    Cm, Ce = xf(C)
    pm, pe = xpow(Cm, Ce, power)
    xm, xe = xf(xi0)
    xm, xe = xmul(xm, xe, pm, pe)
    if paper != 0.0:
        return _stage_two_paper_x(C, xm, xe, c_stat)
    ldm, lde = _ld(L, d)
    return _stage_two_x(C, xm, xe, ldm, lde, c_stat)


_F = "float64"


def _sig(n):
    return [f"{_F}({', '.join([_F] * n)})"]


@vectorize(_sig(4), cache=True)
def threshold_compute_ufunc(N, xi, L, d):
    return threshold_compute_kernel(N, xi, L, d)


@vectorize(_sig(4), cache=True)
def critical_data_size_ufunc(C, xi, L, d):
    return critical_data_size_kernel(C, xi, L, d)


@vectorize(_sig(2), cache=True)
def paper_critical_data_size_ufunc(C, xi):
    return paper_critical_data_size_kernel(C, xi)


@vectorize(_sig(4), cache=True)
def paper_form_ratio_ufunc(C, xi, L, d):
    return paper_form_ratio_kernel(C, xi, L, d)


@vectorize(_sig(6), cache=True)
def stage_one_ufunc(C, N, xi, alpha, prefactor, loss0):
    return stage_one_kernel(C, N, xi, alpha, prefactor, loss0)


@vectorize(_sig(5), cache=True)
def stage_two_ufunc(C, xi, L, d, c_stat):
    return stage_two_kernel(C, xi, L, d, c_stat)


@vectorize(_sig(3), cache=True)
def stage_two_paper_ufunc(C, xi, c_stat):
    return stage_two_paper_kernel(C, xi, c_stat)


@vectorize(_sig(9), cache=True)
def two_stage_ufunc(C, N, xi, L, d, alpha, prefactor, loss0, c_stat):
    return two_stage_kernel(C, N, xi, L, d, alpha, prefactor, loss0, c_stat)


@vectorize(_sig(5), cache=True)
def stage_ufunc(C, N, xi, L, d):
    return stage_kernel(C, N, xi, L, d)


@vectorize(_sig(5), cache=True)
def compute_for_target_frontier_ufunc(target, xi, L, d, c_stat):
    return compute_for_target_frontier_kernel(target, xi, L, d, c_stat)


@vectorize(_sig(9), cache=True)
def compute_for_target_fixed_n_ufunc(target, N, xi, L, d, alpha, prefactor, loss0, c_stat):
    return compute_for_target_fixed_n_kernel(target, N, xi, L, d, alpha, prefactor, loss0, c_stat)


@vectorize(_sig(4), cache=True)
def threshold_time_ufunc(N, xi, L, d):
    return threshold_time_kernel(N, xi, L, d)


@vectorize(_sig(4), cache=True)
def training_loss_ufunc(T, eps, alpha, loss0):
    return training_loss_kernel(T, eps, alpha, loss0)


@vectorize(_sig(5), cache=True)
def generalisation_ufunc(M, N, xi, L, d):
    return generalisation_kernel(M, N, xi, L, d)


@vectorize(_sig(8), cache=True)
def threshold_jump_ufunc(N, xi, L, d, alpha, prefactor, loss0, c_stat):
    return threshold_jump_kernel(N, xi, L, d, alpha, prefactor, loss0, c_stat)


@vectorize(_sig(4), cache=True)
def continuity_ufunc(L, d, prefactor, loss0):
    return continuity_kernel(L, d, prefactor, loss0)


@vectorize(_sig(8), cache=True)
def time_law_ufunc(T, N, xi, c_stat, alpha, prefactor, loss0, literal):
    return time_law_kernel(T, N, xi, c_stat, alpha, prefactor, loss0, literal)


@vectorize(_sig(3), cache=True)
def data_law_ufunc(N, xi, c_stat):
    return data_law_kernel(N, xi, c_stat)


@vectorize(_sig(4), cache=True)
def model_law_ufunc(M, xi, zeta, scale):
    return model_law_kernel(M, xi, zeta, scale)


@vectorize(_sig(3), cache=True)
def time_law_valid_ufunc(M, N, m_const):
    return time_law_valid_kernel(M, N, m_const)


@vectorize(_sig(6), cache=True)
def data_law_valid_ufunc(M, N, T, xi, m_const, t_const):
    return data_law_valid_kernel(M, N, T, xi, m_const, t_const)


@vectorize(_sig(4), cache=True)
def noise_drag_data_ufunc(N, xi0, power, c_stat):
    return noise_drag_data_kernel(N, xi0, power, c_stat)


@vectorize(_sig(7), cache=True)
def noise_drag_compute_ufunc(C, xi0, L, d, power, c_stat, paper):
    return noise_drag_compute_kernel(C, xi0, L, d, power, c_stat, paper)
