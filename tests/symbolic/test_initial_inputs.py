"""The laws of symbolic/initial.py refuse what has no moments, by name."""

import math

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.symbolic.initial import FreeInit, scalar, wishart


@pytest.mark.parametrize("make", [lambda: wishart(math.nan, 0.5), lambda: wishart(0.5, math.inf),
                                  lambda: scalar(math.nan), lambda: scalar(np.inf)])
def test_non_finite_numbers_refused_where_the_spec_is_made(make):
    # they were accepted and failed later as "mu0 must be finite (found NaN or inf)"
    with pytest.raises(ValueError, match="finite"):
        make()


def test_symbolic_parameters_still_accepted():
    s = sp.Symbol("s", positive=True)
    assert wishart(s, 1).a == s and scalar(s).a == s
    assert scalar(-1.5).a == -1.5


def test_a_law_with_another_number_of_specs_than_K_refused():
    # one spec too few gave "word letter 1 out of range 0..0"; one too many was cut silently
    h = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2).hierarchy(4)
    for specs in ([wishart(0.5, 0.5)], [wishart(0.5, 0.5), scalar(1), scalar(2)]):
        with pytest.raises(ValueError, match=f"law has {len(specs)} specs.*K = 2"):
            h.integrate(FreeInit(specs), [0.0, 0.1], method="truncation")
