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
- untied: no theory yet (the untied theory issue); use :func:`sgd` alone.

The tied theory gets the same derived observables as SGD: ``p_kl = q_kl -
t_k t_l`` and ``loss = Phi(q)`` (when the potential is symbolic).

The model supplies its theories through the protocol
(:meth:`~attndyn.numeric.attention.base.AttentionModel.check_theory` and
:meth:`~attndyn.numeric.attention.base.AttentionModel.theory`, on the SGD's
time scale); this module never asks which parameterisation it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attndyn.numeric.attention.base import check_model
from attndyn.numeric.attention.training import gaussian_init, sgd, sgd_runs
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.threads import compute_threads
from attndyn.numeric.core.validate import resolve_rng

__all__ = ["compare", "Comparison", "error_metrics", "load_comparison"]

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

    def __repr__(self):
        w, v = self.worst()
        return (f"Comparison(n_obs={len(self.names)}, n_t={self.t.size}, worst={w}: {v:.3g}, "
                f"status={self.status})")

    def error(self, name: str, metric: str = "max_abs") -> float:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        try:
            return self.errors[name][metric]
        except KeyError:
            raise KeyError(f"no observable {name!r} in this comparison; have "
                           f"{', '.join(self.names)}") from None

    def max_error(self, names=None, metric: str = "max_abs") -> float:
        names = self.names if names is None else list(names)
        return max(self.error(n, metric) for n in names)

    def worst(self, names=None, metric: str = "max_abs") -> tuple:
        names = [n for n in (self.names if names is None else names) if n != "loss"]
        if not names:
            return ("", 0.0)
        vals = [self.error(n, metric) for n in names]
        i = int(np.nanargmax(vals)) if not all(np.isnan(vals)) else 0
        return names[i], vals[i]

    def table(self, names=None) -> str:
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

    def plot(self, names=None, ax=None):
        from attndyn.numeric.core.plots import plot_comparison
        return plot_comparison(self, names=names, ax=ax)

    # -- labelled exports and persistence ------------------------------------
    def to_xarray(self):
        """An ``xarray.Dataset``: ``sgd``, ``theory`` (observable, time), ``runs`` (seed,
        observable, time), ``spread`` and one ``error_<metric>`` per metric."""
        from attndyn.numeric.core.labelled import comparison_to_xarray
        return comparison_to_xarray(self)

    def to_pandas(self):
        """The errors as a ``pandas.DataFrame``: one row per observable, one column per metric."""
        import pandas as pd
        return pd.DataFrame({n: self.errors[n] for n in self.names}).T.rename_axis("observable")

    def _repr_html_(self):
        import html
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td>"
            + "".join(f"<td>{self.errors[n][m]:.3e}</td>" for m in METRICS) + "</tr>"
            for n in self.names[:40])
        return (f"<p><b>Comparison</b> (status {self.status}): {html.escape(self.message)}</p>"
                f"<table><tr><th>observable</th>"
                + "".join(f"<th>{m}</th>" for m in METRICS) + f"</tr>{rows}</table>")

    def save(self, path) -> str:
        """Write to one ``.npz`` (no pickles): the aligned SGD mean and theory, every run,
        the spread and the errors, with each trajectory's labels in a JSON header.
        :func:`load_comparison` reads it back."""
        from attndyn.numeric.core.labelled import jsonable

        def header(t):
            return {"names": list(t.names), "kind": t.kind, "params": jsonable(t.params),
                    "seed": jsonable(t.seed), "status": int(t.status), "message": t.message,
                    "words": None if t.words is None else [list(w) for w in t.words],
                    "inv": None if t.inv is None else list(t.inv)}
        path = str(path)
        if not path.endswith(".npz"):
            path += ".npz"
        arrays = {"t": self.t, "sgd_t": self.sgd.t, "sgd_y": self.sgd.y,
                  "theory_t": self.theory.t, "theory_y": self.theory.y}
        for j, r in enumerate(self.runs):
            arrays[f"run{j}_t"], arrays[f"run{j}_y"] = r.t, r.y
        spread_names = []
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


def load_comparison(path) -> Comparison:
    """Read a :class:`Comparison` written by :meth:`Comparison.save` (never unpickles).

    Only a regular file is read (a FIFO, a device or a symlink to one is refused without
    blocking), through the bounded ``.npz`` reader of :mod:`attndyn.numeric.core.safeio`
    (a zip bomb or a truncated file is refused before inflating); every defect of the
    file raises a one-line ``ValueError`` naming it."""
    from attndyn.numeric.core import safeio
    what = "not a valid attndyn comparison file:"
    with safeio.open_npz(path, what) as f:
        head = safeio.npz_json(f, "header")
        try:
            if not isinstance(head, dict) or head.get("format") != COMPARISON_FORMAT:
                raise ValueError(f"wrong format tag (expected {COMPARISON_FORMAT})")

            def arr(key, ndim):
                return safeio.npz_array(f, key, ndim)

            def traj(h, t, y):
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


def _subset(traj: Trajectory, names, t=None, kind=None) -> Trajectory:
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


