"""Shared mathematics of the finite-learning-rate corrections (issue 16), used by the tied,
untied and direct-S noise terms: moments of Gaussian quadratic forms (:func:`qf_moment`,
Isserlis over set partitions), the quadratic form of a loss of degree <= 2 in ``G``
(:func:`quadratic_loss`: ``loss = G^T H G + b^T G + c``), running batch means with their
standard errors (:class:`BatchMeans`) and the printed check tables. The corrections
themselves are objects of each parameterisation's folder, listed by its theory."""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from attndyn.numeric.attention.base import check_model

if TYPE_CHECKING:
    from attndyn.numeric.core.types import ArrayLike

__all__ = ["qf_moment", "quadratic_loss", "BatchMeans", "check_table", "OBSERVABLES",
           "MAX_FW_DEGREE", "polynomial_taylor", "shift_taylor", "cumulant_terms", "qf_scale",
           "word_traces", "word_sum"]


#: the one-step observables, by kind: ("t", k), ("q", k, k), ("q", k, l)
OBSERVABLES = ("t", "q_self", "q_cross")


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    """All set partitions of the list ``items`` (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first]] + part
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


def qf_moment(mats: Sequence[ArrayLike], centred: Sequence[bool] | None = None) -> float:
    """``E[prod_i (x^T Z_i x - [centred_i] Tr Z_i)]`` for ``x ~ N(0, I_d)``, exactly.

    Joint cumulants of Gaussian quadratic forms with symmetric ``Z_i``:
    ``kappa(Q_1) = Tr Z_1`` and, for ``n >= 2``,
    ``kappa(Q_1, ..., Q_n) = 2^(n-1) sum_{sigma in S_(n-1)} Tr(Z_1 Z_sigma(2) ... Z_sigma(n))``;
    moments are sums over set partitions of products of cumulants. A centred
    factor has first cumulant 0. Up to 6 factors (Bell(6) = 203 partitions).
    """
    arrs = [np.asarray(m, dtype=np.float64) for m in mats]
    n = len(arrs)
    if n > 6:
        raise ValueError(f"qf_moment: at most 6 factors, got {n}")
    centred = [False] * n if centred is None else [bool(c) for c in centred]
    if len(centred) != n:
        raise ValueError("centred must have one flag per matrix")
    sym = [0.5 * (m + m.T) for m in arrs]
    cache: dict[tuple[int, ...], float] = {}

    def kappa(block: list[int]) -> float:
        key = tuple(block)
        if key in cache:
            return cache[key]
        if len(block) == 1:
            i = block[0]
            v = 0.0 if centred[i] else float(np.trace(sym[i]))
        else:
            f, rest = block[0], block[1:]
            v = 0.0
            for perm in itertools.permutations(rest):
                P = sym[f]
                for j in perm:
                    P = P @ sym[j]
                v += float(np.trace(P))
            v *= 2.0 ** (len(block) - 1)
        cache[key] = v
        return v

    total = 0.0
    for part in _partitions(list(range(n))):
        prod = 1.0
        for block in part:
            prod *= kappa(sorted(block))
            if prod == 0.0:
                break
        total += prod
    return total


def quadratic_loss(model: object) -> tuple[np.ndarray, np.ndarray]:
    """``(H, b)`` of a tied loss that is a polynomial of degree <= 2 in ``G`` (``L = 1``):
    ``dloss/dG_k = sum_l H_kl G_l + b_k`` exactly. ``ValueError`` otherwise."""
    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    model = check_model(model)
    if model.L != 1:
        raise ValueError(f"the exact one-step noise term needs L = 1, got L = {model.L}")
    if model.loss is None:
        raise ValueError("the exact one-step noise term needs the model's loss callable")
    K = model.K
    G = g_array(1, K)
    syms = [G[0, 0, k] for k in range(K)]
    expr = call_loss(model.loss, G)
    subs = {sp.Symbol(str(k), real=True): float(v) for k, v in model.params.items()}
    expr = sp.expand(expr.subs(subs))
    try:
        poly = sp.Poly(expr, *syms)
    except sp.PolynomialError:
        poly = None
    if poly is None or poly.total_degree() > 2 or poly.free_symbols - set(syms):
        raise ValueError("the exact finite-d one-step prediction needs a loss that is a "
                         "polynomial of degree <= 2 in G (e.g. (G1 - G2)^2); this loss is not; "
                         "use exact=False (leading order in 1/d)")
    H = np.zeros((K, K))
    b = np.zeros(K)
    for k in range(K):
        dk = sp.diff(expr, syms[k])
        b[k] = float(dk.subs({s: 0 for s in syms}))
        for l in range(K):
            H[k, l] = float(sp.diff(dk, syms[l]))
    return H, b


class BatchMeans:
    """Running means and standard errors of per-batch one-step changes split by the power
    of ``eta``: :meth:`add` takes ``(n_batches, n_obs, n_orders)`` parts, :meth:`result`
    returns ``mean`` (sum over orders), ``se``, ``by_order``, ``se_by_order``
    (shared by the tied, direct-S and untied one-step checks)."""

    def __init__(self, n_obs: int, n_orders: int) -> None:
        self.sums = np.zeros((n_obs, n_orders))
        self.sqo = np.zeros((n_obs, n_orders))
        self.sq = np.zeros(n_obs)
        self.n = 0

    def add(self, ords: np.ndarray) -> None:
        tot = ords.sum(axis=2)
        self.sums += ords.sum(axis=0)
        self.sqo += (ords ** 2).sum(axis=0)
        self.sq += (tot ** 2).sum(axis=0)
        self.n += ords.shape[0]

    def result(self) -> dict[str, Any]:
        n = float(self.n)
        by_order = self.sums / n
        mean = by_order.sum(axis=1)
        var = np.maximum(self.sq / n - mean ** 2, 0.0) * n / (n - 1.0)
        var_o = np.maximum(self.sqo / n - by_order ** 2, 0.0) * n / (n - 1.0)
        return {"mean": mean, "se": np.sqrt(var / n), "by_order": by_order,
                "se_by_order": np.sqrt(var_o / n), "n_batches": self.n}


def check_table(rows: Sequence[dict[str, Any]]) -> str:
    """:func:`one_step_check` rows as a text table."""
    head = (f"{'cfg':>3} {'B':>4} {'obs':<6}{'empirical':>12}{'se':>10}{'z flow':>9}"
            f"{'z mean-S':>10}{'z corr':>8}{'eta3 pred':>10}{'eta3 meas':>10}{'eta4':>7}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['config']:>3} {r['batch']:>4} {r['name']:<6}{r['empirical']:>12.4e}"
                     f"{r['se']:>10.2e}{r['z_flow']:>9.1f}{r['z_mean_matrix']:>10.1f}"
                     f"{r['z_corrected']:>8.2f}{r['eta3_pred_over_se']:>10.2f}"
                     f"{r['eta3_over_se']:>10.2f}{r['eta4_over_se']:>7.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# finite width: E[p(G)] of a polynomial p of Gaussian quadratic forms, exactly

#: the largest loss degree the finite-width corrections take (the cost grows like K^degree)
MAX_FW_DEGREE = 6


def polynomial_taylor(model: object, max_degree: int = MAX_FW_DEGREE) -> list[np.ndarray]:
    """``[c_0, ..., c_D]``: the Taylor tensors ``c_j = D^j loss(G = 0)`` (shape ``(K,) * j``,
    symmetric) of an ``L = 1`` loss that is a polynomial of degree ``D <= max_degree`` in
    ``G``; ``ValueError`` for any other loss."""
    import math as _math

    import sympy as sp

    from attndyn.symbolic.potential import call_loss, g_array
    model = check_model(model)
    if model.L != 1 or model.loss is None:
        raise ValueError("the finite-width correction needs L = 1 and a loss callable")
    K = model.K
    G = g_array(1, K)
    syms = [G[0, 0, k] for k in range(K)]
    subs = {sp.Symbol(str(k), real=True): float(v) for k, v in model.params.items()}
    expr = sp.expand(call_loss(model.loss, G).subs(subs))
    try:
        poly = sp.Poly(expr, *syms)
    except sp.PolynomialError:
        poly = None
    if poly is None or poly.total_degree() > max_degree or poly.free_symbols - set(syms):
        raise ValueError(f"the finite-width correction is exact (and implemented) for losses "
                         f"that are polynomials of degree <= {max_degree} in G; this loss is not")
    D = max(poly.total_degree(), 0)
    c = [np.zeros((K,) * j) for j in range(D + 1)]
    for expo, coef in poly.terms():
        j = sum(expo)
        idx = tuple(k for k, e in enumerate(expo) for _ in range(e))
        val = float(coef) * float(np.prod([_math.factorial(e) for e in expo]))
        for perm in set(itertools.permutations(idx)):
            c[j][perm] = val
    return c


def shift_taylor(c: Sequence[np.ndarray], m: ArrayLike) -> list[np.ndarray]:
    """The Taylor tensors at ``G = m`` from those at 0: ``c_j(m) = sum_i c_(j+i) . m^i / i!``."""
    import math as _math
    mv = np.asarray(m, dtype=float)
    out = []
    for j in range(len(c)):
        acc = np.array(c[j], dtype=float)
        for i in range(1, len(c) - j):
            t = c[j + i]
            for _ in range(i):
                t = t @ mv  # contract the last axis
            acc = acc + t / _math.factorial(i)
        out.append(acc)
    return out


def int_partitions(n: int, smallest: int = 2) -> Iterator[tuple[int, ...]]:
    """Integer partitions of ``n`` into parts ``>= smallest`` (non-increasing tuples)."""
    if n == 0:
        yield ()
        return
    for first in range(n, smallest - 1, -1):
        for rest in int_partitions(n - first, smallest):
            if not rest or rest[0] <= first:
                yield (first,) + rest


def _contract(c: np.ndarray, parts: Sequence[int], kappas: dict[int, np.ndarray]
              ) -> np.ndarray:
    """``c`` contracted with ``kappas[n]`` for each ``n`` in ``parts`` (leading axes)."""
    t = c
    for n in parts:
        t = np.tensordot(kappas[n], t, axes=(list(range(n)), list(range(n))))
    return t


@functools.lru_cache(maxsize=None)
def _patterns(j: int) -> tuple[tuple[tuple[int, ...], float, dict[int, int]], ...]:
    """``[(lambda, coef, {n: mult})]`` for the block-size patterns of ``j`` (parts ``>= 2``)."""
    import math as _math
    out = []
    for lam in int_partitions(j):
        mult = {n: lam.count(n) for n in sorted(set(lam))}
        coef = 1.0 / (np.prod([_math.factorial(n) for n in lam])
                      * np.prod([_math.factorial(v) for v in mult.values()]))
        out.append((lam, float(coef), mult))
    return tuple(out)


def cumulant_terms(c: Sequence[np.ndarray], kappas: dict[int, np.ndarray], *,
                   gaussian: bool = True
                   ) -> tuple[dict[tuple[int, ...], float], dict[int, np.ndarray]]:
    """``E[p(G)]`` from the Taylor tensors ``c`` of ``p`` at the mean of ``G`` and the joint
    cumulants ``kappas[n]`` (``n >= 2``), exactly for a polynomial ``p``:
    ``E p = sum_j (1/j!) <c_j, E (G - m)^(x j)>`` with the moments as sums over set
    partitions into blocks of size ``>= 2``, grouped by block sizes ``lambda``::

        E p = sum_lambda <c_|lambda|, (x)_i kappa_(n_i)> / (prod_i n_i! prod_n mult_n!).

    Returns ``(terms, grads)``: ``terms[lambda]`` the value of each block-size pattern and
    ``grads[n]`` the derivative of their sum by the free entries of ``kappas[n]``. The
    kappas need not be symmetric (only their symmetric parts enter). ``gaussian=False``
    leaves out the patterns made of 2's only (the Gaussian-equivalent potential)."""
    terms: dict[tuple[int, ...], float] = {}
    grads: dict[int, Any] = {}
    for j in range(2, len(c)):
        if not np.any(c[j]):
            continue  # no derivative of this order: none of its patterns contributes
        for lam, coef, mult in _patterns(j):
            if not gaussian and all(n == 2 for n in lam):
                continue
            if any(n not in kappas for n in mult):
                continue
            terms[lam] = float(coef * _contract(c[j], lam, kappas))
            for n, k in mult.items():
                rest = list(lam)
                rest.remove(n)
                g = coef * k * _contract(c[j], rest, kappas)
                grads[n] = grads.get(n, 0.0) + g
    return terms, grads


