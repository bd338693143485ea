"""Real Lambert W in numba: principal branch W0 and lower branch W-1.

W(z) solves ``w * exp(w) = z``. For real ``z`` there are two real branches:

- W0 on ``[-1/e, inf)`` with values in ``[-1, inf)``;
- W-1 on ``[-1/e, 0)`` with values in ``(-inf, -1]``.

Every evaluation ends with one update computed from a residual that is
accurate to about one rounding of the *result* (not of ``z``); the update is
the last step of a Halley iteration. The forms used per region are:

1. Branch point (W0 for ``w <= -0.4``, W-1 for ``w >= -2``). With
   ``t = 1 + w`` the equation ``w e^w = z`` is exactly

   .. math:: h(t) := 1 - (1 - t) e^t = \\sum_{k\\ge 2} \\frac{(k-1)\\,t^k}{k!}
             = 1 + e z =: q,

   and ``q`` is computed in double-double from a split ``e = e_hi + e_lo``, so
   the rounding of ``z + 1/e`` never enters. The start is the series
   ``t = sum_k mu_k (+-p)^k`` in ``p = sqrt(2 q)`` (Corless et al. 1996,
   eq. 4.22, coefficients from their recurrence; 19 terms, error below 2e-7),
   then one Halley step on ``h(t) = q`` with ``h'(t) = t e^t``,
   ``h''(t) = (1 + t) e^t`` (``e^t = (1 - h(t)) / (1 - t)``, no ``exp``) and
   ``t^2/2`` kept exact (Dekker product); the polynomials run as four
   interleaved Horner chains.
2. Small and moderate W0 (``-0.268 < z < 1``): Halley on ``f = w e^w - z``
   with ``w e^w = w + w * expm1(w)`` and the residual summed in
   double-double, started from a rational (5,5) fit of ``W0(z)/z`` (relative
   error 1.6e-8, so one step suffices). For ``|z| < 1e-4`` the Taylor series
   ``z - z^2 + 3/2 z^3 - ...`` is used directly.
3. Large W0 (``z >= 1``) and W-1 away from the branch point: Halley on the
   logarithmic form ``g = w + log(+-w) - log(+-z)``, started from a rational
   (4,4) fit of the Wright omega function for ``0 <= log z <= 12`` and from
   the asymptotic series ``L1 - L2 + L2/L1 + ...`` (to ``L1^-4``) beyond;
   ``log(z) - w`` and the difference with ``log(w)`` are exact by Sterbenz's
   lemma near the root.

The fits were made once (linearised least squares on 50-digit mpmath values)
and are only starting values: accuracy comes from the final step.

Special values: ``W0(0) = 0`` (sign kept), ``W(-1/e) = -1`` on both branches
for the double nearest to ``-1/e`` (which lies 1.24e-17 *below* ``-1/e``),
``W0(e) = 1``, ``W0(inf) = inf``, ``W-1(0) = -inf`` (the limit). Arguments
outside the domain (and NaN) give NaN.

This module imports only numpy and numba. All functions are ``@njit`` without
``fastmath`` (the compensated sums rely on IEEE rounding) and can be called
from other jitted code: :func:`lambertw0_scalar`, :func:`lambertwm1_scalar`,
:func:`lambertw_scalar`, or the ufuncs :data:`lambertw0_ufunc`,
:data:`lambertwm1_ufunc` (broadcast like numpy, also callable in njit code).
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction

import numpy as np
from numba import njit, prange, vectorize

__all__ = [
    "INV_E",
    "lambertw0_scalar",
    "lambertwm1_scalar",
    "lambertw_scalar",
    "lambertw_log0_scalar",
    "lambertw0_ufunc",
    "lambertwm1_ufunc",
    "lambertw_array",
    "BRANCH_POINT_COEFFS",
    "check_lambertw_args",
]

#: The double nearest to 1/e. It exceeds 1/e by 1.2428753672788363e-17, so
#: ``-INV_E`` is (mathematically) just outside the domain; it is the branch
#: point by convention and returns exactly -1.
INV_E = 0.36787944117144233
_E_HI = 2.718281828459045  # double nearest to e
_E_LO = 1.4456468917292502e-16  # e - _E_HI, rounded
_SPLIT = 134217729.0  # 2**27 + 1, Dekker's splitter
_E_HI_H = _SPLIT * _E_HI - (_SPLIT * _E_HI - _E_HI)  # Dekker split of _E_HI
_E_HI_L = _E_HI - _E_HI_H

# Region boundaries (see module docstring).
_Z0_BRANCH = -0.2681280184142557  # -0.4 exp(-0.4) = W0^{-1}(-0.4)
_ZM1_BRANCH = -0.2706705664732254  # -2 exp(-2) = W-1^{-1}(-2)
_Z0_SERIES = 1e-4  # |z| below this: Taylor series of W0 at 0


def _branch_point_coefficients(n: int) -> np.ndarray:
    """Coefficients mu_k of W = sum mu_k p^k, p = sqrt(2 (1 + e z)).

    Recurrence of Corless, Gonnet, Hare, Jeffrey and Knuth (1996), eqs.
    (4.23)-(4.24), in exact rational arithmetic.
    """
    mu = [Fraction(-1), Fraction(1)]
    al = [Fraction(2), Fraction(-1)]
    for k in range(2, n):
        al.append(sum((mu[j] * mu[k + 1 - j] for j in range(2, k)), Fraction(0)))
        mu.append(Fraction(k - 1, k + 1) * (mu[k - 2] / 2 + al[k - 2] / 4)
                  - al[k] / 2 - mu[k - 1] / (k + 1))
    return np.array([float(m) for m in mu], dtype=np.float64)


#: mu_0 .. mu_23 (mu_0 = -1, mu_1 = 1, mu_2 = -1/3, mu_3 = 11/72, ...).
BRANCH_POINT_COEFFS = _branch_point_coefficients(24)

# Tail of h(t): h(t) = t^2/2 + t^3 P(t), P(t) = sum_{j>=0} (j+2)/(j+3)! t^j.
_H_TAIL = np.array([float(Fraction(j + 2, math.factorial(j + 3))) for j in range(22)])


# ---------------------------------------------------------------------------
# error-free transformations
# ---------------------------------------------------------------------------


@njit(cache=True)
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(cache=True)
def _two_sqr(a):
    """``_two_prod(a, a)`` with one split."""
    p = a * a
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    return p, ((ah * ah - p) + 2.0 * ah * al) + al * al


@njit(cache=True)
def _two_prod_e(z):
    """``_two_prod(_E_HI, z)`` with ``_E_HI``'s split precomputed."""
    p = _E_HI * z
    c = _SPLIT * z
    bh = c - (c - z)
    bl = z - bh
    return p, ((_E_HI_H * bh - p) + _E_HI_H * bl + _E_HI_L * bh) + _E_HI_L * bl


