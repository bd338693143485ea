"""What a model takes as ``potential=`` and the trajectory route of a quadrature potential
(issue 25, items 2 and 3): the certified surrogate on the box the trajectory needs, the
quadrature outside it, the error report the integrators record."""

from types import SimpleNamespace

import numpy as np
import pytest

from potential_reference import reference

import attndyn
from attndyn.numeric.attention.potentials import (CompiledExact, NumericPotential, as_potential,
                                                  error_report, numeric_potential, record_error,
                                                  run_tracked, tied_potential)
from attndyn.numeric.attention.potentials.surrogate import Surrogate, SurrogateRoute, build_surrogate
from attndyn.symbolic import potential as sym
from attndyn.symbolic.losses import mse_teacher_student, softmax_teacher_student


def _route(act="tanh", tol=1e-6):
    num = numeric_potential("tied", mse_teacher_student(act), 2, 1, tol=tol)
    return num, as_potential(num, 2, 1)


def test_model_accepts_a_numeric_route_and_builds_it():
    """Item 3: what attndyn.symbolic.potential.tied_potential(..., route='numeric') returns
    goes into TiedModel(potential=) and is built (then routed through the surrogate)."""
    r = sym.tied_potential(mse_teacher_student("tanh"), 2, route="numeric", tol=1e-8)
    assert type(r).__name__ == "NumericRoute"
    m = attndyn.TiedModel(2, [0], potential=r)
    q = np.diag([3.0, 0.03])
    g = m.gamma(q)
    assert np.max(np.abs(g - reference("tanh", q))) <= 1e-8 * np.max(np.abs(g)) + 1e-11
    # the model without potential= takes the same route for this loss
    m2 = attndyn.TiedModel(2, [0], mse_teacher_student("tanh"))
    np.testing.assert_allclose(m2.gamma(q), g, rtol=1e-9)


def test_as_potential_cases_and_errors():
    num, route = _route()
    assert isinstance(route, SurrogateRoute) and route.source is num
    assert as_potential(num, 2, 1, trajectory=False) is num
    assert as_potential(None, 2) is None
    assert as_potential(route, 2, 1) is route
    exact = as_potential(sym.tied_potential(mse_teacher_student("erf"), 2), 2, 1)
    assert isinstance(exact, CompiledExact) and exact.error_report()["max_error"] == 0.0
    out = np.empty(4)
    q = np.array([[0.9, 0.3], [0.3, 0.7]])
    exact.gradient_function()(q.ravel().copy(), exact.parameters(), out)
    np.testing.assert_allclose(out.reshape(2, 2), reference("erf", q), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="K = 2, the model has K = 3"):
        as_potential(num, 3, 1)
    with pytest.raises(ValueError, match="L = 1 tokens, the model has L = 2"):
        as_potential(num, 2, 2)
    with pytest.raises(TypeError, match="tied_potential\\(loss, K, L, tol=...\\)"):
        as_potential(object(), 2)
    with pytest.raises(TypeError, match="build_potential"):
        attndyn.TiedModel(2, [0], potential="tanh")
    # the route itself names the function that builds it
    with pytest.raises(AttributeError, match="build_potential"):
        sym.tied_potential(mse_teacher_student("tanh"), 2, route="numeric").gradient_function()


def test_surrogate_route_inside_and_outside_its_box():
    """Inside the box the surrogate (certified), outside the quadrature ladder (counted,
    exit recorded); both within the tolerance against the independent reference."""
    num, route = _route("tanh", 1e-6)
    f, p = route.gradient_function(), route.parameters()
    q0 = np.array([[0.7, 0.2], [0.2, 0.9]])
    out = np.empty(4)
    f(q0.ravel().copy(), p, out)              # no box yet: the quadrature
    assert route.error_report()["quadrature_calls"] == 1 and route.exits == 0
    assert route.prepare(q0) and route.covers(q0) and route.parameters() is p
    cert = route.certificate
    assert cert["built"] and cert["passed"] and cert["max_ratio"] <= 0.5 and cert["terms"] > 0
    route.reset_report()
    f(q0.ravel().copy(), p, out)
    ref = reference("tanh", q0)
    assert np.all(np.abs(out.reshape(2, 2) - ref) <= 1e-9 + 1e-6 * np.abs(ref))
    far = np.diag([3.0, 0.03])
    f(far.ravel().copy(), p, out)
    assert np.max(np.abs(out.reshape(2, 2) - reference("tanh", far))) <= 1e-6 * np.max(np.abs(out)) + 1e-9
    rep = route.error_report()
    assert (rep["surrogate_calls"], rep["quadrature_calls"]) == (1, 1)
    assert route.exits == 1 and np.allclose(route.exit_q, far)
    assert rep["within_tolerance"] and rep["certificate"]["box"] == cert["box"]
    # one-off evaluations: the quadrature route
    np.testing.assert_allclose(route.gamma_at(far), num.gamma_at(far))
    near = np.array([[1.0, 0.3], [0.3, 1.0]])
    assert route.extend(near) and route.covers(near) and route.covers(q0)
    # a box that cannot be built (here: too few nodes allowed) leaves the quadrature in charge
    route._build = {"max_nodes": 5}
    assert not route.extend(far) and "max_nodes" in route.notes[-1]
    f(far.ravel().copy(), p, out)
    assert np.max(np.abs(out.reshape(2, 2) - reference("tanh", far))) <= 1e-6 * np.max(np.abs(out)) + 1e-9


