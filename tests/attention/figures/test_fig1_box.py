"""Fig. 1 builds the certified surrogate's box once, around the overlaps of every SGD run
over the whole horizon, before any theory runs (issues 25, 26): no solver then leaves it
(no quadrature fallback, no rebuild) and the certificate is in the result."""

import numpy as np
import pytest

from attndyn import TiedModel
from attndyn.numeric.attention.figures.fig1 import _sgd_overlaps


class _Run:
    def __init__(self, rows):
        self.t = np.arange(len(rows["q_11"]), dtype=float)
        self._rows = rows

    def observable(self, name):
        return np.asarray(self._rows[name], dtype=float)


def test_sgd_overlaps_is_the_path_of_every_run():
    a = _Run({"q_11": [1.0, 2.0], "q_12": [0.1, 0.2], "q_22": [3.0, 3.0]})
    b = _Run({"q_11": [5.0, 6.0], "q_12": [0.5, 0.6], "q_22": [4.0, 4.0]})
    Q = _sgd_overlaps([a, b], 2)
    assert Q.shape == (4, 2, 2)
    np.testing.assert_array_equal(Q[3], [[6.0, 0.6], [0.6, 4.0]])
    np.testing.assert_array_equal(Q[:, 0, 1], Q[:, 1, 0])


def test_prepare_box_is_none_on_an_exact_route():
    model = TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    assert model.theory.prepare_box(np.eye(2)[None]) is None


@pytest.mark.slow
def test_fig1_mini_runs_every_theory_inside_the_box_built_once():
    from attndyn.numeric.attention.figures.fig1 import fig1
    run = fig1("mini")
    pot = run.extra["potential"]
    box = pot["box_built_once"]
    assert box["covered"] and box["certificate"]["passed"]
    assert box["certificate"]["max_ratio"] <= 0.5
    rep = pot["error_report"]
    assert rep["surrogate_calls"] > 0 and rep["quadrature_calls"] == 0
    for name in ("flow", "limit", "truncation/M2", "truncation/M4"):
        diag = run.curves[name].diagnostics
        assert diag.get("box_extensions", 0) == 0, name
        assert diag["potential"]["route"] == "surrogate", name
        assert diag["potential"]["surrogate_calls"] > 0, name
        assert diag["potential"]["quadrature_calls"] == 0, name
