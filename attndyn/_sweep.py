"""Parameter sweeps: a grid of calls, seeded per point, on any executor, resumable.

``sweep(fn, grid)`` calls ``fn(**point)`` (and ``seed=child`` when ``fn`` takes a ``seed``
keyword) for every point of a grid, on a local process pool, a ``concurrent.futures``
executor, or a ``dask.distributed`` client. Results come back in grid order, whatever the
scheduling:

- the child seed of point ``i`` is ``SeedSequence(entropy, spawn_key=(..., i))``, the ``i``-th
  child that ``SeedSequence(seed).spawn(n)`` gives: keyed by the grid index, never by the worker;
- with ``cache_dir``, each finished point is written as it completes, so an interrupted sweep
  resumes where it stopped, and a finished one reloads without running anything;
- a point that raises records status ``-10`` and the error message, and the sweep goes on.

This module lives in the top package because it is glue: it runs public functions of every
layer and knows how to store their results.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import os
import tempfile
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["sweep", "SweepResult", "load_sweep", "POINT_FAILED", "MAX_POINTS"]

POINT_FAILED = -10
MAX_POINTS = 100_000
_MANIFEST = "sweep.json"
_FORMAT = "attndyn-sweep-1"


# ---------------------------------------------------------------------------
# grid and seeds

def _scalar(value, where):
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


def _check_grid(grid, zipped, max_points):
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


def _root_seed(seed) -> np.random.SeedSequence:
    """int, sequence of ints, SeedSequence or Generator (its seed sequence) -> SeedSequence."""
    if isinstance(seed, np.random.Generator):
        ss = getattr(seed.bit_generator, "seed_seq", None) or seed.bit_generator._seed_seq
        return ss
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if seed is None:
        raise TypeError("seed must be given (an int, a SeedSequence or a Generator): a sweep "
                        "with fresh entropy could not resume")
    if isinstance(seed, (bool, float)):
        raise TypeError(f"seed must be an int >= 0, a SeedSequence or a Generator, got {seed!r}")
    try:
        return np.random.SeedSequence(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid seed {seed!r}: {exc}") from None


def _child(root: np.random.SeedSequence, i: int) -> np.random.SeedSequence:
    # the i-th child of root.spawn(n), without touching root's spawn counter
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (i,),
                                  pool_size=root.pool_size)


def _seed_record(ss: np.random.SeedSequence) -> dict:
    ent = ss.entropy
    ent = [int(e) for e in ent] if isinstance(ent, (list, tuple, np.ndarray)) else int(ent)
    return {"entropy": ent, "spawn_key": [int(k) for k in ss.spawn_key]}


def _takes_seed(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    p = params.get("seed")
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def _fn_id(fn) -> str:
    sid = getattr(fn, "sweep_id", None)
    if isinstance(sid, str):
        return sid
    mod = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{mod}:{name}"


# ---------------------------------------------------------------------------
# running one point (in a worker)

def _run_point(fn, point, seed, takes_seed):
    """(status, message, result, error_traceback). Exceptions of the point are recorded;
    KeyboardInterrupt and SystemExit are not caught."""
    try:
        res = fn(**point, seed=seed) if takes_seed else fn(**point)
    except Exception as exc:  # noqa: BLE001 - a failed point must not stop the sweep
        return (POINT_FAILED, f"failed: {type(exc).__name__}: {exc}", None,
                traceback.format_exc(limit=20))
    status = getattr(res, "status", 0)
    try:
        status = int(status)
    except (TypeError, ValueError):
        status = 0
    return status, str(getattr(res, "message", "") or ("success" if status == 0 else "")), res, ""


def _init_worker(threads):
    # one BLAS and one numba pool per worker, sized so workers do not oversubscribe the cores
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(threads)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:  # pragma: no cover
        pass


# ---------------------------------------------------------------------------
# storing point results (no pickle: a cache folder is untrusted input on reload)

def _codec_of(res) -> str | None:
    from attndyn.numeric.core.results import Trajectory
    if isinstance(res, Trajectory):
        return "trajectory"
    if type(res).__name__ == "Comparison" and hasattr(res, "sgd") and hasattr(res, "theory"):
        return "comparison"
    try:
        json.dumps(_plain(res), allow_nan=False)
        return "json"
    except (TypeError, ValueError):
        return None


def _plain(obj):
    from attndyn.numeric.core.labelled import jsonable
    out = jsonable(obj)
    if isinstance(out, float) and not math.isfinite(out):
        raise ValueError("non-finite")
    return out


def _atomic_write(path, write):
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _store_point(cache_dir, i, point, seed_rec, status, message, res):
    base = os.path.join(cache_dir, f"point-{i:06d}")
    codec = _codec_of(res) if res is not None else None
    meta = {"index": i, "point": point, "seed": seed_rec, "status": status, "message": message,
            "codec": codec}
    if codec == "trajectory":
        _atomic_write(base + ".npz", lambda p: res.save(p))
    elif codec == "comparison":
        _atomic_write(base + ".npz", lambda p: res.save(p))
    elif codec == "json":
        meta["value"] = _plain(res)
    elif res is not None:
        meta["codec"] = None
        meta["note"] = f"result of type {type(res).__name__} is not storable; recomputed on resume"
    _atomic_write(base + ".json", lambda p: _write_json(p, meta))
    return meta


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, sort_keys=True)


def _load_point(cache_dir, i):
    base = os.path.join(cache_dir, f"point-{i:06d}")
    try:
        with open(base + ".json") as f:
            meta = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cache_dir {cache_dir}: point {i} is unreadable ({exc}); delete "
                         f"{base}.json to recompute it") from None
    codec = meta.get("codec")
    if codec == "trajectory":
        from attndyn.numeric.core.results import load_result
        meta["result"] = load_result(base + ".npz")
    elif codec == "comparison":
        meta["result"] = _load_comparison(base + ".npz")
    elif codec == "json":
        meta["result"] = meta.get("value")
    elif meta.get("status") == POINT_FAILED:
        meta["result"] = None
    else:
        return None  # not storable: recompute
    return meta


def _load_comparison(path):
    from attndyn.numeric.attention.compare import load_comparison
    return load_comparison(path)


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

    def __len__(self):
        return len(self.points)

    def __repr__(self):
        return (f"SweepResult(n_points={len(self.points)}, axes={list(self.grid)}, "
                f"failed={len(self.failed)})")

    def _repr_html_(self):
        import html
        rows = "".join(
            f"<tr><td>{i}</td><td>{html.escape(json.dumps(p))}</td><td>{s}</td>"
            f"<td>{html.escape(m[:120])}</td></tr>"
            for i, (p, s, m) in enumerate(zip(self.points[:50], self.status, self.messages)))
        more = f"<p>... {len(self.points) - 50} more points</p>" if len(self.points) > 50 else ""
        return (f"<p><b>SweepResult</b>: {len(self.points)} points over {list(self.grid)}, "
                f"{len(self.failed)} failed</p><table><tr><th>#</th><th>point</th>"
                f"<th>status</th><th>message</th></tr>{rows}</table>{more}")

    def to_pandas(self):
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

    def to_xarray(self):
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
            coords = {k: ("point", _coord(v)) for k, v in self.grid.items()}
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

    def save(self, path) -> str:
        """Write the sweep to the folder ``path`` (the same layout as ``cache_dir``)."""
        path = str(path)
        os.makedirs(path, exist_ok=True)
        _write_manifest(path, self.params["function"], self.grid, self.zipped,
                        self.params["seed"], check=False)
        for i, (p, s, m, r) in enumerate(zip(self.points, self.status, self.messages,
                                              self.results)):
            _store_point(path, i, p, self.seeds[i], s, m, r)
        return path


def _coord(values):
    try:
        arr = np.asarray(values)
    except ValueError:
        arr = np.array([json.dumps(v) for v in values])
    if arr.dtype == object or arr.ndim != 1:
        arr = np.array([json.dumps(v) for v in values])
    return arr


def _rows(traj, names):
    """The rows of ``traj.y`` in ``names`` order, NaN for the names it lacks."""
    index = {n: i for i, n in enumerate(traj.names)}
    out = np.full((len(names), np.asarray(traj.y).shape[1]), np.nan)
    for j, n in enumerate(names):
        if n in index:
            out[j] = traj.y[index[n]]
    return out


def _stack(items, inner, gshape):
    out = np.full((len(items),) + tuple(inner), np.nan)
    for i, a in enumerate(items):
        if a is not None:
            out[i] = a
    return out.reshape(tuple(gshape) + tuple(inner))


def _scalars(r) -> dict:
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

def _write_manifest(cache_dir, fn_id, grid, zipped, seed_rec, check=True):
    path = os.path.join(cache_dir, _MANIFEST)
    man = {"format": _FORMAT, "function": fn_id, "grid": grid, "zipped": bool(zipped),
           "seed": seed_rec}
    if check and os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cache_dir {cache_dir}: unreadable {_MANIFEST} ({exc})") from None
        if old != json.loads(json.dumps(man)):
            raise ValueError(f"cache_dir {cache_dir} holds a different sweep (function, grid or "
                             "seed differ); use another folder or delete it")
        return
    _atomic_write(path, lambda p: _write_json(p, man))


def load_sweep(path) -> SweepResult:
    """Load a sweep written by :meth:`SweepResult.save` or as a ``cache_dir``; points not
    (yet) computed raise ValueError."""
    path = str(path)
    try:
        with open(os.path.join(path, _MANIFEST)) as f:
            man = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a valid attndyn sweep folder: {path}: {exc}") from None
    if not isinstance(man, dict) or man.get("format") != _FORMAT:
        raise ValueError(f"not a valid attndyn sweep folder: {path}: wrong format tag")
    axes, points = _check_grid(man["grid"], man["zipped"], MAX_POINTS)
    out = {k: [] for k in ("results", "status", "messages", "seeds")}
    for i in range(len(points)):
        meta = _load_point(path, i)
        if meta is None:
            raise ValueError(f"sweep folder {path}: point {i} was not computed; resume it with "
                             "sweep(..., cache_dir=path)")
        out["results"].append(meta["result"])
        out["status"].append(int(meta["status"]))
        out["messages"].append(str(meta["message"]))
        out["seeds"].append(meta["seed"])
    return SweepResult(grid=axes, zipped=bool(man["zipped"]), points=points,
                       params={"function": man["function"], "seed": man["seed"],
                               "n_points": len(points)}, **out)


# ---------------------------------------------------------------------------
# the driver

def _as_completed(futures):
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


def sweep(fn: Callable, grid: dict, *, seed=0, zipped: bool = False, executor=None,
          cache_dir=None, workers: int | None = None, threads: int | None = None,
          warm: bool = True, progress: bool | None = None,
          max_points: int = MAX_POINTS) -> SweepResult:
    """Call ``fn`` at every point of ``grid`` and collect the results in grid order.

    Parameters
    ----------
    fn : callable
        Called as ``fn(**point, seed=child)`` when it takes a ``seed`` keyword, else
        ``fn(**point)``. For a process pool or a dask cluster it must be picklable
        (a module-level function).
    grid : dict
        Parameter name -> list of values (numbers, strings, booleans, None or lists).
    seed : int, SeedSequence or Generator
        Root of the per-point seeds: point ``i`` gets the ``i``-th child, as
        ``SeedSequence(seed).spawn(n)[i]`` (SPEC 7).
    zipped : bool
        Zip the lists (equal lengths) instead of taking their product.
    executor : None, "serial", or an object with ``submit``
        ``None``: a local process pool of ``workers`` processes (default: the cores), with
        ``threads`` BLAS and numba threads each (default: cores // workers). ``"serial"``: in
        this process. Anything with ``submit(fn, *args)`` returning futures with
        ``result()``: a ``concurrent.futures`` executor or a ``dask.distributed.Client``.
    cache_dir : path, optional
        Store every finished point there as it completes and skip the points already stored:
        an interrupted sweep resumes. The folder remembers the function's name (or its
        ``sweep_id`` attribute), the grid and the seed, and refuses a different sweep; a
        changed function body under the same name is not detected.
    warm : bool
        Run the first pending point in this process before fanning out, so numba's disk
        caches are written once, not concurrently by every worker.
    progress : bool or None
        A tqdm bar over points; ``None`` shows it only on a terminal.
    max_points : int
        Refuse grids larger than this.

    Returns
    -------
    SweepResult
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer)) or max_points < 1:
        raise ValueError(f"max_points must be an int >= 1, got {max_points!r}")
    if not (executor is None or executor == "serial" or callable(getattr(executor, "submit", None))):
        raise TypeError("executor must be None, 'serial' or an object with submit() "
                        f"(concurrent.futures executor, dask Client); got {type(executor).__name__}")
    axes, points = _check_grid(grid, bool(zipped), int(max_points))
    root = _root_seed(seed)
    root_rec = _seed_record(root)
    n = len(points)
    children = [_child(root, i) for i in range(n)]
    seed_recs = [_seed_record(c) for c in children]
    takes_seed = _takes_seed(fn)
    if takes_seed and "seed" in axes:
        raise ValueError("grid has an axis named 'seed' and fn takes a seed keyword: rename the "
                         "axis (each point gets its own child seed)")
    fid = _fn_id(fn)
    cores = os.cpu_count() or 1
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")

    status = [None] * n
    messages = [""] * n
    results: list[Any] = [None] * n
    tbs = [""] * n
    if cache_dir is not None:
        cache_dir = os.fspath(cache_dir)
        os.makedirs(cache_dir, exist_ok=True)
        _write_manifest(cache_dir, fid, axes, bool(zipped), root_rec)
        for i in range(n):
            meta = _load_point(cache_dir, i)
            if meta is not None:
                results[i], status[i], messages[i] = meta["result"], int(meta["status"]), meta["message"]
    pending = [i for i in range(n) if status[i] is None]

    from tqdm.auto import tqdm
    bar = tqdm(total=n, initial=n - len(pending), desc="sweep", unit="point",
               disable=None if progress is None else not progress)

    def finish(i, out):
        s, m, r, tb = out
        status[i], messages[i], results[i], tbs[i] = s, m, r, tb
        if cache_dir is not None:
            _store_point(cache_dir, i, points[i], seed_recs[i], s, m, r)
        bar.update(1)

    own_pool = None
    try:
        if executor == "serial" or (executor is None and (len(pending) <= 1 or cores == 1)):
            for i in pending:
                finish(i, _run_point(fn, points[i], children[i], takes_seed))
            pending = []
        if pending:
            if warm:
                i = pending.pop(0)
                finish(i, _run_point(fn, points[i], children[i], takes_seed))
            if executor is None and pending:
                import concurrent.futures as cf
                import multiprocessing as mp
                nw = min(workers or cores, len(pending))
                nt = threads or max(1, cores // nw)
                # spawn: no fork of a process that already runs BLAS/numba threads
                own_pool = executor = cf.ProcessPoolExecutor(
                    max_workers=nw, mp_context=mp.get_context("spawn"),
                    initializer=_init_worker, initargs=(nt,))
            if pending:
                futs = {}
                for i in pending:
                    futs[executor.submit(_run_point, fn, points[i], children[i], takes_seed)] = i
                for fut in _as_completed(list(futs)):
                    finish(futs[fut], fut.result())
    finally:
        bar.close()
        if own_pool is not None:
            own_pool.shutdown(wait=True, cancel_futures=True)
    failed = sum(1 for s in status if s == POINT_FAILED)
    if failed:
        warnings.warn(f"sweep: {failed} of {n} points failed (see .messages)", RuntimeWarning,
                      stacklevel=2)
    return SweepResult(grid=axes, zipped=bool(zipped), points=points, results=results,
                       status=[int(s) for s in status], messages=messages, seeds=seed_recs,
                       params={"function": fid, "seed": root_rec, "n_points": n},
                       tracebacks=tbs)

