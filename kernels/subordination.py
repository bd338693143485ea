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

:func:`subordination_kernel` does all of it in one compiled call: plain Newton from the
previous root (accepted when its steps contract to the tolerance below ``min(phi)``: two or
three residuals, the usual case inside an ODE solve); otherwise the bracket search of the
Python version (expanding steps from the previous root), then Newton's method from the
previous root with the analytic ``r'(omega)`` (the same divisions as ``r`` itself), kept
inside the shrinking bracket with bisection as the fallback (``rtsafe``; stopping at
``1e-15 (1 + |omega|)`` as the Python version's ``brentq(xtol=rtol=1e-15)``, at most 200
steps), then the traces. The sums run as four independent partial sums. It returns a status
instead of raising; :func:`subordination_solve` checks the arrays, calls it and turns a
status into the error the Python version raised.

Internally ``phi = c / e`` and ``h = g e`` for positive weights ``e``: with ``e = 1`` that is
``phi`` itself (:func:`subordination_kernel`); with ``e = exp(-psi)``, ``c = -expm1(-psi)``,
``h = exp(log g - psi)`` it is ``phi = expm1(psi)`` given by its logarithm
(:func:`subordination_kernel_log`), which the free solver's state carries because ``phi``
grows like ``exp(2 |B| mu)`` and leaves double precision on long horizons; a node whose
``e`` underflows drops out of ``G_Y`` (its limit) while ``g / (phi - omega) = h / (c -
omega e)`` stays finite.

Status codes (``SUBORDINATION_STATUS``): 0 success; 1 the point ``1/G_Y - omega`` left the
domain of ``G_X`` (``w x_max >= 1``); 2 no bracket for the root; 3 the root did not
converge in 200 steps; 4 the 2 x 2 system is singular; 5 a non-finite value.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["subordination_kernel", "subordination_kernel_log", "subordination_solve",
           "subordination_solve_log", "SUBORDINATION_STATUS"]

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
def _gy(om, e, c, wm, out):
    """``out = (G_Y(omega), G_Y'(omega))``, ``G_Y = sum wm / (omega - phi)`` with
    ``phi = c / e`` (``1 / (omega - phi) = -e / (c - omega e)``); four partial sums
    (independent chains, so the divisions overlap)."""
    n = e.size
    a0 = a1 = a2 = a3 = 0.0
    d0 = d1 = d2 = d3 = 0.0
    m = 0
    while m + 4 <= n:
        i0 = -e[m] / (c[m] - om * e[m])
        i1 = -e[m + 1] / (c[m + 1] - om * e[m + 1])
        i2 = -e[m + 2] / (c[m + 2] - om * e[m + 2])
        i3 = -e[m + 3] / (c[m + 3] - om * e[m + 3])
        v0 = wm[m] * i0
        v1 = wm[m + 1] * i1
        v2 = wm[m + 2] * i2
        v3 = wm[m + 3] * i3
        a0 += v0
        a1 += v1
        a2 += v2
        a3 += v3
        d0 += v0 * i0
        d1 += v1 * i1
        d2 += v2 * i2
        d3 += v3 * i3
        m += 4
    while m < n:
        i0 = -e[m] / (c[m] - om * e[m])
        v0 = wm[m] * i0
        a0 += v0
        d0 += v0 * i0
        m += 1
    out[0] = (a0 + a1) + (a2 + a3)
    out[1] = -((d0 + d1) + (d2 + d3))


