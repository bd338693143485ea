"""Names, SymPy equations and LaTeX for moment hierarchies, in the paper's notation.

Letters are 0-based in code and 1-based in print, as in paper 003: the word
``(0, 0, 1)`` prints as ``mu_112`` (LaTeX ``\\bar\\mu_{112}``), length-2 words as
``q_11``, ``q_12`` (eq. 11 writes ``q_kl = mu_(kl)``).
"""

from __future__ import annotations

from typing import Sequence

import sympy as sp

__all__ = ["word_label", "word_symbol", "word_latex", "gamma_symbols", "tied_equations",
           "equations_text", "equations_latex"]


def _letters(word: Sequence[int], K: int, names: Sequence[str] | None) -> list:
    if names is not None:
        return [names[a] for a in word]
    return [str(a + 1) for a in word]


def word_label(word: Sequence[int], K: int, names: Sequence[str] | None = None) -> str:
    """Plain-text name: ``mu_1``, ``q_12``, ``mu_112`` (letters joined by ``_`` if K > 9)."""
    sep = "_" if (K > 9 or names is not None) else ""
    body = sep.join(_letters(word, K, names))
    head = "q" if len(word) == 2 and names is None else "mu"
    return f"{head}_{body}"


def word_symbol(word: Sequence[int], K: int, names=None) -> sp.Symbol:
    return sp.Symbol(word_label(word, K, names), real=True)


def word_latex(word: Sequence[int], K: int, names=None) -> str:
    sep = "," if (K > 9 or names is not None) else ""
    body = sep.join(_letters(word, K, names))
    head = r"\bar q" if len(word) == 2 and names is None else r"\bar\mu"
    return f"{head}_{{{body}}}"


def gamma_symbols(K: int) -> sp.ImmutableMatrix:
    """Symmetric matrix of symbols ``Gamma_kl`` (1-based names)."""
    def s(k, l):
        a, b = min(k, l), max(k, l)
        return sp.Symbol(f"Gamma_{a + 1}{b + 1}" if K < 10 else f"Gamma_{a + 1}_{b + 1}", real=True)
    return sp.ImmutableMatrix(K, K, s)


def tied_equations(structure, gamma_matrix=None, q_matrix=None, decay=sp.Symbol("gamma")):
    """SymPy equations ``d mu_alpha/dt = ...`` of a :class:`TiedStructure`.

    ``gamma_matrix`` defaults to the symbols ``Gamma_kl``; pass a potential's
    ``Gamma(q)`` (with its ``q`` symbols) to get closed forms, in which case the
    ``q`` symbols are renamed to the moment symbols ``q_kl``.
    """
    K = structure.K
    syms = [word_symbol(w, K) for w in structure.words]
    if gamma_matrix is None:
        gamma_matrix = gamma_symbols(K)
    elif q_matrix is not None:
        ren = {}
        for k in range(K):
            for l in range(K):
                w = (k, l) if k <= l else (l, k)
                ren[q_matrix[k, l]] = word_symbol(w, K) if structure.order >= 2 else sp.Integer(0)
        gamma_matrix = sp.ImmutableMatrix(gamma_matrix).xreplace(ren)
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


def equations_text(eqs) -> str:
    lines = []
    for eq in eqs:
        name = eq.lhs.expr.func.__name__
        lines.append(f"d{name}/dt = {sp.sstr(eq.rhs)}")
    return "\n".join(lines)


def equations_latex(eqs, structure) -> str:
    K = structure.K
    names = {word_symbol(w, K): sp.Symbol(word_latex(w, K)) for w in structure.words}
    rows = []
    for eq, w in zip(eqs, structure.words):
        rhs = eq.rhs.xreplace(names)
        rows.append(rf"\frac{{d {word_latex(w, K)}}}{{dt}} &= {sp.latex(rhs)}")
    return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"
