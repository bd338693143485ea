"""Reference kernels for the benchmarks' rooflines and alternatives (never used by the package).

``gather_floor``: one load of each term's source index and one gathered load of ``y`` per
term, summed in four independent chains, no table and no multiply: what any CSR-like loop
over these terms costs at least on one core (the latency-bound floor, below the RHS).

``rhs_fused_stage``: the RHS pass of one Runge-Kutta stage with the next stage's
combination ``y + h sum_j a_j K_j`` fused into it, row by row (the alternative to the
integrator's separate vectorised pass; the same bits, measured against it).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
from numba import njit

# the Python subordination solve (the reference the compiled root replaced) lives with the tests
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from subordination_reference import python_subordination  # noqa: E402,F401


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
