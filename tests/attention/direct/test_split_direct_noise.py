"""direct/noise.py after the split of one_step_prediction and one_step_empirical: the chunked
batch loop gives the same means whatever the chunk size (one random stream), and the two
prediction routes share the drift of a quadratic loss."""

import numpy as np

import attndyn
from attndyn.numeric.attention.direct import noise as nd


def _model():
    return attndyn.SModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=0.2)


def test_empirical_means_do_not_depend_on_the_chunk():
    m = _model()
    S = nd.random_configs(m, 9, 1, seed=2)[0]
    a = nd.one_step_empirical(m, S, eta=0.02, batch=5, n_batches=12, seed=3, chunk=12)
    b = nd.one_step_empirical(m, S, eta=0.02, batch=5, n_batches=12, seed=3, chunk=5)
    assert a["names"] == b["names"]
    for key in ("mean", "se", "by_order"):
        assert np.allclose(a[key], b[key], rtol=1e-12, atol=1e-15), key


def test_prediction_routes_share_the_drift_of_a_quadratic_loss():
    m = _model()
    S = nd.random_configs(m, 40, 1, seed=4)[0]
    ex = nd.one_step_prediction(m, S, eta=0.01, batch=8, exact=True)
    lo = nd.one_step_prediction(m, S, eta=0.01, batch=8, exact=False)
    assert ex["names"] == lo["names"]
    # Stein's Abar = 2 M / d is the potential's drift for a loss of degree 2: equal flows
    assert np.allclose(ex["flow"], lo["flow"], rtol=1e-10, atol=1e-14)
    # the noise terms differ by the O(1/d) part (1 + 9/d + ...) of E Tr(a a)/d
    noisy = np.abs(lo["noise"]) > 0
    ratio = ex["noise"][noisy] / lo["noise"][noisy]
    assert np.all((ratio > 1.2) & (ratio < 1.4))  # measured 1.29 at d = 40
