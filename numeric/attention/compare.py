"""SGD against theory from one initial condition: aligned trajectories and errors.

:func:`compare` runs finite-d online SGD (:func:`attndyn.numeric.attention.training.sgd`) and
the theory from the same initial weights, evaluates the theory at the SGD
checkpoints (the exact times ``n_i * dt``), and reports per-observable errors.

Theories:

- tied: ``"flow"`` (the finite-d matrix flow, exact projection of the
  hierarchy, default) or ``"hierarchy"`` (the truncated hierarchy at
  ``order``, with its own convergence check);
- direct S: ``"ode"`` (the closed ODE (402)-(404), default) or ``"flow"``
  (the finite-d S matrix flow);
- untied: ``"flow"`` (the full finite-d flow, default), ``"slaved"``, ``"hierarchy"`` or
  ``"limit"`` (``d -> infinity`` from the Gaussian law of the pairs).

A ``"limit"`` theory (tied or untied) is a statement about the initial law: with a dict
``init``, ``n_seeds > 1`` and the law in ``theory_kwargs["law"]`` (or ``init_per_seed=True``)
each seed draws its own start from the law (one draw per seed), and :meth:`Comparison.z` /
:meth:`Comparison.rms_z` judge the gap in seed units.

The tied theory gets the same derived observables as SGD: ``p_kl = q_kl -
t_k t_l`` and ``loss = Phi(q)`` (when the potential is symbolic).

The model supplies its theories through the protocol
(:meth:`~attndyn.numeric.attention.base.AttentionModel.check_theory` and
:meth:`~attndyn.numeric.attention.base.AttentionModel.theory`, on the SGD's
time scale); this module never asks which parameterisation it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attndyn.numeric.attention.base import check_model
from attndyn.numeric.attention.training import gaussian_init, sgd, sgd_runs
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.threads import compute_threads
from attndyn.numeric.core.validate import resolve_rng

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from numpy.typing import NDArray

    from attndyn.numeric.attention.base import AttentionModel, Correction, Theory
    from attndyn.numeric.core.types import ArrayLike, PathLike, RngLike

__all__ = ["compare", "Comparison", "error_metrics", "load_comparison", "MAX_SEEDS"]

#: The most SGD runs one :func:`compare` call makes. Every run is kept (``runs``) and
#: stacked for the mean, and they run one after another, so the count is bounded before
#: any work, like a sweep's points (``attndyn.sweep``'s ``MAX_POINTS``); the CLI allows 256.
#: At 10^4 seeds the standard error of the mean is 1% of the spread.
MAX_SEEDS = 10_000

METRICS = ("max_abs", "rms", "final", "max_rel")


def error_metrics(a: np.ndarray, b: np.ndarray) -> dict:
    """``max_abs``, ``rms``, ``final`` (last time) and ``max_rel`` (max_abs over
    the theory's largest magnitude) of ``a - b`` (``b`` the reference)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    if a.size == 0:
        return {m: float("nan") for m in METRICS}
    e = a - b
    scale = float(np.max(np.abs(b)))
    mx = float(np.max(np.abs(e)))
    return {"max_abs": mx, "rms": float(np.sqrt(np.mean(e * e))), "final": float(abs(e[-1])),
            "max_rel": mx / scale if scale > 0 else (0.0 if mx == 0 else float("inf"))}


@dataclass
class Comparison:
    """SGD (mean over seeds) and theory at the same times, with errors.

    Attributes
    ----------
    t : array
        Common times (the model's ODE time).
    names : list of str
        Observables present in both.
    sgd, theory : Trajectory
        Aligned: same ``t``, rows in ``names`` order.
    runs : list of Trajectory
        The individual SGD runs (one per seed).
    spread : dict name -> array or None
        Standard deviation across seeds (``None`` for one seed).
    errors : dict name -> dict
        :func:`error_metrics` of SGD mean against theory.

    The errors are SGD mean minus theory per observable (:func:`error_metrics`); with
    several seeds :meth:`z` puts the gap in seed units, ``z(t) = mean_i D_i / (sd_i D_i /
    sqrt n)``, the scale on which paper 003's SGD-versus-theory claims are judged.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> cmp = attndyn.compare(model, {"d": 16, "seed": 0}, eta=0.01, batch=4,
    ...                       t_eval=[0.0, 0.1], rng=1)
    >>> isinstance(cmp, attndyn.Comparison), cmp.sgd.kind, cmp.theory.t.shape
    (True, 'sgd', (2,))
    >>> sorted(cmp.errors["q_11"])[:2]
    ['final', 'max_abs']
    """

    t: np.ndarray
    names: list
    sgd: Trajectory
    theory: Trajectory
    runs: list
    spread: dict | None
    errors: dict
    params: dict = field(default_factory=dict)
    status: int = 0
    message: str = ""

    @property
    def success(self) -> bool:
        return self.status == 0

    def __repr__(self) -> str:
        w, v = self.worst()
        return (f"Comparison(n_obs={len(self.names)}, n_t={self.t.size}, worst={w}: {v:.3g}, "
                f"status={self.status})")

    def error(self, name: str, metric: str = "max_abs") -> float:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        try:
            value: float = self.errors[name][metric]
            return value
        except KeyError:
            raise KeyError(f"no observable {name!r} in this comparison; have "
                           f"{', '.join(self.names)}") from None

    def z(self, name: str) -> NDArray[np.float64]:
        """SGD minus theory in seed units at every time: ``z(t) = mean_i D_i / (sd_i D_i /
        sqrt n)``, ``D_i`` run ``i`` minus the theory (NaN where the seed spread is 0, and
        for one seed). With ``theory="limit"`` and a dict ``init`` every seed has its own
        draw of the law, so ``z(0)`` measures the law's ``O(1/d)`` offset from the draws."""
        if name not in self.names:
            raise KeyError(f"no observable {name!r} in this comparison; have "
                           f"{', '.join(self.names)}")
        i = self.names.index(name)
        if self.spread is None:
            return np.full(self.t.size, np.nan)
        se = np.asarray(self.spread[name], float) / np.sqrt(len(self.runs))
        diff = self.sgd.y[i] - self.theory.y[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.nan)

    def rms_z(self, names: Sequence[str] | None = None) -> dict[str, float]:
        """``name -> rms of z(t)`` over the times ``t > 0`` (the seed-unit verdict of the
        figures: an unbiased theory gives about ``sqrt((n - 1)/(n - 3))`` for ``n`` seeds)."""
        names = [n for n in (self.names if names is None else names)]
        out = {}
        for n in names:
            z = self.z(n)[self.t > 0]
            z = z[np.isfinite(z)]
            out[n] = float(np.sqrt(np.mean(z * z))) if z.size else float("nan")
        return out

    def max_error(self, names: Sequence[str] | None = None, metric: str = "max_abs") -> float:
        names = self.names if names is None else list(names)
        return max(self.error(n, metric) for n in names)

    def worst(self, names: Sequence[str] | None = None, metric: str = "max_abs"
              ) -> tuple[str, float]:
        names = [n for n in (self.names if names is None else names) if n != "loss"]
        if not names:
            return ("", 0.0)
        vals = [self.error(n, metric) for n in names]
        i = int(np.nanargmax(vals)) if not all(np.isnan(vals)) else 0
        return names[i], vals[i]

    def table(self, names: Sequence[str] | None = None) -> str:
        names = self.names if names is None else list(names)
        head = f"{'observable':<14}{'max_abs':>12}{'rms':>12}{'final':>12}{'max_rel':>12}"
        if self.spread is not None:
            head += f"{'seed std':>12}"
        lines = [head]
        for n in names:
            e = self.errors[n]
            row = (f"{n:<14}{e['max_abs']:>12.3e}{e['rms']:>12.3e}{e['final']:>12.3e}"
                   f"{e['max_rel']:>12.3e}")
            if self.spread is not None:
                row += f"{float(np.max(self.spread[n])):>12.3e}"
            lines.append(row)
        return "\n".join(lines)

    def plot(self, names: Sequence[str] | None = None, ax: Axes | None = None) -> Axes:
        from attndyn.numeric.core.plots import plot_comparison
        return plot_comparison(self, names=names, ax=ax)

    # -- labelled exports and persistence ------------------------------------
    def to_xarray(self) -> Any:
        """An ``xarray.Dataset``: ``sgd``, ``theory`` (observable, time), ``runs`` (seed,
        observable, time), ``spread`` and one ``error_<metric>`` per metric."""
        from attndyn.numeric.core.labelled import comparison_to_xarray
        return comparison_to_xarray(self)

    def to_pandas(self) -> Any:
        """The errors as a ``pandas.DataFrame``: one row per observable, one column per metric."""
        import pandas as pd
        return pd.DataFrame({n: self.errors[n] for n in self.names}).T.rename_axis("observable")

    def _repr_html_(self) -> str:
        import html
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td>"
            + "".join(f"<td>{self.errors[n][m]:.3e}</td>" for m in METRICS) + "</tr>"
            for n in self.names[:40])
        return (f"<p><b>Comparison</b> (status {self.status}): {html.escape(self.message)}</p>"
                f"<table><tr><th>observable</th>"
                + "".join(f"<th>{m}</th>" for m in METRICS) + f"</tr>{rows}</table>")

    def save(self, path: PathLike) -> str:
        """Write to one ``.npz`` (no pickles): the aligned SGD mean and theory, every run,
        the spread and the errors, with each trajectory's labels in a JSON header.
        :func:`load_comparison` reads it back."""
        from attndyn.numeric.core.labelled import jsonable

        def header(t: Trajectory) -> dict[str, Any]:
            return {"names": list(t.names), "kind": t.kind, "params": jsonable(t.params),
                    "seed": jsonable(t.seed), "status": int(t.status), "message": t.message,
                    "words": None if t.words is None else [list(w) for w in t.words],
                    "inv": None if t.inv is None else list(t.inv)}
        path = str(path)
        if not path.endswith(".npz"):
            path += ".npz"
        arrays: dict[str, Any] = {"t": self.t, "sgd_t": self.sgd.t, "sgd_y": self.sgd.y,
                  "theory_t": self.theory.t, "theory_y": self.theory.y}
        for j, r in enumerate(self.runs):
            arrays[f"run{j}_t"], arrays[f"run{j}_y"] = r.t, r.y
        spread_names: list[str] = []
        for n, v in (self.spread or {}).items():
            if v is not None:
                arrays[f"spread{len(spread_names)}"] = np.asarray(v, dtype=np.float64)
                spread_names.append(n)
        head = {"format": COMPARISON_FORMAT, "names": list(self.names),
                "errors": jsonable(self.errors), "params": jsonable(self.params),
                "status": int(self.status), "message": self.message,
                "sgd": header(self.sgd), "theory": header(self.theory),
                "runs": [header(r) for r in self.runs], "spread": spread_names}
        from attndyn.numeric.core import safeio
        # atomic: a kill or a full disk mid-write leaves the previous file intact
        return safeio.atomic_savez(path, header=safeio.json_array(head), **arrays)


