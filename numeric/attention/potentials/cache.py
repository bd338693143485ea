"""Disk cache of derived tied potentials: a model ready without SymPy (issue 11, start-up).

Deriving ``Phi`` and ``Gamma`` (:func:`attndyn.symbolic.potential.tied_potential`),
printing the numba source of ``Gamma`` and the loss text, and turning ``Gamma`` into
the Taylor integrator's polynomial program take SymPy, and importing SymPy alone
costs about half a second. What the hierarchy needs from them is small: the numba
source of ``grad`` (its machine code is in numba's cache), the program arrays, the
printed ``Phi`` and the route. They are stored here, one ``.npz`` file per potential
(arrays plus one JSON text, never a pickle), in the private per-user folder
``potentials`` of :func:`attndyn.kernels._cachedir.private_dir` (``0o700``, owner
checked), written atomically.

The key is a SHA-256 of a canonical text of ``(loss, K, L, C, parameter names and
values, code version)``:

- the loss: a callable built from ``G[i, j, k]``, Python ``int``/``float`` constants
  and ``+ - * / **`` is *traced* without SymPy (:func:`trace_loss`): it is called once
  on stand-in objects that record every operation as a node of a hash-consed graph.
  Python evaluates the same operations on SymPy's ``G``, so the same trace means the
  same SymPy expression. A loss that does anything else (SymPy functions, parameter
  symbols, comparisons, ``abs``, numpy functions) cannot be traced; its key is then
  SymPy's ``srepr`` of ``loss(G)`` (SymPy is imported, the derivation is still saved);
- the code version: a hash of every source file of :mod:`attndyn.symbolic`, of this
  module and of ``tied.py`` (which builds the program), and of SymPy's release file.

An entry is used only if it parses without pickles, holds exactly the expected fields
and dtypes, repeats the full key text (not only its hash), its digest (SHA-256 of its
content) matches, and its program passes :func:`attndyn.kernels.taylor.check_program`;
otherwise it is rebuilt from SymPy and overwritten. The program is verified against the
compiled gradient when it is first made (``TiedHierarchy._gamma_program``), before it is
stored. Losses on the numeric (quadrature) route are never stored.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
from functools import lru_cache

import numpy as np

__all__ = ["trace_loss", "potential_key", "PotentialEntry", "load_entry", "store_entry",
           "cache_folder", "code_version", "ENTRY_VERSION", "MAX_TRACE_NODES"]

#: format of an entry; bump when the stored fields change
ENTRY_VERSION = 1
#: a longer trace is not keyed (the SymPy path is taken)
MAX_TRACE_NODES = 20000
#: entries larger than this are not read
MAX_ENTRY_BYTES = 8 << 20

_PROGRAM = ("prog_ptr", "prog_var", "prog_coef", "prog_out")
_PROGRAM_DTYPES = (np.int64, np.int64, np.float64, np.int64)


# -- tracing a loss without SymPy ------------------------------------------------------------
class Untraceable(Exception):
    """The loss did something the tracer does not record (the SymPy path applies)."""


class _Graph:
    """Hash-consed operation graph: node ``i`` is ``nodes[i]``, a tuple of an op name and
    its operands (child node ids or tagged constants). Shared subexpressions are stored
    once, so the trace stays linear in the number of operations."""

    def __init__(self):
        self.nodes: list = []
        self.ids: dict = {}

    def node(self, item) -> "_Traced":
        i = self.ids.get(item)
        if i is None:
            if len(self.nodes) >= MAX_TRACE_NODES:
                raise Untraceable("trace too long")
            i = self.ids[item] = len(self.nodes)
            self.nodes.append(item)
        return _Traced(self, i)


def _operand(g: _Graph, x):
    """A child reference: a traced node of the same graph, or a tagged exact constant."""
    if type(x) is _Traced:
        if x._g is not g:
            raise Untraceable("operands from two traces")
        return x._i
    if type(x) is int:  # exactly int: bool, numpy and other number types are not traced
        return ("i", str(x))
    if type(x) is float:
        if not math.isfinite(x):
            raise Untraceable("non-finite constant")
        return ("f", x.hex())
    raise Untraceable(f"operand of type {type(x).__name__}")


def _binary(op):
    def f(self, other):
        return self._g.node((op, self._i, _operand(self._g, other)))

    def r(self, other):
        return self._g.node((op, _operand(self._g, other), self._i))
    return f, r


class _Traced:
    """Stand-in for one SymPy expression while a loss is traced."""

    __slots__ = ("_g", "_i")
    __array_ufunc__ = None  # numpy functions refuse it (TypeError): not traced
    __hash__ = None

    def __init__(self, g, i):
        self._g, self._i = g, i

    __add__, __radd__ = _binary("add")
    __sub__, __rsub__ = _binary("sub")
    __mul__, __rmul__ = _binary("mul")
    __truediv__, __rtruediv__ = _binary("div")
    __pow__, __rpow__ = _binary("pow")

    def __neg__(self):
        return self._g.node(("neg", self._i))

    def __pos__(self):
        return self._g.node(("pos", self._i))

    def _refuse(self, *args, **kw):
        raise Untraceable("operation not traced")

    # everything SymPy would answer differently from a plain number is refused
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __bool__ = __float__ = __int__ = __index__ = __complex__ = __abs__ = _refuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __divmod__ = __rdivmod__ = _refuse
    __matmul__ = __rmatmul__ = __round__ = __trunc__ = __iter__ = __len__ = _refuse
    _sympy_ = __str__ = __format__ = _refuse  # never turned into SymPy (or text) by accident

    def __repr__(self):
        return f"<traced node {self._i}>"


class _TracedG:
    """Stand-in for the ``L x L x K`` array ``G``: ``G[i, j, k]`` with int indices and
    ``.shape``, nothing else."""

    __array_ufunc__ = None

    def __init__(self, g, L, K):
        self._g, self.shape = g, (L, L, K)

    def __getitem__(self, index):
        if type(index) is not tuple or len(index) != 3 or any(type(i) is not int for i in index):
            raise Untraceable("G indexed other than G[i, j, k] with ints")
        idx = []
        for n, i in zip(self.shape, index):
            if not -n <= i < n:
                raise Untraceable("index out of range")  # the SymPy path names the error
            idx.append(i % n)
        return self._g.node(("G",) + tuple(idx))

    def __getattr__(self, name):
        raise Untraceable(f"G.{name}")

    def __iter__(self):
        raise Untraceable("iteration over G")

    def __len__(self):
        raise Untraceable("len(G)")


def trace_loss(loss, L: int, K: int):
    """The operation graph of ``loss(G)`` as JSON-ready lists, or ``None`` if the loss
    cannot be traced (see the module docstring). Never imports SymPy."""
    if not callable(loss) or type(loss).__module__.split(".")[0] == "sympy":
        return None
    g = _Graph()
    try:
        out = loss(_TracedG(g, L, K))
    except Exception:  # noqa: BLE001 - any failure means: take the SymPy path
        return None
    if type(out) is not _Traced or out._g is not g:
        return None
    return {"nodes": [list(n) for n in g.nodes], "root": out._i}


# -- the key -----------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def code_version() -> str:
    """SHA-256 over the sources that produce a cached potential, and SymPy's version file."""
    import importlib.util
    h = hashlib.sha256()
    here = pathlib.Path(__file__).resolve().parent
    sym = importlib.util.find_spec("attndyn.symbolic")
    files = sorted(pathlib.Path(p) for loc in (sym.submodule_search_locations or [])
                   for p in pathlib.Path(loc).glob("*.py"))
    files += [here / "potcache.py", here / "tied.py"]
    spec = importlib.util.find_spec("sympy")
    if spec is not None and spec.origin:
        files.append(pathlib.Path(spec.origin).parent / "release.py")
    for f in files:
        h.update(f.name.encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


def potential_key(loss, K: int, L: int, C_text: str, params: dict, *, trace=None) -> str | None:
    """The canonical key text of a tied potential, or ``None`` if the loss cannot be traced.
    ``C_text`` is ``"I"`` for the identity, else SymPy's ``srepr`` of ``C``."""
    if trace is None:
        trace = trace_loss(loss, L, K)
    if trace is None:
        return None
    return _key_text({"loss": trace}, K, L, C_text, params)


def potential_key_sympy(expr_srepr: str, K: int, L: int, C_text: str, params: dict) -> str:
    """The key text of an untraceable loss from SymPy's ``srepr`` of ``loss(G)``."""
    return _key_text({"srepr": expr_srepr}, K, L, C_text, params)


def _key_text(loss_part, K, L, C_text, params) -> str:
    return json.dumps({"entry": ENTRY_VERSION, "kind": "tied", "K": int(K), "L": int(L),
                       "C": C_text, "params": [[str(k), float(v).hex()] for k, v in params.items()],
                       **loss_part, "code": code_version()}, sort_keys=True,
                      separators=(",", ":"))


# -- entries -------------------------------------------------------------------------------
class PotentialEntry:
    """What the hierarchy needs from a derived tied potential.

    ``program`` is ``"unknown"`` (not yet made), ``None`` (Gamma is not a polynomial
    program) or the four program arrays of :func:`attndyn.symbolic.hierarchy.gamma_program`.
    """

    def __init__(self, key: str, K: int, route: str, phi_text: str, grad_source: str,
                 program="unknown"):
        self.key, self.K, self.route = key, int(K), route
        self.phi_text, self.grad_source, self.program = phi_text, grad_source, program

    def _meta(self) -> str:
        state = "unknown" if isinstance(self.program, str) else (
            "none" if self.program is None else "arrays")
        return json.dumps({"version": ENTRY_VERSION, "key": self.key, "K": self.K,
                           "route": self.route, "phi": self.phi_text,
                           "grad_source": self.grad_source, "program": state},
                          sort_keys=True)

    def _arrays(self) -> dict:
        if isinstance(self.program, str) or self.program is None:
            return {}
        return {n: np.ascontiguousarray(a, dtype=dt)
                for n, a, dt in zip(_PROGRAM, self.program, _PROGRAM_DTYPES)}


def _digest(meta: str, arrays: dict) -> str:
    h = hashlib.sha256(meta.encode())
    for n in _PROGRAM:
        if n in arrays:
            a = arrays[n]
            h.update(n.encode() + str(a.dtype).encode() + str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def cache_folder():
    """The private folder of potential entries (``None``: do not cache)."""
    try:
        from attndyn.kernels._cachedir import private_dir
    except ImportError:  # pragma: no cover
        return None
    return private_dir("potentials")


def entry_path(folder, key: str) -> pathlib.Path:
    return pathlib.Path(folder) / f"tied_{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def load_entry(key: str, folder=None) -> PotentialEntry | None:
    """The stored entry of ``key``, or ``None`` when missing, damaged or not ours."""
    folder = cache_folder() if folder is None else folder
    if folder is None:
        return None
    path = entry_path(folder, key)
    try:
        if path.stat().st_size > MAX_ENTRY_BYTES:
            return None
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            if not {"meta", "digest"} <= names or not names <= {"meta", "digest", *_PROGRAM}:
                return None
            meta_a, dig_a = z["meta"], z["digest"]
            if meta_a.dtype.kind != "U" or meta_a.shape != () or dig_a.dtype.kind != "U" \
                    or dig_a.shape != ():
                return None
            meta, digest = str(meta_a), str(dig_a)
            arrays = {n: z[n] for n in _PROGRAM if n in names}
        m = json.loads(meta)
    except Exception:  # noqa: BLE001 - missing, truncated, foreign: rebuilt, never trusted
        return None
    try:
        ok = (isinstance(m, dict)
              and set(m) == {"version", "key", "K", "route", "phi", "grad_source", "program"}
              and m["version"] == ENTRY_VERSION and m["key"] == key
              and type(m["K"]) is int and 1 <= m["K"]
              and m["route"] in ("wick", "closed", "hermite")
              and isinstance(m["phi"], str) and isinstance(m["grad_source"], str)
              and "def grad(" in m["grad_source"]
              and m["program"] in ("unknown", "none", "arrays")
              and (len(arrays) == 4) == (m["program"] == "arrays")
              and (m["program"] == "arrays" or not arrays)
              and digest == _digest(meta, arrays))
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        return None
    K = m["K"]
    program = {"unknown": "unknown", "none": None}.get(m["program"])
    if m["program"] == "arrays":
        program = tuple(arrays[n] for n in _PROGRAM)
        for a, dt in zip(program, _PROGRAM_DTYPES):
            if a.dtype != dt or a.ndim != 1:
                return None
        from attndyn.kernels.taylor import check_program
        try:
            check_program(program, K * K, K * K)
        except (TypeError, ValueError):
            return None
    return PotentialEntry(key, K, m["route"], m["phi"], m["grad_source"], program)


def store_entry(entry: PotentialEntry, folder=None) -> bool:
    """Write ``entry`` atomically; ``False`` if it could not be written (caching is an
    optimisation only)."""
    folder = cache_folder() if folder is None else folder
    if folder is None:
        return False
    path = entry_path(folder, entry.key)
    meta = entry._meta()
    arrays = entry._arrays()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.array(meta), digest=np.array(_digest(meta, arrays)), **arrays)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False
