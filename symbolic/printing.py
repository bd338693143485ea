"""Names, SymPy equations and LaTeX for moment hierarchies, in the paper's notation.

Letters are 0-based in code and 1-based in print, as in paper 003: the word
``(0, 0, 1)`` prints as ``mu_112`` (LaTeX ``\\bar\\mu_{112}``), length-2 words as
``q_11``, ``q_12`` (eq. 11 writes ``q_kl = mu_(kl)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence, Union

if TYPE_CHECKING:  # annotations only
    from fractions import Fraction

    import numpy as np
    import sympy as sp

# the merged terms of one row: (key, [(source, coefficient)]) with key (k, l) or "decay"
_Terms = list[tuple[Union[tuple[int, int], str], list[tuple[int, int]]]]


class _StructureLike(Protocol):
    """What the printers read of a :class:`~attndyn.symbolic.hierarchy.TiedStructure` (a
    protocol: that module imports this one)."""

    K: int
    order: int
    indptr: np.ndarray

    @property
    def n_moments(self) -> int: ...
    @property
    def words(self) -> list[tuple[int, ...]]: ...
    @property
    def src(self) -> np.ndarray: ...
    @property
    def ent(self) -> np.ndarray: ...
    @property
    def coef(self) -> np.ndarray: ...

# SymPy is imported inside the functions that build SymPy objects: the plain-text names
# (word_label, hierarchy_text) are on the start-up path of every model and must not pay
# for importing SymPy (about half a second)

__all__ = ["word_label", "word_symbol", "word_latex", "gamma_symbols", "tied_equations",
           "equations_text", "equations_latex", "hierarchy_text", "hierarchy_latex",
           "closed_form_gamma"]


def _letters(word: Sequence[int], K: int, names: Sequence[str] | None) -> list:
    if names is not None:
        return [names[a] for a in word]
    return [str(a + 1) for a in word]


def word_label(word: Sequence[int], K: int, names: Sequence[str] | None = None) -> str:
    """Plain-text name: ``mu_1``, ``q_12``, ``mu_112`` (letters joined by ``_`` if K > 9).

        >>> word_label((0,), 2), word_label((0, 1), 2), word_label((0, 0, 1), 2)
        ('mu_1', 'q_12', 'mu_112')
    """
    sep = "_" if (K > 9 or names is not None) else ""
    body = sep.join(_letters(word, K, names))
    head = "q" if len(word) == 2 and names is None else "mu"
    return f"{head}_{body}"


def word_symbol(word: Sequence[int], K: int, names: Sequence[str] | None = None) -> sp.Symbol:
    """The SymPy symbol (real) named :func:`word_label`: the moment ``mu_alpha``
    (``q_kl`` for a word of length 2) of eq. (8) as a variable of the printed equations.

        >>> word_symbol((0, 1), 2)
        q_12
    """
    import sympy as sp
    return sp.Symbol(word_label(word, K, names), real=True)


def word_latex(word: Sequence[int], K: int, names: Sequence[str] | None = None) -> str:
    r"""LaTeX name of a word's moment in the paper's notation: ``\bar q_{kl}`` for a word of
    length 2, ``\bar\mu_{...}`` otherwise (1-based letters; comma-separated if ``K > 9`` or
    with ``names``).

        >>> print(word_latex((0, 1), 2))
        \bar q_{12}
    """
    sep = "," if (K > 9 or names is not None) else ""
    body = sep.join(_letters(word, K, names))
    head = r"\bar q" if len(word) == 2 and names is None else r"\bar\mu"
    return f"{head}_{{{body}}}"


def _sympy_matrix(m: Any, K: int) -> sp.ImmutableMatrix:
    """A K x K SymPy matrix from SymPy entries; strings are refused, never evaluated."""
    import sympy as sp

    from .parse import as_sympy
    if isinstance(m, sp.MatrixBase):
        return sp.ImmutableMatrix(m)
    return sp.ImmutableMatrix(K, K, lambda k, l: as_sympy(m[k][l] if not hasattr(m, "shape")
                                                          else m[k, l], "gamma_matrix"))


def gamma_symbols(K: int) -> sp.ImmutableMatrix:
    """Symmetric matrix of symbols ``Gamma_kl`` (1-based names).

        >>> gamma_symbols(2)
        Matrix([
        [Gamma_11, Gamma_12],
        [Gamma_12, Gamma_22]])
    """
    import sympy as sp

    def s(k: int, l: int) -> sp.Symbol:
        a, b = min(k, l), max(k, l)
        return sp.Symbol(f"Gamma_{a + 1}{b + 1}" if K < 10 else f"Gamma_{a + 1}_{b + 1}", real=True)
    return sp.ImmutableMatrix(K, K, s)


def tied_equations(structure: _StructureLike, gamma_matrix: Any = None, q_matrix: Any = None,
                   decay: Any = None) -> list[Any]:
    """SymPy equations ``d mu_alpha/dt = ...`` of a :class:`TiedStructure`.

    ``gamma_matrix`` defaults to the symbols ``Gamma_kl``; pass a potential's
    ``Gamma(q)`` (with its ``q`` symbols) to get closed forms, in which case the
    ``q`` symbols are renamed to the moment symbols ``q_kl``. ``decay`` defaults to
    the symbol ``gamma``.

        >>> from attndyn.symbolic.hierarchy import tied_structure
        >>> eqs = tied_equations(tied_structure(2, [0], 2))
        >>> len(eqs), eqs[0]
        (5, Eq(Derivative(mu_1(t), t), -2*Gamma_11*q_11 - 2*Gamma_12*q_12 - gamma*mu_1/2))
    """
    import sympy as sp
    if decay is None:
        decay = sp.Symbol("gamma")
    K = structure.K
    syms = [word_symbol(w, K) for w in structure.words]
    if gamma_matrix is None:
        gamma_matrix = gamma_symbols(K)
    elif q_matrix is not None:
        ren = {}
        for k in range(K):
            for l in range(K):
                w: tuple[int, ...] = (k, l) if k <= l else (l, k)
                ren[q_matrix[k, l]] = word_symbol(w, K) if structure.order >= 2 else sp.Integer(0)
        gamma_matrix = _sympy_matrix(gamma_matrix, K).xreplace(ren)
    t = sp.Symbol("t", real=True)
    eqs = []
    for i, w in enumerate(structure.words):
        rhs = sp.Integer(0)
        for tt in range(structure.indptr[i], structure.indptr[i + 1]):
            e = int(structure.ent[tt])
            c = int(structure.coef[tt])
            src = syms[int(structure.src[tt])]
            if e == K * K:
                rhs += sp.Rational(c, 2) * decay * src
            else:
                rhs += c * gamma_matrix[e // K, e % K] * src
        lhs = sp.Derivative(sp.Function(syms[i].name)(t), t)
        eqs.append(sp.Eq(lhs, sp.expand(rhs)))
    return eqs


def equations_text(eqs: Sequence[Any]) -> str:
    """Plain text of :func:`tied_equations`, one line ``dmu_alpha/dt = ...`` per
    equation (eq. 11 truncated by eq. 13).

        >>> from attndyn.symbolic.hierarchy import tied_structure
        >>> print(equations_text(tied_equations(tied_structure(2, [0], 2))[:1]))
        dmu_1/dt = -2*Gamma_11*q_11 - 2*Gamma_12*q_12 - gamma*mu_1/2
    """
    import sympy as sp
    lines = []
    for eq in eqs:
        name = eq.lhs.expr.func.__name__
        lines.append(f"d{name}/dt = {sp.sstr(eq.rhs)}")
    return "\n".join(lines)


def equations_latex(eqs: Sequence[Any], structure: _StructureLike) -> str:
    """LaTeX of :func:`tied_equations` in an ``aligned`` environment, moments in the
    paper's notation (:func:`word_latex`).

        >>> from attndyn.symbolic.hierarchy import tied_structure
        >>> st = tied_structure(2, [0], 2)
        >>> tex = equations_latex(tied_equations(st)[:1], st)
        >>> "Gamma" in tex
        True
    """
    import sympy as sp
    K = structure.K
    names = {word_symbol(w, K): sp.Symbol(word_latex(w, K)) for w in structure.words}
    rows = []
    for eq, w in zip(eqs, structure.words):
        rhs = eq.rhs.xreplace(names)
        rows.append(rf"\frac{{d {word_latex(w, K)}}}{{dt}} &= {sp.latex(rhs)}")
    return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"


# ---------------------------------------------------------------------------
# printing straight from the structure arrays (no SymPy per term: order 16 in well under 2 s)

def _merged_rows(structure: _StructureLike) -> Iterator[tuple[int, _Terms]]:
    """Per row, the terms merged over ``Gamma_kl = Gamma_lk``: yields
    ``(row, [(key, [(src, coef), ...]), ...])`` with ``key`` a pair ``(k, l)``, ``k <= l``,
    or ``"decay"`` (coefficient in units of ``gamma/2``), keys and sources ascending."""
    import numpy as np
    K = structure.K
    n = structure.n_moments
    indptr = np.asarray(structure.indptr, dtype=np.int64)
    ent = np.asarray(structure.ent, dtype=np.int64)
    k, l = ent // K, ent % K
    gkey = np.where(ent == K * K, K * K, np.minimum(k, l) * K + np.maximum(k, l))
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    key = (row * (K * K + 1) + gkey) * n + np.asarray(structure.src, dtype=np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    coef = np.bincount(inv, weights=np.asarray(structure.coef, dtype=np.float64)).astype(np.int64)
    keep = coef != 0
    uniq, coef = uniq[keep], coef[keep]
    src = uniq % n
    g = (uniq // n) % (K * K + 1)
    r = uniq // (n * (K * K + 1))
    bounds = np.searchsorted(r, np.arange(n + 1))
    for i in range(n):
        terms: _Terms = []
        for t in range(bounds[i], bounds[i + 1]):
            gk = int(g[t])
            kk: tuple[int, int] | str = "decay" if gk == K * K else (gk // K, gk % K)
            if terms and terms[-1][0] == kk:
                terms[-1][1].append((int(src[t]), int(coef[t])))
            else:
                terms.append((kk, [(int(src[t]), int(coef[t]))]))
        yield i, terms


def _gamma_name(k: int, l: int, K: int, latex: bool = False) -> str:
    if latex:
        return rf"\Gamma_{{{k + 1}{l + 1}}}" if K < 10 else rf"\Gamma_{{{k + 1},{l + 1}}}"
    return f"Gamma_{k + 1}{l + 1}" if K < 10 else f"Gamma_{k + 1}_{l + 1}"


def _number(text: str) -> Fraction | None:
    """The value of a printed rational constant (``2``, ``-3/2``), or None (no eval)."""
    from fractions import Fraction
    try:
        return Fraction(text.replace(" ", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _signed(parts: Iterable[tuple[int | Fraction, str]], latex: bool = False) -> str:
    """Join ``(coefficient, body)`` pairs as ``a - b + c``; ``body`` may be empty;
    coefficients are ints or Fractions; zero terms are dropped."""
    mul = " " if latex else "*"
    out = []
    for c, body in parts:
        if c == 0:
            continue
        sign = "-" if c < 0 else "+"
        mag = -c if c < 0 else c
        if getattr(mag, "denominator", 1) != 1:
            num = (rf"\tfrac{{{mag.numerator}}}{{{mag.denominator}}}" if latex
                   else f"{mag.numerator}/{mag.denominator}")
        else:
            num = str(int(mag))
        text = body if (mag == 1 and body) else (f"{num}{mul}{body}" if body else num)
        out.append((sign, text))
    if not out:
        return "0"
    first = ("-" if out[0][0] == "-" else "") + out[0][1]
    return first + "".join(f" {s} {t}" for s, t in out[1:])


def hierarchy_text(structure: _StructureLike, gamma: dict[Any, str] | None = None,
                   decay: str = "gamma") -> Iterator[str]:
    """Lines ``dmu_alpha/dt = ...`` of a tied structure (eq. 11 truncated by eq. 13), built
    from the integer arrays, one line per moment (a generator: stream long outputs).

    ``gamma``: optional mapping ``(k, l) -> str`` (``k <= l``) with the closed form of
    ``Gamma_kl`` in the moment names; then each row is grouped by Gamma entry,
    ``(Gamma_kl(q))*(c*mu_a + ...)``. The decay term is ``c/2*gamma*mu``.

        >>> from attndyn.symbolic.hierarchy import tied_structure
        >>> print(next(iter(hierarchy_text(tied_structure(2, [0], 2)))))
        dmu_1/dt = -2*Gamma_11*q_11 - 2*Gamma_12*q_12 - gamma*mu_1/2
    """
    K = structure.K
    names = [word_label(w, K) for w in structure.words]
    for i, terms in _merged_rows(structure):
        parts: list[tuple[int | Fraction, str]] = []
        for key, srcs in terms:
            if isinstance(key, str):  # "decay"
                for s, c in srcs:
                    parts.append((c, f"{decay}*{names[s]}/2") if c % 2 else
                                 (c // 2, f"{decay}*{names[s]}"))
            elif gamma is None:
                g = _gamma_name(*key, K)
                parts.extend((c, f"{g}*{names[s]}") for s, c in srcs)
            elif (v := _number(gamma[key])) is not None:  # a constant Gamma_kl: fold it in
                parts.extend((c * v, names[s]) for s, c in srcs)
            else:
                inner = _signed([(c, names[s]) for s, c in srcs])
                parts.append((1, f"({gamma[key]})*({inner})"))
        yield f"d{names[i]}/dt = {_signed(parts)}"


def hierarchy_latex(structure: _StructureLike, gamma: dict[Any, str] | None = None,
                    decay: str = r"\gamma") -> Iterator[str]:
    """The same rows as :func:`hierarchy_text` in LaTeX (an ``aligned`` environment, as a
    generator of lines), in the paper's notation ``\\bar\\mu``, ``\\bar q``, ``\\Gamma_{kl}``.
    ``gamma``: optional mapping ``(k, l) -> LaTeX`` of the closed forms.

        >>> from attndyn.symbolic.hierarchy import tied_structure
        >>> lines = list(hierarchy_latex(tied_structure(2, [0], 2)))
        >>> len(lines) > 2
        True
    """
    from fractions import Fraction
    K = structure.K
    names = [word_latex(w, K) for w in structure.words]

    def signed(parts: Iterable[tuple[int | Fraction, str]]) -> str:
        return _signed(parts, latex=True)

    yield "\\begin{aligned}"
    n = structure.n_moments
    for i, terms in _merged_rows(structure):
        parts: list[tuple[int | Fraction, str]] = []
        for key, srcs in terms:
            if isinstance(key, str):  # "decay"
                for s, c in srcs:
                    parts.append((Fraction(c, 2), f"{decay} {names[s]}"))
            elif gamma is None:
                g = _gamma_name(*key, K, latex=True)
                parts.extend((c, f"{g} {names[s]}") for s, c in srcs)
            elif (v := _number(gamma[key])) is not None:
                parts.extend((c * v, names[s]) for s, c in srcs)
            else:
                inner = signed([(c, names[s]) for s, c in srcs])
                parts.append((1, rf"\left({gamma[key]}\right)\left({inner}\right)"))
        end = " \\\\" if i < n - 1 else ""
        yield rf"\frac{{d {names[i]}}}{{dt}} &= {signed(parts)}{end}"
    yield "\\end{aligned}"


def closed_form_gamma(structure: _StructureLike, gamma_matrix: Any, q_matrix: Any,
                      latex: bool = False) -> dict[tuple[int, int], str]:
    """``(k, l) -> str`` (``k <= l``): a potential's ``Gamma(q)`` with ``q`` renamed to the
    moment names, printed once per entry by SymPy, for :func:`hierarchy_text` and
    :func:`hierarchy_latex`.

        >>> from attndyn.symbolic.hierarchy import tied_structure
        >>> from attndyn.symbolic.losses import mse_teacher_student
        >>> from attndyn.symbolic.potential import tied_potential
        >>> pot = tied_potential(mse_teacher_student("h2"), K=2)
        >>> closed_form_gamma(tied_structure(2, [0], 2), pot.gamma, pot.q)
        {(0, 0): '6*q_11 - 2*q_22', (0, 1): '-4*q_12', (1, 1): '-2*q_11 + 6*q_22'}
    """
    import sympy as sp
    K = structure.K
    ren = {}
    for k in range(K):
        for l in range(K):
            w = (min(k, l), max(k, l))
            ren[q_matrix[k, l]] = (sp.Symbol(word_latex(w, K)) if latex else word_symbol(w, K)) \
                if structure.order >= 2 else sp.Integer(0)
    G = _sympy_matrix(gamma_matrix, K).xreplace(ren)
    printer = sp.latex if latex else sp.sstr
    return {(k, l): printer(G[k, l]) for k in range(K) for l in range(k, K)}
