"""The constant operator of the Taylor kernel, and the Runge-Kutta kernels' layout, on disk
next to their structure file.

The grouped layout of the nonzero constant terms and their first-touch order
(:func:`attndyn.kernels.rhs.group_rows`, :func:`attndyn.kernels.rhs.touch_order`) cost a
first integrate at order 24 about 0.3 s of fresh memory and passes over 6.3 million
terms. They depend on the structure arrays and the operator's values only, so they are
written once as ``.npy`` files and mapped back copy-on-write (no fresh pages; the kernel
only reads them). A folder is trusted only after the checksum of every array
(:func:`_digest`), its dtypes, shapes, bounds, the group table, the permutation and a sample
of rows rebuilt from the structure all match;
anything else (a damaged, foreign or stale folder) is ignored and the operator is made
again. The folder name carries a digest of the caller's structure stamp, the layout
parameters and the values, so a changed structure or potential never reads an old one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zlib
from types import SimpleNamespace
from typing import Iterator, Optional

import numpy as np

from . import rhs as _rhs

__all__ = ["const_files", "load_const_operator", "save_const_operator", "layout_folder",
           "cached_kernel_layout", "load_layout", "CONST_CACHE_VERSION", "LAYOUT_MIN_TERMS"]

#: bumped whenever the constant operator's layout, touch order or checksum changes
#: (2: block sums in place of CRC-32)
CONST_CACHE_VERSION = 2

#: 64-bit words per block of :func:`_digest` (4 KiB)
DIGEST_BLOCK = 512

#: rows rebuilt from the structure and compared with a folder before it is trusted
SAMPLE_ROWS = 16

_NAMES = ("rows", "groups", "src", "val", "gather", "new", "perm")

# The system ``s`` is the structure namespace of :func:`attndyn.kernels.rhs` (``indptr``,
# ``src``, ``slot``, ``gather`` arrays); ``touch`` the namespace of
# :func:`attndyn.kernels.rhs.touch_order` or ``None``; ``clay`` the arrays ``(rows, groups,
# src, val)``
_Clay = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_Touch = Optional[SimpleNamespace]


def const_files(cache: tuple[str, str], s: SimpleNamespace, tab: np.ndarray) -> SimpleNamespace:
    """The folder of the constant operator of system ``s`` with slot values ``tab``:
    ``cache = (path, stamp)``, the folder ``<path>.const-<digest>`` where the digest
    covers ``stamp``, the layout parameters, the sizes, ``tab`` and ``gather``."""
    path, stamp = cache
    h = hashlib.sha256(repr((CONST_CACHE_VERSION, str(stamp), _rhs.ROW_CHUNK,
                             _rhs.PERMUTE_TERMS, int(s.indptr.size), int(s.src.size),
                             str(s.slot.dtype), int(tab.size))).encode())
    h.update(np.ascontiguousarray(tab, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(s.gather, dtype=np.int64).tobytes())
    return SimpleNamespace(folder=f"{os.fspath(path)}.const-{h.hexdigest()[:24]}", tab=tab)


def save_const_operator(files: SimpleNamespace, clay: tuple[np.ndarray, ...], touch: _Touch
                        ) -> None:
    """Write ``clay = (rows, groups, src, val)`` and ``touch`` (or ``None``) into a fresh
    folder renamed into place at once, so a reader sees all of it or none; a failure
    leaves no folder (the cache is an optimisation only). Called after a failed load, so
    a folder already there (damaged or stale) is replaced."""
    arrays = dict(zip(_NAMES[:4], clay))
    if touch is not None:
        arrays.update(gather=touch.gather, new=touch.new, perm=touch.perm)
    _write_folder(files.folder, arrays)


def _write_folder(folder: str, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as ``<name>.npy`` files with their checksums (``sums.npy``, in the order
    of ``arrays``) in ``folder``: written into a fresh folder renamed into place, so a
    reader sees all of it or none; a folder already there (one that did not load) is
    replaced; any failure leaves no folder."""
    tmp = f"{folder}.{os.getpid()}.tmp"
    if os.path.exists(folder):  # one that did not load: moved aside, then removed
        try:
            os.rename(folder, f"{tmp}.old")
        except OSError:
            return
        shutil.rmtree(f"{tmp}.old", ignore_errors=True)
    try:
        os.makedirs(tmp, mode=0o700)
        sums = []
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            np.save(os.path.join(tmp, f"{name}.npy"), a, allow_pickle=False)
            sums.append(_digest(a))
        np.save(os.path.join(tmp, "sums.npy"), np.array(sums, dtype=np.int64),
                allow_pickle=False)
        os.rename(tmp, folder)
    except OSError:  # no space, a read-only folder, or another process was first
        shutil.rmtree(tmp, ignore_errors=True)


