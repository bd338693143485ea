"""Sweeps: grid order, per-index seeds, executors, resume, failures, spec files, exports."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from attndyn._cli_sweep import _Task, read_spec
from attndyn._sweep import POINT_FAILED, load_sweep, sweep

xr = pytest.importorskip("xarray")

GRID = {"loss": ["mse:h1,h1", "mse:h2,h2", "mse:h3,h3"], "order": [2, 4], "replica": [0, 1, 2, 3]}
FIXED = dict(d=20, eta=0.002, batch=16, T=0.02, n_t=3, theory="hierarchy")


def draw(a, b, seed):
    """A toy point function: its output depends on the point and on its seed only."""
    return {"x": float(a + 10 * b + np.random.default_rng(seed).standard_normal())}


def flaky(a, seed):
    if a == 2:
        raise RuntimeError("point two is broken")
    return {"a": float(a)}


class Interrupt:
    """Raises KeyboardInterrupt at the n-th call, as a user's Ctrl-C would."""

    def __init__(self, at):
        self.at, self.calls = at, 0
        self.sweep_id = "tests.test_sweep:draw"

    def __call__(self, a, b, seed):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return draw(a, b, seed)


def _same(x, y):
    return (np.array_equal(x.sgd.y, y.sgd.y) and np.array_equal(x.theory.y, y.theory.y)
            and x.status == y.status and x.names == y.names)


@pytest.fixture(scope="module")
def serial_run():
    return sweep(_Task("compare", FIXED), GRID, seed=3, executor="serial")


def test_grid_order_and_seeds_keyed_by_index():
    res = sweep(draw, {"a": [1, 2], "b": [0, 1, 2]}, seed=11, executor="serial")
    assert res.points == [{"a": a, "b": b} for a in (1, 2) for b in (0, 1, 2)]
    kids = np.random.SeedSequence(11).spawn(6)
    for i, (p, r) in enumerate(zip(res.points, res.results)):
        expect = p["a"] + 10 * p["b"] + np.random.default_rng(kids[i]).standard_normal()
        assert r["x"] == expect
        assert res.seeds[i]["spawn_key"] == [i]
    zipped = sweep(draw, {"a": [1, 2], "b": [5, 6]}, zipped=True, seed=11, executor="serial")
    assert zipped.points == [{"a": 1, "b": 5}, {"a": 2, "b": 6}]
    # a SeedSequence gives the children of its int; a Generator is a source of entropy (SPEC 7,
    # resolve_rng): its own stream, reproduced from the root the result records
    g = sweep(draw, {"a": [1], "b": [0, 1]}, seed=np.random.default_rng(11), executor="serial")
    s = sweep(draw, {"a": [1], "b": [0, 1]}, seed=np.random.SeedSequence(11), executor="serial")
    assert s.results == res.results[:2] and g.results != s.results
    assert sweep(draw, {"a": [1], "b": [0, 1]}, rng=g.params["seed"],
                 executor="serial").results == g.results


def test_compare_sweep_default_pool_dask_and_resume_bit_identical(serial_run, tmp_path):
    """Acceptance: 24 points of compare (3 activations x 2 orders x 4 seeds) give the same
    numbers in this process, on the default process pool, on a dask LocalCluster, and after an
    interrupted sweep is resumed."""
    distributed = pytest.importorskip("distributed")
    fn = _Task("compare", FIXED)
    assert len(serial_run) == 24 and set(serial_run.status) <= {0, 2}
    pool = sweep(fn, GRID, seed=3)
    assert all(_same(a, b) for a, b in zip(serial_run.results, pool.results))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        dask = sweep(fn, GRID, seed=3, executor=client)
    assert all(_same(a, b) for a, b in zip(serial_run.results, dask.results))
    # interrupted after some points: the stored ones are reused, the rest computed
    part = tmp_path / "part"
    sweep(fn, GRID, seed=3, executor="serial", cache_dir=part)
    stored = sorted(p.name for p in part.glob("point-*.json"))
    assert len(stored) == 24
    for f in stored[8:]:  # forget the last 16 points, as if interrupted after 8
        (part / f).unlink()
    resumed = sweep(fn, GRID, seed=3, executor="serial", cache_dir=part)
    assert all(_same(a, b) for a, b in zip(serial_run.results, resumed.results))
    assert all(_same(a, b) for a, b in zip(serial_run.results, load_sweep(part).results))


