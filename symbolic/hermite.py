"""Hermite expansions, Mehler's formula and closed-form Gaussian expectations.

Conventions. ``He_n`` are the probabilists' Hermite polynomials
(``E[He_n(z) He_m(z)] = n! delta_nm``); paper 003 uses the normalised
``h_n = He_n/sqrt(n!)`` (Figure 2). For ``X = m + sqrt(v) z`` the Hermite
coefficients of ``f(X)`` follow from Gaussian integration by parts,

    a_n = E[f(X) He_n(z)] / n! = v^(n/2) E[f^(n)(X)] / n!,

so they are symbolic whenever the expectations of the derivatives are (this
includes ReLU, whose derivatives are ``Heaviside`` and ``DiracDelta^(j)``).
Mehler's formula for jointly Gaussian ``X, Y`` with covariance ``c`` reads

    E[f(X) g(Y)] = sum_n (c^n / n!) E[f^(n)(X)] E[g^(n)(Y)]
                 = sum_n rho^n n! a_n b_n,     rho = c / sqrt(v_x v_y),

which terminates for polynomials (exact) and otherwise is truncated with the
Cauchy-Schwarz/Parseval bound::

    |remainder after order N| <= |rho|^(N+1) sqrt(T_f T_g),
    T_f = E[f(X)^2] - sum_{n <= N} n! a_n^2 .

Closed forms used (each checked against quadrature in tests/attention/potentials/test_hermite.py):

- ``E[X^p]``, ``E[X^p theta(X)]`` (half moments, with mean), ``E[X^p delta^(j)(X)]``,
  ``E[X^p exp(alpha X^2 + beta X)]``, ``E[X^p erf(aX)]`` (Stein recursion, with mean),
  ``E[erf(aX)^2] = (2/pi) asin(2 a^2 v / (1 + 2 a^2 v))`` (centred);
- pairs, centred: ReLU x ReLU (arc-cosine kernel of degree 1)
  ``(sqrt(v_x v_y - c^2) + c (pi - acos(rho))) / (2 pi)``,
  erf x erf ``(2/pi) asin(2ab c / sqrt((1 + 2a^2 v_x)(1 + 2b^2 v_y)))``,
  ReLU x erf(bY) ``b c / sqrt(pi (1 + 2 b^2 v_y))``;
- any non-polynomial function of one variable times a polynomial of others,
  by conditioning the polynomial part on that variable (with means).

The last part of the module has numeric helpers (numpy only): normalised
Hermite coefficients by Gauss-Hermite quadrature, multivariate coefficients
and the Mehler series of eq. (23).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp
from numpy.typing import NDArray

from .parse import as_sympy as _as_sympy

# SymPy ships no type information: expressions and symbols are Any to the checker
_Expr = Any

__all__ = [
    "NoClosedForm", "he", "normalised_he", "normalise_nonsmooth", "is_polynomial_in",
    "gauss_moment", "expect_1d", "hermite_coefficients", "pair_closed", "pair_mehler",
    "gauss_hermite", "hermite_coefficients_numeric", "mehler_numeric",
    "multivariate_hermite_coefficients", "mehler_series_multivariate", "eq23_series",
]


class NoClosedForm(ValueError):
    """The expectation has no closed form in this engine (the message says which part).

        >>> x = sp.Symbol("x", real=True)
        >>> expect_1d(sp.log(1 + x ** 2), x, 0, 1)
        Traceback (most recent call last):
            ...
        attndyn.symbolic.hermite.NoClosedForm: no closed form for E[x^0 * log(x**2 + 1)] with x Gaussian
    """


# -- Hermite polynomials ---------------------------------------------------------
def he(n: int, x: _Expr) -> sp.Expr:
    """Probabilists' Hermite polynomial ``He_n(x)``.

        >>> x = sp.Symbol("x")
        >>> [sp.expand(he(n, x)) for n in range(4)]
        [1, x, x**2 - 1, x**3 - 3*x]
    """
    return sp.expand(sp.hermite_prob(n, x))


def normalised_he(n: int, x: _Expr) -> sp.Expr:
    """``h_n = He_n / sqrt(n!)`` (paper 003: h1 = x, h2 = (x^2-1)/sqrt2, h3 = (x^3-3x)/sqrt6).

        >>> x = sp.Symbol("x")
        >>> normalised_he(2, x), normalised_he(3, x)
        (sqrt(2)*x**2/2 - sqrt(2)/2, sqrt(6)*x**3/6 - sqrt(6)*x/2)
    """
    return sp.expand(he(n, x) / sp.sqrt(sp.factorial(n)))


# -- normalisation of non-smooth pieces -----------------------------------------
def _relu_piece(pw: _Expr) -> _Expr | None:
    """``Piecewise((e, e > 0), (0, True))`` and friends -> ``e*Heaviside(e)``; else None."""
    if len(pw.args) != 2:
        return None
    (e1, c1), (e2, c2) = pw.args
    if c2 != sp.true:
        return None
    if isinstance(c1, (sp.StrictGreaterThan, sp.GreaterThan)) and c1.rhs == 0:
        arg = c1.lhs
    elif isinstance(c1, (sp.StrictLessThan, sp.LessThan)) and c1.lhs == 0:
        arg = c1.rhs
    else:
        return None
    if sp.simplify(e1 - arg) == 0 and e2 == 0:
        return arg * sp.Heaviside(arg)
    if e1 == 0 and sp.simplify(e2 - arg) == 0:
        return arg * sp.Heaviside(-arg)
    return None


def normalise_nonsmooth(expr: _Expr) -> sp.Expr:
    """Rewrite ``Max(0, e)``, ``Min(0, e)``, ``Abs``, ``sign`` and ReLU-shaped
    ``Piecewise`` in terms of ``Heaviside`` (equal almost everywhere).

        >>> x = sp.Symbol("x", real=True)
        >>> normalise_nonsmooth(sp.Max(0, x))
        x*Heaviside(x)
        >>> normalise_nonsmooth(sp.Abs(x))
        x*(2*Heaviside(x) - 1)
    """
    expr = _as_sympy(expr, "expression")

    def mx(e: _Expr) -> _Expr:
        a: Any
        b: Any
        a, b = e.args if len(e.args) == 2 else (None, None)
        if a is None:
            return e
        if a == 0:
            return b * sp.Heaviside(b) if isinstance(e, sp.Max) else b * sp.Heaviside(-b)
        if b == 0:
            return a * sp.Heaviside(a) if isinstance(e, sp.Max) else a * sp.Heaviside(-a)
        return e

    expr = expr.replace(lambda e: isinstance(e, (sp.Max, sp.Min)), mx)
    expr = expr.replace(lambda e: isinstance(e, sp.Abs), lambda e: e.args[0] * (2 * sp.Heaviside(e.args[0]) - 1))
    expr = expr.replace(lambda e: isinstance(e, sp.sign), lambda e: 2 * sp.Heaviside(e.args[0]) - 1)

    def pw(e: _Expr) -> _Expr:
        r = _relu_piece(e)
        return e if r is None else r
    expr = expr.replace(lambda e: isinstance(e, sp.Piecewise), pw)
    return expr


def collapse_heaviside(expr: _Expr) -> sp.Expr:
    """``Heaviside(e)**n -> Heaviside(e)``, ``Heaviside(a e) -> Heaviside(e)`` (a > 0),
    ``Heaviside(e) Heaviside(-e) -> 0``, dropping an explicit value at 0."""
    def strip(e: _Expr) -> _Expr:
        arg = e.args[0]
        c, rest = arg.as_coeff_Mul()
        if c.is_number and c > 0 and c != 1:
            arg = rest
        return sp.Heaviside(arg)
    expr = expr.replace(lambda e: isinstance(e, sp.Heaviside), strip)
    expr = expr.replace(lambda e: e.is_Pow and isinstance(e.base, sp.Heaviside)
                        and e.exp.is_Integer and e.exp > 0, lambda e: e.base)

    def mul(e: _Expr) -> _Expr:
        hs = [f for f in e.args if isinstance(f, sp.Heaviside)]
        for a in hs:
            for b in hs:
                if a is not b and sp.expand(a.args[0] + b.args[0]) == 0:
                    return sp.Integer(0)
        if len(hs) > 1:
            seen = []
            rest = []
            for f in e.args:
                if isinstance(f, sp.Heaviside):
                    if f in seen:
                        continue
                    seen.append(f)
                rest.append(f)
            return sp.Mul(*rest)
        return e
    return expr.replace(lambda e: e.is_Mul, mul)


def is_polynomial_in(expr: _Expr, x: _Expr) -> bool:
    """True when ``expr`` is a polynomial in ``x`` (the Wick route applies).

        >>> x = sp.Symbol("x")
        >>> is_polynomial_in(x ** 3 - x, x), is_polynomial_in(sp.tanh(x), x)
        (True, False)
    """
    expr = _as_sympy(expr, "expression")
    if not expr.has(x):
        return True
    return bool(expr.is_polynomial(x))


# -- 1-D closed forms -----------------------------------------------------------------
def gauss_moment(p: int, m: _Expr, v: _Expr) -> sp.Expr:
    """``E[X^p]`` for ``X ~ N(m, v)``.

        >>> m, v = sp.symbols("m v", positive=True)
        >>> gauss_moment(4, 0, v), sp.expand(gauss_moment(2, m, v))
        (3*v**2, m**2 + v)
    """
    tot = sp.Integer(0)
    for j in range(0, p + 1, 2):
        tot += sp.binomial(p, j) * m ** (p - j) * v ** sp.Rational(j, 2) * sp.factorial2(j - 1)
    return tot


def _pdf0(m: _Expr, v: _Expr) -> _Expr:
    return sp.exp(-m ** 2 / (2 * v)) / sp.sqrt(2 * sp.pi * v)


def _half_moment(p: int, m: _Expr, v: _Expr) -> sp.Expr:
    """``E[X^p theta(X)]`` by Stein's recursion."""
    if m == 0:
        vals = [sp.Rational(1, 2), sp.sqrt(v) / sp.sqrt(2 * sp.pi)]
        for n in range(2, p + 1):
            vals.append((n - 1) * v * vals[n - 2])
        return vals[p]
    vals = [(1 + sp.erf(m / sp.sqrt(2 * v))) / 2]
    vals.append(m * vals[0] + v * _pdf0(m, v))
    for n in range(2, p + 1):
        vals.append(m * vals[n - 1] + (n - 1) * v * vals[n - 2])
    return vals[p]


