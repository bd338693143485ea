"""Every golden scenario: the truncated hierarchy and finite-d SGD reproduce the exact
matrix flow, each within the tolerance of its named effect (truncation; learning-rate
noise or finite d)."""

import dataclasses

import numpy as np
import pytest

import attndyn
from attndyn.numeric import matrix_flow

from golden import SCENARIOS

LOW = lambda K: [(k,) for k in range(K)] + [(k, l) for k in range(K) for l in range(k, K)]  # noqa: E731


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_hierarchy_reproduces_flow(sc):
    model = sc.model()
    S = sc.matrices()
    t = np.linspace(0, sc.horizon, 6)
    flow = matrix_flow(model, S, t, order=2)
    assert flow.success, flow.message
    res = model.hierarchy(sc.order).integrate(S, t, rtol=1e-12, atol=1e-14, conv_tol=sc.tol)
    assert res.success, res.message
    for w in LOW(sc.K):
        np.testing.assert_allclose(res.moment(w), flow.moment(w), atol=10 * sc.tol, rtol=0,
                                   err_msg=f"{sc.name}: {w}")
    # the dynamics is not trivial on this horizon
    moved = max(np.abs(flow.moment(w)[-1] - flow.moment(w)[0]) for w in LOW(sc.K))
    assert moved > 100 * sc.tol


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_sgd_reproduces_flow(sc):
    model = sc.model()
    t = np.linspace(0, sc.horizon, 3)
    flow = matrix_flow(model, sc.matrices(), t, order=2)
    res = attndyn.sgd(model, sc.factors(), eta=0.0025, batch=60, t_eval=t, seed=1)
    assert res.success, res.message
    err = max(float(np.abs(res.moment(w) - flow.moment(w)).max()) for w in LOW(sc.K))
    assert err < sc.sgd_tol, f"{sc.name}: {err:.3g} ({sc.sgd_effect})"


def test_h2_sgd_bias_shrinks_with_d():
    """The h2 scenario's SGD-vs-flow gap is the O(1/d) finite-size effect, not noise."""
    sc0 = next(s for s in SCENARIOS if s.name == "h2-teacher-student")
    gaps = []
    for d in (60, 240):
        sc = dataclasses.replace(sc0, d=d)
        model = sc.model()
        t = np.array([0.0, sc.horizon])
        flow = matrix_flow(model, sc.matrices(), t, order=2)
        errs = [abs(attndyn.sgd(model, sc.factors(), eta=0.0025, batch=60, t_eval=t,
                                seed=s).moment((0, 0))[-1] - flow.moment((0, 0))[-1])
                for s in range(2)]
        gaps.append(np.mean(errs))
    assert gaps[1] < gaps[0] / 2.5, gaps
