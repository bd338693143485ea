"""Finite width: the exact finite-d population loss of a polynomial loss (issues 16, 27).

Paper 003's Theorem 1 replaces the tied pre-activations ``G_k = (x^T S_k x - Tr S_k) /
sqrt(d)`` by a Gaussian with covariance ``2 q_kl``; at finite ``d`` they are not
Gaussian. Their joint cumulants are those of Gaussian quadratic forms::

    kappa_n(G_k1, ..., G_kn) = 2^(n-1) sum_{sigma in S_(n-1)} Tr(S_k1 S_sigma(k2) ... S_sigma(kn)) / d^(n/2),

of order ``d^(1 - n/2)`` (``kappa_3 ~ d^-1/2``, ``kappa_4 ~ 1/d``, ...). For a loss that is a
polynomial of degree ``D`` in ``G`` the cumulant expansion of ``E[loss(G)]`` stops
(``E p(G) = exp(sum_n kappa_n . d^n / n!) p |_0``): with ``c_j = D^j loss(0)``,

    Phi_d(S) = sum_lambda <c_|lambda|, (x)_i kappa_(n_i)> / (prod_i n_i! prod_n mult_n!),

over the block-size patterns ``lambda`` (parts ``>= 2``, ``|lambda| <= D``). The patterns of
2's only are the Gaussian-equivalent ``Phi(q)``; the rest is the finite-width correction:
for ``D <= 4`` the ``kappa_3`` and ``kappa_4`` terms,

    Phi_d - Phi = (4/(3 d^(3/2))) sum c3_klm Tr(S_k S_l S_m) + (2/d^2) sum c4_klmn Tr(S_k S_l S_m S_n),

and for ``D = 5, 6`` (the h3 teacher-student loss) also ``kappa_3 kappa_2`` (``O(d^-1/2)``),
``kappa_4 kappa_2`` and ``kappa_3^2`` (``O(1/d)``), ``kappa_5`` (``O(d^-3/2)``) and ``kappa_6``
(``O(d^-2)``). This is the population loss itself, exactly, so SGD's mean drift is its
gradient: with ``dPhi_d/dS_a = sum_n n 2^(n-1) (n-1)! d^(-n/2) sum_w g_n[a, w] S_w1 ...
S_w(n-1)`` (``g_n = dPhi_d/dkappa_n``), the finite-width matrix flow in ``t = 4 eta n / d`` is

    dS_a/dt = -(d/2) (dPhi_d/dS_a S_a + S_a dPhi_d/dS_a) - (gamma/2) S_a,

whose Gaussian part is the paper's flow (eq. 11 before projection). The correction
needs the words of length 3 to ``D``, not only ``q``: at finite ``d`` the potential is
not a function of ``q`` alone.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from attndyn.numeric.attention.base import Correction, check_model
from attndyn.numeric.attention.corrections import (MAX_FW_DEGREE, cumulant_terms,
                                                   polynomial_taylor, qf_scale, word_sum,
                                                   word_traces)
from attndyn.numeric.attention.tied.runner import theory_rows

__all__ = ["finite_width_coefficients", "finite_width_taylor", "finite_width_potential",
           "finite_width_gradient", "finite_width_flow", "finite_width_text", "FiniteWidth"]

#: the order in 1/d of each cumulant pattern's key in :func:`finite_width_potential`
_ORDER_KEY = {0.5: "kappa3", 1.0: "kappa4", 1.5: "kappa5", 2.0: "kappa6"}


def _check_tied(model):
    model = check_model(model)
    if model.sgd_form != "factors" or model.L != 1 or model.loss is None:
        raise ValueError("the finite-width correction is implemented for tied models with "
                         "L = 1 and a loss callable")
    return model


def finite_width_taylor(model) -> list:
    """``[c_0, ..., c_D]``, the Taylor tensors ``D^j loss(G = 0)`` of a tied ``L = 1`` loss
    that is a polynomial of degree ``D <= 6`` in ``G`` (the finite-width correction's input);
    ``ValueError`` for any other loss."""
    return polynomial_taylor(_check_tied(model), MAX_FW_DEGREE)


def finite_width_coefficients(model):
    """``(c3, c4)``: the third derivatives of the loss at ``G = 0`` (``K x K x K``) and its
    fourth derivatives (``K^4``, constant) for a tied ``L = 1`` loss that is a polynomial
    of degree <= 4 in ``G``; ``ValueError`` for any other loss (degree 5-6:
    :func:`finite_width_taylor`)."""
    c = polynomial_taylor(_check_tied(model), 4)
    K = model.K
    c3 = c[3] if len(c) > 3 else np.zeros((K,) * 3)
    c4 = c[4] if len(c) > 4 else np.zeros((K,) * 4)
    return c3, c4


def _cumulants(mats, nmax, kappa3=True):
    """``{n: kappa_n}`` (unsymmetrised: only their symmetric parts enter) for ``2 <= n <= nmax``."""
    d = mats[0].shape[0]
    T = word_traces(mats, nmax) if nmax >= 2 else {}
    return {n: qf_scale(n, d) * Tn for n, Tn in T.items() if kappa3 or n != 3}


def _pattern_order(lam) -> float:
    """The order in ``1/d`` of a cumulant pattern: ``sum_i (n_i/2 - 1)``."""
    return float(sum(n / 2.0 - 1.0 for n in lam))


def finite_width_potential(model, matrices) -> dict:
    """``Phi_d(S) - Phi(q)``, the finite-width correction at the matrices ``S_k``, exactly,
    split by its order in ``1/d``: ``kappa3`` (``O(d^-1/2)``: ``kappa_3``, and ``kappa_3
    kappa_2`` for degree 5-6), ``kappa4`` (``O(1/d)``: ``kappa_4``, ``kappa_4 kappa_2``,
    ``kappa_3^2``), ``kappa5``, ``kappa6`` (degree 5-6), ``total``; ``patterns`` holds each
    block-size pattern's value (module docstring)."""
    model = _check_tied(model)
    mats = [np.asarray(m, float) for m in model.check_matrices(matrices)]
    c = finite_width_taylor(model)
    terms, _ = cumulant_terms(c, _cumulants(mats, len(c) - 1), gaussian=False)
    out = {"kappa3": 0.0, "kappa4": 0.0}
    for lam, v in terms.items():
        key = _ORDER_KEY[_pattern_order(lam)]
        out[key] = out.get(key, 0.0) + v
    out = {k: float(v) for k, v in out.items()}
    out["total"] = float(sum(out.values()))
    out["patterns"] = {"+".join(map(str, lam)): float(v) for lam, v in terms.items()}
    return out


def finite_width_gradient(model, matrices, *, kappa3: bool = True, c=None) -> dict:
    """``{a: dPhi_c/dS_a}`` for the trainable ``a``: the gradient of the finite-width
    correction ``Phi_d - Phi`` (symmetric matrices; module docstring). ``c``: the Taylor
    tensors, if already at hand. ``kappa3=False`` drops every term with a ``kappa_3``."""
    model = _check_tied(model)
    mats = [np.asarray(m, float) for m in matrices]
    c = finite_width_taylor(model) if c is None else c
    d = mats[0].shape[0]
    out = {}
    if len(c) <= 3:
        return {a: np.zeros((d, d)) for a in model.trainable}
    _, grads = cumulant_terms(c, _cumulants(mats, len(c) - 1, kappa3), gaussian=False)
    for a in model.trainable:
        P = np.zeros((d, d))
        for n, g in grads.items():
            if np.any(g[a] != 0.0):
                P = P + n * qf_scale(n, d) * word_sum(g[a], mats)
        out[a] = 0.5 * (P + P.T)
    return out


def finite_width_flow(model, matrices, t_eval, *, rtol: float = 1e-10, atol: float = 1e-12,
                      method: str = "DOP853", blowup: float = 1e100, kappa3: bool = True,
                      raise_on_failure: bool = False):
    """The tied matrix flow of the finite-d population loss ``Phi_d`` (module docstring):
    the paper's flow plus the gradient of every non-Gaussian cumulant term (polynomial
    losses of degree <= 6). Returns a Trajectory of the words of length <= 2 (``status``
    as :func:`attndyn.numeric.attention.odesolve.solve_flow`)."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical_words

    from attndyn.numeric.core.results import IntegrationError, Trajectory
    from attndyn.numeric.core.validate import check_t_eval
    from attndyn.numeric.attention.odesolve import solve_flow
    model = _check_tied(model)
    c = finite_width_taylor(model)
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
        Pc = finite_width_gradient(model, S, kappa3=kappa3, c=c)
        out = []
        for a in tr:
            P = sum(2.0 * Gam[a, l] * S[l] for l in range(K)) / d
            P = 0.5 * (P + P.T) + Pc[a]
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
                   "finite_width": "all cumulants" if kappa3 else "without kappa_3",
                   "degree": len(c) - 1})
    res = Trajectory(t=sol.t, y=y, names=[word_label(w, K) for w in words], words=words,
                     kind="finite_width_flow", params=params, status=sol.status,
                     message=sol.message, diagnostics={"d": d})
    if raise_on_failure and sol.status != 0:
        raise IntegrationError(sol.message)
    return res


def _prefactor(lam) -> str:
    """The printed prefactor of a pattern: ``coef prod 2^(n-1) (n-1)!`` over ``d`` to its order."""
    import math
    f = Fraction(1)
    for n in lam:
        f *= Fraction(2 ** (n - 1) * math.factorial(n - 1), math.factorial(n))
    for v in {n: lam.count(n) for n in set(lam)}.values():
        f /= math.factorial(v)
    order = _pattern_order(lam)
    dstr = {0.5: "sqrt(d)", 1.0: "d", 1.5: "d^(3/2)", 2.0: "d^2"}[order]
    return f"{f.numerator}/({f.denominator} {dstr})" if f.denominator != 1 \
        else f"{f.numerator}/{dstr}"


def _pattern_tag(lam) -> str:
    order = {0.5: "O(d^-1/2)", 1.0: "O(1/d)", 1.5: "O(d^-3/2)", 2.0: "O(d^-2)"}[
        _pattern_order(lam)]
    parts = [f"kappa_{n}" if lam.count(n) == 1 else f"kappa_{n}^{lam.count(n)}"
             for n in sorted(set(lam), reverse=True)]
    return f"{' '.join(parts)}, {order}"


def finite_width_text(model) -> str:
    """The finite-width terms of ``Phi_d`` with their order in ``1/d``, one line per
    cumulant pattern: ``sum coef * mu_w1 mu_w2 ...`` over canonical words (``mu_klm =
    Tr(S_k S_l S_m)/d``, ``q_kl = Tr(S_k S_l)/d``; ``coef`` sums the Taylor tensor over the
    orderings with those traces)."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical

    from attndyn.numeric.attention.corrections import _int_partitions
    model = _check_tied(model)
    c = finite_width_taylor(model)
    K = model.K
    lines = []
    for j in range(3, len(c)):
        for lam in sorted(_int_partitions(j), key=lambda x: (len(x), x)):
            if all(n == 2 for n in lam):
                continue
            terms = {}
            for idx in itertools.product(range(K), repeat=j):
                if c[j][idx] == 0.0:
                    continue
                blocks, off = [], 0
                for n in lam:
                    blocks.append(tuple(canonical(idx[off:off + n])))
                    off += n
                key = tuple(sorted(blocks, key=lambda w: (-len(w), w)))
                terms[key] = terms.get(key, 0.0) + c[j][idx]
            terms = {w: v for w, v in terms.items() if v != 0.0}
            if terms:
                body = " + ".join(f"{v:g} " + " ".join(word_label(w, K) for w in ws)
                                  for ws, v in terms.items())
                lines.append(f"Phi_d - Phi += ({_prefactor(lam)}) * [{body}]   "
                             f"({_pattern_tag(lam)})")
    return "\n".join(lines) if lines else "no finite-width terms (a loss of degree <= 2 in G)"


class FiniteWidth(Correction):
    """``correction="finite-d"``: the flow of the exact finite-d population loss (every
    non-Gaussian cumulant term, :func:`finite_width_flow`; polynomial losses of degree
    <= 6); the matrix-level flow only, no ``eta`` or ``batch``."""

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
