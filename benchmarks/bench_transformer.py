"""Forward plus gradient of paper 000's transformer against the BLAS floor.

(Clock: process CPU time, one thread, as every benchmark here: benchmarks/run.py.)

``Transformer.loss_and_grad`` (forward pass of eq. 1 and the reverse-mode
gradient of every U_nu, W_nu) at n = 256, L = 16, d = 64, m = 256, N = 2,
against the same matrix products done by numpy on preallocated arrays
(``np.matmul(..., out=...)``): per layer the 5 forward and 10 backward GEMMs
(four ``(nL, d) x (d, m)``-sized, the rest ``(nL, d) x (d, d)`` or batched
``(L, d) x (d, L)`` / ``(L, L) x (L, d)``). The floor leaves out every
elementwise operation (softmax, ReLU, masks), so the ratio is an upper bound
on what any reimplementation (numba included) could gain. Target: <= 3.

Times are minima over interleaved repeats; the machine load (1-minute load
average and cores) is printed with the table.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np


def _best(fn, repeats):
    best = math.inf
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _gemm_floor(n, L, d, m, N, rng):
    nl = n * L
    Lam = rng.standard_normal((n, L, d))
    Lam2 = Lam.reshape(nl, d)
    U = rng.standard_normal((d, d))
    W = rng.standard_normal((d, m))
    A = rng.standard_normal((m, d))
    P = rng.random((n, L, L))
    buf = {k: np.empty(s) for k, s in {
        "LU": (n, L, d), "S": (n, L, L), "O": (n, L, d), "Z": (nl, m), "mu": (nl, d),
        "dZ": (nl, m), "dW": (d, m), "dO": (nl, d), "dP": (n, L, L), "T1": (n, L, d),
        "dU": (d, d), "T2": (n, L, d), "Gp": (n, L, d), "G1": (nl, d), "G2": (nl, d)}.items()}
    G = rng.standard_normal((nl, d))
    LamT = Lam.transpose(0, 2, 1)

    def run():
        for _ in range(N):
            np.matmul(Lam, U, out=buf["LU"])
            np.matmul(buf["LU"], LamT, out=buf["S"])
            np.matmul(P, Lam, out=buf["O"])
            np.matmul(buf["O"].reshape(nl, d), W, out=buf["Z"])
            np.matmul(buf["Z"], A, out=buf["mu"])
        for _ in range(N):
            np.matmul(G, A.T, out=buf["dZ"])
            np.matmul(buf["O"].reshape(nl, d).T, buf["dZ"], out=buf["dW"])
            np.matmul(buf["dZ"], W.T, out=buf["dO"])
            np.matmul(buf["dO"].reshape(n, L, d), LamT, out=buf["dP"])
            np.matmul(buf["dP"], Lam, out=buf["T1"])
            np.matmul(Lam2.T, buf["T1"].reshape(nl, d), out=buf["dU"])
            np.matmul(buf["dP"].transpose(0, 2, 1), Lam, out=buf["T2"])
            np.matmul(P.transpose(0, 2, 1), buf["dO"].reshape(n, L, d), out=buf["Gp"])
            np.matmul(buf["T1"].reshape(nl, d), U.T, out=buf["G1"])
            np.matmul(buf["T2"].reshape(nl, d), U, out=buf["G2"])
    return run


def main(quick: bool = False) -> None:
    from attndyn.numeric.transformer import Transformer
    from attndyn.numeric.transformer.data import rms_normalise

    n, L, d, m, N = (64, 16, 32, 128, 2) if quick else (256, 16, 64, 256, 2)
    repeats = 3 if quick else 7
    rng = np.random.default_rng(0)
    model = Transformer(N, L, d, m, eps=1.0, omega=1.0, kappa=1 / math.sqrt(m), seed=1)
    X = rms_normalise(rng.standard_normal((n, L, d)))
    Y = rng.standard_normal((n, L, d))
    ref = _gemm_floor(n, L, d, m, N, rng)
    ours = lambda: model.loss_and_grad(X, Y)  # noqa: E731
    ours()
    ref()
    t_ours, t_ref = math.inf, math.inf
    for _ in range(repeats):
        t_ours = min(t_ours, _best(ours, 1))
        t_ref = min(t_ref, _best(ref, 1))
    flops = 2 * N * (n * L * (d * d + 4 * d * m) + n * L * L * d * 4 + n * L * d * d * 3
                     + n * L * L * d * 3)
    load = os.getloadavg()[0]
    print(f"transformer forward+gradient, n={n} L={L} d={d} m={m} N={N}; "
          f"load average {load:.2f} on {os.cpu_count()} cores; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"{'case':<36s}{'time [ms]':>12s}{'GFLOP/s':>10s}{'ratio':>8s}")
    print(f"{'numpy GEMMs only (BLAS floor)':<36s}{1e3 * t_ref:12.2f}{flops / t_ref / 1e9:10.2f}"
          f"{1.0:8.2f}")
    print(f"{'Transformer.loss_and_grad':<36s}{1e3 * t_ours:12.2f}"
          f"{flops / t_ours / 1e9:10.2f}{t_ours / t_ref:8.2f}   (target <= 3)")


if __name__ == "__main__":
    main()
