"""Finite-d SGD against theory
===========================

Finite-d online SGD against theory, and the Figure-2 contrast of paper 003.

1. Tied attention, loss (G_1 - G_2)^2: SGD against the finite-d matrix flow for
   several eta*d/B; the error shrinks with eta*d/B (the noise term of the update).
2. Direct S, linear teacher-student: SGD against the closed ODE (402)-(404).
3. h2 and h3 teacher-student from an uninformative start: the direct-S overlaps
   stay near 0 (Corollary 7, case 2), the tied ones escape (eq. 17).

Usage::

    python examples/sgd_vs_theory.py            # reduced sizes, about a minute
    python examples/sgd_vs_theory.py --full     # the acceptance sizes (d = 400 / 300)
    python examples/sgd_vs_theory.py --plot fig.png
"""

from __future__ import annotations

import argparse

import numpy as np
import sympy as sp

import attndyn
from attndyn.numeric.attention.compare import compare
from attndyn.numeric.attention.training import gaussian_init, sgd

H = {"linear": lambda x: x,
     "h2": lambda x: (x ** 2 - 1) / sp.sqrt(2),
     "h3": lambda x: (x ** 3 - 3 * x) / sp.sqrt(6)}


def teacher_student(act):
    F = H[act]
    return lambda G: (F(G[0, 0, 0]) - F(G[0, 0, 1])) ** 2 / 2


def tied_part(d, B, ratios):
    print(f"\n1. tied, (G1 - G2)^2, d = {d}, B = {B}, T = 1, Gaussian factors of scale 0.5")
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    init = {"d": d, "scale": 0.5, "seed": 1}
    out = []
    for r in ratios:
        c = compare(m, init, eta=r * B / d, batch=B, t_eval=np.linspace(0, 1, 11), seed=0)
        err = c.max_error(["mu_1", "q_11", "q_12"])
        print(f"   eta*d/B = {r:5.3f}: max |SGD - flow| on t_1, q_11, q_12 = {err:.2e}")
        out.append(c)
    return out


def s_part(d, ratio):
    print(f"\n2. direct S, linear, d = {d}, eta*d/B = {ratio}, tau <= 1")
    m = attndyn.SModel(2, [0], teacher_student("linear"))
    c = compare(m, {"d": d, "scale": [0.7, 1.0], "seed": 5}, eta=ratio, batch=d,
                t_eval=np.linspace(0, 1, 11), seed=0)
    print(c.table(["t_1", "Psi_12", "Omega_12", "Omega_11", "loss"]))
    return c


def contrast(d, ratio):
    print(f"\n3. uninformative start, d = {d}, tau (S) and t (tied) up to 1: max |structural overlap|")
    from attndyn.numeric import matrix_flow
    for act, tv in (("h2", 0.25), ("h3", 1.0)):
        sm = attndyn.SModel(2, [0], teacher_student(act))
        S = gaussian_init(sm, d, seed=5, scale=[0.5, 1.0])
        v = (np.sum(S[1] * S[1]) + np.sum(S[1] * S[1].T)) / d
        S[1] *= np.sqrt(tv / v)  # teacher Var(G_2) = tv (h3 needs 1 for (417))
        r = sgd(sm, S, eta=ratio, batch=d, t_eval=np.linspace(0, 1, 11), seed=0)
        ps = max(np.abs(r.observable("p_Psi", 0, 1)).max(), np.abs(r.observable("p_Omega", 0, 1)).max())
        tm = attndyn.TiedModel(2, [0], teacher_student(act))
        W = gaussian_init(tm, d, seed=5, scale=0.7)
        f = matrix_flow(tm, [w @ w.T for w in W], np.linspace(0, 1, 11), order=2)
        pt = f.moment((0, 1)) - f.moment((0,)) * f.moment((1,))
        verdict = sm.corollary7(S)["verdict"].split(":")[0]
        print(f"   {act}: direct-S SGD {ps:.3e} ({verdict}); tied flow p_12 {pt[0]:.3e} -> "
              f"{pt[-1]:.3e} (eq. 17: escapes)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="acceptance sizes (slow)")
    ap.add_argument("--plot", default=None, help="save a plot of part 1 to this file")
    a = ap.parse_args(argv)
    if a.full:
        cs = tied_part(400, 512, [0.08, 0.04, 0.02, 0.01])
        s_part(300, 0.1)
        contrast(300, 0.1)
    else:
        cs = tied_part(120, 256, [0.08, 0.04, 0.02])
        s_part(150, 0.1)
        contrast(150, 0.1)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        ax = cs[-1].plot(["mu_1", "q_11", "q_12", "p_12"])
        ax.figure.savefig(a.plot, dpi=120)
        print(f"saved {a.plot}")


if __name__ == "__main__":
    main()
