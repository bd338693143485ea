"""Compile generated numba source through real files keyed by content hash.

Generated source goes to a private cache folder as ``gen_<sha256 prefix>.py``;
numba's ``cache=True`` then stores the machine code beside it (in
``__pycache__``, or under ``$NUMBA_CACHE_DIR``), so a second process loads
instead of compiling.

The folder is ``$ATTNDYN_CACHE_DIR`` if set and usable, else
``~/.cache/attndyn/generated``, else ``<tempdir>/attndyn-<uid>/generated``,
else a fresh temporary folder. numba's cache files are pickles (loading one
runs code), so every folder, and numba's folder for the generated files, must
be owned by this user and not writable by group or others; new ones are made
with mode ``0o700``. A folder that fails this check, or an unusable
``ATTNDYN_CACHE_DIR``, is refused with a
:class:`~attndyn.kernels._cachedir.CacheWarning` naming the folder used
instead; if numba's folder is unsafe the function is compiled without caching.

A corrupted cache entry (a truncated or overwritten ``.nbi``/``.nbc``) is
deleted and the function recompiled, with a warning. A function that fails to
compile raises :class:`CompileError` and leaves nothing behind in
``sys.modules``, so a retry fails the same clear way.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import sys
import traceback
import types
import warnings

from attndyn.kernels._cachedir import (CacheWarning, drop_stale_dependent_cache, folder_problem,
                                       numba_cache_root, numba_root_problem, private_dir,
                                       warn_once)
__all__ = ["cache_dir", "load_generated", "CompileError", "numba_cache_folder"]


def source_hash(text: str) -> str:
    """The content hash naming a generated file: the same as
    :func:`attndyn.symbolic.codegen.source_hash` (kept here so that loading a cached
    function does not import SymPy through the code generator; a test checks both agree)."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


_loaded: dict = {}
_stamped: set = set()


class CompileError(RuntimeError):
    """numba failed to compile a generated function (a bug in the code
    generator or an expression numba cannot type).

        >>> CompileError.__mro__[1].__name__
        'RuntimeError'
    """


def cache_dir() -> pathlib.Path | None:
    """The private folder for generated sources (``None``: no folder at all;
    then generated code is compiled in memory, without caching).

        >>> d = cache_dir()
        >>> d is None or d.is_dir()
        True
    """
    return private_dir("generated", "ATTNDYN_CACHE_DIR")


def _numba_subpath(py_file: str) -> str:
    # numba's _CacheLocator.get_suitable_cache_subpath: parent folder name + sha1 of its path
    try:
        from numba.core.caching import _CacheLocator
        return _CacheLocator.get_suitable_cache_subpath(py_file)
    except (ImportError, AttributeError):  # pragma: no cover - numba layout changed
        sub = os.path.dirname(os.path.abspath(py_file))
        return "_".join([os.path.split(sub)[-1], hashlib.sha1(sub.encode()).hexdigest()])


def numba_cache_folder(py_file) -> tuple[pathlib.Path, str | None]:
    """Where numba caches the functions of ``py_file``, and why that folder
    is unsafe (``None`` if it is safe); the folder is created (``0o700``).

        >>> import attndyn.kernels.rhs as rhs
        >>> folder, unsafe = numba_cache_folder(rhs.__file__)
        >>> folder.is_dir(), unsafe is None or isinstance(unsafe, str)
        (True, True)
    """
    py_file = str(py_file)
    root = numba_cache_root()
    if root:  # UserProvidedCacheLocator
        folder = pathlib.Path(root) / _numba_subpath(py_file)
        why = numba_root_problem(root)
        if why is not None:
            return folder, f"NUMBA_CACHE_DIR={root} {why}"
    else:  # InTreeCacheLocator
        folder = pathlib.Path(py_file).parent / "__pycache__"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        return folder, f"{folder} cannot be created ({exc.strerror})"
    why = folder_problem(folder)
    return folder, None if why is None else f"{folder} {why}"


def _cache_files(folder: pathlib.Path, stem: str) -> list:
    try:
        return sorted(p for p in folder.glob(f"{stem}.*") if p.suffix in (".nbi", ".nbc"))
    except OSError:
        return []


