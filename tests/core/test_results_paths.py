"""Result paths: saving into a missing folder names the target, not the temporary file
(``/nonexist/.x.npz.tmp-...``); a path that is not a path (None, a number) is refused by
name instead of numpy's bare TypeError (load) or a file called ``None.npz`` (save)."""

import os

import numpy as np
import pytest

import attndyn
from attndyn.numeric.core import safeio
from attndyn.numeric.core.results import load_result


@pytest.fixture
def traj():
    return attndyn.Trajectory(t=np.array([0.0, 1.0]), y=np.array([[1.0, 2.0]]), names=["mu_1"])


def test_missing_folder_names_the_target(traj, tmp_path):
    target = tmp_path / "nope" / "x.npz"
    with pytest.raises(FileNotFoundError) as err:
        traj.save(target)
    msg = str(err.value)
    assert str(target) in msg and ".tmp-" not in msg and "folder" in msg
    assert err.value.filename == str(target)
    assert not (tmp_path / "nope").exists()


def test_folder_that_is_a_file_names_the_target(tmp_path):
    (tmp_path / "f").write_text("")
    target = os.path.join(tmp_path, "f", "x.txt")
    with pytest.raises(NotADirectoryError, match="x.txt") as err:
        safeio.atomic_write_text(target, "a")
    assert ".tmp-" not in str(err.value)


@pytest.mark.parametrize("bad", [None, 3, 1.5, b"x.npz", ["x.npz"]])
def test_save_and_load_refuse_a_non_path(traj, bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"^path must be a file path \(str or os.PathLike\)"):
        traj.save(bad)
    assert os.listdir(tmp_path) == []  # no None.npz
    with pytest.raises(TypeError, match=r"^path must be a file path \(str or os.PathLike\)"):
        load_result(bad)


def test_empty_path_refused(traj):
    with pytest.raises(ValueError, match="^path must be a non-empty file path"):
        load_result("")


def test_round_trip_unchanged(traj, tmp_path):
    p = traj.save(tmp_path / "r")
    assert p == str(tmp_path / "r.npz")
    back = load_result(tmp_path / "r.npz")
    assert back.names == ["mu_1"] and np.array_equal(back.y, traj.y)
