"""Finite width: the O(1/d) correction to the Gaussian-equivalent potential (issue 16).

Paper 003's Theorem 1 replaces the tied pre-activations ``G_k = (x^T S_k x - Tr S_k) /
sqrt(d)`` by a Gaussian with covariance ``2 q_kl``; at finite ``d`` they are not
Gaussian. Their joint cumulants are those of Gaussian quadratic forms::

    kappa_3(G_k, G_l, G_m)      = 8 Tr(S_k S_l S_m) / d^(3/2)                  (O(d^-1/2))
    kappa_4(G_k, G_l, G_m, G_n) = 8 sum_{sigma in S_3} Tr(S_k S_sigma(l) S_sigma(m) S_sigma(n)) / d^2
                                                                                   (O(1/d)),

and for a loss that is a polynomial of degree <= 4 in ``G`` the cumulant expansion of
``E[loss(G)]`` stops (``E p(G) = exp(sum_n kappa_n d^n / n!) p |_0``):

    Phi_d(S) = Phi(q) + (1/6) sum l_klm(0) kappa_3 + (1/24) sum l_klmn kappa_4
             = Phi(q) + (4/(3 d^(3/2))) sum c3_klm Tr(S_k S_l S_m)
                      + (2/d^2) sum c4_klmn Tr(S_k S_l S_m S_n),

exactly, with ``c3 = d^3 loss/dG^3 at 0`` and ``c4 = d^4 loss/dG^4`` (constants). It is the
population loss itself, so SGD's mean drift is its gradient: with ``dPhi_d/dS_a =
sum_l 2 Gamma_al S_l / d + (4/d^(3/2)) sum c3_alm S_l S_m + (8/d^2) sum c4_almn S_l S_m
S_n``, the finite-width matrix flow in ``t = 4 eta n / d`` is

    dS_a/dt = -(d/2) (dPhi_d/dS_a S_a + S_a dPhi_d/dS_a) - (gamma/2) S_a,

whose Gaussian part is the paper's flow (eq. 11 before projection). The correction
needs the words of length 3 and 4, not only ``q``: at finite ``d`` the potential is
not a function of ``q`` alone.
"""

from __future__ import annotations

import itertools

import numpy as np

from attndyn.numeric.attention.base import Correction, check_model
from attndyn.numeric.attention.tied.runner import theory_rows

__all__ = ["finite_width_coefficients", "finite_width_potential", "finite_width_flow",
           "finite_width_text", "FiniteWidth"]


def finite_width_coefficients(model):
    """``(c3, c4)``: the third derivatives of the loss at ``G = 0`` (``K x K x K``) and its
    fourth derivatives (``K^4``, constant) for a tied ``L = 1`` loss that is a polynomial
    of degree <= 4 in ``G``; ``ValueError`` for any other loss."""
    import sympy as sp

    from attndyn.symbolic.potential import _call_loss, g_array
    model = check_model(model)
    if model.sgd_form != "factors" or model.L != 1 or model.loss is None:
        raise ValueError("the finite-width correction is implemented for tied models with "
                         "L = 1 and a loss callable")
    K = model.K
    G = g_array(1, K)
    syms = [G[0, 0, k] for k in range(K)]
    subs = {sp.Symbol(str(k), real=True): float(v) for k, v in model.params.items()}
    expr = sp.expand(_call_loss(model.loss, G).subs(subs))
    try:
        poly = sp.Poly(expr, *syms)
    except sp.PolynomialError:
        poly = None
    if poly is None or poly.total_degree() > 4 or poly.free_symbols - set(syms):
        raise ValueError("the finite-width correction is exact (and implemented) for losses "
                         "that are polynomials of degree <= 4 in G; this loss is not")
    zero = {s: 0 for s in syms}
    c3 = np.zeros((K,) * 3)
    c4 = np.zeros((K,) * 4)
    for idx in itertools.product(range(K), repeat=3):
        c3[idx] = float(sp.diff(expr, *[syms[i] for i in idx]).subs(zero))
    for idx in itertools.product(range(K), repeat=4):
        c4[idx] = float(sp.diff(expr, *[syms[i] for i in idx]))
    return c3, c4


