"""Untied slow hierarchy (eqs. 31-32) against the tied one: cost per stored term.

(Clock: process CPU time, one thread, as every benchmark here: benchmarks/run.py.)

K = 2 (student 0 trainable, teacher 1 fixed). For the untied model (MSE, h2
student and teacher, pairs of d = 24 Gaussian factors) at orders 5-8 and the
tied model ((G_1 - G_2)^2, free Wishart start) at orders 14-22, it prints
moments, stored terms, the structure builder's time per term (both built from
scratch: ``untied_structure`` and ``tied_structure``), and the compiled
integration time per (function evaluation x stored term), the untied fast
phase and initial moments excluded, then the untied / tied ratios at the
largest sizes, measured in this same process. Both run the same generic RHS
kernel and Dormand-Prince integrator; the untied coefficient function adds a
warm-started Newton solve for ``m*(q)`` per evaluation.

Target (issue 8): the untied hierarchy builds and integrates at the tied
hierarchy's speed per stored term (ratio about 1).
"""

from __future__ import annotations

import time

import numpy as np


def _row(label, M, h, build, integ, nfev):
    per = integ / max(nfev * h.n_terms, 1) * 1e9
    print(f"{label:>7} {M:5d} {h.n_moments:9d} {h.n_terms:10d} {build / h.n_terms * 1e9:9.1f} "
          f"{per:9.3f} {nfev:6d}")
    return build / h.n_terms, per


def main(quick: bool = False) -> None:
    import attndyn
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    from attndyn.symbolic.hierarchy import tied_structure
    from attndyn.symbolic.losses import mse_teacher_student

    un = attndyn.UntiedModel(2, [0], mse_teacher_student("h2"), weight_decay=1.0)
    pairs = gaussian_init(un, 24, seed=0, scale=[0.6, 0.8])
    tied = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=8.0)
    tinit = FreeInit([wishart(0.5, 0.5), scalar(1)])
    un.hierarchy(3).integrate(pairs, [0, 0.001], check=None)  # compile / load caches
    tied.hierarchy(4).integrate(tinit, [0, 0.01], check=None)
    hdr = (f"{'model':>7} {'order':>5} {'moments':>9} {'terms':>10} {'build ns':>9} "
           f"{'ns/term':>9} {'nfev':>6}")
    print("build ns = build time per stored term; ns/term = integration time per "
          "(function evaluation x stored term)")
    print(hdr)
    print("-" * len(hdr))
    u_orders = (5, 6, 7) if quick else (5, 6, 7, 8)
    t_orders = (14, 16, 18) if quick else (14, 16, 18, 20, 22)
    ub, ui, tb, ti = [], [], [], []
    for M in u_orders:
        t0 = time.process_time()
        from attndyn.numeric.attention.untied.hierarchy import UntiedHierarchy
        h = UntiedHierarchy(un, M)
        build = time.process_time() - t0
        st = h.moments_from_matrices(pairs)
        m_star = h.root(st, warn=False).m  # the fast phase (scipy) is not timed
        t_eval = np.array([0.0, 0.02])
        integ = np.inf
        for _ in range(3):  # best of 3: the machines are shared
            t0 = time.process_time()
            _, info, _, _ = h._run(st.mu, m_star, t_eval, 1e-12, 1e-14, 10**6, 1e100, np.inf,
                                   1e-12)
            integ = min(integ, time.process_time() - t0)
        b, i = _row("untied", M, h, build, integ, int(info[3]))
        ub.append(b)
        ui.append(i)
    for M in t_orders:
        t0 = time.process_time()
        tied_structure(2, (0,), M)  # the builder itself (tied.hierarchy may load a disk cache)
        build = time.process_time() - t0
        h = tied.hierarchy(M)
        y = h.initial_state(tinit)
        integ = np.inf
        for _ in range(3):
            t0 = time.process_time()
            _, info, _ = h._run(y, np.array([0.0, 0.2]), 1e-8, 1e-10, 10**6, 1e100, np.inf,
                                integrator="dopri5")  # the same integrator as untied
            integ = min(integ, time.process_time() - t0)
        b, i = _row("tied", M, h, build, integ, int(info[3]))
        tb.append(b)
        ti.append(i)
    print(f"untied / tied, largest sizes: build per term {ub[-1] / tb[-1]:.2f}, "
          f"integration per term {ui[-1] / ti[-1]:.2f}")


if __name__ == "__main__":
    main()
