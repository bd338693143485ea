"""Timing helpers shared by the benchmarks: process CPU time, interleaved repeats, load.

The development machines are shared: wall times there run 6-10x the CPU times, and a
bandwidth measured in wall time shrinks with the load exactly as the kernel's wall time does,
so a wall-clock ratio can look good for the wrong reason. Every figure is therefore the
minimum over interleaved repeats of *process CPU time* (``time.process_time``: the CPU
seconds of every thread of this process), with the wall time printed beside it and the load
average above each table. Threads are pinned (:func:`pin_threads`) so that CPU time is one
core's time unless a table says otherwise.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

__all__ = ["load", "pin_threads", "interleaved", "reps_for", "stream_rates", "fmt_pair"]


def load() -> str:
    """The 1-, 5- and 15-minute load averages and the number of cores, as one string."""
    try:
        la = open("/proc/loadavg").read().split()[:3]
    except OSError:
        la = [f"{x:.2f}" for x in os.getloadavg()]
    return f"load {' '.join(la)} on {os.cpu_count()} cores"


@contextlib.contextmanager
def pin_threads(n: int = 1):
    """numba's threads (``set_num_threads``) and the BLAS pools (threadpoolctl) at ``n``."""
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        from threadpoolctl import threadpool_limits
        ctx = threadpool_limits(limits=n)
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn/scipy
        ctx = contextlib.nullcontext()
    try:
        with ctx:
            yield
    finally:
        numba.set_num_threads(old)


def reps_for(fn, budget: float = 0.02) -> int:
    """Calls that fit in about ``budget`` CPU seconds (at least one), from one timed call
    after a warm-up call."""
    fn()
    t0 = time.process_time()
    fn()
    return max(1, int(budget / max(time.process_time() - t0, 1e-6)))


def interleaved(fns: dict, reps=None, rounds: int = 7) -> dict:
    """Per call: ``{name: (cpu, wall)}``, each the minimum over ``rounds`` rounds in which the
    functions run one after the other (a load change hits them alike). ``reps``: calls per
    round, one number, one per name, or ``None`` (about 20 ms of CPU each)."""
    if reps is None:
        reps = {k: reps_for(f) for k, f in fns.items()}
    cpu = {k: np.inf for k in fns}
    wall = {k: np.inf for k in fns}
    for f in fns.values():
        f()
    for _ in range(rounds):
        for k, f in fns.items():
            n = reps[k] if isinstance(reps, dict) else reps
            w0 = time.perf_counter()
            c0 = time.process_time()
            for _ in range(n):
                f()
            c1 = time.process_time()
            w1 = time.perf_counter()
            cpu[k] = min(cpu[k], (c1 - c0) / n)
            wall[k] = min(wall[k], (w1 - w0) / n)
    return {k: (cpu[k], wall[k]) for k in fns}


def stream_rates(nbytes: int | None = None, cache_bytes: int = 256 * 2 ** 10,
                 rounds: int = 7) -> dict:
    """Read rates in bytes per CPU second of a streaming sum (numpy, one thread) two ways:

    ``dram``: one pass over 256 MiB (far beyond the caches);
    ``cache``: a ``cache_bytes`` array (L2-resident) summed repeatedly until the same
    number of bytes, ``nbytes`` (default 256 MiB), has been read.

    Both are minima over interleaved rounds of process CPU time; ``wall`` holds the
    wall-clock rates beside them."""
    big = np.ones(32 * 2 ** 20)
    small = np.ones(max(cache_bytes // 8, 1))
    total = big.nbytes if nbytes is None else int(nbytes)
    passes = max(1, total // small.nbytes)

    def dram():
        big.sum()

    def cache():
        for _ in range(passes):
            small.sum()
    with pin_threads(1):
        t = interleaved({"dram": dram, "cache": cache}, reps=1, rounds=rounds)
    return {"dram": big.nbytes / t["dram"][0], "cache": passes * small.nbytes / t["cache"][0],
            "wall": {"dram": big.nbytes / t["dram"][1],
                     "cache": passes * small.nbytes / t["cache"][1]}}


def fmt_pair(cpu: float, wall: float, unit: float = 1e3, width: int = 9) -> str:
    """``cpu (wall)`` in milliseconds (``unit = 1e3``) or any other scale."""
    return f"{cpu * unit:{width}.3f} ({wall * unit:.3g})"