COMPARISON_FORMAT = "attndyn-comparison-1"


def load_comparison(path: PathLike) -> Comparison:
    """Read a :class:`Comparison` written by :meth:`Comparison.save` (never unpickles).

    Only a regular file is read (a FIFO, a device or a symlink to one is refused without
    blocking), through the bounded ``.npz`` reader of :mod:`attndyn.numeric.core.safeio`
    (a zip bomb or a truncated file is refused before inflating); every defect of the
    file raises a one-line ``ValueError`` naming it.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> import os, tempfile
    >>> cmp = attndyn.compare(model, {"d": 16, "seed": 0}, eta=0.01, batch=4,
    ...                       t_eval=[0.0, 0.1], rng=1)
    >>> back = attndyn.load_comparison(cmp.save(os.path.join(tempfile.mkdtemp(), "cmp.npz")))
    >>> back.names == cmp.names, back.status
    (True, 0)
    """
    from attndyn.numeric.core import safeio
    what = "not a valid attndyn comparison file:"
    with safeio.open_npz(path, what) as f:
        head = safeio.npz_json(f, "header")
        try:
            if not isinstance(head, dict) or head.get("format") != COMPARISON_FORMAT:
                raise ValueError(f"wrong format tag (expected {COMPARISON_FORMAT})")

            def arr(key: str, ndim: int) -> NDArray[np.float64]:
                return safeio.npz_array(f, key, ndim)

            def traj(h: dict[str, Any], t: str, y: str) -> Trajectory:
                return Trajectory(t=arr(t, 1), y=arr(y, 2), names=list(h["names"]),
                                  kind=h["kind"], params=h["params"], seed=h["seed"],
                                  status=int(h["status"]), message=h["message"],
                                  words=None if h["words"] is None else [tuple(w) for w in h["words"]],
                                  inv=None if h["inv"] is None else tuple(h["inv"]))
            runs = [traj(h, f"run{j}_t", f"run{j}_y") for j, h in enumerate(head["runs"])]
            spread = {n: safeio.npz_array(f, f"spread{j}")
                      for j, n in enumerate(head["spread"])} or None
            return Comparison(t=arr("t", 1), names=list(head["names"]),
                              sgd=traj(head["sgd"], "sgd_t", "sgd_y"),
                              theory=traj(head["theory"], "theory_t", "theory_y"), runs=runs,
                              spread=spread, errors=head["errors"], params=head["params"],
                              status=int(head["status"]), message=head["message"])
        except safeio.BadFile:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if isinstance(exc, KeyError):
                reason = f"missing entry {reason}"
            raise ValueError(f"{what} {path}: {reason}") from None


