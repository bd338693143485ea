"""rtol of ``TiedHierarchy.integrate``: the range it takes, and the tolerance the flow
route states (scipy raises an rtol below 100 eps to 100 eps, so the stated error must
come from the tolerance that ran, not from the one asked for)."""

import warnings

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.tied.hierarchy import FLOW_RTOL_FLOOR


def linear(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.fixture(scope="module")
def setup():
    h = attndyn.TiedModel(2, [0], linear).hierarchy(4)
    rng = np.random.default_rng(0)
    mats = [0.5 * np.eye(3) + 0.01 * rng.standard_normal((3, 3)) for _ in range(2)]
    return h, [(a + a.T) / 2 for a in mats]


def test_floor_is_scipys():
    assert FLOW_RTOL_FLOOR == 100 * np.finfo(float).eps


@pytest.mark.parametrize("method", ["flow", "auto"])
def test_rtol_below_the_floor_states_the_tolerance_used(setup, method):
    h, mats = setup
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no scipy "rtol too small" warning either
        r = h.integrate(mats, np.linspace(0, 3, 7), method=method, rtol=1e-20)
    assert r.status == 0, r.message
    seg = r.diagnostics["segments"][-1]
    assert seg["method"] == "flow"
    assert seg["error"] >= 100 * FLOW_RTOL_FLOOR
    assert "1e-18" not in r.message and "1e-20" in r.message
    assert f"{FLOW_RTOL_FLOOR:.2g}" in r.message
    assert r.params["rtol"] == 1e-20


def test_rtol_at_the_floor_is_not_flagged(setup):
    h, mats = setup
    r = h.integrate(mats, [0, 0.5], method="flow", rtol=1e-10)
    assert r.status == 0 and "raised" not in r.message
    err = r.diagnostics["segments"][0]["error"]
    assert err == pytest.approx(100 * 1e-10 * max(1.0, np.abs(r.y).max()), rel=1e-12)


@pytest.mark.parametrize("method", ["flow", "truncation", "auto", "limit"])
@pytest.mark.parametrize("bad", [1.0, 1.5, 1e3])
def test_rtol_of_one_or_more_is_refused(setup, method, bad):
    h, mats = setup
    with pytest.raises(ValueError, match=r"rtol must be a finite number in \(0, 1\), got"):
        h.integrate(mats, [0, 0.5], method=method, rtol=bad)
