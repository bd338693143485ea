"""Gaussian-equivalent potentials ``Phi = E[loss(G)]`` and their gradients.

Paper 003, Theorem 1 (eqs. 3-4) and Corollary 5 (eqs. 78-79): in high
dimension the pre-activations ``G_ijk`` are jointly Gaussian, so the
population loss is a function ``Phi`` of finitely many order parameters.
The laws (tied, untied, direct S, general) are in :mod:`.gaussian`.

Symmetric convention (MATH.md), used for every gradient here. Each matrix
order parameter is symmetric, and its gradient is taken with every matrix
entry an independent variable:

- tied (eq. 91): ``Gamma_kl = (1/2) sum B_(ij),(i'j') E[d^2 loss / dG_ijk dG_i'j'l]``,
  ``B = C (x) C + swap``; for ``L = 1``, ``Gamma_kl = E[d^2 loss / dG_k dG_l]``;
- untied (section 4.1, eqs. 27-32): ``a^(r)_kl = dPhi/dq^(r)_kl``, for ``L = 1``
  ``a^(1)_kl = a^(2)_kl = (1/2) E[d^2 loss/dG_k dG_l]``; ``grad_m`` and the
  ``m``-Hessian are plain derivatives;
- direct S (appendix E): ``grad_Omega Phi = grad_Psi Phi = H/2`` for ``L = 1``,
  ``H_kl = E[d^2 loss / dG_k dG_l]``.

Off the diagonal this is half the derivative with respect to the one symbol
``q_kl = q_lk`` (the paper's eq. (48) quotes that total derivative; MATH.md).

Routes (``route=``), recorded on the returned object as ``.route``:

``"wick"``
    Polynomial losses: ``E f = sum_n (Delta^n f)(mean)/n!`` with ``Delta = (1/2)
    sum Sigma_ab d_a d_b`` (Wick/Isserlis in closed form, exact for singular
    covariances), gradients by Price's theorem from the symbolic second
    derivatives of the loss.
``"closed"``
    Sums of products of functions of single pre-activations (MSE
    teacher-student with any activations): closed forms per term (ReLU
    arc-cosine kernel, erf arcsine kernel, half moments, Stein recursions,
    conditioning of polynomial parts), gradients by Price's theorem used in
    reverse, ``E[f'(X) g'(Y)] = dE[f(X)g(Y)]/dc`` and
    ``E[f''(X) g(Y)] = 2 dE[f(X)g(Y)]/dv_x``: exact also when the second
    derivatives of the loss are distributions (ReLU, absolute value).
``"hermite"``
    Same terms through Mehler's formula with symbolic Hermite coefficients of
    ``sigma(sqrt(v) z)``: exact for polynomial activations, otherwise truncated
    at ``order`` with the Parseval error bound on ``.error_bound``.
``"numeric"``
    Compiled Gaussian quadrature, for losses with no closed form (softmax
    attention, multi-layer examples, tanh, GELU). This layer never loads numba:
    on this route the functions here return a :class:`NumericRoute`, the
    description of the quadrature potential to build, and the numeric layer
    builds it (:func:`attndyn.numeric.attention.potentials.build_potential`;
    the functions of the same names there return the built potential).
``"auto"``
    ``wick`` for polynomials, else ``closed``, else ``numeric``.
``"exact"``
    ``wick`` or ``closed``, never numeric (raises :class:`RouteError`): for
    callers that must not load numba, such as ``attndyn derive``.

Losses whose second derivatives contain distributions are never
differentiated twice: they go by a closed form, or on the numeric route by
Stein's identity with first derivatives; a discontinuous loss is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence, Union, cast

import numpy as np
import sympy as sp

from .codegen import njit_source
from .gaussian import GaussianLaw, check_covariance, g_array, make_law, q_matrix
from .parse import as_sympy as _as_sympy
from .parse import growth_order
from .hermite import (NoClosedForm, collapse_heaviside, expect_1d, is_polynomial_in,
                      normalise_nonsmooth, pair_closed, pair_mehler)

__all__ = [
    "g_array", "q_matrix", "check_covariance", "tied_covariance", "gaussian_expectation",
    "ROUTES", "RouteError", "TiedPotential", "SymbolicPotential", "tied_potential",
    "untied_potential", "direct_potential", "general_potential", "potential",
    "potential_text", "guard_for_numba", "safe_powers", "NumericRoute",
]

ROUTES = ("auto", "exact", "wick", "closed", "hermite", "numeric")
# SymPy ships no type information: its expressions and matrices are Any to the checker;
# the names below say which one a signature means
_Expr = Any
_Matrix = Any
# one order parameter for the gradients: (name, its matrix of symbols, [((r, s), symbol,
# factor of the symmetric convention)])
_GradEntry = tuple[str, _Matrix, list[tuple[tuple[int, int], _Expr, _Expr]]]


class RouteError(ValueError):
    """A route cannot treat this loss (the message says why and what to use).

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> tied_potential(mse_teacher_student("tanh"), K=2, route="wick")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        attndyn.symbolic.potential.RouteError: route 'wick' needs a polynomial loss in G...
    """


@dataclass
class NumericRoute:
    """The numeric route's answer: what to build, not a potential.

    The symbolic layer stops here (it never loads numba);
    :func:`attndyn.numeric.attention.potentials.build_potential` turns this into
    a compiled quadrature potential of the ``law`` for the reduced loss ``expr``
    with the parameter symbols ``params`` and the quadrature ``options``
    (``param_values, tol, method, seed, reference, mode, max_points``).

        >>> from attndyn.symbolic.losses import softmax_teacher_student
        >>> ans = tied_potential(softmax_teacher_student(L=2), K=2, L=2)
        >>> isinstance(ans, NumericRoute), ans.route, ans.law.kind
        (True, 'numeric', 'tied')
    """

    kind: str
    law: GaussianLaw
    expr: sp.Expr
    params: tuple
    options: dict
    notes: list = field(default_factory=list)
    route: str = "numeric"

    def __getattr__(self, name: str) -> Any:
        # only reached for missing attributes: say what this object is
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"NumericRoute has no attribute {name!r}: it describes the numeric (quadrature) "
            "route of a potential; build the potential with "
            "attndyn.numeric.attention.potentials.build_potential(route), or call the "
            "potential functions of attndyn.numeric.attention.potentials")


def tied_covariance(L: int, K: int, C: Any = None, q: _Matrix | None = None
                    ) -> tuple[list[sp.Symbol], sp.ImmutableMatrix]:
    """Covariance of the flattened ``G`` (index ``(i*L + j)*K + k``), eq. (10).

    Returns ``(symbols, Sigma)`` with ``Sigma`` a SymPy matrix in ``q``
    (degenerate: ``G_ijk = G_jik``).

        >>> syms, Sigma = tied_covariance(1, 2)
        >>> syms, Sigma
        ([G_000, G_001], Matrix([
        [2*q_11, 2*q_12],
        [2*q_12, 2*q_22]]))
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


