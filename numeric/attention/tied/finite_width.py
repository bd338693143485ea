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
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.numeric.attention.base import Correction, check_model
from attndyn.numeric.attention.corrections import (MAX_FW_DEGREE, cumulant_terms, edgeworth_terms,
                                                   hermite_moments,
                                                   polynomial_taylor, qf_scale, word_sum,
                                                   word_traces)
from attndyn.numeric.attention.tied.runner import theory_rows

if TYPE_CHECKING:
    from attndyn.numeric.attention.base import Theory
    from attndyn.numeric.attention.odesolve import FlowSolution
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import ArrayLike

# The model is a TiedModel, read as Any: its loss, gamma and token covariance are members of
# the concrete class, which this module does not import. A route of finite_width_route:
# ("polynomial", Taylor tensors) or ("edgeworth", EdgeworthLoss); the gradient of the
# correction by trainable index
_Route = tuple[str, Any]
_Grad = dict[int, np.ndarray]

__all__ = ["finite_width_coefficients", "finite_width_taylor", "finite_width_potential",
           "finite_width_gradient", "finite_width_flow", "finite_width_text", "FiniteWidth",
           "finite_width_route", "EdgeworthLoss", "edgeworth_loss"]

#: the order in 1/d of each cumulant pattern's key in :func:`finite_width_potential`
_ORDER_KEY = {0.5: "kappa3", 1.0: "kappa4", 1.5: "kappa5", 2.0: "kappa6"}


def _check_tied(model: Any) -> Any:
    model = check_model(model)
    if model.sgd_form != "factors" or model.L != 1 or model.loss is None:
        raise ValueError("the finite-width correction is implemented for tied models with "
                         "L = 1 and a loss callable")
    return model


def finite_width_taylor(model: Any) -> list[np.ndarray]:
    """``[c_0, ..., c_D]``, the Taylor tensors ``D^j loss(G = 0)`` of a tied ``L = 1`` loss
    that is a polynomial of degree ``D <= 6`` in ``G`` (the finite-width correction's input);
    ``ValueError`` for any other loss."""
    return polynomial_taylor(_check_tied(model), MAX_FW_DEGREE)


