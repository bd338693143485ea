"""Parameter sweeps: a grid of calls, seeded per point, on any executor, resumable.

``sweep(fn, grid)`` calls ``fn(**point)`` (and ``rng=child``, or ``seed=child``, when ``fn``
takes an ``rng`` or a ``seed`` keyword) for every point of a grid, on a local process pool, a ``concurrent.futures``
executor, or a ``dask.distributed`` client. Results come back in grid order, whatever the
scheduling:

- the child seed of point ``i`` is ``SeedSequence(entropy, spawn_key=(..., i))``, the ``i``-th
  child that ``SeedSequence(rng).spawn(n)`` gives: keyed by the grid index, never by the worker;
  the root follows the package's one randomness rule (SPEC 7,
  :func:`attndyn.numeric.core.validate.resolve_rng`): a Generator is a source of entropy and
  advances;
- with ``cache_dir``, each finished point is written as it completes, so an interrupted sweep
  resumes where it stopped, and a finished one reloads without running anything;
- a point that raises records status ``-10`` (:data:`POINT_FAILED`) and the error message, and
  the sweep goes on; a point whose worker process dies (a segfault, an abort, the OOM killer)
  records status ``-11`` (:data:`POINT_CRASHED`), found by running the suspects of a broken
  pool one by one in their own process, and the sweep goes on on a fresh pool. Resuming runs a
  crashed point again, but only in a worker process, never in the caller;
- the stored points are untrusted on reload: each point file carries the point's index,
  parameters and seed, and the SHA-256 of its ``.npz``, checked on load (a file copied over
  another point is refused and recomputed); ``inf`` and ``nan`` round-trip as floats;
- a local pool never forks (spawn context), and a ``fork`` executor is refused once this
  process runs numba's OpenMP threads (GNU libgomp aborts a forked child that uses it);
- ``SIGTERM`` stops the pool's workers before the process ends.

This module lives in the top package because it is glue: it runs public functions of every
layer and knows how to store their results.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import contextlib
import hashlib
import os
import signal
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    from attndyn.numeric.attention.compare import Comparison
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import PathLike, RngLike

# one point's outcome: (status, message, result, error traceback)
_Outcome = tuple[int, str, Any, str]

__all__ = ["sweep", "SweepResult", "load_sweep", "POINT_FAILED", "POINT_CRASHED", "MAX_POINTS"]

POINT_FAILED = -10
POINT_CRASHED = -11
MAX_POINTS = 100_000
_MANIFEST = "sweep.json"
_FORMAT = "attndyn-sweep-1"


# ---------------------------------------------------------------------------
# grid and seeds

def _scalar(value: object, where: str) -> Any:
    """Grid values must be JSON scalars (they key the stored points)."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: grid values must be finite, got {value!r}")
        return value
    if isinstance(value, (list, tuple)):
        return [_scalar(v, where) for v in value]
    raise TypeError(f"{where}: grid values must be numbers, strings, booleans, None or lists "
                    f"of them, got {type(value).__name__}")


def _check_grid(grid: object, zipped: bool, max_points: int
                ) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    if not isinstance(grid, dict) or not grid:
        raise TypeError("grid must be a non-empty dict: parameter name -> list of values")
    axes = {}
    for name, values in grid.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"grid: parameter names must be identifiers, got {name!r}")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"grid[{name!r}] must be a list of values, got {type(values).__name__}")
        vals = [_scalar(v, f"grid[{name!r}]") for v in values]
        if not vals:
            raise ValueError(f"grid[{name!r}] is empty")
        axes[name] = vals
    if zipped:
        lengths = {len(v) for v in axes.values()}
        if len(lengths) != 1:
            raise ValueError(f"zipped grid: every list must have the same length, got "
                             f"{ {k: len(v) for k, v in axes.items()} }")
        n = lengths.pop()
    else:
        n = math.prod(len(v) for v in axes.values())
    if n > max_points:
        raise ValueError(f"grid has {n} points, above max_points = {max_points}; split the sweep "
                         "or raise max_points")
    if zipped:
        points = [dict(zip(axes, vals)) for vals in zip(*axes.values())]
    else:
        points = [dict(zip(axes, vals)) for vals in itertools.product(*axes.values())]
    return axes, points


def _root_seed(rng: RngLike | dict[str, Any] = None, seed: RngLike | dict[str, Any] = None
               ) -> np.random.SeedSequence:
    """The root SeedSequence by the package's rule (:func:`resolve_rng`, SPEC 7), 0 when
    neither ``rng`` nor ``seed`` is given (a sweep is reproducible and resumable by default)."""
    from attndyn.numeric.core.validate import resolve_rng
    return resolve_rng(rng, seed, name="sweep", default=0)


def _child(root: np.random.SeedSequence, i: int) -> np.random.SeedSequence:
    # the i-th child of root.spawn(n), without touching root's spawn counter
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (i,),
                                  pool_size=root.pool_size)


def _seed_record(ss: np.random.SeedSequence) -> dict:
    ent: Any = ss.entropy
    ent = [int(e) for e in ent] if isinstance(ent, (list, tuple, np.ndarray)) else int(ent)
    return {"entropy": ent, "spawn_key": [int(k) for k in ss.spawn_key]}


