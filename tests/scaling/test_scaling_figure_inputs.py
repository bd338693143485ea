"""scaling_figure's overrides, found in an audit: the grid size is refused by name before
np.logspace allocates it (1e10 asked for 74.5 GiB, 0 raised IndexError, 2.5 a numpy
TypeError), and an empty noise list no longer makes every claim hold vacuously."""

import pytest

from attndyn.numeric.scaling.figures import scaling_figure


@pytest.mark.parametrize("n_grid, exc", [(10 ** 10, ValueError), (0, ValueError),
                                         (1, ValueError), (2.5, TypeError),
                                         (True, TypeError)])
def test_grid_size_checked(n_grid, exc):
    with pytest.raises(exc, match="n_grid"):
        scaling_figure("mini", n_grid=n_grid)


def test_empty_noise_list_refused():
    with pytest.raises(ValueError, match="xis"):
        scaling_figure("mini", xis=())


def test_mini_still_holds():
    assert scaling_figure("mini").all_held
