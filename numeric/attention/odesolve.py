"""The one ODE driver of the package: :func:`solve_flow` integrates every matrix flow and
closed ODE (tied eq. 11 before projection, the untied flows, the direct-S ODE (402)-(404),
the corrected flows) with scipy's explicit or implicit solvers (DOP853 by default), with

- blow-up detection: a state entry above ``blowup`` (or non-finite) stops the run with
  status -3, keeping the outputs before it;
- a non-finite right-hand side at a finite state (a non-finite ``Gamma``) stops at once with
  status -3 instead of letting the solver shrink its step forever;
- a solver failure before the first output gives status -1 and an empty trajectory;
- repeated output times (two SGD checkpoints on one step) evaluated once and repeated;
- a wall-clock budget: ``time_limit`` seconds (``time.monotonic``, wall clock as in the
  truncation integrator), or an enclosing :func:`time_budget`, ends the run with status -4,
  keeping the outputs before; solvers that call scipy directly (the limit solvers) check
  the same budget in their right-hand side through :func:`budgeted` and stop with
  :class:`TimeLimitReached`;
- a work estimate from the horizon: an explicit solver whose stability limit at the start
  (the largest rate of the Jacobian, by power iteration) needs more than
  :data:`MAX_FLOW_STEPS` steps to reach ``t_eval[-1]`` is refused with one line
  (``matrix_flow(..., [0, 1e300])`` ran without end).

On a successful run the outputs are those of ``scipy.integrate.solve_ivp`` with the same
method, tolerances and ``t_eval``. Importing this module imports ``scipy.integrate``:
callers on the start-up path import it inside the function that integrates."""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from typing import NamedTuple

import numpy as np
from scipy import integrate as _ivp

from attndyn.numeric.core.validate import check_pos_float

__all__ = ["solve_flow", "check_solver_args", "FlowSolution", "time_budget", "budgeted",
           "TimeLimitReached", "check_horizon_work", "MAX_FLOW_STEPS"]

#: Most steps an explicit solver is allowed to need (estimated from the horizon and the
#: stability limit at the start) before a run without a time limit is refused instead of
#: started: scipy's steps cost 0.1-1 ms, so 10^6 steps are minutes.
MAX_FLOW_STEPS = 10 ** 6

# the deadline (time.monotonic seconds) of the innermost time_budget, or None
_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("attndyn_flow_deadline",
                                                           default=None)


class TimeLimitReached(Exception):
    """Raised inside a right-hand side wrapped by :func:`budgeted` once the enclosing
    :func:`time_budget` is spent; the solver's caller turns it into status -4."""

    def __init__(self, limit: float):
        super().__init__(f"time limit of {limit:.3g} s reached")
        self.limit = float(limit)


@contextlib.contextmanager
def time_budget(time_limit=None, *, until: float | None = None, name: str = "time_limit"):
    """A wall-clock budget of ``time_limit`` seconds (``time.monotonic``) for every solver
    entered inside, or the absolute deadline ``until``; nested budgets keep the earliest
    deadline. Neither given: no new budget (an enclosing one still applies)."""
    if time_limit is not None:
        limit = check_pos_float(time_limit, name)
        end = time.monotonic() + limit
    elif until is not None:
        end, limit = float(until), max(float(until) - time.monotonic(), 0.0)
    else:
        yield
        return
    prev = _DEADLINE.get()
    if prev is not None and prev[0] <= end:
        end, limit = prev
    token = _DEADLINE.set((end, limit))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline():
    """``(deadline, stated limit)`` of the enclosing budget, or ``None``."""
    return _DEADLINE.get()


def budgeted(fun):
    """``fun(t, y)`` that raises :class:`TimeLimitReached` once the enclosing
    :func:`time_budget` is spent (a ``time.monotonic`` call per evaluation, ~0.1 us)."""
    dl = _DEADLINE.get()
    if dl is None:
        return fun
    end, limit = dl

    def f(t, y):
        if time.monotonic() > end:
            raise TimeLimitReached(limit)
        return fun(t, y)
    return f


def _stiff_rate(fun, y0, n_iter: int = 8) -> float:
    """Largest rate ``|lambda|`` of the Jacobian of ``fun`` at ``(0, y0)``, by power
    iteration on finite-difference Jacobian-vector products (``n_iter + 1`` evaluations)."""
    y0 = np.asarray(y0, dtype=np.float64)
    if y0.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        f0 = np.asarray(fun(0.0, y0), dtype=np.float64)
        if not np.all(np.isfinite(f0)):
            return 0.0
        v = np.random.default_rng(0).standard_normal(y0.size)
        v /= np.linalg.norm(v)
        h = 1e-7 * max(1.0, float(np.linalg.norm(y0)))
        lam = 0.0
        for _ in range(n_iter):
            jv = (np.asarray(fun(0.0, y0 + h * v), dtype=np.float64) - f0) / h
            nrm = float(np.linalg.norm(jv))
            if not math.isfinite(nrm) or nrm == 0.0:
                return lam
            lam, v = nrm, jv / nrm
    return lam