def test_interrupt_keeps_finished_points_and_resume_runs_only_the_rest(tmp_path):
    grid = {"a": [1, 2, 3], "b": [0, 1]}
    fn = Interrupt(at=4)
    with pytest.raises(KeyboardInterrupt):
        sweep(fn, grid, seed=5, executor="serial", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("point-*.json"))) == 3
    again = Interrupt(at=0)
    res = sweep(again, grid, seed=5, executor="serial", cache_dir=tmp_path)
    assert again.calls == 3  # only the three missing points ran
    clean = sweep(draw, grid, seed=5, executor="serial")
    assert res.results == clean.results


def test_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    with pytest.warns(RuntimeWarning, match="1 of 3 points failed"):
        res = sweep(flaky, {"a": [1, 2, 3]}, seed=0, executor="serial", cache_dir=tmp_path)
    assert res.status == [0, POINT_FAILED, 0] and res.failed == [1]
    assert "RuntimeError: point two is broken" in res.messages[1]
    assert res.results[0] == {"a": 1.0} and res.results[2] == {"a": 3.0}
    back = load_sweep(tmp_path)
    assert back.status == res.status and back.messages == res.messages


def test_cache_dir_of_another_sweep_is_refused(tmp_path):
    sweep(draw, {"a": [1], "b": [0]}, seed=1, executor="serial", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="different sweep"):
        sweep(draw, {"a": [1], "b": [0]}, seed=2, executor="serial", cache_dir=tmp_path)


@pytest.mark.parametrize("grid, kw, match", [
    ({}, {}, "non-empty dict"),
    ({"a": []}, {}, "empty"),
    ({"a": 3}, {}, "list of values"),
    ({"a b": [1]}, {}, "identifiers"),
    ({"a": [object()]}, {}, "grid values"),
    ({"a": [float("nan")]}, {}, "finite"),
    ({"a": [1, 2], "b": [1]}, {"zipped": True}, "same length"),
    ({"a": list(range(10)), "b": list(range(10))}, {"max_points": 50}, "max_points"),
    ({"a": [1]}, {"seed": 1, "rng": 1}, "not both"),
    ({"a": [1]}, {"seed": 1.5}, "seed must be"),
    ({"a": [1]}, {"executor": 42}, "executor"),
])
def test_bad_arguments(grid, kw, match):
    kw = {"executor": "serial", "seed": 0, **kw}
    with pytest.raises((TypeError, ValueError), match=match):
        sweep(lambda a, b=0: a, grid, **kw)


def test_exports_round_trip_netcdf(serial_run, tmp_path):
    ds = serial_run.to_xarray()
    assert ds["sgd"].dims == ("loss", "order", "replica", "observable", "time")
    assert ds.sizes["loss"] == 3 and ds.sizes["replica"] == 4
    path = tmp_path / "sweep.nc"
    ds.to_netcdf(path, engine="scipy")
    back = xr.open_dataset(path, engine="scipy").load()
    assert back.equals(ds) and back.attrs == ds.attrs
    df = serial_run.to_pandas()
    assert len(df) == 24 and {"loss", "order", "replica", "status"} <= set(df.columns)
    assert "<table>" in serial_run._repr_html_()


def test_trajectory_and_comparison_to_xarray_round_trip(serial_run, tmp_path):
    from attndyn.numeric.core.labelled import (comparison_to_xarray, decode_attrs,
                                               trajectory_to_xarray)
    cmp = serial_run.results[7]
    for ds in (trajectory_to_xarray(cmp.theory), trajectory_to_xarray(cmp.sgd),
               comparison_to_xarray(cmp)):
        path = tmp_path / "x.nc"
        ds.to_netcdf(path, engine="scipy")
        back = xr.open_dataset(path, engine="scipy").load()
        assert back.equals(ds) and back.attrs == ds.attrs
        path.unlink()
    attrs = decode_attrs(trajectory_to_xarray(cmp.theory).attrs)
    assert attrs["params"] == json.loads(json.dumps(cmp.theory.params))
    assert attrs["status"] == cmp.theory.status


