"""Compile generated numba source through real files keyed by content hash.

Generated source goes to ``$ATTNDYN_CACHE_DIR`` (default
``~/.cache/attndyn/generated``, or a temporary folder if that is not
writable) as ``gen_<sha256 prefix>.py``; numba's ``cache=True`` then stores
the machine code beside it, so a second process loads instead of compiling.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import tempfile

from attndyn.symbolic.codegen import source_hash

__all__ = ["cache_dir", "load_generated"]

_loaded: dict = {}


def cache_dir() -> pathlib.Path:
    env = os.environ.get("ATTNDYN_CACHE_DIR")
    candidates = [pathlib.Path(env)] if env else []
    candidates.append(pathlib.Path.home() / ".cache" / "attndyn" / "generated")
    candidates.append(pathlib.Path(tempfile.gettempdir()) / f"attndyn-{os.getuid()}")
    for c in candidates:
        try:
            c.mkdir(parents=True, exist_ok=True)
            probe = c / ".write-test"
            probe.write_text("ok")
            probe.unlink()
            return c
        except OSError:
            continue
    raise OSError("no writable cache folder for generated code; set ATTNDYN_CACHE_DIR")


def load_generated(source: str, funcname: str):
    """Write ``source`` to its hash-named file (once) and return ``funcname``."""
    h = source_hash(source)
    key = (h, funcname)
    if key in _loaded:
        return _loaded[key]
    folder = cache_dir()
    path = folder / f"gen_{h}.py"
    if not path.exists() or path.read_text() != source:
        tmp = folder / f".gen_{h}.{os.getpid()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)
    modname = f"attndyn_generated_{h}"
    mod = sys.modules.get(modname)
    if mod is None:
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
    fn = getattr(mod, funcname)
    _loaded[key] = fn
    return fn
