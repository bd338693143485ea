"""Every golden scenario: the truncated hierarchy reproduces the exact matrix flow."""

import numpy as np
import pytest

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