@njit(cache=True)
def _two_prod(a, b):
    p = a * b
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


# ---------------------------------------------------------------------------
# region 1: the branch point
# ---------------------------------------------------------------------------


# The two polynomials of the branch-point region, written out with literal coefficients
# (a loop over a coefficient table was 3x slower: the loads and the loop stay in the code) as
# four independent Horner chains in x^4 joined by ((a3 x + a2) x + a1) x + a0, so the
# chains' multiply-add latencies overlap. tests/kernels/test_lambertw.py checks every
# literal against BRANCH_POINT_COEFFS and _H_TAIL.


@njit(cache=True)
def _start_series(x):
    """``t = W + 1 = sum_{k=1}^{19} mu_k p^k`` at ``x = p``: at the region ends (``|p| <=
    0.74``) the truncation error is below 2e-7, which one Halley step (cubic) takes below
    1e-20."""
    x2 = x * x
    x4 = x2 * x2
    a0 = 0.0 + x4 * (-0.07962962962962963 + x4 * (-0.009616892024299432 + x4 * (
        -0.0015769303446867841 + x4 * (-0.00029267722472962746))))
    a1 = 1.0 + x4 * (0.044502314814814814 + x4 * (0.006014543252956118 + x4 * (
        0.0010262633205076071 + x4 * (0.00019438727605453933))))
    a2 = -0.3333333333333333 + x4 * (-0.02598471487360376 + x4 * (-0.0038112980348919993 + x4 * (
        -0.0006720616311561362 + x4 * (-0.00012957426685274883))))
    a3 = 0.1527777777777778 + x4 * (0.01563563253233392 + x4 * (0.0024408779911439826 + x4 * (
        0.0004424730618146209 + x4 * (8.665035805208128e-05))))
    return ((a3 * x + a2) * x + a1) * x + a0


