"""Activations as SymPy functions of one variable.

Paper 003 uses the normalised probabilists' Hermite polynomials (Figure 2):

    h1(x) = x,   h2(x) = (x^2 - 1)/sqrt(2),   h3(x) = (x^3 - 3x)/sqrt(6),

that is ``h_k = He_k / sqrt(k!)`` with ``E[h_k(z) h_l(z)] = delta_kl`` for
``z ~ N(0, 1)``. Every activation here is an :class:`Activation`: a name and a
SymPy expression in the variable :data:`X`; calling it on an expression
substitutes that expression for ``X``.

Known names: ``linear`` (= ``h1``, ``identity``), ``h<k>`` for any k >= 0,
``He<k>`` (unnormalised), ``relu``, ``erf``, ``tanh``, ``gelu``
(``x Phi(x)``), ``sigmoid``, ``abs``, ``square``, ``softplus``. A string that
parses as a polynomial in ``x`` (``"x**2 - 1"``) is accepted as well; anything
else raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import re

import sympy as sp

from .parse import parse_expression
from .symbols import X, Activation, hermite_activation, is_polynomial_activation
from .sympify import MAX_HERMITE

__all__ = ["X", "Activation", "activation", "hermite_activation", "known_activations",
           "relu", "is_polynomial_activation"]

def relu(g: sp.Expr) -> sp.Expr:
    """``max(0, g)`` as SymPy ``Max`` (its derivative is ``Heaviside``).

        >>> relu(X).subs(X, -1), relu(X).subs(X, 2), sp.diff(relu(X), X)
        (0, 2, Heaviside(x))
    """
    return sp.Max(0, g)


def _named() -> dict:
    return {
        "linear": Activation("linear", X),
        "identity": Activation("identity", X),
        "relu": Activation("relu", sp.Max(0, X), smooth=False),
        "erf": Activation("erf", sp.erf(X)),
        "tanh": Activation("tanh", sp.tanh(X)),
        "gelu": Activation("gelu", X * (1 + sp.erf(X / sp.sqrt(2))) / 2),
        "sigmoid": Activation("sigmoid", 1 / (1 + sp.exp(-X))),
        "softplus": Activation("softplus", sp.log(1 + sp.exp(X))),
        "abs": Activation("abs", sp.Abs(X), smooth=False),
        "square": Activation("square", X ** 2),
    }


def known_activations() -> list:
    """The activation names :func:`activation` accepts, then the patterns ``h<k>``,
    ``He<k>`` (Hermite) and ``<polynomial in x>``.

        >>> {"relu", "tanh", "h<k>"} <= set(known_activations())
        True
    """
    return sorted(_named()) + ["h<k>", "He<k>", "<polynomial in x>"]


def activation(spec: str | sp.Expr | Activation, argument: str = "activation") -> Activation:
    """Resolve an activation from a name, a polynomial string in ``x``, an
    :class:`Activation` or a SymPy expression in :data:`X`.

    Raises ``ValueError`` naming ``argument`` for an unknown name.

        >>> activation("h2").expr
        sqrt(2)*x**2/2 - sqrt(2)/2
        >>> activation("x**3 - 3*x").is_polynomial
        True
        >>> activation("swish")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: unknown activation 'swish' for argument 'activation'...
    """
    if isinstance(spec, Activation):
        return spec
    if isinstance(spec, sp.Basic):
        expr = spec
        extra = expr.free_symbols - {X}
        if extra:
            raise ValueError(f"{argument}: an activation expression may only use the symbol x "
                             f"(attndyn.symbolic.activations.X), found {sorted(map(str, extra))}")
        return Activation(str(expr), expr, smooth=_is_smooth(expr))
    if not isinstance(spec, str):
        raise TypeError(f"{argument} must be an activation name or a SymPy expression, "
                        f"got {type(spec).__name__}")
    name = spec.strip()
    table = _named()
    if name.lower() in table:
        named: Activation = table[name.lower()]
        return named
    m = re.fullmatch(r"(h|He)(\d+)", name)
    if m:
        if len(m.group(2)) > 3 or int(m.group(2)) > MAX_HERMITE:
            raise ValueError(f"activation {_short(spec)} for argument {argument!r}: Hermite "
                             f"order too large (k <= {MAX_HERMITE})")
        return hermite_activation(int(m.group(2)), normalised=(m.group(1) == "h"))
    known = f"known: {', '.join(known_activations())}"
    if "x" in name:
        # never sympify: the safe parser (attndyn.symbolic.parse) builds the expression
        try:
            expr = parse_expression(name, what=argument, symbols={"x": X})
        except ValueError as exc:
            raise ValueError(f"unknown activation {_short(spec)} for argument {argument!r} "
                             f"({known}); as a polynomial in x: {exc}") from None
        if expr.free_symbols <= {X} and is_polynomial_activation(expr):
            return Activation(name, sp.expand(expr))
        raise ValueError(f"activation {_short(spec)} for argument {argument!r} is not a "
                         f"polynomial in x ({known})")
    raise ValueError(f"unknown activation {_short(spec)} for argument {argument!r}; {known}")


def _short(text: object, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n - 3] + "...")


def _is_smooth(expr: sp.Expr) -> bool:
    bad = (sp.Heaviside, sp.DiracDelta, sp.Piecewise, sp.Abs, sp.sign, sp.Max, sp.Min)
    return not any(expr.atoms(*bad))
