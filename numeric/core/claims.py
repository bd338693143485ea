"""Figures with measured claims: the container that ``attndyn reproduce`` fills.

A :class:`FigureRun` holds the curves of one figure (each a labelled
:class:`~attndyn.numeric.core.results.Trajectory`), the settings it was made
with, and a list of :class:`Claim` objects, each a computed check that can
fail. Nothing here knows a paper: paper 003's figures live in
``numeric/attention/figures.py``, paper 000's in ``numeric/scaling/figures.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attndyn.numeric.core import safeio
from attndyn.numeric.core.results import Trajectory, jsonable

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy.typing import ArrayLike

__all__ = ["Claim", "FigureRun", "claims_table"]


@dataclass
class Claim:
    """One claim of a caption or text, checked on the numbers.

    ``held`` is the verdict of the check (True / False); ``measured`` gives the
    numbers it used, ``condition`` the setting under which the claim is made
    (for example "truncation only on a short horizon").

        >>> c = Claim("q_12 grows", held=True, measured="q_12(1) = 0.4", condition="d = 16")
        >>> c.held, c.text
        (True, 'q_12 grows')
    """

    text: str
    held: bool
    measured: str
    condition: str = ""

    def as_dict(self) -> dict:
        return {"claim": self.text, "held": bool(self.held), "measured": self.measured,
                "condition": self.condition}


def claims_table(claims: Sequence[Claim], title: str = "") -> str:
    """Plain-text table: verdict, claim, condition, measured numbers.

        >>> claims = [Claim("q_12 grows", True, "q_12(1) = 0.4"),
        ...           Claim("q_11 stays put", False, "q_11 moved by 0.3", "d = 16")]
        >>> print(claims_table(claims, "demo"))
        demo
          [    held] q_12 grows
                     measured:  q_12(1) = 0.4
          [NOT HELD] q_11 stays put
                     condition: d = 16
                     measured:  q_11 moved by 0.3
    """
    lines = [title] if title else []
    for c in claims:
        verdict = "held" if c.held else "NOT HELD"
        lines.append(f"  [{verdict:>8}] {c.text}")
        if c.condition:
            lines.append(f"             condition: {c.condition}")
        lines.append(f"             measured:  {c.measured}")
    return "\n".join(lines)


@dataclass
class FigureRun:
    """Curves, settings and claims of one reproduced figure.

    ``curves`` maps a curve label (``"sgd/seed0"``, ``"truncation/M4"``,
    ``"limit"``...) to a Trajectory; ``settings`` is JSON-serialisable and
    includes the seeds; ``plot(ax=None)`` is set by the figure's builder.

        >>> t = np.linspace(0.0, 1.0, 3)
        >>> theory = Trajectory(t=t, y=t[None, :], names=["q_12"], kind="demo")
        >>> run = FigureRun("demo", "a demo", {"seed": 0}, curves={"theory": theory},
        ...                 claims=[Claim("q_12 grows", True, "q_12(1) = 1")])
        >>> run.all_held, list(run.curves)
        (True, ['theory'])
    """

    name: str
    title: str
    settings: dict
    curves: dict = field(default_factory=dict)
    claims: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    plotter: Any = None  # (run, fig) -> Figure, set by the figure's builder
    wall_s: float = float("nan")

    @property
    def all_held(self) -> bool:
        return all(c.held for c in self.claims)

    def table(self) -> str:
        return claims_table(self.claims, f"{self.name}: {self.title}")

    def _repr_html_(self) -> str:
        """Notebook display: title, curves, settings, and every claim with its verdict."""
        from .display import html_summary
        held = sum(bool(c.held) for c in self.claims)
        fields = {"title": self.title, "curves": len(self.curves),
                  "claims held": f"{held} of {len(self.claims)}", **self.settings}
        rows = [("held" if c.held else "NOT HELD", c.text) for c in self.claims]
        return html_summary(f"FigureRun {self.name}", fields, table=rows,
                            table_header=("verdict", "claim"))

    def plot(self, fig: Figure | None = None) -> Figure:
        """Draw the figure; returns the matplotlib figure."""
        if self.plotter is None:
            raise RuntimeError(f"{self.name}: no plotter set")
        drawn: Figure = self.plotter(self, fig)
        return drawn

    def save(self, out_dir: str | os.PathLike[str], *, pdf: bool = True, png: bool = True,
             dpi: int = 200) -> dict[str, Any]:
        """Write ``<out>/<name>/<curve>.npz`` per curve, ``<out>/<name>.json``
        (settings, claims, curve index, wall time), ``<out>/<name>.png`` (200 dpi by
        default) and the vector ``<out>/<name>.pdf``, both through
        :func:`attndyn.numeric.core.plots.save_figure` (which refuses a figure with an
        unlabelled axis). Returns the paths written."""
        out_dir = str(out_dir)
        cdir = os.path.join(out_dir, self.name)
        os.makedirs(cdir, exist_ok=True)
        paths: dict[str, Any] = {"curves": {}}
        for label, traj in self.curves.items():
            if not isinstance(traj, Trajectory):
                raise TypeError(f"curve {label!r} is not a Trajectory")
            fn = os.path.join(cdir, label.replace("/", "_") + ".npz")
            paths["curves"][label] = traj.save(fn)
        meta = {"figure": self.name, "title": self.title, "settings": self.settings,
                "claims": [c.as_dict() for c in self.claims], "all_held": self.all_held,
                "curves": {k: os.path.relpath(v, out_dir) for k, v in paths["curves"].items()},
                "extra": self.extra, "wall_s": self.wall_s, "format": "attndyn-figure-1"}
        jpath = os.path.join(out_dir, self.name + ".json")
        safeio.atomic_write_text(jpath, json.dumps(jsonable(meta), indent=1))
        paths["json"] = jpath
        if png or pdf:
            import matplotlib

            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt

            from .plots import save_figure

            fig = self.plot()
            try:  # the project's one writer: style, atomic files, every axis labelled
                written = save_figure(fig, os.path.join(out_dir, self.name), dpi=dpi,
                                      formats=[f for f, on in (("png", png), ("pdf", pdf)) if on])
            finally:
                plt.close(fig)
            paths.update(written)
        return paths


def max_abs(a: ArrayLike) -> float:
    a = np.asarray(a, dtype=float)
    return float(np.max(np.abs(a))) if a.size else float("nan")