def _subset(traj: Trajectory, names: Sequence[str], t: np.ndarray | None = None,
            kind: str | None = None) -> Trajectory:
    idx = [traj.names.index(n) for n in names]
    y = traj.y[idx]
    tt = traj.t
    if t is not None:
        y = y[:, :t.size]
        tt = t
    return Trajectory(t=np.asarray(tt, float), y=y, names=list(names), words=None,
                      kind=kind or traj.kind, params=traj.params, seed=traj.seed,
                      status=traj.status, message=traj.message, diagnostics=traj.diagnostics,
                      inv=traj.inv)


#: Theories that start from the law of the initial condition, not from one draw: with a
#: dict ``init`` (:func:`gaussian_init` keywords), several seeds and the law given in
#: ``theory_kwargs["law"]`` (or ``init_per_seed=True``), each SGD seed draws its own start
#: from that law, so the seed spread includes the draws' ``O(d^-1/2)`` fluctuations the law
#: averages out.
LAW_THEORIES = ("limit",)


def _per_seed(init_per_seed: object, theory: str, init: object,
              theory_kwargs: dict[str, Any] | None) -> bool:
    """Whether each seed draws its own start: ``init_per_seed``, or by default (``None``)
    for a theory of the law given independently of the draws (``theory_kwargs["law"]``)."""
    if init_per_seed is None:
        return (theory in LAW_THEORIES and isinstance(init, dict)
                and (theory_kwargs or {}).get("law") is not None)
    if not isinstance(init_per_seed, bool):
        raise TypeError(f"init_per_seed must be True, False or None, got {init_per_seed!r}")
    if init_per_seed and (theory not in LAW_THEORIES or not isinstance(init, dict)):
        raise ValueError(f"init_per_seed=True needs a theory of the law ({LAW_THEORIES}) and a "
                         "dict init of gaussian_init keywords; a finite-d theory starts from "
                         "one draw")
    return init_per_seed