def test_spec_file_whitelist(tmp_path):
    good = tmp_path / "s.toml"
    good.write_text('function = "bounds"\nseed = 1\n[fixed]\nL = 8\n[grid]\nC = [1e10, 1e12]\n')
    spec = read_spec(good)
    assert spec["function"] == "bounds" and spec["grid"] == {"C": [1e10, 1e12]}
    bad = {
        'function = "os.system"\n[grid]\nC = [1]\n': "not a sweep task",
        'function = "bounds"\n[grid]\n__class__ = [1]\n': "has no parameter",
        'function = "bounds"\nexec = 1\n[grid]\nC = [1]\n': "unknown keys",
        'function = "bounds"\n[grid]\nC = []\n': "non-empty list",
        'function = "bounds"\n[grid]\nC = [{x = 1}]\n': "values must be",
        'function = "bounds"\n[fixed]\nC = 1\n[grid]\nC = [1]\n': "both",
        'function = "bounds"\n': "at least one",
        'function = "bounds"\nseed = -1\n[grid]\nC = [1]\n': "seed",
        'function = \n': "not valid TOML",
    }
    for text, match in bad.items():
        good.write_text(text)
        with pytest.raises(ValueError, match=match):
            read_spec(good)


def test_cli_sweep_runs_resumes_and_exports(tmp_path):
    spec = tmp_path / "b.toml"
    spec.write_text('function = "bounds"\nseed = 2\n[fixed]\nxi = 0.1\n[grid]\n'
                    'C = [1e10, 1e12, 1e14]\nN = [1e4, 1e5]\n')
    out = tmp_path / "b.sweep"
    cmd = [sys.executable, "-m", "attndyn", "sweep", str(spec), "--out", str(out),
           "--netcdf", str(tmp_path / "b.nc"), "--json", "--workers", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)["result"]   # the one --json envelope of every command
    assert summary["n_points"] == 6 and summary["failed"] == []
    ds = xr.open_dataset(tmp_path / "b.nc", engine="scipy").load()
    assert ds["critical_data_size"].dims == ("C", "N")
    assert np.all(np.diff(ds["critical_data_size"].values[:, 0]) > 0)  # N* grows with C
    r2 = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r2.returncode == 0 and json.loads(r2.stdout)["result"] == summary
    spec.write_text('function = "bounds"\nseed = 2\n[grid]\nC = [1e10]\n')
    r3 = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r3.returncode == 2 and "different sweep" in r3.stderr
    assert len(r3.stderr.strip().splitlines()) == 1


def test_comparison_save_load_and_exports(serial_run, tmp_path):
    from attndyn.numeric.attention.compare import load_comparison
    c = serial_run.results[5]
    back = load_comparison(c.save(tmp_path / "c"))
    assert _same(c, back) and back.errors == c.errors and back.params == c.params
    assert [r.seed for r in back.runs] == [r.seed for r in c.runs]
    df = c.to_pandas()
    assert list(df.index) == list(c.names) and "max_abs" in df.columns
    assert "<table>" in c._repr_html_()
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a valid attndyn comparison file"):
        load_comparison(tmp_path / "bad.npz")


def test_trajectory_counters_exports_and_html(serial_run, tmp_path):
    th = serial_run.results[7].theory
    assert th.nfev == th.diagnostics.get("nfev", 0) and th.njev == 0 and th.nlu == 0
    df = th.to_pandas()
    assert list(df.columns) == list(th.names) and df.index.name == "time"
    ds = th.to_xarray()
    ds.to_netcdf(tmp_path / "t.nc", engine="scipy")
    assert xr.open_dataset(tmp_path / "t.nc", engine="scipy").load().equals(ds)
    assert "status" in th._repr_html_()


def test_transformer_sweep_to_xarray_round_trip(tmp_path):
    from attndyn.numeric.transformer.results import Sweep
    sw = Sweep(x_name="m", x=np.array([16.0, 32.0, 64.0]), names=["gap", "loss"],
               y=np.array([[0.3, 0.2, 0.1], [1.0, 0.9, 0.8]]), kind="lemma41",
               params={"N": 2}, seeds=[{"entropy": 1, "spawn_key": []}],
               fits={"gap": {"exponent": -0.5}})
    ds = sw.to_xarray()
    ds.to_netcdf(tmp_path / "s.nc", engine="scipy")
    back = xr.open_dataset(tmp_path / "s.nc", engine="scipy").load()
    assert back.equals(ds) and back.attrs == ds.attrs
    assert list(sw.to_pandas().columns) == ["gap", "loss"]