def gaussian_expectation(f: sp.Expr, syms: Sequence[sp.Symbol], Sigma: _Matrix,
                         mean: Sequence[_Expr] | _Matrix | None = None) -> sp.Expr:
    """``E[f(g)]`` for a polynomial ``f`` of a Gaussian vector ``g ~ N(mean, Sigma)``.

    Exact for any (even singular) ``Sigma``: ``E f = sum_n (Delta^n f)(mean)/n!``
    with ``Delta = (1/2) sum_ab Sigma_ab d_a d_b``; the series stops at half the
    degree. Raises ``ValueError`` if ``f`` is not polynomial in ``syms``.

        >>> x, y, s = sp.symbols("x y s")
        >>> gaussian_expectation(x ** 2 * y ** 2, [x, y], sp.Matrix([[1, s], [s, 1]]))
        2*s**2 + 1
    """
    syms = list(syms)
    f = sp.expand(_as_sympy(f, "f"))
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


# -- numba emission -------------------------------------------------------------------
def safe_powers(e: sp.Expr) -> sp.Expr:
    """Give integer exponents 2..4 (and -2..-4) a float exponent before printing.

    Works around the numba printer of ``attndyn.symbolic.codegen``, which
    expands ``b**2`` to ``b*b`` without parentheses, so that ``y/b**2`` came out
    as ``y/b*b``; ``b**2.0`` prints with the right precedence (LLVM turns a
    power 2.0 back into a product).

        >>> y, b = sp.symbols("y b")
        >>> safe_powers(y / b ** 2)
        y/b**2.0
    """
    return _as_sympy(e, "expression").replace(
        lambda a: a.is_Pow and a.exp.is_Integer and 2 <= abs(int(a.exp)) <= 4,
        lambda a: sp.Pow(a.base, sp.Float(int(a.exp)), evaluate=False))


def guard_for_numba(e: sp.Expr) -> sp.Expr:
    """Prepare an expression for numba: clamp arguments that rounding can push
    out of the domain on the PSD boundary (``acos/asin`` arguments to [-1, 1],
    square roots of sums to >= 0) and apply :func:`safe_powers`.

        >>> x = sp.Symbol("x", real=True)
        >>> guard_for_numba(sp.acos(x))
        acos(Min(1, Max(-1, x)))
    """
    e = _as_sympy(e, "expression")
    e = e.replace(lambda a: isinstance(a, (sp.acos, sp.asin)),
                  lambda a: a.func(sp.Min(1, sp.Max(-1, a.args[0]))))
    e = e.replace(lambda a: a.is_Pow and a.exp == sp.S.Half and a.base.is_Add,
                  lambda a: sp.sqrt(sp.Max(0, a.base)))
    return safe_powers(e)


def _tidy(e: sp.Expr) -> sp.Expr:
    if e == 0 or not e.free_symbols:
        return e
    if e.is_polynomial():
        return sp.expand(e)
    if sp.count_ops(e) <= 120:
        try:
            return sp.simplify(e)
        except Exception:  # pragma: no cover - simplify is best effort
            return e
    return e


# -- potential objects -------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TiedPotential:
    """``Phi(q)`` and ``Gamma(q)`` of a tied model with their numba source.

    ``gamma[k, l]`` is the symmetric-convention gradient of eq. (91) (for
    ``L = 1``, ``Gamma_kl = E[d^2 loss/dG_k dG_l]``, equal to ``dPhi/dq_kl``
    with every entry of ``q`` independent). The compiled function
    ``grad(x, p, out)`` takes the ``K*K`` overlaps ``x = q.ravel()`` and writes
    ``Gamma.ravel()``. ``route`` is the route that produced it;
    ``error_bound`` (hermite route with truncation) bounds ``|Phi_exact - phi|``.

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> pot = tied_potential(mse_teacher_student("h1"), K=2)
        >>> isinstance(pot, TiedPotential), pot.phi, pot.gamma
        (True, q_11 - 2*q_12 + q_22, Matrix([
        [ 1, -1],
        [-1,  1]]))
    """

    K: int
    L: int
    C: sp.ImmutableMatrix
    q: sp.ImmutableMatrix
    phi: sp.Expr
    gamma: sp.ImmutableMatrix
    params: tuple = field(default=())
    route: str = "wick"
    error_bound: sp.Expr | None = None
    order: int | None = None
    law: GaussianLaw | None = None

    kind = "tied"

    @property
    def inputs(self) -> list:
        return [self.q[k, l] for k in range(self.K) for l in range(self.K)]

    @property
    def gradients(self) -> dict:
        return {"q": self.gamma}

    def numba_source(self, funcname: str = "grad") -> str:
        outs = [guard_for_numba(self.gamma[k, l]) for k in range(self.K) for l in range(self.K)]
        return njit_source(funcname, self.inputs, self.params, outs,
                           doc=f"Gamma(q) of a tied potential (paper 003, eq. 91), route {self.route}.")

    def _law(self) -> GaussianLaw:
        return self.law if self.law is not None else make_law("tied", self.L, self.K, self.C)

    def _check_q(self, q: Any) -> np.ndarray:
        q = np.asarray(q, dtype=float) if not isinstance(q, np.ndarray) else q
        self._law().flatten_inputs({"q": q})
        return np.asarray(q, dtype=float)

    def _lamb(self, what: str) -> Callable[..., Any]:
        cache = self.__dict__.setdefault("_lambdified", {})
        if what not in cache:
            args = list(dict.fromkeys(self.q)) + list(self.params)
            expr = {"gamma": self.gamma, "phi": self.phi,
                    "bound": self.error_bound if self.error_bound is not None else sp.nan}[what]
            cache[what] = sp.lambdify(args, expr, modules=["scipy", "numpy"])
        fn: Callable[..., Any] = cache[what]
        return fn

    def gamma_numeric(self, q: Any, p: Sequence[float] = ()) -> np.ndarray:
        """``Gamma`` at a numeric ``q`` (validated: shape, NaN, symmetry, PSD)."""
        q = self._check_q(q)
        return np.array(self._lamb("gamma")(*self._qargs(q), *p), dtype=float).reshape(self.K, self.K)

    def phi_numeric(self, q: Any, p: Sequence[float] = ()) -> float:
        q = self._check_q(q)
        return float(self._lamb("phi")(*self._qargs(q), *p))

    def error_bound_numeric(self, q: Any, p: Sequence[float] = ()) -> float:
        """The truncation bound of the hermite route at ``q`` (0 when exact)."""
        if self.error_bound is None:
            return 0.0 if self.route != "hermite" else float("nan")
        q = self._check_q(q)
        return float(self._lamb("bound")(*self._qargs(q), *p))

    def _qargs(self, q: np.ndarray) -> list[Any]:
        return [q[k, l] for k in range(self.K) for l in range(k, self.K)]

    def text(self, latex: bool = False) -> str:
        return potential_text(self, latex=latex)


