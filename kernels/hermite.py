"""Compiled Mehler (Hermite) series of ``Gamma(q)`` for MSE teacher-student losses.

For a tied potential whose loss is ``scale * sum_ij (sigma(G_ij,s) - sigma*(G_ij,t))^2``
(paper 003, eqs. 22, 48), every pair ``(X, Y) = (G_ij,s, G_ij,t)`` is a centred
Gaussian with covariance ``s_ij q`` restricted to ``{s, t}``
(``s_ij = C_ii C_jj + C_ij^2``, eq. 10). By Price's theorem, in the symmetric
convention (``A = scale * s_ij``, summed over ``(i, j)``)::

    Gamma_ss = A (E[sigma'(X)^2 + sigma(X) sigma''(X)] - E[sigma''(X) sigma*(Y)])
    Gamma_tt = A (E[sigma*'(Y)^2 + sigma*(Y) sigma*''(Y)] - E[sigma(X) sigma*''(Y)])
    Gamma_st = Gamma_ts = -A E[sigma'(X) sigma*'(Y)]

and every other entry is 0. The one-variable expectations depend on a variance
only; the pair expectations go by Mehler's formula in the normalised
probabilists' Hermite polynomials ``h_n = He_n / sqrt(n!)``::

    E[u(X) w(Y)] = sum_n rho^n b_n(u; v_x) b_n(w; v_y),
    b_n(u; v) = E[u(sqrt(v) z) h_n(z)],  rho = q_st / sqrt(q_ss q_tt),

truncated after ``M`` with the Cauchy-Schwarz (Parseval) bound on the remainder::

    |sum_{n > M} rho^n b_n c_n| <= |rho|^(M+1) sqrt(T_u(M) T_w(M)),
    T_u(M) = E[u(X)^2] - sum_{n <= M} b_n(u)^2     (>= 0),

where ``T_u`` is bounded from above safely: ``max(T, 0)`` plus an allowance
for rounding and for the quadrature error of ``E[u^2]`` and of the ``b_n``.

The coefficients are computed per variance, in this kernel, by a trapezoidal
rule in ``z`` (nodes ``z_i = i h``, ``i >= 0``; the reflection ``z -> -z``
of each activation is analytic, so one evaluation per node serves both signs,
and even/odd parts give the even/odd coefficients). The trapezoidal rule
converges like ``exp(-2 pi d / h)`` for integrands analytic in the strip
``|Im z| < d`` (tanh: ``d = pi / (2 sqrt v)``), far faster than Gauss-Hermite
there. The step and the node counts are chosen and verified when the
parameter vector is built (``attndyn.numeric.attention.potentials.hermite``), which
also records the verified quadrature errors ``eps_q`` (coefficients, relative
to ``sqrt(E u^2)``) and ``eps_E`` (of ``E u^2``) that enter the allowance.

``M`` is chosen per call from the tolerance: coefficients are computed in
blocks of 8 until every entry's stated bound is at most half of
``atol + rtol |Gamma_kl|`` (or ``M_max`` is reached: then the bound is stated
as it is and the over-tolerance counter goes up). A variance above ``q_max``
(beyond the verified range of the rule), a non-positive or non-finite one
writes NaN and counts an exit, like the surrogate kernel; outside the PSD cone
the student-teacher ``2 x 2`` block is projected onto it (eq. 92's extension;
the same as projecting ``q`` for ``K = 2``).

Activation codes: 0 tanh, 1 sigmoid, 2 softplus, 3 GELU (``x Phi(x)``), 4 erf.

Parameter vector ``p`` (float64), written by evaluation (caches, counters, the
last bound): give each thread its own copy::

    header (40): version, K, ks, kt, n_groups, N (largest band), M_max, act_s,
                 act_t, rtol, atol, q_max, exits, off_exit, max_bound, n_over,
                 last_M, off_groups, -, -, -, -, off_side, side_size, eps_q,
                 off_last, M_fixed, -, rnd, eps_E, n_bands, off_bands, off_buf, ...
                 (eps_q: error of a coefficient relative to sqrt(E u^2), quadrature
                 and rounding; eps_E: relative error of E u^2 and of the one-variable
                 expectations; rnd: relative rounding of the sums of squares and series)
    exit record (K*K)       the first q seen outside the range
    last bounds (K*K)       the stated bound of every entry at the last call
    groups (2 n_groups)     (s, A) per distinct variance factor
    bands (n_bands, 8)      per variance band, widest first: v_top, N_b, off_z, off_w2,
                            off_H, off_nlim, n_E, step (a side uses the narrowest band
                            with v_top >= its variance)
    per band: z (N_b), w2 (N_b)   nodes z_i = i step >= 0, weights 2 step phi(z_i)
                            (step phi(0) at 0)
              H (N_b, M_max)  w2_i h_n(z_i): per node the even degrees, then the odd ones
              nlim (M_max/8)  nodes needed by each block of 8 coefficients; n_E for moments
    sides (2 n_groups)      per side: v, n_done, n_eval, E u_j^2 (3), E single, band,
                            pad (16), coefficients (3, M_max), even/odd values (6, N)
    scratch (8)             the activation values of one node
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .rhs import GRAD_SIG

__all__ = ["HERMITE_HEADER", "ACTIVATION_CODES", "hermite_grad", "hermite_batch",
           "hermite_coefficients", "activation_values", "side_size", "BLOCK"]

HERMITE_HEADER = 40
VERSION = 1.0
BLOCK = 8
SIDE_HEAD = 16
BAND = 8
ACTIVATION_CODES = {"tanh": 0, "sigmoid": 1, "softplus": 2, "gelu": 3, "erf": 4}
_SQ2 = math.sqrt(2.0)
_ISQ2PI = 1.0 / math.sqrt(2.0 * math.pi)
_2SQPI = 2.0 / math.sqrt(math.pi)


def side_size(N, Mmax):
    return SIDE_HEAD + 3 * Mmax + 6 * N


@njit(cache=True)
def _act(code, x, out):
    """``out = (f(x), f'(x), f''(x), f(-x), f'(-x), f''(-x))`` for ``x >= 0``, each
    from one evaluation of the transcendental part, without cancellation."""
    if code == 0:
        # one exponential: tanh x = -m / (2 + m), 1 - tanh^2 x = 4 e / (1 + e)^2, m = e - 1, e = e^-2x
        # (no cancellation in either for x >= 0)
        if x > 0.5:
            e = math.exp(-2.0 * x)
            m = e - 1.0
        else:
            m = math.expm1(-2.0 * x)
            e = 1.0 + m
        t = -m / (2.0 + m)
        d = 4.0 * e / ((2.0 + m) * (2.0 + m))
        out[0] = t
        out[1] = d
        out[2] = -2.0 * t * d
        out[3] = -t
        out[4] = d
        out[5] = 2.0 * t * d
    elif code == 1 or code == 2:
        if x > 0.5:
            e = math.exp(-x)
            em = e - 1.0
        else:
            em = math.expm1(-x)      # e - 1 without cancellation near 0
            e = 1.0 + em
        s = 1.0 / (1.0 + e)          # sigmoid(x)
        sm = e / (1.0 + e)           # sigmoid(-x) = 1 - sigmoid(x), no cancellation
        d = e / ((1.0 + e) * (1.0 + e))
        d2 = d * em / (1.0 + e)      # sigmoid''(x) = d (1 - 2 s)
        if code == 1:
            out[0] = s
            out[1] = d
            out[2] = d2
            out[3] = sm
            out[4] = d
            out[5] = -d2
        else:
            lp = math.log1p(e)       # softplus(-x); softplus(x) = x + softplus(-x)
            out[0] = x + lp
            out[1] = s
            out[2] = d
            out[3] = lp
            out[4] = sm
            out[5] = d
    elif code == 3:
        ph = _ISQ2PI * math.exp(-0.5 * x * x)
        Pm = 0.5 * math.erfc(x / _SQ2)    # Phi(-x) <= 1/2
        Pp = 1.0 - Pm                     # Phi(x) >= 1/2: no cancellation
        out[0] = x * Pp
        out[1] = Pp + x * ph
        out[2] = ph * (2.0 - x * x)
        out[3] = -x * Pm
        out[4] = Pm - x * ph
        out[5] = out[2]
    else:
        e = math.erf(x)
        d = _2SQPI * math.exp(-x * x)
        out[0] = e
        out[1] = d
        out[2] = -2.0 * x * d
        out[3] = -e
        out[4] = d
        out[5] = 2.0 * x * d


@njit(cache=True)
def activation_values(code, x):
    """``(f(x), f'(x), f''(x))`` at the points ``x`` (any sign): tests and checks."""
    n = x.size
    out = np.empty((n, 3))
    buf = np.empty(6)
    for i in range(n):
        a = abs(x[i])
        _act(code, a, buf)
        off = 0 if x[i] >= 0 else 3
        for j in range(3):
            out[i, j] = buf[off + j]
    return out


@njit(cache=True)
def _eval_nodes(p, so, code, v, i0, i1, N, off_z, buf):
    """Even/odd parts of (u, u', u'') at the nodes i0..i1-1 of the side at ``so``."""
    Mmax = int(p[6])
    fo = so + SIDE_HEAD + 3 * Mmax
    sv = math.sqrt(v)
    for i in range(i0, i1):
        _act(code, sv * p[off_z + i], buf)
        for j in range(3):
            a = buf[j]
            b = buf[3 + j]
            p[fo + (2 * j) * N + i] = 0.5 * (a + b)
            p[fo + (2 * j + 1) * N + i] = 0.5 * (a - b)


@njit(cache=True)
def _prepare_side(p, so, code, v, buf):
    """(Re)initialise a side for variance ``v``: the rule of the narrowest variance band
    that holds ``v``, node values for the moments, E u_j^2, E[u'^2 + u u'']. Cached:
    nothing is done when ``v`` is the side's variance."""
    if p[so] == v:
        return
    N = int(p[5])
    nb = int(p[30])
    ob = int(p[31])
    bo = ob
    # bands are stored from the widest (largest variance) down
    for b in range(nb):
        if p[ob + BAND * b] >= v:
            bo = ob + BAND * b
    off_z = int(p[bo + 2])
    off_w2 = int(p[bo + 3])
    off_nlim = int(p[bo + 5])
    nE = int(p[bo + 6])
    Mmax = int(p[6])
    n1 = max(nE, int(p[off_nlim]))
    _eval_nodes(p, so, code, v, 0, n1, N, off_z, buf)
    fo = so + SIDE_HEAD + 3 * Mmax
    e0 = 0.0
    e1 = 0.0
    e2 = 0.0
    es = 0.0
    for i in range(nE):
        w = p[off_w2 + i]
        a0 = p[fo + i]
        b0 = p[fo + N + i]
        a1 = p[fo + 2 * N + i]
        b1 = p[fo + 3 * N + i]
        a2 = p[fo + 4 * N + i]
        b2 = p[fo + 5 * N + i]
        e0 += w * (a0 * a0 + b0 * b0)
        e1 += w * (a1 * a1 + b1 * b1)
        e2 += w * (a2 * a2 + b2 * b2)
        es += w * (a1 * a1 + b1 * b1 + a0 * a2 + b0 * b2)
    p[so] = v
    p[so + 1] = 0.0
    p[so + 2] = n1
    p[so + 3] = e0
    p[so + 4] = e1
    p[so + 5] = e2
    p[so + 6] = es
    p[so + 7] = bo


# parity of the coefficients n >= 2 of (u, u', u'') per activation code: 1 odd, 0 even.
# tanh, erf: odd, even, odd; sigmoid = 1/2 + odd; softplus, GELU = x/2 + even, so for
# n >= 2 only one parity survives in each (the other is a polynomial of degree <= 1)
_PARITY = np.array([[1, 0, 1], [1, 0, 1], [0, 1, 0], [0, 1, 0], [1, 0, 1]], dtype=np.int64)


@njit(cache=True)
def _dot4x2(p, hb, fa, fb, ni, Mmax):
    """Coefficients at four degrees of one parity (the H row ``hb + i Mmax`` holds them
    contiguously) of the node values at ``fa`` and at ``fb``: eight independent
    accumulators (no reassociation needed to keep the pipelines busy)."""
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    b0 = 0.0
    b1 = 0.0
    b2 = 0.0
    b3 = 0.0
    for i in range(ni):
        f = p[fa + i]
        g = p[fb + i]
        r = hb + i * Mmax
        h0 = p[r]
        h1 = p[r + 1]
        h2 = p[r + 2]
        h3 = p[r + 3]
        a0 += h0 * f
        a1 += h1 * f
        a2 += h2 * f
        a3 += h3 * f
        b0 += h0 * g
        b1 += h1 * g
        b2 += h2 * g
        b3 += h3 * g
    return a0, a1, a2, a3, b0, b1, b2, b3


@njit(cache=True)
def _dot4(p, hb, fa, ni, Mmax):
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    for i in range(ni):
        f = p[fa + i]
        r = hb + i * Mmax
        a0 += p[r] * f
        a1 += p[r + 1] * f
        a2 += p[r + 2] * f
        a3 += p[r + 3] * f
    return a0, a1, a2, a3


@njit(cache=True)
def _put4(p, c, par, s0, s1, s2, s3):
    p[c + par] = s0
    p[c + par + 2] = s1
    p[c + par + 4] = s2
    p[c + par + 6] = s3


@njit(cache=True)
def _block(p, so, code, nb, buf):
    """Coefficients ``b_n(u_j)``, ``n = 8 nb .. 8 nb + 7``, of the side at ``so``.
    Degrees >= 2 of the parity that vanishes (see ``_PARITY``) are exactly 0; u and
    u'' share their parity, so they share the loads of H."""
    N = int(p[5])
    Mmax = int(p[6])
    bo = int(p[so + 7])
    off_z = int(p[bo + 2])
    off_H = int(p[bo + 4])
    ni = int(p[int(p[bo + 5]) + nb])
    ne = int(p[so + 2])
    if ni > ne:
        _eval_nodes(p, so, code, p[so], ne, ni, N, off_z, buf)
        p[so + 2] = ni
    co = so + SIDE_HEAD
    fo = co + 3 * Mmax
    n0 = nb * BLOCK
    c0 = co + n0
    c1 = co + Mmax + n0
    c2 = co + 2 * Mmax + n0
    half = Mmax // 2
    pu = _PARITY[code, 0]
    for par in range(2):
        hb = off_H + par * half + nb * (BLOCK // 2)
        if nb == 0 or par == pu:
            a0, a1, a2, a3, b0, b1, b2, b3 = _dot4x2(p, hb, fo + par * N, fo + (4 + par) * N,
                                                     ni, Mmax)
            _put4(p, c0, par, a0, a1, a2, a3)
            _put4(p, c2, par, b0, b1, b2, b3)
        else:
            _put4(p, c0, par, 0.0, 0.0, 0.0, 0.0)
            _put4(p, c2, par, 0.0, 0.0, 0.0, 0.0)
        if nb == 0 or par != pu:
            a0, a1, a2, a3 = _dot4(p, hb, fo + (2 + par) * N, ni, Mmax)
            _put4(p, c1, par, a0, a1, a2, a3)
        else:
            _put4(p, c1, par, 0.0, 0.0, 0.0, 0.0)
    p[so + 1] = n0 + BLOCK


# One long function on purpose: a first-class gradient (GRAD_SIG) whose ~20 header scalars
# are used throughout the series loops; its blocks (_block, _prepare_side) are helpers already,
# more helpers would take all of those scalars as arguments.
@njit(GRAD_SIG, cache=True)
def hermite_grad(x, p, out):
    """``Gamma(q)`` by the Mehler series in ``p``: ``x = q.ravel()`` (K*K),
    ``out = Gamma.ravel()``; the stated bound of each entry goes to the last-bound
    record of ``p`` (see the module doc). Wrong sizes, a variance outside
    ``(0, q_max]`` or a non-finite ``q``: NaN (and the exit counter goes up)."""
    K = int(p[1]) if p.size >= HERMITE_HEADER else 0
    if (K == 0 or p[0] != VERSION or x.size != K * K or out.size != K * K
            or p.size < int(p[32]) + 8):
        for k in range(out.size):
            out[k] = np.nan
        return
    ks = int(p[2])
    kt = int(p[3])
    G = int(p[4])
    Mmax = int(p[6])
    cs = int(p[7])
    ct = int(p[8])
    rtol = p[9]
    atol = p[10]
    qmax = p[11]
    off_last = int(p[25])
    Mfix = int(p[26])
    eps_q = p[24]
    eps_E = p[29]
    N = int(p[5])
    a = x[ks * K + ks]
    c = x[kt * K + kt]
    b = 0.5 * (x[ks * K + kt] + x[kt * K + ks])
    ok = np.isfinite(a) and np.isfinite(b) and np.isfinite(c)
    if ok and (a < 0.0 or c < 0.0 or a * c - b * b < 0.0):
        # eq. 92: project the (symmetric) student-teacher block on the PSD cone
        h = 0.5 * (a - c)
        disc = math.sqrt(h * h + b * b)
        lmax = 0.5 * (a + c) + disc
        if lmax <= 0.0:
            ok = False
        else:
            u0 = b
            u1 = lmax - a
            if abs(lmax - c) > abs(u1):
                u0 = lmax - c
                u1 = b
            nrm = math.sqrt(u0 * u0 + u1 * u1)
            if nrm == 0.0:
                ok = False
            else:
                u0 /= nrm
                u1 /= nrm
                a = lmax * u0 * u0
                c = lmax * u1 * u1
                b = lmax * u0 * u1
    if ok and not (a > 0.0 and c > 0.0 and a * c > 0.0 and a <= qmax and c <= qmax):
        ok = False
    if not ok:
        if p[12] == 0.0:
            oe = int(p[13])
            for k in range(K):
                for l in range(K):
                    p[oe + k * K + l] = 0.5 * (x[k * K + l] + x[l * K + k])
        p[12] += 1.0
        for k in range(K * K):
            out[k] = np.nan
        return
    rho = b / math.sqrt(a * c)
    if rho > 1.0:
        rho = 1.0
    elif rho < -1.0:
        rho = -1.0
    ob_ = int(p[32])
    buf = p[ob_:ob_ + 8]  # scratch in p: no allocation per call
    off_g = int(p[17])
    off_side = int(p[22])
    ss = int(p[23])
    g_ss = 0.0
    g_tt = 0.0
    g_st = 0.0
    B_ss = 0.0
    B_tt = 0.0
    B_st = 0.0
    Mlast = 0
    rnd = p[28]  # relative rounding of the sums of squares and of the series
    for g in range(G):
        s = p[off_g + 2 * g]
        A = p[off_g + 2 * g + 1]
        sx = off_side + (2 * g) * ss
        sy = sx + ss
        _prepare_side(p, sx, cs, s * a, buf)
        _prepare_side(p, sy, ct, s * c, buf)
        Ex0 = p[sx + 3]
        Ex1 = p[sx + 4]
        Ex2 = p[sx + 5]
        Esx = p[sx + 6]
        Ey0 = p[sy + 3]
        Ey1 = p[sy + 4]
        Ey2 = p[sy + 5]
        Esy = p[sy + 6]
        cx = sx + SIDE_HEAD
        cy = sy + SIDE_HEAD
        P1 = 0.0
        P2 = 0.0
        P3 = 0.0
        Sx0 = 0.0
        Sx1 = 0.0
        Sx2 = 0.0
        Sy0 = 0.0
        Sy1 = 0.0
        Sy2 = 0.0
        Ax0 = 0.0
        Ax1 = 0.0
        Ax2 = 0.0
        Ay0 = 0.0
        Ay1 = 0.0
        Ay2 = 0.0
        rp = 1.0
        # the one-variable parts: quadrature only (no truncation)
        q_x = eps_E * (Ex1 + math.sqrt(Ex0 * Ex2))
        q_y = eps_E * (Ey1 + math.sqrt(Ey0 * Ey2))
        n = 0
        b1 = 0.0
        b2 = 0.0
        b3 = 0.0
        while n < Mmax:
            if n % BLOCK == 0:
                nb = n // BLOCK
                if int(p[sx + 1]) <= n:
                    _block(p, sx, cs, nb, buf)
                if int(p[sy + 1]) <= n:
                    _block(p, sy, ct, nb, buf)
            bx0 = p[cx + n]
            bx1 = p[cx + Mmax + n]
            bx2 = p[cx + 2 * Mmax + n]
            by0 = p[cy + n]
            by1 = p[cy + Mmax + n]
            by2 = p[cy + 2 * Mmax + n]
            P1 += rp * bx2 * by0
            P2 += rp * bx0 * by2
            P3 += rp * bx1 * by1
            Sx0 += bx0 * bx0
            Sx1 += bx1 * bx1
            Sx2 += bx2 * bx2
            Sy0 += by0 * by0
            Sy1 += by1 * by1
            Sy2 += by2 * by2
            Ax0 += abs(bx0)
            Ax1 += abs(bx1)
            Ax2 += abs(bx2)
            Ay0 += abs(by0)
            Ay1 += abs(by1)
            Ay2 += abs(by2)
            rp *= rho
            n += 1
            if Mfix > 0:
                if n < Mfix:
                    continue
            elif n % BLOCK != 0 and n < Mmax:
                continue
            # the stated bound after n terms (M = n - 1): tails bounded from above
            r1 = abs(rp)
            er = eps_E + rnd
            Tx0 = max(Ex0 - Sx0, 0.0) + er * Ex0 + 2.0 * eps_q * math.sqrt(Ex0) * Ax0
            Tx1 = max(Ex1 - Sx1, 0.0) + er * Ex1 + 2.0 * eps_q * math.sqrt(Ex1) * Ax1
            Tx2 = max(Ex2 - Sx2, 0.0) + er * Ex2 + 2.0 * eps_q * math.sqrt(Ex2) * Ax2
            Ty0 = max(Ey0 - Sy0, 0.0) + er * Ey0 + 2.0 * eps_q * math.sqrt(Ey0) * Ay0
            Ty1 = max(Ey1 - Sy1, 0.0) + er * Ey1 + 2.0 * eps_q * math.sqrt(Ey1) * Ay1
            Ty2 = max(Ey2 - Sy2, 0.0) + er * Ey2 + 2.0 * eps_q * math.sqrt(Ey2) * Ay2
            # truncation, then the coefficients' error (quadrature and rounding) in the
            # partial sums, then the rounding of the series itself
            t1 = r1 * math.sqrt(Tx2 * Ty0)
            t2 = r1 * math.sqrt(Tx0 * Ty2)
            t3 = r1 * math.sqrt(Tx1 * Ty1)
            c1 = eps_q * (math.sqrt(Ex2) * Ay0 + math.sqrt(Ey0) * Ax2) + rnd * math.sqrt(Ex2 * Ey0)
            c2 = eps_q * (math.sqrt(Ex0) * Ay2 + math.sqrt(Ey2) * Ax0) + rnd * math.sqrt(Ex0 * Ey2)
            c3 = eps_q * (math.sqrt(Ex1) * Ay1 + math.sqrt(Ey1) * Ax1) + rnd * math.sqrt(Ex1 * Ey1)
            b1 = t1 + c1
            b2 = t2 + c2
            b3 = t3 + c3
            if Mfix > 0:
                break
            lim = atol / G
            if (b1 + q_x <= 0.5 * (lim + rtol * abs(Esx - P1))
                    and b2 + q_y <= 0.5 * (lim + rtol * abs(Esy - P2))
                    and b3 <= 0.5 * (lim + rtol * abs(P3))):
                break
            # below the floor of the coefficients' error more terms cannot help: the
            # bound is stated as it is (and counted over the tolerance)
            if t1 <= 0.01 * (c1 + q_x) and t2 <= 0.01 * (c2 + q_y) and t3 <= 0.01 * c3:
                break
        if n > Mlast:
            Mlast = n
        g_ss += A * (Esx - P1)
        g_tt += A * (Esy - P2)
        g_st -= A * P3
        B_ss += A * (b1 + q_x)
        B_tt += A * (b2 + q_y)
        B_st += A * b3
    for k in range(K * K):
        out[k] = 0.0
        p[off_last + k] = 0.0
    out[ks * K + ks] = g_ss
    out[kt * K + kt] = g_tt
    out[ks * K + kt] = g_st
    out[kt * K + ks] = g_st
    p[off_last + ks * K + ks] = B_ss
    p[off_last + kt * K + kt] = B_tt
    p[off_last + ks * K + kt] = B_st
    p[off_last + kt * K + ks] = B_st
    bmax = max(B_ss, max(B_tt, B_st))
    if bmax > p[14]:
        p[14] = bmax
    if (B_ss > atol + rtol * abs(g_ss) or B_tt > atol + rtol * abs(g_tt)
            or B_st > atol + rtol * abs(g_st)):
        p[15] += 1.0
    p[16] = Mlast


@njit(cache=True)
def hermite_batch(X, p, OUT, BOUND):
    """:func:`hermite_grad` at every row of ``X`` (n, K*K) into ``OUT``; the stated
    bounds into ``BOUND`` (n, K*K)."""
    K = int(p[1])
    off_last = int(p[25])
    for i in range(X.shape[0]):
        hermite_grad(X[i], p, OUT[i])
        for k in range(K * K):
            BOUND[i, k] = p[off_last + k] if np.isfinite(OUT[i, k]) else np.nan


@njit(cache=True)
def hermite_coefficients(p, side, v, n_blocks):
    """The coefficients ``b_n(u_j; v)`` (3, 8 n_blocks) and ``E u_j^2`` (3) that the kernel
    uses, for side 0 (student) or 1 (teacher) of the first group: for checks. Writes the
    side's cache in ``p``."""
    Mmax = int(p[6])
    so = int(p[22]) + side * int(p[23])
    code = int(p[7]) if side == 0 else int(p[8])
    buf = np.empty(6 + 3 * BLOCK)
    p[so] = -1.0
    _prepare_side(p, so, code, v, buf)
    for nb in range(n_blocks):
        _block(p, so, code, nb, buf)
    co = so + SIDE_HEAD
    out = np.empty((3, n_blocks * BLOCK))
    for j in range(3):
        for n in range(n_blocks * BLOCK):
            out[j, n] = p[co + j * Mmax + n]
    E = np.empty(3)
    for j in range(3):
        E[j] = p[so + 3 + j]
    return out, E
