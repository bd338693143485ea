"""Atomic result writers and hardened loaders (numeric/core/safeio.py; issue 23 D9, D10, D15)."""

import errno
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from attndyn.numeric.core import safeio
from attndyn.numeric.core.results import Trajectory, load_result


def _traj(value=0.0, n_t=3):
    return Trajectory(t=np.linspace(0, 1, n_t), y=np.full((2, n_t), value), names=["a", "b"],
                      message=f"v{value}")


# ---------------------------------------------------------------------------
# D15: writes are atomic


def test_full_disk_during_save_keeps_the_previous_result(tmp_path, monkeypatch):
    path = _traj(1.0).save(tmp_path / "r.npz")

    def full(f, **arrays):
        f.write(b"PK\x03\x04 half an archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", full)
    with pytest.raises(OSError, match="No space left"):
        _traj(2.0).save(path)
    assert load_result(path).message == "v1.0"           # the old file, intact
    assert os.listdir(tmp_path) == ["r.npz"]             # no temporary left behind


def test_full_disk_on_a_new_file_leaves_no_empty_file(tmp_path, monkeypatch):
    def full(f, **arrays):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", full)
    with pytest.raises(OSError):
        _traj().save(tmp_path / "out.npz")
    assert os.listdir(tmp_path) == []


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from attndyn.numeric.core import safeio
    path, ready = sys.argv[1], sys.argv[2]

    def slow(f):
        f.write(b"PK\\x03\\x04" + bytes(100_000))   # half-written archive
        f.flush()
        open(ready, "w").close()
        time.sleep(60)

    safeio.atomic_write(path, slow)