@dataclass(frozen=True, eq=False)
class SymbolicPotential:
    """Closed-form potential of an untied, direct-S or general law.

    ``gradients[name]`` has the shape of order parameter ``name`` (symmetric
    convention for matrices); ``hessians`` holds the ``m``-Hessian
    ``d^2 Phi/dm_k dm_l`` (untied) or ``mu``-Hessian (general).
    The compiled function takes the flat inputs ``law.input_symbols()`` (each
    parameter row-major, both ``X_kl`` and ``X_lk``) and writes the gradients
    in the same order, then the Hessian entries.

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> pot = untied_potential(mse_teacher_student("h1"), K=2)
        >>> isinstance(pot, SymbolicPotential), pot.kind, pot.route
        (True, 'untied', 'wick')
        >>> sorted(pot.gradients)
        ['m', 'q1', 'q2']
    """

    kind: str
    L: int
    K: int
    C: sp.ImmutableMatrix
    law: GaussianLaw
    phi: sp.Expr
    gradients: dict
    hessians: dict
    params: tuple = ()
    route: str = "wick"
    error_bound: sp.Expr | None = None
    order: int | None = None

    @property
    def order_parameters(self) -> dict:
        return self.law.order_parameters

    @property
    def inputs(self) -> list:
        return self.law.input_symbols()

    def output_expressions(self, hessian: bool = True) -> list:
        outs = []
        for name in self.law.order_parameters:
            outs.extend(list(self.gradients[name]))
        if hessian:
            for H in self.hessians.values():
                outs.extend(list(H))
        return outs

    def numba_source(self, funcname: str = "grad", hessian: bool = True) -> str:
        outs = [guard_for_numba(e) for e in self.output_expressions(hessian)]
        return njit_source(funcname, self.inputs, self.params, outs,
                           doc=f"gradients of a {self.kind} potential, route {self.route}.")

    # convenient names
    @property
    def grad_m(self) -> _Matrix | None:
        return self.gradients.get("m")

    @property
    def grad_q1(self) -> _Matrix | None:
        return self.gradients.get("q1")

    @property
    def grad_q2(self) -> _Matrix | None:
        return self.gradients.get("q2")

    @property
    def hess_m(self) -> _Matrix | None:
        return self.hessians.get("m")

    @property
    def grad_Omega(self) -> _Matrix | None:
        return self.gradients.get("Omega")

    @property
    def grad_Psi(self) -> _Matrix | None:
        return self.gradients.get("Psi")

    def evaluate(self, p: Sequence[float] = (), **values: Any) -> dict[str, Any]:
        """Numeric ``phi``, gradients and Hessians at the given order parameters
        (keywords named as in ``order_parameters``), validated."""
        x = self.law.flatten_inputs(values)
        cache = self.__dict__.setdefault("_lambdified", {})
        inputs = self.inputs
        uniq = list(dict.fromkeys(inputs))
        if "all" not in cache:
            args = uniq + list(self.params)
            exprs = [self.phi] + self.output_expressions(True)
            cache["all"] = sp.lambdify(args, exprs, modules=["scipy", "numpy"])
        xu = [x[inputs.index(s)] for s in uniq]
        vals = [float(v) for v in cache["all"](*xu, *p)]
        out: dict[str, Any] = {"phi": vals[0]}
        i = 1
        for name, M in self.law.order_parameters.items():
            n = M.shape[0] * M.shape[1]
            out[name] = np.array(vals[i:i + n]).reshape(
                M.shape if name in self.law.matrix_parameters else (M.shape[0],))
            i += n
        for name, H in self.hessians.items():
            n = H.shape[0] * H.shape[1]
            out[f"hess_{name}"] = np.array(vals[i:i + n]).reshape(H.shape)
            i += n
        return out

    def text(self, latex: bool = False) -> str:
        return potential_text(self, latex=latex)


#: what the potential builders return
AnyPotential = Union[TiedPotential, SymbolicPotential, NumericRoute]


def potential_text(pot: TiedPotential | SymbolicPotential, latex: bool = False) -> str:
    """Phi and the gradients in closed form, one per line (``attndyn derive``).

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> print(potential_text(tied_potential(mse_teacher_student("h1"), K=2)))
        # route: wick
        Phi(q) = q_11 - 2*q_12 + q_22
        Gamma_11 = 1
        Gamma_12 = -1
        Gamma_22 = 1
    """
    lines = []
    pr = sp.latex if latex else sp.sstr
    head = {"tied": "Phi(q)", "untied": "Phi(m, q1, q2)", "direct": "Phi(Omega, Psi)",
            "general": "Phi(mu, Omega, Psi)"}[getattr(pot, "kind", "tied")]
    lines.append(f"# route: {pot.route}" + (f", Hermite order {pot.order}" if pot.order else ""))
    lines.append(f"{head} = {pr(pot.phi)}")
    grads = pot.gradients
    for name, M in grads.items():
        sym = "Gamma" if name == "q" else f"dPhi/d{name}"
        if name in ("m", "mu"):
            for a in range(M.shape[0]):
                lines.append(f"{sym}_{a + 1} = {pr(M[a])}")
        else:
            for k in range(M.shape[0]):
                for l in range(k, M.shape[1]):
                    lines.append(f"{sym}_{k + 1}{l + 1} = {pr(M[k, l])}")
    for name, H in getattr(pot, "hessians", {}).items():
        for k in range(H.shape[0]):
            for l in range(k, H.shape[1]):
                lines.append(f"d2Phi/d{name}_{k + 1}d{name}_{l + 1} = {pr(H[k, l])}")
    if getattr(pot, "error_bound", None) is not None:
        lines.append(f"# truncation bound |Phi - Phi_N| <= {pr(pot.error_bound)}")
    return "\n".join(lines)