def _delta_moment(p: int, j: int, m: _Expr, v: _Expr) -> sp.Expr:
    """``E[X^p delta^(j)(X)] = (-1)^j d^j/dx^j [x^p pdf(x)] at 0``."""
    t = sp.Dummy("t", real=True)
    pdf = sp.exp(-(t - m) ** 2 / (2 * v)) / sp.sqrt(2 * sp.pi * v)
    return sp.simplify((-1) ** j * sp.diff(t ** p * pdf, t, j).subs(t, 0))


def _exp_moment(p: int, alpha: _Expr, beta: _Expr, gamma: _Expr, m: _Expr,
                v: _Expr) -> sp.Expr:
    """``E[X^p exp(alpha X^2 + beta X + gamma)]`` by completing the square."""
    den = 1 - 2 * alpha * v
    v2 = v / den
    m2 = (m + beta * v) / den
    expo = sp.cancel(((m + beta * v) ** 2 / den - m ** 2) / (2 * v)) + gamma
    return sp.exp(expo) / sp.sqrt(den) * gauss_moment(p, m2, v2)


def _erf_moment(p: int, a: _Expr, m: _Expr, v: _Expr) -> sp.Expr:
    """``E[X^p erf(a X)]`` by Stein's recursion (any mean)."""
    vals = [sp.Integer(0) if m == 0 else sp.erf(a * m / sp.sqrt(1 + 2 * a ** 2 * v))]
    for n in range(1, p + 1):
        prev2 = vals[n - 2] if n >= 2 else sp.Integer(0)
        e = _exp_moment(n - 1, -a ** 2, 0, 0, m, v)
        vals.append(m * vals[n - 1] + v * ((n - 1) * prev2 + 2 * a / sp.sqrt(sp.pi) * e))
    return vals[p]