def qf_scale(n: int, d: int) -> float:
    """``2^(n-1) (n-1)! / d^(n/2)``: ``kappa_n(G_w) = qf_scale * sym Tr(A_w1 ... A_wn)`` for
    ``G_k = (x^T A_k x - Tr A_k)/sqrt(d)``, ``A_k`` symmetric."""
    import math as _math
    scale: float = 2.0 ** (n - 1) * _math.factorial(n - 1) / d ** (n / 2.0)
    return scale


def word_traces(mats: Sequence[np.ndarray], nmax: int) -> dict[int, np.ndarray]:
    """``{n: T_n}`` for ``2 <= n <= nmax``: ``T_n[w] = Tr(A_w1 ... A_wn)`` over all ``K^n``
    words, from the products of length ``<= ceil(nmax / 2)`` (``Tr(P_u P_v) = <P_u, P_v^T>``)."""
    K = len(mats)
    half = (nmax + 1) // 2
    prods: dict[tuple[int, ...], np.ndarray] = {(k,): np.asarray(mats[k]) for k in range(K)}
    for length in range(2, half + 1):
        for w in itertools.product(range(K), repeat=length):
            prods[w] = prods[w[:-1]] @ mats[w[-1]]
    out: dict[int, np.ndarray] = {}
    for n in range(2, nmax + 1):
        h = (n + 1) // 2
        T = np.empty((K,) * n)
        tp = {v: prods[v].T for v in itertools.product(range(K), repeat=n - h)}
        for u in itertools.product(range(K), repeat=h):
            Pu = prods[u]
            for v, Pv in tp.items():
                T[u + v] = float(np.sum(Pu * Pv))
        out[n] = T
    return out


