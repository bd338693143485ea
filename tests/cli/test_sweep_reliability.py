"""Sweeps survive crashing points, kills, tampered stores, fork executors and SIGTERM
(issue 23 D2, D6, D14, D15; issue 30 item 6)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from attndyn._sweep import POINT_CRASHED, load_sweep, sweep
from attndyn.numeric.core.progress import Progress
from attndyn.numeric.core.results import Trajectory

# point functions for worker processes live in a real module on sys.path (spawn imports it)
_POINTS = textwrap.dedent('''
    import os, signal, time

    def crashy(a, seed=None):
        """Point a == 2 kills its own process, as a segfault or the OOM killer would."""
        if a == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"a": float(a)}

    def env(a):
        return {"progress": os.environ.get("ATTNDYN_PROGRESS", "unset"), "a": a}

    def sleepy(a):
        time.sleep(60)
        return a
''')


@pytest.fixture
def points_module(tmp_path, monkeypatch):
    d = tmp_path / "mods"
    d.mkdir()
    (d / "sweep_points_mod.py").write_text(_POINTS)
    monkeypatch.syspath_prepend(str(d))
    import importlib
    sys.modules.pop("sweep_points_mod", None)
    return importlib.import_module("sweep_points_mod"), d


def test_a_crashing_point_is_recorded_and_the_pool_sweep_goes_on(points_module, tmp_path):
    mod, _ = points_module
    out = tmp_path / "s"
    with pytest.warns(RuntimeWarning, match="1 of 6 points failed, 1 of them by killing"):
        res = sweep(mod.crashy, {"a": [0, 1, 2, 3, 4, 5]}, seed=0, workers=2, warm=False,
                    cache_dir=out)
    assert res.status == [0, 0, POINT_CRASHED, 0, 0, 0]
    assert "worker process died running this point (killed by SIGKILL)" in res.messages[2]
    assert [r["a"] for i, r in enumerate(res.results) if i != 2] == [0.0, 1.0, 3.0, 4.0, 5.0]
    assert load_sweep(out).status == res.status
    # resume: the recorded crasher runs again, in a worker only; this process survives
    with pytest.warns(RuntimeWarning, match="1 of 6 points failed"):
        again = sweep(mod.crashy, {"a": [0, 1, 2, 3, 4, 5]}, seed=0, executor="serial",
                      cache_dir=out)
    assert again.status == res.status


_SERIAL_CRASH = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[2])
    import sweep_points_mod
    from attndyn._sweep import sweep
    sweep(sweep_points_mod.crashy, {"a": [0, 1, 2, 3]}, seed=0, executor="serial",
          cache_dir=sys.argv[1])
''')


def test_resume_after_the_caller_was_killed_runs_the_crasher_only_in_a_worker(
        points_module, tmp_path):
    mod, mods = points_module
    out = tmp_path / "s"
    p = subprocess.run([sys.executable, "-c", _SERIAL_CRASH, str(out), str(mods)],
                       capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL            # the point killed the serial caller
    assert (out / "point-000002.running").exists()
    with pytest.warns(RuntimeWarning, match="1 of 4 points failed, 1 of them by killing"):
        res = sweep(mod.crashy, {"a": [0, 1, 2, 3]}, seed=0, executor="serial", cache_dir=out)
    assert res.status == [0, 0, POINT_CRASHED, 0]     # and we are still alive
    assert not (out / "point-000002.running").exists()


def test_no_progress_reaches_the_points(points_module):
    mod, _ = points_module
    grid = {"a": [0, 1, 2]}
    pool = sweep(mod.env, grid, seed=0, workers=2, warm=False)
    assert [r["progress"] for r in pool.results] == ["0"] * 3      # workers: never
    quiet = sweep(mod.env, grid, seed=0, executor="serial", progress=False)
    assert [r["progress"] for r in quiet.results] == ["0"] * 3
    assert os.environ.get("ATTNDYN_PROGRESS") is None or os.environ["ATTNDYN_PROGRESS"] != "0"


class _TTY:
    def isatty(self):
        return True

    def write(self, s):
        pass

    def flush(self):
        pass


def test_progress_obeys_the_environment(monkeypatch):
    assert Progress(3, stream=_TTY()).enabled
    monkeypatch.setenv("ATTNDYN_PROGRESS", "0")
    assert not Progress(3, stream=_TTY()).enabled
    assert Progress(3, stream=_TTY(), enabled=True).enabled   # an explicit request wins


def nonfinite(a, seed=None):
    return {"inf": float("inf") * a, "nan": float("nan"), "minus": -np.inf, "v": a}


def scalar_inf(a, seed=None):
    return float("inf") if a else 1.0


def test_inf_and_nan_round_trip_as_floats(tmp_path):
    xr = pytest.importorskip("xarray")
    res = sweep(nonfinite, {"a": [1, 2]}, seed=0, executor="serial", cache_dir=tmp_path / "a")
    back = load_sweep(tmp_path / "a")
    for r in back.results:
        assert r["inf"] == np.inf and r["minus"] == -np.inf and np.isnan(r["nan"])
        assert all(isinstance(r[k], float) for k in ("inf", "nan", "minus"))
    df = back.to_pandas()
    assert df["inf"].dtype == np.float64 and np.isposinf(df["inf"]).all()
    ds = back.to_xarray()
    assert np.isneginf(ds["minus"].values).all() and np.isnan(ds["nan"].values).all()
    assert isinstance(xr.Dataset, type)
    # resuming serves the stored floats, not strings
    again = sweep(nonfinite, {"a": [1, 2]}, seed=0, executor="serial", cache_dir=tmp_path / "a")
    assert again.results[0]["inf"] == np.inf and res.results[0]["inf"] == np.inf
    s = sweep(scalar_inf, {"a": [0, 1]}, seed=0, executor="serial", cache_dir=tmp_path / "b")
    assert load_sweep(tmp_path / "b").results == [1.0, np.inf] == s.results


def traj(a, seed=None):
    return Trajectory(t=np.linspace(0, 1, 3), y=np.full((1, 3), float(a)), names=["x"],
                      params={"a": a})


def test_a_point_file_copied_over_another_is_refused_and_recomputed(tmp_path):
    grid = {"a": [1, 2, 3]}
    out = tmp_path / "s"
    sweep(traj, grid, seed=0, executor="serial", cache_dir=out)
    shutil.copy(out / "point-000002.npz", out / "point-000000.npz")   # data of point 2
    with pytest.raises(ValueError, match=r"point 0: .*point-000000.npz is not the file stored"):
        load_sweep(out)
    with pytest.warns(RuntimeWarning, match="point 0: .*recomputing it"):
        res = sweep(traj, grid, seed=0, executor="serial", cache_dir=out)
    assert res.results[0].y[0, 0] == 1.0
    assert load_sweep(out).results[0].y[0, 0] == 1.0
    shutil.copy(out / "point-000001.json", out / "point-000000.json")  # the record of point 1
    with pytest.raises(ValueError, match="not the record of point 0"):
        load_sweep(out)
    # the same index and a different seed or parameters: refused too
    meta = json.loads((out / "point-000000.json").read_text())
    meta.update(index=0)
    (out / "point-000000.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"holds the parameters \{\"a\": 2\}"):
        load_sweep(out)


def test_stale_temporaries_of_killed_writers_are_cleaned_on_open(tmp_path):
    out = tmp_path / "s"
    sweep(traj, {"a": [1]}, seed=0, executor="serial", cache_dir=out)
    stale = [out / ".tmp-abc.json", out / ".point-000000.npz.tmp-123.npz",
             out / ".point-000000.json.tmp-xyz"]
    for p in stale:
        p.write_bytes(b"half")
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    young = out / ".point-000000.json.tmp-now"
    young.write_bytes(b"a writer may still be running")
    sweep(traj, {"a": [1]}, seed=0, executor="serial", cache_dir=out)
    assert not any(p.exists() for p in stale) and young.exists()


_FORK = textwrap.dedent('''
    import concurrent.futures as cf, multiprocessing as mp, sys
    import numpy as np
    from attndyn._sweep import sweep, _omp_started
    from attndyn.kernels import sgd

    def point(a, seed=None):
        """Runs a parallel numba kernel (the SGD sample draw) in the worker."""
        X = np.empty((64, 8))
        sgd.draw_samples(X, 1, np.eye(1), True, sgd.seed_state(np.random.SeedSequence(a)))
        return float(X.sum())

    assert not _omp_started()             # importing the SGD kernels compiles nothing
    grid = {"a": [0, 1, 2, 3]}
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
        res = sweep(point, grid, seed=0, executor=ex)      # warm=True: skipped for fork
    assert res.status == [0, 0, 0, 0], res.messages
    ref = sweep(point, grid, seed=0, executor="serial")  # starts OpenMP here
    assert ref.results == res.results and _omp_started()
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
        try:
            sweep(point, grid, seed=0, executor=ex)
        except ValueError as exc:
            print("REFUSED:", exc)
    print("OK")
''')


def test_fork_executor_runs_sgd_kernels_or_is_refused_with_a_clear_message():
    env = dict(os.environ, NUMBA_NUM_THREADS="2", NUMBA_THREADING_LAYER="omp")
    p = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "fork() called" not in p.stderr
    assert "REFUSED: executor starts its workers with fork, but this process already runs " \
           "numba's GNU OpenMP threads" in p.stdout and p.stdout.strip().endswith("OK")


_TERM = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[2])
    import sweep_points_mod
    from attndyn._sweep import sweep
    sweep(sweep_points_mod.sleepy, {"a": [0, 1, 2, 3]}, seed=0, workers=2, warm=False,
          cache_dir=sys.argv[1])
''')


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(d))
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_sigterm_stops_the_workers_and_the_resource_tracker(points_module, tmp_path):
    _, mods = points_module
    p = subprocess.Popen([sys.executable, "-c", _TERM, str(tmp_path / "s"), str(mods)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        kids = []
        while len(kids) < 3:          # two workers and the resource tracker
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read()[-2000:]
            time.sleep(0.2)
            kids = _children(p.pid)
        time.sleep(1.0)               # the workers are inside the points now
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while any(_alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
                    reason="POSIX FIFOs and /dev/zero")
def test_sweep_folders_with_fifos_or_devices_never_block(tmp_path):
    out = tmp_path / "s"
    sweep(traj, {"a": [1, 2]}, seed=0, executor="serial", cache_dir=out)
    (out / "point-000001.json").unlink()
    (out / "point-000001.json").symlink_to("/dev/zero")
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="point 1: .*character device, not a regular file"):
        load_sweep(out)
    with pytest.warns(RuntimeWarning, match="point 1: .*recomputing it"):
        res = sweep(traj, {"a": [1, 2]}, seed=0, executor="serial", cache_dir=out)
    assert res.results[1].y[0, 0] == 2.0 and load_sweep(out).status == [0, 0]
    fifo_dir = tmp_path / "f"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "sweep.json")
    with pytest.raises(ValueError, match="FIFO"):
        load_sweep(fifo_dir)
    assert time.monotonic() - t0 < 30