def _sgd_runs(model: AttentionModel, init: Sequence[Any] | dict[str, Any], n_seeds: int,
              seed: np.random.SeedSequence, kw: dict[str, Any], per_seed: bool = False
              ) -> tuple[Sequence[Any], list[Trajectory], bool]:
    """``(init, runs, per_seed)``: the initial weights (drawn when ``init`` is a dict of
    :func:`gaussian_init` keywords) and one SGD run per seed; with ``per_seed``, a dict
    ``init`` and more than one seed, run ``i`` starts from its own draw (the ``i``-th child
    of the dict's seed) and ``init`` is the first draw."""
    if isinstance(init, dict):
        opts = dict(init)
        if "d" not in opts:
            raise ValueError("init dict needs 'd' (and optionally scale, width, seed, symmetric)")
        d = opts.pop("d")
        if per_seed and _check_n_seeds(n_seeds) > 1:
            base = resolve_rng(opts.pop("rng", None), opts.pop("seed", None), name="init")
            draws = [gaussian_init(model, d, seed=c, **opts) for c in base.spawn(n_seeds)]
            runs = [sgd(model, w, rng=c, **kw) for w, c in zip(draws, seed.spawn(n_seeds))]
            return draws[0], runs, True
        init = gaussian_init(model, d, **opts)
    if _check_n_seeds(n_seeds) == 1:
        return init, [sgd(model, init, seed=seed, **kw)], False
    return init, sgd_runs(model, init, n_seeds=n_seeds, seed=seed, **kw), False


