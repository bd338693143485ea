"""time_limit honoured outside the truncation integrator and long horizons bounded by a work
estimate (issue D4): solve_flow, the tied and untied limit solvers, integrate(method=...)."""

import time

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.odesolve import solve_flow, time_budget
from attndyn.numeric.attention.tied.limit import limit_flow
from attndyn.symbolic.initial import FreeInit, scalar, wishart


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.fixture(scope="module")
def model():
    return attndyn.TiedModel(2, [0], square)


S = [np.diag([1.0, 0.5, 0.2]), np.diag([0.3, 0.8, 0.1])]


def _timed(f):
    w0 = time.monotonic()
    r = f()
    return r, time.monotonic() - w0


def test_solve_flow_time_limit_and_budget():
    def osc(t, y):  # forced: the step stays short, so the run is long
        return np.array([1e3 * np.sin(t), -y[0]])
    r, wall = _timed(lambda: solve_flow(osc, np.zeros(2), np.linspace(0, 1e5, 5), rtol=1e-10,
                                        atol=1e-12, time_limit=0.3))
    assert r.status == -4 and "wall-clock limit of 0.3 s" in r.message and wall < 10
    with time_budget(0.3):  # an enclosing budget reaches the driver too
        r2 = solve_flow(osc, np.zeros(2), np.linspace(0, 1e5, 5), rtol=1e-10, atol=1e-12)
    assert r2.status == -4
    with pytest.raises(ValueError, match="time_limit"):
        solve_flow(osc, np.zeros(2), [0.0, 1.0], rtol=1e-6, atol=1e-9, time_limit=-1.0)


def test_matrix_flow_to_1e300_is_refused_with_one_line(model):
    r, wall = _timed(lambda: pytest.raises(ValueError, attndyn.numeric.matrix_flow, model, S,
                                           [0.0, 1e300]))
    msg = str(r.value)
    assert "needs about" in msg and "steps" in msg and "\n" not in msg and wall < 10


@pytest.mark.parametrize("law", [FreeInit([wishart(1, 1), scalar(0.5)]),
                                 FreeInit([wishart(1, 1), wishart(0.5, 1)])],
                         ids=["commuting", "free"])
def test_limit_flow_horizon_and_time_limit(model, law):
    for T in (1e6, 1e300):
        with pytest.raises(ValueError, match="needs about .* steps"):
            limit_flow(model, law, [0.0, T])
    r, wall = _timed(lambda: limit_flow(model, law, [0.0, 1e6], time_limit=0.3))
    assert r.status == -4 and "wall-clock limit" in r.message and wall < 15
    assert limit_flow(model, law, [0.0, 1.0]).status == 0


def test_integrate_passes_time_limit_to_the_solver_that_runs(model):
    h = model.hierarchy(4)
    r, wall = _timed(lambda: h.integrate(S, [0.0, 1e6], time_limit=0.3, method="flow"))
    assert r.status == -4 and wall < 10
    law = FreeInit([wishart(1, 1), scalar(0.5)])
    r, wall = _timed(lambda: h.integrate(law, [0.0, 1e6], time_limit=0.3, method="limit"))
    assert r.status == -4 and wall < 15
    r, wall = _timed(lambda: h.integrate(S, [0.0, 1e6], time_limit=0.3, method="auto"))
    assert r.status != 0 and wall < 15


def test_untied_limit_time_limit():
    from attndyn.numeric.attention.untied.limit import DiagonalLaw, limit_flow as ulimit
    from attndyn.symbolic.losses import mse_teacher_student
    u = attndyn.UntiedModel(2, [0], mse_teacher_student("h2"), weight_decay=0.1)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 30)), rng.standard_normal((2, 30))
    law = DiagonalLaw(a, b, means=u.order_parameters(DiagonalLaw(a, b).pairs())["m"])
    with pytest.raises(ValueError, match="needs about .* steps"):
        ulimit(u, law, [0.0, 1e300])
    r, wall = _timed(lambda: ulimit(u, law, [0.0, 1e6], time_limit=0.3))
    assert r.status == -4 and "wall-clock limit" in r.message and wall < 15


def test_stiff_start_on_a_short_horizon_is_refused_not_run(model):
    # a teacher S_2 = 1e10 I makes the rate 2e10: 6e8 DOP853 steps to t = 0.1, which ran
    # without end (the work estimate was skipped for horizons up to 1e3)
    from hang_guard import finishes
    stiff = [np.diag([1.0, 0.5, 0.2]), 1e10 * np.eye(3)]

    def refused(f):
        with pytest.raises(ValueError, match="needs about .* steps"):
            f()
    finishes(lambda: refused(lambda: attndyn.numeric.matrix_flow(model, stiff, [0.0, 0.1])))
    law = FreeInit([wishart(0.5, 0.5), scalar(1e10)])
    finishes(lambda: refused(lambda: limit_flow(model, law, [0.0, 0.1])))
    ok = attndyn.numeric.matrix_flow(model, [S[0], 1e4 * np.eye(3)], [0.0, 0.1])
    assert ok.status == 0  # rate 2e4: some 600 steps, still run


def test_limit_flow_failing_on_its_first_step_reports_a_status(model):
    # the solver reached no output time: scipy's sol.y was an empty list and Y[:, :n]
    # raised "list indices must be integers or slices, not tuple"
    r = limit_flow(model, FreeInit([wishart(0.5, 0.5), scalar(1e200)]), [0.0, 0.1])
    assert r.status < 0 and "stopped at t = 0" in r.message, r.message
    assert r.t.size == 0 or np.all(np.isfinite(r.y))
