"""Reference kernels for the benchmarks' rooflines and alternatives (never used by the package).

``gather_floor``: one load of each term's source index and one gathered load of ``y`` per
term, summed in four independent chains, no table and no multiply: what any CSR-like loop
over these terms costs at least on one core (the latency-bound floor, below the RHS).

``rhs_fused_stage``: the RHS pass of one Runge-Kutta stage with the next stage's
combination ``y + h sum_j a_j K_j`` fused into it, row by row (the alternative to the
integrator's separate vectorised pass; the same bits, measured against it).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def gather_floor(src, y):
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    n = src.size // 4 * 4
    for t in range(0, n, 4):
        a0 += y[src[t]]
        a1 += y[src[t + 1]]
        a2 += y[src[t + 2]]
        a3 += y[src[t + 3]]
    for t in range(n, src.size):
        a0 += y[src[t]]
    return (a0 + a1) + (a2 + a3)


@njit(cache=True)
def rhs_fused_stage(rows, groups, src, slot, tab, y, yt, Kst, st, anext, hs, ynext):
    """``Kst[st] = F(yt)`` (grouped layout, as ``kernels.rhs.apply_groups``) and, at each
    row ``i`` as it is written, ``ynext[i] = y[i] + hs * sum_{j <= st} anext[j] Kst[j, i]``
    (the sum from 0.0 in order of ``j``: the integrator's bits)."""
    one = np.uint64(1)
    dy = Kst[st]
    for g in range(groups.shape[0]):
        L = groups[g, 0]
        t = groups[g, 2]
        rp = groups[g, 3]
        for _ in range(groups[g, 1]):
            e = t + L
            acc = 0.0
            while t < e:
                acc += tab[slot[t]] * yt[src[t]]
                t += one
            i = rows[rp]
            dy[i] = acc
            c = 0.0
            for j in range(st + 1):
                c += anext[j] * Kst[j, i]
            ynext[i] = y[i] + hs * c
            rp += one


def python_subordination(phi, g, mu, wm, x, wx, omega0):
    """The free solver's subordination solve before it was compiled (scipy's brentq on the
    residual, numpy dot products): the reference of ``bench_limit.table_subordination``."""
    from scipy.optimize import brentq
    xmax = float(x.max())

    def GX(w):
        if w * xmax >= 1.0:
            raise FloatingPointError("the subordination point left the domain of G_X")
        den = w * x - 1.0
        return float(wx @ (x / den)), float(-(wx @ (x * x / (den * den))))

    pmin = float(phi.min())

    def parts(om):
        inv = 1.0 / (om - phi)
        return float(wm @ inv), inv

    def r(om):
        G, _ = parts(om)
        return GX(1.0 / G - om)[0] - G

    hi = pmin - 1e-14 * max(1.0, abs(pmin))
    om0 = min(omega0, hi - 1e-12)
    lo = om0 - 1e-3 * max(1.0, abs(om0))
    step = max(1.0, abs(om0))
    while r(lo) > 0:
        lo -= step
        step *= 2
    a_hi = min(om0 + 1e-3 * max(1.0, abs(om0)), hi)
    while r(a_hi) < 0 and a_hi < hi:
        a_hi = hi if a_hi + (hi - a_hi) / 2 >= hi else a_hi + (hi - a_hi) / 2
        if hi - a_hi < 1e-15 * max(1.0, abs(hi)):
            a_hi = hi
    om = brentq(r, lo, a_hi, xtol=1e-15, rtol=1e-15, maxiter=200)
    G, inv = parts(om)
    gx1 = GX(1.0 / G - om)[1]
    inv2 = inv * inv
    A = np.array([[-float(wm @ inv2), -1.0], [-gx1, -gx1 / (G * G) - 1.0]])
    dom, _ = np.linalg.solve(A, np.array([-float(wm @ (g * inv2)), 0.0]))
    pinv = -inv
    return (om, float(wm @ (g * pinv)), float(wm @ (g * (g - dom) * pinv * pinv)),
            float(wm @ (mu * g * pinv)))