def _check_n_seeds(n_seeds: object) -> int:
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, (int, np.integer)) \
            or not 1 <= n_seeds <= MAX_SEEDS:
        raise ValueError(f"n_seeds must be an int in [1, {MAX_SEEDS}] (compare.MAX_SEEDS: "
                         f"every run is kept in memory), got {n_seeds!r}")
    return int(n_seeds)


def _sgd_mean(runs: list[Trajectory], common: list[str], t: np.ndarray
              ) -> tuple[np.ndarray, dict[str, np.ndarray] | None, Trajectory]:
    """The mean over the runs of the rows ``common`` at the times ``t``, their standard
    deviation per row (``None`` for one run) and the mean as a Trajectory."""
    n_t = t.size
    stack = np.array([[r.y[r.names.index(n), :n_t] for n in common] for r in runs])
    mean = stack.mean(axis=0)
    spread = None
    if len(runs) > 1:
        sd = stack.std(axis=0, ddof=1)
        spread = {n: sd[i] for i, n in enumerate(common)}
    sgd_mean = Trajectory(t=t.copy(), y=mean, names=list(common), kind="sgd" if len(runs) == 1
                          else "sgd_mean", params=runs[0].params,
                          seed=runs[0].seed if len(runs) == 1 else [r.seed for r in runs],
                          status=runs[0].status, message=runs[0].message,
                          diagnostics={"n_seeds": len(runs)})
    return mean, spread, sgd_mean


def _resolve_theory(model: AttentionModel, theory: str | None, order: int | None,
                    correction: str | Correction | None
                    ) -> tuple[Theory, str, int | None, Correction]:
    """``(theory object, theory name, order, correction)``, all checked before any SGD runs
    (a model without a theory refuses here: ``CapabilityError``, a ``ValueError``)."""
    th_obj = model.theory
    theory, order = th_obj.check(theory, order)
    corr = th_obj.correction(correction)
    corr.check(theory, order)
    return th_obj, theory, order, corr


def _theory_at(th_obj: Theory, corr: Correction, init: Any, t: np.ndarray,
               runs: list[Trajectory], *, theory: str, order: int | None, check: Any,
               eta: float, batch: int, theory_kwargs: dict[str, Any] | None) -> Trajectory:
    """The (corrected) theory from ``init`` at the SGD times ``t``; an empty trajectory
    with SGD's row names when SGD recorded no checkpoint."""
    if not t.size:  # SGD failed before its first checkpoint: nothing to compare at
        return Trajectory(t=np.zeros(0), y=np.zeros((len(runs[0].names), 0)),
                          names=list(runs[0].names), kind="theory", params={}, status=0,
                          message="theory not run: SGD recorded no checkpoint")
    return corr.apply(th_obj, init, t, name=theory, order=order, check=check,
                      words=runs[0].words, eta=float(eta), batch=int(batch),
                      **dict(theory_kwargs or {}))


