"""Truncations against the exact matrix-flow oracle (MATH.md, issue 2 acceptance)."""

import numpy as np
import pytest

import attndyn
from attndyn.numeric import TruncationNotConverged, matrix_flow

from conftest import random_psd

OBS = [(0,), (0, 0), (0, 1)]  # t_1, q_11, q_12


@pytest.fixture(scope="module")
def mats():
    rng = np.random.default_rng(2024)
    d = 100
    return [random_psd(rng, d), random_psd(rng, d)]


def _max_err(res, flow):
    return max(float(np.abs(res.moment(w) - flow.moment(w)).max()) for w in OBS)


def test_order_16_matches_flow_where_converged(d3_model, mats):
    t = np.linspace(0, 0.05, 6)
    flow = matrix_flow(d3_model, mats, t, order=2)
    assert flow.success
    r14 = d3_model.hierarchy(14).integrate(mats, t, rtol=1e-12, atol=1e-14, check=None)
    r16 = d3_model.hierarchy(16).integrate(mats, t, rtol=1e-12, atol=1e-14, check=18)
    assert r16.success, r16.message
    diff_14_16 = max(float(np.abs(r14.moment(w) - r16.moment(w)).max()) for w in OBS)
    assert diff_14_16 < 1e-7
    assert _max_err(r16, flow) < 1e-6


def test_geometric_convergence_short_time(d3_model, mats):
    t = np.linspace(0, 0.15, 4)
    flow = matrix_flow(d3_model, mats, t, order=2)
    errs = [_max_err(d3_model.hierarchy(M).integrate(mats, t, check=None), flow) for M in (2, 6, 10, 14)]
    ratios = [b / a for a, b in zip(errs, errs[1:])]
    print("errors at M = 2, 6, 10, 14:", errs)
    assert all(r < 0.3 for r in ratios), errs
    assert errs[-1] < 1e-4


def test_weight_decay_converges_at_longer_times(mats):
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=8.0)
    t = np.linspace(0, 1.0, 5)
    flow = matrix_flow(model, mats, t, order=2)
    errs = [_max_err(model.hierarchy(M).integrate(mats, t, check=None), flow) for M in (4, 8, 12)]
    print("gamma = 8, T = 1, errors at M = 4, 8, 12:", errs)
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 1e-3


def test_divergent_horizon_reports_non_convergence(d3_model, mats):
    """T = 1, gamma = 0: the truncations diverge in M (MATH.md); the result must say so."""
    t = np.linspace(0, 1.0, 5)
    # the truncation alone; check="auto" compares with order 6 (method="auto" would switch
    # to the flow beyond the converged range, tests/attention/tied/test_long_horizon.py)
    res = d3_model.hierarchy(8).integrate(mats, t, method="truncation")
    assert res.status == 2 and not res.success
    assert "not converged" in res.message
    assert res.diagnostics["truncation_error_low"] > 1e-3
    with pytest.raises(TruncationNotConverged):
        d3_model.hierarchy(8).integrate(mats, t, raise_on_failure=True, method="truncation")


def test_converged_result_says_so(d3_model, mats):
    res = d3_model.hierarchy(12).integrate(mats, np.linspace(0, 0.02, 3))
    assert res.success and "converged" in res.message
    assert res.diagnostics["truncation_error_low"] < 1e-6
    assert set(res.diagnostics["truncation_error"]) == {10}  # check="auto": order M - 2
