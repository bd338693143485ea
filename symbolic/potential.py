"""Gaussian-equivalent potentials of tied attention, exact for polynomial losses.

Paper 003, Theorem 1 (eqs. 3-4) and eq. (10): for tied attention the
pre-activations ``G_ijk = (x_i^T S_k x_j - delta_ij Tr S_k) / sqrt(d)`` are, in
high dimension, a centred Gaussian array with

    Cov(G_ijk, G_i'j'l) = (C_ii' C_jj' + C_ij' C_ji') q_kl ,   q_kl = Tr(S_k S_l)/d.

The covariance is degenerate (``G_ijk = G_jik``), which the polynomial
expectation below handles exactly. The potential is ``Phi(q) = E[loss(G)]``
and, by Price's theorem (eq. 91), in the symmetric convention of MATH.md,

    Gamma_kl(q) = (1/2) sum_{(ij),(i'j')} B_{(ij),(i'j')} E[d^2 loss / dG_ijk dG_i'j'l],
    B = C (x) C + swap.

For ``L = 1`` this is ``Gamma_kl = E[d^2 loss / dG_k dG_l]``, and ``Gamma_kl``
equals ``dPhi/dq_kl`` with every matrix entry of ``q`` an independent
variable. Expectations of polynomials use the heat operator (Wick/Isserlis in
closed form): ``E f(G) = sum_n (Delta^n f)(0) / n!`` with ``Delta = (1/2)
sum_ab Sigma_ab d_a d_b``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import sympy as sp

from .codegen import njit_source

__all__ = [
    "g_array",
    "q_matrix",
    "check_covariance",
    "tied_covariance",
    "gaussian_expectation",
    "TiedPotential",
    "tied_potential",
]


def g_array(L: int, K: int) -> sp.ImmutableDenseNDimArray:
    """The ``L x L x K`` array of pre-activation symbols ``G_ijk`` (0-based)."""
    return sp.ImmutableDenseNDimArray(
        [[[sp.Symbol(f"G_{i}{j}{k}" if max(L, K) <= 10 else f"G_{i}_{j}_{k}", real=True)
           for k in range(K)] for j in range(L)] for i in range(L)])


def q_matrix(K: int, name: str = "q") -> sp.ImmutableMatrix:
    """Symmetric ``K x K`` matrix of overlap symbols ``q_kl`` (1-based names, as
    in the paper: ``q_12`` is the overlap of indices 0 and 1)."""
    def sym(k, l):
        a, b = min(k, l), max(k, l)
        return sp.Symbol(f"{name}_{a + 1}{b + 1}" if K < 10 else f"{name}_{a + 1}_{b + 1}", real=True)
    return sp.ImmutableMatrix(K, K, lambda k, l: sym(k, l))


def check_covariance(C, L: int, name: str = "C") -> sp.ImmutableMatrix:
    """Validate a token covariance: ``L x L``, symmetric, positive semi-definite."""
    if C is None:
        return sp.ImmutableMatrix(sp.eye(L))
    try:
        M = sp.ImmutableMatrix(C)
    except Exception:
        raise TypeError(f"{name} must be an {L} x {L} matrix") from None
    if M.shape != (L, L):
        raise ValueError(f"{name} must have shape ({L}, {L}), got {M.shape}")
    if not M.is_symmetric():
        raise ValueError(f"{name} must be symmetric")
    try:
        A = np.array(M.evalf(), dtype=float)
    except TypeError:
        raise TypeError(f"{name} must have numeric entries") from None
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} must be finite")
    ev = np.linalg.eigvalsh(A)
    if ev.min() < -1e-12 * max(1.0, abs(ev).max()):
        raise ValueError(f"{name} must be positive semi-definite (smallest eigenvalue {ev.min():.3g})")
    return M


def tied_covariance(L: int, K: int, C=None, q=None):
    """Covariance of the flattened ``G`` (index ``(i*L + j)*K + k``), eq. (10).

    Returns ``(symbols, Sigma)`` with ``Sigma`` a SymPy matrix in ``q``.
    """
    C = check_covariance(C, L)
    q = q_matrix(K) if q is None else q
    G = g_array(L, K)
    syms = [G[i, j, k] for i in range(L) for j in range(L) for k in range(K)]
    idx = [(i, j, k) for i in range(L) for j in range(L) for k in range(K)]
    n = len(idx)
    S = sp.zeros(n, n)
    for a, (i, j, k) in enumerate(idx):
        for b, (i2, j2, l) in enumerate(idx):
            S[a, b] = (C[i, i2] * C[j, j2] + C[i, j2] * C[j, i2]) * q[k, l]
    return syms, sp.ImmutableMatrix(S)


def gaussian_expectation(f: sp.Expr, syms: Sequence[sp.Symbol], Sigma, mean=None) -> sp.Expr:
    """``E[f(g)]`` for a polynomial ``f`` of a Gaussian vector ``g ~ N(mean, Sigma)``.

    Exact for any (even singular) ``Sigma``: ``E f = sum_n (Delta^n f)(mean)/n!``
    with ``Delta = (1/2) sum_ab Sigma_ab d_a d_b``; the series stops at half the
    degree. Raises ``ValueError`` if ``f`` is not polynomial in ``syms``.
    """
    syms = list(syms)
    f = sp.expand(sp.sympify(f))
    if not f.free_symbols & set(syms):
        return f
    try:
        P = sp.Poly(f, *syms)
    except sp.PolynomialError:
        raise ValueError("loss is not a polynomial in G") from None
    for c in P.coeffs():
        if c.has(*syms):
            raise ValueError("loss is not a polynomial in G")
    n = len(syms)
    pairs = [(a, b, Sigma[a, b]) for a in range(n) for b in range(n) if Sigma[a, b] != 0]
    total = sp.Integer(0)
    term = P
    k = 0
    deg = P.total_degree()
    while True:
        at = term.as_expr().subs({s: (0 if mean is None else mean[i]) for i, s in enumerate(syms)})
        total += at / sp.factorial(k)
        if 2 * (k + 1) > deg:
            break
        acc = sp.Poly(0, *syms)
        for a, b, s in pairs:
            d = term.diff(syms[a]).diff(syms[b])
            if not d.is_zero:
                acc += d * sp.Poly(s / 2, *syms)
        term = acc
        k += 1
    return sp.expand(total)


@dataclass(frozen=True, eq=False)
class TiedPotential:
    """``Phi(q)`` and ``Gamma(q)`` of a tied model with their numba source.

    ``gamma[k, l]`` is the symmetric-convention gradient of eq. (91); the
    compiled function ``grad(x, p, out)`` takes the ``K*K`` overlaps ``x =
    q.ravel()`` and writes ``Gamma.ravel()``.
    """

    K: int
    L: int
    C: sp.ImmutableMatrix
    q: sp.ImmutableMatrix
    phi: sp.Expr
    gamma: sp.ImmutableMatrix
    params: tuple = field(default=())
    route: str = "wick"

    @property
    def inputs(self) -> list:
        return [self.q[k, l] for k in range(self.K) for l in range(self.K)]

    def numba_source(self, funcname: str = "grad") -> str:
        outs = [self.gamma[k, l] for k in range(self.K) for l in range(self.K)]
        return njit_source(funcname, self.inputs, self.params, outs,
                           doc="Gamma(q) of a tied potential (paper 003, eq. 91).")

    def gamma_numeric(self, q, p=()):
        """Evaluate ``Gamma`` at a numeric ``q`` (slow reference path)."""
        q = np.asarray(q, dtype=float)
        subs = {self.q[k, l]: q[k, l] for k in range(self.K) for l in range(self.K)}
        subs.update(dict(zip(self.params, p)))
        return np.array(self.gamma.subs(subs).evalf(), dtype=float)


def _call_loss(loss: Callable, G) -> sp.Expr:
    if not callable(loss):
        raise TypeError("loss must be a callable G -> sympy expression")
    val = loss(G)
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        val = sp.sympify(val)
    if not isinstance(val, sp.Expr):
        raise TypeError(f"loss must return a SymPy expression, got {type(val).__name__}")
    return val


def tied_potential(loss: Callable, K: int, L: int = 1, C=None,
                   params: Sequence[sp.Symbol] = ()) -> TiedPotential:
    """Exact potential of a polynomial loss (Wick), with Gamma by Price (eq. 91).

    ``loss`` is called with the ``L x L x K`` SymPy array of pre-activations and
    must return a polynomial in them; ``params`` lists extra free symbols that
    become runtime parameters of the compiled gradient.
    """
    C = check_covariance(C, L)
    G = g_array(L, K)
    expr = _call_loss(loss, G)
    syms, Sigma = tied_covariance(L, K, C)
    extra = expr.free_symbols - set(syms) - set(params)
    if extra:
        raise ValueError(
            f"loss has free symbols {sorted(map(str, extra))} that are neither "
            "pre-activations G nor declared parameters")
    phi = gaussian_expectation(expr, syms, Sigma)
    q = q_matrix(K)
    gam = sp.zeros(K, K)
    for k in range(K):
        for l in range(k, K):
            acc = sp.Integer(0)
            for i in range(L):
                for j in range(L):
                    for i2 in range(L):
                        for j2 in range(L):
                            B = C[i, i2] * C[j, j2] + C[i, j2] * C[j, i2]
                            if B == 0:
                                continue
                            h = sp.diff(expr, G[i, j, k], G[i2, j2, l])
                            if h != 0:
                                acc += B * h
            val = gaussian_expectation(sp.expand(acc / 2), syms, Sigma) if acc != 0 else sp.Integer(0)
            gam[k, l] = gam[l, k] = sp.simplify(val) if val.free_symbols else val
    return TiedPotential(K=K, L=L, C=C, q=q, phi=sp.simplify(phi), gamma=sp.ImmutableMatrix(gam),
                         params=tuple(params))
