"""Width lists and power-law fits, found in an audit: an empty width list is refused by
name (part16_sweep raised IndexError), widths are not truncated (2.5 ran as 2), and a fit
of x and y of different lengths is refused instead of a numpy broadcast error."""

import numpy as np
import pytest

from attndyn.numeric.transformer import fit_power_law, lemma41_sweep, part16_sweep

SETUP = dict(N=1, L=2, d=2, m=8, n=4, eps=1.0, omega=1.0, kappa=0.5, xi=0.1, n_test=8)


@pytest.mark.parametrize("sweep", [part16_sweep, lemma41_sweep])
@pytest.mark.parametrize("widths, exc", [((), ValueError), ((2.5,), TypeError),
                                         (("8",), TypeError), ("8", TypeError),
                                         ((0,), ValueError), (None, TypeError)])
def test_width_lists_checked_by_name(sweep, widths, exc):
    with pytest.raises(exc, match="widths"):
        sweep(SETUP, widths, seeds=1)


def test_width_lists_of_numpy_ints_still_run():
    sw = part16_sweep(SETUP, np.array([4, 8]), seeds=1)
    assert sw.x.tolist() == [4.0, 8.0]


@pytest.mark.parametrize("x, y", [([1, 2, 3], [1, 2]), ([1, 2], [[1, 2], [3, 4]])])
def test_fit_power_law_needs_as_many_x_as_y(x, y):
    with pytest.raises(ValueError, match="same number"):
        fit_power_law(x, y)


def test_fit_power_law_refuses_text():
    with pytest.raises(TypeError, match="real numbers"):
        fit_power_law(["a"], [1.0])
