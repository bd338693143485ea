"""Finite learning rate: the one-step check, tied
==============================================

Issue 16's one-step check: predicted mean one-step change of t_1, q_11, q_12 of tied SGD
(D.3 loss (G1 - G2)^2) with and without the eta^2 noise term, against the empirical mean
over many batches at fixed weights (docs/finite-eta.md).

    python examples/finite_eta_onestep.py [--d 100] [--eta 0.005] [--n-batches 100000]
"""
import argparse
import json
import time

import numpy as np

import attndyn
from attndyn.numeric.attention.tied import noise
from attndyn.numeric.attention import corrections as corr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--eta", type=float, default=0.005)
    ap.add_argument("--n-configs", type=int, default=10)
    ap.add_argument("--n-batches", type=int, default=100_000)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--out", default=None, help="JSON file for the rows")
    a = ap.parse_args(argv)
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    configs = noise.random_configs(model, a.d, a.n_configs, seed=16)
    t0 = time.perf_counter()
    rows = noise.one_step_check(model, configs, eta=a.eta, batches=tuple(a.batches),
                                n_batches=a.n_batches, seed=16)
    wall = time.perf_counter() - t0
    print(corr.check_table(rows))
    zc = max(abs(r["z_corrected"]) for r in rows)
    zf = min(abs(r["z_flow"]) for r in rows)
    print(f"d = {a.d}, eta = {a.eta}, {a.n_batches} batches per case, {wall:.0f} s: "
          f"max |z| corrected {zc:.2f}, min |z| uncorrected {zf:.1f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"d": a.d, "eta": a.eta, "n_batches": a.n_batches, "wall_s": wall,
                       "rows": [{k: (float(v) if isinstance(v, (float, np.floating)) else v)
                                 for k, v in r.items()} for r in rows]}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