# -- loss handling -----------------------------------------------------------------------
def call_loss(loss: Callable[..., Any] | sp.Expr, G: np.ndarray) -> sp.Expr:
    """``loss(G)``, checked (:func:`attndyn.symbolic.parse.check_loss_expression`):
    no complex/nan/oo/zoo coefficients, depends on ``G``; the callable gets a
    :class:`~attndyn.symbolic.parse.LossArray` (index errors name K and L)."""
    from .parse import as_sympy, check_loss_expression, loss_array
    L, _, K = G.shape
    if isinstance(loss, sp.Expr):
        return check_loss_expression(loss, K, L)
    if not callable(loss):
        raise TypeError("loss must be a callable G -> sympy expression")
    val = loss(loss_array(G))
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        val = as_sympy(val, "loss")
    if not isinstance(val, sp.Expr):
        raise TypeError(f"loss must return a SymPy expression, got {type(val).__name__}")
    return check_loss_expression(val, K, L)


def is_polynomial(expr: sp.Expr, syms: Sequence[sp.Symbol]) -> bool:
    try:
        P = sp.Poly(sp.expand(expr), *syms)
    except sp.PolynomialError:
        return False
    return not any(c.has(*syms) for c in P.coeffs())


_NONSMOOTH = (sp.Heaviside, sp.DiracDelta, sp.Piecewise, sp.Abs, sp.sign, sp.Max, sp.Min,
              sp.floor, sp.ceiling)


def nonsmooth_atoms(expr: sp.Expr, syms: Iterable[sp.Symbol]) -> list[sp.Expr]:
    s = set(syms)
    return [a for a in _as_sympy(expr, "loss").atoms(*_NONSMOOTH) if a.free_symbols & s]


# -- closed / hermite engine -----------------------------------------------------------
class _Generic:
    """Generic symbols of a term with n variables: X_i, means M_i, covariances S_ij."""

    cache: dict = {}

    @classmethod
    def X(cls, i: int) -> sp.Symbol:
        return cls._get(("X", i), lambda: sp.Symbol(f"_x{i}", real=True))

    @classmethod
    def M(cls, i: int) -> sp.Symbol:
        return cls._get(("M", i), lambda: sp.Symbol(f"_m{i}", real=True))

    @classmethod
    def S(cls, i: int, j: int) -> sp.Symbol:
        i, j = min(i, j), max(i, j)
        if i == j:
            return cls._get(("S", i, i), lambda: sp.Symbol(f"_v{i}", positive=True))
        return cls._get(("S", i, j), lambda: sp.Symbol(f"_c{i}{j}", real=True))

    @classmethod
    def _get(cls, key: tuple[Any, ...], make: Callable[[], sp.Symbol]) -> sp.Symbol:
        if key not in cls.cache:
            cls.cache[key] = make()
        return cls.cache[key]


def _precheck(expr: sp.Expr, vs: set[sp.Symbol]) -> None:
    """Every non-polynomial node must depend on at most one pre-activation."""
    def walk(e: sp.Expr) -> None:
        fs = e.free_symbols & vs
        if not fs:
            return
        if e.is_Add or e.is_Mul:
            for a in e.args:
                walk(a)
            return
        if e.is_Pow and e.exp.is_Integer and e.exp >= 0:
            walk(e.base)
            return
        if e in vs:
            return
        if len(fs) > 1:
            raise RouteError(f"the loss is not a sum of products of functions of single "
                             f"pre-activations ({e} couples {sorted(map(str, fs))})")
        for a in e.args:
            if (a.free_symbols & vs) and not (a in vs or _is_linear_in(a, fs)):
                raise RouteError(f"{e}: an activation of a non-linear argument is not supported "
                                 "by the closed/hermite routes")
    walk(expr)


def _is_linear_in(a: sp.Expr, fs: set[sp.Symbol]) -> bool:
    v = next(iter(fs))
    try:
        P = sp.Poly(a, v)
    except sp.PolynomialError:
        return False
    return bool(P.degree() <= 1 and not any(c.has(v) for c in P.coeffs()))


def _product_terms(expr: sp.Expr, variables: Sequence[sp.Symbol]
                   ) -> list[tuple[sp.Expr, dict[sp.Symbol, sp.Expr]]]:
    """``expr = sum coef * prod_a h_a(G_a)`` -> list of (coef, {G_a: h_a})."""
    vs = set(variables)
    expr = normalise_nonsmooth(expr)
    _precheck(expr, vs)
    e = collapse_heaviside(sp.expand(expr))
    e = collapse_heaviside(sp.expand(e))
    groups: dict[tuple[Any, ...], sp.Expr] = {}
    for t in sp.Add.make_args(e):
        if t == 0:
            continue
        coef, dep = t.as_independent(*vs, as_Add=False)
        parts: dict[sp.Symbol, sp.Expr] = {}
        for f in sp.Mul.make_args(dep):
            if f == 1:
                continue
            fs = f.free_symbols & vs
            if len(fs) != 1:
                raise RouteError(f"term {t} is not a product of functions of single pre-activations")
            v = next(iter(fs))
            parts[v] = parts.get(v, sp.Integer(1)) * f
        key = tuple(sorted(((str(v), v, h) for v, h in parts.items()), key=lambda z: z[0]))
        groups[key] = groups.get(key, sp.Integer(0)) + coef
    return [(coef, {v: h for _, v, h in key}) for key, coef in groups.items() if coef != 0]


_PARTIALS: dict = {}


def _partials(fn: sp.Expr, dummies: Sequence[sp.Symbol]) -> dict[sp.Symbol, sp.Expr]:
    key = fn
    if key not in _PARTIALS:
        _PARTIALS[key] = {d: _tidy(sp.diff(fn, d)) for d in dummies}
    found: dict[sp.Symbol, sp.Expr] = _PARTIALS[key]
    return found


