"""The free limit solver's subordination solve as it was before it was compiled (scipy's
brentq on the residual, numpy dot products): the reference of the compiled root, shared by
tests/kernels/test_subordination.py and the benchmark (benchmarks/bench_limit.py)."""

from __future__ import annotations

import numpy as np


def python_subordination(phi, g, mu, wm, x, wx, omega0):
    """The Python version of the free solver's ``solve`` (brentq on the residual):
    ``(omega, <g/(phi-omega)>, ..., <mu g/(phi-omega)>)`` as the compiled kernel returns."""
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
