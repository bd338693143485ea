"""A tied model and its hierarchy still pickle after integrating: the per-process caches of
the integrate path (kept chunk runners, the prepared Taylor arguments with their per-thread
workspaces) are dropped from the pickled state and remade on first use."""

import pickle

import numpy as np

import attndyn
from attndyn.symbolic.initial import FreeInit, scalar, wishart


def linear_loss(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def test_model_and_hierarchy_pickle_after_integrate_and_give_the_same_run():
    model = attndyn.TiedModel(2, [0], linear_loss)
    h = model.hierarchy(8)
    x0 = FreeInit([wishart(0.5, 0.5), scalar(1)])
    r = h.integrate(x0, [0.0, 0.05, 0.1])
    r_rk = h.integrate(x0, [0.0, 0.1], integrator="dop853")
    assert "_runners" in h.__dict__ and "_taylor_prepared" in h.__dict__
    h2 = pickle.loads(pickle.dumps(h))
    m2 = pickle.loads(pickle.dumps(model))
    assert not any(k in h2.__dict__ for k in h._PROCESS_CACHES)
    again = h2.integrate(x0, [0.0, 0.05, 0.1])
    np.testing.assert_array_equal(again.y, r.y)
    assert again.status == r.status and again.message == r.message
    np.testing.assert_array_equal(h2.integrate(x0, [0.0, 0.1], integrator="dop853").y, r_rk.y)
    np.testing.assert_array_equal(m2.hierarchy(8).integrate(x0, [0.0, 0.05, 0.1]).y, r.y)
    # the original keeps its caches and still runs
    assert "_runners" in h.__dict__
    np.testing.assert_array_equal(h.integrate(x0, [0.0, 0.05, 0.1]).y, r.y)