def _generic_term(hs: list[sp.Expr], centred: list[bool], route: str, order: int
                  ) -> tuple[sp.Expr, sp.Expr | None]:
    """Expectation of ``prod_i hs[i](X_i)`` in generic symbols.

    Returns ``(fn, bound)``; ``hs[0]`` is the non-polynomial factor if any.
    """
    n = len(hs)
    X = [_Generic.X(i) for i in range(n)]
    M = [sp.Integer(0) if centred[i] else _Generic.M(i) for i in range(n)]
    S = [[_Generic.S(i, j) for j in range(n)] for i in range(n)]
    nonpoly = [i for i in range(n) if not is_polynomial_in(hs[i], X[i])]
    if n == 1:
        return expect_1d(hs[0], X[0], M[0], S[0][0]), None
    if n == 2 and (route == "hermite" or len(nonpoly) == 2):
        if route == "hermite":
            series, bound, exact = pair_mehler(hs[0], hs[1], X[0], X[1], M[0], M[1], S[0][0],
                                               S[1][1], S[0][1], order)
            if not exact and bound is None:
                raise RouteError(f"hermite route: no closed-form error bound for E[{hs[0]} * {hs[1]}] "
                                 "(E[f^2] unknown); use route='numeric'")
            return series, (None if exact else bound)
        return pair_closed(hs[0], hs[1], X[0], X[1], M[0], M[1], S[0][0], S[1][1], S[0][1]), None
    if not nonpoly:
        prod = sp.Mul(*hs)
        Sig = sp.Matrix(n, n, lambda i, j: S[i][j])
        return gaussian_expectation(prod, X, Sig, M), None
    if len(nonpoly) == 1:
        a = nonpoly[0]
        others = [i for i in range(n) if i != a]
        poly = sp.Mul(*[hs[i] for i in others])
        # condition the polynomial part on X_a
        v = S[a][a]
        cmean = [M[i] + S[i][a] / v * (X[a] - M[a]) for i in others]
        ccov = sp.Matrix(len(others), len(others),
                         lambda r, s: S[others[r]][others[s]] - S[others[r]][a] * S[a][others[s]] / v)
        Q = gaussian_expectation(poly, [X[i] for i in others], ccov, cmean)
        return expect_1d(sp.expand(hs[a] * Q), X[a], M[a], v), None
    raise RouteError(f"a term couples {len(nonpoly)} non-polynomial factors of different "
                     "pre-activations; no closed form (use route='numeric')")


def _grad_symbols(law: GaussianLaw) -> list[_GradEntry]:
    """``[(name, matrix, [(position, symbol, factor)])]`` for the symmetric convention."""
    out = []
    for name, Msym in law.order_parameters.items():
        entries = []
        for r in range(Msym.shape[0]):
            for s in range(Msym.shape[1]):
                factor = sp.Integer(1)
                if name in law.matrix_parameters and r != s:
                    factor = sp.Rational(1, 2)
                entries.append(((r, s), Msym[r, s], factor))
        out.append((name, Msym, entries))
    return out


def _hessian_param(law: GaussianLaw) -> str | None:
    return {"untied": "m", "general": "mu"}.get(law.kind)


def _wick_all(expr: sp.Expr, law: GaussianLaw, hessian: bool
              ) -> tuple[sp.Expr, dict[str, _Matrix], dict[str, _Matrix]]:
    """Wick potential and Price gradients for a polynomial loss."""
    syms = list(law.variables)
    phi = gaussian_expectation(expr, syms, law.cov, law.mean)
    grads: dict[str, _Matrix] = {}
    hess: dict[str, _Matrix] = {}
    for name, Msym, entries in _grad_symbols(law):
        G = sp.zeros(*Msym.shape)
        done: dict[tuple[sp.Symbol, sp.Expr], sp.Expr] = {}
        for (r, s), sym, factor in entries:
            key = (sym, factor)
            if key in done:
                G[r, s] = done[key]
                continue
            dS = law.cov.diff(sym)
            dmu = law.mean.diff(sym)
            acc = sp.Integer(0)
            for a in range(len(syms)):
                if dmu[a] != 0:
                    acc += dmu[a] * sp.diff(expr, syms[a])
                for b in range(len(syms)):
                    if dS[a, b] != 0:
                        acc += dS[a, b] / 2 * sp.diff(expr, syms[a], syms[b])
            val = gaussian_expectation(sp.expand(acc), syms, law.cov, law.mean) if acc != 0 else 0
            val = _tidy(_as_sympy(val) * factor)
            G[r, s] = done[key] = val
        grads[name] = sp.ImmutableMatrix(G)
    hp = _hessian_param(law)
    if hessian and hp:
        Msym = law.order_parameters[hp]
        n = Msym.shape[0]
        H = sp.zeros(n, n)
        for k in range(n):
            dk = law.mean.diff(Msym[k])
            for l in range(k, n):
                dl = law.mean.diff(Msym[l])
                acc = sp.Integer(0)
                for a in range(len(syms)):
                    for b in range(len(syms)):
                        if dk[a] != 0 and dl[b] != 0:
                            acc += dk[a] * dl[b] * sp.diff(expr, syms[a], syms[b])
                val = gaussian_expectation(sp.expand(acc), syms, law.cov, law.mean) if acc != 0 else 0
                H[k, l] = H[l, k] = _tidy(_as_sympy(val))
        hess[hp] = sp.ImmutableMatrix(H)
    return _tidy(phi), grads, hess


