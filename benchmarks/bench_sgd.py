"""SGD kernel speed against references measured in the same process.

(Clock: process CPU time, one thread, as every benchmark here: benchmarks/run.py.)

1. One tied SGD step (L = 1, K = 2: one student, one teacher, d_k = d) against
   the three ``B x d x d`` products it needs (student and teacher
   pre-activations ``X @ W_k``, student gradient ``X^T @ Y``) done by numpy on
   preallocated arrays. Target: ratio <= 1.3 at d = 400, B = 512.
2. The same step at d = 50, B = 64 against two numpy implementations of the
   same update: the straightforward loop (a Python iteration per step and per
   sample: numpy sample, pre-activations, lambdified loss gradient, outer-product
   gradient; target: speed-up >= 3), and a loop vectorised over the batch
   (a Python iteration per step only, the same three products through numpy),
   shown for information: both spend most of their time in the same BLAS
   products, so the kernel can only save the Python and sampling overhead.
3. For information: the untied and direct-S steps against their own products.

Times are the minimum over interleaved repeats (the machines are shared).
The kernels run with numba threads = 1 (the default of ``attndyn.sgd``) and,
for the d = 400 tied step, also with all numba threads; BLAS threads follow
``OPENBLAS_NUM_THREADS`` for the kernel and the references alike.
"""

from __future__ import annotations

import math
import time

import numpy as np


def _best(fn, repeats, inner):
    best = math.inf
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, (time.process_time() - t0) / inner)
    return best


def _interleaved(fa, fb, repeats, inner_a, inner_b):
    ba, bb = math.inf, math.inf
    fa()
    fb()
    for _ in range(repeats):
        ba = min(ba, _best(fa, 1, inner_a))
        bb = min(bb, _best(fb, 1, inner_b))
    return ba, bb


def _setup(kind, d, B):
    import sympy as sp
    import attndyn
    from attndyn.kernels import sgd as K
    from attndyn.numeric.attention.training import _cov_factor, compiled_loss, gaussian_init

    loss = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731
    model = {"tied": attndyn.TiedModel, "untied": attndyn.UntiedModel,
             "s": attndyn.SModel}[kind](2, [0], loss)
    init = gaussian_init(model, d, seed=0, scale=0.5)
    _, fn, lp = compiled_loss(model)
    C, F, ident = _cov_factor(model)
    state = K.seed_state(np.random.SeedSequence(0))
    info = np.zeros(2, dtype=np.int64)
    return model, init, fn, lp, C, F, ident, state, info, sp


def tied_kernel(d, B):
    from attndyn.kernels import sgd as K
    model, init, fn, lp, C, F, ident, state, info, _ = _setup("tied", d, B)
    W = np.ascontiguousarray(np.hstack(init))
    col = np.array([0, d, 2 * d], dtype=np.int64)
    kidx = np.array([0, 1], dtype=np.int64)
    eta = 0.02 * B / d
    ws = K.workspace(B, 1, d, 2 * d, d)

    def run(n):
        losses = np.empty(n)
        K.tied_steps(W, col, kidx, 1, C, F, ident, eta, 0.0, B, n, fn, lp, state, 1e6, losses,
                     info, *ws)
    return run


def products(d, B, n_prod=3):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((B, d))
    W1 = rng.standard_normal((d, d)) / math.sqrt(d)
    W2 = rng.standard_normal((d, d)) / math.sqrt(d)
    Y = rng.standard_normal((B, d))
    P1 = np.empty((B, d))
    P2 = np.empty((B, d))
    Gr = np.empty((d, d))

    def run():
        np.dot(X, W1, out=P1)
        np.dot(X, W2, out=P2)
        if n_prod >= 3:
            np.dot(X.T, Y, out=Gr)
    return run


def _lambdified():
    import sympy as sp
    from attndyn.symbolic.lossgrad import loss_gradient
    lg = loss_gradient(lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, 2, 1)
    return sp.lambdify(list(lg.symbols), list(lg.grad) + [lg.expr], "numpy")


def numpy_sample_loop(d, B):
    """The straightforward numpy transcription of eq. (7): per step, per sample."""
    f = _lambdified()
    rng = np.random.default_rng(0)
    W1 = rng.standard_normal((d, d)) * 0.5 / math.sqrt(d)
    W2 = rng.standard_normal((d, d)) * 0.5 / math.sqrt(d)
    eta = 0.02 * B / d
    sqd = math.sqrt(d)

    def run(n):
        nonlocal W1
        for _ in range(n):
            tr1 = np.sum(W1 * W1)
            tr2 = np.sum(W2 * W2)
            grad = np.zeros_like(W1)
            for _s in range(B):
                x = rng.standard_normal(d)
                p1 = W1.T @ x
                p2 = W2.T @ x
                g1 = (p1 @ p1 - tr1) / sqd
                g2 = (p2 @ p2 - tr2) / sqd
                dl1, _, _ = f(g1, g2)
                grad += 2.0 * dl1 * (np.outer(x, p1) - W1) / sqd
            W1 = W1 - eta * grad / B
    return run