def _sgd_runs(model, init, n_seeds, seed, kw):
    """``(init, runs)``: the initial weights (drawn when ``init`` is a dict of
    :func:`gaussian_init` keywords) and one SGD run per seed."""
    if isinstance(init, dict):
        opts = dict(init)
        if "d" not in opts:
            raise ValueError("init dict needs 'd' (and optionally scale, width, seed, symmetric)")
        d = opts.pop("d")
        init = gaussian_init(model, d, **opts)
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, (int, np.integer)) or n_seeds < 1:
        raise ValueError(f"n_seeds must be an int >= 1, got {n_seeds!r}")
    if n_seeds == 1:
        return init, [sgd(model, init, seed=seed, **kw)]
    return init, sgd_runs(model, init, n_seeds=n_seeds, seed=seed, **kw)


def _sgd_mean(runs, common, t):
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


def _resolve_theory(model, theory, order, correction):
    """``(theory object, theory name, order, correction)``, all checked before any SGD runs
    (a model without a theory refuses here: ``CapabilityError``, a ``ValueError``)."""
    th_obj = model.theory
    theory, order = th_obj.check(theory, order)
    corr = th_obj.correction(correction)
    corr.check(theory, order)
    return th_obj, theory, order, corr


def _theory_at(th_obj, corr, init, t, runs, *, theory, order, check, eta, batch,
               theory_kwargs):
    """The (corrected) theory from ``init`` at the SGD times ``t``; an empty trajectory
    with SGD's row names when SGD recorded no checkpoint."""
    if not t.size:  # SGD failed before its first checkpoint: nothing to compare at
        return Trajectory(t=np.zeros(0), y=np.zeros((len(runs[0].names), 0)),
                          names=list(runs[0].names), kind="theory", params={}, status=0,
                          message="theory not run: SGD recorded no checkpoint")
    return corr.apply(th_obj, init, t, name=theory, order=order, check=check,
                      words=runs[0].words, eta=float(eta), batch=int(batch),
                      **dict(theory_kwargs or {}))


def _common_names(runs, th, names):
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


def _premises(th_obj, init, params) -> str:
    """Record the premises of the theorem behind the theory at this start (issue 18) in
    ``params["assumptions"]``; the message suffix naming those that fail."""
    verdicts = th_obj.assumptions(init, quick=True)
    params["assumptions"] = [v.as_dict() for v in verdicts]
    return "".join(f"; {v}" for v in verdicts if v.holds is False)


def compare(model, init, *, eta, batch, t_eval, theory: str | None = None, order: int | None = None,
            rng=None, seed=None, n_seeds: int = 1, progress=None, names=None, check="auto",
            theory_kwargs: dict | None = None, threads: int | None = 1, blas_threads=None,
            raise_on_failure: bool = False, correction: str = "none") -> Comparison:
    """Run SGD and theory from one initial condition and compare them.

    Parameters
    ----------
    model : TiedModel or SModel
        (An UntiedModel raises: its theory is not implemented yet.)
    init : list or dict
        The initial weights (tied ``W_k``, S ``S_k``), or a dict of
        :func:`attndyn.numeric.attention.training.gaussian_init` keywords (``d``, ``scale``,
        ``width``, ``seed``, ``symmetric``) for a seeded initialisation from
        which both start.
    eta, batch, t_eval :
        As for :func:`attndyn.numeric.attention.training.sgd`.
    theory : str, optional
        Tied ``"flow"`` (default) or ``"hierarchy"``; S ``"ode"`` (default)
        or ``"flow"``.
    order : int, optional
        Tied: longest word compared (default 2 for the flow, 4 for the hierarchy).
    rng, n_seeds :
        One run with ``rng``, or ``n_seeds`` runs seeded by its spawned children; the
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
    correction : "none", "noise", "noise+finite-d" or "finite-d"
        Finite-learning-rate correction of the theory (issue 16; tied ``theory="flow"``
        only, :func:`attndyn.numeric.attention.tied.noise_flow.noise_corrected_flow`), with
        ``eta``, ``batch`` and ``d`` of this comparison; ``"finite-d"``: the finite-width
        potential (:func:`attndyn.numeric.attention.tied.finite_width.finite_width_flow`).

    Returns
    -------
    Comparison
    """
    model = check_model(model)
    th_obj, theory, order, corr = _resolve_theory(model, theory, order, correction)
    seed = resolve_rng(rng, seed, name="compare")
    with compute_threads(blas_threads=blas_threads):  # SGD and the theory's flow inside
        init, runs = _sgd_runs(model, init, n_seeds, seed, dict(
            eta=eta, batch=batch, t_eval=t_eval, progress=progress, order=order,
            threads=threads))
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
                   "correction": corr.name})
    message = "success: SGD and theory compared" if status == 0 else "; ".join(msgs)
    message += _premises(th_obj, init, params)
    res = Comparison(t=t, names=common, sgd=sgd_mean, theory=th_al, runs=runs, spread=spread,
                     errors=errors, params=params, status=int(status), message=message)
    if raise_on_failure and res.status != 0:
        raise IntegrationError(message)
    return res