def _common_names(runs: list[Trajectory], th: Trajectory, names: Sequence[str] | None
                  ) -> list[str]:
    """The observables of both SGD and theory in SGD's order, or the requested ``names``
    (``ValueError`` naming the missing ones)."""
    common = [n for n in runs[0].names if n in th.names]
    if names is None:
        return common
    missing = [n for n in names if n not in common]
    if missing:
        raise ValueError(f"names {missing} are not observables of both SGD and theory; "
                         f"have {common}")
    return list(names)


def _premises(th_obj: Theory, init: Any, params: dict[str, Any]) -> str:
    """Record the premises of the theorem behind the theory at this start (issue 18) in
    ``params["assumptions"]``; the message suffix naming those that fail."""
    verdicts = th_obj.assumptions(init, quick=True)
    params["assumptions"] = [v.as_dict() for v in verdicts]
    return "".join(f"; {v}" for v in verdicts if v.holds is False)


def compare(model: AttentionModel, init: Sequence[Any] | dict[str, Any], *, eta: float,
            batch: int, t_eval: ArrayLike, theory: str | None = None, order: int | None = None,
            rng: RngLike = None, seed: RngLike = None, n_seeds: int = 1,
            progress: bool | None = None, names: Sequence[str] | None = None,
            check: str | bool = "auto", theory_kwargs: dict | None = None,
            threads: int | None = 1, blas_threads: int | None = None,
            raise_on_failure: bool = False, correction: str = "none",
            init_per_seed: bool | None = None) -> Comparison:
    """Run SGD and theory from one initial condition and compare them.

    Parameters
    ----------
    model : TiedModel, UntiedModel or SModel
    init : list or dict
        The initial weights (tied ``W_k``, untied pairs ``(U_k, V_k)``, S ``S_k``), or a
        dict of :func:`attndyn.numeric.attention.training.gaussian_init` keywords (``d``,
        ``scale``, ``width``, ``seed``, ``symmetric``) for a seeded initialisation from
        which both start; see ``init_per_seed`` for one draw per seed.
    eta, batch, t_eval :
        As for :func:`attndyn.numeric.attention.training.sgd`.
    theory : str, optional
        Tied ``"flow"`` (default), ``"hierarchy"`` or ``"limit"``; untied ``"flow"``
        (default), ``"slaved"``, ``"hierarchy"`` or ``"limit"``; S ``"ode"`` (default) or
        ``"flow"``.
    order : int, optional
        Tied: longest word compared (default 2 for the flow, 4 for the hierarchy).
    rng, n_seeds :
        One run with ``rng``, or ``n_seeds`` (at most :data:`MAX_SEEDS`) runs seeded by its spawned children; the
        comparison uses their mean, and ``spread`` their standard deviation. ``rng`` is an
        int, a ``SeedSequence`` or a ``Generator`` (SPEC 7: the same int gives the same runs;
        a Generator is a source of entropy and advances); ``seed=`` is an alias.
    blas_threads :
        BLAS threads for the SGD and the theory (default one: see
        :func:`attndyn.numeric.core.threads.compute_threads`).
    names : list of str, optional
        Observables to keep (default: all common ones).
    check :
        Passed to the truncated hierarchy (convergence ladder).
    theory_kwargs : dict, optional
        Extra keywords for the theory call (``conv_tol``, ``rtol``...).
    threads : int or None
        numba threads of the SGD kernels (see :func:`attndyn.numeric.attention.training.sgd`).
    init_per_seed : bool or None
        One draw of the law per seed (the children of the dict's seed) for a theory of
        :data:`LAW_THEORIES` (``"limit"``) and a dict ``init``; ``None`` (default): when
        ``theory_kwargs["law"]`` gives the law. Without a given law the limit runs from the
        law read off the first draw, whose ``O(1/d)`` offset from the other draws shows in
        :meth:`Comparison.z` at ``t = 0`` (it grows like ``sqrt(n_seeds)``). Recorded in
        ``params["init_per_seed"]``.
    correction : "none", "noise", "noise+finite-d" or "finite-d"
        Finite-learning-rate correction of the theory (issue 16; tied ``theory="flow"``
        only, :func:`attndyn.numeric.attention.tied.noise_flow.noise_corrected_flow`), with
        ``eta``, ``batch`` and ``d`` of this comparison; ``"finite-d"``: the finite-width
        potential (:func:`attndyn.numeric.attention.tied.finite_width.finite_width_flow`).

    Returns
    -------
    Comparison

    The SGD runs follow paper 003's updates (eqs. 7, 25, 395) and the theory is the matching
    deterministic description: tied the matrix flow, the hierarchy of Theorem 2 (eq. 11) or
    its d -> infinity limit; untied the full or slaved finite-d flow, the slow hierarchy
    (eqs. 31-32, means slaved to ``m*(q)`` of eq. 29) or its limit; direct S the closed ODE
    (402)-(404) or the matrix flow. Both are reported at the same ODE times
    (``t = 4 eta n / d`` tied, eq. 9; ``tau = eta n / d`` otherwise).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> cmp = attndyn.compare(model, {"d": 16, "seed": 0}, eta=0.01, batch=4,
    ...                       t_eval=[0.0, 0.05, 0.1], rng=1)
    >>> cmp.status, cmp.names[:3], len(cmp.t)
    (0, ['mu_1', 'mu_2', 'q_11'], 3)
    >>> bool(cmp.max_error() < 10)
    True
    """
    model = check_model(model)
    _check_n_seeds(n_seeds)  # before any draw or run
    th_obj, theory, order, corr = _resolve_theory(model, theory, order, correction)
    seed = resolve_rng(rng, seed, name="compare")
    with compute_threads(blas_threads=blas_threads):  # SGD and the theory's flow inside
        init, runs, per_seed = _sgd_runs(model, init, n_seeds, seed, dict(
            eta=eta, batch=batch, t_eval=t_eval, progress=progress, order=order,
            threads=threads), per_seed=_per_seed(init_per_seed, theory, init, theory_kwargs))
    n_t = min(r.t.size for r in runs)
    t = runs[0].t[:n_t]
    status = next((int(r.status) for r in runs if r.status != 0), 0)
    msgs = [r.message for r in runs if r.status != 0]

    with compute_threads(blas_threads=blas_threads):
        th = _theory_at(th_obj, corr, init, t, runs, theory=theory, order=order, check=check,
                        eta=eta, batch=batch, theory_kwargs=theory_kwargs)
    if th.status not in (0,):
        msgs.append(f"theory: {th.message}")
        status = status if status != 0 else int(th.status)
    t = t[:min(n_t, th.t.size)]

    common = _common_names(runs, th, names)
    mean, spread, sgd_mean = _sgd_mean(runs, common, t)
    th_al = _subset(th, common, t=t)
    errors = {n: error_metrics(mean[i], th_al.y[i]) for i, n in enumerate(common)}
    params = dict(runs[0].params)
    params.update({"theory": theory, "order": order, "n_seeds": len(runs),
                   "correction": corr.name, "init_per_seed": per_seed})
    message = "success: SGD and theory compared" if status == 0 else "; ".join(msgs)
    message += _premises(th_obj, init, params)
    res = Comparison(t=t, names=common, sgd=sgd_mean, theory=th_al, runs=runs, spread=spread,
                     errors=errors, params=params, status=int(status), message=message)
    if raise_on_failure and res.status != 0:
        raise IntegrationError(message)
    return res
