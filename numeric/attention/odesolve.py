"""The one ODE driver of the package: :func:`solve_flow` integrates every matrix flow and
closed ODE (tied eq. 11 before projection, the untied flows, the direct-S ODE (402)-(404),
the corrected flows) with scipy's explicit or implicit solvers (DOP853 by default), with

- blow-up detection: a state entry above ``blowup`` (or non-finite) stops the run with
  status -3, keeping the outputs before it;
- a non-finite right-hand side at a finite state (a non-finite ``Gamma``) stops at once with
  status -3 instead of letting the solver shrink its step forever;
- a solver failure before the first output gives status -1 and an empty trajectory;
- repeated output times (two SGD checkpoints on one step) evaluated once and repeated.

On a successful run the outputs are those of ``scipy.integrate.solve_ivp`` with the same
method, tolerances and ``t_eval``. Importing this module imports ``scipy.integrate``:
callers on the start-up path import it inside the function that integrates."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import integrate as _ivp

from attndyn.numeric.core.validate import _check_pos_float

__all__ = ["solve_flow", "check_solver_args", "FlowSolution"]


_METHODS = {"RK23": _ivp.RK23, "RK45": _ivp.RK45, "DOP853": _ivp.DOP853, "Radau": _ivp.Radau,
            "BDF": _ivp.BDF, "LSODA": _ivp.LSODA}


class FlowSolution(NamedTuple):
    t: np.ndarray        # output times reached (a prefix of t_eval)
    y: np.ndarray        # (n_state, n_out)
    status: int          # 0 success, -1 solver failure, -3 blow-up / non-finite
    message: str
    t_reached: float


class _NonFiniteRHS(Exception):
    def __init__(self, t, ymax):
        super().__init__(t)
        self.t, self.ymax = float(t), float(ymax)


def check_solver_args(rtol, atol, blowup, method):
    """Validated ``(rtol, atol, blowup, solver class)``: tolerances finite and
    ``> 0``, ``blowup`` finite and ``> 0``, ``method`` a scipy solver name."""
    rtol = _check_pos_float(rtol, "rtol")
    atol = _check_pos_float(atol, "atol")
    blowup = _check_pos_float(blowup, "blowup")
    if isinstance(method, str):
        if method not in _METHODS:
            raise ValueError(f"method must be one of {', '.join(sorted(_METHODS))}, got "
                             f"{method!r}")
        cls = _METHODS[method]
    elif isinstance(method, type) and issubclass(method, _ivp.OdeSolver):
        cls = method
    else:
        raise TypeError(f"method must be a scipy solver name or OdeSolver class, got {method!r}")
    return rtol, atol, blowup, cls


def solve_flow(fun, y0, t_eval, *, rtol: float, atol: float, method="DOP853",
               blowup: float = 1e100, what: str = "matrix flow") -> FlowSolution:
    """Integrate ``dy/dt = fun(t, y)`` from ``y(0) = y0`` and report ``y`` at ``t_eval``.

    ``t_eval`` must be validated (non-decreasing, ``>= 0``; see
    :func:`attndyn.numeric.core.validate.check_t_eval`). Returns a
    :class:`FlowSolution`; never raises on a failed integration.
    """
    rtol, atol, blowup, cls = check_solver_args(rtol, atol, blowup, method)
    y0 = np.asarray(y0, dtype=np.float64)
    t_eval = np.asarray(t_eval, dtype=np.float64)
    # repeated times: integrate to the distinct ones, repeat the outputs afterwards
    te, inverse = np.unique(t_eval, return_inverse=True)

    def f(t, y):
        dy = fun(t, y)
        # a non-finite slope at a finite, in-range state cannot be cured by smaller steps
        # (the solver would shrink them forever): a non-finite Gamma there
        if not np.all(np.isfinite(dy)) and np.all(np.isfinite(y)):
            ymax = np.max(np.abs(y), initial=0.0)
            if ymax <= blowup:
                raise _NonFiniteRHS(t, ymax)
        return dy

    ts, ys = [], []
    status, message, t_reached = None, "", 0.0
    i = 0
    try:
        solver = cls(f, 0.0, y0, float(te[-1]), rtol=rtol, atol=atol)
        while status is None:
            msg = solver.step()
            if solver.status == "failed":
                status, t_reached = -1, float(solver.t)
                message = (f"{what}: the solver failed at t = {solver.t:.4g} ({msg}) before the "
                           "last output time")
                break
            t, y = solver.t, solver.y
            j = int(np.searchsorted(te, t, side="right"))
            if j > i:
                m = j - i
                vals = solver.dense_output()(te[i:j]).reshape(y0.size, m)
                ok = np.all(np.isfinite(vals), axis=0) & (np.abs(vals).max(axis=0, initial=0.0)
                                                          <= blowup)
                n_ok = m if ok.all() else int(np.argmin(ok))
                ts.append(te[i:i + n_ok])
                ys.append(vals[:, :n_ok])
                i += n_ok
                if n_ok < m:
                    status = -3
            if status is None and (not np.all(np.isfinite(y))
                                   or (y.size and np.max(np.abs(y)) > blowup)):
                status = -3
            if status == -3:
                t_reached = float(te[i - 1]) if i else 0.0
                message = (f"{what}: the state exceeded blowup = {blowup:.3g} (or became "
                           f"non-finite) between t = {solver.t_old:.4g} and {t:.4g}: the flow "
                           "blows up; shorten the horizon or add weight decay")
            elif solver.status == "finished":
                status, t_reached = 0, float(t)
                message = f"success: the {what} reached the last output time"
    except _NonFiniteRHS as exc:
        status, t_reached = -3, exc.t
        message = (f"{what}: the right-hand side became non-finite at t = {exc.t:.4g} at a finite "
                   f"state (max |y| = {exc.ymax:.3g}): the potential's gradient (Gamma) is not "
                   "finite there, e.g. a loss whose expectation is undefined, or it overflows")
    t_out = np.concatenate(ts) if ts else np.zeros(0)
    y_out = np.concatenate(ys, axis=1) if ys else np.zeros((y0.size, 0))
    n = t_out.size
    sel = inverse[inverse < n] if n < te.size else inverse
    return FlowSolution(t=t_eval[:sel.size].copy(), y=y_out[:, sel], status=int(status),
                        message=message, t_reached=t_reached)