def _linear_coeff(arg: _Expr, x: _Expr) -> _Expr | None:
    """``arg = a*x`` with ``a`` free of x -> a; else None."""
    a = sp.simplify(arg / x)
    return None if a.has(x) else a


def _split_term(term: _Expr, x: _Expr) -> tuple[_Expr, int, list[_Expr]]:
    """``coeff * x^p * [atoms]`` -> (coeff, p, atoms)."""
    coeff, dep = term.as_independent(x, as_Add=False)
    p = 0
    atoms = []
    for f in sp.Mul.make_args(dep):
        if f == 1:
            continue
        b, e = f.as_base_exp()
        if b == x and e.is_Integer and e >= 0:
            p += int(e)
        else:
            atoms.append(f)
    return coeff, p, atoms


def _atom_moment(p: int, atoms: list[_Expr], x: _Expr, m: _Expr, v: _Expr) -> sp.Expr:
    if not atoms:
        return gauss_moment(p, m, v)
    exps = [a for a in atoms if isinstance(a, sp.exp)]
    others = [a for a in atoms if not isinstance(a, sp.exp)]
    if exps and not others:
        arg = sp.expand(sp.Add(*[e.args[0] for e in exps]))
        try:
            poly = sp.Poly(arg, x)
        except sp.PolynomialError:
            raise NoClosedForm(f"exp({arg}) is not exp of a quadratic in {x}") from None
        if poly.degree() > 2:
            raise NoClosedForm(f"exp({arg}) is not exp of a quadratic in {x}")
        c = poly.all_coeffs()[::-1] + [0, 0, 0]
        return _exp_moment(p, c[2], c[1], c[0], m, v)
    if len(atoms) == 1:
        a = atoms[0]
        if isinstance(a, sp.Heaviside):
            arg = a.args[0]
            if arg == x:
                return _half_moment(p, m, v)
            if sp.expand(arg + x) == 0:
                return gauss_moment(p, m, v) - _half_moment(p, m, v)
        if isinstance(a, sp.DiracDelta) and a.args[0] == x:
            j = int(a.args[1]) if len(a.args) > 1 else 0
            return _delta_moment(p, j, m, v)
        if isinstance(a, sp.erf):
            s = _linear_coeff(a.args[0], x)
            if s is not None:
                return _erf_moment(p, s, m, v)
        if a.is_Pow and isinstance(a.base, sp.erf) and a.exp == 2 and p == 0 and m == 0:
            s = _linear_coeff(a.base.args[0], x)
            if s is not None:
                return 2 / sp.pi * sp.asin(2 * s ** 2 * v / (1 + 2 * s ** 2 * v))
    raise NoClosedForm(f"no closed form for E[x^{p} * {sp.Mul(*atoms)}] with x Gaussian"
                       + ("" if m == 0 else " (non-zero mean)"))