def word_sum(g: ArrayLike, mats: Sequence[np.ndarray]) -> Any:
    """``sum_w g[w] A_w1 ... A_wm`` over all words ``w`` (Horner from the left; zero
    branches skipped); ``g`` of shape ``(K,) * m``, ``m >= 1``."""
    ga = np.asarray(g, dtype=float)
    if ga.ndim == 1:
        return sum(ga[k] * mats[k] for k in range(len(mats)) if ga[k] != 0.0)
    out: Any = 0.0
    for k in range(len(mats)):
        if np.any(ga[k] != 0.0):
            out = out + mats[k] @ word_sum(ga[k], mats)
    return out


# ---------------------------------------------------------------------------
# finite width for any smooth loss: the Edgeworth correction through O(1/d)

def sym_tensor(T: ArrayLike) -> np.ndarray:
    """The symmetric part of a tensor: the mean over all permutations of its axes."""
    Ta: np.ndarray = np.asarray(T, dtype=float)
    if Ta.ndim <= 1:
        same: np.ndarray = Ta.copy()
        return same
    perms = list(itertools.permutations(range(Ta.ndim)))
    total: Any = sum(np.transpose(Ta, p) for p in perms)  # an array (the perms are >= 2)
    out: np.ndarray = total / len(perms)
    return out