@njit(cache=True)
def _h_tail(x):
    """``P(t) = sum_{j < 20} (j + 2)/(j + 3)! t^j`` at ``x = t`` (the terms from ``j = 20``
    on are below 1e-20 for ``|t| <= 1``: W-1 down to -2, W0 up to -0.4)."""
    x2 = x * x
    x4 = x2 * x2
    a0 = 0.3333333333333333 + x4 * (0.0011904761904761906 + x4 * (2.505210838544172e-07 + x4 * (
        1.0706029224547743e-11 + x4 * (1.4797143443923793e-16))))
    a1 = 0.125 + x4 * (0.00017361111111111112 + x4 * (2.296443268665491e-08 + x4 * (
        7.169215998581078e-13 + x4 * (7.809603484293113e-18))))
    a2 = 0.03333333333333333 + x4 * (2.2045855379188714e-05 + x4 * (1.9270852604185937e-09 + x4 * (
        4.498331606952833e-14 + x4 * (3.9145882126782523e-19))))
    a3 = 0.006944444444444444 + x4 * (2.48015873015873e-06 + x4 * (1.4911969277048643e-10 + x4 * (
        2.6552651846596585e-15 + x4 * (1.8683261924146203e-20))))
    return ((a3 * x + a2) * x + a1) * x + a0


@njit(cache=True)
def _start_series_w0(x):
    """:func:`_start_series` to ``k <= 15`` for W0 (``0 <= p <= 0.74``: error below 1.5e-6,
    below 2e-7 for ``z <= -0.29``)."""
    x2 = x * x
    x4 = x2 * x2
    a0 = 0.0 + x4 * (-0.07962962962962963 + x4 * (-0.009616892024299432 + x4 * (
        -0.0015769303446867841)))
    a1 = 1.0 + x4 * (0.044502314814814814 + x4 * (0.006014543252956118 + x4 * (
        0.0010262633205076071)))
    a2 = -0.3333333333333333 + x4 * (-0.02598471487360376 + x4 * (-0.0038112980348919993 + x4 * (
        -0.0006720616311561362)))
    a3 = 0.1527777777777778 + x4 * (0.01563563253233392 + x4 * (0.0024408779911439826 + x4 * (
        0.0004424730618146209)))
    return ((a3 * x + a2) * x + a1) * x + a0


@njit(cache=True)
def _h_tail_w0(x):
    """:func:`_h_tail` to ``j < 16``, enough on W0's side (``0 <= t <= 0.6``: the dropped
    terms are below 1e-19 of ``t^2/2``)."""
    x2 = x * x
    x4 = x2 * x2
    a0 = 0.3333333333333333 + x4 * (0.0011904761904761906 + x4 * (2.505210838544172e-07 + x4 * (
        1.0706029224547743e-11)))
    a1 = 0.125 + x4 * (0.00017361111111111112 + x4 * (2.296443268665491e-08 + x4 * (
        7.169215998581078e-13)))
    a2 = 0.03333333333333333 + x4 * (2.2045855379188714e-05 + x4 * (1.9270852604185937e-09 + x4 * (
        4.498331606952833e-14)))
    a3 = 0.006944444444444444 + x4 * (2.48015873015873e-06 + x4 * (1.4911969277048643e-10 + x4 * (
        2.6552651846596585e-15)))
    return ((a3 * x + a2) * x + a1) * x + a0


