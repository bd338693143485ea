"""Hardened file primitives: atomic writes and bounded reads of untrusted files.

Every result writer and loader of the package goes through these functions, so that the
rules hold in one place:

Writing (:func:`atomic_write`, :func:`atomic_savez`, :func:`atomic_write_text`)
    A temporary file in the target's own folder, flushed and ``fsync``-ed, then
    ``os.replace``-d over the target (atomic on POSIX and Windows). A kill, a full disk or an
    exception in the writer leaves the previous file intact and no partial or 0-byte file
    under the target's name; the temporary file is removed on error (a ``SIGKILL`` can leave
    one, named ``.<name>.tmp-*``: :func:`clean_stale_temporaries` removes old ones).

Reading (:func:`open_regular`, :func:`read_bytes`, :func:`read_text`, :func:`load_json`,
:func:`open_npz`, :func:`npz_json`, :func:`npz_array`)

    Only regular files are opened: the file is opened with ``O_NONBLOCK`` (a FIFO or a
    device never blocks the ``open``) and checked with ``fstat`` on the descriptor itself, so
    a symlink to a FIFO, ``/dev/zero`` or a directory is refused without reading a byte.
    Sizes are bounded before anything is read or inflated: the file, a JSON text and its
    nesting depth, and for ``.npz`` archives the declared size of every member (the zip
    central directory; Python's ``zipfile`` never inflates past the declared size) and the
    compression ratio (a zip bomb is refused before inflating). Nothing is unpickled.

Every failure of a file's *content* raises :class:`BadFile`, a ``ValueError`` with one line
``"<what> <path>: <reason>"``. A missing file raises ``FileNotFoundError``, and other
operating-system errors (permissions) their own ``OSError``.

Example::

    from attndyn.numeric.core import safeio
    safeio.atomic_savez("run.npz", t=t, y=y, header=safeio.json_array(header))
    with safeio.open_npz("run.npz", "result file") as z:
        header = safeio.npz_json(z, "header")
        y = safeio.npz_array(z, "y", ndim=2)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
import time
import zipfile

import numpy as np

__all__ = ["BadFile", "check_path", "atomic_write", "atomic_write_text", "atomic_savez", "json_array",
           "clean_stale_temporaries", "open_regular", "read_bytes", "read_text", "load_json",
           "loads_json", "json_depth", "open_npz", "npz_json", "npz_array", "MAX_JSON_BYTES",
           "MAX_JSON_DEPTH", "MAX_NPZ_RATIO"]

#: Largest JSON text read (a sweep manifest, a point file, an ``.npz`` header): 64 MiB.
MAX_JSON_BYTES = 64 * 2 ** 20
#: Deepest nesting of ``[``/``{`` accepted in a JSON text (the package writes at most ~6).
MAX_JSON_DEPTH = 64
#: Largest declared inflation ratio of an ``.npz`` member above 16 MiB. Floating-point data
#: deflates by a factor 1-3; a ratio of 200 needs almost constant data (a zip bomb: ~1000).
MAX_NPZ_RATIO = 200
_RATIO_FLOOR = 16 * 2 ** 20
_TMP_TAG = ".tmp-"


class BadFile(ValueError):
    """A file that is not what its loader expects (one line, naming the file)."""


def one_line(text) -> str:
    return " ".join(str(text).split())


def _fail(what: str, path, reason) -> BadFile:
    return BadFile(f"{what} {os.fspath(path)}: {one_line(reason)}")


# ---------------------------------------------------------------------------
# writing


def _fsync_dir(folder: str) -> None:
    # the rename itself is durable only once the folder is synced (POSIX); best effort
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_path(path, name: str = "path") -> str:
    """``path`` (a ``str`` or an ``os.PathLike`` giving one, non-empty) as a ``str``;
    anything else is refused naming ``name`` (``None`` would be saved as ``None.npz``)."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a file path (str or os.PathLike), got "
                        f"{type(path).__name__}")
    if not text:
        raise ValueError(f"{name} must be a non-empty file path, got {path!r}")
    return text


