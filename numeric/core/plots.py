"""Plots of trajectories and SGD-vs-theory comparisons, and the one figure style of the
package (matplotlib, imported lazily).

Every plotting function takes ``ax=None`` (a new figure's axes then) and returns the axes.
Figure code of both papers draws inside :func:`style` (or on :func:`new_axes`) and writes
with :func:`save_figure`: a 200 dpi PNG and a vector PDF, refused when an axis has no label.

The time axis is the paper's ODE time; for tied attention (paper 003, docs/conventions.md)
:math:`t = 4 \\eta n / d` after :math:`n` steps of online SGD with learning rate
:math:`\\eta` in dimension :math:`d`.

>>> import numpy as np
>>> from attndyn.numeric.core.results import Trajectory
>>> from attndyn.numeric.core.plots import plot_trajectory, save_figure, style
>>> t = np.linspace(0.0, 1.0, 11)
>>> traj = Trajectory(t=t, y=np.vstack([np.exp(-t), 1 - np.exp(-t)]), names=["q_11", "q_12"])
>>> with style():
...     ax = plot_trajectory(traj, ylabel="overlap")
>>> ax.get_xlabel(), ax.get_ylabel()
('t (ODE time)', 'overlap')
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:  # matplotlib is optional (the ``plot`` extra)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .results import Trajectory

__all__ = ["STYLE", "DPI", "FORMATS", "style", "new_axes", "unlabelled_axes", "check_labels",
           "save_figure", "plot_trajectory", "plot_comparison"]

#: Resolution of every PNG the package writes (dots per inch).
DPI: int = 200
#: The formats :func:`save_figure` writes by default: a raster and a vector one.
FORMATS: tuple[str, ...] = ("png", "pdf")
_ALLOWED_FORMATS = ("png", "pdf", "svg")

#: matplotlib settings of the package's figures (``rcParams`` keys).
STYLE: dict[str, Any] = {
    "figure.figsize": (6.0, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.labelsize": 10,
    "axes.titlesize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "lines.linewidth": 1.5,
    "lines.markersize": 4,
    "pdf.fonttype": 42,  # TrueType in the PDF: its text stays text
    "svg.fonttype": "none",
}


# read-only members (properties), so that a dataclass with narrower field types matches
class _TrajectoryLike(Protocol):
    @property
    def t(self) -> np.ndarray: ...
    @property
    def y(self) -> np.ndarray: ...
    @property
    def names(self) -> Sequence[str]: ...


class _ComparisonLike(Protocol):
    """What :func:`plot_comparison` reads (:class:`attndyn.numeric.Comparison` has it)."""

    @property
    def t(self) -> np.ndarray: ...
    @property
    def names(self) -> list: ...
    @property
    def theory(self) -> _TrajectoryLike: ...
    @property
    def sgd(self) -> _TrajectoryLike: ...
    @property
    def spread(self) -> Mapping[str, Any] | None: ...
    @property
    def params(self) -> Mapping[str, Any]: ...


@contextlib.contextmanager
def style(**overrides: Any) -> Iterator[None]:
    """Draw with the package's style (:data:`STYLE`, updated by ``overrides``).

    ``overrides`` are ``rcParams`` entries; their keys hold dots, so pass them as a dict:
    ``style(**{"axes.grid": False})``. An unknown key is a ``ValueError``.

    >>> import matplotlib
    >>> with style(**{"lines.linewidth": 2.5}):
    ...     matplotlib.rcParams["savefig.dpi"], matplotlib.rcParams["lines.linewidth"]
    (200.0, 2.5)
    """
    import matplotlib

    bad = [k for k in overrides if k not in matplotlib.rcParams]
    if bad:
        raise ValueError(f"style: unknown matplotlib rcParams {bad}")
    params: dict[Any, Any] = {**STYLE, **overrides}  # matplotlib types keys as literals
    with matplotlib.rc_context(params):
        yield


def new_axes(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
             **subplots_kw: Any) -> tuple[Figure, Any]:
    """A new figure and its axes (``plt.subplots``) in the package's style.

    >>> fig, axes = new_axes(1, 2, figsize=(8, 3))
    >>> axes.shape, fig.get_dpi()
    ((2,), 100.0)
    """
    for name, n in (("nrows", nrows), ("ncols", ncols)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 64:
            raise ValueError(f"new_axes: {name} must be an integer in 1..64, got {n!r}")
    import matplotlib.pyplot as plt

    with style():
        fig, axes = plt.subplots(nrows, ncols, figsize=figsize or STYLE["figure.figsize"],
                                 **subplots_kw)
    return fig, axes


def _axes(ax: Axes | None) -> Axes:
    if ax is None:
        _, ax = new_axes()
    return ax


def _drawn(ax: Axes) -> bool:
    """Axes that show something: visible, with an axis, not a colour bar."""
    return bool(ax.get_visible() and ax.axison and ax.get_label() != "<colorbar>")


def _label_of(ax: Axes, which: str) -> str:
    """The axis label of ``ax``, or that of an axes sharing the axis (``label_outer``)."""
    get = "get_xlabel" if which == "x" else "get_ylabel"
    shared = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    for other in [ax, *shared.get_siblings(ax)]:
        text: str = getattr(other, get)()
        if text.strip():
            return text
    return ""


def unlabelled_axes(fig: Figure) -> list[str]:
    """The axes of ``fig`` with an unlabelled x or y axis, described as ``"axes 2 (title): y"``.

    An axis counts as labelled when it, or an axis shared with it, has a label. Hidden axes
    and colour bars are skipped.

    >>> fig, ax = new_axes()
    >>> _ = ax.plot([0, 1], [0, 1]); _ = ax.set_xlabel("t")
    >>> unlabelled_axes(fig)
    ['axes 0: y']
    """
    missing = []
    for i, ax in enumerate(fig.get_axes()):
        if not _drawn(ax):
            continue
        gaps = [w for w in ("x", "y") if not _label_of(ax, w)]
        if gaps:
            title = ax.get_title()
            name = f"axes {i}" + (f" ({title})" if title else "")
            missing.append(f"{name}: {', '.join(gaps)}")
    return missing


def check_labels(fig: Figure) -> None:
    """Raise ``ValueError`` naming every axes of ``fig`` with an unlabelled axis.

        >>> fig, ax = new_axes()
        >>> _ = ax.set_xlabel("t")
        >>> check_labels(fig)
        Traceback (most recent call last):
            ...
        ValueError: figure: every axis needs a label; unlabelled: axes 0: y
        >>> _ = ax.set_ylabel("q_12")
        >>> check_labels(fig)
    """
    missing = unlabelled_axes(fig)
    if missing:
        raise ValueError("figure: every axis needs a label; unlabelled: " + "; ".join(missing))


def save_figure(fig: Figure, path: str | os.PathLike[str], *,
                formats: Sequence[str] = FORMATS, dpi: int = DPI,
                check: bool = True) -> dict[str, str]:
    """Write ``fig`` as ``<stem>.png`` (``dpi`` dots per inch) and ``<stem>.pdf`` (vector).

    ``path`` is the file name with or without a suffix (``"out/fig4"``, ``"out/fig4.png"``);
    the folder is created. Each file is written atomically (a temporary file renamed over
    it). With ``check=True`` a figure with an unlabelled axis is refused
    (:func:`check_labels`). Returns ``{format: path}``.

    >>> import os, tempfile
    >>> fig, ax = new_axes()
    >>> _ = ax.plot([0, 1], [1, 0]); _ = ax.set(xlabel="t (ODE time)", ylabel="q_11")
    >>> out = save_figure(fig, os.path.join(tempfile.mkdtemp(), "demo"))
    >>> sorted(out), out["png"].endswith("demo.png")
    (['pdf', 'png'], True)
    """
    from . import safeio

    fmts = [formats] if isinstance(formats, str) else list(formats)
    bad = [f for f in fmts if f not in _ALLOWED_FORMATS]
    if not fmts or bad:
        raise ValueError(f"save_figure: formats must be a non-empty subset of "
                         f"{_ALLOWED_FORMATS}, got {formats!r}")
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer)) or not 10 <= dpi <= 1200:
        raise ValueError(f"save_figure: dpi must be an integer in 10..1200, got {dpi!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"save_figure: path must be a str or os.PathLike, got "
                        f"{type(path).__name__}")
    if check:
        check_labels(fig)
    stem, ext = os.path.splitext(os.fspath(path))
    if ext.lower().lstrip(".") not in _ALLOWED_FORMATS:
        stem = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(stem))
    os.makedirs(folder, exist_ok=True)
    out = {}
    with style():
        for fmt in fmts:
            target = f"{stem}.{fmt}"
            safeio.atomic_write(target, lambda f, fmt=fmt: fig.savefig(
                f, format=fmt, dpi=int(dpi), metadata=_metadata(fmt)))
            out[fmt] = target
    return out


def _metadata(fmt: str) -> dict[str, Any] | None:
    # no creation date: the same figure gives the same PDF/SVG bytes
    if fmt == "pdf":
        return {"CreationDate": None}
    if fmt == "svg":
        return {"Date": None}
    return None


def plot_trajectory(traj: Trajectory | _TrajectoryLike, names: Sequence[str] | None = None,
                    ax: Axes | None = None, *, ylabel: str | None = None,
                    **kwargs: Any) -> Axes:
    """Plot observables of a :class:`~attndyn.numeric.core.results.Trajectory` against
    the ODE time :math:`t`.

    ``names``: the observables (default all); ``ylabel``: the y-axis label (default the
    observable's name for one, ``"value"`` for several); ``kwargs`` go to ``ax.plot``.

    >>> import numpy as np
    >>> from attndyn.numeric.core.results import Trajectory
    >>> tr = Trajectory(t=np.linspace(0, 1, 5), y=np.ones((1, 5)), names=["mu_1"])
    >>> plot_trajectory(tr).get_ylabel()
    'mu_1'
    """
    names = list(traj.names) if names is None else list(names)
    unknown = [n for n in names if n not in traj.names]
    if unknown:
        raise ValueError(f"names: unknown observables {unknown}; the trajectory has "
                         f"{list(traj.names)[:10]}")
    ax = _axes(ax)
    for n in names:
        ax.plot(traj.t, traj.y[traj.names.index(n)], label=n, **kwargs)
    ax.set_xlabel("t (ODE time)")
    ax.set_ylabel(ylabel if ylabel is not None else (names[0] if len(names) == 1 else "value"))
    if len(names) > 1:
        ax.legend(fontsize="small")
    return ax


def plot_comparison(cmp: _ComparisonLike, names: Sequence[str] | None = None,
                    ax: Axes | None = None, *, ylabel: str | None = None) -> Axes:
    """Theory (lines) against SGD (markers, with the seed spread as error bars).

    ``cmp`` is a :class:`attndyn.numeric.Comparison`; ``names`` its observables to draw
    (default all); ``ylabel`` the y-axis label (default the observable's name for one,
    ``"order parameter"`` for several). The title gives the model, :math:`d`, the batch
    :math:`B`, the learning rate :math:`\\eta` and the theory.

        >>> import attndyn
        >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
        >>> cmp = attndyn.compare(model, {"d": 16, "seed": 0}, eta=0.01, batch=4,
        ...                       t_eval=[0.0, 0.05, 0.1], rng=1)
        >>> ax = plot_comparison(cmp, names=["q_12"])
        >>> ax.get_ylabel(), len(ax.lines) >= 1
        ('q_12', True)
    """
    names = list(cmp.names) if names is None else list(names)
    unknown = [n for n in names if n not in cmp.names]
    if unknown:
        raise ValueError(f"names: unknown observables {unknown}; the comparison has "
                         f"{list(cmp.names)[:10]}")
    ax = _axes(ax)
    for n in names:
        i = cmp.names.index(n)
        (line,) = ax.plot(cmp.t, cmp.theory.y[i], "-", label=f"{n} theory")
        yerr = None if cmp.spread is None else np.asarray(cmp.spread[n])
        ax.errorbar(cmp.t, cmp.sgd.y[i], yerr=yerr, fmt="o", ms=3, color=line.get_color(),
                    label=f"{n} SGD")
    p = cmp.params
    eta = p.get("eta")
    eta_s = f"{eta:.3g}" if isinstance(eta, (int, float)) else str(eta)
    ax.set_xlabel("t (ODE time)")
    ax.set_ylabel(ylabel if ylabel is not None else
                  (names[0] if len(names) == 1 else "order parameter"))
    ax.set_title(f"{p.get('model', '')}: d={p.get('d')}, B={p.get('batch')}, "
                 f"eta={eta_s}, theory={p.get('theory')}", fontsize="small")
    ax.legend(fontsize="x-small", ncol=2)
    return ax