def expect_1d(h: _Expr, x: _Expr, m: _Expr, v: _Expr) -> sp.Expr:
    """Closed form of ``E[h(X)]`` for ``X ~ N(m, v)`` (``h`` an expression in ``x``).

    Handles polynomials times at most one of ``Heaviside(+-x)``,
    ``DiracDelta(x, j)``, ``erf(a x)``, ``exp(quadratic)``, and ``erf(a x)^2``
    when centred. Raises :class:`NoClosedForm` otherwise.

        >>> x = sp.Symbol("x", real=True)
        >>> v = sp.Symbol("v", positive=True)
        >>> sp.simplify(expect_1d(x * sp.Heaviside(x), x, 0, v))
        sqrt(2)*sqrt(v)/(2*sqrt(pi))
    """
    h = collapse_heaviside(sp.expand(normalise_nonsmooth(h)))
    h = collapse_heaviside(sp.expand(h))
    total = sp.Integer(0)
    for term in sp.Add.make_args(h):
        if term == 0:
            continue
        coeff, p, atoms = _split_term(term, x)
        total += coeff * _atom_moment(p, atoms, x, m, v)
    return total


def hermite_coefficients(f: _Expr, n_max: int, x: _Expr, v: _Expr, m: _Expr = 0
                         ) -> list[_Expr]:
    """Symbolic Hermite coefficients ``a_n = E[f(m + sqrt(v) z) He_n(z)] / n!``,
    ``n = 0..n_max``, via ``a_n = v^(n/2) E[f^(n)(X)] / n!``.

    ``f`` is an expression in ``x``; exact (no quadrature). For a polynomial of
    degree ``d`` the coefficients vanish beyond ``d``.

        >>> x = sp.Symbol("x", real=True)
        >>> v = sp.Symbol("v", positive=True)
        >>> hermite_coefficients(x ** 3, 4, x, v)
        [0, 3*v**(3/2), 0, v**(3/2), 0]
    """
    f = normalise_nonsmooth(_as_sympy(f, "f"))
    out = []
    d = f
    for n in range(n_max + 1):
        out.append(sp.simplify(v ** sp.Rational(n, 2) * expect_1d(d, x, m, v) / sp.factorial(n)))
        d = sp.diff(d, x)
    return out


