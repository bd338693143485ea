"""Conversion of API values to SymPy without evaluating text (a leaf: sympy and numpy only).

:func:`as_sympy` converts whitelisted values (SymPy objects, Python and numpy numbers,
``Fraction``, lists and tuples of them) and never hands a user value to ``sympify``;
:func:`reject_strings` refuses a container that holds text anywhere. The safe parser of
loss strings (:mod:`attndyn.symbolic.parse`), the activations and the Gaussian laws build on
these two functions.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import sympy as sp

_T = TypeVar("_T")

__all__ = ["as_sympy", "reject_strings", "MAX_HERMITE"]

MAX_HERMITE = 16        #: largest Hermite order in h<k>, He<k> (loss strings, activations)


def _short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n - 3] + "...")


def reject_strings(value: _T, name: str) -> _T:
    """Raise ``TypeError`` if ``value`` (a number, or lists, tuples, dicts and arrays of
    them, nested to any depth) holds a string or bytes anywhere.

    The walk is iterative and visits every entry (no depth or count cut-off), so text
    cannot hide deep in a container. Prefer reading a container against a whitelist of
    number types (as :func:`~attndyn.symbolic.gaussian.check_covariance` does); this is
    the check for values that are passed on unchanged.

        >>> reject_strings([1, (2, 3.5)], "values")
        [1, (2, 3.5)]
        >>> reject_strings([1, ["x"]], "values")
        Traceback (most recent call last):
            ...
        TypeError: values must hold numbers, not strings (text is never evaluated), got 'x'
    """
    stack = [value]
    seen = set()
    while stack:
        v = stack.pop()
        if isinstance(v, (str, bytes, np.str_, np.bytes_)):
            raise TypeError(f"{name} must hold numbers, not strings (text is never evaluated), "
                            f"got {_short(str(v), 40)}")
        if isinstance(v, np.ndarray):
            if v.dtype.kind in "SU":
                raise TypeError(f"{name} must hold numbers, got an array of dtype {v.dtype}")
            if v.dtype.kind == "O":
                if id(v) in seen:
                    continue
                seen.add(id(v))
                stack.extend(v.ravel().tolist())
        elif isinstance(v, (list, tuple, dict)):
            if id(v) in seen:
                continue
            seen.add(id(v))
            stack.extend(v.values() if isinstance(v, dict) else v)
            if isinstance(v, dict):
                stack.extend(v.keys())
    return value


_MAX_AS_SYMPY_DEPTH = 32


def _number_to_sympy(value: object) -> Any:
    """A whitelisted Python/numpy/Fraction number as a SymPy number, else ``None``."""
    from fractions import Fraction
    if isinstance(value, (bool, np.bool_)):
        return sp.true if value else sp.false
    if isinstance(value, (int, np.integer)):
        return sp.Integer(int(value))
    if isinstance(value, (float, np.floating)):
        return sp.Float(float(value))
    if isinstance(value, (complex, np.complexfloating)):
        return sp.Float(value.real) + sp.I * sp.Float(value.imag)
    if isinstance(value, Fraction):
        return sp.Rational(value.numerator, value.denominator)
    return None


def as_sympy(value: object, name: str = "expression", _depth: int = 0) -> Any:
    """Convert an API value (SymPy object, Python or numpy number, Fraction, or a
    list/tuple of these) to SymPy without evaluating text.

    Only whitelisted types are converted; ``sympify`` never sees a user value (SymPy's
    ``sympify(..., strict=True)`` still parses strings inside tuples and dicts). A string
    raises ``TypeError`` (parse it with :func:`parse_expression`).

        >>> from fractions import Fraction
        >>> as_sympy(Fraction(1, 3)), as_sympy([1, Fraction(1, 2)])
        (1/3, (1, 1/2))
        >>> as_sympy("x + 1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        TypeError: expression: strings are not evaluated...
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name}: strings are not evaluated; pass a SymPy expression or a number "
                        "(or parse the text with attndyn.symbolic.parse.parse_expression)")
    if isinstance(value, sp.Basic):
        return value
    num = _number_to_sympy(value)
    if num is not None:
        return num
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return as_sympy(value[()], name, _depth)
    if isinstance(value, (list, tuple)):
        if _depth >= _MAX_AS_SYMPY_DEPTH:
            raise TypeError(f"{name} is nested more than {_MAX_AS_SYMPY_DEPTH} levels deep")
        return tuple(as_sympy(v, name, _depth + 1) for v in value)
    raise TypeError(f"{name} must be a SymPy expression or a number, "
                    f"got {type(value).__name__}")
