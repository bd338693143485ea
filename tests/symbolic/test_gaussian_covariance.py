"""check_covariance refuses a non-finite entry as such (it said 'C must be symmetric' for
[[nan]], as nan != nan), naming the matrix and the entry."""

import re

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.symbolic.gaussian import check_covariance


def linear(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.mark.parametrize("C, where", [
    ([[np.nan]], "C[0][0]"), ([[np.inf]], "C[0][0]"), (np.array([[-np.inf]]), "C[0][0]"),
    ([[sp.nan]], "C[0][0]"), ([[sp.zoo]], "C[0][0]"), ([[np.float32("nan")]], "C[0][0]"),
])
def test_non_finite_L1(C, where):
    with pytest.raises(ValueError, match=rf"^C must be finite: {re.escape(where)} is "):
        check_covariance(C, 1)
    with pytest.raises(ValueError, match=r"^C must be finite"):
        attndyn.TiedModel(2, [0], linear, C=C)


def test_non_finite_off_diagonal_is_named():
    with pytest.raises(ValueError, match=r"^C must be finite: C\[0\]\[1\] is nan"):
        check_covariance([[1.0, np.nan], [0.5, 1.0]], 2)
    with pytest.raises(ValueError, match=r"^Sigma must be finite: Sigma\[1\]\[0\] is oo"):
        check_covariance(np.array([[1.0, 0.5], [np.inf, 1.0]]), 2, name="Sigma")


def test_finite_inputs_unchanged():
    assert check_covariance([[1, 0.5], [0.5, 1]], 2) == sp.ImmutableMatrix([[1, 0.5], [0.5, 1]])
    assert check_covariance([[sp.sqrt(2) / 2]], 1)[0, 0] == sp.sqrt(2) / 2
    with pytest.raises(ValueError, match="^C must be symmetric$"):
        check_covariance([[1, 0.5], [0.2, 1]], 2)
    with pytest.raises(ValueError, match="positive semi-definite"):
        check_covariance([[1, 2], [2, 1]], 2)
