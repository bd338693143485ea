"""The symbols every symbolic module shares (a leaf: sympy and :mod:`.sympify` only).

:data:`X`, the variable of activation expressions; :class:`Activation`, a named activation
``sigma(x)``; :func:`hermite_activation`, the normalised probabilists' Hermite polynomials
``h_k = He_k / sqrt(k!)`` of paper 003 (Figure 2); :func:`is_polynomial_activation`; and
:func:`g_array`, the ``L x L x K`` pre-activation symbols ``G_ijk``. The safe parser, the
activation library and the Gaussian laws import them from here, so that none of those three
imports another.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .sympify import as_sympy

__all__ = ["X", "Activation", "hermite_activation", "is_polynomial_activation", "g_array"]

#: The variable of every activation expression.
X = sp.Symbol("x", real=True)


@dataclass(frozen=True, eq=False)
class Activation:
    """A named activation ``sigma(x)``: ``expr`` is a SymPy expression in :data:`X`.

    ``smooth`` is False when a derivative of order <= 2 contains distributions
    (ReLU, absolute value): such activations go by closed forms or by Stein's
    identity with first derivatives, never by a second-derivative quadrature.

        >>> relu = Activation("relu", sp.Max(0, X), smooth=False)
        >>> relu.expr.subs(X, -2), relu.expr.subs(X, 3), relu.smooth
        (0, 3, False)
    """

    name: str
    expr: sp.Expr
    smooth: bool = True

    def __call__(self, g: object) -> sp.Expr:
        return self.expr.xreplace({X: as_sympy(g, f"argument of activation {self.name}")})

    @property
    def is_polynomial(self) -> bool:
        return is_polynomial_activation(self.expr)

    def derivative(self, n: int = 1) -> sp.Expr:
        """``sigma^(n)(x)`` (distributions such as ``DiracDelta`` included)."""
        return sp.diff(self.expr, X, n)

    def __repr__(self) -> str:
        return f"Activation({self.name!r}, {self.expr})"


def is_polynomial_activation(expr: sp.Expr) -> bool:
    """Whether ``expr`` (a SymPy expression in :data:`X`) is a polynomial in ``X``.

        >>> is_polynomial_activation(X ** 2 - 1), is_polynomial_activation(sp.tanh(X))
        (True, False)
    """
    expr = as_sympy(expr, "activation expression")
    if X not in expr.free_symbols:
        return True
    try:
        sp.Poly(expr, X)
    except sp.PolynomialError:
        return False
    return bool(expr.is_polynomial(X))


def hermite_activation(k: int, normalised: bool = True) -> Activation:
    """``h_k = He_k/sqrt(k!)`` (paper 003, Figure 2), or ``He_k`` with ``normalised=False``.

        >>> h2 = hermite_activation(2)
        >>> h2.expr
        sqrt(2)*x**2/2 - sqrt(2)/2
        >>> hermite_activation(3, normalised=False).expr
        x**3 - 3*x
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 64:
        raise ValueError(f"hermite order k must be an int in [0, 64], got {k!r}")
    he = sp.expand(sp.hermite_prob(k, X))
    if normalised:
        return Activation(f"h{k}", sp.expand(he / sp.sqrt(sp.factorial(k))))
    return Activation(f"He{k}", he)


def g_array(L: int, K: int) -> sp.ImmutableDenseNDimArray:
    """The ``L x L x K`` array of pre-activation symbols ``G_ijk`` (0-based).

        >>> G = g_array(2, 1)
        >>> G.shape, G[0, 1, 0]
        ((2, 2, 1), G_010)
    """
    return sp.ImmutableDenseNDimArray(
        [[[sp.Symbol(f"G_{i}{j}{k}" if max(L, K) <= 10 else f"G_{i}_{j}_{k}", real=True)
           for k in range(K)] for j in range(L)] for i in range(L)])
