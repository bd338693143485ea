"""Free subordination at ``z = 0`` for the free limit solver, in numba.

The free solver (one trainable Wishart student ``S``, one fixed Wishart teacher ``T``;
paper 003, the Riccati structure of eq. 343) needs, at every right-hand-side evaluation,
the root ``omega < min(phi)`` of

    r(omega) = G_X(1/G_Y(omega) - omega) - G_Y(omega),
    G_Y(w) = sum_m wm_m / (w - phi_m),      G_X(w) = sum_j wx_j x_j / (w x_j - 1),

on quadrature nodes ``(mu, wm)`` of the teacher's law and ``(x, wx)`` of ``X_0 = S(0)^-1``,
and then the traces

    t_S  = sum_m wm g / (phi - omega),     q_ST = sum_m wm mu g / (phi - omega),
    q_SS = sum_m wm g (g - omega') / (phi - omega)^2,

with ``omega'`` the derivative of ``omega`` when ``phi`` moves along ``g``: the solution of
the 2 x 2 system ``[[G_Y', -1], [-G_X', -G_X'/G^2 - 1]] (omega', G') = (-dG_Y/de, 0)``.

:func:`subordination_kernel` does all of it in one compiled call: the bracket search of the
Python version (expanding steps from the previous root), then Brent's method as in scipy's
``brentq`` (the same iteration, ``xtol = rtol = 1e-15``, at most 200 iterations), then the
traces. It returns a status instead of raising; :func:`subordination_solve` checks the
arrays, calls it and turns a status into the error the Python version raised.

Status codes (``SUBORDINATION_STATUS``): 0 success; 1 the point ``1/G_Y - omega`` left the
domain of ``G_X`` (``w x_max >= 1``); 2 no bracket for the root; 3 Brent's method did not
converge in 200 iterations; 4 the 2 x 2 system is singular; 5 a non-finite value.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["subordination_kernel", "subordination_solve", "SUBORDINATION_STATUS"]

SUBORDINATION_STATUS = {
    0: "success",
    1: "the subordination point left the domain of G_X",
    2: "no bracket for the subordination root",
    3: "the subordination root did not converge in 200 iterations",
    4: "the subordination derivative system is singular",
    5: "a non-finite value in the subordination solve",
}

_XTOL = 1e-15
_RTOL = 1e-15
_MAXITER = 200


@njit(cache=True)
def _gy(om, phi, wm):
    """``G_Y(omega) = sum wm / (omega - phi)``."""
    s = 0.0
    for m in range(phi.size):
        s += wm[m] / (om - phi[m])
    return s


@njit(cache=True)
def _gx(w, x, wx, xmax, out):
    """``out = (G_X(w), G_X'(w))``; returns False when ``w x_max >= 1`` (outside the
    domain: the bottom ``1/x_max`` of the spectrum of ``X_0``)."""
    if not (w * xmax < 1.0):
        return False
    s0 = 0.0
    s1 = 0.0
    for j in range(x.size):
        den = w * x[j] - 1.0
        v = wx[j] * x[j] / den
        s0 += v
        s1 += v * x[j] / den
    out[0] = s0
    out[1] = -s1
    return True


@njit(cache=True)
def _residual(om, phi, wm, x, wx, xmax, buf):
    """``r(omega) = G_X(1/G_Y(omega) - omega) - G_Y(omega)``; ``buf[2] = 1.0`` on success,
    0.0 when the point left the domain of ``G_X``."""
    G = _gy(om, phi, wm)
    ok = _gx(1.0 / G - om, x, wx, xmax, buf)
    buf[2] = 1.0 if ok else 0.0
    return buf[0] - G


@njit(cache=True)
def _brentq(a, b, phi, wm, x, wx, xmax, buf, res):
    """scipy's ``brentq`` (Brent 1973, as in scipy's C code) on :func:`_residual` over
    ``[a, b]``. ``res[0]`` gets the root; returns a status (0, 1 domain, 3 no convergence,
    2 no sign change)."""
    xpre = a
    xcur = b
    xblk = 0.0
    fblk = 0.0
    spre = 0.0
    scur = 0.0
    fpre = _residual(xpre, phi, wm, x, wx, xmax, buf)
    if buf[2] == 0.0:
        return 1
    fcur = _residual(xcur, phi, wm, x, wx, xmax, buf)
    if buf[2] == 0.0:
        return 1
    if fpre == 0.0:
        res[0] = xpre
        return 0
    if fcur == 0.0:
        res[0] = xcur
        return 0
    if (fpre < 0.0) == (fcur < 0.0):
        return 2
    for _ in range(_MAXITER):
        if fpre != 0.0 and fcur != 0.0 and ((fpre < 0.0) != (fcur < 0.0)):
            xblk = xpre
            fblk = fpre
            spre = xcur - xpre
            scur = spre
        if abs(fblk) < abs(fcur):
            xpre = xcur
            xcur = xblk
            xblk = xpre
            fpre = fcur
            fcur = fblk
            fblk = fpre
        delta = (_XTOL + _RTOL * abs(xcur)) / 2.0
        sbis = (xblk - xcur) / 2.0
        if fcur == 0.0 or abs(sbis) < delta:
            res[0] = xcur
            return 0
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:
                stry = -fcur * (xcur - xpre) / (fcur - fpre)  # interpolate
            else:  # extrapolate (inverse quadratic)
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2.0 * abs(stry) < min(abs(spre), 3.0 * abs(sbis) - delta):
                spre = scur  # good short step
                scur = stry
            else:
                spre = sbis
                scur = sbis
        else:
            spre = sbis
            scur = sbis
        xpre = xcur
        fpre = fcur
        if abs(scur) > delta:
            xcur += scur
        else:
            xcur += delta if sbis > 0.0 else -delta
        fcur = _residual(xcur, phi, wm, x, wx, xmax, buf)
        if buf[2] == 0.0:
            return 1
    res[0] = xcur
    return 3


@njit(cache=True)
def subordination_kernel(phi, g, mu, wm, x, wx, omega0, out):
    """The root and the traces (module docstring) in one call.

    ``omega0``: the previous root (the bracket search starts there). ``out`` (6 entries)
    gets ``(omega, t_S, q_SS, q_ST, residual evaluations, 0)``. Returns a status
    (``SUBORDINATION_STATUS``)."""
    buf = np.zeros(3)
    res = np.zeros(1)
    xmax = -np.inf
    for j in range(x.size):
        xmax = max(xmax, x[j])
    pmin = np.inf
    for m in range(phi.size):
        pmin = min(pmin, phi[m])
    if not (math.isfinite(pmin) and math.isfinite(xmax) and math.isfinite(omega0)):
        return 5
    hi = pmin - 1e-14 * max(1.0, abs(pmin))
    om0 = min(omega0, hi - 1e-12)
    lo = om0 - 1e-3 * max(1.0, abs(om0))
    step = max(1.0, abs(om0))
    n = 0
    nres = 0
    while True:
        r = _residual(lo, phi, wm, x, wx, xmax, buf)
        nres += 1
        if buf[2] == 0.0:
            return 1
        if not (r > 0.0):
            break
        lo -= step
        step *= 2.0
        n += 1
        if n > 200:
            return 2
    a_hi = min(om0 + 1e-3 * max(1.0, abs(om0)), hi)
    while True:
        r = _residual(a_hi, phi, wm, x, wx, xmax, buf)
        nres += 1
        if buf[2] == 0.0:
            return 1
        if not (r < 0.0 and a_hi < hi):
            break
        a_hi = hi if a_hi + (hi - a_hi) / 2.0 >= hi else a_hi + (hi - a_hi) / 2.0
        if hi - a_hi < 1e-15 * max(1.0, abs(hi)):
            a_hi = hi
    r = _residual(a_hi, phi, wm, x, wx, xmax, buf)
    if buf[2] == 0.0:
        return 1
    if r < 0.0:
        return 2
    st = _brentq(lo, a_hi, phi, wm, x, wx, xmax, buf, res)
    if st != 0:
        return st
    om = res[0]
    # the traces at the root
    G = _gy(om, phi, wm)
    wX = 1.0 / G - om
    if not _gx(wX, x, wx, xmax, buf):
        return 1
    gx1 = buf[1]
    gy_w = 0.0
    gy_e = 0.0
    for m in range(phi.size):
        inv = 1.0 / (om - phi[m])
        inv2 = inv * inv
        gy_w -= wm[m] * inv2
        gy_e += wm[m] * g[m] * inv2
    # [[gy_w, -1], [-gx1, -gx1/G^2 - 1]] (dom, dG) = (-gy_e, 0), by Cramer's rule
    a11 = gy_w
    a12 = -1.0
    a21 = -gx1
    a22 = -gx1 / (G * G) - 1.0
    det = a11 * a22 - a12 * a21
    if det == 0.0 or not math.isfinite(det):
        return 4
    dom = (-gy_e * a22) / det
    t0 = 0.0
    q01 = 0.0
    q00 = 0.0
    for m in range(phi.size):
        pinv = 1.0 / (phi[m] - om)
        wg = wm[m] * g[m] * pinv
        t0 += wg
        q01 += wg * mu[m]
        q00 += wg * (g[m] - dom) * pinv
    out[0] = om
    out[1] = t0
    out[2] = q00
    out[3] = q01
    out[4] = nres
    out[5] = 0.0
    if not (math.isfinite(t0) and math.isfinite(q00) and math.isfinite(q01)):
        return 5
    return 0


def _vec(a, name: str, n: int | None = None) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {a.shape}")
    if n is not None and a.size != n:
        raise ValueError(f"{name} must have {n} entries (as phi or x), got {a.size}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def subordination_solve(phi, g, mu, wm, x, wx, omega0: float):
    """``(omega, t_S, q_SS, q_ST)`` of the free subordination at ``z = 0`` (module
    docstring), with the arrays checked first (1-d, finite, matching lengths: ``g, mu, wm``
    as ``phi``; ``wx`` as ``x``). A failure raises FloatingPointError (the point left
    the domain of ``G_X``, no bracket, no convergence, non-finite values) or
    numpy.linalg.LinAlgError (a singular derivative system), as the Python version did."""
    phi = _vec(phi, "phi")
    n = phi.size
    g, mu, wm = _vec(g, "g", n), _vec(mu, "mu", n), _vec(wm, "wm", n)
    x = _vec(x, "x")
    wx = _vec(wx, "wx", x.size)
    omega0 = float(omega0)
    out = np.zeros(6)
    st = subordination_kernel(phi, g, mu, wm, x, wx, omega0, out)
    if st == 4:
        raise np.linalg.LinAlgError(SUBORDINATION_STATUS[4])
    if st != 0:
        raise FloatingPointError(SUBORDINATION_STATUS[st])
    return float(out[0]), float(out[1]), float(out[2]), float(out[3])
