"""The array printers (hierarchy_text/latex) against the SymPy equations of the same structure."""

from __future__ import annotations

import pytest
import sympy as sp
from sympy.parsing.sympy_parser import parse_expr

import attndyn
from attndyn.symbolic.hierarchy import tied_structure
from attndyn.symbolic.printing import (closed_form_gamma, hierarchy_latex, hierarchy_text,
                                       tied_equations)


def _parsed(line, names):
    # test-only: parse our own printed output back (never user input)
    lhs, rhs = line.split(" = ", 1)
    return lhs, parse_expr(rhs, local_dict=names, evaluate=True)


def _symbols(eqs):
    out = {}
    for eq in eqs:
        for s in eq.rhs.free_symbols:
            out[s.name] = s
        out[eq.lhs.expr.func.__name__] = sp.Symbol(eq.lhs.expr.func.__name__, real=True)
    return out


@pytest.mark.parametrize("K, trainable, order", [(1, [0], 5), (2, [0], 6), (2, [0, 1], 5),
                                                 (3, [0, 2], 4), (3, [0, 1, 2], 3)])
def test_text_equals_sympy_equations(K, trainable, order):
    s = tied_structure(K, trainable, order)
    eqs = tied_equations(s)
    names = _symbols(eqs)
    lines = list(hierarchy_text(s))
    assert len(lines) == s.n_moments
    for line, eq in zip(lines, eqs):
        lhs, rhs = _parsed(line, names)
        assert lhs == f"d{eq.lhs.expr.func.__name__}/dt"
        assert sp.expand(rhs - eq.rhs) == 0, (line, eq.rhs)


@pytest.mark.parametrize("loss", [lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2,
                                  lambda G: (G[0, 0, 0] ** 2 - G[0, 0, 1]) ** 2 + G[0, 0, 0] ** 4 / 3])
def test_closed_form_text_equals_sympy(loss):
    m = attndyn.TiedModel(2, [0], loss, weight_decay=0.25)
    h = m.hierarchy(4)
    pot = m.potential
    eqs = tied_equations(h.structure, pot.gamma, pot.q)
    names = _symbols(eqs)
    for line, eq in zip(h.text(closed_form=True).splitlines(), eqs):
        _, rhs = _parsed(line, names)
        assert sp.expand(rhs - eq.rhs) == 0, (line, eq.rhs)


def test_latex_rows_and_notation():
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=1.0)
    h = m.hierarchy(3)
    tex = h.latex()
    rows = tex.splitlines()
    assert rows[0] == r"\begin{aligned}" and rows[-1] == r"\end{aligned}"
    assert len(rows) == h.n_moments + 2
    assert r"\frac{d \bar q_{12}}{dt} &= -2 \Gamma_{11} \bar\mu_{112} - 2 \Gamma_{12} \bar\mu_{122}" \
           r" - \tfrac{1}{2} \gamma \bar q_{12} \\" in rows
    closed = h.latex(closed_form=True)
    assert r"\Gamma" not in closed and r"\bar\mu_{112}" in closed
    assert h._repr_latex_().startswith("$$\\begin{aligned}")
    lines = list(hierarchy_latex(h.structure, closed_form_gamma(h.structure, m.potential.gamma,
                                                                m.potential.q, latex=True)))
    assert "\n".join(lines) == closed
