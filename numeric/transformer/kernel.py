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

The exact per-layer kernel (``kernel="exact"``) is the Jacobian Gram of the block as it
is, ``K_nu = (d vec mu_nu / d theta_nu)(d vec mu_nu / d theta_nu)^T`` in
``R^{nLd x nLd}`` (rows ``(p, a) -> p d + a``, the paper's row-major ``vec``), with the
block's input ``Lambda_{nu-1}`` held fixed. Since ``dL/dtheta_nu = J_nu^T vec(delta_nu)``,

    dL/dt = -|grad L|^2 = -sum_nu vec(delta_nu)^T K_nu vec(delta_nu)     (exactly),

and in closed form, with ``g_{p,a} = W diag(1_p) A e_a`` and
``C_{p,a} = Lambda_i^T J_p Lambda_i g_{p,a}``,

    K^W[(p,a),(q,b)] = (omega^2/m) <o_p, o_q> sum_r 1_pr 1_qr a_ra a_rb
    K^U[(p,a),(q,b)] = (omega^2 kappa^2/m) <Lambda_{i,l}, Lambda_{j,l'}> <C_{p,a}, C_{q,b}>.

Definition B.5's ``H_nu`` is the special case with every row ``a_r`` replaced by the
all-ones vector: then ``g_{p,a} = s_p`` for every ``a`` and ``K = H (x) 1 1^T``
(:func:`exact_kernel` takes ``A=`` to check this). The Lemma 4.1 expression uses
``H (x) I_d``: the ``a = b`` blocks of that special case.
"""

from __future__ import annotations

import numpy as np

__all__ = ["layer_kernel", "kernel_parts", "min_eigenvalue", "assumption_lambda",
           "lemma41", "kernel_eigenvalues", "kernel_along", "exact_kernel", "exact_kernel_parts",
           "block_output", "KERNELS", "MAX_EXACT_ROWS"]

KERNELS = ("definition", "exact")
#: Refuse an exact kernel with more rows ``n L d`` than this.
MAX_EXACT_ROWS = 6000


def kernel_name(kernel):
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be 'definition' (Definition B.5's H_nu) or 'exact' "
                         f"(the Jacobian Gram K_nu), got {kernel!r}")
    return kernel


def _layer(model, layer):
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
        raise TypeError(f"layer must be an int in [0, N - 1] = [0, {model.N - 1}], got {layer!r}")
    if not 0 <= layer < model.N:
        raise ValueError(f"layer must be in [0, N - 1] = [0, {model.N - 1}] (0-based), "
                         f"got {layer}")
    return int(layer)


def parts_from_cache(model, c, k):
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


def _exact_from_cache(model, c, k, A=None):
    """``(K^W, K^U)`` of block k (nLd x nLd each), from a forward cache."""
    n, L, d = c.F.shape
    if n * L * d > MAX_EXACT_ROWS:
        raise ValueError(f"the exact kernel has n L d = {n * L * d} rows; refusing above "
                         f"{MAX_EXACT_ROWS} (pass fewer sequences)")
    A = model.A[k] if A is None else A
    O, Z, W = c.O[k], c.Z[k], model.W[k]
    D = (Z > 0).astype(np.float64)
    c2 = model.omega ** 2 / model.m
    nl = n * L
    Mx = (D[:, None, :] * A.T[None, :, :]).reshape(nl * d, model.m)   # row (p, a): 1_pr a_ra
    OO = np.repeat(np.repeat(O @ O.T, d, axis=0), d, axis=1)
    KW = c2 * OO * (Mx @ Mx.T)
    Lam, P = c.Lam[k], c.P[k]
    G = np.einsum("er,pr,ra->pae", W, D, A).reshape(n, L, d, d)       # g_{p,a} (index e last)
    u = np.einsum("ije,ilae->ilaj", Lam, G)                           # Lambda_i g_{p,a}
    y = P[:, :, None, :] * (u - np.einsum("ilj,ilaj->ila", P, u)[..., None])  # J_p (.)
    C = np.einsum("ilaj,ije->ilae", y, Lam).reshape(nl * d, d)        # C_{p,a}
    Lr = Lam.reshape(nl, d)
    LL = np.repeat(np.repeat(Lr @ Lr.T, d, axis=0), d, axis=1)
    KU = (c2 * model.kappa ** 2) * LL * (C @ C.T)
    return KW, KU


def exact_kernel_parts(model, X, layer, *, A=None):
    """``(K^W_nu, K^U_nu)``: the W and U parts of the exact Jacobian Gram of
    block ``layer`` (0-based), each ``nLd x nLd`` (rows ``p d + a``). ``A``
    replaces the block's frozen ``A_nu`` (m x d), e.g. ``np.ones((m, d))``,
    for which ``K = H (x) 1 1^T`` with ``H`` of Definition B.5.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> KW, KU = exact_kernel_parts(tf, X, 0, A=np.ones((8, 3)))
        >>> Hw, Hu = kernel_parts(tf, X, 0)
        >>> bool(np.allclose(KW, np.kron(Hw, np.ones((3, 3)))))
        True
    """
    k = _layer(model, layer)
    c = model._forward(model.check_X(X))
    if A is not None:
        A = np.asarray(A, dtype=np.float64)
        if A.shape != (model.m, model.d) or not np.all(np.isfinite(A)):
            raise ValueError(f"A must be a finite array of shape (m, d) = ({model.m}, "
                             f"{model.d})")
    return _exact_from_cache(model, c, k, A)


def exact_kernel(model, X, layer, *, part="full", A=None):
    """The exact per-layer kernel ``K_nu`` (``nLd x nLd``; ``part`` "full",
    "W" or "U"): the Gram of the Jacobian of ``vec(mu_nu)`` in
    ``theta_nu = (U_nu, W_nu)`` at fixed block input. See the module docstring.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> K = exact_kernel(tf, X, 0)
        >>> K.shape, bool(np.allclose(K, K.T))
        ((30, 30), True)
    """
    if part not in ("full", "W", "U"):
        raise ValueError(f"part must be 'full', 'W' or 'U', got {part!r}")
    KW, KU = exact_kernel_parts(model, X, layer, A=A)
    return KW + KU if part == "full" else (KW if part == "W" else KU)


def block_output(model, Lam, layer, *, U=None, W=None):
    """``mu_nu`` (nL x d) of block ``layer`` for a given input ``Lam`` (n, L, d),
    optionally with other ``U`` and ``W`` (finite-difference checks of K_nu).

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> cache = tf.hidden(X)
        >>> mu = block_output(tf, cache.Lam[0], 0)
        >>> mu.shape, bool(np.allclose(mu, cache.mu[0]))
        ((10, 3), True)
    """
    k = _layer(model, layer)
    Lam = np.asarray(Lam)
    if Lam.ndim != 3 or Lam.shape[1:] != (model.L, model.d) or Lam.shape[0] < 1:
        raise ValueError(f"Lam must have shape (n, L, d) = (n, {model.L}, {model.d}) with "
                         f"n >= 1, got {Lam.shape}")
    if not np.all(np.isfinite(Lam)):
        raise ValueError("Lam must be finite (found NaN or inf)")
    for name, x, shape in (("U", U, (model.d, model.d)), ("W", W, (model.d, model.m))):
        if x is not None and np.shape(x) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {np.shape(x)}")
    U = model.U[k] if U is None else U
    W = model.W[k] if W is None else W
    n, L, d = Lam.shape
    S = model.kappa * np.matmul(np.matmul(Lam, U), Lam.transpose(0, 2, 1)) + model._neg
    S = np.exp(S - S.max(axis=2, keepdims=True))
    S /= S.sum(axis=2, keepdims=True)
    O = np.matmul(S, Lam).reshape(n * L, d)
    return model._c * (np.maximum(O @ W, 0.0) @ model.A[k])


def kernel_parts(model, X, layer):
    """``(H'_nu, H^gamma_nu)``: the beta (W) and gamma (U) parts of
    Definition B.5 for ``layer`` (0-based), each nL x nL.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> Hw, Hu = kernel_parts(tf, X, 0)
        >>> bool(np.allclose(Hw + Hu, layer_kernel(tf, X, 0)))
        True
    """
    k = _layer(model, layer)
    c = model._forward(model.check_X(X))
    return parts_from_cache(model, c, k)


def layer_kernel(model, X, layer, *, part="full", kernel="definition"):
    """``H_nu`` of Definition B.5 (``part="full"``), its W part ``H'_nu``
    (``"W"``) or its U part (``"U"``); nL x nL, rows ``p = i L + l``.
    ``kernel="exact"``: the Jacobian Gram ``K_nu`` (nLd x nLd) instead.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> H = layer_kernel(tf, X, 0)
        >>> H.shape, bool(np.allclose(H, H.T))
        ((10, 10), True)
    """
    if kernel_name(kernel) == "exact":
        return exact_kernel(model, X, layer, part=part)
    if part not in ("full", "W", "U"):
        raise ValueError(f"part must be 'full', 'W' or 'U', got {part!r}")
    Hb, Hg = kernel_parts(model, X, layer)
    return Hb + Hg if part == "full" else (Hb if part == "W" else Hg)


def min_eigenvalue(H) -> float:
    """``lambda_min`` of a symmetric matrix (symmetrised first).

        >>> min_eigenvalue(np.array([[2.0, 1.0], [1.0, 2.0]]))
        1.0
    """
    H = np.asarray(H)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or H.size == 0:
        raise ValueError(f"H must be a non-empty square matrix, got shape {H.shape}")
    return float(np.linalg.eigvalsh(0.5 * (H + H.T))[0])


def kernel_eigenvalues(model, X, *, kernel="definition"):
    """Per layer: ``lambda_min(H_nu)`` ("H"), ``lambda_min(H'_nu)`` ("Hprime"),
    ``lambda_min(H'_nu / omega)`` ("lambda", the ``lambda_nu`` of Assumption 5.1),
    ``lambda_max(H'_nu)`` and "pd" (``lambda_min > 1e-10 lambda_max``).

    ``kernel="exact"``: the same numbers for ``K_nu`` and its W part ``K^W_nu``
    (the keys keep their names). ``H' = (omega^2/m) sum_r diag(D_r) O O^T diag(D_r)``
    has rank at most ``m d``, so Assumption 5.1 fails whenever ``n L > m d``;
    ``K^W = (omega^2/m) sum_r (diag(D_r) O O^T diag(D_r)) (x) a_r a_r^T`` has rank at
    most ``m d`` in ``n L d`` rows, so it is singular whenever ``n L > m``.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> ev = kernel_eigenvalues(tf, X)
        >>> len(ev), sorted(ev[0])
        (2, ['H', 'Hprime', 'Hprime_max', 'lambda', 'pd'])
    """
    kernel = kernel_name(kernel)
    c = model._forward(model.check_X(X))
    out = []
    for k in range(model.N):
        Hb, Hg = (parts_from_cache if kernel == "definition" else _exact_from_cache)(model, c, k)
        ev = np.linalg.eigvalsh(0.5 * (Hb + Hb.T))
        lb = float(ev[0])
        out.append({"H": min_eigenvalue(Hb + Hg), "Hprime": lb, "lambda": lb / model.omega,
                    "Hprime_max": float(ev[-1]),
                    # numerically PD: above rounding of the largest eigenvalue
                    "pd": bool(lb > 1e-10 * max(float(ev[-1]), 0.0))})
    return out


def assumption_lambda(model, X, *, kernel="definition") -> float:
    """``lambda = min_nu lambda_min(H'_nu / omega)`` (Assumption 5.1), at the
    model's current parameters (at initialisation for ``theta(0)``);
    ``kernel="exact"`` uses ``K^W_nu`` for ``H'_nu``.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> one = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> bool(assumption_lambda(one, X) > 0)
        True
    """
    return min(e["lambda"] for e in kernel_eigenvalues(model, X, kernel=kernel))


def lemma41(model, X, Y, *, kernel="definition"):
    r"""Lemma 4.1 / B.6 against the exact ``dL/dt = -|grad L|^2`` at the
    current parameters (full batch), with both kernels.

    ``lemma_definition = -sum_nu tr(delta_nu^T H_nu delta_nu)`` (Definition B.5,
    i.e. ``H_nu (x) I_d``; exact adjoints ``delta_nu = dL/dmu_nu``) and
    ``lemma_exact = -sum_nu vec(delta_nu)^T K_nu vec(delta_nu)``, which equals
    ``exact`` up to rounding; ``rel_gap_definition``, ``rel_gap_exact``. The
    keys ``lemma``, ``rel_gap``, ``lemma_W``, ``lemma_U`` (per layer),
    ``rel_gap_W``, ``rel_gap_U`` refer to ``kernel``; ``exact_W[k] = |dL/dW|^2``,
    ``exact_U[k] = |dL/dU|^2``. The exact kernel is skipped (``None``) above
    :data:`MAX_EXACT_ROWS` rows.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> r = lemma41(tf, X, Y)
        >>> r["rel_gap_exact"] < 1e-10
        True
    """
    kernel = kernel_name(kernel)
    X, Y = model.check_XY(X, Y)
    c = model._forward(X)
    grads, deltas = model._backward(c, Y, keep_delta=True)
    n, L, d = c.F.shape
    do_exact = n * L * d <= MAX_EXACT_ROWS
    if kernel == "exact" and not do_exact:
        _exact_from_cache(model, c, 0)       # raises the size error
    eW, eU = [], []
    parts = {"definition": ([], []), "exact": ([], [])}
    for k in range(model.N):
        dU, dW = grads[k]
        eW.append(float(np.vdot(dW, dW)))
        eU.append(float(np.vdot(dU, dU)))
        Hb, Hg = parts_from_cache(model, c, k)
        dl = deltas[k].reshape(-1, d)
        G = dl @ dl.T                                   # <delta_p, delta_q>
        parts["definition"][0].append(float(np.vdot(Hb, G)))
        parts["definition"][1].append(float(np.vdot(Hg, G)))
        if do_exact:
            KW, KU = _exact_from_cache(model, c, k)
            v = dl.ravel()
            parts["exact"][0].append(float(v @ KW @ v))
            parts["exact"][1].append(float(v @ KU @ v))
    exact = -(sum(eW) + sum(eU))

    def rel(a, b):
        return abs(a - b) / abs(b) if b != 0 else 0.0

    out = {"exact": exact, "exact_W": eW, "exact_U": eU, "kernel": kernel}
    for name, (lW, lU) in parts.items():
        if not lW:
            out.update({f"lemma_{name}": None, f"rel_gap_{name}": None})
            continue
        lem = -(sum(lW) + sum(lU))
        out.update({f"lemma_{name}": lem, f"rel_gap_{name}": rel(lem, exact),
                    f"lemma_W_{name}": lW, f"lemma_U_{name}": lU,
                    f"rel_gap_W_{name}": rel(sum(lW), sum(eW)),
                    f"rel_gap_U_{name}": rel(sum(lU), sum(eU))})
    for key in ("lemma", "rel_gap", "lemma_W", "lemma_U", "rel_gap_W", "rel_gap_U"):
        out[key] = out[f"{key}_{kernel}"]
    return out


def kernel_along(result, X, layer, *, part="full"):
    """``H_nu(t)`` of Definition B.5 at every output time of a training run made with
    ``observe=("theta",)``: an array of shape (n_t, nL, nL).

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> from attndyn.numeric.transformer import train
        >>> res = train(tf, (X, Y), T=0.1, n_eval=2, observe=("theta",))
        >>> kernel_along(res, X, 0).shape
        (3, 10, 10)
    """
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