def _temporary(path: str, folder: str) -> tuple[int, str]:
    """``mkstemp`` next to ``path``; its failure names ``path``, not the temporary name."""
    try:
        return tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}{_TMP_TAG}")
    except OSError as exc:
        if exc.errno is None:
            raise
        reason = {errno.ENOENT: "its folder does not exist",
                  errno.ENOTDIR: "a component of its folder is not a directory"}.get(
            exc.errno, f"cannot create a file in its folder ({exc.strerror})")
        raise type(exc)(exc.errno, f"cannot write {path}: {reason} ({folder})",
                        path) from None


def atomic_write(path, write, *, binary: bool = True) -> str:
    """Write ``path`` atomically: ``write(f)`` fills an open temporary file in the same
    folder, which is flushed, ``fsync``-ed and renamed over ``path``.

    If ``write`` raises (a full disk: ``OSError(ENOSPC)``) or the process dies, ``path`` keeps
    its previous content (or stays absent); the temporary file is removed on error. The file
    gets the usual permissions of a new file (``0o666`` less the umask). Returns ``path``.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = _temporary(path, folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else
                                                       {"encoding": "utf-8"})) as f:
            fd = -1
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    finally:
        if fd != -1:
            os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_dir(folder)
    return path


def atomic_write_text(path, text: str) -> str:
    """:func:`atomic_write` of a UTF-8 text."""
    return atomic_write(path, lambda f: f.write(text), binary=False)


def json_array(obj) -> np.ndarray:
    """``obj`` as the 0-d string array an ``.npz`` header is stored as (``NaN`` and
    ``inf`` stay numbers: Python's JSON writes and reads them as ``NaN``/``Infinity``)."""
    return np.array(json.dumps(obj))


def atomic_savez(path, *, compressed: bool = True, **arrays) -> str:
    """``numpy.savez_compressed`` (or ``savez``) to ``path`` through :func:`atomic_write`.
    ``.npz`` is appended to ``path`` when missing, as numpy does; returns the path written."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    save = np.savez_compressed if compressed else np.savez
    return atomic_write(path, lambda f: save(f, **arrays))


def clean_stale_temporaries(folder, *, older_than: float = 3600.0) -> list:
    """Remove the temporary files :func:`atomic_write` left in ``folder`` when a process
    was killed mid-write: regular files named ``.<name>.tmp-*`` (or the sweep store's older
    ``.tmp-*``) not modified for ``older_than`` seconds (a younger one may belong to a
    writer still running). Returns the names removed; errors are ignored."""
    removed = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        if not (e.name.startswith(".") and _TMP_TAG in e.name):
            continue
        try:
            st = e.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= older_than:
                os.unlink(e.path)
                removed.append(e.name)
        except OSError:
            pass
    return removed


# ---------------------------------------------------------------------------
# reading


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path, what: str = "file", max_bytes: int | None = None):
    """Open ``path`` for binary reading if it is a regular file (symlinks to one are
    followed), never blocking: ``O_NONBLOCK`` for the ``open``, then ``fstat`` on the
    descriptor. A FIFO, a device, a socket or a directory raises :class:`BadFile`, as does
    a file larger than ``max_bytes``. Returns ``(file object, size in bytes)``."""
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise _fail(what, path, "is a directory, not a file") from None
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EWOULDBLOCK):  # a socket or a FIFO's odd cases
            raise _fail(what, path, "not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _fail(what, path, f"is {_kind(st.st_mode)}, not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise _fail(what, path, f"is {st.st_size} bytes, above the limit of {max_bytes}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: reads behave as usual
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f, int(st.st_size)


def read_bytes(path, max_bytes: int, what: str = "file") -> bytes:
    """The content of the regular file ``path``, at most ``max_bytes`` bytes (a file that
    is, or grows, larger raises :class:`BadFile`)."""
    f, _ = open_regular(path, what, max_bytes)
    with f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _fail(what, path, f"is larger than the limit of {max_bytes} bytes")
    return data


def read_text(path, max_bytes: int, what: str = "file") -> str:
    """:func:`read_bytes` decoded as UTF-8 (undecodable bytes raise :class:`BadFile`)."""
    data = read_bytes(path, max_bytes, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(what, path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in a JSON text (strings skipped), computed
    without recursion, so that a deep text is refused before the parser sees it."""
    skel = _STRING.sub("", text)
    b = np.frombuffer(skel.encode("utf-8", "replace"), dtype=np.uint8)
    step = (np.isin(b, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(b, (ord("]"), ord("}"))).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def loads_json(text, what: str, path, *, max_bytes: int = MAX_JSON_BYTES,
               max_depth: int = MAX_JSON_DEPTH):
    """Parse a JSON text from ``path`` (named in errors as ``what``), bounded in length and
    nesting depth; ``NaN``/``Infinity`` read back as floats. Errors: :class:`BadFile`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(what, path, "JSON is not UTF-8 text") from None
    if len(text) > max_bytes:
        raise _fail(what, path, f"JSON text of {len(text)} characters, above the limit of "
                                f"{max_bytes}")
    depth = json_depth(text)
    if depth > max_depth:
        raise _fail(what, path, f"JSON nested {depth} levels deep, above the limit of "
                                f"{max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise _fail(what, path, f"not valid JSON ({exc})") from None


def load_json(path, what: str = "JSON file", *, max_bytes: int = MAX_JSON_BYTES,
              max_depth: int = MAX_JSON_DEPTH):
    """:func:`loads_json` of the regular file ``path`` (see :func:`read_bytes`)."""
    return loads_json(read_bytes(path, max_bytes, what), what, path, max_bytes=max_bytes,
                      max_depth=max_depth)


class _Npz:
    """An open, checked ``.npz``: ``files``, ``__contains__``, and the members through
    :func:`npz_json` and :func:`npz_array`; a context manager."""

    def __init__(self, fileobj, zf, path, what, max_bytes):
        self._fileobj, self.zip, self.path, self.what = fileobj, zf, path, what
        self.max_bytes = max_bytes
        self.members = {i.filename[:-4]: i for i in zf.infolist()
                        if i.filename.endswith(".npy")}
        self.files = list(self.members)

    def __contains__(self, key):
        return key in self.members

    def __getitem__(self, key) -> np.ndarray:
        """Member ``key`` as stored (numbers or text; never objects), checked as
        :func:`npz_array` checks it: a drop-in for ``numpy.load(...)[key]``."""
        return npz_array(self, key, None, kinds="biufU", dtype=None)

    def fail(self, reason) -> BadFile:
        return _fail(self.what, self.path, reason)

    def close(self):
        self.zip.close()
        self._fileobj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _available_memory() -> int:
    from attndyn.symbolic.words import available_memory
    return available_memory()


def open_npz(path, what: str = "file", *, max_bytes: int | None = None) -> _Npz:
    """Open the regular file ``path`` as a numpy ``.npz`` archive, checked before any
    member is inflated: a zip archive whose members are all ``.npy`` files, whose declared
    uncompressed total is at most ``max_bytes`` (default: half the available memory) and
    whose members above 16 MiB inflate at most :data:`MAX_NPZ_RATIO` times.
    Use as a context manager; read members with :func:`npz_json` and :func:`npz_array`."""
    f, size = open_regular(path, what)
    try:
        try:
            zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            raise _fail(what, path, f"not an .npz archive ({type(exc).__name__}: {exc})") from None
        try:
            infos = zf.infolist()
            if not infos:
                raise _fail(what, path, "an empty archive")
            limit = _available_memory() // 2 if max_bytes is None else int(max_bytes)
            total = 0
            for i in infos:
                if not i.filename.endswith(".npy") or "/" in i.filename:
                    raise _fail(what, path, f"member {i.filename!r} is not a top-level .npy")
                if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    raise _fail(what, path, f"member {i.filename!r} uses compression "
                                            f"{i.compress_type} (only stored or deflated)")
                total += i.file_size
                if i.file_size > _RATIO_FLOOR and i.file_size > MAX_NPZ_RATIO * max(
                        i.compress_size, 1):
                    raise _fail(what, path, f"member {i.filename!r} declares {i.file_size} "
                                            f"bytes from {i.compress_size} compressed (ratio "
                                            f"above {MAX_NPZ_RATIO}: a zip bomb?)")
            if total > limit:
                raise _fail(what, path, f"declares {total / 2 ** 30:.3g} GiB uncompressed, above "
                                        f"the limit of {limit / 2 ** 30:.3g} GiB")
        except BaseException:
            zf.close()
            raise
    except BaseException:
        f.close()
        raise
    return _Npz(f, zf, os.fspath(path), what, limit)


def _npy_header(z: _Npz, key: str):
    info = z.members.get(key)
    if info is None:
        raise z.fail(f"no array {key!r}")
    try:
        fp = z.zip.open(info)
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise ValueError(f".npy format version {version} (1.0 and 2.0 are read)")
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, KeyError, TypeError,
            SyntaxError, RuntimeError) as exc:
        raise z.fail(f"array {key!r}: bad .npy header ({type(exc).__name__}: {exc})") from None
    return fp, shape, fortran, dtype


def _read_member(z: _Npz, key: str, fp, shape, fortran, dtype) -> np.ndarray:
    if dtype.hasobject:
        fp.close()
        raise z.fail(f"array {key!r} holds Python objects (dtype {dtype}), which are never "
                     "unpickled")
    count = int(np.prod(shape, dtype=object))
    nbytes = count * dtype.itemsize
    info = z.members[key]
    if nbytes > info.file_size:  # the data cannot be longer than the member
        fp.close()
        raise z.fail(f"array {key!r} declares shape {shape} ({nbytes} bytes) in a member of "
                     f"{info.file_size} bytes")
    a = np.empty(count, dtype=dtype)
    buf = a.view(np.uint8)
    chunk = 16 * 2 ** 20
    try:
        with fp:
            done = 0
            while done < nbytes:  # in chunks: no second full-size copy
                data = fp.read(min(chunk, nbytes - done))
                if not data:
                    raise EOFError(f"{done} of {nbytes} bytes")
                buf[done:done + len(data)] = np.frombuffer(data, dtype=np.uint8)
                done += len(data)
            fp.read()  # to the member's end: zipfile checks the CRC there
    except (EOFError, OSError, zipfile.BadZipFile, ValueError, RuntimeError) as exc:
        raise z.fail(f"array {key!r} is truncated or corrupted ({type(exc).__name__}: "
                     f"{exc})") from None
    if fortran:
        return a.reshape(shape[::-1]).transpose()
    return a.reshape(shape)


def npz_array(z: _Npz, key: str, ndim: int | None = None, *, kinds: str = "biuf",
              dtype=np.float64) -> np.ndarray:
    """Member ``key`` of an archive from :func:`open_npz` as an array of ``dtype``
    (``None``: as stored), checked from its ``.npy`` header before the data is read:
    ``ndim`` dimensions, a dtype kind among ``kinds`` (numbers by default), a size that fits
    its member. Errors: :class:`BadFile`."""
    fp, shape, fortran, dt = _npy_header(z, key)
    if ndim is not None and len(shape) != ndim:
        fp.close()
        raise z.fail(f"{key!r} must be {ndim}-D, got shape {shape}")
    if dt.kind not in kinds:
        fp.close()
        raise z.fail(f"{key!r} must be a real numeric array, got dtype {dt}"
                     if kinds == "biuf" else f"{key!r} has dtype {dt}, expected kind {kinds!r}")
    a = _read_member(z, key, fp, shape, fortran, dt)
    return a if dtype is None else a.astype(dtype, copy=False)


def npz_json(z: _Npz, key: str = "header", *, max_bytes: int = MAX_JSON_BYTES,
             max_depth: int = MAX_JSON_DEPTH):
    """Member ``key`` of an archive from :func:`open_npz` read as a JSON text stored as a
    0-d string array (what :func:`json_array` writes), bounded in size and depth."""
    fp, shape, fortran, dt = _npy_header(z, key)
    if shape != () or dt.kind != "U":
        fp.close()
        raise z.fail(f"{key!r} is not a JSON string (shape {shape}, dtype {dt})")
    if dt.itemsize > 4 * max_bytes:
        fp.close()
        raise z.fail(f"{key!r} declares {dt.itemsize // 4} characters, above the limit of "
                     f"{max_bytes}")
    text = str(_read_member(z, key, fp, shape, fortran, dt)[()])
    return loads_json(text, z.what, z.path, max_bytes=max_bytes, max_depth=max_depth)

