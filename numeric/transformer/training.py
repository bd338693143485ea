r"""Training of paper 000's transformer, eq. (2): gradient flow and mini-batch SGD.

Eq. (2): ``d theta/dt = -grad_theta L(t, B(t))`` with ``L(t, B) = (1/|B|)
sum_{(X,Y) in B} ||F(X, theta) - Y||_F^2`` and ``|B| = alpha_agr n``.

- ``method="flow"``: full-batch gradient flow (``alpha_agr = 1``), integrated
  by :func:`scipy.integrate.solve_ivp` (``solver``, ``rtol``, ``atol``) from one
  output time to the next; ``dL/dt = -|grad L|^2`` holds exactly along it.
- ``method="sgd"``: ``theta <- theta - lr grad L(theta, B_k)`` with a fresh
  uniformly drawn batch of ``round(batch_fraction n)`` sequences per step (an
  unbiased estimate of the full loss); step ``k`` sits at time ``t = k lr``, so
  SGD is the Euler discretisation of eq. (2) and tends to the flow as
  ``lr -> 0`` with ``batch_fraction = 1``.

Recorded at each output time (rows of the returned
:class:`~attndyn.numeric.core.results.Trajectory`): ``loss`` (full training
loss), ``excess_risk`` (``mean ||F(X) - F*(X)||_F^2`` on the data's test set,
when it has one), ``grad_norm2`` (``|grad L|^2`` on the full training set) and,
on request, ``lemma41`` (Lemma 4.1's expression for ``dL/dt``),
``lambda_min_H_k`` and ``lambda_min_Hprime_k`` (per layer, 1-based names).

Blow-up: a non-finite loss or one above ``blowup`` ends the run with status
-1 and a message (``raise_on_failure=True`` raises
:class:`~attndyn.numeric.core.results.IntegrationError`); an integrator
failure gives status -2.
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.validate import resolve_seed

from .data import SeqData
from .model import Transformer, int_ge1, pos_float, seed_label

__all__ = ["train", "excess_risk"]

_OBSERVE = ("kernel", "lemma41", "theta")


#: Default bound on the gradient evaluations of one run (flow or SGD).
MAX_GRAD = 10 ** 6

_SOLVERS = ("RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA")
#: Stability interval of the explicit solvers on the negative real axis (|h lambda| <=).
_STAB = {"RK45": 3.3, "RK23": 2.5, "DOP853": 6.0}
_STAGES = {"RK45": 6, "RK23": 3, "DOP853": 12}


def _solver_class(name):
    import scipy.integrate as si
    if name not in _SOLVERS:
        raise ValueError(f"solver must be one of {_SOLVERS}, got {name!r}")
    return getattr(si, name)


def flow_work_estimate(model, X, Y, T, *, solver="RK45"):
    r"""A lower estimate of the gradient evaluations that gradient flow to time
    ``T`` costs with an explicit solver: ``stages * T q / s``, where ``q =
    g^T H g / |g|^2`` is the curvature of the loss along the gradient (one
    directional finite difference of the gradient; ``q <= lambda_max(H)``) and
    ``s`` the solver's stability interval on the negative real axis (3.3 for
    RK45). Returns ``(evaluations, q)``; 0 for the implicit solvers.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> n_eval, q = flow_work_estimate(tf, X, Y, 1.0)
        >>> n_eval > 0, q > 0
        (True, True)
    """
    if solver not in _STAB:
        return 0.0, float("nan")
    th0 = model.theta()
    m = model.copy()
    with np.errstate(all="ignore"):
        _, g = m.loss_and_grad(X, Y)
        gn = float(np.linalg.norm(g))
        if not math.isfinite(gn) or gn == 0:
            return 0.0, 0.0
        u = g / gn
        h = 1e-4 * max(1.0, float(np.linalg.norm(th0))) / math.sqrt(th0.size)
        m.set_theta(th0 + h * u)
        _, g2 = m.loss_and_grad(X, Y)
    q = float(np.dot(g2 - g, u) / h)
    if not math.isfinite(q) or q <= 0:
        return 0.0, q
    return _STAGES[solver] * float(T) * q / _STAB[solver], q


def _flow(mdl, X, Y, th, ts, solver, rtol, atol, blowup, max_grad, diag, record):
    """Gradient flow from one output time to the next. The blow-up guard reads
    the loss at *accepted* steps only: a rejected trial stage may overshoot (a
    gradient flow never increases the loss), and a non-finite trial stage is
    returned as NaN so that the step is rejected and retried smaller."""
    cls = _solver_class(solver)
    last = {"y": None, "loss": None}

    def rhs(t, y):
        if diag["n_grad"] >= max_grad:
            raise _WorkLimit(t)
        mdl.set_theta(y)
        with np.errstate(all="ignore"):
            loss, g = mdl.loss_and_grad(X, Y)
        diag["n_grad"] += 1
        last["y"], last["loss"] = y, loss
        if not (math.isfinite(loss) and np.all(np.isfinite(g))):
            return np.full_like(g, np.nan)
        return -g

    def loss_at(y):
        if last["y"] is not None and np.array_equal(last["y"], y):
            return last["loss"]
        mdl.set_theta(y)
        with np.errstate(all="ignore"):
            R = mdl._forward(X).F - Y
            return float(np.vdot(R, R) / X.shape[0])

    rows, times = [], []
    status, message = 0, ""
    t_prev = 0.0
    diag.update(n_accepted=0, max_loss_increase=0.0)
    prev = loss_at(th)
    for t in ts:
        if t > t_prev:
            try:
                sv = cls(rhs, t_prev, th, t, rtol=rtol, atol=atol)
                while sv.status == "running":
                    msg = sv.step()
                    if sv.status == "failed":
                        status, message = -2, f"integrator failed at t = {sv.t:.6g}: {msg}"
                        break
                    loss = loss_at(sv.y)
                    diag["n_accepted"] += 1
                    if math.isfinite(loss):
                        diag["max_loss_increase"] = max(diag["max_loss_increase"], loss - prev)
                        prev = loss
                    if not math.isfinite(loss) or loss > blowup:
                        status, message = -1, (f"blow-up: loss {loss:.3g} (limit {blowup:.3g}) "
                                               f"at an accepted step, t = {sv.t:.6g}")
                        break
            except _WorkLimit as w:
                status, message = -2, (f"work limit: {max_grad} gradient evaluations reached "
                                       f"at t = {w.t:.6g} (raise max_grad or lower T)")
            if status:
                break
            th = sv.y.copy()
            t_prev = t
        rows.append(record(th))
        times.append(t)
    return status, message, th, times, rows


class _WorkLimit(Exception):
    def __init__(self, t):
        self.t = t


def excess_risk(model, X_test, F_test) -> float:
    """``mean_i ||F(X_i) - F*(X_i)||_F^2`` over a noiseless test set: the excess risk
    ``Delta R(F) = R(F) - R(F*)`` of paper 000 when the noise has mean zero and is
    independent of ``X``.

        >>> import numpy as np
        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
        >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> excess_risk(tf, X, tf(X))
        0.0
    """
    X_test = model.check_X(X_test, "X_test")
    F_test = model.check_X(F_test, "F_test")
    if F_test.shape != X_test.shape:  # else (1, L, d) broadcast into a wrong risk
        raise ValueError(f"F_test must have the shape of X_test, {X_test.shape}, got "
                         f"{F_test.shape}")
    R = model._forward(X_test).F - F_test
    return float(np.vdot(R, R) / X_test.shape[0])


def _data(model, data):
    if isinstance(data, SeqData):
        X, Y = model.check_XY(data.X, data.Y)
        Xt = Ft = None
        if data.X_test is not None:
            Xt = model.check_X(data.X_test, "data.X_test")
            Ft = model.check_X(data.F_test, "data.F_test")
            if Ft.shape != Xt.shape:
                raise ValueError(f"data.F_test must have the shape of data.X_test, "
                                 f"{Xt.shape}, got {Ft.shape}")
        return X, Y, Xt, Ft, dict(data.params)
    if isinstance(data, (tuple, list)) and len(data) in (2, 4):
        X, Y = model.check_XY(data[0], data[1])
        Xt = Ft = None
        if len(data) == 4:
            Xt = model.check_X(data[2], "X_test")
            Ft = model.check_X(data[3], "F_test")
            if Ft.shape != Xt.shape:  # else F_test broadcast against F(X_test)
                raise ValueError(f"F_test must have the shape of X_test, {Xt.shape}, got "
                                 f"{Ft.shape}")
        return X, Y, Xt, Ft, {"n": X.shape[0]}
    raise TypeError("data must be a SeqData or a tuple (X, Y) or (X, Y, X_test, F_test)")


def _times(T, t_eval, n_eval, max_grad):
    """The output times; each recorded row costs a forward and backward pass, so at most
    ``max(max_grad, MAX_GRAD)`` of them (checked before ``np.linspace`` allocates them)."""
    T = pos_float(T, "T", " (training time)")
    limit = max(max_grad, MAX_GRAD)
    if t_eval is None:
        n_eval = int_ge1(n_eval, "n_eval")
        if n_eval + 1 > limit:
            raise ValueError(f"n_eval = {n_eval}: more output times (each row a forward and "
                             f"backward pass) than the limit of {limit} (max_grad or 10^6)")
        return np.linspace(0.0, T, n_eval + 1)
    t = np.asarray(t_eval, dtype=np.float64).ravel()
    if t.size > limit:
        raise ValueError(f"t_eval has {t.size} output times (each row a forward and backward "
                         f"pass), above the limit of {limit} (max_grad or 10^6)")
    if t.size == 0 or not np.all(np.isfinite(t)) or t[0] < 0 or np.any(np.diff(t) < 0) \
            or t[-1] > T * (1 + 1e-12):
        raise ValueError("t_eval must be finite, non-decreasing, in [0, T] and non-empty")
    return t


def train(model: Transformer, data, *, T, method="flow", t_eval=None, n_eval=50, lr=None,
          batch_fraction=1.0, seed=None, solver="RK45", rtol=1e-5, atol=1e-8,
          observe=(), blowup=1e8, raise_on_failure=False, inplace=False, max_grad=MAX_GRAD,
          record=()):
    """Train ``model`` on ``data`` for time ``T`` by eq. (2).

    Parameters
    ----------
    model : Transformer
        Trained on a copy unless ``inplace=True``.
    data : SeqData or (X, Y) or (X, Y, X_test, F_test)
    T : float > 0
        Training time (the ODE time of eq. 2).
    method : "flow" or "sgd"
    t_eval, n_eval
        Output times (default ``n_eval + 1`` equispaced points in [0, T]).
    lr : float > 0
        SGD step (time per step); required for ``method="sgd"``.
    batch_fraction : float in (0, 1]
        ``alpha_agr`` of section 3.2 (SGD only; the flow is full batch).
    seed : int or SeedSequence
        SGD batch draws (through ``SeedSequence``).
    record : "premises" or ()
        ``"premises"`` adds the lazy-regime premises of Lemma C.1 and eqs. (6)-(9)
        at every output time (:mod:`attndyn.numeric.transformer.premises`);
        Assumption 5.1's lambda at ``theta(0)`` for both kernels goes to
        ``params["premise_lambda"]``.
    observe : iterable of "kernel", "lemma41", "theta"
        Extra observables; ``"theta"`` keeps the parameter vector at every
        output time in ``result.diagnostics["matrices"]["theta"]`` (not saved).
    blowup : float > 0
        Loss above which the run stops with status -1. The flow reads it at
        the integrator's accepted steps only (a rejected trial stage may
        overshoot; a gradient flow never increases the loss).
    max_grad : int >= 1
        Bound on the gradient evaluations. SGD needs ``round(T / lr)``; more
        is refused before the run. For the explicit flow solvers a lower
        estimate (:func:`flow_work_estimate`) above it is refused before the
        run; a run that reaches it ends with status -2.

    Returns a :class:`Trajectory` of kind ``"transformer_flow"`` or
    ``"transformer_sgd"``; the trained model is ``result.diagnostics["matrices"]["model"]``.

    Examples
    --------
    >>> import numpy as np
    >>> from attndyn.numeric.transformer import Transformer
    >>> tf = Transformer(N=2, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
    >>> X = np.random.default_rng(1).standard_normal((5, 2, 3))
    >>> Y = Transformer(N=2, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
    >>> res = train(tf, (X, Y), T=0.5, n_eval=2)
    >>> res.status, len(res.t)
    (0, 3)
    >>> bool(res.observable("loss")[-1] < res.observable("loss")[0])
    True
    """
    observe, blowup, max_grad, record_set = _check_train_args(model, method, observe, blowup,
                                                              max_grad, record)
    X, Y, Xt, Ft, dparams = _data(model, data)
    ts = _times(T, t_eval, n_eval, max_grad)
    rtol, atol, lr = _check_work(model, X, Y, ts, T, method, solver, rtol, atol, lr, max_grad)
    mdl = model if inplace else model.copy()
    prem, names, thetas, record = _observers(mdl, X, Y, Xt, Ft, observe, record_set)
    status, message = 0, ""
    th = mdl.theta()
    diag = {"n_grad": 0}
    theta0 = th.copy()
    params = {"method": method, "T": float(T), "model": mdl.config(), "data": dparams,
              "blowup": blowup}
    if prem is not None:
        params["premise_lambda"] = dict(prem.lam)
    if method == "flow":
        params.update(solver=solver, rtol=float(rtol), atol=float(atol), max_grad=max_grad)
        status, message, th, times, rows = _flow(mdl, X, Y, th, ts, solver, rtol, atol,
                                                 blowup, max_grad, diag, record)
    else:
        status, message, th, times, rows = _sgd_steps(mdl, X, Y, th, ts, T, lr, batch_fraction,
                                                      seed, blowup, diag, record, params)
    mdl.set_theta(th)
    if status == 0:
        message = "ok"
    elif raise_on_failure:
        raise IntegrationError(message)
    y = np.asarray(rows, dtype=np.float64).T if rows else np.zeros((len(names), 0))
    diag["matrices"] = {"model": mdl, "theta0": theta0}
    if "theta" in observe:
        diag["matrices"]["theta"] = np.asarray(thetas)
    return Trajectory(t=np.asarray(times, dtype=np.float64), y=y.reshape(len(names), -1),
                      names=names, kind=f"transformer_{method}", params=params,
                      seed=params.get("sgd_seed", mdl.seed), status=status, message=message,
                      diagnostics=diag)


def _check_train_args(model, method, observe, blowup, max_grad, record):
    """The model, method, observables, blow-up level, gradient budget and records of
    :func:`train`, validated: ``(observe, blowup, max_grad, record_set)``."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    if method not in ("flow", "sgd"):
        raise ValueError(f"method must be 'flow' or 'sgd', got {method!r}")
    observe = tuple(observe)
    for o in observe:
        if o not in _OBSERVE:
            raise ValueError(f"observe entries must be among {_OBSERVE}, got {o!r}")
    blowup = pos_float(blowup, "blowup")
    max_grad = int_ge1(max_grad, "max_grad")
    record_set = (record,) if isinstance(record, str) else tuple(record)
    for r_ in record_set:
        if r_ != "premises":
            raise ValueError(f"record must be 'premises' or (), got {record!r}")
    return observe, blowup, max_grad, record_set


def _check_work(model, X, Y, ts, T, method, solver, rtol, atol, lr, max_grad):
    """The solver tolerances or the SGD step, and the gradient evaluations the run needs
    refused above ``max_grad`` before it starts: ``(rtol, atol, lr)``."""
    if method == "flow":
        _solver_class(solver)
        rtol, atol = pos_float(rtol, "rtol"), pos_float(atol, "atol")
        est, q = flow_work_estimate(model, X, Y, ts[-1], solver=solver)
        if est > max_grad:
            raise ValueError(
                f"T = {float(T):.6g} needs at least about {est:.3g} gradient evaluations with "
                f"{solver} (curvature along the gradient {q:.3g}, stability interval "
                f"{_STAB[solver]}), above max_grad = {max_grad}; lower T or raise max_grad")
        return rtol, atol, lr
    if lr is None:
        raise ValueError("lr (the SGD step, time per step) is required for method='sgd'")
    lr = pos_float(lr, "lr", " (SGD step)")
    n_steps = float(ts[-1]) / lr
    if n_steps > max_grad:
        raise ValueError(f"T / lr = {n_steps:.3g} SGD steps, above max_grad = {max_grad}; "
                         f"raise lr, lower T or raise max_grad")
    return rtol, atol, lr


def _observers(mdl, X, Y, Xt, Ft, observe, record_set):
    """The premise recorder (or ``None``), the row names, the kept parameter vectors and
    the ``record(theta)`` function of a run."""
    prem = None
    if "premises" in record_set:
        from .recorder import PremiseRecorder
        prem = PremiseRecorder(mdl, X)
    names = _row_names(mdl, Xt, observe, prem)
    thetas = []
    return prem, names, thetas, _recorder(mdl, X, Y, Xt, Ft, observe, names, prem, thetas)


def _row_names(mdl, Xt, observe, prem):
    """The rows of a training result: loss, squared gradient norm, then the observables."""
    names = ["loss", "grad_norm2"] + (["excess_risk"] if Xt is not None else [])
    if "lemma41" in observe:
        names.append("lemma41")
    if "kernel" in observe:
        names += [f"lambda_min_H_{k + 1}" for k in range(mdl.N)]
        names += [f"lambda_min_Hprime_{k + 1}" for k in range(mdl.N)]
    if prem is not None:
        names += prem.names
    return names


def _recorder(mdl, X, Y, Xt, Ft, observe, names, prem, thetas):
    """``record(theta)``: the row ``names`` at the parameters ``theta`` (the model is set
    to them); ``"theta"`` in ``observe`` appends a copy to ``thetas``."""
    from .kernel import parts_from_cache, min_eigenvalue
    n = X.shape[0]
    keep = "lemma41" in observe or prem is not None

    def record(th):
        mdl.set_theta(th)
        c = mdl._forward(X)
        R = c.F - Y
        row = {"loss": float(np.vdot(R, R) / n)}
        grads, deltas = mdl._backward(c, Y, keep_delta=keep)
        row["grad_norm2"] = float(sum(np.vdot(u, u) + np.vdot(w, w) for u, w in grads))
        if Xt is not None:
            row["excess_risk"] = excess_risk(mdl, Xt, Ft)
        if "lemma41" in observe or "kernel" in observe:
            lem = 0.0
            for k in range(mdl.N):
                Hb, Hg = parts_from_cache(mdl, c, k)
                if "lemma41" in observe:
                    dl = deltas[k].reshape(-1, mdl.d)
                    lem -= float(np.vdot(Hb + Hg, dl @ dl.T))
                if "kernel" in observe:
                    row[f"lambda_min_H_{k + 1}"] = min_eigenvalue(Hb + Hg)
                    row[f"lambda_min_Hprime_{k + 1}"] = min_eigenvalue(Hb)
            if "lemma41" in observe:
                row["lemma41"] = lem
        if prem is not None:
            row.update(prem.row(mdl, c, grads, deltas, row["loss"]))
        if "theta" in observe:
            thetas.append(th.copy())
        return [row[k] for k in names]
    return record


def _sgd_steps(mdl, X, Y, th, ts, T, lr, batch_fraction, seed, blowup, diag, record, params):
    """Mini-batch SGD of eq. (2) with step ``lr`` up to each output time, a row recorded at
    each; a batch loss above ``blowup`` (or non-finite) ends it with status -1. Returns
    ``(status, message, theta, times, rows)``; adds the SGD settings to ``params``."""
    n = X.shape[0]
    rows, times = [], []
    status, message = 0, ""
    if lr > float(T):
        raise ValueError(f"lr must be <= T (one SGD step advances time by lr), got "
                         f"lr = {lr}, T = {float(T)}")
    bf = pos_float(batch_fraction, "batch_fraction")
    if bf > 1:
        raise ValueError(f"batch_fraction must be in (0, 1], got {bf}")
    B = max(1, int(round(bf * n)))
    ss = resolve_seed(seed)
    rng = np.random.default_rng(ss)
    steps = np.rint(ts / lr).astype(np.int64)
    params.update(lr=lr, batch_fraction=bf, batch_size=B,
                  sgd_seed=seed_label(seed) if seed is not None else int(ss.entropy))
    k = 0
    for target in steps:
        while k < target:
            idx = np.arange(n) if B == n else rng.choice(n, size=B, replace=False)
            loss, g = mdl.loss_and_grad(X[idx], Y[idx])
            diag["n_grad"] += 1
            if not math.isfinite(loss) or loss > blowup or not np.all(np.isfinite(g)):
                status, message = -1, (f"blow-up: batch loss {loss:.3g} (limit {blowup:.3g}) "
                                       f"at step {k}, t = {k * lr:.6g}")
                break
            th = th - lr * g
            mdl.set_theta(th)
            k += 1
        if status:
            break
        rows.append(record(th))
        times.append(k * lr)
    return status, message, th, times, rows
