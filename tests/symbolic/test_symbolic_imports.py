"""No import circle inside symbolic/ (issue 24): every module imports only modules that do
not import it back, lazy imports inside functions included."""

from __future__ import annotations

import pytest

from import_reader import import_graph, strongly_connected

PRE = "attndyn.symbolic."


def _graph() -> dict:
    """The static import graph of symbolic/'s modules (short names), from the whole tree's."""
    out = {}
    for mod, edges in import_graph().items():
        if mod.startswith(PRE) and "." not in mod[len(PRE):]:
            out[mod[len(PRE):]] = {d[len(PRE):] for d in edges if d.startswith(PRE)}
    return out


def _cycles(graph) -> list:
    """Strongly connected components with more than one module, each sorted."""
    return sorted(sorted(c) for c in strongly_connected(graph) if len(c) > 1)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_in_symbolic():
    assert _cycles(_graph()) == []


@pytest.mark.parametrize("leaf,allowed", [("sympify", set()), ("symbols", {"sympify"})])
def test_the_leaves_stay_leaves(leaf, allowed):
    assert _graph()[leaf] <= allowed


def test_parse_activations_gaussian_import_the_leaves_only():
    g = _graph()
    for m in ("parse", "activations", "gaussian"):
        assert not g[m] & ({"parse", "activations", "gaussian"} - {"parse"} if m == "activations"
                           else {"parse", "activations", "gaussian"}), (m, g[m])


def test_old_names_still_import():
    from attndyn.symbolic import activations, gaussian, parse, symbols, sympify
    assert parse.as_sympy is sympify.as_sympy and parse.reject_strings is sympify.reject_strings
    assert parse.MAX_HERMITE == sympify.MAX_HERMITE
    assert activations.X is symbols.X and activations.Activation is symbols.Activation
    assert activations.hermite_activation is symbols.hermite_activation
    assert gaussian.g_array is symbols.g_array
