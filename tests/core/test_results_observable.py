"""Trajectory.observable(name, *indices): indices are 0-based ints, in range; others are
refused by name (0.5 built the key 'q_1.52' and a KeyError for a name no run has)."""

import numpy as np
import pytest

import attndyn


@pytest.fixture
def traj():
    return attndyn.Trajectory(t=np.array([0.0, 1.0]), y=np.arange(8.0).reshape(4, 2),
                              names=["mu_1", "mu_2", "q_11", "q_12"], params={"K": 2})


def test_good_indices(traj):
    assert traj.observable("q", 0, 1).tolist() == [6.0, 7.0]
    assert traj.observable("q", np.int64(0), np.int32(0)).tolist() == [4.0, 5.0]
    assert traj.observable("mu", 1).tolist() == [2.0, 3.0]
    assert traj.observable("q_12").tolist() == [6.0, 7.0]


@pytest.mark.parametrize("bad", [0.5, 1.0, "1", True, None, np.float64(0.0)])
def test_non_int_index_is_a_type_error(traj, bad):
    with pytest.raises(TypeError, match=r"^observable indices must be ints \(0-based\), got "):
        traj.observable("q", bad, 1)


@pytest.mark.parametrize("bad", [-1, 2, 10])
def test_out_of_range_index_names_the_range(traj, bad):
    with pytest.raises(ValueError, match=r"^observable indices must be in \[0, 1\] \(0-based, "
                                         r"K = 2\), got "):
        traj.observable("q", 0, bad)


def test_without_K_only_negative_refused():
    t = attndyn.Trajectory(t=np.array([0.0]), y=np.ones((1, 1)), names=["m_1"])
    with pytest.raises(ValueError, match=r"^observable indices must be >= 0 \(0-based\), got -1"):
        t.observable("m", -1)
    assert t.observable("m", 0).tolist() == [1.0]
    with pytest.raises(KeyError, match="no observable 'm_2'"):
        t.observable("m", 1)
