"""Finite learning rate: the one-step check, untied
================================================

Issue 16's one-step check for untied attention S = U V^T: the predicted mean one-step
change of m_1, tA_1, tB_1, q1_11, q2_11, q1_12, q2_12 of untied SGD (loss (G1 - G2)^2,
student 0, fixed teacher 1) with and without the eta^2 terms, against the empirical mean
over many batches at fixed weights (numeric/attention/noise_untied.py).

    python examples/finite_eta_onestep_untied.py [--d 100] [--eta 0.01] [--n-batches 40000]
"""
import argparse
import json
import os
import time

import numpy as np

import attndyn
from attndyn.numeric.attention.untied import noise as nu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--eta", type=float, default=0.01)
    ap.add_argument("--n-configs", type=int, default=10)
    ap.add_argument("--n-batches", type=int, default=40_000)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--out", default=None, help="JSON file for the rows")
    a = ap.parse_args(argv)
    model = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    configs = nu.random_configs(model, a.d, a.n_configs, seed=16)
    t0 = time.perf_counter()
    rows = nu.one_step_check(model, configs, eta=a.eta, batches=tuple(a.batches),
                             n_batches=a.n_batches, seed=16)
    wall = time.perf_counter() - t0
    print(nu.check_table(rows))
    zc = max(abs(r["z_corrected"]) for r in rows)
    noisy = [r for r in rows if abs(r["noise_over_se"]) > 5]
    zf = min(abs(r["z_flow"]) for r in noisy) if noisy else float("nan")
    print(f"d = {a.d}, eta = {a.eta}, {a.n_batches} batches per case, {wall:.0f} s, load "
          f"{os.getloadavg()[0]:.1f}: max |z| corrected {zc:.2f} (all rows); min |z| of the "
          f"flow alone {zf:.1f} over the {len(noisy)} rows whose noise term exceeds 5 s.e.")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"d": a.d, "eta": a.eta, "n_batches": a.n_batches, "wall_s": wall,
                       "rows": [{k: (float(v) if isinstance(v, (float, np.floating)) else v)
                                 for k, v in r.items()} for r in rows]}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
