"""Direct S: SGD against the noise-corrected closed ODE
====================================================

Issue 16, direct S: the trajectory check of the noise correction. SGD mean over seeds
against the closed ODE (402)-(404) without and with the mini-batch noise terms
(numeric/attention/noise_direct.py), at settings where eta d / B matters.

    python examples/noise_direct_flow.py --loss D3 --d 100 --batch 16 --eta 0.04 0.08
    python examples/noise_direct_flow.py --loss quartic --d 100 --batch 16 --eta 0.02 --ref-batch 128

``--ref-batch``: also run SGD at the same eta with that batch and compare the differences
SGD(B) - SGD(B_ref) with theory(B) - theory(B_ref): the finite-width error of the drift
(O(1/d), independent of eta and B) and the learning-rate terms (same eta) cancel, so this
isolates the noise term.
"""
import argparse
import json
import math
import time

import numpy as np

import attndyn
from attndyn.numeric.attention.training import sgd_runs

LOSSES = {
    "D3": lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2,
    "quartic": lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 + (G[0, 0, 0] ** 2 - G[0, 0, 1] ** 2) ** 2 / 4,
    # two tokens (L = 2, C = [[1, 0.5], [0.5, 1]]): Psi and Omega get different noise terms
    "L2": lambda G: (G[0, 1, 0] - G[0, 1, 1]) ** 2 + (G[0, 0, 0] - G[1, 1, 1]) ** 2,
}
TOKENS = {"L2": (2, [[1.0, 0.5], [0.5, 1.0]])}
NAMES = ["t_1", "Psi_11", "Omega_11", "Psi_12", "Omega_12"]


def sgd_mean(model, S, eta, B, t, seeds, seed):
    runs = sgd_runs(model, S, n_seeds=seeds, seed=seed, eta=eta, batch=B, t_eval=t, threads=1)
    if any(r.status != 0 for r in runs):
        raise RuntimeError("; ".join(r.message for r in runs if r.status != 0))
    Y = np.array([[r.observable(n) for n in NAMES] for r in runs])
    return runs[0].t, Y.mean(axis=0), Y.std(axis=0, ddof=1) / math.sqrt(seeds)


def theories(model, S, t, eta, B, corrections):
    out = {}
    for c in corrections:
        kw = {} if c == "none" else dict(correction=c, eta=eta, batch=B)
        th = model.integrate(S, t, **kw)
        out[c] = np.array([th.observable(n) for n in NAMES])
    return out


def table(t, mean, se, ths):
    rows = {}
    for c, y in ths.items():
        e = np.abs(mean - y)
        z = e[:, 1:] / se[:, 1:]
        rows[c] = {"max_abs": {n: float(e[i].max()) for i, n in enumerate(NAMES)},
                   "max_z": {n: float(z[i].max()) for i, n in enumerate(NAMES)}}
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--loss", choices=list(LOSSES), default="D3")
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--eta", type=float, nargs="+", default=[0.04, 0.08])
    ap.add_argument("--T", type=float, default=0.5)
    ap.add_argument("--n-t", type=int, default=21)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--ref-batch", type=int, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    L, C = TOKENS.get(a.loss, (1, None))
    model = attndyn.SModel(2, [0], LOSSES[a.loss], L=L, C=C)
    S = model.gaussian_init(a.d, scale=[1.0, 1.0], seed=7)
    t_eval = np.linspace(0.0, a.T, a.n_t)
    corr = ["none", "noise"] + (["noise+finite-d"] if a.loss == "D3" else [])  # L = 1, degree 2
    res = {"args": vars(a), "cases": []}
    for eta in a.eta:
        t0 = time.perf_counter()
        t, mean, se = sgd_mean(model, S, eta, a.batch, t_eval, a.seeds, 0)
        ths = theories(model, S, t, eta, a.batch, corr)
        case = {"eta": eta, "batch": a.batch, "eps": eta * a.d / a.batch,
                "errors": table(t, mean, se, ths), "t": t.tolist(), "sgd_mean": mean.tolist(),
                "sgd_se": se.tolist(), "theories": {c: y.tolist() for c, y in ths.items()}}
        print(f"== loss {a.loss}, d = {a.d}, B = {a.batch}, eta = {eta}, eta d / B = "
              f"{case['eps']:.4g}, {a.seeds} seeds")
        for c, r in case["errors"].items():
            print(f"  {c:<15}" + "  ".join(f"{n} {r['max_abs'][n]:.2e} (z {r['max_z'][n]:.1f})"
                                           for n in NAMES))
        if a.ref_batch:
            tr, mr, sr = sgd_mean(model, S, eta, a.ref_batch, t_eval, a.seeds, 1)
            thr = theories(model, S, tr, eta, a.ref_batch, corr)
            dm = mean - mr
            dse = np.sqrt(se ** 2 + sr ** 2)
            dth = {c: ths[c] - thr[c] for c in corr}
            case["ref"] = {"batch": a.ref_batch, "eps": eta * a.d / a.ref_batch,
                           "errors": table(t, dm, dse, dth), "sgd_mean": mr.tolist(),
                           "sgd_se": sr.tolist()}
            print(f"  differences to B_ref = {a.ref_batch} (eta d / B_ref = "
                  f"{case['ref']['eps']:.4g}); SGD difference max "
                  + "  ".join(f"{n} {np.abs(dm[i]).max():.2e}" for i, n in enumerate(NAMES)))
            for c, r in case["ref"]["errors"].items():
                print(f"  d-{c:<13}" + "  ".join(f"{n} {r['max_abs'][n]:.2e} (z {r['max_z'][n]:.1f})"
                                                for n in NAMES))
        case["wall_s"] = time.perf_counter() - t0
        print(f"  ({case['wall_s']:.0f} s)", flush=True)
        res["cases"].append(case)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
