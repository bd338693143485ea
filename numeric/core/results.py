"""Labelled results: times, observables, parameters, seed and status.

Every integration, matrix flow and SGD run returns a :class:`Trajectory`.
Arrays follow ``scipy.integrate.solve_ivp``: ``t`` has shape ``(n_t,)`` and
``y`` shape ``(n_obs, n_t)``. Results save to one ``.npz`` file (arrays plus a
JSON header) and load back with :func:`load_result`.
"""

from __future__ import annotations

import os
from collections import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from attndyn.symbolic.words import Alphabet, canonical

from . import safeio

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .types import PathLike

__all__ = ["Trajectory", "load_result", "TruncationNotConverged", "IntegrationError"]


def _letters(word: Any) -> tuple[int, ...]:
    """A word's letters as ints; ``int()`` would read ``(0.7, 1)`` and ``"01"`` as q_12."""
    shown = repr(word)[:40]
    if isinstance(word, (str, bytes)) or not isinstance(word, (abc.Iterable, np.ndarray)):
        raise TypeError(f"word must be a sequence of letters (ints >= 0, e.g. (0, 1) for q_12), "
                        f"got {shown}; observable() takes names")
    out = []
    for a in word:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"word letters must be ints >= 0, got {a!r} in {shown}")
        if a < 0:
            raise ValueError(f"word letters must be ints >= 0, got {a} in {shown}")
        out.append(int(a))
    return tuple(out)


class IntegrationError(RuntimeError):
    """Raised by ``raise_on_failure=True`` when an integration or run fails.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> init = attndyn.gaussian_init(model, 16, rng=0)
    >>> try:   # eta = 0.05 with batch 1 at d = 16 diverges
    ...     attndyn.sgd(model, init, eta=0.05, batch=1, t_eval=[0.0, 0.1], rng=1,
    ...                 raise_on_failure=True)
    ... except attndyn.IntegrationError as exc:
    ...     print(str(exc)[:41])
    the weights became non-finite or larger t
    """


class TruncationNotConverged(IntegrationError):
    """Raised by ``raise_on_failure=True`` when the truncation's convergence check fails
    (the two orders it compares disagree; docs/long-horizon.md, "The convergence check").

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> import numpy as np
    >>> S = [0.5 * np.eye(4), np.eye(4)]
    >>> try:
    ...     model.hierarchy(2).integrate(S, [0.0, 1.0], method="truncation",
    ...                                  raise_on_failure=True)
    ... except attndyn.TruncationNotConverged as exc:
    ...     print(str(exc)[:40])
    truncation not converged: orders 2 and 4
    >>> issubclass(attndyn.TruncationNotConverged, attndyn.IntegrationError)
    True
    """


class LazySequence(abc.Sequence):
    """A read-only sequence made on first use.

    The names and words of a large hierarchy (743,199 of each at order 24) cost about four
    times the integration they label to make as Python objects, and most runs never read
    them; a :class:`Trajectory` holds them as this until they are read. Its length is known
    without making it; it compares equal to a list or tuple with the same items, pickles and
    copies as a plain list, and ``+`` gives a list.

    Examples
    --------
    >>> from attndyn.numeric.core.results import LazySequence
    >>> names = LazySequence(lambda: ["mu_1", "mu_2"], 2)
    >>> len(names), names.made
    (2, False)
    >>> names[1], names.index("mu_1"), names == ["mu_1", "mu_2"], names.made
    ('mu_2', 0, True, True)
    """

    __slots__ = ("_make", "_n", "_items")

    def __init__(self, make: Any, n: int) -> None:
        self._make, self._n = make, int(n)
        self._items: Sequence[Any] | None = None

    def _get(self) -> Sequence[Any]:
        if self._items is None:
            items = self._make()
            if len(items) != self._n:
                raise RuntimeError(f"a lazy sequence promised {self._n} items and made "
                                   f"{len(items)}")
            self._items, self._make = items, None
        return self._items

    @property
    def made(self) -> bool:
        """Whether the items exist yet."""
        return self._items is not None

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())

    def __contains__(self, x: object) -> bool:
        return x in self._get()

    def index(self, x: Any, *args: Any) -> int:
        return self._get().index(x, *args)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, LazySequence)):
            return len(other) == self._n and list(self._get()) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Any) -> list:
        return list(self._get()) + list(other)

    def __radd__(self, other: Any) -> list:
        return list(other) + list(self._get())

    def __reduce__(self) -> tuple:
        return (list, (list(self._get()),))

    def __repr__(self) -> str:
        if self._items is None:
            return f"LazySequence(<{self._n} items, not made yet>)"
        return repr(list(self._items))


