"""untied_flow (numeric/attention/untied/fastslow.py) on inputs at the edges of the float
range: refused or stopped with a status, never run without end."""

import numpy as np
import pytest
from hang_guard import finishes

import attndyn

LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 / 2  # noqa: E731


def test_stiff_start_on_a_short_horizon_is_refused():
    # a teacher U_2 = 1e10 I made the explicit solver's steps ~1e-10 long: no end to t = 0.1
    model = attndyn.UntiedModel(2, [0], LOSS)
    pairs = [(0.5 * np.eye(4), 0.5 * np.eye(4)), (1e10 * np.eye(4), np.eye(4))]

    def refused():
        with pytest.raises(ValueError, match="needs about .* steps"):
            attndyn.untied_flow(model, pairs, [0.0, 0.1])
    finishes(refused, what="untied_flow")
    ok = attndyn.untied_flow(model, [pairs[0], (np.eye(4), np.eye(4))], [0.0, 0.1])
    assert ok.status == 0
