r"""Layer kernels of paper 000 (Definition B.5, Assumption 5.1) and the
learning-dynamics identity of Lemma 4.1 / B.6.

Definition B.5, for block ``nu`` and rows ``p = i L + l``, ``q = j L + l'``::

    H_{pq} = <beta_p, beta_q> + <gamma_p, gamma_q>
    beta_p  = (omega/sqrt m) o_p (x) 1{W^T o_p > 0}                      (in R^{md})
    gamma_p = (omega kappa/sqrt m) (Lambda_l (x) Lambda)^T J_p Lambda s_p (in R^{d^2})
    s_p     = sum_r w_r 1{o_p^T w_r > 0} = W 1{W^T o_p > 0}

which give, with ``D`` the (nL x m) 0/1 matrix of active units and
``c_p = Lambda_i^T J_p Lambda_i s_p``,

    <beta_p, beta_q>   = (omega^2/m) <o_p, o_q> (D D^T)_{pq}
    <gamma_p, gamma_q> = (omega^2 kappa^2/m) <Lambda_{i,l}, Lambda_{j,l'}> <c_p, c_q>.

``H'`` of Assumption 5.1 is the beta part, ``lambda = lambda_min(H'(0)/omega)``.

Lemma 4.1 / B.6 states ``dL/dt = -sum_nu vec(delta_nu)^T (H_nu (x) I_d) vec(delta_nu)``
with ``delta_nu = dL/dmu_nu``. The exact identity of gradient flow is
``dL/dt = -|grad_theta L|^2 = -sum_nu (|dL/dW_nu|^2 + |dL/dU_nu|^2)``, and the W part
of it is ``sum_pq delta_p^T [(omega^2/m) <o_p,o_q> sum_r 1_pr 1_qr a_r a_r^T] delta_q``:
the lemma replaces ``a_r a_r^T`` by ``I_d`` (exact on the diagonal, since
``a_{r,k}^2 = 1``; the off-diagonal part averages out as ``m`` grows). For the U
part the lemma replaces ``sum_{r,r'} <delta_p,a_r><delta_q,a_r'> w_r^T M w_r'``
by ``<delta_p,delta_q> sum_{r,r'} w_r^T M w_r'``, which keeps the ``r != r'``
pairs that cancel in the exact form; :func:`lemma41` measures both gaps.
"""

from __future__ import annotations

import numpy as np

__all__ = ["layer_kernel", "kernel_parts", "min_eigenvalue", "assumption_lambda",
           "lemma41", "kernel_eigenvalues", "kernel_along"]


def _layer(model, layer):
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
        raise TypeError(f"layer must be an int in [0, N - 1] = [0, {model.N - 1}], got {layer!r}")
    if not 0 <= layer < model.N:
        raise ValueError(f"layer must be in [0, N - 1] = [0, {model.N - 1}] (0-based), "
                         f"got {layer}")
    return int(layer)


def _parts_from_cache(model, c, k):
    n, L, d = c.F.shape
    if n * L > 20000:
        raise ValueError(f"the kernel has nL = {n * L} rows; refusing above 20000 "
                         f"(pass fewer sequences)")
    O, Z = c.O[k], c.Z[k]
    D = (Z > 0).astype(np.float64)
    om2 = model.omega ** 2
    Hb = (om2 / model.m) * (O @ O.T) * (D @ D.T)
    Lam, P = c.Lam[k], c.P[k]
    s = (D @ model.W[k].T).reshape(n, L, d)                     # s_p = W 1_p
    u = np.einsum("ijd,ild->ilj", Lam, s)                       # Lambda s_p
    y = P * (u - np.einsum("ilj,ilj->il", P, u)[..., None])     # J_p Lambda s_p
    cvec = np.einsum("ilj,ijd->ild", y, Lam).reshape(n * L, d)  # c_p = Lambda^T J_p Lambda s_p
    Lr = Lam.reshape(n * L, d)
    Hg = (om2 * model.kappa ** 2 / model.m) * (Lr @ Lr.T) * (cvec @ cvec.T)
    return Hb, Hg


def kernel_parts(model, X, layer):
    """``(H'_nu, H^gamma_nu)``: the beta (W) and gamma (U) parts of
    Definition B.5 for ``layer`` (0-based), each nL x nL."""
    k = _layer(model, layer)
    c = model._forward(model.check_X(X))
    return _parts_from_cache(model, c, k)