@njit(cache=True)
def _branch(z, sign):
    """W near -1/e; ``sign = +1`` for W0 (t > 0), ``-1`` for W-1 (t < 0)."""
    # q = 1 + e z in double-double: e_hi z exactly, 1 + (e_hi z)_hi exact.
    ph, pl = _two_prod_e(z)
    s, se = _two_sum(1.0, ph)
    qh, ql = _two_sum(s, se + pl + _E_LO * z)
    if qh <= 0.0:  # only possible at rounding level: the branch point itself
        return -1.0
    p = sign * math.sqrt(2.0 * qh)
    # t = W + 1 from the branch-point series (mu_1 .. mu_19), error below 2e-7
    t = _start_series_w0(p) if sign > 0.0 else _start_series(p)
    dt = _halley_h(t, qh, ql, sign)
    n = 0
    while abs(dt) > 4e-6 * abs(t) and n < 8:  # never taken from the series start (kept
        t = t + dt                             # for safety: plain iteration to the root)
        dt = _halley_h(t, qh, ql, sign)
        n += 1
    w, we = _two_sum(t, -1.0)
    return w + (we + dt)


@njit(cache=True)
def _halley_h(t, qh, ql, sign):
    """The Halley step ``dt`` for ``h(t) = q`` (``q = qh + ql``) on branch ``sign``."""
    a, ae = _two_sqr(t)
    tail = _h_tail_w0(t) if sign > 0.0 else _h_tail(t)
    # r = h(t) - q with t^2/2 exact, so r is accurate to about one rounding of the result
    r = (0.5 * a - qh) + ((0.5 * ae - ql) + t * a * tail)
    # Halley: dt = -2 r h' / (2 h'^2 - r h''), h' = t e^t, h'' = (1 + t) e^t; one step from
    # the series start leaves an error of order |dt|^3. No exp: h(t) = q + r gives
    # e^t = (1 - q - r) / (1 - t) (no cancellation: q < 0.28, t <= 0.6), and the factors
    # of e^t cancel to one division
    num = 1.0 - qh - r
    den = 1.0 - t
    return -2.0 * r * t * den / (2.0 * t * t * num - r * (1.0 + t) * den)


# ---------------------------------------------------------------------------
# region 2: small and moderate W0 (-0.268 < z < 1)
# ---------------------------------------------------------------------------


@njit(cache=True)
def _w0_mid(z):
    # start: rational (5,5) fit of W0(z)/z on [-0.2682, 1], relative error
    # 1.6e-8, so one Halley step reaches the rounding level
    num = 1.0000000022140199 + z * (5.914327710805734 + z * (11.814155706683025 + z * (
        9.051824799956819 + z * (2.121680032091486 + z * 0.03979631677219472))))
    den = 1.0 + z * (6.91432773814155 + z * (17.228484223737475 + z * (
        18.57548179418083 + z * (8.084274827666873 + z * 0.9914693615318264))))
    w = z * num / den
    for _ in range(10):
        em1 = math.expm1(w)
        # f = w e^w - z = (w - z) + w * expm1(w), summed in double-double
        ph, pl = _two_prod(w, em1)
        s, se = _two_sum(w, -z)
        f = (s + ph) + (se + pl)
        wp1 = w + 1.0
        fp = (1.0 + em1) * wp1
        dw = f / (fp - (w + 2.0) * f / (2.0 * wp1))
        w = w - dw
        if abs(dw) <= 1e-6 * abs(w):
            break
    return w


@njit(cache=True)
def _w0_small(z):
    # W0(z) = z - z^2 + 3/2 z^3 - 8/3 z^4 + 125/24 z^5 - ..., |z| < 1e-4
    c = z * (-1.0 + z * (1.5 + z * (-2.6666666666666665 + z * 5.208333333333333)))
    return z + z * c


