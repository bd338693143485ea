r"""Lemma B.4 of paper 000 implemented from its formulas, and checks.

Notation: block ``nu`` (0-based index ``k = nu - 1``) acts on
``Lambda = Lambda_{nu-1,i}`` (L x d); ``sigma_p`` is row ``l`` of its
attention matrix, ``J_p = diag(sigma_p) - sigma_p sigma_p^T`` the softmax
Jacobian, ``o_p = Lambda^T sigma_p``, ``D_p = diag(1{W^T o_p > 0})``,
``c = omega / sqrt(m)`` and ``delta_{nu,p} = dL/dmu_{nu,p}``.

Part 2 (exact as printed)::

    dL/dw_r = c sum_p <delta_p, a_r> 1{w_r^T o_p > 0} o_p

Part 1 (exact as printed; ``vec`` row-major)::

    dL/dvec(U) = c kappa sum_p (Lambda_l (x) Lambda)^T J_p Lambda g'_p,
    g'_p = sum_r <delta_p, a_r> 1{o_p^T w_r > 0} w_r = W D_p A delta_p

Part 3. ``delta_N = (2 eps / n)(F - Y)`` is right. For ``nu < N`` the
printed ``(2 eps/n)(I + diag(G_{nu,p}))(F_p - Y_p)`` with ``G`` containing
``dL/dmu_{nu+1}`` is quadratic in the residual and cannot be a derivative; it
is read here as the recursion ``delta_{nu,p} = (I + G_{nu+1,p}) delta_{nu+1,p}``
with the d x d matrix (block ``nu + 1``'s quantities)

.. math:: G_p = c\,(\sigma_{p,l} I + \kappa U \Lambda^\top
          \mathrm{diag}(1 - e_l/2) J_p \Lambda)\, W D_p A

(``form="lemma"``). The exact adjoint is (``form="exact"``)

.. math:: \delta_{\nu-1, (i,l')} = \delta_{\nu,(i,l')}
      + \sum_{l \ge l'} \big[\sigma_{(i,l),l'}\, g_{(i,l)}
      + \kappa\, y_{(i,l),l'}\, U^\top \Lambda_l\big]
      + \kappa\, U \Lambda^\top y_{(i,l')},

with ``g_p = c W D_p A delta_{nu,p}`` and ``y_p = J_p Lambda g_p``: the
value, key and query paths of every later token ``l >= l'``. The lemma keeps
only the same-token (``l = l'``) part and there prints ``diag(1 - e_l/2)``
where the same-token Jacobian has ``U Lambda^T J_p Lambda + U^T Lambda_l
e_l^T J_p Lambda`` (``= U Lambda^T diag(1 + e_l) J_p Lambda`` for symmetric
``U``). Both agree when ``L = 1`` (then ``J_p = 0``) or ``N = 1``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lemma_gradients", "lemma_adjoints", "finite_difference_gradients",
           "kink_margin", "relative_error", "flatten"]


def _layer_terms(model, c, k, delta):
    """g_p (nL, d) and y_p (n, L, L) of block k for the adjoint delta (n, L, d)."""
    n, L, d = delta.shape
    W, A = model.W[k], model.A[k]
    Dmask = c.Z[k] > 0
    g = ((delta.reshape(n * L, d) @ A.T) * Dmask) @ W.T
    g *= model._c
    g = g.reshape(n, L, d)
    Lam, P = c.Lam[k], c.P[k]
    u = np.einsum("ijd,ild->ilj", Lam, g)              # u_p = Lambda g_p
    y = P * (u - np.einsum("ilj,ilj->il", P, u)[..., None])  # J_p u_p
    return g, y


def lemma_adjoints(model, c, Y, *, form="exact"):
    """``delta_nu = dL/dmu_nu`` for every block from Lemma B.4 part 3.

    ``form="exact"``: the corrected recursion with every path (see module
    docstring); ``form="lemma"``: the printed same-token recursion with
    ``diag(1 - e_l/2)``. Returns a list over layers of (n, L, d) arrays.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> deltas = lemma_adjoints(tf, tf.hidden(X), Y)
        >>> len(deltas), deltas[0].shape
        (2, (5, 2, 3))
    """
    if form not in ("exact", "lemma"):
        raise ValueError(f"form must be 'exact' or 'lemma', got {form!r}")
    if np.shape(Y) != c.F.shape:  # (1, L, d) or (d,) would broadcast against F
        raise ValueError(f"Y must have the shape of the cached output F, {c.F.shape}, got "
                         f"{np.shape(Y)}")
    n, L, d = c.F.shape
    kap = model.kappa
    deltas = [None] * model.N
    delta = (2.0 * model.eps / n) * (c.F - Y)
    deltas[-1] = delta
    half = np.ones((L, L))
    np.fill_diagonal(half, 0.5)
    for k in range(model.N - 1, 0, -1):
        U, Lam, P = model.U[k], c.Lam[k], c.P[k]
        g, y = _layer_terms(model, c, k, delta)
        if form == "exact":
            jt = np.einsum("ilj,ild->ijd", P, g)                               # value
            jt += kap * (np.einsum("ilj,ild->ijd", y, Lam) @ U)                 # key
            jt += kap * (np.einsum("ilj,ijd->ild", y, Lam) @ U.T)               # query
        else:
            sig_ll = np.einsum("ill->il", P)[..., None]
            jt = sig_ll * g + kap * (np.einsum("ilj,ijd->ild", y * half, Lam) @ U.T)
        delta = delta + jt
        deltas[k - 1] = delta
    return deltas


def lemma_gradients(model, X, Y, *, form="lemma"):
    """Lemma B.4 parts 1 and 2 evaluated with the adjoints of part 3.

    ``form="lemma"`` uses part 3 as printed (same-token recursion),
    ``form="exact"`` the corrected adjoint. Returns the same layout as
    :meth:`Transformer.gradients` (list over layers of ``{"U", "W"}``).

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> g = lemma_gradients(tf, X, Y, form="exact")
        >>> len(g), sorted(g[0])
        (2, ['U', 'W'])
        >>> relative_error(g, tf.gradients(X, Y)) < 1e-12
        True
    """
    X, Y = model.check_XY(X, Y)
    c = model._forward(X)
    deltas = lemma_adjoints(model, c, Y, form=form)
    out = []
    for k in range(model.N):
        delta = deltas[k]
        n, L, d = delta.shape
        Dmask = c.Z[k] > 0
        coef = (delta.reshape(n * L, d) @ model.A[k].T) * Dmask        # <delta_p, a_r> 1{.}
        dW = model._c * np.einsum("pd,pr->dr", c.O[k], coef)          # part 2
        gprime = (coef @ model.W[k].T).reshape(n, L, d)                # g'_p
        Lam, P = c.Lam[k], c.P[k]
        u = np.einsum("ijd,ild->ilj", Lam, gprime)
        v = P * (u - np.einsum("ilj,ilj->il", P, u)[..., None])        # J_p Lambda g'_p
        dU = model._c * model.kappa * np.einsum("ila,ijb,ilj->ab", Lam, Lam, v)  # part 1
        out.append({"U": dU, "W": dW})
    return out


def flatten(grads) -> np.ndarray:
    """A list of ``{"U", "W"}`` dicts flattened like :meth:`Transformer.theta`.

        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((6, 2, 3))
        >>> Y = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> g = tf.gradients(X, Y)
        >>> flatten(g).shape == tf.theta().shape
        True
    """
    return np.concatenate([np.concatenate([g["U"].ravel(), g["W"].ravel()]) for g in grads])


def relative_error(a, b) -> float:
    """``||a - b|| / max(||a||, ||b||)`` over flattened gradient lists or arrays.

        >>> round(relative_error(np.array([3.0, 4.0]), np.array([3.0, 4.5])), 6)
        0.09245
        >>> round(float(0.5 / np.hypot(3.0, 4.5)), 6)
        0.09245
    """
    a = flatten(a) if isinstance(a, list) else np.asarray(a).ravel()
    b = flatten(b) if isinstance(b, list) else np.asarray(b).ravel()
    if a.size != b.size:  # else (3,) against (1,) broadcast and could read as equal
        raise ValueError(f"a and b must have the same number of entries, got {a.size} and "
                         f"{b.size}")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if not (np.isfinite(na) and np.isfinite(nb)):  # max() dropped a NaN norm: 0 for NaN
        return float("nan")
    s = max(na, nb)
    return float(np.linalg.norm(a - b) / s) if s > 0 else 0.0


def kink_margin(model, X) -> float:
    """Smallest ``|o_p^T w_r|`` over all layers, tokens and units: a finite
    difference of step ``h`` is free of ReLU kinks when the pre-activations
    move by less than this.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> kink_margin(tf, X) > 0
        True
    """
    c = model._forward(model.check_X(X))
    return float(min(np.abs(z).min() for z in c.Z))


def finite_difference_gradients(model, X, Y, *, h=1e-5, richardson=True):
    """Central finite differences of :meth:`Transformer.loss` in every entry
    of ``theta`` (with one Richardson step: error O(h^4)). Slow: for tests.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> fd = finite_difference_gradients(tf, X, Y)
        >>> relative_error(fd, tf.gradients(X, Y)) < 1e-7
        True
    """
    if isinstance(h, bool) or not isinstance(h, (int, float, np.integer, np.floating)):
        raise TypeError(f"h must be a real number > 0 (finite-difference step), got {h!r}")
    if not 0 < h <= 1.7976931348623157e308:  # NaN fails too
        raise ValueError(f"h must be a finite real number > 0 (finite-difference step), "
                         f"got {h}")
    h = float(h)
    X, Y = model.check_XY(X, Y)
    m = model.copy()
    th0 = model.theta()

    def L_at(th):
        m.set_theta(th)
        R = m._forward(X).F - Y
        return float(np.vdot(R, R) / X.shape[0])

    g = np.empty_like(th0)
    for j in range(th0.size):
        e = np.zeros_like(th0)
        e[j] = h
        d1 = (L_at(th0 + e) - L_at(th0 - e)) / (2 * h)
        if richardson:
            d2 = (L_at(th0 + 2 * e) - L_at(th0 - 2 * e)) / (4 * h)
            g[j] = (4 * d1 - d2) / 3
        else:
            g[j] = d1
    out, off = [], 0
    d, mm = model.d, model.m
    for _ in range(model.N):
        u = g[off:off + d * d].reshape(d, d)
        off += d * d
        w = g[off:off + d * mm].reshape(d, mm)
        off += d * mm
        out.append({"U": u, "W": w})
    return out
