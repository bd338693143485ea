"""Issue 25, item 2: every tied trajectory solver runs a numeric potential on its
certified surrogate route (box built around the start, grown as the trajectory leaves
it, quadrature outside), and every route records ``diagnostics["potential"]`` and names
a missed tolerance in the status message."""

import numpy as np
import pytest

from attndyn.numeric.attention.potentials import tied_potential
from attndyn.numeric.attention.tied.model import TiedModel
from attndyn.symbolic.initial import FreeInit, wishart
from attndyn.symbolic.losses import mse_teacher_student


@pytest.fixture(scope="module")
def tanh_model(tmp_path_factory):
    import os
    old = os.environ.get("ATTNDYN_CACHE_DIR")
    os.environ["ATTNDYN_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        pot = tied_potential(mse_teacher_student("tanh"), 2, tol=1e-5)
        yield TiedModel(2, [0], potential=pot)
    finally:
        if old is None:
            os.environ.pop("ATTNDYN_CACHE_DIR", None)
        else:
            os.environ["ATTNDYN_CACHE_DIR"] = old


class _Plain:
    """The quadrature route as a plain potential (what a model held before the surrogate
    route was the default): per-call ladder everywhere."""

    route = "numeric"
    K, L = 2, 1

    def __init__(self, num):
        self.num = num

    def gradient_function(self):
        return self.num.gradient_function()

    def parameters(self):
        return self.num.parameters()

    def error_report(self):
        return self.num.error_report()

    def reset_report(self):
        self.num.reset_report()


def _mats(d=12, seed=0):
    rng = np.random.default_rng(seed)
    Ws = [rng.standard_normal((d, d)) * (0.6 / np.sqrt(d)) for _ in range(2)]
    return Ws, [W @ W.T for W in Ws]


def _check_surrogate_report(res):
    rep = res.diagnostics["potential"]
    assert rep["route"] == "surrogate"
    assert rep["certificate"]["built"] and rep["certificate"]["passed"]
    assert rep["surrogate_calls"] > 0
    # the box covers the run (grown if it had to be): the quadrature served few calls
    assert rep["quadrature_calls"] <= 200
    assert rep["within_tolerance"] and rep["max_error"] <= rep["atol"] + rep["rtol"]
    return rep


def test_model_takes_the_surrogate_route(tanh_model):
    assert tanh_model.potential_route == "surrogate"
    assert tanh_model.numeric_potential.route == "surrogate"


def test_hierarchy_runs_on_the_surrogate(tanh_model):
    Ws, S = _mats()
    res = tanh_model.hierarchy(2).integrate(S, np.linspace(0, 1.0, 5), method="truncation",
                                            check=None)
    assert res.status == 0
    _check_surrogate_report(res)
    # the same trajectory on the quadrature route alone (the surrogate's reference)
    quad = TiedModel(2, [0], potential=_Plain(tanh_model.numeric_potential.source))
    assert quad.potential_route == "numeric"
    for n in (0, -1):  # the slopes along the trajectory agree within the tolerance
        y = np.ascontiguousarray(res.y[:, n])
        a, b = tanh_model.hierarchy(2).rhs(y), quad.hierarchy(2).rhs(y)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_matrix_flow_and_limit_and_compare_record_the_route(tanh_model):
    Ws, S = _mats()
    t = np.linspace(0, 0.5, 3)
    _check_surrogate_report(tanh_model.matrix_flow(S, t, order=2))
    lim = tanh_model.theory.limit_flow(FreeInit([wishart(0.6, 1.0), wishart(0.6, 1.0)]), t)
    assert lim.status == 0
    _check_surrogate_report(lim)
    th = tanh_model.theory.run(Ws, t, name="hierarchy", order=2, check=None,
                               words=tanh_model.words(2))
    assert th.diagnostics["potential"]["route"] == "surrogate"


def test_exact_route_records_an_empty_report():
    model = TiedModel(2, [0], mse_teacher_student("erf"))
    _, S = _mats()
    res = model.hierarchy(2).integrate(S, np.linspace(0, 0.2, 3), method="truncation", check=None)
    rep = res.diagnostics["potential"]
    assert rep["route"] == model.potential_route and rep["route"] not in ("surrogate", "numeric")
    assert rep["within_tolerance"] and rep["max_error"] == 0.0
    assert "exceeded its tolerance" not in res.message


class _Missing:
    """An exact Gamma whose report says it missed its tolerance (as a quadrature route
    that could not reach it would)."""

    route = "numeric"
    K, L = 2, 1

    def __init__(self, inner):
        self.inner = inner

    def gradient_function(self):
        return self.inner.gradient_function

    def parameters(self):
        return self.inner.gradient_parameters

    def error_report(self):
        return {"route": "numeric", "rtol": 1e-9, "atol": 1e-12, "calls": 7,
                "max_error": 3e-4, "over_tolerance": 7, "within_tolerance": False}


def test_missed_tolerance_is_named_in_the_message():
    inner = TiedModel(2, [0], mse_teacher_student("erf"))
    model = TiedModel(2, [0], potential=_Missing(inner))
    _, S = _mats()
    res = model.hierarchy(2).integrate(S, np.linspace(0, 0.2, 3), method="truncation", check=None)
    assert res.status == 0
    assert res.diagnostics["potential"]["over_tolerance"] == 7
    assert "exceeded its tolerance" in res.message and "3.00e-04" in res.message
    assert res.message.count("exceeded its tolerance") == 1