def _read_folder(folder: str, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The arrays ``names`` of a folder written by :func:`_write_folder`, mapped
    copy-on-write, or ``None`` when a file is missing or unreadable or a checksum
    differs."""
    try:
        arr = {name: _read(folder, name) for name in names}
        sums = np.load(os.path.join(folder, "sums.npy"), allow_pickle=False)
        if (sums.dtype != np.int64 or sums.shape != (len(names),)
                or [_digest(arr[name]) for name in names] != sums.tolist()):
            return None
    except Exception:  # damaged or foreign files are rebuilt, never trusted
        return None
    return arr


def _digest(a: np.ndarray) -> int:
    """Checksum of an array's bytes: the sums modulo 2**64 of each block of
    :data:`DIGEST_BLOCK` little-endian 64-bit words (the tail padded with zeros), then the
    CRC-32 of those sums and the byte count. Every value is covered, not only the sampled
    rows: a changed word changes its block's sum, and moved or lost blocks change the sequence of sums
    (a permutation of words inside one block is not seen; such damage is not what disks
    or interrupted writes do, and the bounds checks keep the kernel memory-safe
    whatever the files hold). 2.6 ms for the 90 MB at order 24 against 21 ms for a CRC-32
    of all the bytes (one thread, pages resident, measured)."""
    a = np.ascontiguousarray(a)
    if a.size == 0:
        return 0
    raw = np.frombuffer(a.data.cast("B"), dtype=np.uint8)
    full = raw.size // (8 * DIGEST_BLOCK) * (8 * DIGEST_BLOCK)
    sums = np.add.reduce(raw[:full].view("<u8").reshape(-1, DIGEST_BLOCK), axis=1)
    tail = np.zeros(DIGEST_BLOCK * 8, dtype=np.uint8)
    tail[:raw.size - full] = raw[full:]
    last = np.add.reduce(tail.view("<u8"))
    ends = np.array([last, raw.size], dtype=np.uint64)
    return zlib.crc32(np.concatenate([sums, ends]).astype("<u8").tobytes())


def _read(folder: str, name: str) -> np.ndarray:
    a = np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="c", allow_pickle=False)
    return np.asarray(a)  # the plain array view the kernels' signatures take


def load_const_operator(files: SimpleNamespace, s: SimpleNamespace
                        ) -> tuple[_Clay, _Touch] | None:
    """``(clay, touch)`` from the folder of ``files`` (see :func:`save_const_operator`),
    or ``None`` when it is missing, unreadable or does not match system ``s``."""
    folder = files.folder
    if not os.path.isdir(folder):
        return None
    n = s.indptr.size - 1
    names = _NAMES if os.path.exists(os.path.join(folder, "new.npy")) else _NAMES[:4]
    arr = _read_folder(folder, names)
    if arr is None:
        return None
    touch: _Touch = None
    if len(names) == len(_NAMES):
        touch = SimpleNamespace(new=arr["new"], perm=arr["perm"], rows=arr["rows"],
                                src=arr["src"], gather=arr["gather"])
    try:
        ok = _valid(arr, touch, s, files.tab, n)
    except (ValueError, IndexError, TypeError):
        ok = False
    if not ok:
        return None
    return (arr["rows"], arr["groups"], arr["src"], arr["val"]), touch


def _valid(arr: dict[str, np.ndarray], touch: _Touch, s: SimpleNamespace, tab: np.ndarray,
           n: int) -> bool:
    """Dtypes, shapes and bounds of every array, the group table, the permutation, and
    :data:`SAMPLE_ROWS` rows spread over the layout rebuilt from ``s`` and compared."""
    rows, groups, src, val = arr["rows"], arr["groups"], arr["src"], arr["val"]
    if not (rows.dtype == np.uint32 and rows.shape == (n,) and groups.dtype == np.uint64
            and groups.ndim == 2 and groups.shape[1] == 4 and 0 < groups.shape[0] <= max(n, 1)
            and src.dtype == np.uint32 and src.ndim == 1 and val.dtype == np.float64
            and val.shape == src.shape and src.size <= s.src.size):
        return False
    if (touch is None) != (src.size < _rhs.PERMUTE_TERMS):
        return False
    new: np.ndarray | None = None
    if touch is not None:
        new = touch.new
        if not _touch_valid(new, touch.perm, touch.gather, s, n):
            return False
    if n and src.size and int(src.max()) >= n:
        return False
    return (_rows_valid(rows, n) and _groups_valid(groups, n, src.size)
            and _sample_valid(arr, new, s, tab, n))


def _rows_valid(rows: np.ndarray, n: int) -> bool:
    """``rows`` (``n`` entries below ``n``) holds every row once."""
    if n and int(rows.max()) >= n:
        return False
    seen = np.zeros(n, dtype=bool)
    seen[rows] = True
    return bool(seen.all())


def _touch_valid(new: np.ndarray, perm: np.ndarray, g: np.ndarray, s: SimpleNamespace,
                 n: int) -> bool:
    """A first-touch order: ``new`` and ``perm`` inverse permutations of ``n`` moments and
    ``g`` the system's gather list renumbered by ``new``."""
    if not (new.dtype == perm.dtype == np.int64 and new.shape == perm.shape == (n,)
            and g.dtype == np.int64 and g.shape == s.gather.shape):
        return False
    if n and (new.min() < 0 or new.max() >= n or perm.min() < 0 or perm.max() >= n
              or not _inverse(perm, new, n)):
        return False
    sg = np.asarray(s.gather, dtype=np.int64)
    return bool(np.array_equal(g, np.where(sg >= 0, new[np.maximum(sg, 0)], -1)))


def _inverse(perm: np.ndarray, new: np.ndarray, n: int, chunk: int = 8192) -> bool:
    """``perm[new[i]] == i`` for every ``i < n`` (entries in range), checked in chunks: no
    ``n``-long temporaries, whose fresh pages (numpy advises huge pages from 4 MiB on) cost
    a first integrate at order 24 about 20 ms (measured)."""
    ar = np.arange(min(chunk, n))
    for i0 in range(0, n, chunk):
        i1 = min(n, i0 + chunk)
        if not np.array_equal(perm[new[i0:i1]], ar[:i1 - i0] + i0):
            return False
    return True


def _groups_valid(groups: np.ndarray, n: int, n_terms: int) -> bool:
    """Each group's first term and first position follow from the ones before it, and
    together they cover the ``n`` rows and ``n_terms`` terms."""
    gr = groups.astype(np.int64)
    if gr.min() < 0:
        return False
    L, cnt = gr[:, 0], gr[:, 1]
    terms = np.concatenate([[0], np.cumsum(L * cnt)])
    pos = np.concatenate([[0], np.cumsum(cnt)])
    return bool(np.array_equal(gr[:, 2], terms[:-1]) and np.array_equal(gr[:, 3], pos[:-1])
                and terms[-1] == n_terms and pos[-1] == n and np.all(cnt > 0))


def _sampled_rows(arr: dict[str, np.ndarray], touched: bool, n: int
                  ) -> Iterator[tuple[int, int, int]]:
    """``(off, length, r)`` at :data:`SAMPLE_ROWS` layout positions spread over the ``n``
    rows: the folder's terms of that position start at ``off``, ``length`` of them, and
    they are row ``r`` of the structure (mapped back through ``perm`` when the layout is
    ``touched``)."""
    if n == 0:
        return
    rows, gr = arr["rows"], arr["groups"].astype(np.int64)
    perm = arr["perm"] if touched else None
    for p in np.unique(np.linspace(0, n - 1, SAMPLE_ROWS).astype(np.int64)):
        g = int(np.searchsorted(gr[:, 3], p, side="right")) - 1
        length = int(gr[g, 0])
        off = int(gr[g, 2]) + (int(p) - int(gr[g, 3])) * length
        r = int(rows[p]) if perm is None else int(perm[rows[p]])
        yield off, length, r


def _sample_valid(arr: dict[str, np.ndarray], new: np.ndarray | None, s: SimpleNamespace,
                  tab: np.ndarray, n: int) -> bool:
    """:data:`SAMPLE_ROWS` layout positions: the row's nonzero terms of the structure, in
    their order (sources renumbered by ``new``), are the folder's terms there."""
    src, val = arr["src"], arr["val"]
    for off, length, r in _sampled_rows(arr, new is not None, n):
        t0, t1 = int(s.indptr[r]), int(s.indptr[r + 1])
        v = tab[s.slot[t0:t1]]
        keep = v != 0.0
        want_src = s.src[t0:t1][keep].astype(np.int64)
        if new is not None:
            want_src = new[want_src]
        if not (keep.sum() == length and np.array_equal(src[off:off + length], want_src)
                and np.array_equal(val[off:off + length], v[keep])):
            return False
    return True


# --- the Runge-Kutta kernels' layout -------------------------------------------------------

#: structure terms from which :func:`cached_kernel_layout` keeps the layout on disk (order 22
#: at K = 2, 1.8 million terms, on; below, making it costs a few ms)
LAYOUT_MIN_TERMS = 1_000_000

_RK_NAMES = ("rows", "groups", "term", "gather", "new", "perm")

#: terms per chunk of the slot-range check (a 2 MiB work array, reused)
_CHECK_CHUNK = 1 << 19


def layout_folder(cache: tuple[str, str], s: SimpleNamespace) -> str:
    """The folder of the Runge-Kutta layout of system ``s``: ``<path>.layout-<digest>``
    for ``cache = (path, stamp)``; the digest covers ``stamp``, the layout parameters, the
    sizes and ``gather`` (the layout depends on the structure only, not on the values)."""
    path, stamp = cache
    h = hashlib.sha256(repr((CONST_CACHE_VERSION, "rk", str(stamp), _rhs.ROW_CHUNK,
                             _rhs.PERMUTE_TERMS, _rhs.PACK_BITS, int(s.indptr.size),
                             int(s.src.size), str(s.slot.dtype),
                             int(s.slot_coef.size))).encode())
    h.update(np.ascontiguousarray(s.gather, dtype=np.int64).tobytes())
    return f"{os.fspath(path)}.layout-{h.hexdigest()[:24]}"


def cached_kernel_layout(s: SimpleNamespace, cache: tuple[str, str] | None) -> tuple:
    """:func:`attndyn.kernels.rhs.kernel_layout` of a checked system ``s``, kept in the
    folder :func:`layout_folder` of ``cache`` from :data:`LAYOUT_MIN_TERMS` terms on when
    the terms pack (``uint8`` slots): the grouped rows, the packed terms and the
    first-touch order, made per process before (0.12 s of a first DP5(4) run at order 24,
    measured) and now read back, trusted only after the checks of :func:`load_layout`.
    Kept on ``s`` once read, so repeated runs read nothing."""
    n = s.indptr.size - 1
    if (cache is None or s.src.size < LAYOUT_MIN_TERMS or np.dtype(s.slot.dtype) != np.uint8
            or n >= 2 ** (32 - _rhs.PACK_BITS)):
        return _rhs.kernel_layout(s)
    key = (s.indptr, s.src, s.slot, s.gather)
    memo = getattr(s, "disk_layout", None)
    if memo is not None and all(a is b for a, b in zip(memo[0], key)):
        return memo[1]
    folder = layout_folder(cache, s)
    out = load_layout(folder, s) if os.path.isdir(folder) else None
    if out is None:
        out = _rhs.kernel_layout(s)
        order, rows, groups, term, _slot, gather, packed = out
        if packed:
            arrays = {"rows": rows, "groups": groups, "term": term}
            if order is not None:
                arrays.update(gather=gather, new=order.new, perm=order.perm)
            _write_folder(folder, arrays)
    try:  # a namespace takes the attribute; anything else reads the folder each time
        s.disk_layout = (key, out)
    except AttributeError:
        pass
    return out


def load_layout(folder: str, s: SimpleNamespace) -> tuple | None:
    """The :func:`attndyn.kernels.rhs.kernel_layout` tuple from ``folder``, or ``None`` when
    it is missing, damaged or not the layout of ``s``: checksums, dtypes, shapes, every
    packed source below the number of moments and every slot below the table's size (the
    kernel indexes with them), the rows a permutation, the group table, the first-touch
    order, and :data:`SAMPLE_ROWS` rows rebuilt from the structure."""
    n = s.indptr.size - 1
    names = _RK_NAMES if os.path.exists(os.path.join(folder, "new.npy")) else _RK_NAMES[:3]
    arr = _read_folder(folder, names)
    if arr is None:
        return None
    try:
        ok = _layout_valid(arr, s, n)
    except (ValueError, IndexError, TypeError):
        ok = False
    if not ok:
        return None
    order, gather = None, s.gather
    if "new" in arr:
        gather = arr["gather"]
        order = SimpleNamespace(new=arr["new"], perm=arr["perm"], rows=arr["rows"],
                                gather=gather)
    return order, arr["rows"], arr["groups"], arr["term"], s.slot, gather, True


def _layout_valid(arr: dict[str, np.ndarray], s: SimpleNamespace, n: int) -> bool:
    rows, groups, term = arr["rows"], arr["groups"], arr["term"]
    nt = s.src.size
    if not (rows.dtype == np.uint32 and rows.shape == (n,) and groups.dtype == np.uint64
            and groups.ndim == 2 and groups.shape[1] == 4 and 0 < groups.shape[0] <= max(n, 1)
            and term.dtype == np.uint32 and term.shape == (nt,)):
        return False
    if ("new" in arr) != (nt >= _rhs.PERMUTE_TERMS):
        return False
    new = None
    if "new" in arr:
        new = arr["new"]
        if not _touch_valid(new, arr["perm"], arr["gather"], s, n):
            return False
    if not (_rows_valid(rows, n) and _groups_valid(groups, n, nt)
            and _terms_in_range(term, n, s.slot_coef.size)):
        return False
    return _sample_terms_valid(arr, new, s, n)


def _terms_in_range(term: np.ndarray, n: int, n_slots: int) -> bool:
    """Every packed term's source below ``n`` (the largest term has the largest source)
    and slot below ``n_slots``, the slots checked in chunks (no term-long temporary)."""
    if term.size == 0:
        return True
    if int(term.max()) >> _rhs.PACK_BITS >= n:
        return False
    mask = np.uint32((1 << _rhs.PACK_BITS) - 1)
    buf = np.empty(min(term.size, _CHECK_CHUNK), dtype=np.uint32)
    for i0 in range(0, term.size, _CHECK_CHUNK):
        part = term[i0:i0 + _CHECK_CHUNK]
        b = buf[:part.size]
        np.bitwise_and(part, mask, out=b)
        if int(b.max()) >= n_slots:
            return False
    return True


def _sample_terms_valid(arr: dict[str, np.ndarray], new: np.ndarray | None,
                        s: SimpleNamespace, n: int) -> bool:
    """:data:`SAMPLE_ROWS` layout positions: the row's terms of the structure in their
    order (sources renumbered by ``new``), packed, are the folder's terms there."""
    term = arr["term"]
    for off, length, r in _sampled_rows(arr, new is not None, n):
        t0, t1 = int(s.indptr[r]), int(s.indptr[r + 1])
        src = s.src[t0:t1].astype(np.int64)
        if new is not None:
            src = new[src]
        want = (src << _rhs.PACK_BITS) | s.slot[t0:t1].astype(np.int64)
        if not (t1 - t0 == length and np.array_equal(term[off:off + length].astype(np.int64),
                                                     want)):
            return False
    return True