def finite_width_potential(model, matrices) -> dict:
    """``Phi_d(S) - Phi(q)``, the finite-width correction at the matrices ``S_k``, split in
    its ``kappa_3`` (``O(d^-1/2)``) and ``kappa_4`` (``O(1/d)``) parts."""
    model = check_model(model)
    mats = model.check_matrices(matrices)
    c3, c4 = finite_width_coefficients(model)
    d = mats[0].shape[0]
    K = model.K
    p3 = p4 = 0.0
    for k, l, m in itertools.product(range(K), repeat=3):
        if c3[k, l, m] != 0.0:
            p3 += c3[k, l, m] * np.trace(mats[k] @ mats[l] @ mats[m])
    for k, l, m, n in itertools.product(range(K), repeat=4):
        if c4[k, l, m, n] != 0.0:
            p4 += c4[k, l, m, n] * np.trace(mats[k] @ mats[l] @ mats[m] @ mats[n])
    k3 = 4.0 / (3.0 * d ** 1.5) * p3
    k4 = 2.0 / d ** 2 * p4
    return {"kappa3": float(k3), "kappa4": float(k4), "total": float(k3 + k4)}


def finite_width_flow(model, matrices, t_eval, *, rtol: float = 1e-10, atol: float = 1e-12,
                      method: str = "DOP853", blowup: float = 1e100, kappa3: bool = True,
                      raise_on_failure: bool = False):
    """The tied matrix flow of the finite-d population loss ``Phi_d`` (module docstring):
    the paper's flow plus the ``kappa_3`` and ``kappa_4`` terms. Returns a Trajectory of
    the words of length <= 2 (``status`` as :func:`attndyn.numeric.attention.odesolve.solve_flow`)."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical_words

    from attndyn.numeric.core.results import IntegrationError, Trajectory
    from attndyn.numeric.core.validate import check_t_eval
    from attndyn.numeric.attention.odesolve import solve_flow
    model = check_model(model)
    c3, c4 = finite_width_coefficients(model)
    if not kappa3:
        c3 = np.zeros_like(c3)
    mats = [np.array(m, dtype=float) for m in model.check_matrices(matrices)]
    t_eval = check_t_eval(t_eval)
    K = model.K
    d = mats[0].shape[0]
    tr = list(model.trainable)
    gam = model.weight_decay
    dd = d * d

    def unpack(y):
        S = list(mats)
        for j, a in enumerate(tr):
            S[a] = y[j * dd:(j + 1) * dd].reshape(d, d)
        return S

    def rhs(t, y):
        S = unpack(y)
        q = np.array([[np.sum(S[a] * S[b]) / d for b in range(K)] for a in range(K)])
        Gam = model.gamma(q)
        SS = {(l, m): S[l] @ S[m] for l in range(K) for m in range(K)}
        out = []
        for a in tr:
            P = sum(2.0 * Gam[a, l] * S[l] for l in range(K)) / d
            P = P + (4.0 / d ** 1.5) * sum(c3[a, l, m] * SS[l, m] for l in range(K)
                                           for m in range(K) if c3[a, l, m] != 0.0)
            P = P + (8.0 / d ** 2) * sum(c4[a, l, m, n] * (SS[l, m] @ S[n])
                                         for l in range(K) for m in range(K) for n in range(K)
                                         if c4[a, l, m, n] != 0.0)
            P = 0.5 * (P + P.T)
            PS = P @ S[a]
            out.append((-(d / 2.0) * (PS + PS.T) - (gam / 2.0) * S[a]).ravel())
        return np.concatenate(out) if out else np.zeros(0)
    y0 = np.concatenate([mats[a].ravel() for a in tr]) if tr else np.zeros(0)
    sol = solve_flow(rhs, y0, t_eval, rtol=rtol, atol=atol, method=method, blowup=blowup,
                     what="finite-width tied matrix flow")
    words = [tuple(w) for w in canonical_words(2, model.alphabet)]
    y = np.empty((len(words), sol.t.size))
    for n in range(sol.t.size):
        S = unpack(sol.y[:, n])
        for i, w in enumerate(words):
            y[i, n] = (np.trace(S[w[0]]) if len(w) == 1 else np.sum(S[w[0]] * S[w[1]])) / d
    params = model.params_dict()
    params.update({"d": d, "rtol": rtol, "atol": atol, "method": method,
                   "finite_width": "kappa3+kappa4" if kappa3 else "kappa4"})
    res = Trajectory(t=sol.t, y=y, names=[word_label(w, K) for w in words], words=words,
                     kind="finite_width_flow", params=params, status=sol.status,
                     message=sol.message, diagnostics={"d": d})
    if raise_on_failure and sol.status != 0:
        raise IntegrationError(sol.message)
    return res


def finite_width_text(model) -> str:
    """The finite-width terms of ``Phi_d`` with their order in ``1/d``, one line per
    cumulant: ``sum_words coef * mu_word`` over canonical words (``mu_klm = Tr(S_k S_l
    S_m)/d``; ``coef`` sums ``c3`` or ``c4`` over the orderings with that trace)."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical
    model = check_model(model)
    c3, c4 = finite_width_coefficients(model)
    K = model.K
    lines = []
    for order, c, pref, tag in ((3, c3, "4/(3 sqrt(d))", "kappa_3, O(d^-1/2)"),
                                (4, c4, "2/d", "kappa_4, O(1/d)")):
        terms = {}
        for idx in itertools.product(range(K), repeat=order):
            if c[idx] != 0.0:
                w = tuple(canonical(idx))
                terms[w] = terms.get(w, 0.0) + c[idx]
        terms = {w: v for w, v in terms.items() if v != 0.0}
        if terms:
            body = " + ".join(f"{v:g} {word_label(w, K)}" for w, v in terms.items())
            lines.append(f"Phi_d - Phi += ({pref}) * [{body}]   ({tag})")
    return "\n".join(lines) if lines else "no finite-width terms (a loss of degree <= 2 in G)"