def finite_width_coefficients(model: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(c3, c4)``: the third derivatives of the loss at ``G = 0`` (``K x K x K``) and its
    fourth derivatives (``K^4``, constant) for a tied ``L = 1`` loss that is a polynomial
    of degree <= 4 in ``G``; ``ValueError`` for any other loss (degree 5-6:
    :func:`finite_width_taylor`)."""
    c = polynomial_taylor(_check_tied(model), 4)
    K = model.K
    c3 = c[3] if len(c) > 3 else np.zeros((K,) * 3)
    c4 = c[4] if len(c) > 4 else np.zeros((K,) * 4)
    return c3, c4


def _cumulants(mats: Sequence[np.ndarray], nmax: int, kappa3: bool = True
               ) -> dict[int, np.ndarray]:
    """``{n: kappa_n}`` (unsymmetrised: only their symmetric parts enter) for ``2 <= n <= nmax``."""
    d = mats[0].shape[0]
    T = word_traces(mats, nmax) if nmax >= 2 else {}
    return {n: qf_scale(n, d) * Tn for n, Tn in T.items() if kappa3 or n != 3}


def _pattern_order(lam: Sequence[int]) -> float:
    """The order in ``1/d`` of a cumulant pattern: ``sum_i (n_i/2 - 1)``."""
    return float(sum(n / 2.0 - 1.0 for n in lam))


def finite_width_potential(model: Any, matrices: Sequence[ArrayLike]) -> dict[str, Any]:
    """``Phi_d(S) - Phi(q)``, the finite-width correction at the matrices ``S_k``, exactly,
    split by its order in ``1/d``: ``kappa3`` (``O(d^-1/2)``: ``kappa_3``, and ``kappa_3
    kappa_2`` for degree 5-6), ``kappa4`` (``O(1/d)``: ``kappa_4``, ``kappa_4 kappa_2``,
    ``kappa_3^2``), ``kappa5``, ``kappa6`` (degree 5-6), ``total``; ``patterns`` holds each
    block-size pattern's value (module docstring)."""
    model = _check_tied(model)
    mats = [np.asarray(m, float) for m in model.check_matrices(matrices)]
    c = finite_width_taylor(model)
    terms, _ = cumulant_terms(c, _cumulants(mats, len(c) - 1), gaussian=False)
    parts = {"kappa3": 0.0, "kappa4": 0.0}
    for lam, v in terms.items():
        key = _ORDER_KEY[_pattern_order(lam)]
        parts[key] = parts.get(key, 0.0) + v
    out: dict[str, Any] = {k: float(v) for k, v in parts.items()}
    out["total"] = float(sum(out.values()))
    out["patterns"] = {"+".join(map(str, lam)): float(v) for lam, v in terms.items()}
    return out


def finite_width_gradient(model: Any, matrices: Sequence[ArrayLike], *, kappa3: bool = True,
                          c: Sequence[np.ndarray] | None = None) -> _Grad:
    """``{a: dPhi_c/dS_a}`` for the trainable ``a``: the gradient of the finite-width
    correction ``Phi_d - Phi`` (symmetric matrices; module docstring). ``c``: the Taylor
    tensors, if already at hand. ``kappa3=False`` drops every term with a ``kappa_3``."""
    model = _check_tied(model)
    mats = [np.asarray(m, float) for m in matrices]
    c = finite_width_taylor(model) if c is None else c
    d = mats[0].shape[0]
    out: _Grad = {}
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


def finite_width_route(model: Any, nodes: int | None = None) -> _Route:
    """``("polynomial", c)`` for an ``L = 1`` loss that is a polynomial of degree <= 6 in
    ``G`` (the exact cumulant sum, ``c`` its Taylor tensors), else ``("edgeworth", ew)``
    with ``ew`` the model's :class:`EdgeworthLoss` (through ``O(1/d)``, any smooth loss and
    ``L``; cached per model and ``nodes``)."""
    model = check_model(model)
    if model.sgd_form != "factors" or model.loss is None:
        raise ValueError("the finite-width correction is implemented for tied models with a "
                         "loss callable")
    if model.L == 1 and nodes is None:
        try:
            return "polynomial", polynomial_taylor(model, MAX_FW_DEGREE)
        except ValueError as exc:
            if is_polynomial(model):  # degree > 6: the exact route's limit, stated
                raise ValueError(f"{exc}; pass nodes= for the O(1/d) Edgeworth route") from None
    return "edgeworth", edgeworth_loss(model, EDGEWORTH_NODES if nodes is None else nodes)


def is_polynomial(model: Any) -> bool:
    """Whether an ``L = 1`` loss is a polynomial in ``G`` (any degree)."""
    import sympy as sp
    expr, syms, _ = _merged_loss(model)
    try:
        sp.Poly(sp.expand(expr), *syms)
    except sp.PolynomialError:
        return False
    return True


def _route_gradient(model: Any, route: _Route, kappa3: bool
                    ) -> Callable[[list[np.ndarray]], _Grad]:
    """``S -> {a: dPhi_c/dS_a}`` of the route of :func:`finite_width_route`."""
    kind, obj = route
    if kind == "polynomial":
        return lambda S: finite_width_gradient(model, S, kappa3=kappa3, c=obj)
    return lambda S: obj.gradient(S, kappa3=kappa3)


def finite_width_flow(model: Any, matrices: Sequence[ArrayLike], t_eval: ArrayLike, *,
                      rtol: float = 1e-10, atol: float = 1e-12,
                      method: str = "DOP853", blowup: float = 1e100, kappa3: bool = True,
                      raise_on_failure: bool = False, nodes: int | None = None) -> Trajectory:
    """The tied matrix flow of the finite-d population loss ``Phi_d`` (module docstring):
    the paper's flow plus the gradient of the non-Gaussian part, exact (every cumulant
    term) for an ``L = 1`` polynomial loss of degree <= 6, through ``O(1/d)`` (the
    Edgeworth terms of :class:`EdgeworthLoss`) for any other smooth loss, e.g. the row
    softmax of Fig. 1 (``nodes``: Gauss-Hermite nodes per axis there; passing it forces
    that route). Returns a Trajectory of the words of length <= 2 (``status`` as
    :func:`attndyn.numeric.attention.odesolve.solve_flow`)."""
    from attndyn.numeric.core.results import IntegrationError
    from attndyn.numeric.core.validate import check_t_eval
    from attndyn.numeric.attention.odesolve import solve_flow
    route = finite_width_route(model, nodes)
    model = check_model(model)
    mats = [np.array(m, dtype=float) for m in model.check_matrices(matrices)]
    t_eval = check_t_eval(t_eval)
    K, d, tr, gam = model.K, mats[0].shape[0], list(model.trainable), model.weight_decay
    dd = d * d
    grad_c = _route_gradient(model, route, kappa3)

    def unpack(y: np.ndarray) -> list[np.ndarray]:
        S = list(mats)
        for j, a in enumerate(tr):
            S[a] = y[j * dd:(j + 1) * dd].reshape(d, d)
        return S

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        S = unpack(y)
        q = np.array([[np.sum(S[a] * S[b]) / d for b in range(K)] for a in range(K)])
        Gam = model.gamma(q)
        Pc = grad_c(S)
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
    res = _flow_result(model, sol, unpack, d, route, kappa3,
                       {"rtol": rtol, "atol": atol, "method": method})
    if raise_on_failure and sol.status != 0:
        raise IntegrationError(sol.message)
    return res


def _flow_result(model: Any, sol: FlowSolution, unpack: Callable[[np.ndarray], list[np.ndarray]],
                 d: int, route: _Route, kappa3: bool, opts: dict[str, Any]) -> Trajectory:
    """The Trajectory of the words of length <= 2 along the solution ``sol``."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical_words

    from attndyn.numeric.core.results import Trajectory
    K = model.K
    words = [tuple(w) for w in canonical_words(2, model.alphabet)]
    y = np.empty((len(words), sol.t.size))
    for n in range(sol.t.size):
        S = unpack(sol.y[:, n])
        for i, w in enumerate(words):
            y[i, n] = (np.trace(S[w[0]]) if len(w) == 1 else np.sum(S[w[0]] * S[w[1]])) / d
    params = model.params_dict()
    params.update({"d": d, **opts, "finite_width": "all cumulants" if kappa3 else "without kappa_3"})
    if route[0] == "polynomial":
        params["degree"] = len(route[1]) - 1
    else:
        params.update(finite_width_route="edgeworth O(1/d): kappa_3, kappa_4, kappa_3^2"
                      if kappa3 else "edgeworth O(1/d): kappa_4", nodes=route[1].nodes,
                      directions=route[1].r)
    return Trajectory(t=sol.t, y=y, names=[word_label(w, K) for w in words], words=words,
                      kind="finite_width_flow", params=params, status=sol.status,
                      message=sol.message, diagnostics={"d": d})


def _prefactor(lam: Sequence[int]) -> str:
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


def _pattern_tag(lam: Sequence[int]) -> str:
    order = {0.5: "O(d^-1/2)", 1.0: "O(1/d)", 1.5: "O(d^-3/2)", 2.0: "O(d^-2)"}[
        _pattern_order(lam)]
    parts = [f"kappa_{n}" if lam.count(n) == 1 else f"kappa_{n}^{lam.count(n)}"
             for n in sorted(set(lam), reverse=True)]
    return f"{' '.join(parts)}, {order}"


def finite_width_text(model: Any) -> str:
    """The finite-width terms of ``Phi_d`` with their order in ``1/d``, one line per
    cumulant pattern: ``sum coef * mu_w1 mu_w2 ...`` over canonical words (``mu_klm =
    Tr(S_k S_l S_m)/d``, ``q_kl = Tr(S_k S_l)/d``; ``coef`` sums the Taylor tensor over the
    orderings with those traces)."""
    from attndyn.symbolic.printing import word_label
    from attndyn.symbolic.words import canonical

    from attndyn.numeric.attention.corrections import int_partitions
    model = _check_tied(model)
    c = finite_width_taylor(model)
    K = model.K
    lines = []
    for j in range(3, len(c)):
        for lam in sorted(int_partitions(j), key=lambda x: (len(x), x)):
            if all(n == 2 for n in lam):
                continue
            terms: dict[tuple[tuple[int, ...], ...], float] = {}
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
    """``correction="finite-d"``: the flow of the finite-d population loss
    (:func:`finite_width_flow`): exact (every non-Gaussian cumulant term) for an ``L = 1``
    polynomial loss of degree <= 6, through ``O(1/d)`` (:class:`EdgeworthLoss`) for any
    other smooth loss and any ``L`` (the row softmax of Fig. 1); the matrix-level flow
    only, no ``eta`` or ``batch``."""

    name = "finite-d"
    needs = ()

    def check(self, theory: str, order: int | None) -> None:
        if theory in ("hierarchy", "limit"):
            raise ValueError(f"theory={theory!r} takes correction='none' or 'noise', got "
                             f"{self.name!r}")
        if theory == "flow" and order is not None and order > 2:
            raise ValueError(f"correction={self.name!r} with theory='flow' reports t_k, q_kl "
                             f"(order <= 2); got order={order}; theory='hierarchy' takes "
                             "correction='noise' at any order")

    def apply(self, theory: Theory, init: Any, t: ArrayLike, *, name: str, order: int | None,
              check: Any, words: Sequence[Sequence[int]] | None, eta: float | None = None,
              batch: int | None = None, **options: Any) -> Trajectory:
        S = [W @ W.T for W in theory.model.check_init(init)]
        opts = {k: options.pop(k) for k in ("rtol", "atol", "method") if k in options}
        return theory_rows(theory.model, finite_width_flow(theory.model, S, t, **opts), words)

    def flow(self, theory: Theory, matrices: Sequence[ArrayLike], t_eval: ArrayLike, *,
             eta: float | None = None, batch: int | None = None, order: int | None = None,
             words: Sequence[Sequence[int]] | None = None, keep_matrices: bool = False,
             rtol: float | None = None, atol: float | None = None,
             raise_on_failure: bool = False, **ignored: Any) -> Trajectory:
        if order not in (None, 1, 2) or words is not None or keep_matrices:
            raise ValueError(f"correction={self.name!r} reports the words of length <= 2 "
                             "only (order <= 2, no words=, no keep_matrices)")
        kw: dict[str, Any] = {k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None}
        return finite_width_flow(theory.model, matrices, t_eval,
                                 raise_on_failure=raise_on_failure, **kw)


# ---------------------------------------------------------------------------
# any smooth loss, any L: the Edgeworth correction through O(1/d) (issue 26)

#: default Gauss-Hermite nodes per axis of the Edgeworth route, and the pruned weight
EDGEWORTH_NODES = 12
_PRUNE = 1e-16


def _merged_loss(model: Any) -> tuple[Any, list[Any], list[tuple[int, int, int]]]:
    """``(expr, syms, index)``: the loss with ``G_jik`` merged into ``G_ijk`` (``i <= j``;
    the tied law has ``G_jik = G_ijk``), its variables and their ``(i, j, k)``."""
    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    L, K = model.L, model.K
    G = g_array(L, K)
    expr = call_loss(model.loss, G)
    subs = {sp.Symbol(str(k), real=True): float(v) for k, v in model.params.items()}
    expr = expr.subs(subs).xreplace({G[i, j, k]: G[j, i, k] for i in range(L)
                                     for j in range(i) for k in range(K)})
    index = [(i, j, k) for i in range(L) for j in range(i, L) for k in range(K)]
    syms = [G[i, j, k] for i, j, k in index]
    if expr.free_symbols - set(syms):
        raise ValueError("the finite-d correction needs a loss with numeric parameters only")
    return expr, syms, index


class EdgeworthLoss:
    """The finite-d population loss of a tied model with any smooth loss (any ``L``, token
    covariance ``C``), through ``O(1/d)`` by the Edgeworth expansion (issue 26).

    The loss depends on ``G`` through ``r`` linear combinations ``v = R u`` of the merged
    pre-activations ``u`` (found from sampled gradients, as the numeric potentials do).
    Each ``v_c`` is a centred Gaussian quadratic form in ``(x_1, ..., x_L)`` with matrix
    ``sum_k S_k (x) B_ck`` (``B_ck`` an ``L x L`` token matrix: ``C^(1/2) sym(E_ij)
    C^(1/2)`` combined by ``R``), so its cumulants are exact word traces::

        kappa_n(v_c1, ..., v_cn) ~ 2^(n-1) (n-1)! d^(-n/2) sum_k Tr(S_k1 ... S_kn) Tr(B_c1k1 ... B_cnkn)

    (symmetrised), of order ``d^(1 - n/2)``. With ``Sigma = kappa_2 = A A^T`` (a function
    of ``q`` only) and ``g(xi) = loss(A xi)``, :func:`~attndyn.numeric.attention.corrections.edgeworth_terms`
    gives ``Phi_d - Phi(q)`` from the whitened ``kappa_3, kappa_4`` and the Hermite moments
    of ``g`` on a tensor Gauss-Hermite rule: the ``kappa_3`` term (``O(d^-1/2)``), the
    ``kappa_4`` and ``kappa_3^2`` terms (``O(1/d)``); the remainder is ``O(d^-3/2)``, and
    ``O(d^-2)`` for a loss even in ``G`` (every odd term vanishes: row softmax at ``L = 2``).
    For a polynomial loss of degree <= 4 it equals :func:`finite_width_potential`.

    Examples
    --------
    >>> import numpy as np, attndyn
    >>> from attndyn.numeric.attention.tied.finite_width import EdgeworthLoss, finite_width_potential
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 4)
    >>> S = [np.diag(np.linspace(0.2, 1.0, 6)), np.eye(6)]
    >>> ew = EdgeworthLoss(model)
    >>> a, b = ew.potential(S), finite_width_potential(model, S)
    >>> ew.r, bool(abs(a["kappa4"] - b["kappa4"]) < 1e-10), abs(a["kappa3^2"]) < 1e-12
    (1, True, True)
    """

    def __init__(self, model: Any, nodes: int = EDGEWORTH_NODES, seed: int = 0) -> None:
        import sympy as sp

        from attndyn.numeric.attention.potentials.quadrature import tensor_rule
        model = check_model(model)
        if model.sgd_form != "factors" or model.loss is None:
            raise ValueError("the Edgeworth finite-d correction is implemented for tied models "
                             "with a loss callable")
        if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) \
                or not 4 <= nodes <= 40:
            raise ValueError(f"nodes must be an int in 4..40, got {nodes!r}")
        self.model, self.K, self.L = model, model.K, model.L
        expr, syms, self.index = _merged_loss(model)
        self._f = sp.lambdify([syms], expr, modules="numpy")
        self._df = sp.lambdify([syms], [sp.diff(expr, s) for s in syms], modules="numpy")
        self.R = self._subspace(len(syms), seed)
        self.r = self.R.shape[0]
        if self.r > 5:
            raise ValueError(f"the Edgeworth route integrates on a tensor rule in the loss's "
                             f"{self.r} directions; at most 5 are supported")
        est = nodes ** self.r * (self.r ** 3)
        if est > 6e7:
            raise ValueError(f"nodes={nodes} in {self.r} directions needs ~{est:.1e} products; "
                             "choose fewer nodes")
        if (self.r * self.K) ** 4 > 2e7:
            raise ValueError(f"the token traces of order 4 need ({self.r} x {self.K})^4 entries; "
                             "at most 2e7 are supported")
        rule = tensor_rule(self.r, int(nodes), prune=_PRUNE)
        self.Z, self.w, self.nodes = rule.nodes, rule.weights, int(nodes)
        self._tokens()

    def _subspace(self, P: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 26]))
        grads = np.array([np.asarray(self._df(1.5 * rng.standard_normal(P)), float)
                          for _ in range(max(48, 6 * P))])
        _, s, Vt = np.linalg.svd(grads, full_matrices=False)
        if not np.all(np.isfinite(s)) or s[0] == 0:
            raise ValueError("the loss's gradient is not finite (or zero) at sampled points")
        return np.ascontiguousarray(Vt[:int(np.sum(s > 1e-9 * s[0]))])

    def _tokens(self) -> None:
        """``B[c, k]`` (``r x K x L x L``) and the token traces ``tau_n`` (n = 2, 3, 4)."""
        from scipy.linalg import sqrtm
        L, K = self.L, self.K
        C = np.eye(L) if self.model._C is None else np.array(self.model.C, dtype=float)
        Ch = np.real(sqrtm(C))
        B = np.zeros((self.r, K, L, L))
        for a, (i, j, k) in enumerate(self.index):
            E = np.zeros((L, L))
            E[i, j] = E[j, i] = 1.0 if i == j else 0.5
            B[:, k] += self.R[:, a, None, None] * (Ch @ E @ Ch)[None]
        self.B = B
        self.tau = {2: np.einsum("akij,blji->akbl", B, B),
                    3: np.einsum("akij,bljm,cnmi->akblcn", B, B, B),
                    4: np.einsum("akij,bljm,cnmp,eopi->akblcneo", B, B, B, B)}

    def covariance(self, q: ArrayLike) -> np.ndarray:
        """``Sigma_cc' = 2 sum_kl q_kl Tr(B_ck B_c'l)``: the covariance of ``v``."""
        Sig: np.ndarray = 2.0 * np.einsum("kl,akbl->ab", np.asarray(q, float), self.tau[2])
        return Sig

    def moments(self, q: ArrayLike) -> tuple[np.ndarray, dict[int, Any]]:
        """``(Ainv, m)``: the whitening ``A^-1`` (``Sigma = A A^T``) and the Hermite moments
        of ``g(xi) = loss(R^T A xi)`` on the rule."""
        Sig = self.covariance(q)
        try:
            A = np.linalg.cholesky(Sig)
        except np.linalg.LinAlgError:
            raise ValueError("the finite-d correction needs a definite covariance of the loss's "
                             f"{self.r} directions at this q") from None
        U = (self.Z @ A.T) @ self.R
        g = np.asarray(self._f(U.T), dtype=float)
        g = np.broadcast_to(g, (self.Z.shape[0],))
        if not np.all(np.isfinite(g)):
            raise ValueError("the loss is not finite at a quadrature node")
        return np.linalg.inv(A), hermite_moments(g, self.Z, self.w, 6)

    def _kappas(self, T: dict[int, np.ndarray], d: int, Ainv: np.ndarray
                ) -> dict[int, np.ndarray]:
        """The whitened ``K3``, ``K4`` from the word traces ``T[n]`` (``K^n``)."""
        out: dict[int, np.ndarray] = {}
        for n in (3, 4):
            letters = "abceghij"[:n]
            ks = "pqrstuvw"[:n]
            tau_sub = "".join(c + k for c, k in zip(letters, ks))
            kv = qf_scale(n, d) * np.einsum(f"{ks},{tau_sub}->{letters}", T[n], self.tau[n])
            for ax in range(n):
                kv = np.moveaxis(np.tensordot(Ainv, kv, axes=(1, ax)), 0, ax)
            out[n] = kv
        return out

    def terms_at(self, q: ArrayLike, T: dict[int, np.ndarray], d: int, kappa3: bool = True
                 ) -> tuple[dict[str, float], np.ndarray, np.ndarray, np.ndarray]:
        """``(terms, G3, G4, Ainv)`` at overlaps ``q`` and word traces ``T``."""
        Ainv, m = self.moments(q)
        kap = self._kappas(T, d, Ainv)
        terms, G3, G4 = edgeworth_terms(m, kap[3], kap[4], kappa3=kappa3)
        terms["gaussian"] = m[0]
        return terms, G3, G4, Ainv

    @staticmethod
    def _q(mats: Sequence[np.ndarray]) -> np.ndarray:
        d = mats[0].shape[0]
        return np.array([[np.sum(a * b) / d for b in mats] for a in mats])

    def potential(self, matrices: Sequence[ArrayLike]) -> dict[str, float]:
        """``Phi(q)`` (``gaussian``, on the rule) and the Edgeworth terms of ``Phi_d - Phi``
        (``kappa3``, ``kappa4``, ``kappa3^2``, ``total``) at the matrices ``S_k``."""
        mats = [np.asarray(m, float) for m in self.model.check_matrices(matrices)]
        terms, _, _, _ = self.terms_at(self._q(mats), word_traces(mats, 4), mats[0].shape[0])
        terms["total"] = terms["kappa3"] + terms["kappa4"] + terms["kappa3^2"]
        return {k: float(v) for k, v in terms.items()}

    def gradient(self, matrices: Sequence[ArrayLike], *, kappa3: bool = True,
                 rel_step: float = 1e-4) -> _Grad:
        """``{a: dPhi_c/dS_a}`` for the trainable ``a`` (symmetric): the word traces'
        part exactly, the part through ``q`` (the whitening and the moments) by central
        differences in each ``q_al`` (step ``rel_step * max |q|``)."""
        if not 0.0 < rel_step < 0.1:
            raise ValueError(f"rel_step must be in (0, 0.1), got {rel_step!r}")
        mats = [np.asarray(m, float) for m in matrices]
        d, K = mats[0].shape[0], self.K
        q = self._q(mats)
        T = word_traces(mats, 4)
        _, G3, G4, Ainv = self.terms_at(q, T, d, kappa3)
        gT: dict[int, Any] = {}
        for n, G in ((3, G3), (4, G4)):
            for ax in range(n):  # back through the whitening
                G = np.moveaxis(np.tensordot(Ainv.T, G, axes=(1, ax)), 0, ax)
            letters, ks = "abceghij"[:n], "pqrstuvw"[:n]
            tau_sub = "".join(c + k for c, k in zip(letters, ks))
            g = qf_scale(n, d) * np.einsum(f"{letters},{tau_sub}->{ks}", G, self.tau[n])
            gT[n] = sum(np.transpose(g, np.roll(np.arange(n), s)) for s in range(n)) / n
        h = rel_step * max(float(np.max(np.abs(q))), 1e-12)

        def total(qq: np.ndarray) -> float:
            tt = self.terms_at(qq, T, d, kappa3)[0]
            return tt["kappa3"] + tt["kappa4"] + tt["kappa3^2"]
        out: _Grad = {}
        for a in self.model.trainable:
            P = sum(n * word_sum(gT[n][a], mats) for n in (3, 4))
            for l in range(K):
                E = np.zeros((K, K))
                E[a, l] = E[l, a] = h
                dF = (total(q + E) - total(q - E)) / (2.0 * h)
                P = P + (2.0 if l == a else 1.0) * dF * mats[l] / d
            out[a] = 0.5 * (P + P.T)
        return out


_EDGEWORTH_CACHE: dict[tuple[int, int], EdgeworthLoss] = {}


def edgeworth_loss(model: Any, nodes: int = EDGEWORTH_NODES) -> EdgeworthLoss:
    """The model's :class:`EdgeworthLoss` (built once per model and ``nodes``; the cache
    holds the last few models, keyed by identity)."""
    key = (id(model), int(nodes))
    hit = _EDGEWORTH_CACHE.get(key)
    if hit is not None and hit.model is model:
        return hit
    ew = EdgeworthLoss(model, nodes)
    if len(_EDGEWORTH_CACHE) >= 8:
        _EDGEWORTH_CACHE.pop(next(iter(_EDGEWORTH_CACHE)))
    _EDGEWORTH_CACHE[key] = ew
    return ew