def _terms_all(expr: sp.Expr, law: GaussianLaw, route: str, order: int, hessian: bool
               ) -> tuple[sp.Expr, dict[str, _Matrix], dict[str, _Matrix], sp.Expr | None]:
    """Closed or hermite route: Phi and gradients from per-term closed forms."""
    variables = list(law.variables)
    index = {v: a for a, v in enumerate(variables)}
    terms = _product_terms(expr, variables)
    phi = sp.Integer(0)
    bound = sp.Integer(0)
    has_bound = False
    gsyms = _grad_symbols(law)
    grads = {name: [[sp.Integer(0)] * M.shape[1] for _ in range(M.shape[0])] for name, M, _ in gsyms}
    hp = _hessian_param(law) if hessian else None
    nh = law.order_parameters[hp].shape[0] if hp else 0
    H = [[sp.Integer(0)] * nh for _ in range(nh)]
    poly_part = sp.Integer(0)
    for coef, parts in terms:
        vars_ = list(parts)
        np_first = sorted(vars_, key=lambda v: (is_polynomial_in(parts[v], v), index[v]))
        if route != "hermite" and all(is_polynomial_in(parts[v], v) for v in vars_):
            poly_part += coef * sp.Mul(*parts.values())
            continue
        if not vars_:
            phi += coef
            continue
        hs = [parts[v].xreplace({v: _Generic.X(i)}) for i, v in enumerate(np_first)]
        centred = [law.mean[index[v]] == 0 for v in np_first]
        try:
            fn, b = _generic_term(hs, centred, route, order)
        except NoClosedForm as exc:
            raise RouteError(f"{route} route: {exc}") from None
        sub = _generic_to_law(np_first, centred, law, index)
        dummies = list(sub)
        fn = _tidy(fn)
        phi += coef * fn.xreplace(sub)
        if b is not None:
            has_bound = True
            bound += sp.Abs(coef) * b.xreplace(sub)
        _add_term_gradients(grads, gsyms, coef, fn, sub, dummies)
        if hp:
            _add_term_hessian(H, coef, fn, sub, dummies, law.order_parameters[hp],
                              len(np_first))
    if poly_part != 0:
        phi += _add_polynomial_part(grads, H, poly_part, law, hessian, hp)
    return _tidy(phi), *_assemble_terms(grads, gsyms, H, hp), (bound if has_bound else None)


def _generic_to_law(np_first: Sequence[sp.Symbol], centred: Sequence[bool], law: GaussianLaw,
                    index: dict[sp.Symbol, int]) -> dict[sp.Symbol, sp.Expr]:
    """The generic symbols of a term's closed form (means, covariances of its variables
    ``np_first``) -> the law's expressions."""
    sub = {}
    for i, v in enumerate(np_first):
        if not centred[i]:
            sub[_Generic.M(i)] = law.mean[index[v]]
        for j, w in enumerate(np_first):
            if j >= i:
                sub[_Generic.S(i, j)] = law.cov[index[v], index[w]]
    return sub


def _add_term_gradients(grads: dict[str, list[list[sp.Expr]]], gsyms: list[_GradEntry],
                        coef: sp.Expr, fn: sp.Expr, sub: dict[sp.Symbol, sp.Expr],
                        dummies: Sequence[sp.Symbol]) -> None:
    """Add one term's gradients (chain rule through the generic symbols) to ``grads``."""
    parts_d = _partials(fn, dummies)
    for name, Msym, entries in gsyms:
        for (r, s), sym, factor in entries:
            acc = sp.Integer(0)
            for d in dummies:
                dd = sp.diff(sub[d], sym)
                if dd != 0 and parts_d[d] != 0:
                    acc += parts_d[d].xreplace(sub) * dd
            if acc != 0:
                grads[name][r][s] += coef * factor * acc


def _add_term_hessian(H: list[list[sp.Expr]], coef: sp.Expr, fn: sp.Expr,
                      sub: dict[sp.Symbol, sp.Expr], dummies: Sequence[sp.Symbol],
                      Msym: _Matrix, n: int) -> None:
    """Add one term's Hessian in the mean parameters ``Msym`` (upper triangle) to ``H``."""
    nh = len(H)
    mds = [d for d in dummies if d in [_Generic.M(i) for i in range(n)]]
    for k in range(nh):
        for l in range(k, nh):
            acc = sp.Integer(0)
            for d1 in mds:
                c1 = sp.diff(sub[d1], Msym[k])
                if c1 == 0:
                    continue
                for d2 in mds:
                    c2 = sp.diff(sub[d2], Msym[l])
                    if c2 != 0:
                        acc += sp.diff(fn, d1, d2).xreplace(sub) * c1 * c2
            if acc != 0:
                H[k][l] += coef * acc


def _add_polynomial_part(grads: dict[str, list[list[sp.Expr]]], H: list[list[sp.Expr]],
                         poly_part: sp.Expr, law: GaussianLaw, hessian: bool,
                         hp: str | None) -> sp.Expr:
    """The polynomial terms by Wick's theorem: add their gradients and Hessian to ``grads``
    and ``H``; returns their Phi."""
    nh = len(H)
    p_phi, p_grads, p_hess = _wick_all(poly_part, law, hessian)
    for name in grads:
        Mg = p_grads[name]
        for r in range(Mg.shape[0]):
            for s in range(Mg.shape[1]):
                grads[name][r][s] += Mg[r, s]
    if hp and hp in p_hess:
        for k in range(nh):
            for l in range(k, nh):
                H[k][l] += p_hess[hp][k, l]
    return p_phi


def _assemble_terms(grads: dict[str, list[list[sp.Expr]]], gsyms: list[_GradEntry],
                    H: list[list[sp.Expr]], hp: str | None
                    ) -> tuple[dict[str, _Matrix], dict[str, _Matrix]]:
    """``(gradients, hessians)`` as immutable matrices (the Hessian symmetrised)."""
    nh = len(H)
    out_g = {}
    for name, M, _ in gsyms:
        G = sp.Matrix(M.shape[0], M.shape[1], lambda r, s: _tidy(grads[name][r][s]))
        out_g[name] = sp.ImmutableMatrix(G)
    hess = {}
    if hp:
        Hm = sp.zeros(nh, nh)
        for k in range(nh):
            for l in range(k, nh):
                Hm[k, l] = Hm[l, k] = _tidy(H[k][l])
        hess[hp] = sp.ImmutableMatrix(Hm)
    return out_g, hess


# -- entry points -------------------------------------------------------------------------
def _check_route(route: object) -> None:
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")


