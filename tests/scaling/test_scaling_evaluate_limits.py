"""evaluate / evaluate_grid sizes and names, found in an audit: a grid or broadcast of more
than MAX_POINTS points is refused naming its shape before anything is allocated (1e5 x 1e5
asked numpy for 74.5 GiB), and a single quantity name is one name, not its letters."""

import numpy as np
import pytest

from attndyn.numeric.scaling import bounds as sc

BIG = np.logspace(1, 10, 100000)


def test_evaluate_grid_refuses_a_huge_grid_before_allocating():
    with pytest.raises(ValueError, match=r"\(100000, 100000\)"):
        sc.evaluate_grid(["data_law"], N=BIG, xi=BIG, c_stat=1.0)


def test_evaluate_refuses_a_huge_broadcast_before_allocating():
    with pytest.raises(ValueError, match=r"\(100000, 100000\)"):
        sc.evaluate(["data_law"], N=BIG[:, None], xi=BIG[None, :], c_stat=1.0)


def test_evaluate_refuses_shapes_that_do_not_broadcast_by_name():
    with pytest.raises(ValueError, match="broadcast"):
        sc.evaluate(["data_law"], N=np.ones(3), xi=np.ones(2), c_stat=1.0)


def test_a_single_name_is_one_quantity():
    # "data_law" was iterated letter by letter: "unknown quantity 'd'"
    out = sc.evaluate("data_law", N=np.array([10.0, 100.0]), xi=1.0, c_stat=1.0)
    np.testing.assert_array_equal(out["data_law"], [0.1, 0.01])


def test_grids_below_the_limit_unchanged():
    axes, res = sc.evaluate_grid(["data_law"], N=np.array([10.0, 100.0]),
                                 xi=np.array([1.0, 2.0, 3.0]), c_stat=1.0)
    assert res["data_law"].shape == (2, 3)
    assert res["data_law"][1, 2] == 9.0 / 100.0