def _from_cache_loader(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while numba read its cache files."""
    tb = traceback.extract_tb(exc.__traceback__)
    return any(f.filename.replace(os.sep, "/").endswith("numba/core/caching.py") for f in tb)


def _exec_file(modname: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(modname, None)  # never leave a half-loaded module behind
        raise
    return mod


def _exec_uncached(modname: str, source: str, filename: str):
    """Compile ``source`` in memory with numba's caching off (``source`` is
    our own generated code, the same text the cached path imports from file)."""
    mod = types.ModuleType(modname)
    mod.__file__ = filename
    sys.modules[modname] = mod
    try:
        exec(compile(source.replace("cache=True", "cache=False"), filename, "exec"),
             mod.__dict__)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return mod


def _compile_error(funcname: str, where: str, exc: BaseException) -> CompileError:
    text = " ".join(str(exc).split())
    if len(text) > 400:
        text = text[:400] + " ..."
    return CompileError(f"numba could not compile the generated function {funcname!r} "
                        f"({where}): {type(exc).__name__}: {text}")


def load_generated(source: str, funcname: str):
    """Write ``source`` to its hash-named file (once) and return ``funcname``.

    Raises :class:`CompileError` if numba cannot compile it.

        >>> import numpy as np, sympy as sp
        >>> from attndyn.symbolic.codegen import njit_source
        >>> x, a = sp.symbols("x a")
        >>> f = load_generated(njit_source("demo_square", [x], [a], [a * x ** 2]), "demo_square")
        >>> out = np.zeros(1)
        >>> f(np.array([3.0]), np.array([2.0]), out)
        >>> out
        array([18.])
    """
    h = source_hash(source)
    key = (h, funcname)
    if key in _loaded:
        return _loaded[key]
    modname = f"attndyn_generated_{h}"
    mod = sys.modules.get(modname)
    if mod is None or not hasattr(mod, funcname):
        sys.modules.pop(modname, None)
        mod = _load_module(source, h, modname, funcname)
    try:
        fn = getattr(mod, funcname)
    except AttributeError:
        sys.modules.pop(modname, None)
        raise CompileError(f"the generated module gen_{h}.py defines no function "
                           f"{funcname!r}") from None
    _loaded[key] = fn
    return fn


def _load_module(source: str, h: str, modname: str, funcname: str):
    folder = cache_dir()
    if folder is None:
        try:
            return _exec_uncached(modname, source, f"<attndyn generated gen_{h}>")
        except Exception as exc:
            raise _compile_error(funcname, f"gen_{h}, uncached", exc) from exc
    if str(folder) not in _stamped:
        # generated kernels call the package's kernels: their cache goes when those change
        drop_stale_dependent_cache(folder, own_sources=False)
        _stamped.add(str(folder))
    path = folder / f"gen_{h}.py"
    if not path.exists() or path.read_text() != source:
        tmp = folder / f".gen_{h}.{os.getpid()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)
    ncache, why = numba_cache_folder(path)
    if why is not None:
        warn_once(f"numba's cache folder for generated code: {why}; compiling without "
                  "caching", stacklevel=4)
        try:
            return _exec_uncached(modname, source, str(path))
        except Exception as exc:
            raise _compile_error(funcname, str(path), exc) from exc
    try:
        return _exec_file(modname, path)
    except Exception as exc:
        stale = _cache_files(ncache, path.stem)
        if not (stale and _from_cache_loader(exc)):
            raise _compile_error(funcname, str(path), exc) from exc
        # a corrupted cache entry: delete it and compile afresh
        for p in stale:
            try:
                p.unlink()
            except OSError:
                pass
        warnings.warn(f"corrupted numba cache for {path.name} in {ncache} "
                      f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); deleted "
                      f"{len(stale)} file(s) and recompiling", CacheWarning, stacklevel=4)
    try:
        return _exec_file(modname, path)
    except Exception as exc:
        raise _compile_error(funcname, str(path), exc) from exc