@njit(cache=True)
def _gx(w, x, wx, xmax, out):
    """``out = (G_X(w), G_X'(w))``; returns False when ``w x_max >= 1`` (outside the
    domain: the bottom ``1/x_max`` of the spectrum of ``X_0``)."""
    if not (w * xmax < 1.0):
        return False
    n = x.size
    a0 = a1 = a2 = a3 = 0.0
    d0 = d1 = d2 = d3 = 0.0
    j = 0
    while j + 4 <= n:
        r0 = x[j] / (w * x[j] - 1.0)
        r1 = x[j + 1] / (w * x[j + 1] - 1.0)
        r2 = x[j + 2] / (w * x[j + 2] - 1.0)
        r3 = x[j + 3] / (w * x[j + 3] - 1.0)
        a0 += wx[j] * r0
        a1 += wx[j + 1] * r1
        a2 += wx[j + 2] * r2
        a3 += wx[j + 3] * r3
        d0 += wx[j] * r0 * r0
        d1 += wx[j + 1] * r1 * r1
        d2 += wx[j + 2] * r2 * r2
        d3 += wx[j + 3] * r3 * r3
        j += 4
    while j < n:
        r0 = x[j] / (w * x[j] - 1.0)
        a0 += wx[j] * r0
        d0 += wx[j] * r0 * r0
        j += 1
    out[0] = (a0 + a1) + (a2 + a3)
    out[1] = -((d0 + d1) + (d2 + d3))
    return True


@njit(cache=True)
def _residual(om, e, c, wm, x, wx, xmax, buf):
    """``r(omega) = G_X(1/G_Y(omega) - omega) - G_Y(omega)``; ``buf[2] = 1.0`` on success,
    0.0 when the point left the domain of ``G_X``; ``buf[3] = r'(omega)``,
    ``buf[4] = G_Y(omega)``."""
    _gy(om, e, c, wm, buf[5:7])
    G = buf[5]
    dG = buf[6]
    ok = _gx(1.0 / G - om, x, wx, xmax, buf)
    buf[2] = 1.0 if ok else 0.0
    # r' = G_X'(w) dw/domega - G_Y', w = 1/G_Y - omega
    buf[3] = buf[1] * (-dG / (G * G) - 1.0) - dG
    buf[4] = G
    return buf[0] - G


@njit(cache=True)
def _rtsafe(lo, hi, x0, e, c, wm, x, wx, xmax, buf, res):
    """The root of :func:`_residual` in ``[lo, hi]`` (``r(lo) <= 0 <= r(hi)``): Newton's
    method from ``x0`` (the previous root: two or three steps), kept inside the bracket,
    which shrinks with every evaluation, and bisection whenever a Newton step would leave
    it or not halve the step before (Numerical Recipes' ``rtsafe``). Stops when the step
    is below ``xtol + rtol |omega|`` (1e-15 each, as the brentq of the Python version).
    ``res[0]`` gets the root, ``res[1]`` the evaluations; returns a status (0, 1 domain,
    3 no convergence in 200 steps)."""
    xc = x0 if lo < x0 < hi else 0.5 * (lo + hi)
    dxold = hi - lo
    dx = dxold
    f = _residual(xc, e, c, wm, x, wx, xmax, buf)
    nev = 1
    if buf[2] == 0.0:
        return 1
    df = buf[3]
    for _ in range(_MAXITER):
        if f == 0.0:
            res[0] = xc
            res[1] = nev
            return 0
        if f < 0.0:
            lo = xc
        else:
            hi = xc
        newton = df != 0.0 and math.isfinite(df)
        if newton:
            xn = xc - f / df
            newton = lo < xn < hi and abs(2.0 * f) < abs(dxold * df)
        dxold = dx
        if newton:
            dx = f / df
            xn = xc - dx
        else:
            dx = 0.5 * (hi - lo)
            xn = lo + dx
        if abs(dx) <= _XTOL + _RTOL * abs(xn) or xn == xc:
            res[0] = xn
            res[1] = nev
            return 0
        xc = xn
        f = _residual(xc, e, c, wm, x, wx, xmax, buf)
        nev += 1
        if buf[2] == 0.0:
            return 1
        df = buf[3]
    res[0] = xc
    res[1] = nev
    return 3


