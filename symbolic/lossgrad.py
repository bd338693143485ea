"""The loss of an attention-indexed model and its gradient with respect to G, as code.

Every SGD kernel (tied, untied, direct S) evaluates, once per sample, the loss
``L(G)`` of the ``L x L x K`` pre-activation array and its gradient
``dL/dG_ijk``. This module builds both from the user's SymPy loss and prints
them as one numba function with the fixed signature of
:mod:`attndyn.symbolic.codegen` (the ``VALGRAD`` flavour)::

    lossgrad(x: float64[::1], p: float64[::1], out: float64[::1]) -> float64

with ``x[(i*L + j)*K + k] = G_ijk`` (the row-major flattening of
:func:`attndyn.symbolic.potential.g_array`), ``p`` the loss parameters in
declaration order, ``out`` receiving ``dL/dG`` in the same order as ``x``, and
the loss value returned. Every entry ``G_ijk`` is an independent variable: for
tied attention ``G_ijk = G_jik``, and the kernels sum both orderings (chain
rule), so nothing is symmetrised here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike, NDArray

from .codegen import njit_source
from .potential import call_loss, g_array

__all__ = ["LossGradient", "loss_gradient", "flat_index"]


def flat_index(i: int, j: int, k: int, L: int, K: int) -> int:
    """Position of ``G_ijk`` in the flattened vector (``(i*L + j)*K + k``).

        >>> flat_index(1, 0, 1, L=2, K=2)
        5
    """
    return (i * L + j) * K + k


def check_int(x: object, name: str, low: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {low}, got {x!r}")
    if x < low:
        raise ValueError(f"{name} must be an int >= {low}, got {x}")
    return int(x)


@dataclass(frozen=True, eq=False)
class LossGradient:
    """A loss ``L(G)`` and its gradient, ready to print as numba source.

    Attributes
    ----------
    K, L : int
    expr : sympy.Expr
        The loss in the symbols ``G_ijk``.
    symbols : tuple of sympy.Symbol
        The ``L*L*K`` pre-activation symbols in flattened order.
    grad : tuple of sympy.Expr
        ``dL/dG`` in the same order.
    params : tuple of sympy.Symbol
        Extra runtime parameters of the loss (``p`` in the compiled function).

    Examples
    --------
    >>> lg = loss_gradient(lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, K=2)
    >>> isinstance(lg, LossGradient), lg.symbols, lg.grad
    (True, (G_000, G_001), (2*G_000 - 2*G_001, -2*G_000 + 2*G_001))
    """

    K: int
    L: int
    expr: sp.Expr
    symbols: tuple
    grad: tuple
    params: tuple = field(default=())

    @property
    def size(self) -> int:
        return len(self.symbols)

    def numba_source(self, funcname: str = "lossgrad") -> str:
        """Numba source of ``funcname(x, p, out) -> loss`` (VALGRAD signature)."""
        return njit_source(funcname, self.symbols, self.params, list(self.grad), value=self.expr,
                           doc=f"Loss and dLoss/dG (L={self.L}, K={self.K}); "
                               "x[(i*L+j)*K+k] = G_ijk.")

    def numeric(self, G: ArrayLike, p: Sequence[float] = ()
                ) -> tuple[float, NDArray[np.float64]]:
        """Slow reference: ``(loss, dL/dG)`` at a numeric ``(L, L, K)`` array ``G``."""
        G = np.asarray(G, dtype=np.float64)
        if G.shape != (self.L, self.L, self.K):
            raise ValueError(f"G must have shape ({self.L}, {self.L}, {self.K}), got {G.shape}")
        subs = {s: sp.Float(v) for s, v in zip(self.symbols, G.ravel().tolist())}
        subs.update({s: sp.Float(float(v)) for s, v in zip(self.params, p)})
        val = float(self.expr.xreplace(subs).evalf())
        grad = np.array([float(g.xreplace(subs).evalf()) for g in self.grad])
        return val, grad.reshape(self.L, self.L, self.K)


def loss_gradient(loss: Callable, K: int, L: int = 1,
                  params: Sequence[sp.Symbol] = ()) -> LossGradient:
    """Build :class:`LossGradient` from ``loss(G) -> sympy expression``.

    ``loss`` receives the ``L x L x K`` SymPy array of :func:`g_array` (the same
    argument as for the potentials). Free symbols other than ``G`` must be
    declared in ``params``; anything else raises ``ValueError``.

        >>> lg = loss_gradient(lambda G: G[0, 0, 0] ** 2 * G[0, 0, 1], K=2)
        >>> lg.expr, lg.grad
        (G_000**2*G_001, (2*G_000*G_001, G_000**2))
    """
    K = check_int(K, "K", 1)
    L = check_int(L, "L", 1)
    G = g_array(L, K)
    expr = call_loss(loss, G)
    syms = tuple(G[i, j, k] for i in range(L) for j in range(L) for k in range(K))
    params = tuple(params)
    extra = expr.free_symbols - set(syms) - set(params)
    if extra:
        raise ValueError(
            f"loss has free symbols {sorted(map(str, extra))} that are neither "
            "pre-activations G nor declared parameters")
    grad = tuple(sp.diff(expr, s) for s in syms)
    return LossGradient(K=K, L=L, expr=expr, symbols=syms, grad=grad, params=params)