# -- pairs ---------------------------------------------------------------------------
def _atom_kind(f: _Expr, x: _Expr) -> tuple[Any, ...] | None:
    """Classify a non-polynomial single-variable function for the pair table:
    ("relu", scale) for ``scale * x * theta(x)``, ("erf", scale, a) for
    ``scale * erf(a x)``, else None."""
    f = collapse_heaviside(sp.expand(normalise_nonsmooth(f)))
    parts: tuple[Any, Any, Any] = _split_term(f, x) if not f.is_Add else (None, None, None)
    coeff, p, atoms = parts
    if coeff is None:
        return None
    if p == 1 and len(atoms) == 1 and isinstance(atoms[0], sp.Heaviside) and atoms[0].args[0] == x:
        return ("relu", coeff)
    if p == 0 and len(atoms) == 1 and isinstance(atoms[0], sp.erf):
        a = _linear_coeff(atoms[0].args[0], x)
        if a is not None:
            return ("erf", coeff, a)
    return None


def _terms_of(f: _Expr, x: _Expr) -> list[_Expr]:
    f = collapse_heaviside(sp.expand(normalise_nonsmooth(f)))
    return [t for t in sp.Add.make_args(f) if t != 0]


def _conditional_poly(g_poly: _Expr, y: _Expr, x: _Expr, mx: _Expr, my: _Expr, vx: _Expr,
                      vy: _Expr, c: _Expr) -> _Expr:
    """``E[g(Y) | X]`` as a polynomial in ``x`` (jointly Gaussian X, Y)."""
    cm = my + c / vx * (x - mx)
    cv = vy - c ** 2 / vx
    P = sp.Poly(sp.expand(g_poly), y)
    out = sp.Integer(0)
    for (k,), coef in P.terms():
        out += coef * gauss_moment(k, cm, cv)
    return sp.expand(out)


def _centred_pair_moment(i: int, j: int, vx: _Expr, vy: _Expr, c: _Expr) -> sp.Expr:
    """``E[U^i V^j]`` for centred jointly Gaussian ``U, V`` (Isserlis: k cross pairs)."""
    tot = sp.Integer(0)
    for k in range(min(i, j) + 1):
        if (i - k) % 2 or (j - k) % 2:
            continue
        tot += (sp.binomial(i, k) * sp.binomial(j, k) * sp.factorial(k) * c ** k
                * vx ** sp.Rational(i - k, 2) * sp.factorial2(i - k - 1)
                * vy ** sp.Rational(j - k, 2) * sp.factorial2(j - k - 1))
    return tot


def _wick_pair(f: _Expr, g: _Expr, x: _Expr, y: _Expr, mx: _Expr, my: _Expr, vx: _Expr,
               vy: _Expr, c: _Expr) -> sp.Expr:
    """``E[f(X) g(Y)]`` for polynomials, exact (no division by a variance)."""
    Pf = sp.Poly(sp.expand(f), x)
    Pg = sp.Poly(sp.expand(g), y)
    tot = sp.Integer(0)
    for (a,), ca in Pf.terms():
        for (b,), cb in Pg.terms():
            # X^a Y^b with X = mx + U, Y = my + V
            for i in range(a + 1):
                for j in range(b + 1):
                    tot += (ca * cb * sp.binomial(a, i) * sp.binomial(b, j)
                            * mx ** (a - i) * my ** (b - j) * _centred_pair_moment(i, j, vx, vy, c))
    return sp.expand(tot)