@njit(cache=True)
def _traces(om, e, c, h, mu, wm, x, wx, xmax, buf, nres, out):
    """The traces at the root ``om`` into ``out``, with ``phi = c / e`` and ``h = g e``:
    ``1 / (phi - omega) = e / D`` and ``g / (phi - omega) = h / D``, ``D = c - omega e``
    (one pass of divisions, kept in ``dinv = 1 / D``); returns a status."""
    n = e.size
    dinv = np.empty(n)
    G = 0.0
    gy_w = 0.0
    gy_e = 0.0
    for m in range(n):
        di = 1.0 / (c[m] - om * e[m])
        dinv[m] = di
        iv = -e[m] * di          # 1 / (omega - phi)
        wi = wm[m] * iv
        G += wi
        gy_w -= wi * iv
        gy_e += wm[m] * h[m] * di * e[m] * di   # wm g / (phi - omega)^2
    wX = 1.0 / G - om
    if not _gx(wX, x, wx, xmax, buf):
        return 1
    gx1 = buf[1]
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
    for m in range(n):
        wg = wm[m] * h[m] * dinv[m]      # wm g / (phi - omega)
        t0 += wg
        q01 += wg * mu[m]
        q00 += wg * (h[m] - dom * e[m]) * dinv[m]
    out[0] = om
    out[1] = t0
    out[2] = q00
    out[3] = q01
    out[4] = nres
    out[5] = 0.0
    if not (math.isfinite(t0) and math.isfinite(q00) and math.isfinite(q01)):
        return 5
    return 0


@njit(cache=True)
def subordination_kernel(phi, g, mu, wm, x, wx, omega0, out):
    """The root and the traces (module docstring) in one call.

    ``omega0``: the previous root (the bracket search starts there). ``out`` (6 entries)
    gets ``(omega, t_S, q_SS, q_ST, residual evaluations, 0)``. Returns a status
    (``SUBORDINATION_STATUS``)."""
    return _kernel(np.ones(phi.size), phi, g, mu, wm, x, wx, omega0, out)


@njit(cache=True)
def subordination_kernel_log(psi, logg, mu, wm, x, wx, omega0, out):
    """:func:`subordination_kernel` with ``phi = expm1(psi)`` and ``g = exp(logg)`` given by
    their logarithms: ``e = exp(-psi)``, ``c = -expm1(-psi)``, ``h = exp(logg - psi)``, so
    neither ``phi`` nor ``g`` is ever formed. Where ``psi`` passes 700 (``phi`` beyond
    double precision) ``e`` underflows to 0 and that node's ``1 / (omega - phi)`` to 0,
    its limit, while ``g / (phi - omega) = h / (c - omega e)`` stays finite."""
    n = psi.size
    e = np.empty(n)
    c = np.empty(n)
    h = np.empty(n)
    for m in range(n):
        e[m] = math.exp(-psi[m])
        c[m] = -math.expm1(-psi[m])
        h[m] = math.exp(logg[m] - psi[m])
    return _kernel(e, c, h, mu, wm, x, wx, omega0, out)


