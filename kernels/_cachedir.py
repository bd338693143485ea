"""Private per-user cache folders, and numba's cache location (stdlib only).

numba's cache files (``.nbi``/``.nbc``) are pickles, and so loading them runs
code: whoever can write to a cache folder can run code in every process
that reads it. So a cache folder is used only if it is a directory owned by
the current user that neither the group nor others can write to (checked with
:func:`os.stat`); new ones are created with mode ``0o700``. A folder that fails
the check is refused with a :class:`CacheWarning` that names the folder used
instead.

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


def folder_problem(path, *, allow_sticky: bool = False) -> str | None:
    """Why ``path`` cannot hold pickled cache files, or ``None`` if it can.

    It must be an existing, writable directory owned by this user and not
    writable by group or others (with ``allow_sticky``, a sticky world-
    writable folder such as ``/tmp`` is accepted as a *parent*: nobody else
    can rename or delete what we create in it).
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
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


def ensure_private_dir(path) -> str | None:
    """Create ``path`` (mode ``0o700``) if missing; return :func:`folder_problem`."""
    if os.path.lexists(path) and not os.path.isdir(path):
        return "is not a directory"
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        return f"cannot be created ({exc.strerror or exc})"
    return folder_problem(path)


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
        if kind == "tmp":  # the predictable parent in the shared temp folder must be ours too
            why = ensure_private_dir(c.parent)
            if why is not None:
                refused.append((kind, c.parent, why))
                continue
        why = ensure_private_dir(c)
        if why is None:
            _report(refused, c, env_var)
            return c
        refused.append((kind, c, why))
    c = _mkdtemp(name)
    _report(refused, c, env_var)
    return c


def _report(refused, used, env_var) -> None:
    for kind, path, why in refused:
        security = why.startswith(("is owned by", "is writable by"))
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