@dataclass
class Trajectory:
    """A labelled trajectory.

    Attributes
    ----------
    t : (n_t,) array
        Times, in the paper's ODE time of the model (tied: ``t = 4 eta n / d``).
    y : (n_obs, n_t) array
        Observables; row ``i`` is ``names[i]``.
    names : list of str
        Observable names (``mu_1``, ``q_12``, ``mu_112``, ...).
    words : list of tuple or None
        The word of each row, for moment observables.
    kind : str
        ``"hierarchy"``, ``"matrix_flow"``, ``"sgd"``, ...
    params : dict
        Everything needed to reproduce the run (JSON-serialisable).
    seed : int or None
    status : int
        0 on success; negative codes are integrator failures (see
        ``attndyn.kernels.integrate.STATUS``); 2 means "truncation not
        converged in the order".
    message : str
    diagnostics : dict
        Extra numbers: step counts, truncation differences per observable...

    Times are the model's ODE time (paper 003): tied ``t = 4 eta n / d`` (eq. 9), untied
    slow and direct S ``tau = eta n / d`` (eqs. 31-32, 402); moment rows are
    ``mu_alpha = Tr(S_{k_1} ... S_{k_w}) / d`` (eq. 8).

    Examples
    --------
    >>> import numpy as np, attndyn
    >>> t = np.linspace(0.0, 1.0, 3)
    >>> traj = attndyn.Trajectory(t=t, y=np.vstack([t, 1 - t]), names=["mu_1", "mu_2"], kind="demo")
    >>> traj.observable("mu_2"), traj.success
    (array([1. , 0.5, 0. ]), True)
    """

    t: np.ndarray
    y: np.ndarray
    names: Sequence[str]
    words: Sequence[Sequence[int]] | None = None
    kind: str = ""
    params: dict = field(default_factory=dict)
    seed: Any = None
    status: int = 0
    message: str = ""
    diagnostics: dict = field(default_factory=dict)
    inv: tuple | None = None  # transpose involution of the alphabet, for words

    @property
    def success(self) -> bool:
        return self.status == 0

    def __repr__(self) -> str:
        return (f"Trajectory(kind={self.kind!r}, n_obs={len(self.names)}, n_t={self.t.size}, "
                f"status={self.status}, message={self.message!r})")

    # -- scipy OdeResult-style counters (0 where the solver does not count them) ---------
    @property
    def nfev(self) -> int:
        """Right-hand-side evaluations of the integrator."""
        return int(self.diagnostics.get("nfev", 0))

    @property
    def njev(self) -> int:
        """Jacobian evaluations (the explicit integrators use none)."""
        return int(self.diagnostics.get("njev", 0))

    @property
    def nlu(self) -> int:
        """LU decompositions (the explicit integrators use none)."""
        return int(self.diagnostics.get("nlu", 0))

    # -- labelled exports ---------------------------------------------------
    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` with ``value(observable, time)`` and the labels as attributes
        (netCDF-safe: ``ds.to_netcdf(path, engine="scipy")``)."""
        from .labelled import trajectory_to_xarray
        return trajectory_to_xarray(self)

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame``: index ``time``, one column per observable."""
        from .labelled import trajectory_to_pandas
        return trajectory_to_pandas(self)

    def _repr_html_(self) -> str:
        import html
        fin = self.final()
        rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{v:.6g}</td></tr>"
                       for n, v in list(fin.items())[:20])
        more = f"<p>... {len(fin) - 20} more observables</p>" if len(fin) > 20 else ""
        t_end = f"{float(self.t[-1]):.4g}" if self.t.size else "-"
        return (f"<p><b>Trajectory</b> {html.escape(self.kind)}: {len(self.names)} observables, "
                f"{self.t.size} times up to t = {t_end}; status {self.status}: "
                f"{html.escape(self.message)}</p><table><tr><th>observable</th>"
                f"<th>final value</th></tr>{rows}</table>{more}")

    # -- access -----------------------------------------------------------
    def _word_index(self, word: Sequence[int]) -> int:
        if self.words is None:
            raise KeyError("this result has no word observables")
        w = _letters(word)
        if not hasattr(self, "_wmap"):
            self._wmap = {tuple(x): i for i, x in enumerate(self.words)}
        K = 1 + max((max(x) for x in self.words if len(x)), default=0)
        K = max(K, 1 + max(w, default=0))
        inv = self.inv if self.inv is not None else None
        alph = Alphabet(K if inv is None else len(inv), inv)
        c = canonical(w, alph)
        try:
            return self._wmap[c]
        except KeyError:
            raise KeyError(f"word {w} (canonical {c}) is not among this result's observables; "
                           f"longest stored word has length {max(map(len, self.words))}") from None

    def moment(self, word: Sequence[int]) -> NDArray[np.float64]:
        """Trajectory of ``mu_word`` (any word; canonicalised)."""
        row: np.ndarray = self.y[self._word_index(word)]
        return row

    def observable(self, name: str, *indices: int) -> NDArray[np.float64]:
        """Trajectory of an observable by name, e.g. ``observable("q_12")`` or
        ``observable("q", 0, 1)`` (0-based indices)."""
        if indices:
            indices = self._checked_indices(indices)
            key = f"{name}_" + "".join(str(i + 1) for i in indices) if all(
                i < 9 for i in indices) else f"{name}_" + "_".join(str(i + 1) for i in indices)
        else:
            key = name
        try:
            row: np.ndarray = self.y[self.names.index(key)]
            return row
        except ValueError:
            raise KeyError(f"no observable {key!r}; have {self.names[:12]}"
                           f"{'...' if len(self.names) > 12 else ''}") from None

    def _checked_indices(self, indices: tuple[Any, ...]) -> tuple[int, ...]:
        """0-based int indices, below ``params["K"]`` when the run records ``K``."""
        K = self.params.get("K") if isinstance(self.params, dict) else None
        K = K if isinstance(K, int) and not isinstance(K, bool) and K >= 1 else None
        out = []
        for i in indices:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"observable indices must be ints (0-based), got {i!r}")
            if i < 0 or (K is not None and i >= K):
                rng = ">= 0 (0-based)" if K is None else f"in [0, {K - 1}] (0-based, K = {K})"
                raise ValueError(f"observable indices must be {rng}, got {int(i)}")
            out.append(int(i))
        return tuple(out)

    def final(self) -> dict[str, float]:
        return {n: float(self.y[i, -1]) for i, n in enumerate(self.names)} if self.t.size else {}

    # -- persistence ------------------------------------------------------
    def save(self, path: PathLike) -> str:
        """Save to ``path`` (``.npz``, appended when missing); returns the path written.

        The file is replaced atomically (:func:`attndyn.numeric.core.safeio.atomic_savez`):
        killed mid-write or on a full disk, the previous file at ``path`` stays intact."""
        path = safeio.check_path(path)
        if not path.endswith(".npz"):
            path += ".npz"
        header = {
            "names": list(self.names),
            "words": None if self.words is None else [list(w) for w in self.words],
            "kind": self.kind, "params": self.params, "seed": self.seed,
            "status": int(self.status), "message": self.message,
            "diagnostics": jsonable({k: v for k, v in self.diagnostics.items()
                                      if k != "matrices"}),
            "inv": None if self.inv is None else list(self.inv),
            "format": "attndyn-trajectory-1",
        }
        # atomic: a kill or a full disk leaves the previous file at ``path`` intact
        return safeio.atomic_savez(path, t=self.t, y=self.y, header=safeio.json_array(header))


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    return obj


class _BadFile(ValueError):
    pass


def _need(cond: object, reason: str) -> None:
    if not cond:
        raise _BadFile(reason)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int_list(x: Any, what: str) -> list[int]:
    _need(isinstance(x, list) and all(_is_int(a) for a in x), f"{what} must be a list of ints")
    out: list[int] = x
    return out


def _read(f: Any) -> Trajectory:
    _need("header" in f, "no 'header' entry")
    header = safeio.npz_json(f, "header")
    _need(isinstance(header, dict), "header is not a JSON object")
    _need(header.get("format") == "attndyn-trajectory-1",
          f"unknown format {header.get('format')!r} (expected 'attndyn-trajectory-1')")
    for k in ("names", "words", "kind", "params", "seed", "status", "message", "diagnostics",
              "inv"):
        _need(k in header, f"header has no {k!r}")
    names = header["names"]
    _need(isinstance(names, list) and all(isinstance(n, str) for n in names),
          "'names' must be a list of strings")
    words = header["words"]
    if words is not None:
        # word i labels row i: the moment rows come first, other observables after
        _need(isinstance(words, list) and len(words) <= len(names),
              f"'words' must be a list of at most {len(names)} words (one per row)")
        words = [tuple(_int_list(w, "each word")) for w in words]
    inv = header["inv"]
    if inv is not None:
        inv = tuple(_int_list(inv, "'inv'"))
    _need(_is_int(header["status"]), f"'status' must be an int, got {header['status']!r}")
    _need(isinstance(header["kind"], str), "'kind' must be a string")
    _need(isinstance(header["message"], str), "'message' must be a string")
    _need(isinstance(header["params"], dict), "'params' must be a JSON object")
    _need(isinstance(header["diagnostics"], dict), "'diagnostics' must be a JSON object")
    t = safeio.npz_array(f, "t", 1)
    y = safeio.npz_array(f, "y", 2)
    _need(bool(np.all(np.isfinite(t))), "the times 't' must be finite")
    _need(y.shape == (len(names), t.size),
          f"'y' has shape {y.shape}, but {len(names)} names and {t.size} times need "
          f"{(len(names), t.size)}")
    return Trajectory(t=t, y=y, names=names, words=words, kind=header["kind"],
                      params=header["params"], seed=header["seed"], status=header["status"],
                      message=header["message"], diagnostics=header["diagnostics"], inv=inv)


_WHAT = "not a valid attndyn result file:"


def load_result(path: PathLike) -> Trajectory:
    """Load a :class:`Trajectory` saved by :meth:`Trajectory.save`.

    Nothing is unpickled. Only a regular file is opened (a FIFO, a device or a symlink to
    one is refused without blocking), and the archive's declared sizes, its JSON header's
    length and depth are bounded before anything is inflated (:mod:`.safeio`). A file that
    is not a complete result (not an ``.npz``, a broken archive or header, arrays of the
    wrong shape or dtype, non-finite times, a non-integer status) raises
    ``ValueError("not a valid attndyn result file: <path>: <reason>")`` (one line); a
    missing or unreadable file raises the usual :class:`OSError`.

    Examples
    --------
    >>> import os, tempfile, numpy as np, attndyn
    >>> traj = attndyn.Trajectory(t=np.array([0.0, 1.0]), y=np.array([[1.0, 2.0]]), names=["mu_1"])
    >>> path = traj.save(os.path.join(tempfile.mkdtemp(), "run.npz"))
    >>> back = attndyn.load_result(path)
    >>> back.names, back.observable("mu_1")
    (['mu_1'], array([1., 2.]))
    """
    path = safeio.check_path(path)
    try:
        with safeio.open_npz(path, _WHAT) as f:
            return _read(f)
    except _BadFile as exc:
        raise ValueError(f"{_WHAT} {path}: {exc}") from None