def numpy_loop(d, B):
    """The same tied step vectorised over the batch (a Python loop over steps)."""
    f = _lambdified()
    rng = np.random.default_rng(0)
    W1 = rng.standard_normal((d, d)) * 0.5 / math.sqrt(d)
    W2 = rng.standard_normal((d, d)) * 0.5 / math.sqrt(d)
    eta = 0.02 * B / d
    sqd = math.sqrt(d)

    def run(n):
        nonlocal W1
        for _ in range(n):
            X = rng.standard_normal((B, d))
            P1 = X @ W1
            P2 = X @ W2
            G1 = (np.einsum("bi,bi->b", P1, P1) - np.sum(W1 * W1)) / sqd
            G2 = (np.einsum("bi,bi->b", P2, P2) - np.sum(W2 * W2)) / sqd
            d1, d2, val = f(G1, G2)
            d1 = np.broadcast_to(d1, G1.shape)
            grad = (X.T @ (2.0 * d1[:, None] * P1)) / (B * sqd) - 2.0 * d1.mean() / sqd * W1
            W1 = W1 - eta * grad
    return run


def other_kernel(kind, d, B):
    from attndyn.kernels import sgd as K
    model, init, fn, lp, C, F, ident, state, info, _ = _setup(kind, d, B)
    eta = 0.02 * B / d
    if kind == "untied":
        (U1, V1), (U2, V2) = init
        W = np.ascontiguousarray(np.hstack([U1, V1, U2, V2]))
        uoff = np.array([0, 2 * d], dtype=np.int64)
        voff = np.array([d, 3 * d], dtype=np.int64)
        width = np.array([d, d], dtype=np.int64)
        kidx = np.array([0, 1], dtype=np.int64)
        ws = K.workspace(B, 1, d, 4 * d, 2 * d)

        def run(n):
            K.untied_steps(W, uoff, voff, width, kidx, 1, C, F, ident, eta, 0.0, B, n, fn, lp,
                           state, 1e6, np.empty(n), info, *ws)
        # products: X @ [U1 V1 U2 V2] (4 B d d) and X^T @ [Y_U Y_V] (2 B d d)
        return run, 6
    S = np.ascontiguousarray(np.hstack(init))
    kidx = np.array([0, 1], dtype=np.int64)
    ws = K.workspace(B, 1, d, 2 * d, d)

    def run(n):
        K.s_steps(S, kidx, 1, C, F, ident, eta, 0.0, B, n, fn, lp, state, 1e6, np.empty(n), info,
                  *ws)
    return run, 3


def _threads(n, fn):
    import numba

    def run():
        old = numba.get_num_threads()
        numba.set_num_threads(n)
        try:
            fn()
        finally:
            numba.set_num_threads(old)
    return run


def main(quick: bool = False) -> None:
    import os

    import numba
    rep = 3 if quick else 7
    rows = []
    d, B = (200, 256) if quick else (400, 512)
    nmax = numba.config.NUMBA_NUM_THREADS
    print(f"numba threads available: {nmax}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset: all cores)')}")
    k = tied_kernel(d, B)
    ref = products(d, B)
    tk, tr = _interleaved(_threads(1, lambda: k(4)), ref, rep, 4, 1)
    rows.append((f"tied step d={d} B={B}", tk, "3 numpy BxdXd products", tr, tk / tr, "<= 1.3"))
    if nmax > 1:
        tk1, tr1 = _interleaved(_threads(nmax, lambda: k(4)), ref, rep, 4, 1)
        rows.append((f"  same, {nmax} numba threads", tk1, "3 numpy BxdXd products", tr1,
                     tk1 / tr1, "(info)"))
    d2, B2 = 50, 64
    k2 = tied_kernel(d2, B2)
    ns = numpy_sample_loop(d2, B2)
    tk2, tn2 = _interleaved(_threads(1, lambda: k2(200)), lambda: ns(5), rep, 200, 5)
    rows.append((f"tied step d={d2} B={B2}", tk2, "numpy loop (per sample)", tn2, tn2 / tk2,
                 ">= 3 (speed-up)"))
    nl = numpy_loop(d2, B2)
    tk2b, tn2b = _interleaved(_threads(1, lambda: k2(200)), lambda: nl(200), rep, 200, 200)
    rows.append((f"tied step d={d2} B={B2}", tk2b, "numpy loop (vectorised)", tn2b,
                 tn2b / tk2b, "(info, speed-up)"))
    for kind in ("untied", "s"):
        run, n_prod = other_kernel(kind, d, B)
        ref6 = products(d, B)
        tk3, tr3 = _interleaved(_threads(1, lambda: run(4)), ref6, rep, 4, 1)
        tr3 = tr3 * n_prod / 3.0
        rows.append((f"{kind} step d={d} B={B}", tk3, f"{n_prod} numpy BxdXd products", tr3,
                     tk3 / tr3, "(info)"))
    print(f"{'case':<26}{'time/step':>12}  {'reference':<26}{'ref time':>12}{'ratio':>9}  target")
    for name, a, rname, b, ratio, target in rows:
        print(f"{name:<26}{a * 1e3:>10.3f}ms  {rname:<26}{b * 1e3:>10.3f}ms{ratio:>9.2f}  {target}")


if __name__ == "__main__":
    import sys
    main(quick="--quick" in sys.argv)
