"""Safe parsing of user text into SymPy expressions (loss strings, activations, ``ell``).

Nothing here evaluates user text as Python. :func:`parse_expression` parses
with :func:`ast.parse` (``mode="eval"``), walks the tree against a whitelist
and builds the SymPy expression node by node (never ``sympify`` of a string).

Grammar (everything else is a one-line ``ValueError`` naming the offending
token and its column)::

    expr    := number | name | G[i, j, k] | G<k> | func(expr, ...)
             | expr (+ - * /) expr | (+ -) expr | expr ** exponent | ( expr )
    number  := int or decimal literal (finite; no complex ``1j``, no ``nan``/``inf``)
    name    := a declared symbol (``x`` in activations, ``a`` in ``ell``),
               a declared parameter, or the constant ``pi``
    G[i,j,k]:= integer literals with 0 <= i, j < L and 0 <= k < K
    G<k>    := shorthand for G[0,0,k-1] when L = 1 (1-based, 1 <= k <= K)
    func    := exp log sqrt tanh erf abs/Abs max/Max min/Min (>= 2 arguments)
               relu sigmoid softplus gelu linear identity square
               h<k> He<k> (normalised / plain Hermite, k <= MAX_HERMITE)
    exponent:= a constant: integer, fraction p/q (q <= MAX_EXPONENT) or decimal
               with |exponent| <= MAX_EXPONENT

Limits, checked on the text and the tree *before* any expansion:
``MAX_CHARS`` characters, ``MAX_NODES`` syntax-tree nodes, nesting depth
``MAX_DEPTH``, ``|exponent| <= MAX_EXPONENT``, exact constants of at most
``MAX_DIGITS`` digits (``9**9**9`` is refused, not computed), polynomial
degree at most ``MAX_DEGREE`` and at most ``MAX_TERMS`` monomials in an
expansion (estimated from the tree: the multinomial count of every power
and product, and ``C(n + D, D)`` for degree ``D`` in ``n`` variables).

:func:`check_loss_expression` validates a loss built in Python (complex,
``nan``, ``oo``, ``zoo`` and out-of-range coefficients; free symbols; no
dependence on ``G``; terms without a Gaussian expectation on the whole line,
:func:`check_gaussian_expectation`: ``1/G1``, ``log(G1)``, ``sqrt(G1)``, ``G1**0.5``). :class:`LossArray` is the ``G`` array handed to loss
callables: an index out of range names the index, ``K`` and ``L``.
:func:`as_sympy` converts API values to SymPy without ever parsing a string.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

import numpy as np
import sympy as sp
from sympy.tensor.array import ImmutableDenseNDimArray

from .symbols import X, g_array, hermite_activation
from .sympify import MAX_HERMITE, as_sympy, reject_strings

__all__ = [
    "MAX_CHARS", "MAX_NODES", "MAX_DEPTH", "MAX_EXPONENT", "MAX_DIGITS", "MAX_DEGREE",
    "MAX_TERMS", "MAX_HERMITE", "MAX_PARAMS", "parse_expression", "parse_loss", "parse_float",
    "parse_int", "check_loss_expression", "as_sympy", "LossArray", "loss_array",
    "allowed_functions", "reject_strings", "check_gaussian_expectation", "growth_order",
]

MAX_CHARS = 2000        #: longest accepted text
MAX_NODES = 1000        #: most syntax-tree nodes
MAX_DEPTH = 40          #: deepest nesting of the syntax tree
MAX_EXPONENT = 16       #: largest ``|exponent|`` (and denominator of a fractional one)
MAX_DIGITS = 300        #: largest exact constant: 10**MAX_DIGITS (float64 stops at 1.8e308)
MAX_DEGREE = 64         #: largest polynomial degree (functions count as degree-1 atoms)
MAX_TERMS = 20_000      #: most monomials an expansion may produce (estimate)
MAX_PARAMS = 16         #: most parameters of one expression

_FLOAT_MAX = 1e300      # coefficients beyond this overflow float64 in the kernels
_PARAM_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}\Z")
# names never taken as parameters: SymPy's special constants, Python builtins and keywords
_RESERVED = ({"I", "E", "S", "N", "O", "Q", "oo", "zoo", "nan", "inf", "infinity", "pi",
              "G", "x", "lambda"} | set(dir(builtins)) | set(keyword.kwlist))


def _sigmoid(g: sp.Expr) -> sp.Expr:
    return 1 / (1 + sp.exp(-g))


def _function_table() -> dict:
    """name -> (min args, max args, builder, kind); kind: 'poly' (degree-preserving,
    piecewise linear), 'atom' (opaque), or ('hermite', k)."""
    t = {
        "exp": (1, 1, sp.exp, "atom"),
        "log": (1, 1, sp.log, "atom"),
        "sqrt": (1, 1, sp.sqrt, "atom"),
        "tanh": (1, 1, sp.tanh, "atom"),
        "erf": (1, 1, sp.erf, "atom"),
        "abs": (1, 1, sp.Abs, "poly"),
        "Abs": (1, 1, sp.Abs, "poly"),
        "max": (2, 8, sp.Max, "poly"),
        "Max": (2, 8, sp.Max, "poly"),
        "min": (2, 8, sp.Min, "poly"),
        "Min": (2, 8, sp.Min, "poly"),
        "relu": (1, 1, lambda g: sp.Max(0, g), "poly"),
        "sigmoid": (1, 1, _sigmoid, "atom"),
        "softplus": (1, 1, lambda g: sp.log(1 + sp.exp(g)), "atom"),
        "gelu": (1, 1, lambda g: g * (1 + sp.erf(g / sp.sqrt(2))) / 2, "atom"),
        "linear": (1, 1, lambda g: g, "poly"),
        "identity": (1, 1, lambda g: g, "poly"),
        "square": (1, 1, lambda g: g ** 2, ("hermite", 2)),
    }
    return t


_FUNCTIONS = _function_table()
_HERMITE_RE = re.compile(r"(h|He)(\d+)\Z")


def allowed_functions() -> list:
    """Names of the functions a loss string may call.

        >>> {"exp", "tanh", "relu"} <= set(allowed_functions())
        True
    """
    return sorted(_FUNCTIONS, key=str.lower) + [f"h<k>, He<k> (k <= {MAX_HERMITE})"]


def _hermite(name: str
             ) -> int | tuple[int, int, Callable[[sp.Expr], sp.Expr], tuple[str, int]] | None:
    m = _HERMITE_RE.match(name)
    if not m:
        return None
    k = int(m.group(2))
    if k > MAX_HERMITE:
        return k
    act = hermite_activation(k, normalised=(m.group(1) == "h"))
    return (1, 1, lambda g, e=act.expr: e.xreplace({X: g}), ("hermite", k))


# -- the value carried up the tree ----------------------------------------------------------
@dataclass(frozen=True)
class _Val:
    expr: sp.Expr
    const: bool          # no symbols (G, parameters, variables) below
    deg: int             # polynomial degree bound (functions are atoms of degree 1)
    terms: int           # bound on the number of terms after expansion
    gsyms: frozenset     # symbols below (for the C(n + D, D) bound)


def _multinomial(t: int, n: int) -> int:
    """Number of monomials of ``(a_1 + ... + a_t)**n``: C(t + n - 1, n) (capped)."""
    if n <= 0 or t <= 1:
        return 1
    return min(math.comb(t + n - 1, n), 10 ** 12)


def _digits(v: sp.Number) -> float:
    """log10 of the size of an exact number (numerator or denominator, whichever is larger)."""
    if isinstance(v, sp.Rational):
        b = max(abs(int(v.p)).bit_length(), abs(int(v.q)).bit_length())
        return b * 0.30103
    if isinstance(v, sp.Float):
        f = abs(float(v)) if v.is_finite else math.inf
        return math.log10(f) if f > 0 else 0.0
    return 0.0


class _Parser:
    def __init__(self, text: str, what: str, symbols: dict[str, sp.Symbol] | None,
                 params: Sequence[str | sp.Symbol], auto_params: bool, G: Any, K: int | None,
                 L: int | None, shorthand: bool) -> None:
        self.text = text
        self.what = what
        self.symbols = dict(symbols or {})
        self.params = {str(p): (p if isinstance(p, sp.Symbol) else sp.Symbol(str(p), real=True))
                       for p in params}
        self.auto_params = auto_params
        self.found_params: dict[str, sp.Symbol] = {}
        self.G = G
        # the sizes of G (0 without a G: never read then)
        self.K: int = 0 if K is None else K
        self.L: int = 0 if L is None else L
        self.shorthand = shorthand
        self.nodes = 0

    # -- errors ------------------------------------------------------------------------
    def fail(self, node: ast.AST, msg: str) -> NoReturn:
        col = getattr(node, "col_offset", None)
        where = f" at column {col + 1}" if col is not None else ""
        raise ValueError(f"{self.what}: {msg}{where} in {_short(self.text)}")

    def token(self, node: ast.AST) -> str:
        seg = ast.get_source_segment(self.text, node) or type(node).__name__
        seg = " ".join(seg.split())
        return seg if len(seg) <= 40 else seg[:37] + "..."

    def allowed(self) -> str:
        names = []
        if self.G is not None:
            names.append("G[i,j,k]" + (", G1..G%d" % self.K if self.shorthand else ""))
        names += sorted(self.symbols) + sorted(self.params)
        if self.auto_params:
            names.append("parameter names")
        names.append("pi")
        return ", ".join(names + allowed_functions())

    # -- walk ----------------------------------------------------------------------------
    def build(self, node: ast.AST, depth: int = 0) -> _Val:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(node, f"expression too large (more than {MAX_NODES} syntax nodes)")
        if depth > MAX_DEPTH:
            self.fail(node, f"expression nested too deeply (more than {MAX_DEPTH} levels)")
        meth = getattr(self, "_" + type(node).__name__, None)
        if meth is None:
            self.fail(node, f"{_describe(node)} {self.token(node)!r} is not allowed "
                            f"(allowed: numbers, + - * / **, {self.allowed()})")
        val: _Val = meth(node, depth + 1)
        return val

    def _Constant(self, node: ast.Constant, depth: int) -> _Val:
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            kind = "complex number" if isinstance(v, complex) else f"literal {type(v).__name__}"
            self.fail(node, f"{kind} {self.token(node)!r} is not allowed (real numbers only)")
        if isinstance(v, float):
            if not math.isfinite(v):
                self.fail(node, f"number {self.token(node)!r} is not finite")
            if abs(v) > _FLOAT_MAX:
                self.fail(node, f"number {self.token(node)!r} is too large (|x| <= {_FLOAT_MAX:g})")
            e = sp.Float(v)
        else:
            if v.bit_length() * 0.30103 > MAX_DIGITS:
                self.fail(node, f"integer {self.token(node)!r} has more than {MAX_DIGITS} digits")
            e = sp.Integer(v)
        return _Val(e, True, 0, 1, frozenset())

    def _Name(self, node: ast.Name, depth: int) -> _Val:
        name = node.id
        if name in self.symbols:
            s = self.symbols[name]
            return _Val(s, False, 1, 1, frozenset([s]))
        if name in self.params:
            return _Val(self.params[name], False, 0, 1, frozenset())
        if name == "pi":
            return _Val(sp.pi, True, 0, 1, frozenset())
        if self.G is not None:
            m = re.fullmatch(r"G(\d{1,6})", name)
            if m and self.shorthand:
                k = int(m.group(1))
                if not 1 <= k <= self.K:
                    self.fail(node, f"index {name} out of range: G1..G{self.K} are 1-based "
                                    f"(K = {self.K}, L = {self.L})")
                s = self.G[0, 0, k - 1]
                return _Val(s, False, 1, 1, frozenset([s]))
            if name == "G":
                self.fail(node, "G must be indexed as G[i,j,k] (0-based integers)")
        if name in _FUNCTIONS or _HERMITE_RE.match(name):
            self.fail(node, f"function {name!r} must be called, as {name}(...)")
        if (self.auto_params and _PARAM_RE.match(name) and name not in _RESERVED
                and not re.fullmatch(r"G\d*", name)):
            if name not in self.found_params:
                if len(self.found_params) + len(self.params) >= MAX_PARAMS:
                    self.fail(node, f"too many parameters (at most {MAX_PARAMS})")
                self.found_params[name] = sp.Symbol(name, real=True)
            return _Val(self.found_params[name], False, 0, 1, frozenset())
        self.fail(node, f"name {_short(name, 40)} is not allowed (allowed: {self.allowed()})")

    def _Subscript(self, node: ast.Subscript, depth: int) -> _Val:
        if not (isinstance(node.value, ast.Name) and node.value.id == "G") or self.G is None:
            self.fail(node, f"subscript {self.token(node)!r} is not allowed (only G[i,j,k])")
        sl = node.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        idx = []
        for e in elts:
            if (isinstance(e, ast.Constant) and isinstance(e.value, int)
                    and not isinstance(e.value, bool)):
                idx.append(e.value)
            else:
                self.fail(e, f"index {self.token(e)!r} of G must be a non-negative integer literal")
        if len(idx) != 3:
            self.fail(node, f"{self.token(node)!r}: G takes three indices G[i,j,k]")
        i, j, k = idx
        if not (0 <= i < self.L and 0 <= j < self.L and 0 <= k < self.K):
            self.fail(node, f"index G[{i},{j},{k}] out of range: K = {self.K}, L = {self.L} "
                            "(0 <= i, j < L, 0 <= k < K; indices are 0-based)")
        s = self.G[i, j, k]
        return _Val(s, False, 1, 1, frozenset([s]))

    def _Expression(self, node: ast.Expression, depth: int) -> _Val:
        return self.build(node.body, depth)

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> _Val:
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            self.fail(node, f"operator {self.token(node)!r} is not allowed (unary + and - only)")
        v = self.build(node.operand, depth)
        e = -v.expr if isinstance(node.op, ast.USub) else v.expr
        return _Val(e, v.const, v.deg, v.terms, v.gsyms)

    def _BinOp(self, node: ast.BinOp, depth: int) -> _Val:
        ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
        op = ops.get(type(node.op))
        if op is None:
            self.fail(node, f"operator in {self.token(node)!r} is not allowed (+ - * / ** only)")
        if op != "**":
            return self._chain(node, op, depth)
        a = self.build(node.left, depth)
        return self._power(node, a, depth)

    def _chain(self, node: ast.BinOp, op: str, depth: int) -> _Val:
        """``a + b - c + ...`` (or ``a * b / c ...``) left to right, iteratively: a
        long sum is one level of nesting, not one per term."""
        group = (ast.Add, ast.Sub) if op in "+-" else (ast.Mult, ast.Div)
        spine = []
        cur: ast.expr = node
        while isinstance(cur, ast.BinOp) and isinstance(cur.op, group):
            spine.append(cur)
            cur = cur.left
            self.nodes += 1
            if self.nodes > MAX_NODES:
                self.fail(cur, f"expression too large (more than {MAX_NODES} syntax nodes)")
        acc = self.build(cur, depth)
        for n in reversed(spine):
            acc = self._binary(n, acc, self.build(n.right, depth))
        return acc

    def _binary(self, node: ast.BinOp, a: _Val, b: _Val) -> _Val:
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(node.op)]
        const = a.const and b.const
        gs = a.gsyms | b.gsyms
        if op in "+-":
            deg, terms = max(a.deg, b.deg), a.terms + b.terms
        elif op == "*":
            deg, terms = a.deg + b.deg, a.terms * b.terms
        else:  # the denominator is an atom of its own; expand still expands it
            deg, terms = a.deg + b.deg, max(a.terms, b.terms)
        if const:
            self._check_constant(node, a.expr, b.expr, op)
        e = {"+": lambda: a.expr + b.expr, "-": lambda: a.expr - b.expr,
             "*": lambda: a.expr * b.expr, "/": lambda: a.expr / b.expr}[op]()
        return self._checked(node, _Val(e, const, deg, terms, gs))

    def _check_constant(self, node: ast.AST, x: sp.Expr, y: sp.Expr, op: str) -> None:
        if isinstance(x, sp.Number) and isinstance(y, sp.Number):
            est = _digits(x) + _digits(y) if op in "*/" else max(_digits(x), _digits(y)) + 1
            if est > MAX_DIGITS:
                self.fail(node, f"constant {self.token(node)!r} is too large "
                                f"(more than {MAX_DIGITS} digits)")

    def _power(self, node: ast.BinOp, base: _Val, depth: int) -> _Val:
        ex = self.build(node.right, depth)
        if not ex.const:
            self.fail(node.right, f"exponent {self.token(node.right)!r} must be a number "
                                  f"(|exponent| <= {MAX_EXPONENT}; use exp(...) otherwise)")
        p = ex.expr
        ok = False
        if isinstance(p, sp.Integer):
            ok = abs(int(p)) <= MAX_EXPONENT
        elif isinstance(p, sp.Rational):
            ok = abs(p) <= MAX_EXPONENT and int(p.q) <= MAX_EXPONENT
        elif isinstance(p, sp.Float):
            ok = p.is_finite and abs(float(p)) <= MAX_EXPONENT
        if not ok:
            self.fail(node.right, f"exponent {self.token(node.right)!r} is not allowed: exponents "
                                  f"are integers, fractions p/q or decimals with |exponent| <= "
                                  f"{MAX_EXPONENT}")
        n = int(math.ceil(abs(float(p))))
        if base.const and isinstance(base.expr, sp.Number):
            if _digits(base.expr) * abs(float(p)) > MAX_DIGITS:
                self.fail(node, f"constant {self.token(node)!r} is too large "
                                f"(more than {MAX_DIGITS} digits)")
        if isinstance(p, sp.Integer):
            deg, terms = base.deg * n, _multinomial(base.terms, n)
        else:  # a non-integer power is an atom (sqrt(...)); its base expands on its own
            deg, terms = max(base.deg, 1 if base.gsyms else 0), base.terms
        e = base.expr ** p
        return self._checked(node, _Val(e, base.const, deg, terms, base.gsyms))

    def _Attribute(self, node: ast.Attribute, depth: int) -> _Val:
        # report the innermost offending token first: __import__('os').system -> __import__
        self.build(node.value, depth)
        self.fail(node, f"attribute access '.{_short(node.attr, 40)[1:-1]}' is not allowed")

    def _Call(self, node: ast.Call, depth: int) -> _Val:
        if not isinstance(node.func, ast.Name):
            self.build(node.func, depth)  # raises for attributes, lambdas, subscripts...
            self.fail(node, f"call {self.token(node)!r} is not allowed (only the functions "
                            f"{', '.join(allowed_functions())})")
        name = node.func.id
        spec = _FUNCTIONS.get(name) or _hermite(name)
        if isinstance(spec, int):
            self.fail(node, f"Hermite order in {name!r} is too large (k <= {MAX_HERMITE})")
        if spec is None:
            self.fail(node, f"function {_short(name, 40)} is not allowed (allowed: "
                            f"{', '.join(allowed_functions())})")
        if node.keywords:
            kw = node.keywords[0]
            self.fail(kw, f"keyword argument {self.token(kw)!r} is not allowed")
        lo, hi, fn, kind = spec
        for a in node.args:
            if isinstance(a, ast.Starred):
                self.fail(a, f"starred argument {self.token(a)!r} is not allowed")
        if not lo <= len(node.args) <= hi:
            n = f"{lo}" if lo == hi else f"{lo} to {hi}"
            self.fail(node, f"{name}() takes {n} argument(s), got {len(node.args)}")
        args = [self.build(a, depth) for a in node.args]
        const = all(a.const for a in args)
        gs = frozenset().union(*(a.gsyms for a in args))
        if kind == "poly":
            deg, terms = max(a.deg for a in args), max(a.terms for a in args)
        elif kind == "atom":
            deg, terms = (1 if gs else 0), max(a.terms for a in args)
        else:  # ("hermite", k): a polynomial of degree k in its argument
            k = kind[1]
            deg, terms = args[0].deg * k, sum(_multinomial(args[0].terms, j) for j in range(k + 1))
        e = fn(*[a.expr for a in args])
        return self._checked(node, _Val(e, const, deg, terms, gs))

    def _checked(self, node: ast.AST, v: _Val) -> _Val:
        if v.deg > MAX_DEGREE:
            self.fail(node, f"{self.token(node)!r} has polynomial degree {v.deg} "
                            f"(limit {MAX_DEGREE})")
        mono = v.terms
        if v.gsyms and v.deg:
            mono = min(mono, math.comb(len(v.gsyms) + v.deg, v.deg))
        if mono > MAX_TERMS:
            self.fail(node, f"{self.token(node)!r} would expand to about {mono} terms "
                            f"(limit {MAX_TERMS})")
        if v.const and isinstance(v.expr, sp.Number) and _digits(v.expr) > MAX_DIGITS:
            self.fail(node, f"constant {self.token(node)!r} is too large "
                            f"(more than {MAX_DIGITS} digits)")
        return v


def _describe(node: ast.AST) -> str:
    names = {
        ast.Attribute: "attribute access", ast.Lambda: "lambda", ast.ListComp: "comprehension",
        ast.SetComp: "comprehension", ast.DictComp: "comprehension",
        ast.GeneratorExp: "generator expression", ast.JoinedStr: "f-string",
        ast.FormattedValue: "f-string", ast.Starred: "starred expression",
        ast.Compare: "comparison", ast.BoolOp: "boolean operator", ast.IfExp: "conditional",
        ast.List: "list", ast.Tuple: "tuple", ast.Dict: "dict", ast.Set: "set",
        ast.NamedExpr: "assignment expression", ast.Await: "await", ast.Yield: "yield",
        ast.YieldFrom: "yield", ast.Slice: "slice",
    }
    return names.get(type(node), f"syntax {type(node).__name__}")


def _short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n - 3] + "...")


def parse_expression(text: str, *, what: str = "expression",
                     symbols: dict[str, sp.Symbol] | None = None,
                     params: Sequence[str | sp.Symbol] = (), auto_params: bool = False,
                     G: Any = None, shorthand: bool = False) -> sp.Expr:
    """Parse ``text`` into a SymPy expression without executing anything.

    Parameters
    ----------
    text : str
        The expression (grammar and limits: module docstring).
    what : str
        Name used in error messages (``"loss"``, ``"ell"``, ``"--loss"``).
    symbols : dict name -> sympy.Symbol
        Variables the text may use (``{"x": X}`` for an activation).
    params : names or symbols
        Declared parameters.
    auto_params : bool
        Also accept other plain identifiers (letters, digits, ``_``; not a
        builtin, keyword or SymPy constant name) as real parameters.
    G : L x L x K array or None
        The pre-activation symbols, enabling ``G[i,j,k]`` (and ``G<k>`` with
        ``shorthand`` when ``L = 1``).

    Returns the expression; raises ``ValueError`` (one line) on anything else.

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> parse_expression("tanh(x)**2 + 1", symbols={"x": x})
    tanh(x)**2 + 1
    >>> parse_expression("__import__('os')", symbols={"x": x})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: expression: function '__import__' is not allowed ...
    """
    expr, _ = _parse(text, what, symbols, params, auto_params, G, shorthand)
    return expr


def _parse(text: str, what: str, symbols: dict[str, sp.Symbol] | None,
           params: Sequence[str | sp.Symbol], auto_params: bool, G: Any,
           shorthand: bool) -> tuple[sp.Expr, tuple[sp.Symbol, ...]]:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a string, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ValueError(f"{what}: text too long ({len(text)} characters, limit {MAX_CHARS})")
    if not text.strip():
        raise ValueError(f"{what}: empty expression")
    K = L = None
    if G is not None:
        L, _, K = G.shape
    try:
        with warnings.catch_warnings():  # "invalid decimal literal" & co. would print a second line
            warnings.simplefilter("ignore")
            tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        col = f" at column {exc.offset}" if exc.offset else ""
        raise ValueError(f"{what}: syntax error{col} ({exc.msg}) in {_short(text)}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, parser limits
        raise ValueError(f"{what}: cannot parse {_short(text)} ({type(exc).__name__})") from None
    p = _Parser(text.strip(), what, symbols, params, auto_params, G, K, L, shorthand)
    try:
        v = p.build(tree)
    except RecursionError:
        raise ValueError(f"{what}: expression nested too deeply") from None
    expr = v.expr
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"{what}: {_short(text)} is not a scalar expression")
    check_numbers(expr, what)
    return expr, tuple(p.found_params.values())


def parse_loss(text: str, K: int, L: int, params: Sequence[str | sp.Symbol] | None = (), *,
               what: str = "loss", shorthand: bool | None = None
               ) -> tuple[sp.Expr, tuple[sp.Symbol, ...]]:
    """Parse a loss string in ``G[i,j,k]`` (0-based) into ``(expr, params)``.

    ``params``: declared parameter names (``None``: any plain identifier is
    a parameter, the convention of :func:`attndyn.symbolic.losses.loss_from_spec`).
    ``shorthand`` (default: ``L == 1``) also accepts ``G1..GK`` for ``G[0,0,k-1]``.
    The result is checked with :func:`check_loss_expression`.

        >>> parse_loss("(G[0,0,0] - G[0,0,1])**2", K=2, L=1)
        ((G_000 - G_001)**2, ())
        >>> parse_loss("(G1 - b*G2)**2", K=2, L=1, params=["b"])
        ((G_000 - G_001*b)**2, (b,))
    """
    K = int_ge1(K, "K")
    L = int_ge1(L, "L")
    G = loss_array(L, K)
    auto = params is None
    declared = tuple(params or ())
    for q in declared:
        n = str(q)
        if not _PARAM_RE.match(n) or n in _RESERVED:
            raise ValueError(f"{what}: parameter name {n!r} is not allowed (letters, digits "
                             "and _, starting with a letter; not a builtin or constant name)")
    expr, found = _parse(text, what, {}, declared, auto, G, L == 1 if shorthand is None else shorthand)
    decl_syms = tuple(q if isinstance(q, sp.Symbol) else sp.Symbol(str(q), real=True)
                      for q in declared)
    used = tuple(s for s in decl_syms if s in expr.free_symbols) + found
    check_loss_expression(expr, K, L, params=used, what=what)
    return expr, tuple(sorted(set(used), key=str))


def int_ge1(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return int(v)


# -- plain numbers ---------------------------------------------------------------------------
_FLOAT_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,3})?\Z")


def parse_float(text: object, name: str, lo: float | None = None, hi: float | None = None,
                nonzero: bool = False) -> float:
    """A plain decimal number (no expression) in ``[lo, hi]``; ``ValueError`` naming ``name``.

        >>> parse_float("0.25", "eta", lo=0.0)
        0.25
        >>> parse_float("-1", "eta", lo=0.0)
        Traceback (most recent call last):
            ...
        ValueError: eta must be a finite number >= 0, got -1
    """
    s = str(text).strip()
    rng = (f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else
           f" >= {lo:g}" if lo is not None else f" <= {hi:g}" if hi is not None else "")
    if len(s) > 40 or not _FLOAT_RE.match(s):
        raise ValueError(f"{name} must be a plain number{rng}, got {_short(s, 40)}")
    v = float(s)
    if (not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi)
            or (nonzero and v == 0)):
        raise ValueError(f"{name} must be a finite number{rng}{' other than 0' if nonzero else ''}"
                         f", got {s}")
    return v


def parse_int(text: object, name: str, lo: int, hi: int) -> int:
    """A plain integer literal in ``[lo, hi]``; ``ValueError`` naming ``name``.

        >>> parse_int("12", "order", 1, 64)
        12
    """
    s = str(text).strip()
    if len(s) > 12 or not re.fullmatch(r"[+-]?\d+", s):
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {_short(s, 40)}")
    v = int(s)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v}")
    return v


# -- checks on expressions built in Python ----------------------------------------------------
def check_numbers(expr: sp.Expr, what: str) -> None:
    bad = {sp.I: "the imaginary unit I (complex coefficients are not allowed)",
           sp.nan: "nan", sp.zoo: "zoo (complex infinity, e.g. a division by zero)",
           sp.oo: "oo (infinity)", -sp.oo: "-oo (infinity)"}
    for atom, desc in bad.items():
        if expr.has(atom):
            raise ValueError(f"{what}: the expression contains {desc}: {_short(sp.sstr(expr))}")
    for n in expr.atoms(sp.Number):
        if not n.is_finite:  # pragma: no cover - caught above
            raise ValueError(f"{what}: the expression contains a non-finite number {n}")
        if isinstance(n, sp.Float) and abs(float(n)) > _FLOAT_MAX:
            raise ValueError(f"{what}: coefficient {n} is too large for float64 "
                             f"(|c| <= {_FLOAT_MAX:g})")
        if isinstance(n, sp.Rational) and _digits(n) > MAX_DIGITS:
            raise ValueError(f"{what}: coefficient with more than {MAX_DIGITS} digits")
    if expr.atoms(sp.AccumBounds):
        raise ValueError(f"{what}: the expression contains an interval (AccumBounds)")


# -- Gaussian expectations on the whole line --------------------------------------------------
_BOUNDED = (sp.tanh, sp.erf, sp.erfc, sp.sin, sp.cos, sp.Heaviside, sp.sign, sp.atan)
_LIPSCHITZ = (sp.Abs, sp.Max, sp.Min)


def growth_order(expr: sp.Expr, syms: Sequence[sp.Symbol] | set[sp.Symbol]) -> float:
    """A bound ``g`` with ``|expr| <= c (1 + |G|^g)`` as ``|G| -> oo`` along every direction of
    the real symbols ``syms`` (``math.inf``: faster than any power, or unknown). Bounded
    functions have order 0, ``log`` of a polynomial 0 (slower than any power), ``exp`` of a
    non-constant argument ``inf``. :func:`check_gaussian_expectation` and the potential use it:
    ``E[exp(P(G))]`` of a Gaussian ``G`` is finite for every covariance when ``P`` grows
    slower than ``|G|^2``.

        >>> g0, g1 = sp.symbols("g0 g1", real=True)
        >>> growth_order(g0 ** 3 * g1, [g0, g1]), growth_order(sp.tanh(g0), [g0, g1])
        (4.0, 0.0)
        >>> growth_order(sp.exp(g0), [g0])
        inf
    """
    symset = set(syms)

    def g(e: sp.Expr) -> float:
        if not e.free_symbols & symset:
            return 0.0
        if e in symset:
            return 1.0
        if isinstance(e, sp.Add):
            return max(g(a) for a in e.args)
        if isinstance(e, sp.Mul):
            return sum(g(a) for a in e.args)
        if isinstance(e, sp.Pow):
            b, p = e.args
            if p.free_symbols & symset or not p.is_number:
                return math.inf
            if p.is_nonnegative:
                return float(p) * g(b)
            return 0.0 if b.is_positive else math.inf  # 1/(1 + G^2) is bounded
        if isinstance(e, sp.exp):
            return 0.0 if g(e.args[0]) == 0.0 else math.inf
        if isinstance(e, sp.log):
            inner = [a.args[0] for a in e.args[0].atoms(sp.exp) if a.free_symbols & symset]
            return max([g(a) for a in inner] + [0.0])   # log(1 + exp(G)) grows like G
        if isinstance(e, _BOUNDED):
            return 0.0
        if isinstance(e, _LIPSCHITZ):
            return max(g(a) for a in e.args)
        return math.inf

    order: float = g(as_sympy(expr, "expression"))
    return order


def check_gaussian_expectation(expr: sp.Expr, gsyms: Sequence[sp.Symbol] | set[sp.Symbol],
                               what: str = "loss") -> sp.Expr:
    """Refuse the terms of ``expr`` that have no expectation under a Gaussian ``G`` on the
    whole real line (paper 003's potential ``Phi = E[loss(G)]``, eq. 10): a division by (or a
    negative power of) an expression of ``G`` that can vanish (``1/G1``, ``G1**-16``), ``log``
    of one that can be zero or negative, and ``sqrt`` or a fractional power of one that can be
    negative (``sqrt(G1)``, ``G1**0.5``, ``G1**(1/3)``). Each would make SGD and every route
    of the potential fail (``ZeroDivisionError``, NaN). Positivity is decided by SymPy's
    assumptions on real ``G`` (``1 + G**2``, ``exp(G)``, ``G**2`` are recognised); write a
    positive expression in such a form if it is refused. Raises a one-line ``ValueError``
    naming the term.

        >>> from attndyn.symbolic.gaussian import g_array
        >>> g0, g1 = g_array(1, 2)[0, 0, 0], g_array(1, 2)[0, 0, 1]
        >>> check_gaussian_expectation(sp.tanh(g0) * g1, [g0, g1])
        G_001*tanh(G_000)
        >>> check_gaussian_expectation(1 / g0, [g0, g1])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: loss: the term '1/G_000' divides by 'G_000', which vanishes for some real G...
    """
    gsyms = set(gsyms)
    seen = set()
    for node in sp.preorder_traversal(expr):
        if node in seen or not (node.free_symbols & gsyms):
            continue
        seen.add(node)
        if isinstance(node, sp.Pow):
            b, p = node.args
            if not (b.free_symbols & gsyms):
                if p.free_symbols & gsyms and not b.is_positive:
                    raise ValueError(f"{what}: the term {_short(sp.sstr(node), 60)} raises "
                                     f"{_short(sp.sstr(b), 30)} (not positive) to a power "
                                     "that depends on G")
                continue
            if p.free_symbols & gsyms:
                raise ValueError(f"{what}: the term {_short(sp.sstr(node), 60)} has G in the "
                                 "exponent of a power of G: no Gaussian expectation")
            if p.is_integer and p.is_nonnegative:
                continue
            if p.is_negative and not b.is_positive:
                raise ValueError(f"{what}: the term {_short(sp.sstr(node), 60)} divides by "
                                 f"{_short(sp.sstr(b), 40)}, which vanishes for some real G: it "
                                 "has no Gaussian expectation (keep denominators positive, "
                                 "e.g. 1 + G**2)")
            if not p.is_integer and not b.is_nonnegative:
                raise ValueError(f"{what}: the term {_short(sp.sstr(node), 60)} takes a "
                                 f"fractional power of {_short(sp.sstr(b), 40)}, which is "
                                 "negative for some real G: it has no real value there (use "
                                 "abs(...) or a square inside)")
        elif isinstance(node, sp.log):
            if not node.args[0].is_positive:
                raise ValueError(f"{what}: the term {_short(sp.sstr(node), 60)} takes the log "
                                 f"of {_short(sp.sstr(node.args[0]), 40)}, which is zero or "
                                 "negative for some real G: it has no Gaussian expectation "
                                 "(e.g. log(1 + G**2) is fine)")
    return expr


def check_loss_expression(expr: object, K: int, L: int,
                          params: Sequence[sp.Symbol] | None = None,
                          what: str = "loss") -> sp.Expr:
    """Validate a loss expression in the ``G`` symbols of :func:`g_array`.

    Raises ``TypeError`` if ``expr`` is not a SymPy scalar expression and
    ``ValueError`` (naming ``what``) for complex (``I``), ``nan``, ``oo``,
    ``zoo`` or float64-overflowing coefficients, for an expression that does
    not depend on any ``G[i,j,k]``, (when ``params`` is given) for free
    symbols that are neither ``G`` nor declared parameters, and for terms without
    a Gaussian expectation on the whole line (:func:`check_gaussian_expectation`).

        >>> from attndyn.symbolic.gaussian import g_array
        >>> G = g_array(1, 2)
        >>> check_loss_expression((G[0, 0, 0] - G[0, 0, 1]) ** 2, K=2, L=1)
        (G_000 - G_001)**2
        >>> check_loss_expression(sp.Integer(3), K=2, L=1)
        Traceback (most recent call last):
            ...
        ValueError: loss: the expression '3' does not depend on any G[i,j,k] (K = 2, L = 1)
    """
    if not isinstance(expr, sp.Expr):
        raise TypeError(f"{what} must be a SymPy scalar expression, got {type(expr).__name__}")
    check_numbers(expr, what)
    gsyms = set(loss_array(L, K).flat_symbols())
    free = expr.free_symbols
    if not free & gsyms:
        raise ValueError(f"{what}: the expression {_short(sp.sstr(expr), 50)} does not depend on "
                         f"any G[i,j,k] (K = {K}, L = {L})")
    if params is not None:
        extra = free - gsyms - set(params)
        if extra:
            raise ValueError(f"{what} has free symbols {sorted(map(str, extra))} that are neither "
                             "pre-activations G nor declared parameters")
    check_gaussian_expectation(expr, gsyms, what)
    return expr


class LossIndexError(IndexError, ValueError):
    """An index of ``G`` out of range (both an IndexError and a ValueError)."""


class LossArray(ImmutableDenseNDimArray):
    """The ``L x L x K`` array ``G`` given to loss callables: SymPy's immutable
    array whose out-of-range index error names the index, ``K`` and ``L``.

        >>> G = loss_array(1, 2)
        >>> isinstance(G, LossArray), G[0, 0, 1]
        (True, G_001)
        >>> G[0, 0, 2]  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        attndyn.symbolic.parse.LossIndexError: loss: index G[0,0,2] out of range: K = 2, L = 1...
    """

    def __getitem__(self, index: Any) -> Any:
        idx = index if isinstance(index, tuple) else (index,)
        shape = self.shape
        if len(shape) == 3 and len(idx) <= 3:
            for n, i in zip(shape, idx):
                if isinstance(i, (int, np.integer)) and not isinstance(i, bool) and not -n <= i < n:
                    L, _, K = shape
                    txt = ",".join(str(int(v)) if isinstance(v, (int, np.integer)) else ":"
                                   for v in idx)
                    raise LossIndexError(f"loss: index G[{txt}] out of range: K = {K}, L = {L} "
                                         "(0 <= i, j < L, 0 <= k < K; indices are 0-based)")
        return super().__getitem__(index)

    def flat_symbols(self) -> list:
        return list(self._array)


def loss_array(L_or_G: Any, K: int | None = None) -> LossArray:
    """:class:`LossArray` of the :func:`~attndyn.symbolic.gaussian.g_array` symbols,
    from ``(L, K)`` or from an existing array.

        >>> loss_array(1, 2).shape
        (1, 1, 2)
    """
    if K is None:
        G = L_or_G
        if isinstance(G, LossArray):
            return G
        return LossArray(list(G._array) if hasattr(G, "_array") else G, G.shape)
    G = g_array(L_or_G, K)
    return LossArray(list(G._array), G.shape)
