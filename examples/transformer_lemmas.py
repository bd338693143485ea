"""Paper 000: the lemmas measured on the transformer
=================================================

Paper 000's lemmas measured on the transformer, and the empirical scaling
beside the bounds of Theorems 7.1 / 7.2.

    python examples/transformer_lemmas.py [--quick] [--json out.json] [--plot out.png]

Prints every measured number (the ones quoted in docs/transformer.md):
the lazy-regime premises along a run (verdict tables for both setups),
Assumption 5.1 with both kernels, Lemma 4.1's relative gap against the width m at N = 2 (two setups) with the
fitted trend, the gap along a gradient-flow run, Assumption 5.1's lambda
against m, n, L, d, Lemma 5.3 over seeds, Theorem 5.5's rate ratio, Definition
5.2's required width, and the excess-risk scaling in N, M, T and C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from attndyn.numeric import transformer as tr
from attndyn.numeric.transformer.results import jsonable

# unit-norm tokens, small positional embedding: the default setup of the docs
A = dict(N=2, L=4, d=4, m=64, n=8, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
         token_norm="unit", E_scale=0.5, n_test=128)
# RMS-normalised tokens (||x|| = sqrt(d)) and the full sinusoidal embedding
B = dict(N=2, L=4, d=8, m=64, n=6, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
         token_norm="rms", E_scale=1.0, n_test=128)
FLOW = dict(rtol=1e-5, atol=1e-8)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    q = args.quick
    seeds = 3 if q else 8
    out = {"load_average": os.getloadavg()[0], "cores": os.cpu_count()}
    t0 = time.perf_counter()

    # Lemma 4.1 / B.6 against dL/dt = -|grad L|^2, width sweep at N = 2
    widths = (16, 64, 256, 1024) if q else (16, 32, 64, 128, 256, 512, 1024)
    for name, setup in (("A", A), ("B", B)):
        sw = tr.lemma41_sweep(setup, widths, seeds=seeds)
        print(f"\nLemma 4.1 gap vs m, setup {name}\n{sw.table()}")
        for k in ("gap", "gap_W", "gap_U"):
            f = sw.fits[k]
            print(f"  {k}: ~ {f['prefactor']:.3g} m^{f['exponent']:.3f} "
                  f"(+- {f['exponent_stderr']:.2g})")
        out[f"lemma41_{name}"] = {"m": sw.x, "gap": sw["gap"], "gap_W": sw["gap_W"],
                                  "gap_U": sw["gap_U"], "fits": sw.fits}

    # depth N = 1, 2, 3 (setup A)
    for N in (1, 2, 3):
        sw = tr.lemma41_sweep(dict(A, N=N), (16, 64, 256, 1024), seeds=seeds)
        f = sw.fits
        print(f"Lemma 4.1 gap, N = {N}: {np.round(sw['gap'], 4)}; trend m^{f['gap']['exponent']:.2f}"
              f" (W part m^{f['gap_W']['exponent']:.2f}, U part m^{f['gap_U']['exponent']:.2f})")
        out[f"lemma41_depth{N}"] = {"gap": sw["gap"], "fits": f}

    # along a gradient-flow run
    student, data = tr.build(dict(A, m=256), 0)
    res = tr.train(student, data, T=1.0, n_eval=10, observe=("lemma41", "kernel"), **FLOW)
    gap_t = np.abs(res.observable("lemma41") + res.observable("grad_norm2")) / \
        res.observable("grad_norm2")
    print(f"\nLemma 4.1 gap along a flow run (setup A, m = 256): {np.round(gap_t, 4)}")
    out["lemma41_along_run"] = {"t": res.t, "gap": gap_t}

    # Assumption 5.1: lambda at initialisation
    out["assumption51"] = {}
    for var, vals in (("m", [8, 32, 128, 512]), ("n", [2, 4, 8, 16]), ("L", [1, 2, 4, 8]),
                      ("d", [2, 4, 8, 16])):
        sw = tr.assumption_sweep(A, var, vals, seeds=seeds)
        print(f"\nAssumption 5.1, lambda vs {var}\n{sw.table()}")
        out["assumption51"][var] = {"x": sw.x, "lambda_mean": sw["lambda_mean"],
                                    "fraction_pd": sw["fraction_pd"]}

    # Lemma 5.3 along runs
    T53 = 1.0 if q else 3.0
    for m in (64, 512):
        r = tr.lemma53(dict(A, m=m), T=T53, seeds=seeds, n_eval=10, **FLOW)
        print(f"\nLemma 5.3, m = {m}, T = {T53}\n{r.table()}\n  {r.fits}")
        out[f"lemma53_m{m}"] = {"table": r.y, "fits": r.fits}

    # Theorem 5.5
    out["theorem55"] = []
    for m, T in ((64, 3.0), (512, 3.0)):
        student, data = tr.build(dict(A, m=m), 1)
        lam = tr.assumption_lambda(student, data.X)
        res = tr.train(student, data, T=T, n_eval=15, **FLOW)
        rep = tr.theorem55(res, lam=lam, omega=student.omega, eps=student.eps)
        print(f"\nTheorem 5.5, m = {m}: lambda = {lam:.4g}, predicted rate {rep['predicted_rate']:.4g},"
              f" min_t effective/predicted = {rep['ratio']:.4g}, final = {rep['final_ratio']:.4g},"
              f" fitted = {rep['fitted_ratio']:.4g}, holds = {rep['holds']}")
        out["theorem55"].append(dict(rep, m=m, lam=lam, T=T))

    # Definition 5.2: required vs used width
    student, data = tr.build(dict(A, m=256), 0)
    for c in (0.0, 0.1, 1.0):
        rep = tr.definition52(student, data.X, delta=0.05, c_exp=c)
        print(f"\nDefinition 5.2 (c_exp = {c}, delta = 0.05): log10 m required = "
              f"{rep['log10_m_required']:.1f}, used {rep['log10_m_used']:.2f}")
        out[f"definition52_c{c}"] = rep
    g = tr.good_scalings(2, 4, 4, 256, omega_const=1.0, delta=0.05, b_const=1.0)
    print(f"Definition 5.2's omega (constant 1, B from Lemma C.1 with constant 1): {g}")
    out["good_scalings"] = g

    # the lazy-regime premises along a flow run (Lemma C.1, eqs. 6-9), both setups
    from attndyn.numeric.transformer.premises import premises
    for name, setup in (("A", A), ("B", B)):
        rep = premises(setup, 0, T=1.0, n_eval=5, widths=(16, 64, 256, 1024), **FLOW)
        print(f"\nPremises along a flow run, setup {name} (m = {setup['m']}, T = 1)\n"
              f"{rep.table()}")
        out[f"premises_{name}"] = rep.as_dict()

    # Assumption 5.1 with both kernels (Definition B.5's H' and the exact K^W)
    for name, setup in (("A", A), ("B", B)):
        sw = tr.assumption_sweep(setup, "m", [8, 32, 128, 512], seeds=seeds, kernel="exact")
        print(f"\nAssumption 5.1 with both kernels, setup {name}\n{sw.table()}")
        out[f"assumption51_both_{name}"] = {"x": sw.x, "rows": dict(zip(sw.names, sw.y))}

    # empirical scaling beside the bounds
    Tsc = 2.0 if q else 5.0
    sweeps = {
        "N": tr.scaling_sweep(A, "N", [4, 8, 16] if q else [4, 8, 16, 32], T=Tsc, seeds=2,
                              n_eval=5, **FLOW),
        "M": tr.scaling_sweep(dict(A, teacher_m=64), "M", [16, 64, 256], T=Tsc, seeds=2,
                              n_eval=5, zeta=0.25, **FLOW),
        "T": tr.scaling_sweep(A, "T", None, T=Tsc, seeds=2, n_eval=10, **FLOW),
        "C": tr.scaling_sweep(A, "C", [16, 64, 256], T=Tsc, seeds=1, n_eval=8, **FLOW),
    }
    out["scaling"] = {}
    for k, sw in sweeps.items():
        print(f"\nExcess risk vs {k}\n{sw.table()}\n  fits: {sw.fits}")
        out["scaling"][k] = {"x": sw.x, "rows": dict(zip(sw.names, sw.y)), "fits": sw.fits}
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(2, 2, figsize=(10, 8))
        for ax, sw in zip(axes.ravel(), sweeps.values()):
            tr.plot_scaling(sw, ax=ax)
        fig.tight_layout()
        fig.savefig(args.plot)
    out["seconds"] = time.perf_counter() - t0
    print(f"\n{out['seconds']:.0f} s, load average at start {out['load_average']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(jsonable(out), f, indent=1)


if __name__ == "__main__":
    main()
