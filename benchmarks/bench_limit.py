"""Long-horizon solvers (issue 9): the cheap convergence check and the limit solver vs SGD.

Table 1, the convergence check at order 20 (K = 2, loss (G_1 - G_2)^2, gamma = 8,
FreeInit wishart(0.5, 0.5), scalar(1), T = 1): wall time of the unchecked run, of the
default check (order 18) and of the old order-22 check, as ratios to the unchecked run.
Target: the default check costs at most 1.5x the run.

Table 2, the fast tied flow against the plain full-matrix flow at d = 300 (Figure 4's
matrices, t = 1, same tolerances).

Table 3, Figure 4's setting (tied, (G_1 - G_2)^2, d = 400, lr 0.01, B 512, gamma = 0,
standard Gaussian student and teacher, T = 1; quick: T = 0.1): wall time of one SGD run
and of the limit solvers with the error estimate each reaches: the exact free limit (the
default here; target: error 1e-4 in less time than SGD), the deterministic equivalents
at the listed sizes and rotations (Richardson in 1/d), and the exact commuting-case
solver (teacher S_2 = I) for reference. Ratios are against the SGD run measured in the
same process.
"""

from __future__ import annotations

import time

import numpy as np


def _best(f, n=3):
    best = np.inf
    out = None
    for _ in range(n):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def check_cost(quick: bool) -> None:
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    M = 14 if quick else 20
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=8.0)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    t = np.linspace(0, 1.0, 11)
    for o in (M - 2, M, M + 2):  # build (and cache) the structures outside the timings
        model.hierarchy(o).integrate(init, [0, 0.01], check=None, method="truncation")
    h = model.hierarchy(M)
    base, r0 = _best(lambda: h.integrate(init, t, check=None, method="truncation"))
    new, r1 = _best(lambda: h.integrate(init, t, method="truncation"))
    old, r2 = _best(lambda: h.integrate(init, t, check=M + 2, method="truncation"), n=1)
    print(f"order {M}: {h.n_moments} moments, {h.n_terms} terms, T = 1, gamma = 8")
    print(f"{'run':<34}{'wall s':>10}{'x run':>8}  status / estimate")
    print(f"{'unchecked':<34}{base:>10.3f}{1.0:>8.2f}  {r0.status}")
    print(f"{'default check (order M-2)':<34}{new:>10.3f}{new / base:>8.2f}  {r1.status} / "
          f"{r1.diagnostics.get('truncation_error_low', float('nan')):.2g}")
    print(f"{'old check (order M+2)':<34}{old:>10.3f}{old / base:>8.2f}  {r2.status} / "
          f"{r2.diagnostics.get('truncation_error_low', float('nan')):.2g}")
    print(f"default check / run = {new / base:.2f} (target <= 1.5)")


def limit_vs_sgd(quick: bool) -> None:
    import attndyn
    from attndyn.numeric import gaussian_init, sgd
    from attndyn.numeric.attention.limit import limit_flow
    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    T = 0.1 if quick else 1.0
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    t = np.linspace(0, T, 11)
    W = gaussian_init(model, 400, seed=4)
    sgd(model, [w[:8, :8] for w in W], eta=0.01, batch=8, t_eval=[0, 0.01], seed=0)  # compile
    t0 = time.perf_counter()
    run = sgd(model, W, eta=0.01, batch=512, t_eval=t, seed=5)
    wall_sgd = time.perf_counter() - t0
    law = FreeInit([wishart(1, 1), wishart(1, 1)])
    print(f"Figure 4 setting, T = {T}: SGD d = 400, B = 512, lr 0.01: {wall_sgd:.1f} s "
          f"({run.params['n_steps']} steps, status {run.status})")
    print(f"{'solver':<40}{'wall s':>9}{'x SGD':>8}{'error est.':>12}{'|SGD - it|':>12}")
    names = ("mu_1", "q_11", "q_12")
    t0 = time.perf_counter()
    fr = limit_flow(model, law, run.t)  # the exact free limit (method "free")
    w = time.perf_counter() - t0
    err = max(fr.error[n].max() for n in names)
    gap = max(np.abs(run.observable(n) - fr.observable(n)).max() for n in names)
    print(f"{'free limit (' + fr.diagnostics['method'] + '), exact':<40}{w:>9.2f}"
          f"{w / wall_sgd:>8.4f}{err:>12.2e}{gap:>12.2e}")
    configs = [((100, 200), 4), ((200, 400), 2)] if not quick else [((100, 200), 2)]
    for sizes, rot in configs:
        t0 = time.perf_counter()
        lim = limit_flow(model, law, run.t, sizes=sizes, rotations=rot, seed=0, rtol=1e-8,
                         method="equivalents")
        w = time.perf_counter() - t0
        err = max(lim.error[n].max() for n in names)
        gap = max(np.abs(run.observable(n) - lim.observable(n)).max() for n in names)
        print(f"{f'equivalents {sizes} x{rot} rotations':<40}{w:>9.2f}{w / wall_sgd:>8.3f}"
              f"{err:>12.2e}{gap:>12.2e}")
    t0 = time.perf_counter()
    ex = limit_flow(model, FreeInit([wishart(1, 1), scalar(1)]), t)
    w = time.perf_counter() - t0
    err = max(ex.error[n].max() for n in names)
    print(f"{'commuting (S_2 = I), exact':<40}{w:>9.2f}{w / wall_sgd:>8.4f}{err:>12.2e}"
          f"{'-':>12}")


def flow_speed(quick: bool) -> None:
    """The fast tied flow against the plain full-matrix flow (two d x d products per
    step, full state), same DOP853 tolerances, Figure 4's matrices to t = 1."""
    from scipy.integrate import solve_ivp

    import attndyn
    from attndyn.numeric import gaussian_init
    from attndyn.numeric.attention.fastflow import tied_fast_flow
    from attndyn.symbolic.words import canonical_words

    d = 150 if quick else 300
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    W = gaussian_init(model, d, seed=4)
    S = [w @ w.T for w in W]
    words = canonical_words(2, model.alphabet)
    t = np.linspace(0, 1, 11)

    def plain():
        def rhs(_, y):
            S1 = y.reshape(d, d)
            q = np.array([[np.sum(S1 * S1), np.sum(S1 * S[1])], [0, 0]]) / d
            G = model.gamma(np.array([[q[0, 0], q[0, 1]], [q[0, 1], np.sum(S[1] * S[1]) / d]]))
            P = S1 @ S1
            Q = S[1] @ S1
            return (-G[0, 0] * 2 * P - G[0, 1] * (Q + Q.T)).ravel()
        return solve_ivp(rhs, (0, 1), S[0].ravel(), method="DOP853", t_eval=t, rtol=1e-10,
                         atol=1e-12)

    t_plain, sp = _best(plain, n=1)
    t_fast, fo = _best(lambda: tied_fast_flow(model, S, t, words, rtol=1e-10, atol=1e-12), n=1)
    q_plain = np.sum(sp.y[:, -1].reshape(d, d) ** 2) / d
    print(f"tied flow d = {d} to t = 1 (rtol 1e-10): plain {t_plain:.2f} s, fast ({fo.form}) "
          f"{t_fast:.2f} s, ratio {t_plain / t_fast:.1f}x; |q_11 diff| "
          f"{abs(q_plain - fo.traces[words.index((0, 0)), -1]):.1e}")


def main(quick: bool = False) -> None:
    check_cost(quick)
    print()
    flow_speed(quick)
    print()
    limit_vs_sgd(quick)


if __name__ == "__main__":
    import sys
    main("--quick" in sys.argv)
