"""Private per-user cache folders, and numba's cache location (stdlib only).

numba's cache files (``.nbi``/``.nbc``) are pickles, and so loading them runs
code: whoever can write to a cache folder can run code in every process
that reads it. So a cache folder is used only if it is a directory owned by
the current user that neither the group nor others can write to (checked with
:func:`os.stat`); new ones are created with mode ``0o700``. A folder that fails
the check is refused with a :class:`CacheWarning` that names the folder used
instead. In the shared temporary folder (3. below) nothing is followed: each level is
checked with :func:`os.lstat`, and a symbolic link planted there is refused.

Folders, in order of preference, for a cache called ``name``:

1. the folder named by an environment variable (``ATTNDYN_CACHE_DIR`` for
   the generated sources), if set;
2. ``~/.cache/attndyn/<name>``;
3. ``<tempdir>/attndyn-<uid>/<name>``, both levels private;
4. a fresh ``tempfile.mkdtemp()`` folder (private by construction, removed at
   exit; nothing is cached across processes then).

:func:`numba_locator_fallback` runs when :mod:`attndyn.kernels` is imported:
numba's ``cache=True`` raises "no locator available" at decoration time when
neither the package's ``__pycache__`` nor numba's user-wide cache folder is
writable (a read-only install with a read-only home), and then it points
``NUMBA_CACHE_DIR`` to a private folder instead.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import stat
import sys
import tempfile
import warnings

__all__ = ["CacheWarning", "folder_problem", "ensure_private_dir", "private_dir",
           "install_cache_guard",
           "kernels_source_hash", "numba_cache_dirs", "drop_stale_numba_cache",
           "kernels_digest", "drop_stale_dependent_cache",
           "numba_cache_root", "numba_root_problem", "numba_locator_fallback"]


class CacheWarning(UserWarning):
    """A cache folder was refused or is unusable; the message names the folder used."""


_WARNED: set = set()
_MKDTEMP: dict = {}


def warn_once(msg: str, stacklevel: int = 3) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, CacheWarning, stacklevel=stacklevel)


def _can_write(path) -> bool:
    # the same test numba's locators make (os.access is wrong for root on
    # read-only mounts in some containers)
    try:
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def folder_problem(path, *, allow_sticky: bool = False,
                   follow_symlinks: bool = True) -> str | None:
    """Why ``path`` cannot hold pickled cache files, or ``None`` if it can.

    It must be an existing, writable directory owned by this user and not
    writable by group or others (with ``allow_sticky``, a sticky world-
    writable folder such as ``/tmp`` is accepted as a *parent*: nobody else
    can rename or delete what we create in it). With ``follow_symlinks=False``
    (folders in a shared temporary folder) the path itself is checked with
    :func:`os.lstat` and a symbolic link is refused: whoever planted it could
    repoint it after the check.
    """
    try:
        st = os.stat(path) if follow_symlinks else os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        owner = f" owned by uid {st.st_uid}" if hasattr(os, "getuid") else ""
        return (f"is a symbolic link{owner} (refused in a shared folder: it could be "
                "repointed after the check)")
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if hasattr(os, "getuid"):  # POSIX: owner and mode
        if st.st_uid != os.getuid():
            return f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
        if st.st_mode & 0o022 and not (allow_sticky and st.st_mode & stat.S_ISVTX):
            who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002))
                               if st.st_mode & bit)
            return (f"is writable by {who} (mode 0{stat.S_IMODE(st.st_mode):o}; "
                    f"`chmod go-w` it to use it)")
    if not _can_write(path):
        return "is not writable"
    return None


def ensure_private_dir(path, *, follow_symlinks: bool = True) -> str | None:
    """Create ``path`` (mode ``0o700``) if missing; return :func:`folder_problem`
    (with ``follow_symlinks=False``, a symbolic link at ``path`` is refused, never
    followed, also when creating it)."""
    if not follow_symlinks:
        why = _lstat_problem(path)
        if why is not None:
            return why
    elif os.path.lexists(path) and not os.path.isdir(path):
        return "is not a directory"
    try:
        if follow_symlinks:
            os.makedirs(path, mode=0o700, exist_ok=True)
        else:
            os.mkdir(path, 0o700)  # the parent was checked; mkdir never follows a link
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot be created ({exc.strerror or exc})"
    return folder_problem(path, follow_symlinks=follow_symlinks)


def _lstat_problem(path) -> str | None:
    """A symbolic link or a non-directory at ``path`` (checked with lstat), else ``None``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        owner = f" owned by uid {st.st_uid}" if hasattr(os, "getuid") else ""
        return (f"is a symbolic link{owner} (refused in a shared folder: it could be "
                "repointed after the check)")
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    return None


