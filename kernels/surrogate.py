"""Compiled evaluation of a Chebyshev surrogate of ``Gamma(q)`` (tied potentials).

The surrogate (built by ``attndyn.numeric.attention.potentials.surrogate``) lives in the
coordinates of overlap space that keep a box inside the PSD cone:

    c = (v_0, ..., v_{K-1}, r_01, r_02, ..., r_{K-2,K-1}),
    v_k = q_kk,   r_kl = q_kl / sqrt(q_kk q_ll)   (k < l),

``D = K(K+1)/2`` numbers. On the box ``lo <= c <= hi`` every unique entry
``Gamma_kl`` (``k <= l``, same order as ``c``) is a sparse sum of tensor
Chebyshev polynomials

    Gamma_o(q) = sum_t coef[t, o] prod_d T_{j_{t,d}}(s_d),
    s_d = (2 c_d - lo_d - hi_d) / (hi_d - lo_d) in [-1, 1].

:func:`surrogate_grad` has the signature ``GRAD_SIG`` of ``attndyn.kernels.rhs``,
so every kernel that takes a compiled ``Gamma`` takes it unchanged. It never
extrapolates: at a ``q`` outside the box (or with a non-positive variance, or
non-finite) it writes NaN into ``out``, adds one to the exit counter ``p[5]``
and, on the first exit, records the (symmetrised) ``q`` in ``p``. The
integrators treat the NaN as a failed step and stop; the driver reads the
counter and the record (``attndyn.numeric.attention.potentials.surrogate``).

Parameter vector ``p`` (float64)::

    header (16): version, K, D, n_runs, nmax, exits, off_exit, off_lo, off_hi,
                 off_runs, off_coef, n_out, slack, run_dim, n_coef_rows, off_nd
    exit record (K*K)   the first q seen outside the box
    lo (D), hi (D)      the box
    runs (n_runs, D+2)  per run: d * nmax + j for every coordinate d (j: the degree;
                        for run_dim the first degree of the run), its length, and
                        its offset in coef; stored as int64 bit patterns
                        (``p.view(np.int64)`` reads them)
    coef (rows, D)      Chebyshev coefficients of the D unique Gamma entries, one
                        row per degree of each run
    nd (D)              1 + the highest degree used in each coordinate
    scratch (D*nmax + 2D)  Chebyshev tables, coordinates and sums of one call

The parameter vector is written by evaluation (the exit counter): give each
thread its own copy.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .rhs import GRAD_SIG

__all__ = ["SURROGATE_HEADER", "surrogate_grad", "surrogate_batch", "pack_surrogate"]

SURROGATE_HEADER = 16
VERSION = 2.0  # 2: int64 run table, scratch at the end


def pack_surrogate(K, lo, hi, idx, coef, nmax, slack=1e-12):
    """Pack a surrogate into its float64 parameter vector (see the module doc).

    ``idx`` (n_terms, D) holds the Chebyshev degrees ``j_{t,d}`` of the terms
    kept, ``coef`` (n_terms, D) their coefficients. The terms are grouped in
    runs along the coordinate of highest degree (``run_dim``): for each
    combination of the other degrees, one contiguous range of degrees in
    ``run_dim`` (the coefficients of the gaps are zero), so the inner loop of
    the evaluation is dense.
    """
    K = int(K)
    D = K * (K + 1) // 2
    lo = np.asarray(lo, dtype=np.float64).ravel()
    hi = np.asarray(hi, dtype=np.float64).ravel()
    idx = np.asarray(idx, dtype=np.int64).reshape(-1, D)
    coef = np.asarray(coef, dtype=np.float64).reshape(-1, D)
    if lo.size != D or hi.size != D or not np.all(hi > lo):
        raise ValueError(f"box bounds must have {D} entries with hi > lo")
    if idx.shape[0] != coef.shape[0]:
        raise ValueError("idx and coef must have the same number of terms")
    if idx.size and (idx.min() < 0 or idx.max() >= nmax):
        raise ValueError(f"Chebyshev degrees must be in 0..{nmax - 1}")
    run_dim = int(np.argmax(idx.max(axis=0))) if idx.size else 0
    others = [d for d in range(D) if d != run_dim]
    groups: dict = {}
    for t in range(idx.shape[0]):
        groups.setdefault(tuple(idx[t, others]), {})[int(idx[t, run_dim])] = coef[t]
    runs = []
    cvals = []
    off = 0
    for pre in sorted(groups):
        g = groups[pre]
        k0, k1 = min(g), max(g)
        head = [0.0] * (D + 2)
        for d, j in zip(others, pre):
            head[d] = d * nmax + j
        head[run_dim] = run_dim * nmax + k0
        head[D] = k1 - k0 + 1
        head[D + 1] = off
        runs.append(head)
        for k in range(k0, k1 + 1):
            cvals.append(g.get(k, np.zeros(D)))
        off += (k1 - k0 + 1) * D
    # the run table holds int64 bit patterns (read through an int64 view: no float -> int
    # conversions in the loop); they are moved, never computed with
    runs = np.asarray(runs, dtype=np.int64).reshape(-1, D + 2).view(np.float64)
    cvals = np.asarray(cvals, dtype=np.float64).reshape(-1, D)
    h = np.zeros(SURROGATE_HEADER)
    off_exit = SURROGATE_HEADER
    off_lo = off_exit + K * K
    off_hi = off_lo + D
    off_idx = off_hi + D
    off_coef = off_idx + runs.size
    off_nd = off_coef + cvals.size
    nd = (idx.max(axis=0) + 1 if idx.size else np.ones(D)).astype(np.float64)
    h[:16] = [VERSION, K, D, runs.shape[0], nmax, 0.0, off_exit, off_lo, off_hi, off_idx,
              off_coef, D, slack, run_dim, cvals.shape[0], off_nd]
    return np.ascontiguousarray(np.concatenate([
        h, np.zeros(K * K), lo, hi, runs.ravel(), cvals.ravel(), nd, np.zeros(D * nmax + 2 * D)]))


# One long function on purpose: a first-class gradient (GRAD_SIG) that reads its header and
# scratch from p once (no allocation per call) and evaluates the tensor Chebyshev sum in one
# pass; helpers would take the header's scalars and offsets as arguments.
@njit(GRAD_SIG, cache=True)
def surrogate_grad(x, p, out):
    """``Gamma(q)`` from the Chebyshev surrogate in ``p``: ``x = q.ravel()`` (K*K),
    ``out = Gamma.ravel()`` (K*K). Outside the certified box: NaN, and the exit
    counter ``p[5]`` goes up (see the module doc). Wrong sizes: NaN."""
    K = int(p[1])
    D = int(p[2])
    nr = int(p[3])
    nmax = int(p[4])
    off_exit = int(p[6])
    off_lo = int(p[7])
    off_hi = int(p[8])
    off_run = int(p[9])
    off_coef = int(p[10])
    slack = p[12]
    run_dim = int(p[13])
    off_nd = int(p[15])
    if p[0] != VERSION or x.size != K * K or out.size != K * K:
        for k in range(out.size):
            out[k] = np.nan
        return
    off_s = off_nd + D
    if p.size < off_s + D * nmax + 2 * D:
        for k in range(out.size):
            out[k] = np.nan
        return
    # scratch at the end of p (no allocation per call): Chebyshev tables, coordinates, sums
    T = p[off_s:off_s + D * nmax + 2 * D]
    c = T[D * nmax:D * nmax + D]
    acc = T[D * nmax + D:]
    inside = True
    for k in range(K):
        v = x[k * K + k]
        c[k] = v
        if not (v > 0.0):
            inside = False
    d = K
    if inside:
        for k in range(K):
            for l in range(k + 1, K):
                s = 0.5 * (x[k * K + l] + x[l * K + k])
                c[d] = s / np.sqrt(c[k] * c[l])
                d += 1
    if inside:
        for d in range(D):
            lo = p[off_lo + d]
            hi = p[off_hi + d]
            w = hi - lo
            cd = c[d]
            # the slack absorbs rounding at the faces only
            if not (cd >= lo - slack * w and cd <= hi + slack * w):
                inside = False
                break
            s = (2.0 * cd - lo - hi) / w
            if s > 1.0:
                s = 1.0
            elif s < -1.0:
                s = -1.0
            base = d * nmax
            nd = int(p[off_nd + d])  # the degrees this coordinate needs, not nmax
            T[base] = 1.0
            if nd > 1:
                T[base + 1] = s
                s2 = 2.0 * s
                # the recurrence in registers (a store/reload per step would lengthen the chain)
                t1 = 1.0
                t0 = s
                for j in range(2, nd):
                    tn = s2 * t0 - t1
                    T[base + j] = tn
                    t1 = t0
                    t0 = tn
    if not inside:
        if p[5] == 0.0:
            for k in range(K):
                for l in range(K):
                    p[off_exit + k * K + l] = 0.5 * (x[k * K + l] + x[l * K + k])
        p[5] += 1.0
        for k in range(K * K):
            out[k] = np.nan
        return
    W = D + 2
    pi = p.view(np.int64)  # the run table's integers
    if D == 3:
        # K = 2, the common case: unrolled, the inner loop dense
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        for r in range(nr):
            b = off_run + W * r
            pre = 1.0
            for d in range(3):
                if d != run_dim:
                    pre *= T[pi[b + d]]
            k0 = pi[b + run_dim]
            ln = pi[b + 3]
            cb = off_coef + pi[b + 4]
            # two interleaved partial sums per entry: the additions of one chain wait
            # for the previous one (no reassociation without fastmath)
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            u0 = 0.0
            u1 = 0.0
            u2 = 0.0
            half = ln // 2
            for h in range(half):
                k = 2 * h
                tk = T[k0 + k]
                tl = T[k0 + k + 1]
                j = cb + 3 * k
                s0 += p[j] * tk
                s1 += p[j + 1] * tk
                s2 += p[j + 2] * tk
                u0 += p[j + 3] * tl
                u1 += p[j + 4] * tl
                u2 += p[j + 5] * tl
            if ln % 2 == 1:
                k = ln - 1
                tk = T[k0 + k]
                j = cb + 3 * k
                s0 += p[j] * tk
                s1 += p[j + 1] * tk
                s2 += p[j + 2] * tk
            a0 += pre * (s0 + u0)
            a1 += pre * (s1 + u1)
            a2 += pre * (s2 + u2)
        acc[0] = a0
        acc[1] = a1
        acc[2] = a2
    else:
        for o in range(D):
            acc[o] = 0.0
        for r in range(nr):
            b = off_run + W * r
            pre = 1.0
            for d in range(D):
                if d != run_dim:
                    pre *= T[pi[b + d]]
            k0 = pi[b + run_dim]
            ln = pi[b + D]
            cb = off_coef + pi[b + D + 1]
            for k in range(ln):
                tk = pre * T[k0 + k]
                for o in range(D):
                    acc[o] += p[cb + D * k + o] * tk
    for k in range(K):
        out[k * K + k] = acc[k]
    d = K
    for k in range(K):
        for l in range(k + 1, K):
            out[k * K + l] = acc[d]
            out[l * K + k] = acc[d]
            d += 1


@njit(cache=True)
def surrogate_batch(X, p, OUT):
    """Evaluate :func:`surrogate_grad` at every row of ``X`` (n, K*K) into ``OUT``."""
    for i in range(X.shape[0]):
        surrogate_grad(X[i], p, OUT[i])
