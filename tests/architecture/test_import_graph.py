"""No import circles anywhere, and no upward imports inside ``numeric/attention/`` (issue 24).

The static import graph of the whole tree (``attndyn/``, ``symbolic/``, ``kernels/``,
``numeric/``): every ``import`` and ``from ... import`` statement, lazy ones inside
functions included, and ``importlib.import_module("...")`` calls, resolved through the
package-dir layout of ``pyproject.toml`` (as ``test_layering.py`` reads them). An import
names a module and, for ``from m import x``, also ``m.x`` when that is a module. The
strongly connected components of that graph must all be single modules, except the
components listed in :data:`ALLOWED`.

Inside ``numeric/attention/`` the layers are (lowest first): the shared pieces (protocol,
ODE driver, correction maths, assumptions, drivers through the protocol, numeric
potentials), then one folder per parameterisation, then ``theorems/`` and ``figures/``. A
module imports only its own layer or lower ones; a parameterisation folder never imports
another one; inside a folder only ``examples.py`` imports the folder's ``model.py``
(the model is the top floor; the folder's ``__init__`` exports it lazily) and no module
imports its own package's ``__init__``.
"""

from import_reader import import_graph, strongly_connected

ATT = "attndyn.numeric.attention"

#: strongly connected components allowed for now, each in a folder another piece of work
#: is rewriting at the time of writing; every other component must be a single module
ALLOWED: list = []

#: upward imports allowed for now, (importer, imported) with the reason
ALLOWED_UPWARD: set = set()


def test_no_import_circles():
    graph = import_graph()
    assert len(graph) > 100
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    bad = [sorted(c) for c in circles if c not in ALLOWED]
    assert not bad, "import circles:\n" + "\n".join(" <-> ".join(c) for c in bad)


def test_the_circle_finder_finds_circles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    comps = strongly_connected(g)
    assert {"a", "b", "c"} in comps and {"d"} in comps and {"e"} in comps


# -- layers inside numeric/attention ----------------------------------------------------------

FOLDERS = ("tied", "untied", "direct")
TOP = ("theorems", "figures")


def layer(mod: str):
    """(rank, folder) of a module of numeric/attention: 0 shared, 1 a parameterisation
    folder, 2 theorems and figures."""
    rest = mod[len(ATT) + 1:].split(".") if mod != ATT else [""]
    if rest[0] in FOLDERS:
        return 1, rest[0]
    if rest[0] in TOP:
        return 2, rest[0]
    return 0, None


def upward_imports() -> list:
    graph = import_graph()
    out = []
    for mod, edges in graph.items():
        if not mod.startswith(ATT + ".") and mod != ATT:
            continue
        r, folder = layer(mod)
        for dep in edges:
            if not dep.startswith(ATT):
                continue
            if (mod, dep) in ALLOWED_UPWARD:
                continue
            rd, fd = layer(dep)
            why = None
            if rd > r:
                why = "a higher layer"
            elif rd == r == 1 and fd != folder:
                why = "another parameterisation"
            elif rd == r == 2 and fd != folder:
                why = "the other top-level folder"
            elif mod.startswith(dep + ".") or dep == ATT and mod != ATT:
                why = "its own package's __init__"
            elif folder in FOLDERS and dep == f"{ATT}.{folder}.model" \
                    and mod not in (f"{ATT}.{folder}.examples", f"{ATT}.{folder}"):
                why = "the model (the top floor of its folder)"
            if why:
                out.append(f"{mod} imports {dep} ({why})")
    return sorted(out)


def test_no_upward_imports_in_attention():
    bad = upward_imports()
    assert not bad, "\n".join(bad)


def test_layers_of_the_attention_package():
    assert layer(f"{ATT}.base") == (0, None)
    assert layer(f"{ATT}.tied.noise_flow") == (1, "tied")
    assert layer(f"{ATT}.figures.fig4") == (2, "figures")
