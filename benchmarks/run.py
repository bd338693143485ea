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
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
    for f in files:
        print(f"\n=== {f.stem} ===", flush=True)
        _load(f).main(quick=quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