def check_int(x: object, name: str, lo: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {x!r}")
    return int(x)


def _prepare(loss: Callable[..., Any] | sp.Expr, kind: str, K: int, L: int, C: Any,
             params: Iterable[sp.Symbol]
             ) -> tuple[int, int, _Matrix, GaussianLaw, sp.Expr, tuple[sp.Symbol, ...]]:
    K = check_int(K, "K")
    L = check_int(L, "L")
    C = check_covariance(C, L)
    G = g_array(L, K)
    expr = call_loss(loss, G)
    params = tuple(params)
    allsyms = set(G[i, j, k] for i in range(L) for j in range(L) for k in range(K))
    extra = expr.free_symbols - allsyms - set(params)
    if extra:
        raise ValueError(
            f"loss has free symbols {sorted(map(str, extra))} that are neither "
            "pre-activations G nor declared parameters")
    law = make_law(kind, L, K, C)
    return K, L, C, law, law.reduce_loss(expr), params


def _exp_domain_problem(expr: sp.Expr, law: GaussianLaw) -> str | None:
    """Why ``Phi = E[loss(G)]`` does not exist on the whole domain of the order parameters,
    or ``None``. The case is ``exp(P(G))`` with ``P`` growing like ``|G|^2`` or faster: for a
    quadratic ``P = G^T A G / 2 + ...`` on the variables ``v`` of the term, ``E[exp(P)]`` is
    finite iff ``I - Sigma_v A`` is positive definite (``Sigma_v`` their covariance), i.e.
    ``a Var(G) < 1/2`` for ``exp(a G^2)``. The law's covariance grows with ``q`` without
    bound (``Var(G_000) = 2 q_11`` for a tied model, C = 1), so such a potential exists only
    on a bounded region (``q_11 < 1/4`` for ``exp(G1**2)``): the numeric route returned
    finite, wrong values past it (issue 23, D5). A quadratic ``P`` with a negative
    semidefinite ``A`` (``exp(-G**2)``) is fine, as is any ``P`` bounded above."""
    syms = list(law.variables)
    index = {v: i for i, v in enumerate(syms)}
    for node in sorted(expr.atoms(sp.exp), key=sp.default_sort_key):
        arg = node.args[0]
        vs = sorted(arg.free_symbols & set(syms), key=index.__getitem__)
        if not vs or growth_order(arg, vs) < 2:
            continue
        if (-arg).is_nonnegative:
            continue  # bounded above: exp(P) <= 1
        try:
            poly = sp.Poly(sp.expand(arg), *vs)
        except sp.PolynomialError:
            poly = None
        if poly is None or poly.total_degree() != 2 or not all(
                c.is_number for c in poly.coeffs()):
            return (f"E[{sp.sstr(node)}] is infinite for every law with enough variance: its "
                    "exponent grows like |G|^2 or faster and is not bounded above")
        A = np.array([[float(sp.diff(arg, a, b).subs({v: 0 for v in vs})) for b in vs]
                      for a in vs])
        if np.linalg.eigvalsh(A).max() <= 1e-12 * max(1.0, np.abs(A).max()):
            continue  # concave quadratic exponent: a Gaussian integral that always converges
        cov = sp.Matrix([[law.cov[index[a], index[b]] for b in vs] for a in vs])
        if len(vs) == 1:
            var = sp.expand(cov[0, 0])
            cond = sp.sstr(sp.expand(sp.nsimplify(A[0, 0]) * var)) + " < 1"
            where = (f"Var({vs[0]}) = {sp.sstr(var)} < {sp.sstr(sp.nsimplify(1 / A[0, 0]))}, "
                     f"i.e. {cond}")
        else:
            where = (f"the largest eigenvalue of Sigma A is below 1, with A = {A.tolist()} the "
                     f"Hessian of the exponent and Sigma the covariance of {', '.join(map(str, vs))}")
        return (f"E[{sp.sstr(node)}] is finite only while {where}; the variance of G grows "
                "with the order parameters, so the potential does not exist on the model's "
                "whole domain")
    return None


def _build(kind: str, loss: Callable[..., Any] | sp.Expr, K: int, L: int, C: Any,
           params: Iterable[sp.Symbol], route: str, order: int | None, hessian: bool,
           numeric_kw: dict[str, Any]) -> AnyPotential:
    _check_route(route)
    K, L, C, law, expr, params = _prepare(loss, kind, K, L, C, params)
    why = _exp_domain_problem(expr, law)
    if why is not None:
        raise RouteError(f"loss: {why}: refused (a flow would leave that region and the "
                         "numeric route would return finite, wrong values there); SGD of "
                         "the model still runs")
    syms = list(law.variables)
    if order is not None:
        order = check_int(order, "order", 0)
    polynomial = is_polynomial(expr, syms)
    if route == "wick" and not polynomial:
        raise RouteError("route 'wick' needs a polynomial loss in G; this loss is not "
                         "(use route='closed', 'hermite', 'numeric' or 'auto')")
    tried = []
    if route in ("auto", "exact", "wick") and polynomial:
        phi, grads, hess = _wick_all(expr, law, hessian)
        return _wrap(kind, K, L, C, law, phi, grads, hess, params, "wick", None, None)
    if route in ("closed", "hermite", "exact") or (route == "auto" and not polynomial):
        r = "closed" if route in ("auto", "exact") else route
        N = order if order is not None else 12
        try:
            phi, grads, hess, bound = _terms_all(expr, law, r, N, hessian)
            return _wrap(kind, K, L, C, law, phi, grads, hess, params, r, bound,
                         N if r == "hermite" else None)
        except RouteError as exc:
            if route != "auto":
                raise
            tried.append(str(exc))
    # numeric route: described here, built by the numeric layer (this layer never loads numba)
    notes = ["closed route not available: " + "; ".join(tried)] if tried else []
    return NumericRoute(kind=kind, law=law, expr=expr, params=params, options=dict(numeric_kw),
                        notes=notes)


def _wrap(kind: str, K: int, L: int, C: _Matrix, law: GaussianLaw, phi: sp.Expr,
          grads: dict[str, _Matrix], hess: dict[str, _Matrix], params: tuple[sp.Symbol, ...],
          route: str, bound: sp.Expr | None, order: int | None
          ) -> TiedPotential | SymbolicPotential:
    if kind == "tied":
        return TiedPotential(K=K, L=L, C=C, q=law.order_parameters["q"], phi=phi,
                             gamma=grads["q"], params=params, route=route,
                             error_bound=None if bound is None else _tidy(bound),
                             order=order, law=law)
    return SymbolicPotential(kind=kind, L=L, K=K, C=C, law=law, phi=phi, gradients=grads,
                             hessians=hess, params=params, route=route,
                             error_bound=None if bound is None else _tidy(bound), order=order)


def _numeric_kw(param_values: Sequence[float] | None, tol: float, method: str, seed: int,
                reference: Any, mode: str, max_points: int = 400_000) -> dict[str, Any]:
    return {"param_values": param_values, "tol": tol, "method": method, "seed": seed,
            "reference": reference, "mode": mode, "max_points": max_points}


def tied_potential(loss: Callable[..., Any] | sp.Expr, K: int, L: int = 1, C: Any = None,
                   params: Sequence[sp.Symbol] = (), *, route: str = "auto",
                   order: int | None = None, param_values: Sequence[float] | None = None,
                   tol: float = 1e-8, method: str = "auto", seed: int = 0,
                   reference: Any = None, mode: str = "auto", max_points: int = 400_000
                   ) -> TiedPotential | NumericRoute:
    """Potential of tied attention, ``Phi(q) = E[loss(G)]`` (eqs. 10, 79) and
    ``Gamma(q)`` (eq. 91, symmetric convention).

    Parameters
    ----------
    loss : callable
        ``loss(G) -> sympy expression`` with ``G`` the ``L x L x K`` array.
    params : symbols
        Extra free symbols of the loss, runtime parameters of the compiled gradient.
    route : "auto", "exact", "wick", "closed", "hermite" or "numeric"
        See the module docstring; the route used is ``result.route``.
    order : int
        Truncation order of the hermite route (default 12).
    param_values, tol, method, seed, reference, mode, max_points
        Numeric route only (:class:`attndyn.numeric.attention.potentials.NumericPotential`):
        parameter values, requested accuracy, ``"auto"|"tensor"|"sparse"|"rqmc"``,
        RQMC seed, the ``q`` where the rule is calibrated, ``"auto"|"hessian"|"stein"``,
        the largest rule.

    Returns
    -------
    TiedPotential (exact routes) or :class:`NumericRoute` (numeric route, built by
    :func:`attndyn.numeric.attention.potentials.build_potential`), with ``.route``.

    Examples
    --------
    >>> from attndyn.symbolic.losses import mse_teacher_student
    >>> pot = tied_potential(mse_teacher_student("h2"), K=2)
    >>> pot.route
    'wick'
    >>> pot.phi
    3*q_11**2 - 2*q_11*q_22 - 4*q_12**2 + 3*q_22**2
    >>> pot.gamma
    Matrix([
    [6*q_11 - 2*q_22,          -4*q_12],
    [        -4*q_12, -2*q_11 + 6*q_22]])
    """
    return cast("TiedPotential | NumericRoute", _build(
                  "tied", loss, K, L, C, params, route, order, False,
                  _numeric_kw(param_values, tol, method, seed, reference, mode, max_points)))


def untied_potential(loss: Callable[..., Any] | sp.Expr, K: int, L: int = 1, C: Any = None,
                     params: Sequence[sp.Symbol] = (), *, route: str = "auto",
                     order: int | None = None, hessian: bool = True,
                     param_values: Sequence[float] | None = None, tol: float = 1e-8,
                     method: str = "auto", seed: int = 0, reference: Any = None,
                     mode: str = "auto", max_points: int = 400_000
                     ) -> SymbolicPotential | NumericRoute:
    """Untied potential ``Phi(m, q1, q2)`` (section 4.1) with ``grad_m``,
    ``grad_q1``, ``grad_q2`` (symmetric convention, eqs. 27, 32, 42; for ``L = 1``
    ``a^(1) = a^(2) = E[d^2 loss/dG dG]/2``) and the ``m``-Hessian.

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> pot = untied_potential(mse_teacher_student("h1"), K=2)
        >>> pot.route
        'wick'
        >>> pot.phi
        m_1**2/2 - m_1*m_2 + m_2**2/2 + q1_11/2 - q1_12 + q1_22/2 + q2_11/2 - q2_12 + q2_22/2
    """
    return cast("SymbolicPotential | NumericRoute", _build(
                  "untied", loss, K, L, C, params, route, order, hessian,
                  _numeric_kw(param_values, tol, method, seed, reference, mode, max_points)))


def direct_potential(loss: Callable[..., Any] | sp.Expr, K: int, L: int = 1, C: Any = None,
                     params: Sequence[sp.Symbol] = (), *, route: str = "auto",
                     order: int | None = None, param_values: Sequence[float] | None = None,
                     tol: float = 1e-8, method: str = "auto", seed: int = 0,
                     reference: Any = None, mode: str = "auto", max_points: int = 400_000
                     ) -> SymbolicPotential | NumericRoute:
    """Direct-S potential ``Phi(Omega, Psi)`` (appendix E) with ``grad_Omega`` and
    ``grad_Psi`` (symmetric convention: both ``H/2`` for ``L = 1``).

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> pot = direct_potential(mse_teacher_student("h1"), K=2)
        >>> pot.phi
        Omega_11/2 - Omega_12 + Omega_22/2 + Psi_11/2 - Psi_12 + Psi_22/2
        >>> sorted(pot.gradients)
        ['Omega', 'Psi']
    """
    return cast("SymbolicPotential | NumericRoute", _build(
                  "direct", loss, K, L, C, params, route, order, False,
                  _numeric_kw(param_values, tol, method, seed, reference, mode, max_points)))


def general_potential(loss: Callable[..., Any] | sp.Expr, K: int, L: int = 1, C: Any = None,
                      params: Sequence[sp.Symbol] = (), *, route: str = "auto",
                      order: int | None = None, hessian: bool = False,
                      param_values: Sequence[float] | None = None, tol: float = 1e-8,
                      method: str = "auto", seed: int = 0, reference: Any = None,
                      mode: str = "auto", max_points: int = 400_000
                      ) -> SymbolicPotential | NumericRoute:
    """Theorem 1 potential ``Phi(mu, Omega, Psi)`` (eqs. 3-5) with gradients in
    every order parameter (indexed by the flat ``(ijk)``).

        >>> pot = general_potential(lambda G: G[0, 0, 0] ** 2, K=1)
        >>> pot.kind, pot.phi
        ('general', Omega_11 + Psi_11 + mu_1**2)
    """
    return cast("SymbolicPotential | NumericRoute", _build(
                  "general", loss, K, L, C, params, route, order, hessian,
                  _numeric_kw(param_values, tol, method, seed, reference, mode, max_points)))


def potential(kind: str, loss: Callable[..., Any] | sp.Expr, K: int, L: int = 1, C: Any = None,
              params: Sequence[sp.Symbol] = (), **kw: Any) -> AnyPotential:
    """Dispatch on ``kind`` in ``("tied", "untied", "direct", "general")``.

        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> potential("tied", mse_teacher_student("h1"), K=2).phi
        q_11 - 2*q_12 + q_22
    """
    fns: dict[str, Callable[..., AnyPotential]] = {
        "tied": tied_potential, "untied": untied_potential, "direct": direct_potential,
        "general": general_potential}
    if kind not in fns:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(fns)}")
    return fns[kind](loss, K, L, C, params, **kw)