def _takes_seed(fn: Callable[..., Any]) -> str | None:
    """The keyword that carries a point's child seed: ``"rng"`` when ``fn`` takes it (SPEC 7),
    else ``"seed"`` when it takes that, else ``None``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    for key in ("rng", "seed"):
        p = params.get(key)
        if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return key
    return None


def _fn_id(fn: Callable[..., Any]) -> str:
    sid = getattr(fn, "sweep_id", None)
    if isinstance(sid, str):
        return sid
    mod = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{mod}:{name}"


# ---------------------------------------------------------------------------
# running one point (in a worker)

def _run_point(fn: Callable[..., Any], point: dict[str, Any], seed: np.random.SeedSequence,
               takes_seed: str | None) -> _Outcome:
    """(status, message, result, error_traceback). Exceptions of the point are recorded;
    KeyboardInterrupt and SystemExit are not caught."""
    try:
        res = fn(**point, **{takes_seed: seed}) if takes_seed else fn(**point)
    except Exception as exc:  # noqa: BLE001 - a failed point must not stop the sweep
        return (POINT_FAILED, f"failed: {type(exc).__name__}: {exc}", None,
                traceback.format_exc(limit=20))
    status = getattr(res, "status", 0)
    try:
        status = int(status)
    except (TypeError, ValueError):
        status = 0
    return status, str(getattr(res, "message", "") or ("success" if status == 0 else "")), res, ""


def _init_worker(threads: int) -> None:
    # one BLAS and one numba pool per worker, sized so workers do not oversubscribe the cores;
    # no progress bars of the points themselves (concurrent bars garble one terminal)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["ATTNDYN_PROGRESS"] = "0"
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:  # pragma: no cover
        pass


def _isolated_main(conn: Any, fn: Callable[..., Any], point: dict[str, Any],
                   seed: np.random.SeedSequence, takes_seed: str | None, threads: int) -> None:
    _init_worker(threads)
    out = _run_point(fn, point, seed, takes_seed)
    try:
        conn.send(out)
    except Exception as exc:  # noqa: BLE001 - an unpicklable result
        conn.send((POINT_FAILED, f"failed: the result cannot be sent back from the worker "
                                 f"({type(exc).__name__}: {exc})", None, ""))
    conn.close()


_CHILDREN: set = set()     # isolated point processes alive now (stopped on SIGTERM)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _run_isolated(fn: Callable[..., Any], point: dict[str, Any], seed: np.random.SeedSequence,
                  takes_seed: str | None, threads: int) -> _Outcome:
    """Run one point in its own fresh process (spawn): a point that kills its process is
    recorded as :data:`POINT_CRASHED` instead of taking anything else down."""
    import multiprocessing as mp
    import pickle
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_isolated_main, args=(send, fn, point, seed, takes_seed, threads),
                       daemon=True)
    try:
        proc.start()
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        recv.close()
        send.close()
        return (POINT_FAILED, f"failed: this point crashed its process before and is run again "
                              f"only in a worker, but fn cannot be sent to one "
                              f"({type(exc).__name__}: {exc})", None, "")
    _CHILDREN.add(proc)
    send.close()
    out: _Outcome | None
    try:
        out = recv.recv()
    except (EOFError, OSError):
        out = None
    finally:
        recv.close()
        proc.join()
        _CHILDREN.discard(proc)
    if out is None:
        return (POINT_CRASHED, f"crashed: the worker process died running this point "
                               f"({_exit_text(proc.exitcode)})", None, "")
    return out


# ---------------------------------------------------------------------------
# storing point results (no pickle: a cache folder is untrusted input on reload)

def _codec_of(res: object) -> str | None:
    from attndyn.numeric.core.results import Trajectory
    if isinstance(res, Trajectory):
        return "trajectory"
    if type(res).__name__ == "Comparison" and hasattr(res, "sgd") and hasattr(res, "theory"):
        return "comparison"
    try:
        json.dumps(_plain(res))
        return "json"
    except (TypeError, ValueError):
        return None


def _plain(obj: object) -> Any:
    # inf and nan stay floats: Python's json writes Infinity/NaN and reads them back as floats
    from attndyn.numeric.core.labelled import jsonable
    return jsonable(obj, nonfinite="float")


def _sha256(path: str) -> str:
    from attndyn.numeric.core.safeio import open_regular
    f, _ = open_regular(path, "sweep point file")
    h = hashlib.sha256()
    with f:
        for block in iter(lambda: f.read(2 ** 20), b""):
            h.update(block)
    return h.hexdigest()


def _store_point(cache_dir: str, i: int, point: dict[str, Any], seed_rec: dict[str, Any],
                 status: int, message: str, res: Any) -> dict[str, Any]:
    base = os.path.join(cache_dir, f"point-{i:06d}")
    codec = _codec_of(res) if res is not None else None
    meta = {"index": i, "point": point, "seed": seed_rec, "status": status, "message": message,
            "codec": codec}
    if codec in ("trajectory", "comparison"):
        # written by the result's own save() to a temporary name, synced, then renamed: a
        # kill leaves the old file (the temporary is cleaned when the folder is next opened)
        tmp = os.path.join(cache_dir, f".point-{i:06d}.npz.tmp-{os.getpid()}.npz")
        try:
            tmp = res.save(tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            meta["sha256"] = _sha256(tmp)
            os.replace(tmp, base + ".npz")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    elif codec == "json":
        meta["value"] = _plain(res)
    elif res is not None:
        meta["codec"] = None
        meta["note"] = f"result of type {type(res).__name__} is not storable; recomputed on resume"
    _write_json(base + ".json", meta)
    return meta


def _write_json(path: str, obj: object) -> None:
    from attndyn.numeric.core.safeio import atomic_write_text
    atomic_write_text(path, json.dumps(obj, sort_keys=True))


class _StalePoint(ValueError):
    """A stored point that does not belong where it is (or is unreadable)."""


def _norm(obj: object) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))


def _load_point(cache_dir: str, i: int, point: dict[str, Any] | None = None,
                seed_rec: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The stored record of point ``i`` (``None`` if absent or not storable). With ``point``
    and ``seed_rec``, the record must be theirs; a mismatch or a damaged file raises
    :class:`_StalePoint` naming it."""
    from attndyn.numeric.core.safeio import load_json
    base = os.path.join(cache_dir, f"point-{i:06d}")
    if not os.path.lexists(base + ".json"):
        return None
    try:
        meta = load_json(base + ".json", "sweep point file")
    except (OSError, ValueError) as exc:
        raise _StalePoint(" ".join(str(exc).split())) from None
    if not isinstance(meta, dict) or meta.get("index") != i:
        raise _StalePoint(f"{base}.json is not the record of point {i}")
    if point is not None and (_norm(meta.get("point")) != _norm(point)
                              or _norm(meta.get("seed")) != _norm(seed_rec)):
        raise _StalePoint(f"{base}.json holds the parameters {json.dumps(meta.get('point'))} "
                          f"and seed {json.dumps(meta.get('seed'))}, not those of point {i}")
    status = meta.get("status")
    if isinstance(status, bool) or not isinstance(status, int):
        raise _StalePoint(f"{base}.json has no integer status")
    meta["message"] = str(meta.get("message", ""))
    codec = meta.get("codec")
    try:
        if codec in ("trajectory", "comparison"):
            if _sha256(base + ".npz") != meta.get("sha256"):
                raise _StalePoint(f"{base}.npz is not the file stored with point {i} "
                                  "(its SHA-256 differs)")
            if codec == "trajectory":
                from attndyn.numeric.core.results import load_result
                meta["result"] = load_result(base + ".npz")
            else:
                meta["result"] = _load_comparison(base + ".npz")
        elif codec == "json":
            meta["result"] = meta.get("value")
        elif status in (POINT_FAILED, POINT_CRASHED):
            meta["result"] = None
        else:
            return None  # not storable: recompute
    except _StalePoint:
        raise
    except (OSError, ValueError) as exc:
        raise _StalePoint(" ".join(str(exc).split())) from None
    return meta


