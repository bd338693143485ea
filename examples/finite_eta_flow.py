"""Finite learning rate: SGD against the noise-corrected flow
==========================================================

Issue 16's flow check: SGD mean over seeds against the matrix flow and the
noise-corrected moment-level flow at Figure 4's settings (docs/finite-eta.md).

    python examples/finite_eta_flow.py [--d 400 --batch 512 --seeds 8] [--png out.png]
"""
import argparse
import json
import time

import numpy as np

from attndyn.numeric.attention.figures import fig4 as F4


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, default=400)
    ap.add_argument("--eta", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--T", type=float, default=1.0)
    ap.add_argument("--n-t", type=int, default=41)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--png", default=None)
    ap.add_argument("--out", default=None, help="npz file for the curves")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = F4.fig4_noise_check(d=a.d, eta=a.eta, batch=a.batch, T=a.T, n_t=a.n_t, scale=a.scale,
                                 seeds=a.seeds)
    wall = time.perf_counter() - t0
    print(f"d = {a.d}, eta = {a.eta}, B = {a.batch}, eta d / B = {a.eta * a.d / a.batch:.4g}, "
          f"{a.seeds} seeds, t in [0, {a.T}], {wall:.0f} s")
    print(f"{'theory':<16}" + "".join(f"{n + ' err':>14}{'max z':>8}" for n in res["names"]))
    for c, e in res["errors"].items():
        print(f"{c:<16}" + "".join(f"{e['max_abs'][n]:>14.3e}{e['max_z'][n]:>8.1f}"
                                   for n in res["names"]))
    print("max SGD standard error:", {n: f"{res['sgd_se'][i].max():.2e}"
                                      for i, n in enumerate(res["names"])})
    if a.out:
        np.savez(a.out, t=res["t"], sgd_mean=res["sgd_mean"], sgd_se=res["sgd_se"],
                 **{f"theory_{c}": y for c, y in res["theories"].items()},
                 params=json.dumps(res["params"]), errors=json.dumps(res["errors"]))
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        ax = F4.plot_noise_check(res)
        fig = np.atleast_1d(ax)[0].figure
        fig.suptitle(f"tied D.3, d = {a.d}, eta = {a.eta}, B = {a.batch}, {a.seeds} SGD seeds")
        fig.tight_layout()
        fig.savefig(a.png, dpi=80)
        plt.close(fig)
    return res


if __name__ == "__main__":
    main()
