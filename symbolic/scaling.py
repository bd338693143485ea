r"""Scaling-law bounds of paper 000 as SymPy expressions.

The same statements as :mod:`attndyn.numeric.scaling`, symbolically: print
them in LaTeX, solve the threshold (eq. 3) for ``N`` (SymPy returns the
Lambert-W form), and expand the stage-II bound for ``C -> inf`` (the
``C^(-1/6)`` power law with its ``(log C)^(1/6)`` correction).

Symbols (all positive): ``C`` compute, ``N`` data size, ``M`` model size,
``T`` time, ``xi`` noise level, ``L`` sequence length, ``d`` width, ``eps``
the output scale of eq. (1), ``zeta`` the model-law exponent, and the
hidden constants of the paper: ``alpha`` (rate, Theta(lambda)),
``C_poly`` (stage-I constant poly(L, d, 1/lambda, 1/omega)), ``L_0`` (initial
loss L(0, D)) and ``c_stat`` (the constant of O(xi^2/N)).

This module imports only sympy (and mpmath through it).
"""

from __future__ import annotations

import sympy as sp
from sympy.functions.combinatorial.numbers import stirling

from .parse import as_sympy as _as_sympy

__all__ = [
    "symbols",
    "threshold_compute",
    "threshold_equation",
    "solve_threshold",
    "critical_data_size",
    "paper_critical_data_size",
    "verify_inverse",
    "threshold_time",
    "training_loss_bound",
    "approximation_bound",
    "generalisation_bound",
    "stage_one_bound",
    "stage_two_bound",
    "stage_two_bound_paper",
    "threshold_jump",
    "time_law",
    "data_law",
    "model_law",
    "model_law_boundary",
    "model_law_crossover",
    "noise_drag_data",
    "noise_drag_compute",
    "lambertw_asymptotic",
    "stage_two_asymptotic",
    "stage_two_leading",
    "bounds",
    "latex",
    "latex_all",
]

C, N, M, T = sp.symbols("C N M T", positive=True)
xi, xi0 = sp.symbols("xi xi_0", positive=True)
L, d = sp.symbols("L d", positive=True)
eps, zeta = sp.symbols("varepsilon zeta", positive=True)
alpha = sp.Symbol("alpha", positive=True)
C_poly = sp.Symbol("C_poly", positive=True)
L_0 = sp.Symbol("L_0", positive=True)
c_stat = sp.Symbol("c_stat", positive=True)

#: name -> Symbol, for ``subs`` and lambdify.
symbols = {
    "C": C, "N": N, "M": M, "T": T, "xi": xi, "xi0": xi0, "L": L, "d": d,
    "eps": eps, "zeta": zeta, "alpha": alpha, "prefactor": C_poly, "loss0": L_0,
    "c_stat": c_stat,
}


def _w_arg() -> sp.Expr:
    """Argument of W in the exact inverse: ``6 (L d)^6 C / xi^10``."""
    return 6 * (L * d) ** 6 * C / xi ** 10


# ---------------------------------------------------------------------------
# threshold, eq. (3)
# ---------------------------------------------------------------------------


def threshold_compute() -> sp.Expr:
    """``C*(N) = N^6 log(N L d / xi^2) / xi^2`` (eq. 3 / 12).

        >>> threshold_compute()
        N**6*log(L*N*d/xi**2)/xi**2
    """
    return N ** 6 * sp.log(N * L * d / xi ** 2) / xi ** 2


def threshold_equation() -> sp.Expr:
    """``Eq(C, C*(N))``: the boundary between the stages of Theorem 7.1.

        >>> threshold_equation()
        Eq(C, N**6*log(L*N*d/xi**2)/xi**2)
    """
    return sp.Eq(C, threshold_compute())


def solve_threshold() -> sp.Expr:
    """Solve eq. (3) for ``N`` with :func:`sympy.solve`.

    Returns the unique positive solution, which SymPy writes as
    ``xi^2 exp(W(6 C L^6 d^6 / xi^10) / 6) / (L d)``.

        >>> N = solve_threshold()
        >>> sorted(str(s) for s in N.free_symbols)
        ['C', 'L', 'd', 'xi']
    """
    sols = sp.solve(threshold_equation(), N)
    if len(sols) != 1 or not sols[0].has(sp.LambertW):
        raise RuntimeError(f"unexpected solution of the threshold equation: {sols}")
    return sols[0]


def critical_data_size() -> sp.Expr:
    r"""``N*(C) = (6 C xi^2 / W0(6 (L d)^6 C / xi^10))^(1/6)``: the exact inverse of
    eq. (3) (Theorem 7.1 / F.7).

        >>> critical_data_size()
        6**(1/6)*C**(1/6)*xi**(1/3)*(1/LambertW(6*C*L**6*d**6/xi**10))**(1/6)
    """
    return (6 * C * xi ** 2 / sp.LambertW(_w_arg())) ** sp.Rational(1, 6)