def _load_comparison(path: str) -> Comparison:
    from attndyn.numeric.attention.compare import load_comparison
    return load_comparison(path)


# markers of the points run in the calling process: a marker left behind means that the
# process died running that point, which a resume then runs only in a worker process


def _marker(cache_dir: str, i: int) -> str:
    return os.path.join(cache_dir, f"point-{i:06d}.running")


# ---------------------------------------------------------------------------
# the result

@dataclass
class SweepResult:
    """The outcome of :func:`sweep`, in grid order.

    Attributes
    ----------
    grid : dict
        Parameter name -> list of values, as swept.
    zipped : bool
        ``True`` when the lists were zipped, ``False`` for their product.
    points : list of dict
        The keyword arguments of each call.
    results : list
        What each call returned (``None`` for a failed point).
    status, messages : list
        Per point: the result's own ``status``/``message`` when it has them (0/"success"
        otherwise), or :data:`POINT_FAILED` and the error.
    seeds : list of dict
        Per point, the child ``SeedSequence`` as ``{"entropy", "spawn_key"}``.
    params : dict
        ``function`` (``module:qualname``), ``seed`` (the root), ``n_points``.

    Examples
    --------
    >>> import attndyn
    >>> def power(x, p):
    ...     return x ** p
    >>> res = attndyn.sweep(power, {"x": [2, 3], "p": [1, 2]}, executor="serial", progress=False)
    >>> res.points[1], res.results, res.status
    ({'x': 2, 'p': 2}, [2, 4, 3, 9], [0, 0, 0, 0])
    """

    grid: dict
    zipped: bool
    points: list
    results: list
    status: list
    messages: list
    seeds: list
    params: dict = field(default_factory=dict)
    tracebacks: list = field(default_factory=list)

    @property
    def success(self) -> bool:
        return all(s == 0 for s in self.status)

    @property
    def failed(self) -> list:
        """Indices of the points whose status is not 0."""
        return [i for i, s in enumerate(self.status) if s != 0]

    def __len__(self) -> int:
        return len(self.points)

    def __repr__(self) -> str:
        return (f"SweepResult(n_points={len(self.points)}, axes={list(self.grid)}, "
                f"failed={len(self.failed)})")

    def _repr_html_(self) -> str:
        import html
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(json.dumps(p))}</td><td>{s}</td>"
            f"<td>{html.escape(m[:120])}</td></tr>"
            for i, (p, s, m) in enumerate(zip(self.points[:50], self.status, self.messages)))
        more = f"<p>... {len(self.points) - 50} more points</p>" if len(self.points) > 50 else ""
        return (f"<p><b>SweepResult</b>: {len(self.points)} points over {list(self.grid)}, "
                f"{len(self.failed)} failed</p><table><tr><th>#</th><th>point</th>"
                f"<th>status</th><th>message</th></tr>{rows}</table>{more}")

    def to_pandas(self) -> Any:
        """One row per point: the parameters, ``status``, ``message``, and the scalar entries
        of each result (a number, a dict of numbers, or a Comparison's ``max_abs`` errors)."""
        import pandas as pd
        rows = []
        for p, s, m, r in zip(self.points, self.status, self.messages, self.results):
            row = dict(p)
            row.update(status=s, message=m)
            row.update(_scalars(r))
            rows.append(row)
        return pd.DataFrame(rows)

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` over the sweep's parameters.

        Product grids give one dimension per parameter; zipped grids one dimension ``point``
        with the parameters as coordinates. Trajectories add ``(observable, time)``,
        Comparisons add ``sgd`` and ``theory`` over ``(observable, time)`` and ``max_abs`` over
        ``observable``; numbers and dicts of numbers give one variable each. ``status`` and
        ``message`` are variables over the grid. Failed points are NaN.
        """
        from attndyn.numeric.core.labelled import dataset_attrs, require_xarray
        xr = require_xarray()
        if self.zipped:
            gdims = ["point"]
            gshape = [len(self.points)]
            coords: dict[str, Any] = {k: ("point", _coord(v)) for k, v in self.grid.items()}
        else:
            gdims = list(self.grid)
            gshape = [len(v) for v in self.grid.values()]
            coords = {k: _coord(v) for k, v in self.grid.items()}
        data = {"status": (gdims, np.array(self.status, dtype=np.int64).reshape(gshape)),
                "message": (gdims, np.array(self.messages, dtype=str).reshape(gshape))}
        ok = [r for r in self.results if r is not None]
        kinds = {_codec_of(r) for r in ok}
        if ok and len(kinds) == 1 and kinds <= {"trajectory", "comparison"}:
            t = np.asarray(ok[0].t)
            if all(np.array_equal(np.asarray(r.t), t) for r in ok):
                # the union of the observables, in order of first appearance; NaN where absent
                names = list(dict.fromkeys(n for r in ok for n in r.names))
                coords.update(observable=np.array(names), time=t)
                variables = ([("value", lambda r: r)] if kinds == {"trajectory"} else
                             [("sgd", lambda r: r.sgd), ("theory", lambda r: r.theory)])
                for var, get in variables:
                    data[var] = (gdims + ["observable", "time"], _stack(
                        [None if r is None else _rows(get(r), names) for r in self.results],
                        (len(names), t.size), gshape))
                if kinds == {"comparison"}:
                    data["max_abs"] = (gdims + ["observable"], _stack(
                        [None if r is None else np.array(
                            [r.errors.get(n, {}).get("max_abs", np.nan) for n in names])
                         for r in self.results], (len(names),), gshape))
        elif ok and kinds == {"json"}:
            keys = sorted({k for r in self.results for k in _scalars(r)})
            for k in keys:
                vals = [_scalars(r).get(k, np.nan) for r in self.results]
                data[k] = (gdims, np.array(vals, dtype=np.float64).reshape(gshape))
        attrs = dataset_attrs(function=self.params.get("function", ""),
                              seed=self.params.get("seed"), zipped=int(self.zipped),
                              grid=self.grid, format=_FORMAT)
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def save(self, path: PathLike) -> str:
        """Write the sweep to the folder ``path`` (the same layout as ``cache_dir``)."""
        path = str(path)
        os.makedirs(path, exist_ok=True)
        _write_manifest(path, self.params["function"], self.grid, self.zipped,
                        self.params["seed"], check=False)
        for i, (p, s, m, r) in enumerate(zip(self.points, self.status, self.messages,
                                              self.results)):
            _store_point(path, i, p, self.seeds[i], s, m, r)
        return path


def _coord(values: Sequence[Any]) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except ValueError:
        arr = np.array([json.dumps(v) for v in values])
    if arr.dtype == object or arr.ndim != 1:
        arr = np.array([json.dumps(v) for v in values])
    return arr


def _rows(traj: Trajectory, names: Sequence[str]) -> np.ndarray:
    """The rows of ``traj.y`` in ``names`` order, NaN for the names it lacks."""
    index = {n: i for i, n in enumerate(traj.names)}
    out = np.full((len(names), np.asarray(traj.y).shape[1]), np.nan)
    for j, n in enumerate(names):
        if n in index:
            out[j] = traj.y[index[n]]
    return out


def _stack(items: Sequence[Any], inner: Sequence[int], gshape: Sequence[int]) -> np.ndarray:
    out = np.full((len(items),) + tuple(inner), np.nan)
    for i, a in enumerate(items):
        if a is not None:
            out[i] = a
    return out.reshape(tuple(gshape) + tuple(inner))


def _scalars(r: object) -> dict[str, float]:
    if r is None:
        return {}
    if isinstance(r, (bool, int, float, np.integer, np.floating)):
        return {"value": float(r)}
    if isinstance(r, dict):
        return {str(k): float(v) for k, v in r.items()
                if isinstance(v, (bool, int, float, np.integer, np.floating))}
    errors = getattr(r, "errors", None)
    if isinstance(errors, dict):
        return {f"max_abs_{n}": float(e["max_abs"]) for n, e in errors.items()
                if isinstance(e, dict) and "max_abs" in e}
    return {}


# ---------------------------------------------------------------------------
# manifest (guards against resuming a different sweep from the same folder)

def _write_manifest(cache_dir: str, fn_id: str, grid: dict[str, list[Any]], zipped: bool,
                    seed_rec: dict[str, Any], check: bool = True) -> None:
    from attndyn.numeric.core.safeio import load_json
    path = os.path.join(cache_dir, _MANIFEST)
    man = {"format": _FORMAT, "function": fn_id, "grid": grid, "zipped": bool(zipped),
           "seed": seed_rec}
    if check and os.path.lexists(path):
        try:
            old = load_json(path, f"cache_dir {cache_dir}: {_MANIFEST}")
        except OSError as exc:
            raise ValueError(f"cache_dir {cache_dir}: unreadable {_MANIFEST} ({exc})") from None
        if old != _norm(man):
            raise ValueError(f"cache_dir {cache_dir} holds a different sweep (function, grid or "
                             "seed differ); use another folder or delete it")
        return
    _write_json(path, man)


def load_sweep(path: PathLike) -> SweepResult:
    """Load a sweep written by :meth:`SweepResult.save` or as a ``cache_dir``. Points not
    (yet) computed, damaged, or stored under another point's name raise ValueError.

    Examples
    --------
    >>> import os, tempfile, attndyn
    >>> def square(x):
    ...     return x * x
    >>> res = attndyn.sweep(square, {"x": [1, 2]}, executor="serial", progress=False)
    >>> back = attndyn.load_sweep(res.save(os.path.join(tempfile.mkdtemp(), "s.sweep")))
    >>> back.results, back.grid
    ([1, 4], {'x': [1, 2]})
    """
    from attndyn.numeric.core.safeio import load_json
    path = os.fspath(path)
    what = "not a valid attndyn sweep folder:"
    try:
        man = load_json(os.path.join(path, _MANIFEST), f"{what} {path}:")
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc}") from None
    if not isinstance(man, dict) or man.get("format") != _FORMAT:
        raise ValueError(f"{what} {path}: wrong format tag")
    try:
        axes, points = _check_grid(man["grid"], man["zipped"], MAX_POINTS)
        root = _root_seed(np.random.SeedSequence(man["seed"]["entropy"], spawn_key=tuple(
            man["seed"].get("spawn_key", ()))))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{what} {path}: bad manifest ({type(exc).__name__}: {exc})") from None
    out: dict[str, list] = {k: [] for k in ("results", "status", "messages", "seeds")}
    for i in range(len(points)):
        seed_rec = _seed_record(_child(root, i))
        try:
            meta = _load_point(path, i, points[i], seed_rec)
        except _StalePoint as exc:
            raise ValueError(f"sweep folder {path}: point {i}: {exc}; resume it with "
                             "sweep(..., cache_dir=path) to recompute it") from None
        if meta is None:
            raise ValueError(f"sweep folder {path}: point {i} was not computed; resume it with "
                             "sweep(..., cache_dir=path)")
        out["results"].append(meta["result"])
        out["status"].append(int(meta["status"]))
        out["messages"].append(meta["message"])
        out["seeds"].append(meta["seed"])
    return SweepResult(grid=axes, zipped=bool(man["zipped"]), points=points,
                       params={"function": man["function"], "seed": man["seed"],
                               "n_points": len(points)}, **out)


# ---------------------------------------------------------------------------
# the driver

_STALE_TMP_S = 60.0   # temporaries of killed writers older than this are removed on open


@contextlib.contextmanager
def _suppress_oserror() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


@contextlib.contextmanager
def _quiet_points(quiet: bool) -> Iterator[None]:
    """With ``quiet``, the points run in this process draw no progress bars of their own."""
    if not quiet:
        yield
        return
    old = os.environ.get("ATTNDYN_PROGRESS")
    os.environ["ATTNDYN_PROGRESS"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ATTNDYN_PROGRESS", None)
        else:
            os.environ["ATTNDYN_PROGRESS"] = old


def _omp_started() -> bool:
    """Whether this process has started numba's GNU OpenMP threading layer (a forked child
    that uses it aborts: "fork() called from a process already using GNU OpenMP")."""
    par = sys.modules.get("numba.np.ufunc.parallel")
    return bool(par is not None and getattr(par, "_is_initialized", False)
                and getattr(par, "_threading_layer", None) == "omp")


def _forks(executor: object) -> bool:
    """Whether ``executor`` is a process pool that starts its workers with fork."""
    import concurrent.futures as cf
    if not isinstance(executor, cf.ProcessPoolExecutor):
        return False
    ctx = getattr(executor, "_mp_context", None)
    if ctx is None:
        import multiprocessing as mp
        ctx = mp.get_context()
    return ctx.get_start_method() == "fork"


def _broken_pool_errors() -> tuple[type[BaseException], ...]:
    from concurrent.futures import BrokenExecutor
    return (BrokenExecutor,)


class _Pools:
    """The local process pools of one sweep (spawn: never a fork of this process, which may
    run BLAS and numba threads), so that they are all stopped on exit or SIGTERM."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.live: list[Any] = []

    def new(self, workers: int) -> Any:
        import concurrent.futures as cf
        import multiprocessing as mp
        pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                      initializer=_init_worker, initargs=(self.threads,))
        self.live.append(pool)
        return pool

    def close(self, pool: Any, kill: bool = False) -> None:
        if kill:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                with _suppress_oserror():
                    proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        if pool in self.live:
            self.live.remove(pool)

    def close_all(self, kill: bool = False) -> None:
        for pool in list(self.live):
            self.close(pool, kill=kill)
        if kill:
            for proc in list(_CHILDREN):
                with _suppress_oserror():
                    proc.terminate()


class _Terminated(BaseException):
    """SIGTERM arrived during a sweep: unwinds through the cleanup, then the signal is
    delivered again with its previous handler."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def _trap_sigterm() -> Any:
    """Catch SIGTERM while the sweep runs (main thread, default handler only), so that its
    worker processes are stopped before the process ends."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None  # somebody else's handler: leave it alone
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no SIGTERM here
        return None
    return signal.SIG_DFL


def _restore_sigterm(old: Any, terminated: bool) -> None:
    if old is None:
        return
    signal.signal(signal.SIGTERM, old)
    if terminated:
        signal.raise_signal(signal.SIGTERM)  # end as SIGTERM would have ended us


def _as_completed(futures: Sequence[Any]) -> Iterator[Any]:
    """Yield futures as they finish: concurrent.futures, dask.distributed, or in order."""
    import concurrent.futures as cf
    if all(isinstance(f, cf.Future) for f in futures):
        yield from cf.as_completed(futures)
        return
    try:
        from distributed import Future as DFuture
        from distributed import as_completed as das
        if all(isinstance(f, DFuture) for f in futures):
            yield from das(futures)
            return
    except ImportError:  # pragma: no cover
        pass
    yield from futures


def sweep(fn: Callable[..., Any], grid: dict[str, Any], *, rng: RngLike | dict = None,
          seed: RngLike | dict = None, zipped: bool = False, executor: Any = None,
          cache_dir: PathLike | None = None, workers: int | None = None, threads: int | None = None,
          warm: bool = True, progress: bool | None = None,
          max_points: int = MAX_POINTS) -> SweepResult:
    """Call ``fn`` at every point of ``grid`` and collect the results in grid order.

    Parameters
    ----------
    fn : callable
        Called as ``fn(**point, rng=child)`` when it takes an ``rng`` keyword,
        ``fn(**point, seed=child)`` when it takes a ``seed`` keyword, else ``fn(**point)``.
        For a process pool or a dask cluster it must be picklable (a module-level function).
    grid : dict
        Parameter name -> list of values (numbers, strings, booleans, None or lists).
    rng : int, sequence of ints, SeedSequence, Generator or seed dict; default 0
        Root of the per-point seeds: point ``i`` gets the ``i``-th child, as
        ``SeedSequence(rng).spawn(n)[i]``. The package's one rule (SPEC 7,
        :func:`~attndyn.numeric.core.validate.resolve_rng`): the same int gives the same
        sweep; a Generator is a source of entropy and advances, so the same Generator object
        twice gives two different sweeps (resume one with the root recorded in
        ``result.params["seed"]``, which a dict ``rng`` takes back).
    seed : the same, optional
        The older name of ``rng``; passing both is an error.
    zipped : bool
        Zip the lists (equal lengths) instead of taking their product.
    executor : None, "serial", or an object with ``submit``
        ``None``: a local process pool of ``workers`` processes (default: the cores), with
        ``threads`` BLAS and numba threads each (default: cores // workers). ``"serial"``: in
        this process. Anything with ``submit(fn, *args)`` returning futures with
        ``result()``: a ``concurrent.futures`` executor or a ``dask.distributed.Client``.
        A ``ProcessPoolExecutor`` that forks is refused once this process runs numba's GNU
        OpenMP threads (its workers would abort), and gets no warm-up point here (that would
        start them). A worker that dies marks its point :data:`POINT_CRASHED` (found by
        rerunning the suspects one by one in their own process), and the other points go on
        (on a fresh local pool when the executor's pool broke).
    cache_dir : path, optional
        Store every finished point there as it completes and skip the points already stored:
        an interrupted sweep resumes. The folder remembers the function's name (or its
        ``sweep_id`` attribute), the grid and the seed, and refuses a different sweep; a
        changed function body under the same name is not detected.
    warm : bool
        Run the first pending point in this process before fanning out, so numba's disk
        caches are written once, not concurrently by every worker. A point that killed a
        process before (recorded as crashed, or left running by a process that died) is never
        run in this process: only in a worker.
    progress : bool or None
        A tqdm bar over points; ``None`` shows it only on a terminal. The points draw no
        bars of their own in workers, nor in this process with ``progress=False``.
    max_points : int
        Refuse grids larger than this.

    Returns
    -------
    SweepResult

    Examples
    --------
    >>> import attndyn
    >>> def square(x):
    ...     return x * x
    >>> res = attndyn.sweep(square, {"x": [1, 2, 3]}, executor="serial", progress=False)
    >>> res.results, res.success
    ([1, 4, 9], True)
    """
    _check_call(fn, max_points, executor)
    axes, points = _check_grid(grid, bool(zipped), int(max_points))
    root_rec, children, seed_recs, takes_seed = _point_seeds(fn, axes, rng, seed, len(points))
    n = len(points)
    fid = _fn_id(fn)
    cores = os.cpu_count() or 1
    forks = _check_pool(workers, threads, executor)

    status: list[Any] = [None] * n
    messages = [""] * n
    results: list[Any] = [None] * n
    tbs = [""] * n
    isolate = set()     # points that killed a process before: run only in a worker process
    if cache_dir is not None:
        cache_dir = os.fspath(cache_dir)
        isolate = _resume(cache_dir, fid, axes, bool(zipped), root_rec, points, seed_recs,
                          results, status, messages)
    pending = [i for i in range(n) if status[i] is None]

    from tqdm.auto import tqdm
    bar = tqdm(total=n, initial=n - len(pending), desc="sweep", unit="point",
               disable=None if progress is None else not progress)
    nw = min(workers or cores, max(len(pending), 1))
    nt = threads or max(1, cores // nw)

    def finish(i: int, out: _Outcome) -> None:
        s, m, r, tb = out
        status[i], messages[i], results[i], tbs[i] = s, m, r, tb
        if cache_dir is not None:
            _store_point(cache_dir, i, points[i], seed_recs[i], s, m, r)
        bar.update(1)

    def in_process(i: int) -> None:
        marker = _marker(cache_dir, i) if cache_dir is not None else None
        finish(i, _run_here(fn, points[i], children[i], takes_seed, marker, progress is False))

    def isolated(i: int) -> None:
        finish(i, _run_isolated(fn, points[i], children[i], takes_seed, nt))

    pools = _Pools(nt)
    old_term = _trap_sigterm()
    failing = None
    try:
        for i in [i for i in pending if i in isolate]:
            isolated(i)
        pending = [i for i in pending if i not in isolate]
        if executor == "serial" or (executor is None and (len(pending) <= 1 or cores == 1)):
            for i in pending:
                in_process(i)
            pending = []
        if pending and warm and not forks:
            # (a fork executor forks its workers from this process after this point ran:
            # with numba's OpenMP threads started here they would abort, so no warm-up)
            in_process(pending.pop(0))
        if pending:
            _fan_out(executor, pending, fn, points, children, takes_seed, nw, pools, finish,
                     isolated, status)
    except BaseException as exc:
        failing = exc
        raise
    finally:
        bar.close()
        pools.close_all(kill=failing is not None)   # Ctrl-C, SIGTERM: stop, do not wait
        _restore_sigterm(old_term, isinstance(failing, _Terminated))
    return _sweep_result(axes, bool(zipped), points, results, status, messages, seed_recs,
                         fid, root_rec, tbs)


def _point_seeds(fn: Callable[..., Any], axes: dict[str, list[Any]],
                 rng: RngLike | dict[str, Any], seed: RngLike | dict[str, Any], n: int
                 ) -> tuple[dict[str, Any], list[np.random.SeedSequence],
                            list[dict[str, Any]], str | None]:
    """The root seed's record, the points' child seeds and records, and fn's seed keyword."""
    root = _root_seed(rng, seed)
    root_rec = _seed_record(root)
    children = [_child(root, i) for i in range(n)]
    seed_recs = [_seed_record(c) for c in children]
    takes_seed = _takes_seed(fn)
    if takes_seed and takes_seed in axes:
        raise ValueError(f"grid has an axis named {takes_seed!r} and fn takes a {takes_seed} "
                         "keyword: rename the axis (each point gets its own child seed)")
    return root_rec, children, seed_recs, takes_seed


def _run_here(fn: Callable[..., Any], point: dict[str, Any], child: np.random.SeedSequence,
              takes_seed: str | None, marker: str | None, quiet: bool) -> _Outcome:
    """Run one point in this process, with ``marker`` on disk while it runs."""
    # the marker: if the point kills this process, a resume knows and runs it in a worker
    if marker is not None:
        open(marker, "w").close()
    try:
        with _quiet_points(quiet):
            return _run_point(fn, point, child, takes_seed)
    finally:
        if marker is not None:
            with _suppress_oserror():
                os.unlink(marker)


def _check_call(fn: object, max_points: object, executor: object) -> None:
    """The first checks of :func:`sweep`: ``fn``, ``max_points`` and ``executor``."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if (isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer))
            or max_points < 1):
        raise ValueError(f"max_points must be an int >= 1, got {max_points!r}")
    if not (executor is None or executor == "serial"
            or callable(getattr(executor, "submit", None))):
        raise TypeError("executor must be None, 'serial' or an object with submit() "
                        "(concurrent.futures executor, dask Client); got "
                        f"{type(executor).__name__}")


def _check_pool(workers: object, threads: object, executor: object) -> bool:
    """The checks of ``workers`` and ``threads`` and of a fork executor; whether it forks."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")

    forks = _forks(executor)
    if forks and _omp_started():
        raise ValueError(
            "executor starts its workers with fork, but this process already runs numba's "
            "GNU OpenMP threads, and a forked worker that runs a parallel kernel aborts; pass "
            "a ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')) (or "
            "'forkserver'), or executor=None for the default spawn pool (with the tbb package "
            "installed, numba picks its fork-safe TBB layer instead)")
    return forks


def _resume(cache_dir: str, fid: str, axes: dict[str, list[Any]], zipped: bool,
            root_rec: dict[str, Any], points: list[dict[str, Any]],
            seed_recs: list[dict[str, Any]], results: list[Any], status: list[int],
            messages: list[str]) -> set[int]:
    """Check ``cache_dir``'s manifest and fill in its stored points; the points to isolate."""
    from attndyn.numeric.core.safeio import clean_stale_temporaries
    os.makedirs(cache_dir, exist_ok=True)
    _write_manifest(cache_dir, fid, axes, zipped, root_rec)
    clean_stale_temporaries(cache_dir, older_than=_STALE_TMP_S)
    isolate = set()
    for i in range(len(points)):
        try:
            meta = _load_point(cache_dir, i, points[i], seed_recs[i])
        except _StalePoint as exc:
            warnings.warn(f"sweep: cache_dir {cache_dir}: point {i}: {exc}; recomputing it",
                          RuntimeWarning, stacklevel=3)
            meta = None
        if meta is not None and meta["status"] == POINT_CRASHED:
            isolate.add(i)      # run again, in a worker
        elif meta is not None:
            results[i], status[i], messages[i] = meta["result"], meta["status"], meta["message"]
        if os.path.lexists(_marker(cache_dir, i)):
            if status[i] is None:
                isolate.add(i)  # this process died running it in the caller
            with _suppress_oserror():
                os.unlink(_marker(cache_dir, i))
    return isolate


def _fan_out(executor: Any, pending: list[int], fn: Callable[..., Any],
             points: list[dict[str, Any]], children: list[np.random.SeedSequence],
             takes_seed: str | None, nw: int, pools: _Pools,
             finish: Callable[[int, _Outcome], None], isolated: Callable[[int], None],
             status: list[int]) -> None:
    """Run the pending points on ``executor`` (a local pool when None), surviving dead workers."""
    own = executor is None
    if own:
        executor = pools.new(min(nw, len(pending)))
    while pending:
        futs = {executor.submit(_run_point, fn, points[i], children[i], takes_seed): i
                for i in pending}
        broken = []
        for fut in _as_completed(list(futs)):
            i = futs[fut]
            try:
                out = fut.result()
            except _broken_pool_errors():
                broken.append(i)
                continue
            except Exception as exc:  # noqa: BLE001 - dask's KilledWorker, lost futures
                out = (POINT_CRASHED, f"crashed: the worker running this point was lost "
                                      f"({type(exc).__name__}: {exc})", None, "")
            finish(i, out)
        if not broken:
            break
        # a worker process died: the points it may have been running are the first
        # workers + 1 unfinished ones in submission order (the pool's call queue);
        # each runs alone in its own process, the rest on a fresh pool
        order = {i: k for k, i in enumerate(pending)}
        broken.sort(key=order.__getitem__)
        width = getattr(executor, "_max_workers", nw)
        pools.close(executor, kill=True)
        for i in broken[:width + 1]:
            isolated(i)
        pending = [i for i in broken if status[i] is None]
        if pending:
            if not own:
                warnings.warn("sweep: the executor's process pool broke (a worker "
                              "died); the remaining points run on a local spawn pool",
                              RuntimeWarning, stacklevel=3)
                own = True
            executor = pools.new(min(width, len(pending)))


def _sweep_result(axes: dict[str, list[Any]], zipped: bool, points: list[dict[str, Any]],
                  results: list[Any], status: list[int], messages: list[str],
                  seed_recs: list[dict[str, Any]], fid: str, root_rec: dict[str, Any],
                  tbs: list[str]) -> SweepResult:
    """The :class:`SweepResult`, with one warning when points failed."""
    n = len(points)
    failed = sum(1 for s in status if s in (POINT_FAILED, POINT_CRASHED))
    if failed:
        crashed = sum(1 for s in status if s == POINT_CRASHED)
        extra = f", {crashed} of them by killing their worker process" if crashed else ""
        warnings.warn(f"sweep: {failed} of {n} points failed{extra} (see .messages)",
                      RuntimeWarning, stacklevel=3)
    return SweepResult(grid=axes, zipped=zipped, points=points, results=results,
                       status=[int(s) for s in status], messages=messages, seeds=seed_recs,
                       params={"function": fid, "seed": root_rec, "n_points": n},
                       tracebacks=tbs)