class FiniteWidth(Correction):
    """``correction="finite-d"``: the flow of the finite-d population loss (the
    ``kappa_3`` and ``kappa_4`` terms, :func:`finite_width_flow`; polynomial losses of
    degree <= 4); the matrix-level flow only, no ``eta`` or ``batch``."""

    name = "finite-d"
    needs = ()

    def check(self, theory, order):
        if theory in ("hierarchy", "limit"):
            raise ValueError(f"theory={theory!r} takes correction='none' or 'noise', got "
                             f"{self.name!r}")
        if theory == "flow" and order is not None and order > 2:
            raise ValueError(f"correction={self.name!r} with theory='flow' reports t_k, q_kl "
                             f"(order <= 2); got order={order}; theory='hierarchy' takes "
                             "correction='noise' at any order")

    def apply(self, theory, init, t, *, name, order, check, words, eta=None, batch=None,
              **options):
        S = [W @ W.T for W in theory.model.check_init(init)]
        opts = {k: options.pop(k) for k in ("rtol", "atol", "method") if k in options}
        return theory_rows(theory.model, finite_width_flow(theory.model, S, t, **opts), words)

    def flow(self, theory, matrices, t_eval, *, eta=None, batch=None, order=None, words=None,
             keep_matrices=False, rtol=None, atol=None, raise_on_failure=False, **ignored):
        if order not in (None, 1, 2) or words is not None or keep_matrices:
            raise ValueError(f"correction={self.name!r} reports the words of length <= 2 "
                             "only (order <= 2, no words=, no keep_matrices)")
        kw = {k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None}
        return finite_width_flow(theory.model, matrices, t_eval,
                                 raise_on_failure=raise_on_failure, **kw)
