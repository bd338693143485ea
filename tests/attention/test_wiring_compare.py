"""load_comparison / Comparison.save through the hardened file primitives (issue D10, D15):
regular files only, bounded reads, one-line errors naming the file, atomic writes."""

import os
import threading
import zipfile

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.compare import compare, load_comparison


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    m = attndyn.TiedModel(2, [0], square)
    c = compare(m, {"d": 10, "scale": 0.5}, eta=0.05, batch=8, t_eval=[0, 0.1], seed=0,
                names=["q_12", "mu_1"])
    path = c.save(tmp_path_factory.mktemp("cmp") / "c")
    return c, path


def _one_line_error(path):
    """load_comparison(path) in a thread, so that a blocking open fails the test instead of
    hanging it; returns the message of the ValueError it raised."""
    out = {}

    def run():
        try:
            load_comparison(path)
        except ValueError as exc:
            out["msg"] = str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["other"] = exc
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(20)
    assert not th.is_alive(), f"load_comparison({path}) blocked"
    assert "other" not in out, f"raised {out.get('other')!r}"
    msg = out["msg"]
    assert "\n" not in msg and str(path) in msg
    assert msg.startswith("not a valid attndyn comparison file:")
    return msg


def test_roundtrip_is_atomic_and_exact(saved, tmp_path):
    c, path = saved
    back = load_comparison(path)
    assert back.names == c.names and np.array_equal(back.t, c.t)
    assert np.array_equal(back.sgd.y, c.sgd.y) and np.array_equal(back.theory.y, c.theory.y)
    # save goes through the atomic writer: a failing write keeps the old file intact
    target = tmp_path / "keep.npz"
    c.save(target)
    before = target.read_bytes()
    bad = c.__class__(**{**c.__dict__, "errors": {"x": object()}})
    with pytest.raises(TypeError):
        bad.save(target)
    assert target.read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_fifo_symlink_devzero_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    assert "FIFO" in _one_line_error(fifo)
    link = tmp_path / "link.npz"
    link.symlink_to(fifo)
    assert "FIFO" in _one_line_error(link)
    if os.path.exists("/dev/zero"):
        assert "regular file" in _one_line_error("/dev/zero")
    assert "directory" in _one_line_error(tmp_path)


def test_zip_bomb_truncated_and_malformed(saved, tmp_path):
    _, path = saved
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.npy", b"\0" * (40 * 2 ** 20))  # 40 MiB of zeros, ~40 KiB packed
    assert "zip bomb" in _one_line_error(bomb)
    data = open(path, "rb").read()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    _one_line_error(cut)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    assert "not an .npz archive" in _one_line_error(junk)
    # a valid archive without the expected entries: a KeyError becomes one line
    empty_head = tmp_path / "head.npz"
    np.savez(empty_head, header=np.array('{"format": "attndyn-comparison-1"}'))
    assert "missing entry" in _one_line_error(empty_head)
    wrong_type = tmp_path / "wt.npz"
    np.savez(wrong_type, header=np.array('{"format": "attndyn-comparison-1", "runs": 3, '
                                         '"spread": [], "names": []}'))
    _one_line_error(wrong_type)
    deep = tmp_path / "deep.npz"
    np.savez(deep, header=np.array("[" * 5000 + "]" * 5000))
    assert "nested" in _one_line_error(deep)