def hermite_moments(g: ArrayLike, Z: ArrayLike, w: ArrayLike, nmax: int = 6) -> dict[int, Any]:
    """``{n: m_n}`` for ``0 <= n <= nmax <= 6``: ``m_n = sum_i w_i g_i Z_i^(x n) ~
    E[g(xi) xi^(x n)]``, ``xi ~ N(0, I_r)``, from a rule ``(Z, w)`` and the integrand's
    values ``g`` at its nodes (products of node powers, one matrix product per ``n``)."""
    Za = np.asarray(Z, dtype=float)
    wg = np.asarray(w, dtype=float) * np.asarray(g, dtype=float)
    N, r = Za.shape
    if not 0 <= nmax <= 6:
        raise ValueError(f"nmax must be in 0..6, got {nmax}")
    Zp = {0: np.ones((N, 1)), 1: Za}
    for n in range(2, (nmax + 1) // 2 + 1):
        Zp[n] = (Zp[n - 1][:, :, None] * Za[:, None, :]).reshape(N, r ** n)
    out: dict[int, Any] = {}
    for n in range(nmax + 1):
        h = n // 2
        m = (Zp[n - h] * wg[:, None]).T @ Zp[h]
        out[n] = m.reshape((r,) * n) if n else float(m[0, 0])
    return out


def _q33(m: dict[int, Any], r: int) -> np.ndarray:
    """The ``r^3 x r^3`` matrix ``Q`` of ``E[g <K3 (x) K3, He_6(xi)>] = k^T Q k`` (``k`` the
    flattened symmetric ``K3``), from the moments ``m`` of :func:`hermite_moments`: the
    fifteen pairings of ``He_6`` grouped by how many pairs close inside one ``K3``."""
    I = np.eye(r)
    m0, m2, m4 = m[0], m[2], m[4]
    Q: np.ndarray = m[6].reshape(r ** 3, r ** 3).copy()
    Q += -6.0 * np.einsum("ef,abcd->aefbcd", I, m4).reshape(r ** 3, r ** 3)
    Q += -9.0 * np.einsum("ax,bcde->abcxde", I, m4).reshape(r ** 3, r ** 3)
    Q += 9.0 * np.einsum("ef,gh,ab->aefbgh", I, I, m2).reshape(r ** 3, r ** 3)
    Q += 18.0 * np.einsum("ef,ax,bc->aefxbc", I, I, m2).reshape(r ** 3, r ** 3)
    Q += 18.0 * np.einsum("ax,by,ce->abcxye", I, I, m2).reshape(r ** 3, r ** 3)
    Q += -9.0 * m0 * np.einsum("ax,ef,gh->aefxgh", I, I, I).reshape(r ** 3, r ** 3)
    Q += -6.0 * m0 * np.eye(r ** 3)
    return Q


def edgeworth_terms(m: dict[int, Any], K3: ArrayLike, K4: ArrayLike, *, kappa3: bool = True
                    ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """The order-``1/d`` Edgeworth correction of ``E[g(xi)]`` for a standard normal
    ``xi`` when the true variable has the extra (whitened) cumulants ``K3``, ``K4``::

        E g ~ E_N g + (1/6) <K3, E_N D^3 g> + (1/24) <K4, E_N D^4 g> + (1/72) <K3 (x) K3, E_N D^6 g>,

    each ``E_N D^n g = E_N[g He_n(xi)]`` (Gaussian integration by parts; ``He_n`` the
    Hermite tensors) from the moments ``m`` of :func:`hermite_moments` (``nmax = 6``).
    For quadratic forms ``K_n ~ d^(1 - n/2)``: the ``K3`` term is ``O(d^-1/2)``, the ``K4``
    and ``K3^2`` terms ``O(1/d)``, the first omitted ones ``O(d^-3/2)``. Returns
    ``(terms, G3, G4)``: ``terms`` the three values (keys ``kappa3``, ``kappa4``,
    ``kappa3^2``), ``G3``, ``G4`` the derivatives of their sum by ``K3`` and ``K4`` (both
    symmetrised first; ``kappa3=False`` drops every ``K3`` term).

    Examples
    --------
    With ``g(xi) = exp(b xi)`` in one dimension, ``E_N D^n g = b^n exp(b^2/2)``:

    >>> import numpy as np
    >>> from attndyn.numeric.attention.potentials.quadrature import tensor_rule
    >>> rule = tensor_rule(1, 30)
    >>> m = hermite_moments(np.exp(0.5 * rule.nodes[:, 0]), rule.nodes, rule.weights)
    >>> terms, _, _ = edgeworth_terms(m, np.full((1, 1, 1), 0.2), np.full((1, 1, 1, 1), 0.1))
    >>> e = np.exp(0.125)
    >>> [bool(abs(v) < 1e-12) for v in (terms["kappa4"] - 0.1 * 0.5 ** 4 * e / 24,
    ...                                  terms["kappa3^2"] - 0.04 * 0.5 ** 6 * e / 72)]
    [True, True]
    """
    K3s = sym_tensor(K3)
    K4s = sym_tensor(K4)
    r = K4s.shape[0]
    I = np.eye(r)
    t = np.einsum("abb->a", K3s)
    f3 = (np.sum(K3s * m[3]) - 3.0 * t @ m[1]) / 6.0
    g3 = sym_tensor(m[3] - 3.0 * np.einsum("a,bc->abc", m[1], I)) / 6.0
    h4 = (m[4] - 6.0 * np.einsum("ab,cd->abcd", m[2], I)
          + 3.0 * m[0] * np.einsum("ab,cd->abcd", I, I))
    f4 = float(np.sum(K4s * h4)) / 24.0
    G4 = sym_tensor(h4) / 24.0
    Q = _q33(m, r)
    k = K3s.ravel()
    f33 = float(k @ Q @ k) / 72.0
    g33 = ((Q + Q.T) @ k / 72.0).reshape(r, r, r)
    if not kappa3:
        return {"kappa3": 0.0, "kappa4": f4, "kappa3^2": 0.0}, np.zeros_like(K3s), G4
    return ({"kappa3": float(f3), "kappa4": f4, "kappa3^2": f33},
            g3 + sym_tensor(g33), G4)
