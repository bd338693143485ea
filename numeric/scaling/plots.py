"""Plots of the scaling-law bounds of paper 000 (section 7).

matplotlib is imported inside the functions only. Every function takes
``ax=None`` (a new figure is made when it is None) and returns the axes it
drew on. The paper's hidden constants are required keyword arguments, as in
:mod:`attndyn.numeric.scaling`; nothing is invented here.
"""

from __future__ import annotations

import numpy as np

from attndyn.numeric.scaling import bounds as sc

__all__ = [
    "plot_two_stage",
    "plot_phase_diagram",
    "plot_time_law",
    "plot_data_law",
    "plot_model_law",
    "plot_single_variable_laws",
]


def _axes(ax, ncols=1, figsize=None):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(1, ncols, figsize=figsize or (5.0 * ncols, 4.0))
    return ax


def _real(name, x):
    """``x`` as a float; a number is needed (it is formatted into a label)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {x!r}")
    return float(x)


def _nonempty(name, x):
    """``x`` as a 1-D float array with at least one entry (the axis limits need one)."""
    try:
        a = np.atleast_1d(np.asarray(x, dtype=float)).ravel()
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be real numbers, got {x!r}") from None
    if a.size == 0:
        raise ValueError(f"{name} must have at least one value, got an empty array")
    return a


def plot_two_stage(C, xis, N, L, d, *, alpha, prefactor, loss0, c_stat, frontier=True,
                   ax=None):
    """Excess-risk bound against compute for several noise levels.

    For each ``xi``: the two-stage bound at fixed data size ``N``
    (:func:`~attndyn.numeric.scaling.two_stage_bound`, solid), the stage
    boundary ``C*(N)`` of eq. (3) (dotted vertical line and marker), and with
    ``frontier=True`` the compute-optimal stage-II bound
    ``c_stat xi^2 / N*(C)`` (dashed), which decays like ``C^(-1/6)`` up to
    the Lambert-W logarithm.

        >>> ax = plot_two_stage(np.logspace(2, 12, 20), [0.5, 1.0], 10.0, 1, 1, alpha=1.0,
        ...                     prefactor=1.0, loss0=1.0, c_stat=1.0)
        >>> ax.get_xscale(), bool(ax.get_ylabel())
        ('log', True)
    """
    N = _real("N", N)
    ax = _axes(ax)
    C = np.asarray(C, dtype=float)
    for i, xi in enumerate(np.atleast_1d(xis)):
        color = f"C{i}"
        b = sc.two_stage_bound(C, N, xi, L, d, alpha=alpha, prefactor=prefactor, loss0=loss0,
                               c_stat=c_stat)
        ax.loglog(C, b, color=color, lw=2, label=f"fixed N={N:g}, xi={xi:g}")
        cstar = float(sc.threshold_compute(N, xi, L, d))
        if cstar > 0:
            ax.axvline(cstar, color=color, ls=":", lw=1)
            floor = c_stat * xi * xi / N
            ax.plot([cstar], [floor], "o", color=color, ms=5)
        if frontier:
            f = sc.stage_two_bound(C, xi, L, d, c_stat=c_stat)
            ax.loglog(C, f, color=color, ls="--", lw=1,
                      label=f"optimal N*(C), xi={xi:g}")
    ax.set_xlabel("compute C")
    ax.set_ylabel("excess-risk bound")
    ax.set_title("Theorem 7.1: stage I (exp) | stage II (~C^-1/6)")
    ax.legend(fontsize=7)
    return ax


def plot_phase_diagram(C, xis, L, d, ax=None):
    """The (C, N) plane split by eq. (3): stage I (compute-starved) where
    ``C <= C*(N)``, i.e. above the curve ``N*(C)``; stage II (data-limited)
    below it. One boundary per noise level; the region of the first is
    shaded.

        >>> ax = plot_phase_diagram(np.logspace(2, 12, 20), [0.5, 1.0], 1, 1)
        >>> ax.get_xscale(), bool(ax.get_xlabel()), bool(ax.get_ylabel())
        ('log', True, True)
    """
    C, xis = _nonempty("C", C), _nonempty("xis", xis)
    if not np.all(np.isfinite(C)):  # the shaded region needs finite axis limits
        raise ValueError("C must be finite in a phase diagram")
    ax = _axes(ax)
    top = None
    for i, xi in enumerate(xis):
        n = sc.critical_data_size(C, xi, L, d)
        ax.loglog(C, n, color=f"C{i}", lw=2, label=f"N*(C), xi={xi:g}")
        top = n if top is None else np.maximum(top, n)
    n0 = sc.critical_data_size(C, xis[0], L, d)
    ymax = float(np.max(top)) * 30.0
    ymin = float(np.min(n0)) / 30.0
    ax.fill_between(C, n0, ymax, color="C0", alpha=0.12)
    ax.fill_between(C, ymin, n0, color="C1", alpha=0.08)
    ax.text(0.04, 0.55, "stage I: compute-starved\n(C <= C*(N))", transform=ax.transAxes,
            fontsize=8)
    ax.text(0.55, 0.25, "stage II: data-limited\n(C > C*(N))", transform=ax.transAxes,
            fontsize=8)
    ax.set_ylim(ymin, ymax)
    ax.set_xlabel("compute C")
    ax.set_ylabel("data-set size N")
    ax.set_title("eq. (3): C = N^6 log(N L d/xi^2)/xi^2")
    ax.legend(fontsize=7, loc="lower right")
    return ax


def plot_time_law(T, N, xi, *, c_stat, alpha=1.0, prefactor=1.0, loss0=1.0, ax=None):
    """Time law of Theorem 7.2 for one or several ``N``: exponential decay in
    ``T`` down to the floor ``c_stat xi^2 / N`` (dotted).

        >>> ax = plot_time_law(np.linspace(0, 500, 20), [10.0, 20.0], 1.0, c_stat=1.0)
        >>> bool(ax.get_xlabel()), bool(ax.get_ylabel())
        (True, True)
    """
    ax = _axes(ax)
    T = np.asarray(T, dtype=float)
    for i, n in enumerate(np.atleast_1d(N)):
        b = sc.time_law(T, n, xi, c_stat=c_stat, alpha=alpha, prefactor=prefactor, loss0=loss0)
        ax.loglog(T, b, color=f"C{i}", label=f"N={n:g}")
        ax.axhline(c_stat * xi * xi / n, color=f"C{i}", ls=":", lw=1)
    ax.set_xlabel("training time T")
    ax.set_ylabel("bound")
    ax.set_title("time law (Thm 7.2)")
    ax.legend(fontsize=7)
    return ax


def plot_data_law(N, xis, *, c_stat, drag_xi0=None, ax=None):
    """Data law ``c_stat xi^2 / N`` for several ``xi``; with ``drag_xi0`` also
    the drag of section 7.2, ``xi(N) = drag_xi0 N^(1/2)``, which is flat.

        >>> ax = plot_data_law(np.logspace(1, 4, 10), [0.5, 1.0], c_stat=1.0, drag_xi0=1.0)
        >>> bool(ax.get_xlabel()), bool(ax.get_ylabel())
        (True, True)
    """
    ax = _axes(ax)
    N = np.asarray(N, dtype=float)
    for i, xi in enumerate(np.atleast_1d(xis)):
        ax.loglog(N, sc.data_law(N, xi, c_stat=c_stat), color=f"C{i}", label=f"xi={xi:g}")
    if drag_xi0 is not None:
        ax.loglog(N, sc.noise_drag_data(N, drag_xi0, 0.5, c_stat=c_stat), "k--",
                  label=f"drag: xi={drag_xi0:g} N^1/2")
    ax.set_xlabel("data-set size N")
    ax.set_ylabel("bound")
    ax.set_title("data law (Thm 7.2)")
    ax.legend(fontsize=7)
    return ax


def plot_model_law(M, N, xi, zetas, ax=None):
    """Model law ``xi^2 M^-zeta`` of Theorem 7.2 for several ``zeta``, drawn where it is valid
    (``M < N^(3/(2 zeta))``) and dotted beyond; the data floor ``xi^2/N`` is
    the grey line.

        >>> ax = plot_model_law(np.logspace(1, 6, 10), 100.0, 1.0, [0.1, 0.2])
        >>> bool(ax.get_xlabel()), bool(ax.get_ylabel())
        (True, True)
    """
    N = _real("N", N)
    ax = _axes(ax)
    M = np.asarray(M, dtype=float)
    for i, z in enumerate(np.atleast_1d(zetas)):
        b = sc.model_law(M, xi, z)
        ok = sc.model_law_valid(M, N, z)
        ax.loglog(M, np.where(ok, b, np.nan), color=f"C{i}", label=f"zeta={z:g}")
        ax.loglog(M, np.where(ok, np.nan, b), color=f"C{i}", ls=":")
    ax.axhline(xi * xi / N, color="0.5", lw=1, label="xi^2/N")
    ax.set_xlabel("model size M")
    ax.set_ylabel("bound")
    ax.set_title(f"model law (Thm 7.2), N={N:g}")
    ax.legend(fontsize=7)
    return ax


def plot_single_variable_laws(T, N, M, xi, *, c_stat, zetas=(0.1, 0.2, 0.3), N_time=None,
                              N_model=None, drag_xi0=None, axes=None):
    """The three laws of Theorem 7.2 side by side; returns the three axes.

    ``T``, ``N``, ``M`` are the axis grids; the time law is drawn for the data
    sizes ``N_time`` (default: the ends of ``N``), the model law at data size
    ``N_model`` (default: the smallest ``N``), the data law for ``xi/2``,
    ``xi``, ``2 xi`` (plus the drag with ``drag_xi0``).

        >>> axes = plot_single_variable_laws(np.linspace(0, 500, 10), np.logspace(1, 3, 5),
        ...                                  np.logspace(1, 6, 5), 1.0, c_stat=1.0)
        >>> len(axes)
        3
    """
    N, xi = _nonempty("N", N), _real("xi", xi)
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(1, 3, figsize=(15.0, 4.0))
    n_time = np.atleast_1d(N_time if N_time is not None else [np.min(N), np.max(N)])
    plot_time_law(T, n_time, xi, c_stat=c_stat, ax=axes[0])
    plot_data_law(N, [xi / 2.0, xi, 2.0 * xi], c_stat=c_stat, drag_xi0=drag_xi0, ax=axes[1])
    n_model = float(np.min(N)) if N_model is None else float(N_model)
    plot_model_law(M, n_model, xi, zetas, ax=axes[2])
    return axes
