"""Labelled exports of results: ``xarray.Dataset`` and ``pandas.DataFrame``.

xarray and pandas are optional (``pip install "attndyn[xarray]"``); they are imported only
when a conversion is asked for. A dataset keeps the run's labels as attributes, encoded so
that it writes to netCDF through scipy's engine (no binary dependency) and reads back equal:

- numbers and strings stay as they are;
- dictionaries and lists (``params``, ``seed``, ``diagnostics``...) become JSON strings,
  under their own name with the suffix ``_json`` (``inf`` and ``nan`` inside them round-trip
  as floats).

:func:`dataset_attrs` and :func:`decode_attrs` are the two directions of that encoding.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = ["require_xarray", "dataset_attrs", "decode_attrs", "trajectory_to_xarray",
           "comparison_to_xarray",
           "trajectory_to_pandas", "jsonable"]


def require_xarray():
    """Import xarray, or raise ImportError with the install command.

        >>> require_xarray().__name__
        'xarray'
    """
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("this export needs xarray: pip install 'attndyn[xarray]'") from None
    return xr


def jsonable(obj, *, nonfinite: str = "repr"):
    """``obj`` with numpy scalars and arrays turned into Python numbers and lists.

    ``nonfinite``: ``"repr"`` writes ``inf``/``nan`` as the strings ``'inf'``, ``'nan'``
    (strict JSON, netCDF attributes); ``"float"`` keeps them as floats, which Python's
    ``json`` writes as ``Infinity``/``NaN`` and reads back as floats (the sweep store).

        >>> jsonable({"a": np.float64(1.5), "b": np.arange(3), "c": np.inf})
        {'a': 1.5, 'b': [0, 1, 2], 'c': 'inf'}
        >>> jsonable(np.nan, nonfinite="float")
        nan
    """
    if nonfinite not in ("repr", "float"):
        raise ValueError(f"nonfinite must be 'repr' or 'float', got {nonfinite!r}")
    if isinstance(obj, dict):
        return {str(k): jsonable(v, nonfinite=nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, nonfinite=nonfinite) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist(), nonfinite=nonfinite)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.random.SeedSequence):
        ent = obj.entropy
        ent = [int(e) for e in ent] if isinstance(ent, (list, tuple, np.ndarray)) else int(ent)
        return {"entropy": ent, "spawn_key": [int(k) for k in obj.spawn_key]}
    if isinstance(obj, float) and not np.isfinite(obj) and nonfinite == "repr":
        return repr(obj)  # strict JSON has no inf/nan: keep them readable
    return obj


def dataset_attrs(**labels) -> dict:
    """netCDF-safe attributes: scalars as such, containers and ``None`` as JSON strings.

        >>> dataset_attrs(kind="tied", d=16, params={"eta": 0.01}, seed=None)
        {'kind': 'tied', 'd': 16, 'params_json': '{"eta": 0.01}', 'seed_json': 'null'}
    """
    out: dict[str, Any] = {}
    for key, value in labels.items():
        if isinstance(value, (bool, np.bool_)):
            out[key] = int(value)
        elif isinstance(value, (int, np.integer)):
            out[key] = int(value)
        elif isinstance(value, (float, np.floating)):
            out[key] = float(value)
        elif isinstance(value, str):
            out[key] = value
        else:
            # inf and nan as Python's JSON writes them (Infinity, NaN): decode_attrs reads
            # them back as floats, not as the strings 'inf' and 'nan'
            out[f"{key}_json"] = json.dumps(jsonable(value, nonfinite="float"), sort_keys=True)
    return out


def decode_attrs(attrs: dict) -> dict:
    """Invert :func:`dataset_attrs`: ``name_json`` entries parsed back under ``name``.

        >>> decode_attrs(dataset_attrs(kind="tied", params={"eta": 0.01}))
        {'kind': 'tied', 'params': {'eta': 0.01}}
    """
    out = {}
    for key, value in attrs.items():
        if key.endswith("_json") and isinstance(value, str):
            # attributes of a file read back: bounded length and depth, one-line errors
            from .safeio import loads_json
            out[key[:-5]] = loads_json(value, "dataset attribute", key)
        else:
            out[key] = value.item() if isinstance(value, np.generic) else value
    return out


def _version() -> str:
    from attndyn import __version__
    return __version__


def trajectory_to_xarray(traj, *, name: str = "value"):
    """A :class:`~attndyn.numeric.core.results.Trajectory` as an ``xarray.Dataset``.

    One variable ``name`` with dims ``(observable, time)``; coordinates ``time`` (the model's
    ODE time) and ``observable`` (the names); attributes ``kind``, ``status``, ``message``,
    ``params``, ``seed``, ``diagnostics``, ``words``, ``attndyn_version``.

        >>> import attndyn
        >>> t = np.linspace(0.0, 1.0, 3)
        >>> traj = attndyn.Trajectory(t=t, y=np.vstack([t, 1 - t]), names=["mu_1", "mu_2"],
        ...                          kind="demo")
        >>> ds = trajectory_to_xarray(traj)
        >>> ds["value"].dims, ds["value"].sel(observable="mu_2").values
        (('observable', 'time'), array([1. , 0.5, 0. ]))
    """
    xr = require_xarray()
    diag = {k: v for k, v in traj.diagnostics.items() if k != "matrices"}
    attrs = dataset_attrs(kind=traj.kind, status=int(traj.status), message=traj.message,
                          params=traj.params, seed=traj.seed, diagnostics=diag,
                          words=None if traj.words is None else [list(w) for w in traj.words],
                          inv=None if traj.inv is None else list(traj.inv),
                          attndyn_version=_version())
    return xr.Dataset({name: (("observable", "time"), np.asarray(traj.y, dtype=np.float64))},
                      coords={"time": np.asarray(traj.t, dtype=np.float64),
                              "observable": np.array([str(n) for n in traj.names])},
                      attrs=attrs)


def trajectory_to_pandas(traj):
    """A ``pandas.DataFrame``: index ``time``, one column per observable.

        >>> import attndyn
        >>> t = np.linspace(0.0, 1.0, 3)
        >>> traj = attndyn.Trajectory(t=t, y=np.vstack([t, 1 - t]), names=["mu_1", "mu_2"],
        ...                          kind="demo")
        >>> trajectory_to_pandas(traj)  # doctest: +NORMALIZE_WHITESPACE
              mu_1  mu_2
        time
        0.0    0.0   1.0
        0.5    0.5   0.5
        1.0    1.0   0.0
    """
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover
        raise ImportError("this export needs pandas: pip install 'attndyn[xarray]'") from None
    df = pd.DataFrame(np.asarray(traj.y, dtype=np.float64).T, columns=list(traj.names),
                      index=pd.Index(np.asarray(traj.t, dtype=np.float64), name="time"))
    df.attrs.update({"kind": traj.kind, "status": int(traj.status), "message": traj.message})
    return df


def comparison_to_xarray(cmp):
    """An SGD-vs-theory comparison as an ``xarray.Dataset``.

    Variables ``sgd`` and ``theory`` (the SGD mean and the theory, dims ``(observable, time)``),
    ``runs`` (each seed's SGD run, dims ``(seed, observable, time)``), ``spread`` (standard
    deviation over seeds, when there are several) and one variable per error metric over
    ``observable``; attributes as for :func:`trajectory_to_xarray`, plus the theory's labels.

        >>> import attndyn
        >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
        >>> cmp = attndyn.compare(model, {"d": 16, "seed": 0}, eta=0.01, batch=4,
        ...                       t_eval=[0.0, 0.05, 0.1], rng=1)
        >>> ds = comparison_to_xarray(cmp)
        >>> ds["sgd"].dims, ds["runs"].dims
        (('observable', 'time'), ('seed', 'observable', 'time'))
    """
    xr = require_xarray()
    names = [str(n) for n in cmp.names]
    t = np.asarray(cmp.t, dtype=np.float64)

    def rows(traj):
        index = {n: i for i, n in enumerate(traj.names)}
        return np.asarray(traj.y, dtype=np.float64)[[index[n] for n in names]]

    data = {"sgd": (("observable", "time"), rows(cmp.sgd)),
            "theory": (("observable", "time"), rows(cmp.theory))}
    if cmp.runs:
        data["runs"] = (("seed", "observable", "time"), np.stack([rows(r) for r in cmp.runs]))
    if cmp.spread and all(cmp.spread.get(n) is not None for n in names):
        data["spread"] = (("observable", "time"),
                          np.stack([np.asarray(cmp.spread[n], dtype=np.float64) for n in names]))
    metrics = sorted({m for e in cmp.errors.values() for m in e})
    for m in metrics:
        data[f"error_{m}"] = (("observable",), np.array(
            [float(cmp.errors.get(n, {}).get(m, np.nan)) for n in names]))
    attrs = dataset_attrs(kind="comparison", status=int(cmp.status), message=cmp.message,
                          params=cmp.params, sgd_seeds=[r.seed for r in cmp.runs],
                          theory_kind=cmp.theory.kind, theory_status=int(cmp.theory.status),
                          theory_message=cmp.theory.message, attndyn_version=_version())
    coords = {"time": t, "observable": np.array(names)}
    if cmp.runs:
        coords["seed"] = np.arange(len(cmp.runs))
    return xr.Dataset(data, coords=coords, attrs=attrs)
