"""Direct S: the one-step check of the noise term
==============================================

Issue 16, direct S: the one-step check of the noise term. Predicted mean one-step change of
t_k, Psi_kl, Omega_kl of direct-S SGD at fixed S (the drift alone, the exact finite-d
prediction with the eta^2 term, and the leading-order one with Lambda from the Gaussian engine)
against the empirical mean over many batches (numeric/attention/noise_direct.py).

    python examples/noise_direct_onestep.py [--d 100] [--eta 0.01] [--n-batches 100000]
"""
import argparse
import json
import time

import numpy as np

import attndyn
from attndyn.numeric.attention.direct import noise as nd

CASES = {
    # name: (K, trainable, loss, weight decay, number of configurations)
    "D3": (2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, 0.0, 6),
    "D3-shift-decay": (2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1] - 0.5) ** 2, 0.5, 2),
    "two-trainable": (3, [0, 1],
                      lambda G: (G[0, 0, 0] + G[0, 0, 1] - G[0, 0, 2]) ** 2 + G[0, 0, 0] * G[0, 0, 1],
                      0.0, 2),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--eta", type=float, default=0.01)
    ap.add_argument("--n-batches", type=int, default=100_000)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--scale-configs", type=float, default=1.0,
                    help="multiply the number of configurations per case")
    ap.add_argument("--out", default=None, help="JSON file for the rows")
    a = ap.parse_args(argv)
    allrows = []
    t0 = time.perf_counter()
    for ci, name in enumerate(a.cases):
        K, tr, loss, gam, n = CASES[name]
        model = attndyn.SModel(K, tr, loss, weight_decay=gam)
        configs = nd.random_configs(model, a.d, max(1, round(n * a.scale_configs)), seed=100 + ci)
        rows = nd.one_step_check(model, configs, eta=a.eta, batches=tuple(a.batches),
                                 n_batches=a.n_batches, seed=16 + ci)
        for r in rows:  # the leading-order prediction (Lambda from the Gaussian engine)
            S = configs[r["config"]]
            p = nd.one_step_prediction(model, S, eta=a.eta, batch=r["batch"], exact=False)
            i = p["names"].index(r["name"])
            r["leading"] = float(p["corrected"][i])
            r["z_leading"] = (r["empirical"] - r["leading"]) / r["se"] if r["se"] > 0 else 0.0
            r["case"] = name
        allrows += rows
        print(f"== {name} ({time.perf_counter() - t0:.0f} s)")
        print(nd.check_table(rows))
        moving = [r for r in rows if r["eta2_predicted"] != 0.0]
        print(f"max |z| corrected {max(abs(r['z_corrected']) for r in rows):.2f}; "
              f"min |z| flow on noisy rows {min(abs(r['z_flow']) for r in moving):.1f}; "
              f"max |z| leading order {max(abs(r['z_leading']) for r in moving):.1f}")
    wall = time.perf_counter() - t0
    print(f"wall {wall:.0f} s")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rows": allrows, "wall_s": wall, "args": vars(a)}, f, indent=1,
                      default=float)


if __name__ == "__main__":
    main()