def pair_closed(f: _Expr, g: _Expr, x: _Expr, y: _Expr, mx: _Expr, my: _Expr, vx: _Expr,
                vy: _Expr, c: _Expr) -> sp.Expr:
    """Closed form of ``E[f(X) g(Y)]`` (``f`` in ``x``, ``g`` in ``y``), jointly
    Gaussian with means ``mx, my``, variances ``vx, vy``, covariance ``c``.

    Polynomial pairs by Wick; one polynomial side by conditioning; two
    non-polynomial sides by the centred table (ReLU/erf). Raises
    :class:`NoClosedForm` otherwise.

        >>> x, y = sp.symbols("x y", real=True)
        >>> c = sp.Symbol("c", real=True)
        >>> pair_closed(x ** 2, y ** 2, x, y, 0, 0, 1, 1, c)
        2*c**2 + 1
    """
    total = sp.Integer(0)
    for tf in _terms_of(f, x):
        for tg in _terms_of(g, y):
            total += _pair_term(tf, tg, x, y, mx, my, vx, vy, c)
    return total


def _pair_term(f: _Expr, g: _Expr, x: _Expr, y: _Expr, mx: _Expr, my: _Expr, vx: _Expr,
               vy: _Expr, c: _Expr) -> _Expr:
    fp, gp = is_polynomial_in(f, x), is_polynomial_in(g, y)
    if fp and gp:
        return _wick_pair(f, g, x, y, mx, my, vx, vy, c)
    if gp:
        return expect_1d(sp.expand(f * _conditional_poly(g, y, x, mx, my, vx, vy, c)), x, mx, vx)
    if fp:
        return expect_1d(sp.expand(g * _conditional_poly(f, x, y, my, mx, vy, vx, c)), y, my, vy)
    if mx != 0 or my != 0:
        raise NoClosedForm(f"no closed form for E[{f} * {g}] with non-zero means")
    kf, kg = _atom_kind(f, x), _atom_kind(g, y)
    if kf is None or kg is None:
        raise NoClosedForm(f"no closed form for E[{f} * {g}]")
    if kf[0] == "erf" and kg[0] == "relu":
        kf, kg, vx, vy = kg, kf, vy, vx
    if kf[0] == "relu" and kg[0] == "relu":
        rho = c / sp.sqrt(vx * vy)
        return kf[1] * kg[1] * (sp.sqrt(vx * vy - c ** 2) + c * (sp.pi - sp.acos(rho))) / (2 * sp.pi)
    if kf[0] == "erf" and kg[0] == "erf":
        a, b = kf[2], kg[2]
        return kf[1] * kg[1] * 2 / sp.pi * sp.asin(
            2 * a * b * c / sp.sqrt((1 + 2 * a ** 2 * vx) * (1 + 2 * b ** 2 * vy)))
    if kf[0] == "relu" and kg[0] == "erf":
        b = kg[2]
        return kf[1] * kg[1] * b * c / sp.sqrt(sp.pi * (1 + 2 * b ** 2 * vy))
    raise NoClosedForm(f"no closed form for E[{f} * {g}]")