def _mkdtemp(name: str):
    if name not in _MKDTEMP:
        try:
            d = tempfile.mkdtemp(prefix=f"attndyn-{name}-")
        except OSError:
            _MKDTEMP[name] = None
        else:
            atexit.register(shutil.rmtree, d, True)
            _MKDTEMP[name] = pathlib.Path(d)
    return _MKDTEMP[name]


def _uid() -> str:
    return str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")


def private_dir(name: str, env_var: str | None = None) -> pathlib.Path | None:
    """A private cache folder for ``name`` (see the module docstring), or
    ``None`` when not even a temporary folder can be made (then do not cache).

    Warns (once per folder and reason) when the folder named by ``env_var``
    is unusable, and when a folder is refused because someone else owns it
    or can write to it; a home that is merely read-only falls through to the
    next folder silently.
    """
    env = os.environ.get(env_var) if env_var else None
    refused = []
    candidates = []
    if env:
        candidates.append(("env", pathlib.Path(env).expanduser()))
    try:
        candidates.append(("home", pathlib.Path.home() / ".cache" / "attndyn" / name))
    except RuntimeError:  # no home directory
        pass
    candidates.append(("tmp", pathlib.Path(tempfile.gettempdir()) / f"attndyn-{_uid()}" / name))
    for kind, c in candidates:
        shared = kind == "tmp"
        if shared:  # the predictable parent in the shared temp folder must be ours too
            why = ensure_private_dir(c.parent, follow_symlinks=False)
            if why is not None:
                refused.append((kind, c.parent, why))
                continue
        why = ensure_private_dir(c, follow_symlinks=not shared)
        if why is None:
            _report(refused, c, env_var)
            return c
        refused.append((kind, c, why))
    c = _mkdtemp(name)
    _report(refused, c, env_var)
    return c


def _report(refused, used, env_var) -> None:
    for kind, path, why in refused:
        security = why.startswith(("is owned by", "is writable by", "is a symbolic link"))
        if kind == "env" or security:
            where = f"{env_var}={path}" if kind == "env" else str(path)
            then = (f"using {used}" if used is not None
                    else "no private folder could be made: compiled code is not cached")
            warn_once(f"attndyn cache folder {where} {why}; {then}", stacklevel=4)


# -- numba --------------------------------------------------------------------


def numba_cache_root() -> str:
    """numba's ``NUMBA_CACHE_DIR`` as numba sees it ('' when unset)."""
    cfg = sys.modules.get("numba.core.config")
    if cfg is not None:
        return getattr(cfg, "CACHE_DIR", "") or ""
    return os.environ.get("NUMBA_CACHE_DIR", "")


def numba_root_problem(root) -> str | None:
    """Why a ``NUMBA_CACHE_DIR`` is unsafe, or ``None``. It may not exist yet
    (numba creates it), but then its nearest existing parent must be safe."""
    p = pathlib.Path(root)
    while not p.exists() and p.parent != p:
        p = p.parent
    return folder_problem(p, allow_sticky=True)


def set_numba_cache_root(folder) -> None:
    """Point numba's cache at ``folder``, before or after numba is imported."""
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    cfg = sys.modules.get("numba.core.config")
    if cfg is not None:
        cfg.CACHE_DIR = str(folder)  # the locators read this attribute