def layer_kernel(model, X, layer, *, part="full"):
    """``H_nu`` of Definition B.5 (``part="full"``), its W part ``H'_nu``
    (``"W"``) or its U part (``"U"``); nL x nL, rows ``p = i L + l``."""
    if part not in ("full", "W", "U"):
        raise ValueError(f"part must be 'full', 'W' or 'U', got {part!r}")
    Hb, Hg = kernel_parts(model, X, layer)
    return Hb + Hg if part == "full" else (Hb if part == "W" else Hg)


def min_eigenvalue(H) -> float:
    """``lambda_min`` of a symmetric matrix (symmetrised first)."""
    return float(np.linalg.eigvalsh(0.5 * (H + H.T))[0])


def kernel_eigenvalues(model, X):
    """Per layer: ``lambda_min(H_nu)`` ("H"), ``lambda_min(H'_nu)`` ("Hprime"),
    ``lambda_min(H'_nu / omega)`` ("lambda", the ``lambda_nu`` of Assumption 5.1),
    ``lambda_max(H'_nu)`` and "pd" (``lambda_min > 1e-10 lambda_max``).

    ``H' = (omega^2/m) sum_r diag(D_r) O O^T diag(D_r)`` has rank at most
    ``m d``, so Assumption 5.1 fails whenever ``n L > m d``."""
    c = model._forward(model.check_X(X))
    out = []
    for k in range(model.N):
        Hb, Hg = _parts_from_cache(model, c, k)
        ev = np.linalg.eigvalsh(0.5 * (Hb + Hb.T))
        lb = float(ev[0])
        out.append({"H": min_eigenvalue(Hb + Hg), "Hprime": lb, "lambda": lb / model.omega,
                    "Hprime_max": float(ev[-1]),
                    # numerically PD: above rounding of the largest eigenvalue
                    "pd": bool(lb > 1e-10 * max(float(ev[-1]), 0.0))})
    return out


def assumption_lambda(model, X) -> float:
    """``lambda = min_nu lambda_min(H'_nu / omega)`` (Assumption 5.1), at the
    model's current parameters (at initialisation for ``theta(0)``)."""
    return min(e["lambda"] for e in kernel_eigenvalues(model, X))


def lemma41(model, X, Y):
    r"""Lemma 4.1 / B.6 against the exact ``dL/dt = -|grad L|^2`` at the
    current parameters (full batch).

    Returns a dict with ``exact`` (``-|grad L|^2``), ``lemma``
    (``-sum_nu tr(delta_nu^T H_nu delta_nu)``, exact adjoints
    ``delta_nu = dL/dmu_nu``), ``rel_gap = |lemma - exact| / |exact|`` and per
    layer the W and U parts: ``exact_W[k] = |dL/dW|^2``, ``lemma_W[k] =
    tr(delta^T H' delta)``, and likewise ``exact_U``, ``lemma_U``.
    """
    X, Y = model.check_XY(X, Y)
    c = model._forward(X)
    grads, deltas = model._backward(c, Y, keep_delta=True)
    eW, eU, lW, lU = [], [], [], []
    for k in range(model.N):
        dU, dW = grads[k]
        eW.append(float(np.vdot(dW, dW)))
        eU.append(float(np.vdot(dU, dU)))
        Hb, Hg = _parts_from_cache(model, c, k)
        dl = deltas[k].reshape(-1, model.d)
        G = dl @ dl.T                                   # <delta_p, delta_q>
        lW.append(float(np.vdot(Hb, G)))
        lU.append(float(np.vdot(Hg, G)))
    exact = -(sum(eW) + sum(eU))
    lemma = -(sum(lW) + sum(lU))
    gap = abs(lemma - exact) / abs(exact) if exact != 0 else 0.0
    return {"exact": exact, "lemma": lemma, "rel_gap": gap,
            "exact_W": eW, "exact_U": eU, "lemma_W": lW, "lemma_U": lU,
            "rel_gap_W": abs(sum(lW) - sum(eW)) / sum(eW) if sum(eW) else 0.0,
            "rel_gap_U": abs(sum(lU) - sum(eU)) / sum(eU) if sum(eU) else 0.0}


def kernel_along(result, X, layer, *, part="full"):
    """``H_nu(t)`` at every output time of a training run made with
    ``observe=("theta",)``: an array of shape (n_t, nL, nL)."""
    mats = result.diagnostics.get("matrices", {}) if hasattr(result, "diagnostics") else {}
    if "theta" not in mats or "model" not in mats:
        raise ValueError("result must come from train(..., observe=('theta',)) in this session "
                         "(the parameter snapshots are not saved to disk)")
    model = mats["model"].copy()
    out = []
    for th in mats["theta"]:
        model.set_theta(th)
        out.append(layer_kernel(model, X, layer, part=part))
    return np.asarray(out)
