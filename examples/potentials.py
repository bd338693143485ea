"""Gaussian-equivalent potentials: a tour of the routes
====================================================

Gaussian-equivalent potentials of paper 003: a tour of the routes.

Run:  python examples/potentials.py   (about half a minute, most of it compiling)

1. h2 teacher-student (tied): Phi and Gamma are polynomials in q (Wick).
2. ReLU and erf: closed forms (arc-cosine / arcsine kernels), Gamma by Price.
3. Untied, eq. (48): the cross gradient at an uninformative state; the paper's value is
   the total derivative, each entry of the symmetric convention is half of it.
4. tanh: no closed form -> compiled quadrature; and a truncated Mehler series with its bound.
5. Softmax attention, L = 2 (Figure 1): numeric potential with its error, driving a
   truncated tied hierarchy.
6. Matrix denoising, eq. (67), through the untied law.
7. Two-layer attention (appendix B.1): the potential from the effective bilinear forms vs
   the network's loss averaged over Gaussian inputs at d = 150.
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.symbolic.hermite import mehler_numeric
from attndyn.symbolic.losses import (denoising_order_parameters, matrix_denoising,
                                     mse_teacher_student, softmax_teacher_student,
                                     two_layer_attention)
# the numeric layer's functions build the numeric (quadrature) route as well
from attndyn.numeric.attention.potentials import tied_potential, untied_potential


def section(title):
    print(f"\n== {title} ==")


def main():
    q = np.array([[0.9, 0.3], [0.3, 0.7]])

    section("1. h2 teacher-student, tied, L = 1 (Wick)")
    pot = tied_potential(mse_teacher_student("h2"), 2)
    print(pot.text())

    section("2. ReLU and erf (closed forms)")
    for act in ("relu", "erf"):
        pot = tied_potential(mse_teacher_student(act), 2)
        print(pot.text())
        print(f"Gamma at q = {q.tolist()}:\n{pot.gamma_numeric(q)}")

    section("3. untied, eq. (48): Price at an uninformative state")
    for act in ("h2", "relu"):
        route = "auto" if act == "h2" else "hermite"
        pot = untied_potential(mse_teacher_student(act), 2, route=route, order=4)
        out = pot.evaluate(m=[0.6, 0.5], q1=[[0.9, 0], [0, 0.7]], q2=[[0.2, 0], [0, 0.3]])
        print(f"{act}: route {pot.route}; dPhi/dq1_12 = {out['q1'][0, 1]:+.6f} (symmetric "
              f"convention), total derivative {2 * out['q1'][0, 1]:+.6f} = -E[s'(Z1)]E[s*'(Z2)]")

    section("4. tanh: compiled quadrature and a truncated Mehler series")
    pot = tied_potential(mse_teacher_student("tanh"), 2, tol=1e-10)
    g, err = pot.gamma_with_error(q)
    print(pot.describe())
    print(f"Gamma_12 = {g[0, 1]:+.12f} (error estimate {err[0, 1]:.1e})")
    # Gamma_12 = -E[tanh'(G1) tanh'(G2)], Var G_k = 2 q_kk, Cov = 2 q_12
    dt = lambda t: 1 / np.cosh(t) ** 2
    for order in (4, 8, 16):
        val, bound = mehler_numeric(dt, dt, 2 * q[0, 0], 2 * q[1, 1], 2 * q[0, 1], order)
        print(f"  Mehler order {order:2d}: {-val:+.12f}  bound {bound:.1e}  "
              f"(actual {abs(-val - g[0, 1]):.1e})")

    section("5. softmax attention, L = 2 (Figure 1): numeric potential")
    import attndyn
    loss = softmax_teacher_student(2)
    pot = tied_potential(loss, 2, 2, tol=1e-6)
    print(pot.describe())
    for note in pot.notes:
        print("  note:", note)
    g, err = pot.gamma_with_error(q)
    print(f"Gamma =\n{g}\nerror estimate =\n{err}")
    model = attndyn.TiedModel(2, [0], loss, L=2, potential=pot)
    d = 60
    rng = np.random.default_rng(0)
    W1 = rng.standard_normal((d, d // 2)) / np.sqrt(d)
    W2 = rng.standard_normal((d, d // 2)) / np.sqrt(d)
    res = model.hierarchy(6).integrate([W1 @ W1.T, W2 @ W2.T], np.linspace(0, 0.04, 5), check=8)
    print(res.message)
    print("q_12(t) =", np.round(res.moment((0, 1)), 5))

    section("6. matrix denoising, eq. (67)")
    loss = matrix_denoising("(a - 1)**2/2")
    pot = untied_potential(loss, 1)
    print(pot.text())
    d = 50
    A = rng.standard_normal((d, d))
    S_star = (A + A.T) / np.sqrt(2 * d)          # spectrum O(1): Tr[S*^2]/d ~ 1
    S = 0.9 * S_star + 0.1 * np.eye(d)
    par = denoising_order_parameters(S, S_star)
    print(f"m = Tr[S*S]/d = {par['m'][0]:.4f}, Var = 2||S||^2/d^3 = {2 * par['q1'][0, 0]:.2e}, "
          f"Phi = {pot.evaluate(**par)['phi']:.6f}")

    section("7. two-layer attention (appendix B.1), L = 2, one head")
    ex = two_layer_attention(1)
    Kh = ex.extra["forms_per_network"]
    K = 2 * Kh
    pot = untied_potential(ex, K, 2, tol=3e-3, seed=1)
    print(pot.describe())
    d = 150
    rng = np.random.default_rng(5)
    nets = []
    for scale in (1.0, 0.8):
        S0 = [scale * rng.standard_normal((d, d)) / np.sqrt(d)]
        V0 = [0.5 * rng.standard_normal((d, d)) / np.sqrt(d)]
        S1 = rng.standard_normal((d, d)) / np.sqrt(d)
        nets.append((S0, V0, S1))
    mats = ex.extra["effective_matrices"](*nets[0]) + ex.extra["effective_matrices"](*nets[1])
    m = np.array([np.trace(M) / np.sqrt(d) for M in mats])
    q1 = np.array([[np.sum(A * B) / d for B in mats] for A in mats])
    q2 = np.array([[np.sum(A * B.T) / d for B in mats] for A in mats])
    phi = pot.phi_at(m=m, q1=(q1 + q1.T) / 2, q2=(q2 + q2.T) / 2)
    N = 4000
    vals = np.empty(N)
    fwd = ex.extra["forward"]
    for n in range(N):
        X0 = rng.standard_normal((2, d))
        ys = fwd(X0, *nets[0])
        yt = fwd(X0, *nets[1])
        vals[n] = 0.5 * np.sum((ys - yt) ** 2)
    print(f"Phi(m, q1, q2) = {phi:.4f} (quadrature error {pot.error:.1e}); "
          f"network loss at d = {d}: {vals.mean():.4f} +- {vals.std() / math.sqrt(N):.4f} "
          "(Theorem 1: equal as d -> infinity)")


if __name__ == "__main__":
    main()
