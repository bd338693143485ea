"""Plots of trajectories and SGD-vs-theory comparisons (matplotlib, imported lazily).

Every function takes ``ax=None`` (a new figure's axes then) and returns the axes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["plot_trajectory", "plot_comparison"]


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt
        _, ax = plt.subplots(figsize=(6.0, 4.0))
    return ax


def plot_trajectory(traj, names=None, ax=None, **kwargs):
    """Plot observables of a :class:`~attndyn.numeric.core.results.Trajectory` against ``t``."""
    ax = _axes(ax)
    names = traj.names if names is None else list(names)
    for n in names:
        ax.plot(traj.t, traj.y[traj.names.index(n)], label=n, **kwargs)
    ax.set_xlabel("t")
    ax.legend(fontsize="small")
    return ax


def plot_comparison(cmp, names=None, ax=None):
    """Theory (lines) and SGD (markers, with the seed spread as error bars)."""
    ax = _axes(ax)
    names = [n for n in (cmp.names if names is None else list(names))]
    for n in names:
        i = cmp.names.index(n)
        (line,) = ax.plot(cmp.t, cmp.theory.y[i], "-", label=f"{n} theory")
        yerr = None if cmp.spread is None else np.asarray(cmp.spread[n])
        ax.errorbar(cmp.t, cmp.sgd.y[i], yerr=yerr, fmt="o", ms=3, color=line.get_color(),
                    label=f"{n} SGD")
    p = cmp.params
    ax.set_xlabel("t (ODE time)")
    ax.set_title(f"{p.get('model', '')}: d={p.get('d')}, B={p.get('batch')}, "
                 f"eta={p.get('eta'):.3g}, theory={p.get('theory')}", fontsize="small")
    ax.legend(fontsize="x-small", ncol=2)
    return ax
