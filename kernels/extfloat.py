"""Extended-exponent arithmetic for compiled kernels (numpy and numba only).

A non-negative finite number is held as a pair ``(m, e)`` meaning ``m * 2**e``, with the
mantissa kept inside (1e-150, 1e150) and renormalised with ``math.frexp`` only when it leaves
that band. A product or quotient of two such mantissas never overflows or turns subnormal,
and it rounds exactly as the same plain float operation does (scaling by a power of 2 is
exact). So inside the float range the results are bit for bit those of the direct formulas;
outside it nothing overflows or underflows until the final :func:`xval`, which gives inf or 0
only when the true value is beyond the float range. Used by the scaling-law kernels of paper
000 (``attndyn.numeric.scaling._kernels``).
"""

import math

import numpy as np
from numba import njit

__all__ = ["xn", "xf", "xmul", "xdiv", "xval", "xlog", "xexp", "xpow", "xle",
           "LN2_HI", "LN2_LO", "LN2", "EBIG", "INF"]

INF = np.inf

LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of log 2: k * LN2_HI is exact
LN2_LO = 1.90821492927058770002e-10
LN2 = 0.6931471805599453
EBIG = 1 << 50  # exponent of a number that is certainly beyond the float range


@njit(cache=True)
def xn(m, e):
    """Renormalise ``(m, e)`` if ``m`` left the band (1e-150, 1e150)."""
    if m > 1e-150 and m < 1e150:
        return m, e
    if m == 0.0:
        return 0.0, np.int64(0)
    mm, k = math.frexp(m)
    return mm, e + np.int64(k)


@njit(cache=True)
def xf(v):
    """Finite float ``v >= 0`` as ``(m, e)``."""
    return xn(v, np.int64(0))


@njit(cache=True)
def xmul(am, ae, bm, be):
    return xn(am * bm, ae + be)


@njit(cache=True)
def xdiv(am, ae, bm, be):
    return xn(am / bm, ae - be)


@njit(cache=True)
def xval(m, e):
    """``m * 2**e`` as a float (inf or 0 beyond the float range)."""
    if e == 0 or m == 0.0:
        return m
    if e > 2600:
        return INF
    if e < -2800:
        return 0.0
    return math.ldexp(m, int(e))


@njit(cache=True)
def xlog(m, e):
    """``log(m * 2**e)`` for ``m > 0``, accurate near the float range's ends too."""
    v = xval(m, e)
    if v > 1e-300 and v < 1e300:
        return math.log(v)
    return e * LN2_HI + (math.log(m) + e * LN2_LO)


@njit(cache=True)
def xexp(x):
    """``exp(x)`` as ``(m, e)`` for any ``x``; beyond ``|x| = 1e7`` a number
    ``2**(+-2**50)`` stands for "certainly beyond the float range"."""
    if x > -700.0 and x < 700.0:
        return xf(math.exp(x))
    if x != x:
        return np.nan, np.int64(0)
    if x < -1e7:  # far below the float range, but kept positive (no 0 * inf later)
        return 0.5, np.int64(-EBIG)
    if x > 1e7:
        return 0.5, np.int64(EBIG)
    k = math.floor(x / LN2 + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    m, e = xf(math.exp(r))
    return m, e + np.int64(k)


@njit(cache=True)
def xpow(m, e, p):
    """``(m 2**e)**p`` for ``m > 0`` and a finite real ``p``."""
    if p == 0.0:
        return 0.5, np.int64(1)
    v = xval(m, e)
    if v > 1e-300 and v < 1e300:
        r = v ** p
        if r > 1e-300 and r < 1e300:
            return xf(r)
    return xexp(p * xlog(m, e))


@njit(cache=True)
def xle(am, ae, bm, be):
    """``a <= b`` for two non-negative extended numbers (exact)."""
    if am == 0.0:
        return True
    if bm == 0.0:
        return False
    if ae == be:
        return am <= bm
    am, k = math.frexp(am)
    bm, j = math.frexp(bm)
    ae = ae + np.int64(k)
    be = be + np.int64(j)
    if ae != be:
        return ae < be
    return am <= bm
