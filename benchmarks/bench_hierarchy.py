"""Tied hierarchy at high order: build time, RHS cost per term, integration time.

For K = 2 (student 0 trainable, teacher 1 fixed), loss (G_1 - G_2)^2 and
orders 8, 12, 16, 20, 22, it prints the number of moments and stored terms,
the build time of the structure arrays, the right-hand-side time per stored
term with its ratio to the time one term's bytes take at the memory-read
bandwidth measured in this same run, and the integration time to t = 1.

Targets (issue 2): order 20 builds in under 5 s; at most 3 ns per term at
order 20.
"""

from __future__ import annotations

import time

import numpy as np


def _read_bandwidth() -> float:
    """Bytes per second of a streaming read (numpy sum over 256 MiB), best of 5."""
    a = np.ones(32 * 2 ** 20)
    a.sum()
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t)
    return a.nbytes / best


def main(quick: bool = False) -> None:
    import attndyn
    from attndyn.kernels.rhs import sparse_rhs
    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    orders = (8, 12, 16) if quick else (8, 12, 16, 20, 22)
    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, weight_decay=8.0)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    model.hierarchy(4).integrate(init, [0, 0.1], check=None)  # compile / load caches
    bw = _read_bandwidth()
    # bytes streamed per stored term: src int32 + ent int16 + coef int16
    bytes_per_term = 4 + 2 + 2
    ideal_ns = bytes_per_term / bw * 1e9
    print(f"memory read bandwidth (numpy sum, same run): {bw / 1e9:.1f} GB/s -> "
          f"{ideal_ns:.3f} ns per {bytes_per_term}-byte term")
    hdr = (f"{'order':>5} {'moments':>9} {'terms':>10} {'build s':>8} {'ns/term':>8} "
           f"{'x bw':>6} {'integr. s':>10} {'steps':>6}")
    print(hdr)
    print("-" * len(hdr))
    for M in orders:
        model._hier.pop(M, None)
        t0 = time.perf_counter()
        h = model.hierarchy(M)
        build = time.perf_counter() - t0
        s = h._system
        y = h.initial_state(init)
        dy = np.empty_like(y)
        xb, go, g = np.empty(4), np.empty(4), np.empty(5)
        args = (y, s.gfun, s.gparams, s.gather, s.consts, s.indptr, s.src, s.ent, s.coef, xb, go, g, dy)
        sparse_rhs(*args)
        reps = max(3, int(2e7 // max(h.n_terms, 1)))
        best = np.inf
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                sparse_rhs(*args)
            best = min(best, (time.perf_counter() - t0) / reps)
        ns = best / h.n_terms * 1e9
        t0 = time.perf_counter()
        res = h.integrate(y, [0.0, 1.0], check=None, rtol=1e-8, atol=1e-10)
        integ = time.perf_counter() - t0
        print(f"{M:5d} {h.n_moments:9d} {h.n_terms:10d} {build:8.2f} {ns:8.2f} {ns / ideal_ns:6.2f} "
              f"{integ:10.3f} {res.diagnostics['steps']:6d}" + ("" if res.success else "  " + res.message))


if __name__ == "__main__":
    main()
