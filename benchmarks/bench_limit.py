"""Long-horizon solvers (issue 9): the cheap convergence check and the limit solver vs SGD.

Table 1, the convergence check at order 20 (K = 2, loss (G_1 - G_2)^2, gamma = 8,
FreeInit wishart(0.5, 0.5), scalar(1), T = 1): CPU time of the unchecked run, of the
default check (order 18) and of the old order-22 check, as ratios to the unchecked run.
Target: the default check costs at most 1.5x the run.

Table 2, the fast tied flow against the plain full-matrix flow at d = 300 (Figure 4's
matrices, t = 1, same tolerances).

Table 3, Figure 4's setting (tied, (G_1 - G_2)^2, d = 400, lr 0.01, B 512, gamma = 0,
standard Gaussian student and teacher, T = 1; quick: T = 0.1): CPU time of one SGD run
and of the limit solvers with the error estimate each reaches: the exact free limit (the
default here; target: error 1e-4 in less time than SGD), the deterministic equivalents
at the listed sizes and rotations (Richardson in 1/d), and the exact commuting-case
solver (teacher S_2 = I) for reference. Ratios are against the SGD run measured in the
same process.

Table 4, the free solver's subordination solve (one right-hand-side evaluation's root and
traces on Fig. 4's 48 x 20 nodes): the compiled kernel (``kernels/subordination.py``) against
the Python brentq version it replaced, and the free solve of Fig. 4's law to T = 1, 16, 64
(status, values at T = 1).

Clock: process CPU time (minimum over repeats; the SGD reference and the solvers alike), one
thread, wall time beside it, the load above each table (``benchmarks/_timing.py``).
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _timing import interleaved, load  # noqa: E402


def _best(f, n=3):
    """(CPU seconds, result): the minimum CPU time of ``n`` calls, and the last result."""
    best = np.inf
    out = None
    for _ in range(n):
        t = time.process_time()
        out = f()
        best = min(best, time.process_time() - t)
    return best, out


def table_subordination(quick: bool) -> None:
    import attndyn
    import _floors
    from attndyn.kernels.subordination import subordination_solve
    from attndyn.numeric.attention.tied.limit import _spec_params, free_limit, mp_quadrature
    from attndyn.symbolic.initial import FreeInit, wishart

    law = FreeInit([wishart(1, 1), wishart(1, 1)])
    x, wx = mp_quadrature(*_spec_params(law.specs[0]), 48, 20)
    mu, wm = mp_quadrature(*_spec_params(law.specs[1]), 48, 20)
    print(f"\nsubordination solve on {x.size} + {mu.size} nodes, CPU time ({load()})")
    print(f"{'t':>5} {'python us':>10} {'(wall)':>8} {'compiled us':>12} {'(wall)':>8} {'x':>6} "
          f"{'max |diff|':>10}")
    for t in (0.1, 1.0, 8.0):
        g = np.exp(-2.0 * (0.3 * t * mu + 0.1 * t))
        phi = 1.5 * (1.0 - np.exp(-2.0 * (0.3 * mu + 0.1) * t)) / (2.0 * (0.3 * mu + 0.1))
        ref = _floors.python_subordination(phi, g, mu, wm, x, wx, -1.0 / float(wx @ x))
        om0 = ref[0] * (1.0 + 1e-6)  # a warm start, as from the previous evaluation
        b = interleaved({"py": lambda: _floors.python_subordination(phi, g, mu, wm, x, wx, om0),
                         "nb": lambda: subordination_solve(phi, g, mu, wm, x, wx, om0)})
        diff = max(abs(a - c) for a, c in zip(ref, subordination_solve(phi, g, mu, wm, x, wx, om0)))
        print(f"{t:5.1f} {b['py'][0] * 1e6:10.1f} {b['py'][1] * 1e6:8.1f} {b['nb'][0] * 1e6:12.1f} "
              f"{b['nb'][1] * 1e6:8.1f} {b['py'][0] / b['nb'][0]:6.2f} {diff:10.1e}")
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    print(f"free solve of Fig. 4's law ({load()}):")
    for T in ((1.0, 16.0) if quick else (1.0, 16.0, 64.0)):
        c0, w0 = time.process_time(), time.perf_counter()
        r = free_limit(model, law, np.linspace(0.0, T, 11))
        c, w = time.process_time() - c0, time.perf_counter() - w0
        vals = np.array2string(r.y[:, -1], precision=10) if r.status == 0 else ""
        print(f"  T = {T:4.0f}: status {r.status}, {c:.2f} s CPU ({w:.2f} s wall) {vals} "
              f"{'' if r.status == 0 else r.message}")


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
    print(f"{'run':<34}{'CPU s':>10}{'x run':>8}  status / estimate")
    print(f"{'unchecked':<34}{base:>10.3f}{1.0:>8.2f}  {r0.status}")
    print(f"{'default check (order M-2)':<34}{new:>10.3f}{new / base:>8.2f}  {r1.status} / "
          f"{r1.diagnostics.get('truncation_error_low', float('nan')):.2g}")
    print(f"{'old check (order M+2)':<34}{old:>10.3f}{old / base:>8.2f}  {r2.status} / "
          f"{r2.diagnostics.get('truncation_error_low', float('nan')):.2g}")
    print(f"default check / run = {new / base:.2f} (target <= 1.5)")


def limit_vs_sgd(quick: bool) -> None:
    import attndyn
    from attndyn.numeric import gaussian_init, sgd
    from attndyn.numeric.attention.tied.limit import limit_flow
    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    T = 0.1 if quick else 1.0
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    t = np.linspace(0, T, 11)
    W = gaussian_init(model, 400, seed=4)
    sgd(model, [w[:8, :8] for w in W], eta=0.01, batch=8, t_eval=[0, 0.01], seed=0)  # compile
    t0 = time.process_time()
    run = sgd(model, W, eta=0.01, batch=512, t_eval=t, seed=5)
    wall_sgd = time.process_time() - t0
    law = FreeInit([wishart(1, 1), wishart(1, 1)])
    print(f"Figure 4 setting, T = {T}: SGD d = 400, B = 512, lr 0.01: {wall_sgd:.1f} s CPU "
          f"({run.params['n_steps']} steps, status {run.status})")
    print(f"{'solver':<40}{'CPU s':>9}{'x SGD':>8}{'error est.':>12}{'|SGD - it|':>12}")
    names = ("mu_1", "q_11", "q_12")
    t0 = time.process_time()
    fr = limit_flow(model, law, run.t)  # the exact free limit (method "free")
    w = time.process_time() - t0
    err = max(fr.error[n].max() for n in names)
    gap = max(np.abs(run.observable(n) - fr.observable(n)).max() for n in names)
    print(f"{'free limit (' + fr.diagnostics['method'] + '), exact':<40}{w:>9.2f}"
          f"{w / wall_sgd:>8.4f}{err:>12.2e}{gap:>12.2e}")
    configs = [((100, 200), 4), ((200, 400), 2)] if not quick else [((100, 200), 2)]
    for sizes, rot in configs:
        t0 = time.process_time()
        lim = limit_flow(model, law, run.t, sizes=sizes, rotations=rot, seed=0, rtol=1e-8,
                         method="equivalents")
        w = time.process_time() - t0
        err = max(lim.error[n].max() for n in names)
        gap = max(np.abs(run.observable(n) - lim.observable(n)).max() for n in names)
        print(f"{f'equivalents {sizes} x{rot} rotations':<40}{w:>9.2f}{w / wall_sgd:>8.3f}"
              f"{err:>12.2e}{gap:>12.2e}")
    t0 = time.process_time()
    ex = limit_flow(model, FreeInit([wishart(1, 1), scalar(1)]), t)
    w = time.process_time() - t0
    err = max(ex.error[n].max() for n in names)
    print(f"{'commuting (S_2 = I), exact':<40}{w:>9.2f}{w / wall_sgd:>8.4f}{err:>12.2e}"
          f"{'-':>12}")


def flow_speed(quick: bool) -> None:
    """The fast tied flow against the plain full-matrix flow (two d x d products per
    step, full state), same DOP853 tolerances, Figure 4's matrices to t = 1."""
    from scipy.integrate import solve_ivp

    import attndyn
    from attndyn.numeric import gaussian_init
    from attndyn.numeric.attention.tied.flow import tied_fast_flow
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
    table_subordination(quick)
    print()
    check_cost(quick)
    print()
    flow_speed(quick)
    print()
    limit_vs_sgd(quick)


if __name__ == "__main__":
    import sys
    main("--quick" in sys.argv)