# ---------------------------------------------------------------------------
# region 3: logarithmic form (large W0, W-1 away from the branch point)
# ---------------------------------------------------------------------------


@njit(cache=True)
def _log_start(ell, sign):
    """Start for ``w + log(sign w) = ell``: a rational (4,4) fit of the Wright
    omega function on [0, 12] (relative error 4.3e-7) for W0, else the
    asymptotic series in L1 = ell, L2 = log(sign ell) (de Bruijn; Corless et
    al. 1996, eq. 4.19) to the L1^-4 term (relative error < 5.2e-7 for
    ell >= 12)."""
    if sign > 0.0 and ell <= 12.0:
        num = 0.5671435334118807 + ell * (0.5926671500272354 + ell * (
            0.27799625402324546 + ell * (0.06990648624900182 + ell * 0.008494171270053613)))
        den = 1.0 + ell * (0.4069111754893971 + ell * (0.1005462511317277 + ell * (
            0.008752630505054995 - ell * 2.3218521426615624e-06)))
        return num / den
    l1 = ell
    l2 = math.log(sign * ell)
    i1 = 1.0 / l1
    # the divisions by 6 and 12 multiplied out (a start only: the Halley step decides the
    # bits; without fast-math a division by a constant stays a division)
    return l1 - l2 + l2 * i1 * (1.0 + i1 * (0.5 * (l2 - 2.0) + i1 * (
        (1.0 + l2 * (-1.5 + l2 * 0.3333333333333333))
        + i1 * (-1.0 + l2 * (3.0 + l2 * (-1.8333333333333333 + 0.25 * l2))))))


@njit(cache=True)
def _log_form(ell, sign):
    """Solve ``w + log(sign*w) = ell`` (sign +1: W0 of e^ell, ell >= 0;
    sign -1: W-1 of -e^ell, ell <= -1.3)."""
    w = _log_start(ell, sign)
    if sign * w < 1e-300:  # the asymptotic start overshot (never for ell in range)
        w = sign * 1e-300
    for _ in range(12):
        r = (ell - w) - math.log(sign * w)  # = -g
        wp1 = w + 1.0
        # Halley on g(w) = w + log(sign w) - ell, g' = (w+1)/w, g'' = -1/w^2, as one
        # division, -r w / (wp1 - r / (2 wp1)) = -2 r w wp1 / (2 wp1^2 - r), where wp1^2
        # cannot overflow (W0 of exp(ell) reaches 1e300 through lambertw_log0_scalar)
        if abs(w) < 1e100:
            dw = -2.0 * r * w * wp1 / (2.0 * wp1 * wp1 - r)
        elif abs(w) < 1e300:
            dw = -r * w / (wp1 - r / (2.0 * wp1))
        else:  # r w would overflow (|r| up to log w ~ 710): the ratio first
            dw = -r * (w / (wp1 - r / (2.0 * wp1)))
        w = w - dw
        if abs(dw) <= 1e-6 * abs(w):
            break
    return w


# ---------------------------------------------------------------------------
# public scalar kernels
# ---------------------------------------------------------------------------


@njit(cache=True)
def lambertw0_scalar(z):
    """Principal branch W0(z) for a float64 ``z``; NaN for ``z < -1/e``."""
    if z >= 1.0:  # first: the log form's points pay no other test (about 10% of them)
        if z == _E_HI:
            return 1.0
        if z == np.inf:
            return np.inf
        return _log_form(math.log(z), 1.0)
    if not (z >= -INV_E):  # below the branch point, or NaN
        return np.nan
    if z == -INV_E:
        return -1.0
    if z == 0.0:
        return z
    if z <= _Z0_BRANCH:
        return _branch(z, 1.0)
    if abs(z) < _Z0_SERIES:
        return _w0_small(z)
    return _w0_mid(z)


