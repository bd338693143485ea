"""Writes the API reference pages from the package's public faces (imported by docs/conf.py).

Nothing here names a module file: the pages follow ``__all__``.

- ``attndyn``, ``attndyn.numeric``, ``attndyn.numeric.scaling``,
  ``attndyn.numeric.transformer``: every name of the package's ``__all__``;
- ``attndyn.symbolic``, ``attndyn.kernels``, ``attndyn.numeric.core``,
  ``attndyn.numeric.attention``: every module found under the package (walked, so moved
  modules are found) that declares ``__all__``, one page each with the names of its
  ``__all__``.

A class or function is documented once, where it first appears in that order (so
``attndyn.TiedModel`` has the page, and ``attndyn.numeric.TiedModel`` links to it); every
later appearance is listed with a link to it.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import sys
import warnings

# packages whose own __all__ is the public face, in the order their names are documented
FACES = ["attndyn", "attndyn.numeric", "attndyn.numeric.scaling", "attndyn.numeric.transformer"]
# layers documented module by module
LAYERS = {
    "attndyn.symbolic": "Symbolic layer: words, hierarchies, potentials, printers (SymPy).",
    "attndyn.kernels": "Compiled kernels: RHS, integrators, SGD steps, quadrature (numba).",
    "attndyn.numeric.core": "Shared by both papers: results, validation, plots, caches.",
    "attndyn.numeric.attention": "Paper 003: attention-indexed models and their drivers.",
}
# the flat modules of 0.1, kept one release with a DeprecationWarning: not documented
_DEPRECATED = {"attndyn.numeric." + n for n in (
    "models", "smodel", "untied", "flow", "potentials", "quadrature", "results", "compile",
    "progress", "plots", "scaling_plots", "lambertw")}
# modules that failed to import while the pages were written (see report_import_errors)
IMPORT_ERRORS: list[str] = []


def public_names(modname: str) -> list[str]:
    """``__all__`` of a module, without dunder names such as ``__version__``."""
    mod = importlib.import_module(modname)
    return [n for n in getattr(mod, "__all__", []) if not n.startswith("__")]


def layer_modules(pkgname: str) -> list[str]:
    """Modules under ``pkgname`` (recursively) that declare ``__all__``, sorted."""
    pkg = importlib.import_module(pkgname)
    out = []
    for info in pkgutil.walk_packages(pkg.__path__, prefix=pkgname + ".",
                                      onerror=lambda name: IMPORT_ERRORS.append(name)):
        name = info.name
        if name in _DEPRECATED or any(part.startswith("_") for part in name.split(".")):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                mod = importlib.import_module(name)
        except Exception as exc:  # reported as a build warning (an error under -W)
            IMPORT_ERRORS.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if getattr(mod, "__all__", None):
            out.append(name)
    return sorted(out)


def _title(text: str, char: str = "=") -> str:
    return f"{text}\n{char * len(text)}\n"


class _Pages:
    """Collects the pages; remembers where each class or function is documented."""

    def __init__(self):
        self.pages: dict[str, str] = {}
        self.home: dict[int, str] = {}  # id(object) -> the dotted name it is documented under

    def _split(self, modname: str, names: list[str]):
        """Names documented here, and (name, dotted name of the page) of those documented
        earlier."""
        mod = importlib.import_module(modname)
        new, seen = [], []
        for n in names:
            try:
                obj = getattr(mod, n)
            except Exception as exc:  # reported as a build warning (an error under -W)
                IMPORT_ERRORS.append(f"{modname}.{n}: {type(exc).__name__}: {exc}")
                continue
            key = id(obj) if (inspect.isclass(obj) or inspect.isroutine(obj)) else None
            if key is not None and key in self.home:
                seen.append((n, self.home[key]))
            else:
                if key is not None:
                    self.home[key] = f"{modname}.{n}"
                new.append(n)
        return new, seen

    @staticmethod
    def _seen_block(seen) -> list[str]:
        if not seen:
            return []
        lines = ["Also exported here, documented where they first appear:", ""]
        lines += [f"- ``{n}``: :py:obj:`{target}`" for n, target in seen]
        return lines + [""]

    @staticmethod
    def _defining_module(package: str, name: str) -> str | None:
        """The module under ``package`` that defines the data object ``name`` (and so holds
        its ``#:`` comment): one whose ``__all__`` has it, bound to the same object."""
        obj = getattr(importlib.import_module(package), name)
        for modname in sorted(sys.modules):
            mod = sys.modules[modname]
            if (modname.startswith(package + ".") and name in getattr(mod, "__all__", ())
                    and getattr(mod, name, None) is obj):
                return modname
        return None

    def face(self, i: int, modname: str) -> None:
        new, seen = self._split(modname, public_names(modname))
        lines = [_title(f"``{modname}``"), f".. automodule:: {modname}", "   :no-members:",
                 "   :no-index:", "", f".. currentmodule:: {modname}", ""]
        if new:
            entries = []
            for n in new:
                obj = getattr(importlib.import_module(modname), n)
                home = None
                if not (inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)):
                    home = self._defining_module(modname, n)  # a constant: its comment is there
                if home and home.startswith(modname + "."):
                    home = home[len(modname) + 1:]  # relative to the current module
                entries.append(f"~{home}.{n}" if home else n)
            lines += [".. autosummary::", "   :toctree: .", "   :nosignatures:", ""]
            lines += [f"   {e}" for e in entries] + [""]
        lines += self._seen_block(seen)
        self.pages[f"face{i}-{modname}"] = "\n".join(lines)

    def module(self, modname: str) -> None:
        new, seen = self._split(modname, public_names(modname))
        lines = [_title(f"``{modname}``"), f".. automodule:: {modname}"]
        lines += [f"   :members: {', '.join(new)}" if new else "   :no-members:", ""]
        lines += self._seen_block(seen)
        self.pages[f"mod-{modname}"] = "\n".join(lines)

    def layer(self, i: int, pkgname: str, blurb: str) -> None:
        mods = layer_modules(pkgname)
        for m in mods:
            self.module(m)
        lines = [_title(f"``{pkgname}``"), blurb, "", ".. toctree::", "   :maxdepth: 1", ""]
        lines += [f"   mod-{m}" for m in mods]
        self.pages[f"layer{i}-{pkgname}"] = "\n".join(lines) + "\n"


def write_api_pages(folder: pathlib.Path) -> list[str]:
    """Write one page per face, per layer and per layer module into ``folder``; return
    their names. A page is rewritten only when its text changes; every other file there
    (autosummary's stubs of the previous build, pages of modules that no longer exist) is
    removed, so a name that left ``__all__`` leaves the reference."""
    folder.mkdir(parents=True, exist_ok=True)
    p = _Pages()
    for i, face in enumerate(FACES):
        p.face(i, face)
    for i, (pkg, blurb) in enumerate(LAYERS.items()):
        p.layer(i, pkg, blurb)
    # anything else here is a stub of a name that may be gone or documented elsewhere by
    # now (an earlier __all__): autosummary writes the current ones again
    for old in folder.glob("*.rst"):
        if old.stem not in p.pages:
            old.unlink()
    for name, text in p.pages.items():
        path = folder / f"{name}.rst"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    return sorted(p.pages)


def report_import_errors(app) -> None:
    """Sphinx ``builder-inited`` hook: a module that does not import is a build warning."""
    from sphinx.util import logging

    for err in IMPORT_ERRORS:
        logging.getLogger(__name__).warning("API reference: not importable: %s", err)