""")


def test_writer_killed_mid_write_leaves_the_previous_file_loadable(tmp_path):
    path = _traj(1.0).save(tmp_path / "r.npz")
    ready = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, path, str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert p.returncode == -signal.SIGKILL
    assert load_result(path).message == "v1.0"
    left = sorted(os.listdir(tmp_path))
    assert "r.npz" in left and any(".tmp-" in n for n in left)  # the killed temporary
    assert safeio.clean_stale_temporaries(tmp_path, older_than=3600) == []  # young: kept
    removed = safeio.clean_stale_temporaries(tmp_path, older_than=0)
    assert removed and sorted(os.listdir(tmp_path)) == ["r.npz", "ready"]


def test_atomic_write_keeps_the_usual_permissions(tmp_path):
    p = safeio.atomic_write_text(tmp_path / "x.json", "{}")
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(p).st_mode & 0o777 == 0o666 & ~umask


# ---------------------------------------------------------------------------
# D10, D9: loaders read regular files only, bounded


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_fifo_and_symlink_to_fifo_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    link = tmp_path / "link.npz"
    link.symlink_to(fifo)
    t0 = time.monotonic()
    for p in (fifo, link):
        with pytest.raises(ValueError, match=r"FIFO \(named pipe\), not a regular file") as ei:
            load_result(p)
        assert str(p) in str(ei.value)
        with pytest.raises(ValueError, match="FIFO"):
            safeio.load_json(p)
    assert time.monotonic() - t0 < 30  # a blocked open would never return


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_devices_and_directories_are_refused(tmp_path):
    link = tmp_path / "zero.npz"
    link.symlink_to("/dev/zero")
    for p in ("/dev/zero", link):
        with pytest.raises(ValueError, match="character device, not a regular file"):
            load_result(p)
        with pytest.raises(ValueError, match="character device"):
            safeio.read_text(p, 1000, "spec")
    with pytest.raises(ValueError, match="directory"):
        load_result(tmp_path)


def test_missing_file_is_still_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_result(tmp_path / "missing.npz")


def test_read_bytes_bounds_the_size(tmp_path):
    p = tmp_path / "big.toml"
    p.write_bytes(b"x" * 2000)
    with pytest.raises(ValueError, match=r"big.toml: is 2000 bytes, above the limit of 1000"):
        safeio.read_text(p, 1000, "spec")
    assert safeio.read_text(p, 2000, "spec") == "x" * 2000
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        safeio.read_text(p, 100, "spec")


def _bomb(path, size=2 * 10 ** 9, key="y"):
    """A small archive whose one member inflates to ``size`` bytes (zeros after a valid
    .npy header): the shape of the 1.57 MB -> 1.87 GB file of issue 23."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f8", "fortran_order": False, "shape": (2, (size - 128) // 16)})
    info = zipfile.ZipInfo(f"{key}.npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as z, z.open(info, "w", force_zip64=True) as f:
        f.write(head.getvalue())
        block = bytes(2 ** 22)
        left = size - len(head.getvalue())
        while left > 0:
            f.write(block[:left])
            left -= len(block)


def test_zip_bomb_is_refused_before_inflating(tmp_path):
    p = tmp_path / "bomb.npz"
    _bomb(p, size=300 * 2 ** 20)  # small enough to build in a second; ratio ~1000
    assert os.path.getsize(p) < 2 * 2 ** 20
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="ratio above 200: a zip bomb"):
            load_result(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2 ** 20, peak          # nothing inflated (the member is 300 MiB)
    q = _traj(n_t=10 ** 5).save(tmp_path / "plain.npz")   # 1.6 MB of zeros, ratio < 200
    with pytest.raises(ValueError, match="uncompressed, above the limit"):
        safeio.open_npz(q, "result", max_bytes=10 ** 6)
    assert load_result(q).y.shape == (2, 10 ** 5)


def test_a_shape_larger_than_its_member_is_refused(tmp_path):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f8", "fortran_order": False, "shape": (2, 10 ** 6)})
    with zipfile.ZipFile(tmp_path / "s.npz", "w") as z:
        z.writestr("y.npy", buf.getvalue() + bytes(64))
    with safeio.open_npz(tmp_path / "s.npz", "f") as z:
        with pytest.raises(ValueError, match=r"declares shape \(2, 1000000\)"):
            safeio.npz_array(z, "y", 2)


def test_truncated_and_corrupted_results(tmp_path):
    good = _traj(1.0, n_t=2000)
    good.y[:] = np.random.default_rng(0).standard_normal(good.y.shape)
    raw = open(good.save(tmp_path / "g.npz"), "rb").read()
    cases = {"trunc_half": raw[: len(raw) // 2], "trunc_end": raw[:-10], "empty": b""}
    flipped = bytearray(raw)
    flipped[len(raw) // 3] ^= 0xFF                 # inside the deflated data of 'y'
    cases["flipped"] = bytes(flipped)
    for name, data in cases.items():
        p = tmp_path / f"{name}.npz"
        p.write_bytes(data)
        with pytest.raises(ValueError, match="not a valid attndyn result file: ") as ei:
            load_result(p)
        msg = str(ei.value)
        assert str(p) in msg and "\n" not in msg, (name, msg)


def test_deep_and_huge_json_are_one_line_errors(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="JSON nested 100000 levels deep, above the limit of 64"):
        safeio.load_json(p, "manifest")
    p.write_text('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    assert safeio.load_json(p)["a"].startswith("[[[")   # brackets inside strings do not count
    p.write_text('{"a": ')
    with pytest.raises(ValueError, match=r"manifest .*deep.json: not valid JSON"):
        safeio.load_json(p, "manifest")
    with pytest.raises(ValueError, match="above the limit of 10"):
        safeio.load_json(p, "manifest", max_bytes=10) if p.write_text(" " * 20) else None


def test_nonfinite_floats_round_trip_through_a_header(tmp_path):
    h = {"a": float("inf"), "b": float("-inf"), "c": float("nan")}
    p = safeio.atomic_savez(tmp_path / "x", header=safeio.json_array(h))
    with safeio.open_npz(p, "f") as z:
        back = safeio.npz_json(z)
    assert back["a"] == np.inf and back["b"] == -np.inf and np.isnan(back["c"])
    assert json.loads(json.dumps(back), parse_constant=float) is not None


def test_getitem_is_a_checked_drop_in_for_np_load(tmp_path):
    p = safeio.atomic_savez(tmp_path / "x", a=np.arange(6).reshape(2, 3), s=np.array("text"),
                            f=np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    with safeio.open_npz(p, "file") as z:
        assert z["a"].dtype == np.int64 and z["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
        assert str(z["s"]) == "text" and sorted(z.files) == ["a", "f", "s"]
        assert np.array_equal(z["f"], np.arange(6.0).reshape(2, 3))
        with pytest.raises(ValueError, match="no array 'b'"):
            z["b"]
    np.savez(tmp_path / "o.npz", o=np.array([{"x": 1}], dtype=object))
    with safeio.open_npz(tmp_path / "o.npz", "file") as z:
        with pytest.raises(ValueError, match="dtype object"):
            z["o"]


def test_dataset_attributes_round_trip_nonfinite_floats(tmp_path):
    xr = pytest.importorskip("xarray")
    from attndyn.numeric.core.labelled import decode_attrs, trajectory_to_xarray
    tr = Trajectory(t=np.linspace(0, 1, 3), y=np.zeros((1, 3)), names=["a"],
                    params={"h_max": float("inf"), "x": [1.0, float("-inf")]})
    ds = trajectory_to_xarray(tr)
    ds.to_netcdf(tmp_path / "x.nc", engine="scipy")
    back = decode_attrs(xr.open_dataset(tmp_path / "x.nc", engine="scipy").load().attrs)
    assert back["params"] == {"h_max": np.inf, "x": [1.0, -np.inf]}
