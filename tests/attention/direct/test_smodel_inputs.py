"""SModel's closed ODE from matrices whose order parameters overflow float64."""

import numpy as np
import pytest

import attndyn

LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 / 2  # noqa: E731


def test_overflowing_initial_state_refused_by_name():
    # Omega = sum S*S / d = 1e400: scipy's "All components of the initial state `y0` must
    # be finite" came out of the solver, after numpy's overflow warnings
    model = attndyn.SModel(2, [0], LOSS)
    S = [0.5 * np.eye(4), 1e200 * np.eye(4)]
    with pytest.raises(ValueError, match=r"matrices: the order parameters t, Psi, Omega overflow"):
        model.integrate(S, [0.0, 0.1])
    with pytest.raises(ValueError, match="overflow"):
        model.order_parameters(S)