def _user_wide_numba_dir() -> str:
    # numba's UserWideCacheLocator folder (its vendored appdirs)
    try:
        from numba.misc.appdirs import AppDirs
        return AppDirs(appname="numba", appauthor=False).user_cache_dir
    except Exception:  # pragma: no cover - numba layout changed
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        return os.path.join(base, "numba")


def _locator_available(pkg_dir) -> bool:
    """Whether numba finds a cache folder for a module in ``pkg_dir`` without
    ``NUMBA_CACHE_DIR``: in-tree ``__pycache__`` or numba's user-wide folder."""
    for path in (os.path.join(pkg_dir, "__pycache__"), None):
        if path is None:
            path = _user_wide_numba_dir()
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            continue
        if _can_write(path):
            return True
    return False


def numba_locator_fallback(pkg_dir) -> pathlib.Path | None:
    """Make ``cache=True`` work for the modules in ``pkg_dir``.

    * ``NUMBA_CACHE_DIR`` set and safe: nothing to do.
    * ``NUMBA_CACHE_DIR`` set but writable by others or owned by someone
      else: warn and replace it by a private folder.
    * unset, and numba would find no writable folder (read-only install and
      home): set it to a private folder, with a warning.

    Returns the folder it set, or ``None`` when it changed nothing.
    """
    root = numba_cache_root()
    if root:
        why = numba_root_problem(root)
        if why is None:
            return None
        reason = f"NUMBA_CACHE_DIR={root} {why}"
    else:
        if _locator_available(pkg_dir):
            return None
        reason = (f"numba cannot cache next to {pkg_dir} nor in its user-wide folder "
                  "(read-only install and home)")
    folder = private_dir("numba")
    if folder is None:
        warn_once(f"{reason}, and no private folder could be made: numba's cache=True "
                  "will fail", stacklevel=3)
        return None
    set_numba_cache_root(folder)
    warn_once(f"{reason}; numba caches in {folder} instead", stacklevel=3)
    return folder


# -- a self-repairing numba cache for the package's own kernels ---------------------
#
# numba reads its cache files (pickles) when a function is first compiled. A truncated or
# overwritten index or data file of one of the package's kernels made every later run fail
# in numba's unpickler, and a full (or read-only) cache folder made every compilation fail
# in numba's writer, both with messages that do not name the cache. The guard below wraps
# numba's Cache.load_overload and Cache.save_overload for the functions defined in files
# under the package's folders only (every other numba user is left alone):
#
# * a failed load deletes that function's index and data files, warns with a CacheWarning
#   naming them, and returns "not cached": numba compiles afresh and writes a new entry;
# * a failed save (OSError: ENOSPC, EROFS, EACCES, EDQUOT) moves numba's cache to a private
#   folder (private_dir("numba"), else a fresh temporary one), warns naming both folders,
#   and saves there; if that fails too, the function stays compiled in memory only.

_GUARD_ROOTS: list = []


def install_cache_guard(root) -> None:
    """Make numba's cache self-repairing for the functions in files under ``root`` (see
    the comment above). Installed now if numba is loaded, else when it is imported."""
    root = os.path.abspath(str(root))
    if root not in _GUARD_ROOTS:
        _GUARD_ROOTS.append(root)
    caching = sys.modules.get("numba.core.caching")
    if caching is not None:
        _patch_numba_cache(caching)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


class _PatchOnImport:
    """A meta-path finder that patches ``numba.core.caching`` right after it is executed
    (importing numba here would cost every light import of the package ~1 s)."""

    def find_spec(self, name, path=None, target=None):
        if name != "numba.core.caching":
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch_numba_cache(module)

    def __getattr__(self, name):  # get_source, get_filename, ... of the real loader
        return getattr(self.inner, name)