def pair_mehler(f: _Expr, g: _Expr, x: _Expr, y: _Expr, mx: _Expr, my: _Expr, vx: _Expr,
                vy: _Expr, c: _Expr, order: int) -> tuple[_Expr, _Expr | None, bool]:
    """Mehler's series for ``E[f(X) g(Y)]`` truncated after ``order``.

    Returns ``(series, bound, exact)``: ``exact`` is True when the series
    terminates (a polynomial side of degree <= order), then ``bound`` is 0;
    otherwise ``bound`` is the Parseval bound ``|rho|^(N+1) sqrt(T_f T_g)``
    (a SymPy expression), or None if ``E[f^2]`` or ``E[g^2]`` has no closed form.

        >>> x, y = sp.symbols("x y", real=True)
        >>> c = sp.Symbol("c", real=True)
        >>> series, bound, exact = pair_mehler(x ** 2, y ** 2, x, y, 0, 0, 1, 1, c, 4)
        >>> sp.expand(series), bound, exact
        (2*c**2 + 1, 0, True)
    """
    f = normalise_nonsmooth(_as_sympy(f, "f"))
    g = normalise_nonsmooth(_as_sympy(g, "g"))
    deg = []
    for e, v_ in ((f, x), (g, y)):
        deg.append(sp.Poly(e, v_).degree() if is_polynomial_in(e, v_) and e.has(v_) else
                   (0 if not e.has(v_) else None))
    finite = [d for d in deg if d is not None]
    exact = bool(finite) and min(finite) <= order
    N = min(finite) if exact else order
    series = sp.Integer(0)
    fa, gb = [], []
    df, dg = f, g
    for n in range(N + 1):
        ef = expect_1d(df, x, mx, vx)
        eg = expect_1d(dg, y, my, vy)
        fa.append(ef)
        gb.append(eg)
        series += c ** n / sp.factorial(n) * ef * eg
        df, dg = sp.diff(df, x), sp.diff(dg, y)
    if exact:
        return series, sp.Integer(0), True
    try:
        Tf = expect_1d(sp.expand(f ** 2), x, mx, vx) - sum(vx ** n * fa[n] ** 2 / sp.factorial(n)
                                                          for n in range(N + 1))
        Tg = expect_1d(sp.expand(g ** 2), y, my, vy) - sum(vy ** n * gb[n] ** 2 / sp.factorial(n)
                                                          for n in range(N + 1))
    except NoClosedForm:
        return series, None, False
    rho2 = c ** 2 / (vx * vy)
    bound = rho2 ** sp.Rational(N + 1, 2) * sp.sqrt(sp.Max(0, Tf) * sp.Max(0, Tg))
    return series, bound, False


