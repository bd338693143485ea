"""The array-API SGD backend on NumPy against the numba kernels: CPU time per step.

For the tied, untied and direct-S models (K = 2: one student, one teacher of width d,
L = 1, loss ``(G1 - G2)^2``, B = 512) at d = 200, 300, 400, the process CPU time of one
SGD step through the public drivers, ``attndyn.sgd`` (numba, one thread) and
``xp_sgd`` (NumPy), as the difference of two runs of different lengths (so the set-up
and the checkpoints cancel), minimum over interleaved repeats. Also measured:

- float32 against float64 on NumPy;
- four seeds as one batched product (``seeds_per_product=4``) against four runs,
  per seed and step;
- untied: the fixed teacher through ``S_2 = U_2 V_2^T`` (one ``d x d`` product, 5
  products a step) against its factors (two products, 6 a step).

Run with ``NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1`` for one-core figures.
``python benchmarks/bench_xp_sgd.py [--quick]``.
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np


def _model(kind):
    import attndyn
    loss = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731
    return {"tied": attndyn.TiedModel, "untied": attndyn.UntiedModel,
            "s": attndyn.SModel}[kind](2, [0], loss)


def _runner(model, init, d, B, which):
    """``run(n)``: n SGD steps through the driver named by ``which``."""
    from attndyn.numeric import sgd
    from attndyn.numeric.attention.xp_sgd import xp_sgd_runs
    eta = 0.02
    dt = model.time_step(eta, d)

    def run(n):
        t = np.array([0.0, n * dt])
        if which == "numba":
            return sgd(model, init, eta=eta, batch=B, t_eval=t, seed=0, progress=False, threads=1)
        kw = dict(eta=eta, batch=B, t_eval=t, progress=False)
        if which == "f32":
            kw["dtype"] = "float32"
        if which == "teacher-factors":
            kw["teacher"] = "factors"
        if which == "teacher-S":
            kw["teacher"] = "S"
        if which == "batched4":
            return xp_sgd_runs(model, init, n_seeds=4, seed=0, seeds_per_product=4, **kw)
        return xp_sgd_runs(model, init, n_seeds=1, seed=0, **kw)
    return run


def per_step(run, n1, n2, repeats, seeds=1):
    """CPU seconds per step (and per seed), from runs of n1 and n2 steps."""
    run(n1)  # compile, derive and cache
    best = math.inf
    for _ in range(repeats):
        t0 = time.process_time()
        run(n1)
        t1 = time.process_time()
        run(n2)
        t2 = time.process_time()
        best = min(best, ((t2 - t1) - (t1 - t0)) / (n2 - n1) / seeds)
    return best


def main(quick: bool = False) -> None:
    from attndyn.numeric import gaussian_init
    B = 512
    dims = (200,) if quick else (200, 300, 400)
    n1, n2 = (2, 8) if quick else (4, 20)
    reps = 2 if quick else 3
    print(f"array-API SGD on NumPy vs numba, CPU s per step (B = {B}, L = 1, K = 2, one "
          f"student, one teacher of width d; NUMBA_NUM_THREADS="
          f"{os.environ.get('NUMBA_NUM_THREADS', '?')}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '?')})")
    print(f"{'model':7} {'d':>4} {'numba':>9} {'xp f64':>9} {'ratio':>6} {'xp f32':>9} "
          f"{'4 batched/seed':>15} {'extra':>30}")
    for kind in ("tied", "untied", "s"):
        model = _model(kind)
        for d in dims:
            init = gaussian_init(model, d, scale=0.5, seed=1)
            t = {}
            for which in ("numba", "xp", "f32", "batched4"):
                t[which] = per_step(_runner(model, init, d, B, which), n1, n2, reps,
                                    seeds=4 if which == "batched4" else 1)
            extra = ""
            if kind == "untied":
                tf = per_step(_runner(model, init, d, B, "teacher-factors"), n1, n2, reps)
                ts = per_step(_runner(model, init, d, B, "teacher-S"), n1, n2, reps)
                extra = f"teacher factors {tf * 1e3:.2f} / S {ts * 1e3:.2f} ms"
            print(f"{kind:7} {d:4d} {t['numba'] * 1e3:7.2f}ms {t['xp'] * 1e3:7.2f}ms "
                  f"{t['xp'] / t['numba']:6.2f} {t['f32'] * 1e3:7.2f}ms "
                  f"{t['batched4'] * 1e3:13.2f}ms {extra:>30}", flush=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