def _guarded(cache) -> bool:
    py_file = getattr(cache, "_py_file", None) or getattr(
        getattr(getattr(cache, "_impl", None), "locator", None), "_py_file", None)
    if not py_file:
        return False
    py_file = os.path.abspath(py_file)
    return any(py_file.startswith(r + os.sep) for r in _GUARD_ROOTS)


def _entry_files(cache) -> list:
    cf = cache._cache_file
    folder = os.path.dirname(cf._index_path)
    stem = cf._index_name[:-len(".nbi")]
    out = [cf._index_path]
    try:
        out += [os.path.join(folder, n) for n in os.listdir(folder)
                if n.startswith(stem + ".") and n.endswith(".nbc")]
    except OSError:
        pass
    return out


def _patch_numba_cache(caching) -> None:
    Cache = caching.Cache
    if getattr(Cache, "_attndyn_guard", False):
        return
    load, save = Cache.load_overload, Cache.save_overload

    def load_overload(self, sig, target_context):
        try:
            return load(self, sig, target_context)
        except Exception as exc:  # noqa: BLE001 - whatever a damaged pickle raises
            if not _guarded(self):
                raise
            gone = 0
            for p in _entry_files(self):
                try:
                    os.unlink(p)
                    gone += 1
                except OSError:
                    pass
            text = " ".join(str(exc).split())[:120]
            warnings.warn(f"corrupted numba cache for {self._name} in {self._cache_path} "
                          f"({type(exc).__name__}: {text}); deleted {gone} file(s) and "
                          "recompiling", CacheWarning, stacklevel=2)
            return None

    def save_overload(self, sig, data):
        try:
            return save(self, sig, data)
        except OSError as exc:
            if not _guarded(self):
                raise
            failed = self._cache_path
            folder = _fallback_numba_root(failed)
            why = exc.strerror or type(exc).__name__
            if folder is None:
                warn_once(f"numba cannot write its cache in {failed} ({why}), and no private "
                          "folder could be made: compiled code is not cached", stacklevel=3)
                return None
            set_numba_cache_root(folder)
            warn_once(f"numba cannot write its cache in {failed} ({why}); caching in {folder} "
                      "instead", stacklevel=3)
            try:
                Cache.__init__(self, self._py_func)   # re-locate under the new root
                return save(self, sig, data)
            except Exception as exc2:  # noqa: BLE001 - not cached, but compiled
                warn_once(f"numba cannot write its cache in {folder} either "
                          f"({type(exc2).__name__}); compiled code is not cached", stacklevel=3)
                self.disable()
                return None

    Cache.load_overload = load_overload
    Cache.save_overload = save_overload
    Cache._attndyn_guard = True


def _fallback_numba_root(failed) -> pathlib.Path | None:
    """A private numba cache root that does not hold ``failed``."""
    failed = os.path.abspath(str(failed))
    for folder in (private_dir("numba"), _mkdtemp("numba-fallback")):
        if folder is None:
            continue
        f = os.path.abspath(str(folder))
        if not (failed == f or failed.startswith(f + os.sep)):
            return pathlib.Path(f)
    return None


# -- numba's cache across modules -------------------------------------------------
#
# numba stamps a cached function with the hash of its *own* source file. A kernel that
# calls (and so inlines) a jitted function of another module keeps its cached machine
# code when only the callee's file changes: stale code, silently. The kernels import
# each other, so the package's cache is treated as one unit: a stamp file holds the
# hash of every kernels source, and a different stamp drops the package's cache files.

_STAMP = "attndyn-kernels.sources"


