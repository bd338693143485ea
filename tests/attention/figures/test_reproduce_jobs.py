"""``attndyn reproduce`` as a distributed, resumable job: every (curve, seed) SGD run is a
task on the sweep machinery, stored as it finishes; a killed run resumes without
recomputing the stored tasks (the task log says which ran), with the same numbers."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from attndyn.numeric.attention.figures import common as F

TINY = dict(d=16, eta=0.01, batch=20, T=0.05, n_t=3, scale=0.5, init_seed=1016, mode="mini")


def _log(folder):
    with open(os.path.join(folder, "tasks.log")) as f:
        return [line.split()[2:] for line in f]


def _runs(log):
    """Per run (split at the 'run' lines): the set of (event, curve, seed) of its tasks."""
    out = []
    for ev in log:
        if ev[0] == "run":
            out.append([])
        else:
            out[-1].append((ev[0], ev[2], ev[3]))
    return out


def test_interrupted_tasks_resume_from_the_cache(tmp_path, monkeypatch):
    from attndyn.numeric.attention import training

    tasks = [("sgd", sd) for sd in range(3)]
    ref = F.run_sgd_tasks("fig4", TINY, tasks)          # uninterrupted, no cache
    real, calls = training.sgd, []

    def interrupted(*a, **k):
        calls.append(k.get("seed"))
        if len(calls) == 2:
            raise KeyboardInterrupt  # as if the job were stopped during the second task
        return real(*a, **k)

    monkeypatch.setattr(training, "sgd", interrupted)
    runner = F.TaskRunner("serial", cache_dir=tmp_path, progress=False)
    with pytest.raises(KeyboardInterrupt):
        runner.run("fig4", TINY, tasks)
    monkeypatch.setattr(training, "sgd", real)
    got = F.TaskRunner("serial", cache_dir=tmp_path, progress=False).run("fig4", TINY, tasks)
    first, second = _runs(_log(runner.last_folder))
    assert ("done", "sgd", "seed=0") in first and ("start", "sgd", "seed=1") in first
    started = {e[2] for e in second if e[0] == "start"}
    assert started == {"seed=1", "seed=2"}  # seed 0 came from the cache
    for key in tasks:
        np.testing.assert_array_equal(got[key].y, ref[key].y)
        np.testing.assert_array_equal(got[key].t, ref[key].t)
    # a third run computes nothing
    F.TaskRunner("serial", cache_dir=tmp_path, progress=False).run("fig4", TINY, tasks)
    assert not [e for e in _runs(_log(runner.last_folder))[2] if e[0] == "start"]


def test_cache_folder_keys_settings_tasks_and_backend(tmp_path):
    r = F.TaskRunner("serial", cache_dir=tmp_path)
    a = r.folder("fig4", TINY, [("sgd", 0)])
    assert a == r.folder("fig4", dict(TINY), [("sgd", 0)])
    assert a != r.folder("fig4", dict(TINY, batch=21), [("sgd", 0)])
    assert a != r.folder("fig4", TINY, [("sgd", 0), ("sgd", 1)])
    assert a != F.TaskRunner("serial", cache_dir=tmp_path, backend="array-api").folder(
        "fig4", TINY, [("sgd", 0)])
    with pytest.raises(ValueError, match="figure must be one of"):
        F.SGDTask()("fig9", "sgd", 0, "{}")


def test_seed_z_units():
    rng = np.random.default_rng(0)
    runs = 1.0 + 0.01 * rng.standard_normal((6, 20))
    rms, mx, z = F.seed_z(runs, np.ones(20))
    assert rms < 4 and z.shape == (20,)
    rms_off, _, _ = F.seed_z(runs, np.full(20, 0.9))     # 10 seed SDs off
    assert rms_off > 20
    paired = F.seed_z(runs + 0.5, np.ones((6, 20)) + 0.5)[0]
    assert paired == pytest.approx(rms)
    assert np.isnan(F.seed_z(runs[:1], np.ones(20))[0])


def test_cli_d_override_keeps_eta_d_over_b():
    from argparse import Namespace

    from attndyn._cli_reproduce import _overrides

    o = _overrides("fig3", Namespace(d=96, mode="full"))
    assert o["d"] == 96 and o["batch"] == round(4096 * 96 / 800)
    assert max(o["mc_d"]) == 96
    assert _overrides("scaling", Namespace(d=96, mode="full")) == {}


def _stored(folder):
    out = set()
    for f in os.listdir(folder):
        if f.startswith("point-") and f.endswith(".json"):
            p = json.load(open(os.path.join(folder, f)))["point"]
            out.add((p["curve"], f"seed={p['sgd_seed']}"))
    return out


def _figure_data(out):
    meta = json.load(open(os.path.join(out, "fig3.json")))
    arrays = {}
    for label, rel in meta["curves"].items():
        with np.load(os.path.join(out, rel), allow_pickle=False) as z:
            arrays[label] = (z["t"].copy(), z["y"].copy())
    return [(c["claim"], c["held"], c["measured"]) for c in meta["claims"]], arrays


@pytest.mark.slow
def test_fig3_full_killed_on_a_dask_cluster_resumes(tmp_path):
    """Acceptance (issue 26): ``reproduce fig3 --full --d 96 --scheduler <LocalCluster of 2
    workers>`` killed with SIGKILL after some tasks finished, rerun, finishes without
    recomputing them, and equals an uninterrupted run."""
    distributed = pytest.importorskip("dask.distributed")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", ATTNDYN_PROGRESS="0")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        cmd = [sys.executable, "-m", "attndyn.cli", "reproduce", "fig3", "--full", "--d", "96",
               "--seeds", "2", "--scheduler", cluster.scheduler_address]
        out1, cache = str(tmp_path / "a"), str(tmp_path / "cache")
        p = subprocess.Popen(cmd + ["--out", out1, "--cache-dir", cache], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 1500
        folder = None
        while time.time() < deadline and p.poll() is None:
            time.sleep(1.0)
            dirs = [d for d in os.listdir(cache) if d.startswith("fig3-")] \
                if os.path.isdir(cache) else []
            if dirs:
                folder = os.path.join(cache, dirs[0])
                stored = [f for f in os.listdir(folder) if f.endswith(".npz")]
                if len(stored) >= 2:
                    break
        assert p.poll() is None, "the run ended before it could be killed"
        p.send_signal(signal.SIGKILL)
        p.wait()
        done_before = _stored(folder)   # tasks stored before the kill
        assert len(done_before) >= 2
        rc = subprocess.run(cmd + ["--out", out1, "--cache-dir", cache], env=env,
                            capture_output=True, timeout=1500).returncode
        assert rc in (0, 1)
        second = _runs(_log(folder))[-1]
        started = {tuple(e[1:3]) for e in second if e[0] == "start"}
        assert not started & done_before, (started, done_before)
        assert len(started) + len(done_before) >= 6 - 1  # 3 curves x 2 seeds (one may rerun)
        out2 = str(tmp_path / "b")
        rc2 = subprocess.run(cmd + ["--out", out2, "--cache-dir", str(tmp_path / "cache2")],
                             env=env, capture_output=True, timeout=1500).returncode
        assert rc2 == rc
    c1, a1 = _figure_data(out1)
    c2, a2 = _figure_data(out2)
    assert c1 == c2
    assert a1.keys() == a2.keys()
    for k in a1:
        np.testing.assert_array_equal(a1[k][0], a2[k][0])
        np.testing.assert_array_equal(a1[k][1], a2[k][1])
