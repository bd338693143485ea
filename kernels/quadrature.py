"""Compiled Gaussian expectations of a loss over a law linear in its inputs.

One kernel serves every law (tied, untied, direct S, general) and every loss:
the loss is a first-class numba function ``f(G, ip, buf) -> loss`` with the
signature ``VALGRAD_SIG`` (attndyn.kernels.rhs) that writes its gradient
(and, in Hessian mode, the upper triangle of its Hessian) into ``buf``. So the
kernel compiles once, and each loss only compiles its own small integrand.

Everything else travels in one float64 parameter vector ``p`` (built by
``attndyn.numeric.potentials``)::

    header (16): version, P, r, n_nodes, n_in, n_out, mode, n_ip, proj, K, eig_tol,
                 workspace size, d (split dimensions, 0: none), n_eta, node offset
    S   (n_in, P, P)  covariance:  Sigma = sym(sum_t x_t S_t)
    M   (n_in, P)     mean:        mu    = sum_t x_t M_t
    W   (r, P)        orthonormal rows: the loss depends on G only through W G
    Z   (n_nodes, r)  standard normal quadrature nodes, w (n_nodes) weights
                      ((n_nodes, d) with a split, see below); with a node offset
                      ``z0 > 0`` they sit at ``p[z0:]`` instead, and the maps that follow
                      move up: one copy of the maps serves many rules (the ladders)
    R   (n_out, 1 + P + P*P): rows [R0, Rg, RH], out = R0 Phi + Rg E[grad] + RH E[Hess]
    ip  (n_ip)        the loss parameters
    D   (d, r)        with a split: the directions of u the loss is not quadratic in
    E   (n_eta, r - d) with a split: a rule exact to degree 2 for N(0, I_(r-d))

Per call (one compiled function, :func:`law_eval`): build ``Sigma, mu`` from the inputs ``x``, project the inputs on the
PSD cone as the paper does outside it (``proj``: 1 tied, eq. 92; 2 untied and
3 direct S, eqs. 490-491 on ``(X1 +- X2)/2``), diagonalise ``C_u = W Sigma W^T
= V diag(lam) V^T``, put ``u = W mu + V sqrt(lam) z`` and ``G = W^T u`` at
every node, and accumulate ``Phi = E f``, ``g = E grad f`` and ``H = E Hess f``.
In Stein mode (``mode = 1``, losses whose second derivatives contain
distributions) ``H`` comes from first derivatives only:
``E[z (W grad f)^T] = sqrt(lam) V^T H_u`` (Gaussian integration by parts), so
``H_u = V lam^(-1/2) E[z (W grad f)^T]``; this needs ``C_u`` definite and
writes NaN otherwise.

Split rule (``d > 0``, Hessian mode only): a loss that is a polynomial of degree
at most 2 in ``u`` once the ``d`` combinations ``D u`` are fixed (the two-layer
attention example: quadratic in every form but the softmax arguments) is
integrated exactly along the other directions. Per call, ``B = D V sqrt(lam)``;
the top ``d`` eigenvectors ``Q1`` of ``B^T B`` span the directions of ``z`` the
loss is not quadratic along, the rest ``Q2`` complete them; ``z = Q1 xi + Q2 eta``
with ``xi`` from the nodes ``Z`` (tensor Gauss-Hermite in ``d`` dimensions) and
``eta`` from the ``n_eta`` points ``E`` (mean 0, covariance ``I``: exact for the
quadratic dependence of the loss, its gradient and its Hessian on ``eta``), each
node's weight shared equally by its ``n_eta`` points.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .rhs import VALGRAD_FTYPE

__all__ = ["HEADER", "LAW_SIG", "law_eval", "pack_header", "workspace_size"]

HEADER = 16
_f64 = types.float64[::1]
LAW_SIG = types.void(_f64, _f64, _f64, _f64, VALGRAD_FTYPE)


def workspace_size(P, r, n_in, n_out, K):
    """Length of the float64 workspace :func:`law_eval` needs."""
    nmax = max(r, K)
    nh = P * (P + 1) // 2
    nm = 1 + P + P * P
    return (n_in + 2 * nmax * nmax + nmax + 2 * K * K + P * P + P + r + 2 * r * r + r
            + (P + nh) + P + 2 * r + P + nh + r * r + nm + r * r + r * r + 2 * r)


def pack_header(P, r, n_nodes, n_in, n_out, mode, n_ip, proj, K, eig_tol=1e-12, split=0,
                n_eta=0, node_offset=0):
    """The 16 header entries of :func:`law_eval`'s parameter vector (module docstring);
    ``split``, ``n_eta``: the split rule's ``d`` and number of points (0: no split);
    ``node_offset``: where the nodes and weights start (0: after ``W``)."""
    h = np.zeros(HEADER)
    h[:15] = [1.0, P, r, n_nodes, n_in, n_out, mode, n_ip, proj, K, eig_tol,
              workspace_size(P, r, n_in, n_out, K), split, n_eta, node_offset]
    return h



# One monolithic kernel without allocations: numba cannot cache a generated
# wrapper that passes a first-class function to a kernel which allocates,
# reshapes, calls other compiled functions or LAPACK (they embed run-time
# addresses). So the caller allocates the workspace ``ws`` (size
# ``p[11]``), arrays are flat, and the eigen-decompositions are an inline
# cyclic Jacobi (exact to rounding for these small symmetric matrices).
@njit(LAW_SIG, cache=True)
def law_eval(x, p, out, ws, f):
    """Gaussian expectation of a loss over a linear law (see the module docstring).

    ``out.size == n_out``: write the outputs ``R [Phi, E grad, E Hess]``;
    ``out.size == 1 + P + P*P + n_out``: write the moments
    ``[Phi, E grad loss (P), E Hess loss (P*P row-major)]`` followed by the outputs.
    ``ws`` is a scratch array of at least ``p[11]`` entries. Wrong sizes give NaN.
    """
    P = int(p[1])
    r = int(p[2])
    NN = int(p[3])
    n_in = int(p[4])
    n_out = int(p[5])
    mode = int(p[6])
    n_ip = int(p[7])
    proj = int(p[8])
    K = int(p[9])
    eig_tol = p[10]
    d = int(p[12])
    ne = int(p[13]) if d > 0 else 1
    nm = 1 + P + P * P
    nh = P * (P + 1) // 2
    bad_split = d < 0 or d > r or (d > 0 and (mode != 0 or ne < 1))
    z0 = int(p[14])
    bad_nodes = z0 < 0 or z0 + NN * ((d if d > 0 else r) + 1) > p.size
    if (out.size != n_out and out.size != nm + n_out) or ws.size < int(p[11]) or bad_split \
            or bad_nodes:
        # wrong buffer sizes: no exception here (it would stop numba from caching
        # the generated callers), NaN instead
        for k in range(out.size):
            out[k] = np.nan
        return
    o = HEADER
    oS = o
    o += n_in * P * P
    oM = o
    o += n_in * P
    oW = o
    o += r * P
    dz = d if d > 0 else r
    if z0 > 0:
        oZ = z0
        ow = z0 + NN * dz
    else:
        oZ = o
        o += NN * dz
        ow = o
        o += NN
    oR = o
    o += n_out * nm
    ip = p[o:o + n_ip]
    oD = o + n_ip
    oE = oD + d * r
    m_eta = r - d if d > 0 else 0
    if oE + ne * m_eta > p.size or (z0 > 0 and z0 < oE + ne * m_eta):
        # the split's tail (or the maps, with the nodes elsewhere) runs past p
        for k in range(out.size):
            out[k] = np.nan
        return

    # workspace layout (flat arrays)
    nmax = r if r > K else K
    w0 = 0
    xx = ws[w0:w0 + n_in]
    w0 += n_in
    A = ws[w0:w0 + nmax * nmax]
    w0 += nmax * nmax
    V = ws[w0:w0 + nmax * nmax]
    w0 += nmax * nmax
    lam = ws[w0:w0 + nmax]
    w0 += nmax
    Qp = ws[w0:w0 + K * K]
    w0 += K * K
    Qm = ws[w0:w0 + K * K]
    w0 += K * K
    Sig = ws[w0:w0 + P * P]
    w0 += P * P
    mu = ws[w0:w0 + P]
    w0 += P
    muu = ws[w0:w0 + r]
    w0 += r
    Af = ws[w0:w0 + r * r]
    w0 += r * r
    Vu = ws[w0:w0 + r * r]
    w0 += r * r
    lamu = ws[w0:w0 + r]
    w0 += r
    buf = ws[w0:w0 + P + nh]
    w0 += P + nh
    G = ws[w0:w0 + P]
    w0 += P
    u = ws[w0:w0 + r]
    w0 += r
    gu = ws[w0:w0 + r]
    w0 += r
    g = ws[w0:w0 + P]
    w0 += P
    hu = ws[w0:w0 + nh]
    w0 += nh
    T = ws[w0:w0 + r * r]
    w0 += r * r
    mom = ws[w0:w0 + nm]
    w0 += nm
    Hu = ws[w0:w0 + r * r]
    w0 += r * r
    Ar = ws[w0:w0 + r * r]   # the map z -> u in the split frame (Af itself without a split)
    w0 += r * r
    u0 = ws[w0:w0 + r]
    w0 += r
    order = ws[w0:w0 + r]
    w0 += r

    # -- inputs, projected on the PSD cone (the paper's extension) --------------
    for i in range(n_in):
        xx[i] = x[i]
    n_proj = 1 if proj == 1 else (2 if (proj == 2 or proj == 3) else 0)
    o1 = K if proj == 2 else 0
    o2 = o1 + K * K
    for i in range(P * P):
        Sig[i] = 0.0
    for i in range(P):
        mu[i] = 0.0
    # jobs: the projections, the integration covariance C_u (r x r), then with a split
    # B^T B (r x r), B = D Af, whose top d eigenvectors span the non-quadratic directions
    for job in range(n_proj + 1 + (1 if d > 0 else 0)):
        if job > n_proj:
            n = r
            for i in range(r):
                for j in range(i, r):
                    acc = 0.0
                    for k in range(d):
                        bi = 0.0
                        bj = 0.0
                        for a in range(r):
                            dka = p[oD + k * r + a]
                            bi += dka * Af[a * r + i]
                            bj += dka * Af[a * r + j]
                        acc += bi * bj
                    A[i * n + j] = acc
                    A[j * n + i] = acc
        elif job < n_proj:
            n = K
            for i in range(K):
                for j in range(K):
                    if proj == 1:
                        A[i * n + j] = 0.5 * (x[i * K + j] + x[j * K + i])
                    else:
                        a = 0.5 * (x[o1 + i * K + j] + x[o1 + j * K + i])
                        b = 0.5 * (x[o2 + i * K + j] + x[o2 + j * K + i])
                        A[i * n + j] = 0.5 * (a + b) if job == 0 else 0.5 * (a - b)
        else:
            for t in range(n_in):
                xt = xx[t]
                if xt != 0.0:
                    base = oS + t * P * P
                    for a in range(P * P):
                        Sig[a] += xt * p[base + a]
                    for a in range(P):
                        mu[a] += xt * p[oM + t * P + a]
            n = r
            for i in range(r):
                for j in range(r):
                    acc = 0.0
                    for a in range(P):
                        wia = p[oW + i * P + a]
                        if wia != 0.0:
                            for b in range(P):
                                acc += (wia * 0.5 * (Sig[a * P + b] + Sig[b * P + a])
                                        * p[oW + j * P + b])
                    A[i * n + j] = acc
            for i in range(r):
                acc = 0.0
                for a in range(P):
                    acc += p[oW + i * P + a] * mu[a]
                muu[i] = acc
        # cyclic Jacobi on A (n x n) -> eigenvalues lam, eigenvectors in the columns of V
        for i in range(n):
            for j in range(n):
                V[i * n + j] = 1.0 if i == j else 0.0
        nrm = 0.0
        for i in range(n * n):
            nrm += A[i] * A[i]
        for sweep in range(100):
            off = 0.0
            for i in range(n):
                for j in range(i + 1, n):
                    off += A[i * n + j] * A[i * n + j]
            if off <= 1e-32 * nrm or off == 0.0:
                break
            for i in range(n - 1):
                for j in range(i + 1, n):
                    aij = A[i * n + j]
                    if aij == 0.0:
                        continue
                    theta = (A[j * n + j] - A[i * n + i]) / (2.0 * aij)
                    t = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
                    if theta < 0.0:
                        t = -t
                    c = 1.0 / np.sqrt(t * t + 1.0)
                    s = t * c
                    for k in range(n):
                        aki = A[k * n + i]
                        akj = A[k * n + j]
                        A[k * n + i] = c * aki - s * akj
                        A[k * n + j] = s * aki + c * akj
                    for k in range(n):
                        aik = A[i * n + k]
                        ajk = A[j * n + k]
                        A[i * n + k] = c * aik - s * ajk
                        A[j * n + k] = s * aik + c * ajk
                    for k in range(n):
                        vki = V[k * n + i]
                        vkj = V[k * n + j]
                        V[k * n + i] = c * vki - s * vkj
                        V[k * n + j] = s * vki + c * vkj
        for i in range(n):
            lam[i] = A[i * n + i]
        if job < n_proj:
            # clip the negative eigenvalues and rebuild
            for i in range(K):
                for j in range(K):
                    acc = 0.0
                    for k in range(K):
                        if lam[k] > 0.0:
                            acc += V[i * n + k] * lam[k] * V[j * n + k]
                    if job == 0:
                        Qp[i * K + j] = acc
                    else:
                        Qm[i * K + j] = acc
            if job == n_proj - 1:
                for i in range(K * K):
                    if proj == 1:
                        xx[i] = Qp[i]
                    else:
                        xx[o1 + i] = Qp[i] + Qm[i]
                        xx[o2 + i] = Qp[i] - Qm[i]
        elif job == n_proj:
            for i in range(r):
                lamu[i] = lam[i]
            for i in range(r * r):
                Vu[i] = V[i]
            for j in range(r):
                sq = np.sqrt(lamu[j]) if lamu[j] > 0.0 else 0.0
                for i in range(r):
                    Af[i * r + j] = Vu[i * r + j] * sq
            for i in range(r * r):
                Ar[i] = Af[i]
        else:
            # columns of Ar: Af times the eigenvectors, the d largest eigenvalues first
            for i in range(r):
                order[i] = -1.0
            for k in range(r):
                best = -1
                for i in range(r):
                    taken = False
                    for kk in range(k):
                        if int(order[kk]) == i:
                            taken = True
                    if not taken and (best < 0 or lam[i] > lam[best]):
                        best = i
                order[k] = best
            for k in range(r):
                c = int(order[k])
                for i in range(r):
                    acc = 0.0
                    for a in range(r):
                        acc += Af[i * r + a] * V[a * n + c]
                    Ar[i * r + k] = acc
    lmax = 0.0
    for i in range(r):
        if abs(lamu[i]) > lmax:
            lmax = abs(lamu[i])

    # -- quadrature ---------------------------------------------------------------
    phi = 0.0
    for a in range(P):
        g[a] = 0.0
    for k in range(nh):
        hu[k] = 0.0
    for k in range(r * r):
        T[k] = 0.0
    for k in range(P + nh):
        buf[k] = 0.0
    for t in range(NN * ne):
        # node nn of the rule, point e of the split's eta rule (one point without a split)
        nn = t // ne
        e = t - nn * ne
        zo = oZ + nn * dz
        if e == 0:
            for i in range(r):
                acc = muu[i]
                for j in range(dz):
                    acc += Ar[i * r + j] * p[zo + j]
                u0[i] = acc
        eo = oE + e * m_eta
        for i in range(r):
            acc = u0[i]
            for j in range(m_eta):
                acc += Ar[i * r + d + j] * p[eo + j]
            u[i] = acc
        for a in range(P):
            acc = 0.0
            for i in range(r):
                acc += p[oW + i * P + a] * u[i]
            G[a] = acc
        val = f(G, ip, buf)
        wn = p[ow + nn] / ne
        phi += wn * val
        for a in range(P):
            g[a] += wn * buf[a]
        if mode == 0:
            for k in range(nh):
                hu[k] += wn * buf[P + k]
        else:
            for i in range(r):
                acc = 0.0
                for a in range(P):
                    acc += p[oW + i * P + a] * buf[a]
                gu[i] = acc
            for i in range(r):
                zi = wn * p[zo + i]
                for j in range(r):
                    T[i * r + j] += zi * gu[j]

    mom[0] = phi
    for a in range(P):
        mom[1 + a] = g[a]
    oh = 1 + P
    if mode == 0:
        k = 0
        for a in range(P):
            for b in range(a, P):
                mom[oh + a * P + b] = hu[k]
                mom[oh + b * P + a] = hu[k]
                k += 1
    else:
        ok = lmax > 0.0
        for i in range(r):
            if lamu[i] <= eig_tol * lmax:
                ok = False
        if ok:
            # Stein: E[z (W grad)^T] = A^T H_u with A = V lam^(1/2), so H_u = V lam^(-1/2) T
            for i in range(r):
                for j in range(r):
                    acc = 0.0
                    for k in range(r):
                        acc += Vu[i * r + k] / np.sqrt(lamu[k]) * T[k * r + j]
                    Hu[i * r + j] = acc
            for i in range(r):
                for j in range(i + 1, r):
                    sm = 0.5 * (Hu[i * r + j] + Hu[j * r + i])
                    Hu[i * r + j] = sm
                    Hu[j * r + i] = sm
            for a in range(P):
                for b in range(P):
                    acc = 0.0
                    for i in range(r):
                        wi = p[oW + i * P + a]
                        if wi != 0.0:
                            for j in range(r):
                                acc += wi * Hu[i * r + j] * p[oW + j * P + b]
                    mom[oh + a * P + b] = acc
        else:
            for k in range(P * P):
                mom[oh + k] = np.nan
    oo = 0
    if out.size == nm + n_out:
        for k in range(nm):
            out[k] = mom[k]
        oo = nm
    for q in range(n_out):
        acc = 0.0
        base = oR + q * nm
        for k in range(nm):
            c = p[base + k]
            if c != 0.0:
                acc += c * mom[k]
        out[oo + q] = acc