def kernels_source_hash(pkg_dir) -> str:
    """SHA-256 over the names and contents of every ``*.py`` file in ``pkg_dir``."""
    import hashlib
    h = hashlib.sha256()
    for p in sorted(pathlib.Path(pkg_dir).glob("*.py")):
        h.update(p.name.encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


_KERNELS_DIGEST: list = []


def kernels_digest() -> str:
    """:func:`kernels_source_hash` of this package's kernels, once per process."""
    if not _KERNELS_DIGEST:
        _KERNELS_DIGEST.append(kernels_source_hash(os.path.dirname(os.path.abspath(__file__))))
    return _KERNELS_DIGEST[0]


def drop_stale_dependent_cache(folder, own_sources: bool = True) -> list:
    """:func:`drop_stale_numba_cache` for a folder of modules whose cached kernels call
    (and so inline) the package's kernels: stamped by the kernels' sources and, with
    ``own_sources``, the folder's own (modules that call each other). Generated sources
    take ``own_sources=False``: each file is its own unit, which numba already stamps."""
    import hashlib
    own = kernels_source_hash(folder) if own_sources else ""
    digest = hashlib.sha256((kernels_digest() + own).encode()).hexdigest()
    return drop_stale_numba_cache(folder, digest)


def numba_cache_dirs(pkg_dir, user_wide: bool = True) -> list:
    """The folders where numba may keep cache files of modules in ``pkg_dir``: the
    in-tree ``__pycache__``, and the package's subfolder of ``NUMBA_CACHE_DIR`` and (with
    ``user_wide``) of numba's user-wide folder (numba names it after the folder and a
    SHA-1 of its path)."""
    import hashlib
    sub = os.path.dirname(os.path.abspath(os.path.join(pkg_dir, "x.py")))
    name = "_".join([os.path.split(sub)[-1], hashlib.sha1(sub.encode()).hexdigest()])
    out = [os.path.join(pkg_dir, "__pycache__")]
    root = numba_cache_root()
    if root:
        out.append(os.path.join(root, name))
    if user_wide:
        out.append(os.path.join(_user_wide_numba_dir(), name))
    return out


def drop_stale_numba_cache(pkg_dir, digest: str | None = None) -> list:
    """Remove numba's cache files (``*.nbi``, ``*.nbc``) of the modules in ``pkg_dir``
    from every folder whose stamp is not ``digest`` (the current source hash), then
    stamp it. Returns the folders that were cleared. Only files of this package are
    touched (in-tree ``__pycache__`` holds no other package's numba files, and the other
    folders are this package's own subfolders); errors (a read-only folder, a file
    removed by another process at the same time) are ignored: numba then recompiles or
    fails as it would have."""
    digest = kernels_source_hash(pkg_dir) if digest is None else digest
    cleared = []
    folders = numba_cache_dirs(pkg_dir, user_wide=False)
    in_tree_ok = False
    for k, folder in enumerate(folders):
        ok, was_cleared = _stamp_folder(folder, digest)
        in_tree_ok = in_tree_ok or (k == 0 and ok)
        if was_cleared:
            cleared.append(folder)
    if not in_tree_ok:
        # numba falls back to its user-wide folder only when the in-tree one is not
        # usable (asking numba for that folder imports numba: not on the usual path)
        folder = numba_cache_dirs(pkg_dir)[-1]
        if _stamp_folder(folder, digest)[1]:
            cleared.append(folder)
    return cleared


def _stamp_folder(folder, digest) -> tuple:
    """``(usable, cleared)``: whether ``folder`` is a writable cache folder stamped with
    ``digest`` now, and whether its numba files were dropped (or it was made) for that."""
    stamp = os.path.join(folder, _STAMP)
    if not os.path.isdir(folder):
        # stamp the folder numba is about to fill, so that its first files are not taken
        # for stale ones by the next process
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            return False, False
    if not _can_write(folder):
        return False, False
    try:
        with open(stamp, encoding="ascii") as f:
            if f.read().strip() == digest:
                return True, False
    except (OSError, UnicodeDecodeError):
        pass
    try:
        names = os.listdir(folder)
    except OSError:
        return False, False
    for n in names:
        if n.endswith((".nbi", ".nbc")):
            try:
                os.unlink(os.path.join(folder, n))
            except OSError:
                pass
    try:
        tmp = f"{stamp}.{os.getpid()}"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(digest + "\n")
        os.replace(tmp, stamp)
    except OSError:
        return False, True
    return True, True