def paper_critical_data_size() -> sp.Expr:
    """The paper's ``(C xi^2 / W(C / xi^10))^(1/6)`` (proof of Theorem F.7).

        >>> paper_critical_data_size()
        C**(1/6)*xi**(1/3)*(1/LambertW(C/xi**10))**(1/6)
    """
    return (C * xi ** 2 / sp.LambertW(C / xi ** 10)) ** sp.Rational(1, 6)


def verify_inverse(candidate: sp.Expr | None = None) -> bool:
    """Prove symbolically that ``candidate`` (default
    :func:`critical_data_size`) is the solution :func:`solve_threshold` of
    eq. (3) and that it satisfies the equation.

    Sixth powers are compared after rewriting ``exp(W(a)) = a / W(a)`` and
    ``log W(a) = log a - W(a)``, with ``a = 6 (L d)^6 C / xi^10``. The
    paper's form (:func:`paper_critical_data_size`) fails this check.

        >>> verify_inverse()
        True
        >>> verify_inverse(paper_critical_data_size())
        False
    """
    cand = critical_data_size() if candidate is None else _as_sympy(candidate, "candidate")
    a = _w_arg()
    w = sp.Symbol("w", positive=True)
    rule = {sp.LambertW(a): w}
    s6 = sp.expand_power_base(solve_threshold() ** 6, force=True)
    s6 = sp.powsimp(s6, force=True).subs(rule).subs(sp.exp(w), a / w)
    f6 = sp.powsimp(sp.expand_power_base(cand ** 6, force=True), force=True).subs(rule)
    f6 = f6.subs(sp.exp(w), a / w)
    if sp.simplify(s6 - f6) != 0:
        return False
    # residual of eq. (3) at N = candidate
    n6 = f6
    logn = sp.expand_log(sp.log(cand.subs(rule)), force=True).subs(sp.log(sp.exp(w / 6)), w / 6)
    cstar = n6 * (logn + sp.log(L * d / xi ** 2)) / xi ** 2
    res = sp.expand_log(sp.expand(cstar - C), force=True).subs(sp.log(w), sp.log(a) - w)
    return bool(sp.simplify(sp.expand_log(res, force=True)) == 0)


def threshold_time() -> sp.Expr:
    """``T*(N) = N^2 log(N L d / xi^2) / xi^2`` (Condition 1 of Thm F.7).

        >>> threshold_time()
        N**2*log(L*N*d/xi**2)/xi**2
        >>> sp.simplify(threshold_compute() / (N ** 3 * N * threshold_time()))
        1
    """
    return N ** 2 * sp.log(N * L * d / xi ** 2) / xi ** 2


# ---------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------


def training_loss_bound() -> sp.Expr:
    """Theorem 5.5 / E.2: ``exp(-alpha eps^2 T) L_0``.

        >>> training_loss_bound()
        L_0*exp(-T*alpha*varepsilon**2)
    """
    return sp.exp(-alpha * eps ** 2 * T) * L_0


def approximation_bound() -> sp.Expr:
    """Corollary 6.1 / E.3: ``M^-2``.

        >>> approximation_bound()
        M**(-2)
    """
    return M ** -2


def generalisation_bound() -> sp.Expr:
    """Theorem 6.2 / F.6: ``(4/M + xi)/M + L d xi / N``.

        >>> generalisation_bound()
        L*d*xi/N + (xi + 4/M)/M
    """
    return (4 / M + xi) / M + L * d * xi / N


def stage_one_bound() -> sp.Expr:
    """Theorem 7.1 / F.7, stage I: ``C_poly exp(-alpha xi^2 C / N^6) L_0``.

        >>> stage_one_bound()
        C_poly*L_0*exp(-C*alpha*xi**2/N**6)
    """
    return C_poly * sp.exp(-alpha * xi ** 2 * C / N ** 6) * L_0


def stage_two_bound() -> sp.Expr:
    """Theorem 7.1 / F.7, stage II, exact: ``c_stat xi^2 / N*(C)``.

        >>> stage_two_bound()
        6**(5/6)*c_stat*xi**(5/3)/(6*C**(1/6)*(1/LambertW(6*C*L**6*d**6/xi**10))**(1/6))
    """
    return c_stat * xi ** 2 / critical_data_size()


def stage_two_bound_paper() -> sp.Expr:
    """Stage II of Theorem 7.1 as printed: ``c_stat xi^(5/3) (C / W(C/xi^10))^(-1/6)``.

        >>> stage_two_bound_paper()
        c_stat*xi**(5/3)/(C**(1/6)*(1/LambertW(C/xi**10))**(1/6))
    """
    return c_stat * xi ** sp.Rational(5, 3) * (C / sp.LambertW(C / xi ** 10)) ** sp.Rational(-1, 6)


