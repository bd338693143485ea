"""Run the benchmarks and print their tables.

Usage::

    python benchmarks/run.py            # every benchmarks/bench_*.py
    python benchmarks/run.py hierarchy  # only bench_hierarchy.py
    python benchmarks/run.py transformer  # forward+gradient of paper 000's transformer
    python benchmarks/run.py --quick    # smaller sizes, for a smoke run

Each ``bench_<name>.py`` defines ``main(quick: bool) -> None`` that prints one
table. Every table reports ratios against a reference measured in the same
process (memory bandwidth, BLAS products, numpy, scipy), because these
machines are shared and noisy: absolute times alone mean little.

Clock: process CPU time (``time.process_time``), the minimum over interleaved
repeats (``benchmarks/_timing.py``), with the wall time beside it and the load
average above each table. On a shared machine wall times run several times the
CPU times and a wall-clock ratio against a wall-clock bandwidth shrinks with the
load for the wrong reason; CPU time is the usable clock. Threads are pinned to one
(numba ``set_num_threads`` and the BLAS pools through threadpoolctl) unless a table
says otherwise, so CPU time is one core's time.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import time


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # BLAS pools read these at import: one thread unless the caller set otherwise
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    quick = "--quick" in argv
    names = [a for a in argv if not a.startswith("-")]
    here = pathlib.Path(__file__).resolve().parent
    files = sorted(here.glob("bench_*.py"))
    if names:
        files = [f for f in files if f.stem[len("bench_"):] in names]
        if not files:
            print(f"no benchmark named {names}; have: "
                  f"{[f.stem[6:] for f in sorted(here.glob('bench_*.py'))]}", file=sys.stderr)
            return 2
    sys.path.insert(0, str(here))
    from _timing import load, pin_threads
    for f in files:
        print(f"\n=== {f.stem} ({load()}) ===", flush=True)
        c0, w0 = time.process_time(), time.perf_counter()
        with pin_threads(1):
            _load(f).main(quick=quick)
        print(f"=== {f.stem}: {time.process_time() - c0:.1f} s CPU, "
              f"{time.perf_counter() - w0:.1f} s wall ({load()}) ===", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
