"""Bad input at the tied model's public entries: a clear ValueError naming the argument."""

import numpy as np
import pytest

import attndyn

LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731


def test_empty_matrices_refused_by_name():
    # d = 0 reached np.abs(m).max() first: "zero-size array to reduction operation maximum"
    model = attndyn.TiedModel(2, [0], LOSS)
    empty = [np.zeros((0, 0)), np.zeros((0, 0))]
    with pytest.raises(ValueError, match="matrices must be non-empty"):
        model.check_matrices(empty)
    with pytest.raises(ValueError, match="must be non-empty"):
        model.hierarchy(4).integrate(empty, [0.0, 0.1])
    with pytest.raises(ValueError, match="must be non-empty"):
        attndyn.matrix_flow(model, empty, [0.0, 0.1])


def test_a_list_with_another_number_of_matrices_than_K_is_named():
    # one matrix for K = 2 read as a moment array: "mu0 must have shape (15,) ..., got (1, 4, 4)"
    h = attndyn.TiedModel(2, [0], LOSS).hierarchy(4)
    for mats in ([np.eye(4)], [np.eye(4)] * 3):
        with pytest.raises(ValueError, match=f"matrices must hold K = 2 matrices, got {len(mats)}"):
            h.integrate(mats, [0.0, 0.1])