# -- numeric helpers (numpy only) ---------------------------------------------------------
@lru_cache(maxsize=64)
def _gh(n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    z, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    z.setflags(write=False)
    w.setflags(write=False)
    return z, w


def gauss_hermite(n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Probabilists' Gauss-Hermite rule for ``N(0, 1)``: nodes and weights summing to 1.

        >>> z, w = gauss_hermite(10)
        >>> round(float(w.sum()), 12), round(float(w @ z ** 2), 12), round(float(w @ z ** 4), 12)
        (1.0, 1.0, 3.0)
    """
    if n < 1 or n > 350:
        raise ValueError(f"n must be in 1..350 (numpy's rule overflows beyond), got {n}")
    return _gh(int(n))


def _normalised_he_table(z: np.ndarray, n_max: int) -> np.ndarray:
    """``h_n(z)`` for n = 0..n_max (rows), by the stable three-term recurrence."""
    H = np.empty((n_max + 1,) + np.shape(z))
    H[0] = 1.0
    if n_max >= 1:
        H[1] = z
    for n in range(1, n_max):
        H[n + 1] = (z * H[n] - math.sqrt(n) * H[n - 1]) / math.sqrt(n + 1)
    return H


def hermite_coefficients_numeric(func: Callable[[np.ndarray], Any], n_max: int,
                                 m: float = 0.0, v: float = 1.0, n_quad: int = 200
                                 ) -> tuple[NDArray[np.float64], float]:
    """Normalised coefficients ``b_n = E[f(m + sqrt(v) z) h_n(z)]``, n = 0..n_max,
    and ``E[f(X)^2]``, by Gauss-Hermite quadrature (``func`` vectorised numpy).

        >>> b, f2 = hermite_coefficients_numeric(lambda x: x ** 2, 3)
        >>> np.round(b, 6) + 0.0, round(f2, 6)
        (array([1.      , 0.      , 1.414214, 0.      ]), 3.0)
    """
    z, w = gauss_hermite(min(350, max(n_quad, n_max + 2)))
    fz = np.asarray(func(m + math.sqrt(v) * z), dtype=float)
    H = _normalised_he_table(z, n_max)
    return H @ (w * fz), float(w @ fz ** 2)


def mehler_numeric(f: Callable[[np.ndarray], Any], g: Callable[[np.ndarray], Any], vx: float,
                   vy: float, c: float, order: int, mx: float = 0.0, my: float = 0.0,
                   n_quad: int = 200) -> tuple[float, float]:
    """Truncated Mehler series for ``E[f(X) g(Y)]`` with its Parseval error bound.

    Returns ``(value, bound)``; ``|exact - value| <= bound`` up to the quadrature
    error of the coefficients (negligible for smooth functions at ``n_quad``).

        >>> value, bound = mehler_numeric(np.tanh, np.tanh, 1.0, 1.0, 0.5, 7)
        >>> bound < 1e-2, round(value, 3)
        (True, 0.186)
    """
    if vx <= 0 or vy <= 0:
        raise ValueError("mehler_numeric needs positive variances")
    rho = c / math.sqrt(vx * vy)
    if abs(rho) > 1 + 1e-12:
        raise ValueError(f"covariance c = {c} is not compatible with the variances (|rho| > 1)")
    bf, ef2 = hermite_coefficients_numeric(f, order, mx, vx, n_quad)
    bg, eg2 = hermite_coefficients_numeric(g, order, my, vy, n_quad)
    val = float(np.sum(rho ** np.arange(order + 1) * bf * bg))
    Tf = max(0.0, ef2 - float(bf @ bf))
    Tg = max(0.0, eg2 - float(bg @ bg))
    return val, abs(rho) ** (order + 1) * math.sqrt(Tf * Tg)


def multivariate_hermite_coefficients(func: Callable[[np.ndarray], Any], dim: int, order: int,
                                      n_quad: int = 12
                                      ) -> dict[tuple[int, ...], NDArray[np.float64]]:
    """Normalised multivariate Hermite coefficients of a vector function.

    ``func`` maps an ``(N, dim)`` array of standard normal ``z`` to ``(N, m)``
    values. Returns ``{nu: b_nu}`` for all multi-indices ``|nu| <= order``, with
    ``b_nu = E[F(z) h_nu(z)]`` and ``h_nu = prod_i h_{nu_i}(z_i)`` (tensor
    Gauss-Hermite with ``n_quad`` nodes per axis).

        >>> b = multivariate_hermite_coefficients(lambda z: z[:, :1] * z[:, 1:2], 2, 2)
        >>> {nu: np.round(v, 6).tolist() for nu, v in b.items() if abs(v).max() > 1e-9}
        {(1, 1): [1.0]}
    """
    z1, w1 = gauss_hermite(n_quad)
    grids = np.meshgrid(*([z1] * dim), indexing="ij")
    Z = np.stack([g.ravel() for g in grids], axis=1)
    W = np.ones(len(Z))
    for wg in np.meshgrid(*([w1] * dim), indexing="ij"):
        W = W * wg.ravel()
    F = np.asarray(func(Z), dtype=float)
    if F.ndim == 1:
        F = F[:, None]
    H = [_normalised_he_table(Z[:, i], order) for i in range(dim)]
    out = {}
    for nu in itertools.product(range(order + 1), repeat=dim):
        if sum(nu) > order:
            continue
        h = np.ones(len(Z))
        for i, n in enumerate(nu):
            h = h * H[i][n]
        out[nu] = (W * h) @ F
    return out


def mehler_series_multivariate(bf: dict, bg: dict, rho: float) -> float:
    """``sum_nu rho^|nu| <b_nu^f, b_nu^g>`` (Mehler for ``z2 = rho z1 + sqrt(1-rho^2) z'``).

        >>> b = multivariate_hermite_coefficients(lambda z: z[:, :1], 1, 3)
        >>> round(mehler_series_multivariate(b, b, 0.3), 12)
        0.3
    """
    return float(sum(rho ** sum(nu) * float(np.dot(bf[nu], bg[nu])) for nu in bf if nu in bg))


def eq23_series(coeffs: dict, rho: float) -> float:
    """Right-hand side of paper 003 eq. (23), ``(1/2) sum_nu rho^|nu| nu! ||H_nu||_F^2``.

    ``coeffs`` are the normalised coefficients ``b_nu = E[A(z) h_nu(z)]`` of
    ``A(z) = grad F(sqrt(q22) B^(1/2) z) B^(1/2)`` (flattened); in the paper's
    convention ``H_nu = E[A He_nu]/nu!``, so ``nu! ||H_nu||^2 = ||b_nu||^2``.

        >>> b = multivariate_hermite_coefficients(lambda z: np.ones((len(z), 1)), 1, 2)
        >>> round(eq23_series(b, 0.5), 12)
        0.5
    """
    return 0.5 * float(sum(rho ** sum(nu) * float(np.dot(b, b)) for nu, b in coeffs.items()))
