"""The deterministic finite-d matrix flow: the oracle of every truncation.

For tied attention (MATH.md, paper 003 eq. 11 before projection)

    dS_k/dt = - sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k   (k trainable),
    q_kl = Tr(S_k S_l) / d.

Normalised traces of its solution solve the infinite hierarchy (eq. 11)
exactly, at any finite ``d``, with the initial condition given by the
matrices' own moments. It is integrated with scipy's DOP853 at tight
tolerances.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from attndyn.kernels.moments import word_traces
from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

from ..core.results import IntegrationError, Trajectory

__all__ = ["matrix_flow"]


def matrix_flow(model, matrices, t_eval, *, order: int = 4, words=None, rtol: float = 1e-11,
                atol: float = 1e-13, method: str = "DOP853", keep_matrices: bool = False,
                blowup: float = 1e100, raise_on_failure: bool = False) -> Trajectory:
    """Integrate the matrix flow of a :class:`~attndyn.TiedModel` from ``matrices``.

    Parameters
    ----------
    model : TiedModel
    matrices : list of K symmetric (d, d) arrays
        The ``S_k`` at ``t = 0``; non-trainable ones stay fixed (teachers).
    t_eval : array
        Output times (ODE time ``t = 4 eta n / d``).
    order : int
        Report every canonical word up to this length (ignored with ``words``).
    words : list of words, optional
        The words to report instead.
    keep_matrices : bool
        Also keep ``S_k(t)`` in ``result.diagnostics["matrices"]`` (n_t, K, d, d).

    Returns
    -------
    Trajectory with ``kind="matrix_flow"`` and ``.moment(word)``.
    """
    from .tied import check_t_eval

    mats = model.check_matrices(matrices)
    t_eval = check_t_eval(t_eval)
    K = model.K
    d = mats[0].shape[0]
    if words is None:
        words = canonical_words(check_order(order), model.alphabet)
    else:
        words = [model.alphabet.check_word(w, "words") for w in words]
    tr = list(model.trainable)
    fixed = {k: mats[k] for k in range(K) if k not in tr}
    half_gamma = model.weight_decay / 2.0
    gfun = model.gradient_function
    gp = model.gradient_parameters
    gout = np.empty(K * K)

    def unpack(y):
        S = [None] * K
        for j, k in enumerate(tr):
            S[k] = y[j * d * d:(j + 1) * d * d].reshape(d, d)
        for k, m in fixed.items():
            S[k] = m
        return S

    def rhs(t, y):
        S = unpack(y)
        q = np.empty((K, K))
        for k in range(K):
            for l in range(k, K):
                q[k, l] = q[l, k] = np.einsum("ij,ji->", S[k], S[l]) / d
        gfun(np.ascontiguousarray(q.ravel()), gp, gout)
        G = gout.reshape(K, K)
        dy = np.empty_like(y)
        for j, k in enumerate(tr):
            acc = -half_gamma * S[k]
            for l in range(K):
                if G[k, l] != 0.0:
                    P = S[l] @ S[k]
                    acc = acc - G[k, l] * (P + P.T)  # S_l S_k + S_k S_l = P + P^T (symmetric S)
            dy[j * d * d:(j + 1) * d * d] = acc.ravel()
        return dy

    def blow(t, y):
        return blowup - np.abs(y).max()
    blow.terminal = True

    y0 = np.concatenate([mats[k].ravel() for k in tr]) if tr else np.zeros(0)
    t0 = 0.0
    if tr:
        sol = solve_ivp(rhs, (t0, float(t_eval[-1])), y0, method=method, t_eval=t_eval,
                        rtol=rtol, atol=atol, events=blow)
        status = 0 if sol.status == 0 else (-3 if sol.status == 1 else -1)
        message = "success: matrix flow reached the last output time" if status == 0 else (
            f"matrix flow stopped at t = {sol.t[-1] if sol.t.size else 0.0:.4g}: {sol.message}")
        Ys, ts = sol.y, sol.t
    else:
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
