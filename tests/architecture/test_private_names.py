"""Private names stay private (issue 24, item 4).

A leading underscore means "this module only": no module of the tree imports a ``_name``
from another module (``from m import _name``, relative imports resolved) or reads one as an
attribute of another module it imported (``m._name``). A name that several modules share
is part of the package's internal API and carries no underscore; what users see is each
module's ``__all__``. Private modules (``_sweep.py``, ``kernels/_cachedir.py``, ...) may be
imported inside the package: the rule is about names, and dunder names are not private.
"""

from __future__ import annotations

import ast

from import_reader import resolve_relative, module_name, source_files


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source, mod, modules, is_package=False):
    """``(imported module, name)`` of every private name of another module of the tree
    (``modules``) that the module ``mod`` with text ``source`` imports or reads as a module
    attribute."""
    pkg = mod if is_package else mod.rpartition(".")[0]
    tree = ast.parse(source)
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            src = resolve_relative(pkg, node.level, node.module) if node.level else node.module
            for a in node.names:
                if f"{src}.{a.name}" in modules:       # a module, not a name
                    aliases[a.asname or a.name] = f"{src}.{a.name}"
                elif _private(a.name) and src.startswith("attndyn") and src != mod:
                    out.append((src, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr)
                and aliases[node.value.id] != mod):
            out.append((aliases[node.value.id], node.attr))
    return out


def test_no_module_uses_another_modules_private_names():
    paths = source_files()
    modules = frozenset(module_name(p) for p in paths)
    assert len(paths) > 100
    bad = [f"{module_name(p)}: {src}.{name}" for p in paths
           for src, name in private_uses(p.read_text(encoding="utf-8"), module_name(p),
                                         modules, p.name == "__init__.py")]
    assert not bad, "private names used across modules:\n" + "\n".join(sorted(bad))


def test_the_reader_sees_private_imports_and_attributes():
    mods = frozenset({"attndyn.numeric.a", "attndyn.numeric.b"})
    src = ("from attndyn.numeric.a import _h\nfrom . import a as m\nx = m._h()\n"
           "from .a import __doc__, g\ny = m.g()\n")
    assert private_uses(src, "attndyn.numeric.b", mods) == [("attndyn.numeric.a", "_h")] * 2
    own = "from attndyn.numeric.b import _h\n"   # its own name: not a crossing
    assert private_uses(own, "attndyn.numeric.b", mods) == []
    assert private_uses("from attndyn.numeric.a import g\n", "attndyn.numeric.b", mods) == []
