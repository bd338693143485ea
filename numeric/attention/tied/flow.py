"""A fast tied matrix flow: symmetric storage, BLAS rank-2k products, diagonal teachers.

The tied flow (paper 003, eq. 11 before the trace projection)

    dS_k/dt = - sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k   (k trainable),
    q_kl = Tr(S_k S_l) / d,

is written as ``dS_k/dt = -(M_k S_k + S_k M_k) - (gamma/2) S_k`` with
``M_k = sum_l Gamma_kl S_l``, so that one BLAS call per trainable index does
the work: ``dsyrk`` (``S S^T``, ``d^3`` flops) when ``M_k`` is a multiple of
``S_k`` plus diagonal terms, ``dsyr2k`` (``M S^T + S M^T``, ``2 d^3``)
otherwise. Both compute only the upper triangle, which is all the integrator
stores (``d (d+1)/2`` numbers per trainable matrix instead of ``d^2``).

Fixed (teacher) matrices that are diagonal or scalar enter through ``O(d^2)``
row and column scalings. A single dense fixed matrix is diagonalised once
(``eigh``) and every matrix is rotated into its eigenbasis first: normalised
traces are invariant under a simultaneous rotation, so the result is the
same flow.

In the factored form ``S_k = W_k W_k^T`` (``W_k`` of shape ``d x r``) the flow
is ``dW_k/dt = -M_k W_k - (gamma/4) W_k`` (``d/dt (W W^T)`` reproduces the
equation above), which costs ``O(d^2 r)`` per step instead of ``O(d^3)``; it
is used when every trainable matrix has rank ``r <= d/3``.

The integrator is the project's flow driver over scipy's steppers (DOP853 by default).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas

from attndyn.kernels.moments import word_traces
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.validate import check_t_eval
from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

__all__ = ["tied_fast_flow", "tied_fast_system", "FlowOutput", "tied_matrix_flow"]


class FlowOutput:
    """Raw output of :func:`tied_fast_flow`: times, traces (n_words x n_t), status."""

    __slots__ = ("t", "traces", "status", "message", "nfev", "form")

    def __init__(self, t, traces, status, message, nfev, form):
        self.t, self.traces, self.status, self.message = t, traces, status, message
        self.nfev, self.form = nfev, form


def _classify(m):
    """'scalar' (c I), 'diag' or 'dense'."""
    off = m - np.diag(np.diag(m))
    if np.any(off != 0.0):
        return "dense"
    dg = np.diag(m)
    return "scalar" if np.all(dg == dg[0]) else "diag"


def _rotate_to_teacher(mats, fixed, d):
    """Rotate every matrix into the eigenbasis of the only dense fixed matrix, if there is
    exactly one: it becomes diagonal. Returns the matrices and the rotation (or ``None``)."""
    dense_fixed = [k for k in fixed if _classify(mats[k]) == "dense"]
    if len(dense_fixed) == 1 and d > 1:
        lam, Qrot = np.linalg.eigh(mats[dense_fixed[0]])
        mats = [Qrot.T @ m @ Qrot for m in mats]
        mats = [(m + m.T) / 2.0 for m in mats]
        mats[dense_fixed[0]] = np.diag(lam)
        return mats, Qrot
    return mats, None


def _low_rank_factors(mats, tr, d, factored):
    """``(use_w, Ws)``: whether the factored form applies (every trainable matrix PSD of rank
    ``<= d/3``, or ``factored=True``) and the factors ``W_k`` of the trainable matrices."""
    ranks = []
    Ws = []
    if factored in ("auto", True) and tr:
        for k in tr:
            lam, V = np.linalg.eigh(mats[k])
            tol = 1e-12 * max(1.0, abs(lam).max())
            if np.any(lam < -tol):
                ranks.append(d + 1)  # not PSD: no real factor
                continue
            keep = lam > tol
            ranks.append(int(keep.sum()))
            Ws.append(V[:, keep] * np.sqrt(lam[keep]))
    use_w = bool(tr) and (factored is True or (factored == "auto" and max(ranks) * 3 <= d))
    if factored is True and max(ranks) > d:
        raise ValueError("factored=True needs positive semidefinite trainable matrices")
    return use_w, Ws


def _factored_system(model, mats, tr, fixed, diag_fixed, fixed_q, Ws, d):
    """``(rhs, y0, full_rot)`` of the factored form ``dW_k/dt = -M_k W_k - (gamma/4) W_k``."""
    K = model.K
    n_tr = len(tr)
    gfun, gp = model.gradient_function, model.gradient_parameters
    gout = np.empty(K * K)
    hg = model.weight_decay / 2.0
    r = [w.shape[1] for w in Ws]
    off = np.concatenate([[0], np.cumsum([d * x for x in r])])

    def unpack(y):
        S = [None] * K
        Wl = []
        for j, k in enumerate(tr):
            W = y[off[j]:off[j + 1]].reshape(d, r[j])
            Wl.append(W)
            S[k] = W
        return S, Wl

    def qmat(Wl):
        q = fixed_q.copy()
        G = {}
        for j, k in enumerate(tr):
            for i in range(j, n_tr):
                l = tr[i]
                C = Wl[j].T @ Wl[i]  # Tr(W_k W_k^T W_l W_l^T) = |W_k^T W_l|^2
                G[(j, i)] = C
                q[k, l] = q[l, k] = np.sum(C * C) / d
            for l in fixed:
                if l in diag_fixed:
                    v = np.sum(Wl[j] * (diag_fixed[l][:, None] * Wl[j])) / d
                else:
                    v = np.sum(Wl[j] * (mats[l] @ Wl[j])) / d
                q[k, l] = q[l, k] = v
        return q, G

    def rhs(t, y):
        _, Wl = unpack(y)
        q, G = qmat(Wl)
        gfun(np.ascontiguousarray(q.ravel()), gp, gout)
        Gm = gout.reshape(K, K)
        dy = np.empty_like(y)
        for j, k in enumerate(tr):
            acc = (-hg / 2.0) * Wl[j]
            for i, l in enumerate(tr):
                g = Gm[k, l]
                if g != 0.0:  # S_l W_k = W_l (W_l^T W_k)
                    C = G[(i, j)] if i <= j else G[(j, i)].T  # W_l^T W_k
                    acc = acc - g * (Wl[i] @ C)
            for l in fixed:
                g = Gm[k, l]
                if g != 0.0:
                    if l in diag_fixed:
                        acc = acc - g * (diag_fixed[l][:, None] * Wl[j])
                    else:
                        acc = acc - g * (mats[l] @ Wl[j])
            dy[off[j]:off[j + 1]] = acc.ravel()
        return dy

    y0 = np.concatenate([w.ravel() for w in Ws])

    def full_rot(y):
        S, Wl = unpack(y)
        out = list(mats)
        for j, k in enumerate(tr):
            out[k] = Wl[j] @ Wl[j].T
        return out
    return rhs, y0, full_rot


def _symmetric_system(model, mats, tr, diag_fixed, fixed_q, d):
    """``(rhs, y0, full_rot)`` of the packed symmetric form (upper triangles, one BLAS
    ``dsyrk``/``dsyr2k`` per trainable matrix)."""
    K = model.K
    gfun, gp = model.gradient_function, model.gradient_parameters
    gout = np.empty(K * K)
    hg = model.weight_decay / 2.0
    iu = np.triu_indices(d)
    # flat positions of the upper triangle (C order) and of its mirror: np.put/np.take
    # with flat indices are several times faster than tuple fancy indexing
    flat_u = iu[0] * d + iu[1]
    flat_l = iu[1] * d + iu[0]  # also the upper triangle of a Fortran-ordered array
    diag_p = np.flatnonzero(iu[0] == iu[1])  # the diagonal inside the packed vector
    # (s_i + s_j) on the packed triangle, for each diagonal/scalar teacher: D S + S D
    pair = {l: v[iu[0]] + v[iu[1]] for l, v in diag_fixed.items()}

    def sym(v):
        S = np.empty(d * d)
        np.put(S, flat_u, v)
        np.put(S, flat_l, v)
        return S.reshape(d, d)

    n_p = iu[0].size

    def unpack(y):
        S = list(mats)
        for j, k in enumerate(tr):
            S[k] = sym(y[j * n_p:(j + 1) * n_p])
        return S

    def rhs(t, y):
        S = unpack(y)
        q = fixed_q.copy()
        for j, k in enumerate(tr):
            vk = y[j * n_p:(j + 1) * n_p]
            for l in range(K):
                if l in diag_fixed:
                    v = np.dot(vk[diag_p], diag_fixed[l]) / d
                else:
                    v = np.sum(S[k] * S[l]) / d
                q[k, l] = q[l, k] = v
        gfun(np.ascontiguousarray(q.ravel()), gp, gout)
        Gm = gout.reshape(K, K)
        dy = np.empty_like(y)
        for j, k in enumerate(tr):
            vk = y[j * n_p:(j + 1) * n_p]
            dense = [l for l in range(K) if l not in diag_fixed and Gm[k, l] != 0.0]
            Sk = S[k]
            if dense == [k]:
                # M_k S_k + S_k M_k = 2 Gamma_kk S_k^2 (upper triangle only)
                U = blas.dsyrk(2.0 * Gm[k, k], Sk.T)
            elif dense:
                Md = sum(Gm[k, l] * S[l] for l in dense)
                U = blas.dsyr2k(1.0, Md.T, Sk.T)
            else:
                U = None
            # column-major flattening puts (i, j) at j d + i: the flat_l positions
            acc = np.take(U.ravel(order="F"), flat_l) if U is not None else np.zeros(n_p)
            coef = np.full(n_p, hg)  # (gamma/2) S = (gamma/4)(I S + S I)
            for l in diag_fixed:
                if Gm[k, l] != 0.0:
                    coef += Gm[k, l] * pair[l]
            dy[j * n_p:(j + 1) * n_p] = -(acc + coef * vk)
        return dy

    y0 = np.concatenate([mats[k][iu] for k in tr]) if tr else np.zeros(0)
    return rhs, y0, unpack


def tied_fast_system(model, matrices, factored="auto"):
    """The fast tied flow as ``(rhs, y0, full, form)``: ``rhs(t, y)`` on the packed
    state, its initial value, ``full(y)`` the ``K`` matrices ``S_k`` in the original
    basis, and ``"symmetric"`` or ``"factored"``. ``matrices`` must be validated
    (``model.check_matrices``)."""
    K = model.K
    tr = list(model.trainable)
    mats = [np.array(m, dtype=np.float64) for m in matrices]
    d = mats[0].shape[0]
    fixed = [k for k in range(K) if k not in tr]
    mats, Qrot = _rotate_to_teacher(mats, fixed, d)
    orig = [np.array(m, dtype=np.float64) for m in matrices]
    kinds = {k: _classify(mats[k]) for k in fixed}
    diag_fixed = {k: np.diag(mats[k]).copy() for k in fixed if kinds[k] != "dense"}
    # factored form when every trainable matrix has low rank
    use_w, Ws = _low_rank_factors(mats, tr, d, factored)

    fixed_q = np.zeros((K, K))
    for a in fixed:
        for b in fixed:
            fixed_q[a, b] = np.sum(mats[a] * mats[b]) / d

    if use_w:
        rhs, y0, full_rot = _factored_system(model, mats, tr, fixed, diag_fixed, fixed_q, Ws, d)
        form = "factored"
    else:
        rhs, y0, full_rot = _symmetric_system(model, mats, tr, diag_fixed, fixed_q, d)
        form = "symmetric"

    counter = [0]

    def counted(t, y):
        counter[0] += 1
        return rhs(t, y)

    def full(y, original_basis=True):
        """The matrices at state ``y``; the traces do not need the rotation back."""
        if np.array_equal(y, y0):  # the initial state: the input itself, bit for bit
            return list(orig)
        S = full_rot(y)
        if Qrot is None or not original_basis:
            return S
        out = list(orig)
        for k in tr:
            m = Qrot @ S[k] @ Qrot.T
            out[k] = (m + m.T) / 2.0
        return out

    counted.nfev = counter
    return counted, y0, full, form


def tied_fast_flow(model, matrices, t_eval, words, *, rtol=1e-10, atol=1e-12, blowup=1e100,
                   factored="auto", method="DOP853") -> FlowOutput:
    """Integrate the tied matrix flow of ``model`` from symmetric ``matrices``.

    ``matrices`` must already be validated (``model.check_matrices``); the
    result holds the normalised traces of ``words`` at ``t_eval`` (exact
    trace projection of the flow, which solves the infinite hierarchy,
    eq. 11). ``factored`` is ``"auto"``, ``True`` or ``False``. Integrated by
    the project's flow driver (:func:`attndyn.numeric.attention.odesolve.solve_flow`:
    blow-up and non-finite slopes end with status -3, keeping the outputs before).
    """
    from attndyn.numeric.attention.base import finite_word_traces
    from attndyn.numeric.attention.odesolve import solve_flow
    rhs, y0, full, form = tied_fast_system(model, matrices, factored)
    t_eval = np.asarray(t_eval, dtype=np.float64)
    if y0.size == 0 or t_eval[-1] == 0.0:
        traces = np.stack([finite_word_traces(full(y0, False), words, "S")] * t_eval.size,
                          axis=1)
        return FlowOutput(t_eval.copy(), traces, 0, "success: nothing to integrate", 0, form)
    sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, method=method, blowup=blowup,
                     what="tied matrix flow")
    traces = np.empty((len(words), sol.t.size))
    for n in range(sol.t.size):
        traces[:, n] = word_traces(full(sol.y[:, n], False), words)
    message = sol.message if sol.status != 0 else "success: matrix flow reached the last output time"
    return FlowOutput(np.asarray(sol.t, float), traces, int(sol.status), message,
                      int(rhs.nfev[0]), form)


def tied_matrix_flow(model, matrices, t_eval, *, order, words, rtol, atol, method,
                      keep_matrices, blowup, raise_on_failure) -> Trajectory:
    """dS_k/dt = -sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k, q_kl = Tr(S_k S_l)/d."""
    mats = model.check_matrices(matrices)
    t_eval = check_t_eval(t_eval)
    K = model.K
    d = mats[0].shape[0]
    if words is None:
        words = canonical_words(check_order(order), model.alphabet)
    else:
        words = [model.alphabet.check_word(w, "words") for w in words]
    tr = list(model.trainable)
    from attndyn.numeric.attention.base import finite_word_traces
    finite_word_traces(mats, words, "S")  # the initial moments: overflow is an error, not inf
    # the fast flow (issue 9, numeric/attention/fastflow.py): packed symmetric state, one
    # BLAS dsyrk/dsyr2k per trainable matrix, teachers rotated to diagonal, the factored
    # form W W^T when every trainable matrix has rank <= d/3; traces need no rotation back
    from attndyn.numeric.attention.tied.flow import tied_fast_system
    rhs, y0_fast, full, _form = tied_fast_system(model, mats)

    def unpack(y):
        return full(y, keep_matrices)

    if tr:
        from attndyn.numeric.attention.odesolve import solve_flow  # imports scipy.integrate: not at start-up
        y0 = y0_fast
        sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, method=method, blowup=blowup,
                         what="tied matrix flow")
        Ys, ts, status, message = sol.y, sol.t, sol.status, sol.message
    else:
        from attndyn.numeric.attention.odesolve import check_solver_args
        rtol, atol, blowup, _ = check_solver_args(rtol, atol, blowup, method)
        Ys, ts, status, message = np.zeros((0, t_eval.size)), t_eval, 0, "nothing trainable"
    out = np.empty((len(words), ts.size))
    kept = []
    for n in range(ts.size):
        S = unpack(Ys[:, n]) if tr else mats
        out[:, n] = word_traces(S, words)
        if keep_matrices:
            kept.append(np.stack(S))
    params = model.params_dict()
    params.update({"d": d, "rtol": rtol, "atol": atol, "method": method})
    res = Trajectory(t=np.asarray(ts, dtype=float), y=out,
                     names=[word_label(w, K) for w in words], words=[tuple(w) for w in words],
                     kind="matrix_flow", params=params, status=status, message=message,
                     diagnostics={"d": d})
    if keep_matrices:
        res.diagnostics["matrices"] = np.stack(kept) if kept else np.zeros((0, K, d, d))
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res