@njit(cache=True)
def lambertwm1_scalar(z):
    """Lower branch W-1(z) for a float64 ``z``; NaN outside ``[-1/e, 0]``.

    ``W-1(0) = -inf`` (the limit ``z -> 0-``).
    """
    if not (z >= -INV_E) or z > 0.0:
        return np.nan
    if z == -INV_E:
        return -1.0
    if z == 0.0:
        return -np.inf
    if z <= _ZM1_BRANCH:
        return _branch(z, -1.0)
    return _log_form(math.log(-z), -1.0)


@njit(cache=True)
def lambertw_scalar(z, branch):
    """W_k(z) for ``branch`` k in {0, -1}; NaN for any other branch."""
    if branch == 0:
        return lambertw0_scalar(z)
    if branch == -1:
        return lambertwm1_scalar(z)
    return np.nan


@njit(cache=True)
def lambertw_log0_scalar(ell):
    """W0(exp(ell)) without forming ``exp(ell)`` (no overflow or underflow).

    Useful when the argument of W is a product of powers that overflows
    double precision (e.g. ``6 (L d)^6 C / xi^10``): pass its logarithm.
    """
    if ell != ell:
        return np.nan
    if ell == np.inf:
        return np.inf
    if ell >= 0.0:
        return _log_form(ell, 1.0)
    if ell < -745.2:  # exp(ell) underflows to 0: W0(x) = x (1 - x + ...)
        return 0.0
    return lambertw0_scalar(math.exp(ell))


@vectorize(["float64(float64)"], cache=True)
def lambertw0_ufunc(z):
    """ufunc: principal branch W0 (see :func:`lambertw0_scalar`)."""
    return lambertw0_scalar(z)


@vectorize(["float64(float64)"], cache=True)
def lambertwm1_ufunc(z):
    """ufunc: lower branch W-1 (see :func:`lambertwm1_scalar`)."""
    return lambertwm1_scalar(z)


@njit(cache=True, parallel=True)
def lambertw_array(z, branch, out):
    """Fill 1-D ``out`` with W_branch(z) (parallel loop over a 1-D array); ``out`` must
    have the length of ``z`` (ValueError otherwise, before anything is written)."""
    if out.shape[0] != z.shape[0]:
        raise ValueError("lambertw_array: out must have the length of z")
    for i in prange(z.size):
        out[i] = lambertw_scalar(z[i], branch)
    return out


def check_lambertw_args(z, branch=0):
    """Validate the arguments of a Lambert W front end: ``(z as float64 array, branch)``.

    ``branch`` must be the integer 0 or -1 (``int`` or numpy integer; not ``bool``, not a
    float such as ``-1.0``: TypeError; another integer: ValueError). ``z`` must be a real
    number or array of them (bool, integer or float dtype): ``None``, text (``"1.0"`` is
    not parsed), bytes, complex and object arrays raise TypeError naming ``z``. Nothing is
    evaluated or parsed. The result is ``z`` as float64 (no copy when it already is).
    """
    if isinstance(branch, (bool, np.bool_)):
        raise TypeError(f"branch must be the integer 0 or -1, got {branch!r}")
    try:
        k = operator.index(branch)
    except TypeError:
        raise TypeError(f"branch must be the integer 0 or -1, got {branch!r} "
                        f"({type(branch).__name__})") from None
    if k not in (0, -1):
        raise ValueError(f"branch must be 0 (principal) or -1 (lower real branch), got {k}")
    if z is None or isinstance(z, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"z must be a real number or array of real numbers, got "
                        f"{type(z).__name__}")
    arr = np.asarray(z)
    kind = arr.dtype.kind
    if kind == "c":
        raise TypeError("z must be real; this Lambert W takes real arguments only")
    if kind not in "biuf":
        raise TypeError(f"z must be a real number or array of real numbers, got an array of "
                        f"dtype {arr.dtype} (text and objects are not converted)")
    return arr.astype(np.float64, copy=False), int(k)
