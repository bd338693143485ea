"""A labelled sweep result (one observable table over a swept parameter) that saves and loads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from attndyn.numeric.core.labelled import jsonable as jsonable

__all__ = ["Sweep", "load_sweep", "fit_power_law"]


def fit_power_law(x, y):
    """Least-squares fit of ``log y = log a + b log x`` over the finite positive
    points. Returns ``{"exponent": b, "prefactor": a, "n_points": k,
    "exponent_stderr": s}`` (NaN where fewer than 2 points).

        >>> x = np.array([1.0, 2.0, 4.0])
        >>> fit = fit_power_law(x, 3.0 * x ** -0.5)
        >>> round(fit["exponent"], 6), round(fit["prefactor"], 6), fit["n_points"]
        (-0.5, 3.0, 3)
    """
    try:
        x = np.asarray(x, dtype=np.float64).ravel()
        y = np.asarray(y, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise TypeError("x and y must be real numbers") from None
    if x.size != y.size:  # else a numpy broadcast error, or a silent one for size 1
        raise ValueError(f"x and y must have the same number of points, got {x.size} and "
                         f"{y.size}")
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    k = int(ok.sum())
    if k < 2:
        return {"exponent": float("nan"), "prefactor": float("nan"), "n_points": k,
                "exponent_stderr": float("nan")}
    lx, ly = np.log(x[ok]), np.log(y[ok])
    A = np.vstack([np.ones(k), lx]).T
    coef, res, *_ = np.linalg.lstsq(A, ly, rcond=None)
    se = float("nan")
    if k > 2:
        r = ly - A @ coef
        s2 = float(r @ r) / (k - 2)
        cov = s2 * np.linalg.inv(A.T @ A)
        se = float(np.sqrt(cov[1, 1]))
    return {"exponent": float(coef[1]), "prefactor": float(np.exp(coef[0])), "n_points": k,
            "exponent_stderr": se}


@dataclass
class Sweep:
    """Observables ``y`` (n_obs, n_x) over the values ``x`` of ``x_name``.

    ``fits`` holds fitted trends (e.g. power-law exponents), ``params`` the
    configuration, ``seeds`` the seeds used, ``status`` 0 when every run
    succeeded.

        >>> sw = Sweep("m", np.array([4.0, 16.0]), ["gap"], np.array([[0.5, 0.125]]))
        >>> sw.fits["gap"] = fit_power_law(sw.x, sw.y[0])
        >>> round(sw.fits["gap"]["exponent"], 6)
        -1.0
    """

    x_name: str
    x: np.ndarray
    names: list
    y: np.ndarray
    kind: str = ""
    params: dict = field(default_factory=dict)
    seeds: list = field(default_factory=list)
    fits: dict = field(default_factory=dict)
    status: int = 0
    message: str = "ok"

    def __getitem__(self, name):
        try:
            return self.y[self.names.index(name)]
        except ValueError:
            raise KeyError(f"no observable {name!r}; have {self.names}") from None

    def __repr__(self):
        return (f"Sweep(kind={self.kind!r}, x_name={self.x_name!r}, n_x={self.x.size}, "
                f"names={self.names}, status={self.status})")

    def to_xarray(self):
        """An ``xarray.Dataset``: ``value(observable, <x_name>)`` with the labels (kind,
        status, message, params, seeds, fits) as netCDF-safe attributes."""
        from attndyn.numeric.core.labelled import dataset_attrs, require_xarray
        xr = require_xarray()
        attrs = dataset_attrs(kind=self.kind, status=int(self.status), message=self.message,
                              params=self.params, seeds=self.seeds, fits=self.fits,
                              x_name=self.x_name)
        return xr.Dataset({"value": (("observable", self.x_name),
                                     np.asarray(self.y, dtype=np.float64))},
                          coords={self.x_name: np.asarray(self.x, dtype=np.float64),
                                  "observable": np.array([str(n) for n in self.names])},
                          attrs=attrs)

    def to_pandas(self):
        """A ``pandas.DataFrame``: index ``x_name``, one column per observable."""
        import pandas as pd
        return pd.DataFrame(np.asarray(self.y, dtype=np.float64).T, columns=list(self.names),
                            index=pd.Index(np.asarray(self.x, dtype=np.float64), name=self.x_name))

    def table(self) -> str:
        """A plain-text table of the sweep."""
        head = [self.x_name] + list(self.names)
        rows = [" ".join(f"{h:>14s}" for h in head)]
        for j in range(self.x.size):
            rows.append(" ".join(f"{v:14.6g}" for v in [self.x[j]] + list(self.y[:, j])))
        return "\n".join(rows)

    def save(self, path) -> str:
        path = str(path)
        if not path.endswith(".npz"):
            path += ".npz"
        header = {"x_name": self.x_name, "names": list(self.names), "kind": self.kind,
                  "params": jsonable(self.params), "seeds": jsonable(self.seeds),
                  "fits": jsonable(self.fits), "status": int(self.status),
                  "message": self.message, "format": "attndyn-sweep-1"}
        np.savez_compressed(path, x=self.x, y=self.y, header=np.array(json.dumps(header)))
        return path


def load_sweep(path) -> Sweep:
    """Load a :class:`Sweep` saved by :meth:`Sweep.save`. Nothing is unpickled;
    only a regular file is opened and its sizes are bounded before anything is
    inflated (``numeric.core.safeio``); a bad file raises a one-line
    ``ValueError`` naming the path.

        >>> import os, tempfile
        >>> sw = Sweep("m", np.array([4.0, 16.0]), ["gap"], np.array([[0.5, 0.125]]))
        >>> path = os.path.join(tempfile.mkdtemp(), "sweep.npz")
        >>> _ = sw.save(path)
        >>> load_sweep(path).y.tolist()
        [[0.5, 0.125]]
    """
    from attndyn.numeric.core import safeio
    what = "not a valid attndyn sweep file:"
    try:
        with safeio.open_npz(path, what) as f:
            h = safeio.npz_json(f, "header")
            if not isinstance(h, dict) or h.get("format") != "attndyn-sweep-1":
                raise f.fail("no attndyn-sweep-1 header")
            x = safeio.npz_array(f, "x", 1)
            y = safeio.npz_array(f, "y", 2)
            names = h.get("names")
            if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
                raise f.fail("'names' must be a list of strings")
            if y.shape != (len(names), x.size):
                raise f.fail(f"y has shape {y.shape}, expected ({len(names)}, {x.size})")
            try:
                return Sweep(x_name=str(h["x_name"]), x=x, names=names, y=y,
                             kind=str(h["kind"]), params=h["params"], seeds=h["seeds"],
                             fits=h["fits"], status=int(h["status"]),
                             message=str(h["message"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise f.fail(f"{type(exc).__name__}: {exc}") from None
    except safeio.BadFile as exc:
        raise ValueError(safeio.one_line(str(exc))) from None