@njit(cache=True)
def _kernel(e, c, h, mu, wm, x, wx, omega0, out):
    """The kernel on ``phi = c / e`` (``e >= 0``) and ``h = g e``."""
    buf = np.zeros(7)
    res = np.zeros(2)
    xmax = -np.inf
    fin = 0.0  # stays finite only if every entry is finite (0 * inf and nan spread)
    for j in range(x.size):
        xmax = max(xmax, x[j])
        fin += 0.0 * x[j] + 0.0 * wx[j]
    pmin = np.inf
    for m in range(e.size):
        if e[m] > 0.0:
            pmin = min(pmin, c[m] / e[m])
        elif not (e[m] == 0.0):
            fin = np.nan
        fin += 0.0 * c[m] + 0.0 * h[m] + 0.0 * mu[m] + 0.0 * wm[m]
    if not (math.isfinite(fin) and math.isfinite(pmin) and math.isfinite(xmax)
            and math.isfinite(omega0)):
        return 5
    hi = pmin - 1e-14 * max(1.0, abs(pmin))
    nres = 0
    # fast path: plain Newton from the previous root (it moves little between evaluations),
    # accepted only if every iterate stays below min(phi) and the steps contract to the
    # tolerance within 6 steps; else the bracketed search below (what the Python version did)
    xc = omega0
    if xc < hi:
        dxp = np.inf
        for _ in range(6):
            f = _residual(xc, e, c, wm, x, wx, xmax, buf)
            nres += 1
            if buf[2] == 0.0 or not (buf[3] != 0.0 and math.isfinite(buf[3])):
                break
            dx = f / buf[3]
            xn = xc - dx
            if not (xn < hi) or not (abs(dx) < 0.5 * dxp) or not math.isfinite(xn):
                break
            if abs(dx) <= _XTOL + _RTOL * abs(xn):
                return _traces(xn, e, c, h, mu, wm, x, wx, xmax, buf, nres, out)
            dxp = abs(dx)
            xc = xn
    om0 = min(omega0, hi - 1e-12)
    lo = om0 - 1e-3 * max(1.0, abs(om0))
    step = max(1.0, abs(om0))
    n = 0
    while True:
        r = _residual(lo, e, c, wm, x, wx, xmax, buf)
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
        r = _residual(a_hi, e, c, wm, x, wx, xmax, buf)
        nres += 1
        if buf[2] == 0.0:
            return 1
        if not (r < 0.0 and a_hi < hi):
            break
        a_hi = hi if a_hi + (hi - a_hi) / 2.0 >= hi else a_hi + (hi - a_hi) / 2.0
        if hi - a_hi < 1e-15 * max(1.0, abs(hi)):
            a_hi = hi
    if r < 0.0:
        return 2
    st = _rtsafe(lo, a_hi, omega0, e, c, wm, x, wx, xmax, buf, res)
    nres += int(res[1])
    if st != 0:
        return st
    om = res[0]
    return _traces(om, e, c, h, mu, wm, x, wx, xmax, buf, nres, out)


def _vec(a, name: str, n: int | None = None) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {a.shape}")
    if n is not None and a.size != n:
        raise ValueError(f"{name} must have {n} entries (as phi or x), got {a.size}")
    return a  # finiteness: checked by the kernel (status 5), one pass for all arrays


def subordination_solve(phi, g, mu, wm, x, wx, omega0: float):
    """``(omega, t_S, q_SS, q_ST)`` of the free subordination at ``z = 0`` (module
    docstring), with the arrays checked first (1-d, matching lengths: ``g, mu, wm`` as
    ``phi``; ``wx`` as ``x``; finite, in the kernel). A failure raises FloatingPointError
    (the point left the domain of ``G_X``, no bracket, no convergence, non-finite values)
    or numpy.linalg.LinAlgError (a singular derivative system), as the Python version
    did."""
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


def subordination_solve_log(psi, logg, mu, wm, x, wx, omega0: float):
    """:func:`subordination_solve` with ``phi = expm1(psi)`` and ``g = exp(logg)`` given by
    their logarithms (:func:`subordination_kernel_log`): for the free solver's state, whose
    ``phi`` grows like ``exp(2 |B| mu)`` and leaves double precision on long horizons."""
    psi = _vec(psi, "psi")
    n = psi.size
    logg, mu, wm = _vec(logg, "logg", n), _vec(mu, "mu", n), _vec(wm, "wm", n)
    x = _vec(x, "x")
    wx = _vec(wx, "wx", x.size)
    out = np.zeros(6)
    st = subordination_kernel_log(psi, logg, mu, wm, x, wx, float(omega0), out)
    if st == 4:
        raise np.linalg.LinAlgError(SUBORDINATION_STATUS[4])
    if st != 0:
        raise FloatingPointError(SUBORDINATION_STATUS[st])
    return float(out[0]), float(out[1]), float(out[2]), float(out[3])
