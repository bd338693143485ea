"""The thread policy (numeric/core/threads.py): numba threads and BLAS threads together.

The CPU-time test runs the golden SGD scenario (d3-linear) at the CLI's size, d = 200 and
B = 256, where a BLAS pool of several threads interleaved with numba's loops multiplied the
process CPU time by 7-10 on 2 loaded cores (4.7-7.5 s against 0.67 s; the array-API steps on
NumPy 1.30-1.35 s against 0.13 s). It compares process CPU time, not seconds of wall time:
the default must cost at most 1.3 times one BLAS thread (min over repeats).
"""

from __future__ import annotations

import inspect
import sys
import time
from dataclasses import replace

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info

from golden import SCENARIOS

import attndyn
from attndyn.numeric.core.threads import (BLAS_ENV, NUMBA_ENV, available_cores,
                                           compute_threads, resolve_threads)


def _blas_threads():
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_policy_defaults_keywords_and_environment(monkeypatch):
    monkeypatch.delenv(BLAS_ENV, raising=False)
    monkeypatch.delenv(NUMBA_ENV, raising=False)
    top = numba.config.NUMBA_NUM_THREADS
    assert resolve_threads() == (numba.get_num_threads(), 1)
    assert resolve_threads(1, "auto") == (1, available_cores())
    assert resolve_threads(top, "auto") == (top, max(1, available_cores() // top))
    monkeypatch.setenv(BLAS_ENV, "auto")
    monkeypatch.setenv(NUMBA_ENV, "1")
    assert resolve_threads() == (1, available_cores())
    assert resolve_threads(blas_threads=1) == (1, 1)  # the keyword wins over the variable
    monkeypatch.setenv(BLAS_ENV, "many")
    with pytest.raises(ValueError, match=f"{BLAS_ENV} must be an int >= 1 or \"auto\""):
        resolve_threads()
    monkeypatch.delenv(BLAS_ENV)
    monkeypatch.delenv(NUMBA_ENV)
    for bad, exc in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="blas_threads must be"):
            resolve_threads(blas_threads=bad)
    with pytest.raises(ValueError, match="numba_threads must be an int in 1.."):
        resolve_threads(numba_threads=top + 1)
    with pytest.raises(ValueError, match="numba_threads must be an int >= 1"):
        resolve_threads(numba_threads="auto")


def test_compute_threads_sets_and_restores(monkeypatch):
    monkeypatch.delenv(BLAS_ENV, raising=False)
    np.dot(np.ones((4, 4)), np.ones((4, 4)))  # BLAS loaded
    before_numba, before_blas = numba.get_num_threads(), _blas_threads()
    with compute_threads(numba_threads=1) as (nt, bt):
        assert (nt, bt) == (1, 1)
        assert numba.get_num_threads() == 1
        assert set(_blas_threads()) == {1}
    assert numba.get_num_threads() == before_numba and _blas_threads() == before_blas
    with pytest.raises(RuntimeError):
        with compute_threads(1, 1):
            raise RuntimeError("restored on error too")
    assert numba.get_num_threads() == before_numba and _blas_threads() == before_blas


def test_an_enclosing_block_decides_for_the_inner_defaults(monkeypatch):
    monkeypatch.setenv(BLAS_ENV, "1")
    np.dot(np.ones((4, 4)), np.ones((4, 4)))
    with compute_threads(blas_threads=2):
        with compute_threads() as (_, inner):  # e.g. the flow that compare() runs
            assert inner == 2 and set(_blas_threads()) == {2}
        with compute_threads(blas_threads=1) as (_, inner):  # a keyword still wins
            assert inner == 1 and set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {2}
    assert resolve_threads()[1] == 1  # outside: the environment again


def _cpu_ratio(run_default, run_one, repeats=3):
    """min CPU time of the default over min CPU time with one BLAS thread."""
    run_default()  # compiled, caches warm
    run_one()
    t_def, t_one = [], []
    for _ in range(repeats):
        for fn, out in ((run_default, t_def), (run_one, t_one)):
            c = time.process_time()
            fn()
            out.append(time.process_time() - c)
    return min(t_def) / min(t_one), min(t_def), min(t_one)


def _golden_sgd_at_cli_size():
    sc = replace(SCENARIOS[0], d=200)
    return sc.model(), sc.factors(), dict(eta=0.0025, batch=256, t_eval=[0.0, 0.002], seed=1,
                                          progress=False)


@pytest.mark.skipif(available_cores() < 2, reason="one core: no BLAS pool to oversubscribe")
@pytest.mark.parametrize("backend", ["numba", "array-api"])
def test_default_threads_cost_no_more_cpu_than_one_blas_thread(backend, monkeypatch):
    monkeypatch.delenv(BLAS_ENV, raising=False)
    model, W, kw = _golden_sgd_at_cli_size()
    if backend == "numba":
        if "blas_threads" not in inspect.signature(attndyn.sgd).parameters:
            pytest.skip("attndyn.sgd does not apply the thread policy yet (no blas_threads=)")
        fn = attndyn.sgd
    else:
        from attndyn.numeric.attention.xp_sgd import xp_sgd as fn
    ratio, t_def, t_one = _cpu_ratio(lambda: fn(model, W, **kw),
                                     lambda: fn(model, W, blas_threads=1, **kw))
    _report(backend, ratio, t_def, t_one)


@pytest.mark.skipif(available_cores() < 2, reason="one core: no BLAS pool to oversubscribe")
def test_matrix_flow_default_costs_no_more_cpu_than_one_blas_thread(monkeypatch):
    """The golden flow at d = 200: two BLAS threads took 1.9-2.2 s of CPU time against
    0.07 s with one (2 loaded cores)."""
    from attndyn.numeric.attention.flow import matrix_flow
    monkeypatch.delenv(BLAS_ENV, raising=False)
    sc = replace(SCENARIOS[0], d=200)
    model, S, t = sc.model(), sc.matrices(), np.linspace(0.0, 0.05, 3)
    ratio, t_def, t_one = _cpu_ratio(lambda: matrix_flow(model, S, t),
                                     lambda: matrix_flow(model, S, t, blas_threads=1))
    _report("matrix_flow", ratio, t_def, t_one)


def _report(backend, ratio, t_def, t_one):
    print(f"{backend}: default {t_def:.3f} s CPU, one BLAS thread {t_one:.3f} s CPU",
          file=sys.stderr)
    assert ratio <= 1.3, (f"{backend}: the default threads cost {ratio:.2f}x the CPU time of one "
                          f"BLAS thread ({t_def:.3f} s against {t_one:.3f} s)")
