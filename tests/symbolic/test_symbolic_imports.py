"""No import circle inside symbolic/ (issue 24): every module imports only modules that do
not import it back, lazy imports inside functions included."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYMBOLIC = os.path.join(ROOT, "symbolic")


def _graph() -> dict:
    mods = {f[:-3] for f in os.listdir(SYMBOLIC) if f.endswith(".py") and f != "__init__.py"}
    graph = {m: set() for m in mods}
    for m in mods:
        tree = ast.parse(open(os.path.join(SYMBOLIC, m + ".py")).read())
        for node in ast.walk(tree):          # every level: lazy imports count
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    target = (node.module or "").split(".")[0]
                    names = [a.name for a in node.names] if not node.module else [target]
                elif (node.module or "").startswith("attndyn.symbolic."):
                    names = [node.module.split(".")[2]]
                else:
                    continue
                graph[m].update(n for n in names if n in mods and n != m)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("attndyn.symbolic."):
                        n = a.name.split(".")[2]
                        if n in mods and n != m:
                            graph[m].add(n)
    return graph


def _cycles(graph) -> list:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


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