def test_run_tracked_builds_extends_and_records():
    """run_tracked: box around the start, a run that leaves it is repeated on a grown box;
    the error report and the certificate land in the result's diagnostics."""
    num, route = _route("erf", 1e-6)
    f, p = route.gradient_function(), route.parameters()
    path = [np.array([[0.5 + 0.1 * k, 0.1], [0.1, 0.6]]) for k in range(6)]
    runs = []

    def run():
        out = np.empty(4)
        for q in path:
            for _ in range(10):
                f(q.ravel().copy(), p, out)
        runs.append(route.error_report()["quadrature_calls"])
        return SimpleNamespace(diagnostics={}, message="ok", status=0)

    res = run_tracked(route, path[0], run, rerun_above=5)
    assert len(runs) >= 2 and runs[0] > 5 and runs[-1] <= 5
    assert res.diagnostics["box_extensions"] == len(runs) - 1
    rep = res.diagnostics["potential"]
    assert rep["route"] == "surrogate" and rep["within_tolerance"] and res.message == "ok"
    assert rep["certificate"]["passed"] and route.covers(path[-1])
    # a plain potential: run once, report recorded
    res2 = run_tracked(num, path[0], lambda: SimpleNamespace(diagnostics={}, message="ok"))
    assert res2.diagnostics["potential"]["route"] == "numeric"


def test_record_error_names_a_missed_tolerance():
    num = numeric_potential("tied", mse_teacher_student("tanh"), 2, 1, tol=1e-9)
    num._LADDER_BUDGET = 1
    out = np.empty(4)
    num.gradient_function()(np.diag([3.0, 0.03]).ravel().copy(), num.parameters(), out)
    res = SimpleNamespace(diagnostics={}, message="integrated")
    rep = record_error(res, num)
    assert not rep["within_tolerance"] and res.diagnostics["potential"] is rep
    assert res.message.startswith("integrated; Gamma (numeric route) exceeded its tolerance")
    assert "1 evaluation(s)" in res.message
    # Hermite and a bare surrogate through the same function
    from attndyn.numeric.attention.potentials.hermite import HermitePotential
    hp = HermitePotential("tanh", q_max=2.0)
    assert error_report(hp)["route"] == "hermite" and error_report(hp)["within_tolerance"]


def test_integrate_in_box_takes_the_model_class_it_is_given():
    """integrate_in_box builds the model with the surrogate through the model's own class
    (surrogate.py imports no model)."""
    import ast
    import pathlib

    import attndyn.numeric.attention.potentials.surrogate as S
    tree = ast.parse(pathlib.Path(S.__file__).read_text())
    names = {a.module for a in ast.walk(tree) if isinstance(a, ast.ImportFrom) and a.module}
    assert not any("tied" in n or n.endswith("potentials") for n in names), names


@pytest.mark.slow
def test_softmax_model_built_the_documented_way_is_fast_and_certified():
    """Item 2: tied_potential(softmax_teacher_student(2), K=2, L=2, tol=1e-6) then
    TiedModel(potential=...): once its box is prepared, the compiled loop the hierarchy
    kernels run calls the certified surrogate, never the quadrature, and agrees with the
    independent reference within the tolerance. Its cost per call (<= 1 us; 264 ns against
    10.4 ms for the quadrature route) is measured in benchmarks/bench_potential.py, not here."""
    from numba import njit, types

    from attndyn.kernels.rhs import GRAD_FTYPE
    pot = tied_potential(softmax_teacher_student(2), K=2, L=2, tol=1e-6)
    model = attndyn.TiedModel(2, [0], L=2, potential=pot)
    route = model._numeric_potential
    q0 = np.array([[0.72, 0.27], [0.27, 0.76]])
    assert route.prepare(q0) and route.certificate["passed"]

    @njit(types.float64(GRAD_FTYPE, types.float64[::1], types.float64[::1], types.float64[::1],
                        types.int64))
    def loop(f, x, p, out, n):
        acc = 0.0
        for _ in range(n):
            x[0] += 1e-12
            f(x, p, out)
            acc += out[1]
        return acc

    f, p = model.gradient_function, model.gradient_parameters
    x = q0.ravel().copy()
    out = np.empty(4)
    calls = route.error_report()["quadrature_calls"]
    assert np.isfinite(loop(f, x, p, out, 10_000))
    assert route.error_report()["quadrature_calls"] == calls == 0
    g = model.gamma(q0)
    ref = reference("softmax", q0)
    assert np.all(np.abs(g - ref) <= 1e-9 + 1e-6 * np.abs(ref))