def threshold_jump() -> sp.Expr:
    """Stage I just below ``C*(N)`` over stage II just above it (Theorem 7.1 / F.7):
    ``C_poly L_0 (N L d / xi^2)^(1 - alpha) / (c_stat L d)``.

        >>> threshold_jump()
        C_poly*L_0*N/(c_stat*xi**2*(L*N*d/xi**2)**alpha)
    """
    at = stage_one_bound().subs(C, threshold_compute())
    return sp.simplify(sp.expand_log(at, force=True) / (c_stat * xi ** 2 / N))


def time_law(literal: bool = False) -> sp.Expr:
    """Theorem 7.2 / F.8, time law, ``eps = xi / N``:
    ``C_poly L_0 exp(-alpha xi^2 T / N^2) + c_stat xi^2 / N``.
    ``literal=True``: the exponent as printed, ``eps^2 xi^2 T / N^2``.

        >>> time_law()
        C_poly*L_0*exp(-T*alpha*xi**2/N**2) + c_stat*xi**2/N
        >>> time_law(literal=True)
        C_poly*L_0*exp(-T*alpha*xi**4/N**4) + c_stat*xi**2/N
    """
    e2 = (xi / N) ** 2
    expo = alpha * e2 * T * (xi ** 2 / N ** 2 if literal else 1)
    return C_poly * L_0 * sp.exp(-expo) + c_stat * xi ** 2 / N


def data_law() -> sp.Expr:
    """Theorem 7.2 / F.8, data law: ``c_stat xi^2 / N``.

        >>> data_law()
        c_stat*xi**2/N
    """
    return c_stat * xi ** 2 / N


def model_law() -> sp.Expr:
    """Theorem 7.2 / F.8, model law: ``xi^2 M^-zeta``, zeta in (0, 1/3).

        >>> model_law()
        xi**2/M**zeta
    """
    return xi ** 2 * M ** (-zeta)


def model_law_boundary() -> sp.Expr:
    """The stated limit ``N^(3/(2 zeta))`` of the model law.

        >>> model_law_boundary()
        N**(3/(2*zeta))
    """
    return N ** (3 / (2 * zeta))


def model_law_crossover() -> sp.Expr:
    """``M`` where ``xi^2 M^-zeta = xi^2 / N`` (the proof's ``xi^2/N <= xi eps``;
    Theorem 7.2 / F.8).

        >>> model_law_crossover()
        N**(1/zeta)
    """
    sol = sp.solve(sp.Eq(model_law(), xi ** 2 / N), M)
    return sol[0]


def noise_drag_data(power: sp.Expr = sp.Rational(1, 2)) -> sp.Expr:
    """Data law with ``xi = xi0 N^power`` (section 7.2); ``power = 1/2`` gives ``c_stat xi0^2``.

        >>> noise_drag_data()
        c_stat*xi_0**2
    """
    return sp.powsimp(data_law().subs(xi, xi0 * N ** power), force=True)


def noise_drag_compute(power: sp.Expr = sp.Rational(1, 10), form: str = "exact") -> sp.Expr:
    """Stage II with ``xi = xi0 C^power`` (section 7.2); ``power = 1/10`` is free of ``C``.

        >>> noise_drag_compute()
        6**(5/6)*c_stat*xi_0**(5/3)*LambertW(6*L**6*d**6/xi_0**10)**(1/6)/6
    """
    expr = stage_two_bound() if form == "exact" else stage_two_bound_paper()
    out = expr.subs(xi, xi0 * C ** power)
    return sp.powsimp(sp.powdenest(sp.expand_power_base(out, force=True), force=True), force=True)


# ---------------------------------------------------------------------------
# asymptotics
# ---------------------------------------------------------------------------


def lambertw_asymptotic(z: sp.Expr, order: int = 3) -> sp.Expr:
    r"""De Bruijn's expansion of ``W0(z)`` for ``z -> inf`` (Corless et al.
    1996, eq. 4.19), up to ``L1^-order``:

    .. math:: W_0(z) = L_1 - L_2 + \sum_{l \ge 0}\sum_{m \ge 1}
              \frac{(-1)^l \left[{l+m \atop l+1}\right]}{m!}
              \frac{L_2^m}{L_1^{l+m}}, \quad L_1 = \log z, \; L_2 = \log L_1,

    with ``[n k]`` the unsigned Stirling numbers of the first kind.

        >>> import sympy
        >>> w = lambertw_asymptotic(sympy.Integer(10) ** 6)
        >>> round(float(w), 3), round(float(sympy.LambertW(10 ** 6)), 3)
        (11.383, 11.383)
    """
    l1 = sp.log(z)
    l2 = sp.log(l1)
    s = l1 - l2
    for l in range(order):
        for m in range(1, order - l + 1):
            if l + m > order:
                continue
            coef = sp.Integer(-1) ** l * stirling(l + m, l + 1, kind=1) / sp.factorial(m)
            s += coef * l2 ** m / l1 ** (l + m)
    return s


