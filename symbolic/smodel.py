"""Potential of direct optimisation over S (paper 003, appendix E), exact for polynomial losses.

Pre-activations (eq. 396): ``G_ijk = (x_i^T S_k x_j - C_ij Tr S_k) / sqrt(d)`` with
``x ~ N(0, C (x) I_d)`` and ``S_k`` any (not necessarily symmetric) ``d x d``
matrix. They are centred Gaussian in high dimension with

    Cov(G_ijk, G_i'j'l) = C_ii' C_jj' Omega_kl + C_ij' C_ji' Psi_kl,
    Psi_kl = Tr(S_k S_l)/d,  Omega_kl = Tr(S_k S_l^T)/d          (eqs. 397, 399).

The potential is ``Phi(Psi, Omega) = E[loss(G)]``. Stein's lemma on the SGD
drift ``E[dL/dG_ijk (x_i x_j^T - C_ij I)]/sqrt(d)`` gives, to leading order in
``1/d``, the matrix flow in ``tau = eta n / d``

    dS_k/dtau = -2 sum_l (A_kl S_l + B_kl S_l^T) - gamma S_k      (k trainable),
    A_kl = (1/2) sum C_ii' C_jj' E[d^2 L / dG_ijk dG_i'j'l],
    B_kl = (1/2) sum C_ij' C_ji' E[d^2 L / dG_ijk dG_i'j'l],

and ``A = grad_Omega Phi``, ``B = grad_Psi Phi`` by Price's theorem, with every
matrix entry an independent variable (MATH.md's symmetric convention; for
``L = 1``, ``A = B = H/2``, ``H_kl = E[d^2 L/dG_k dG_l]``). Its traces close in
``(t, Psi, Omega)``: eqs. (402)-(404).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import sympy as sp

from .codegen import njit_source
from .potential import _call_loss, check_covariance, g_array, gaussian_expectation

__all__ = ["SPotential", "s_potential", "s_covariance", "psi_omega_symbols"]


def _pair_symbol(name: str, k: int, l: int, K: int) -> sp.Symbol:
    a, b = min(k, l), max(k, l)
    return sp.Symbol(f"{name}_{a + 1}{b + 1}" if K < 10 else f"{name}_{a + 1}_{b + 1}", real=True)


def psi_omega_symbols(K: int):
    """Symmetric ``K x K`` matrices of the symbols ``Psi_kl`` and ``Omega_kl``."""
    Psi = sp.ImmutableMatrix(K, K, lambda k, l: _pair_symbol("Psi", k, l, K))
    Om = sp.ImmutableMatrix(K, K, lambda k, l: _pair_symbol("Omega", k, l, K))
    return Psi, Om


def s_covariance(L: int, K: int, C=None, Psi=None, Omega=None):
    """Covariance of the flattened ``G`` (index ``(i*L + j)*K + k``), eq. (399)."""
    C = check_covariance(C, L)
    if Psi is None or Omega is None:
        Psi, Omega = psi_omega_symbols(K)
    G = g_array(L, K)
    idx = [(i, j, k) for i in range(L) for j in range(L) for k in range(K)]
    syms = [G[i, j, k] for i, j, k in idx]
    n = len(idx)
    S = sp.zeros(n, n)
    for a, (i, j, k) in enumerate(idx):
        for b, (i2, j2, l) in enumerate(idx):
            S[a, b] = C[i, i2] * C[j, j2] * Omega[k, l] + C[i, j2] * C[j, i2] * Psi[k, l]
    return syms, sp.ImmutableMatrix(S)


@dataclass(frozen=True, eq=False)
class SPotential:
    """``Phi(Psi, Omega)`` with ``A = grad_Omega Phi`` and ``B = grad_Psi Phi``.

    The compiled function ``f(x, p, out) -> Phi`` (VALGRAD signature) takes
    ``x = [Psi.ravel(), Omega.ravel()]`` (``2 K^2`` entries, symmetric matrices)
    and writes ``out = [A.ravel(), B.ravel()]``.
    """

    K: int
    L: int
    C: sp.ImmutableMatrix
    Psi: sp.ImmutableMatrix
    Omega: sp.ImmutableMatrix
    phi: sp.Expr
    A: sp.ImmutableMatrix
    B: sp.ImmutableMatrix
    params: tuple = field(default=())

    @property
    def inputs(self) -> list:
        K = self.K
        return ([self.Psi[k, l] for k in range(K) for l in range(K)]
                + [self.Omega[k, l] for k in range(K) for l in range(K)])

    def numba_source(self, funcname: str = "sgrad") -> str:
        K = self.K
        outs = ([self.A[k, l] for k in range(K) for l in range(K)]
                + [self.B[k, l] for k in range(K) for l in range(K)])
        return njit_source(funcname, self.inputs, self.params, outs, value=self.phi,
                           doc="A = grad_Omega Phi, B = grad_Psi Phi of direct-S attention "
                               "(paper 003, eqs. 399-404); returns Phi.")


def s_potential(loss: Callable, K: int, L: int = 1, C=None,
                params: Sequence[sp.Symbol] = ()) -> SPotential:
    """Exact potential of a polynomial loss for direct-S attention.

    Raises ``ValueError`` if the loss is not a polynomial in ``G`` (the closed
    ODE needs exact Gaussian expectations).
    """
    C = check_covariance(C, L)
    G = g_array(L, K)
    expr = _call_loss(loss, G)
    syms, Sigma = s_covariance(L, K, C)
    extra = expr.free_symbols - set(syms) - set(params)
    if extra:
        raise ValueError(
            f"loss has free symbols {sorted(map(str, extra))} that are neither "
            "pre-activations G nor declared parameters")
    try:
        phi = gaussian_expectation(expr, syms, Sigma)
    except ValueError:
        raise ValueError("the direct-S theory (eqs. 402-404) needs a loss that is a polynomial "
                         "in G (exact Gaussian expectations); SGD itself accepts any loss") from None
    Psi, Om = psi_omega_symbols(K)
    Am = sp.zeros(K, K)
    Bm = sp.zeros(K, K)
    for k in range(K):
        for l in range(k, K):
            accA = sp.Integer(0)
            accB = sp.Integer(0)
            for i in range(L):
                for j in range(L):
                    for i2 in range(L):
                        for j2 in range(L):
                            ca = C[i, i2] * C[j, j2]
                            cb = C[i, j2] * C[j, i2]
                            if ca == 0 and cb == 0:
                                continue
                            h = sp.diff(expr, G[i, j, k], G[i2, j2, l])
                            if h == 0:
                                continue
                            accA += ca * h
                            accB += cb * h
            a = gaussian_expectation(sp.expand(accA / 2), syms, Sigma) if accA != 0 else sp.Integer(0)
            b = gaussian_expectation(sp.expand(accB / 2), syms, Sigma) if accB != 0 else sp.Integer(0)
            Am[k, l] = Am[l, k] = sp.expand(a)
            Bm[k, l] = Bm[l, k] = sp.expand(b)
    return SPotential(K=K, L=L, C=C, Psi=Psi, Omega=Om, phi=sp.expand(phi),
                      A=sp.ImmutableMatrix(Am), B=sp.ImmutableMatrix(Bm), params=tuple(params))
