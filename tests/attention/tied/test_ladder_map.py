"""The convergence ladder's word maps (TiedHierarchy._ladder_map): made once per order and
equal to the word-by-word lookup they replace; a checked run gives the same diagnostics
the first time and from the kept maps."""

import numpy as np
import pytest

import attndyn
from attndyn.symbolic.initial import FreeInit, scalar, wishart


def _model(K=2):
    return attndyn.TiedModel(K, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=8.0)


@pytest.mark.parametrize("K, M, others", [(2, 9, (7, 11)), (3, 5, (3, 7))])
def test_the_maps_match_the_words(K, M, others):
    m = _model(K)
    h = m.hierarchy(M)
    for o in others:
        g = m.hierarchy(o)
        rows, cols, low = h._ladder_map(g)
        assert h._ladder_map(g)[0] is rows  # kept
        common = [tuple(w) for w in (g.words if o < M else h.words)]
        assert [tuple(h.words[r]) for r in rows] == common
        assert [tuple(g.words[c]) for c in cols] == common
        assert low.tolist() == [i for i, r in enumerate(rows) if len(h.words[r]) <= 2]


def test_a_checked_run_repeats_its_diagnostics():
    h = _model().hierarchy(10)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    t = np.linspace(0.0, 1.0, 6)
    a = h.integrate(init, t, method="truncation")
    assert h._ladder_maps  # made by the first run
    b = h.integrate(init, t, method="truncation")
    assert a.status == b.status and a.message == b.message
    assert a.diagnostics["ladder"] == b.diagnostics["ladder"] == [8]
    assert a.diagnostics["truncation_error_low"] == b.diagnostics["truncation_error_low"]
    assert a.diagnostics["truncation_error_low_t"]["rows"] == \
        b.diagnostics["truncation_error_low_t"]["rows"]
    assert np.array_equal(a.diagnostics["truncation_error"][8],
                          b.diagnostics["truncation_error"][8], equal_nan=True)