def stage_two_asymptotic(order: int = 2) -> sp.Expr:
    """Stage-II bound of Theorem 7.1 for ``C -> inf`` with W replaced by
    :func:`lambertw_asymptotic` of the given order:
    ``c_stat 6^(-1/6) xi^(5/3) C^(-1/6) W~^(1/6)``.

        >>> import sympy
        >>> e = stage_two_asymptotic(order=2)
        >>> e.has(sympy.LambertW)
        False
        >>> at = {C: sympy.Integer(10) ** 40, L: 1, d: 1, xi: 1}
        >>> round(float((e / stage_two_bound()).subs(at)), 4)
        1.0
    """
    w = lambertw_asymptotic(_w_arg(), order)
    return c_stat * 6 ** sp.Rational(-1, 6) * xi ** sp.Rational(5, 3) * C ** sp.Rational(-1, 6) \
        * w ** sp.Rational(1, 6)


def stage_two_leading() -> sp.Expr:
    r"""Leading behaviour of the stage-II bound of Theorem 7.1 as ``C -> inf``:

    .. math:: c_{\rm stat}\, 6^{-1/6} \xi^{5/3} C^{-1/6} (\log C)^{1/6},

    i.e. ``C^(-1/6)`` with a ``(log C)^(1/6)`` correction (``W(a) ~ log a ~
    log C``); the next relative corrections are ``O(log log C / log C)``.

        >>> stage_two_leading()
        6**(5/6)*c_stat*xi**(5/3)*log(C)**(1/6)/(6*C**(1/6))
    """
    return c_stat * 6 ** sp.Rational(-1, 6) * xi ** sp.Rational(5, 3) * C ** sp.Rational(-1, 6) \
        * sp.log(C) ** sp.Rational(1, 6)


# ---------------------------------------------------------------------------
# printing
# ---------------------------------------------------------------------------


def bounds() -> dict[str, tuple[sp.Expr, str]]:
    """``{name: (expression, source in the paper)}`` for every statement.

        >>> b = bounds()
        >>> b["data_law"]
        (c_stat*xi**2/N, 'Theorem 7.2 / F.8, data law')
        >>> len(b) >= 10
        True
    """
    return {
        "threshold_compute": (threshold_compute(), "eq. (3) / (12)"),
        "critical_data_size": (critical_data_size(), "exact inverse of eq. (3)"),
        "paper_critical_data_size": (paper_critical_data_size(), "proof of Theorem F.7"),
        "threshold_time": (threshold_time(), "Condition 1, proof of Theorem F.7"),
        "training_loss_bound": (training_loss_bound(), "Theorem 5.5 / E.2"),
        "approximation_bound": (approximation_bound(), "Corollary 6.1 / E.3"),
        "generalisation_bound": (generalisation_bound(), "Theorem 6.2 / F.6"),
        "stage_one_bound": (stage_one_bound(), "Theorem 7.1 / F.7, stage I"),
        "stage_two_bound": (stage_two_bound(), "Theorem 7.1 / F.7, stage II (exact N*)"),
        "stage_two_bound_paper": (stage_two_bound_paper(),
                                  "Theorem 7.1 / F.7, stage II as printed"),
        "time_law": (time_law(), "Theorem 7.2 / F.8, time law"),
        "data_law": (data_law(), "Theorem 7.2 / F.8, data law"),
        "model_law": (model_law(), "Theorem 7.2 / F.8, model law"),
        "model_law_boundary": (model_law_boundary(), "Theorem 7.2 / F.8"),
        "stage_two_leading": (stage_two_leading(), "C -> inf"),
    }


def latex(name: str) -> str:
    """LaTeX of one statement of :func:`bounds` (``name`` as its key).

        >>> latex("data_law")
        '\\\\frac{c_{stat} \\\\xi^{2}}{N}'
    """
    table = bounds()
    if name not in table:
        raise ValueError(f"unknown bound {name!r}; choose from {sorted(table)}")
    text: str = sp.latex(table[name][0])
    return text


def latex_all() -> dict[str, str]:
    """``{name: LaTeX}`` for every statement of :func:`bounds`.

        >>> latex_all()["data_law"]
        '\\\\frac{c_{stat} \\\\xi^{2}}{N}'
    """
    return {k: sp.latex(v[0]) for k, v in bounds().items()}