def check_horizon_work(fun, y0, t_end: float, method, what: str = "flow",
                       max_steps: int = MAX_FLOW_STEPS) -> None:
    """Refuse with one line a run of an explicit solver (RK23, RK45, DOP853) to ``t_end``
    that needs more than ``max_steps`` steps by its stability limit at the start: about
    ``t_end * lambda / 3.3`` steps for the largest Jacobian rate ``lambda`` (3.3: the
    stability interval of DOP853 on the negative axis, the widest of the three). Implicit
    solvers and a ``t_end`` that passes are let through."""
    name = method if isinstance(method, str) else getattr(method, "__name__", "")
    if name not in ("RK23", "RK45", "DOP853") or not t_end > 0:
        return
    # short horizons too: a stiff start (a teacher at 1e10) needs ~1e9 steps to t = 0.1
    lam = _stiff_rate(fun, y0)
    steps = t_end * lam / 3.3
    if steps > max_steps or not math.isfinite(t_end):
        raise ValueError(f"{what}: t_eval[-1] = {t_end:.3g} needs about {steps:.3g} steps of "
                         f"{name} (stability limit at the start: rate {lam:.3g}), above "
                         f"{max_steps:.0e} (without a time limit); shorten the horizon (the "
                         f"flow relaxes on times of order 1/rate), use method='Radau' or 'BDF', or pass time_limit")


_METHODS = {"RK23": _ivp.RK23, "RK45": _ivp.RK45, "DOP853": _ivp.DOP853, "Radau": _ivp.Radau,
            "BDF": _ivp.BDF, "LSODA": _ivp.LSODA}


class FlowSolution(NamedTuple):
    t: np.ndarray        # output times reached (a prefix of t_eval)
    y: np.ndarray        # (n_state, n_out)
    status: int          # 0 success, -1 solver failure, -3 blow-up / non-finite, -4 time limit
    message: str
    t_reached: float


class _NonFiniteRHS(Exception):
    def __init__(self, t, ymax):
        super().__init__(t)
        self.t, self.ymax = float(t), float(ymax)


def check_solver_args(rtol, atol, blowup, method):
    """Validated ``(rtol, atol, blowup, solver class)``: tolerances finite and
    ``> 0``, ``blowup`` finite and ``> 0``, ``method`` a scipy solver name."""
    rtol = check_pos_float(rtol, "rtol")
    atol = check_pos_float(atol, "atol")
    blowup = check_pos_float(blowup, "blowup")
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
               blowup: float = 1e100, what: str = "matrix flow",
               time_limit: float | None = None) -> FlowSolution:
    """Integrate ``dy/dt = fun(t, y)`` from ``y(0) = y0`` and report ``y`` at ``t_eval``.

    ``t_eval`` must be validated (non-decreasing, ``>= 0``; see
    :func:`attndyn.numeric.core.validate.check_t_eval`). ``time_limit``: wall-clock
    seconds (``time.monotonic``; an enclosing :func:`time_budget` also applies, the earlier
    deadline wins); reaching it ends the run with status -4, keeping the outputs before.
    Returns a :class:`FlowSolution`; never raises on a failed integration. A horizon whose
    estimated work exceeds :data:`MAX_FLOW_STEPS` is refused before the run
    (:func:`check_horizon_work`: ``ValueError``).
    """
    rtol, atol, blowup, cls = check_solver_args(rtol, atol, blowup, method)
    with time_budget(time_limit):
        dl = _DEADLINE.get()
    end, limit = dl if dl is not None else (math.inf, 0.0)
    y0 = np.asarray(y0, dtype=np.float64)
    t_eval = np.asarray(t_eval, dtype=np.float64)
    if t_eval.size and dl is None:  # with a time limit the run is bounded by it instead
        check_horizon_work(fun, y0, float(t_eval[-1]), method if isinstance(method, str)
                           else cls.__name__, what)
    # repeated times: integrate to the distinct ones, repeat the outputs afterwards
    te, inverse = np.unique(t_eval, return_inverse=True)
    ts, ys = [], []
    try:
        solver = cls(_guarded_rhs(fun, blowup), 0.0, y0, float(te[-1]), rtol=rtol, atol=atol)
        status, message, t_reached = _march(solver, te, y0.size, ts, ys, blowup, end, limit,
                                            what)
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


def _guarded_rhs(fun, blowup):
    """``fun`` that raises :class:`_NonFiniteRHS` on a non-finite slope at a finite state
    within ``blowup``."""

    def f(t, y):
        dy = fun(t, y)
        # a non-finite slope at a finite, in-range state cannot be cured by smaller steps
        # (the solver would shrink them forever): a non-finite Gamma there
        if not np.all(np.isfinite(dy)) and np.all(np.isfinite(y)):
            ymax = np.max(np.abs(y), initial=0.0)
            if ymax <= blowup:
                raise _NonFiniteRHS(t, ymax)
        return dy
    return f


def _march(solver, te, n_y, ts, ys, blowup, end, limit, what):
    """Step ``solver`` to the last distinct output time of ``te``, appending to ``ts``, ``ys``
    the dense outputs that stay finite and within ``blowup``. Returns ``(status, message,
    t_reached)``: 0 at the end, -1 a solver failure, -3 a blow-up, -4 the wall-clock
    deadline ``end`` (``limit`` seconds)."""
    status, message, t_reached = None, "", 0.0
    i = 0
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
            vals = solver.dense_output()(te[i:j]).reshape(n_y, m)
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
        if status is None and time.monotonic() > end:
            status, t_reached = -4, float(te[i - 1]) if i else 0.0
            message = (f"{what}: wall-clock limit of {limit:.3g} s reached at t = "
                       f"{solver.t:.4g} (outputs up to t = {t_reached:.4g} kept): raise "
                       "time_limit or shorten the horizon")
        if status == -3:
            t_reached = float(te[i - 1]) if i else 0.0
            message = (f"{what}: the state exceeded blowup = {blowup:.3g} (or became "
                       f"non-finite) between t = {solver.t_old:.4g} and {t:.4g}: the flow "
                       "blows up; shorten the horizon or add weight decay")
        elif solver.status == "finished":
            status, t_reached = 0, float(t)
            message = f"success: the {what} reached the last output time"
    return status, message, t_reached
