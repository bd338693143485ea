"""The static import reader shared by the architecture tests.

Every ``import`` and ``from ... import`` statement of a file, lazy ones inside functions
included, and ``importlib.import_module("...")`` calls (a relative name resolved against
the module's package, as ``import_module(".x", __name__)`` does), resolved through the
package-dir layout of ``pyproject.toml``.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (pyproject.toml package-dir)
LAYOUT = {"attndyn": "attndyn", "symbolic": "attndyn.symbolic", "kernels": "attndyn.kernels",
          "numeric": "attndyn.numeric"}


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([LAYOUT[parts[0]]] + parts[1:])


def resolve_relative(pkg: str, level: int, module) -> str:
    base = pkg.split(".")
    base = base[:len(base) - level + 1]
    return ".".join(base + ([module] if module else []))


def imports_of(path: pathlib.Path, modules=frozenset(), root: pathlib.Path = ROOT) -> set:
    """Absolute names of every module ``path`` imports (relative imports resolved). With
    ``modules`` (the tree's), ``from pkg import sub`` of sub-modules only does not name
    ``pkg`` itself (``pkg``'s ``__init__`` runs, but nothing of it is imported)."""
    mod = module_name(path, root)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            name = resolve_relative(pkg, node.level, node.module) if node.level else node.module
            subs = {f"{name}.{a.name}" for a in node.names}
            if not subs <= modules:
                out.add(name)
            out.update(subs)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            name = node.args[0].value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                name = resolve_relative(pkg, level, name.lstrip(".") or None)
            out.add(name)
    return out


def source_files(folder: str = "", root: pathlib.Path = ROOT) -> list:
    """The ``.py`` files of the tree (of one source folder with ``folder``)."""
    tops = [folder] if folder else list(LAYOUT)
    return [p for top in tops for p in sorted((root / top).rglob("*.py"))
            if "__pycache__" not in p.parts]


def import_graph() -> dict:
    """Module -> the modules of the tree it imports (names resolved to the longest prefix
    that is a module of the tree; ``from pkg import x`` with ``x`` a name of ``pkg``'s
    ``__init__`` is an edge to ``pkg``)."""
    files = {module_name(p): p for p in source_files()}
    graph = {}
    for mod, path in files.items():
        edges = set()
        for name in imports_of(path, frozenset(files)):
            if not name.startswith("attndyn"):
                continue
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != mod:
                edges.add(name)
        graph[mod] = edges
    return graph


def strongly_connected(graph: dict) -> list:
    """Tarjan's components (iterative), each a set of modules."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    out.append(comp)
    return out
