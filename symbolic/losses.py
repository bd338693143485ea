"""Loss library: ``loss(G) -> SymPy expression`` with ``G`` the ``L x L x K`` array.

Every loss is a :class:`Loss`, a callable with a readable name and the
paper's equations in its docstring:

- :func:`mse_teacher_student`: ``(1/2) sum_ij (sigma(G_ij,s) - sigma*(G_ij,t))^2``,
  paper 003 eq. (22) with ``F`` elementwise, and for ``L = 1`` the loss of
  eq. (48) and Figures 2-3. **Normalisation: the paper's 1/2.** (The D.3
  example ``(G_1 - G_2)^2`` of MATH.md has no 1/2; write it as a raw expression.)
- Hermite activations ``h_k = He_k / sqrt(k!)`` (Figure 2): names ``"h1", "h2", ...``
  (:mod:`.activations`);
- :func:`softmax_teacher_student`: row-softmax attention scores of ``L`` tokens,
  MSE between student and teacher (Figure 1 uses ``L = 2``);
- :func:`matrix_denoising`: the extensive-rank denoising loss of eq. (67),
  a single Gaussian argument ``Tr[Y S]/d``;
- :func:`two_layer_attention`: the multi-layer multi-head example of appendix
  B.1 (eqs. 50-53) for two layers, written through the effective bilinear
  forms ``X0 S~ X0^T / sqrt(d)``;
- :func:`autoregressive` (B.2, eqs. 54-58), :func:`multiple_location` (B.3,
  eqs. 59-61) and :func:`multi_step_reasoning` (B.4, eqs. 62-65): the other
  examples of appendix B, each with the network itself in ``extra["forward"]``
  and its effective matrices (order parameters: :func:`bilinear_order_parameters`).

:func:`loss_from_spec` parses the command-line specs ``"mse:h2,h2"``,
``"mse:relu"``, ``"softmax"``, ``"softmax:L=2,beta=1"``, ``"denoising"``,
``"denoising:ell=(a-1)**2/2"``, ``"attention2:heads=1"``, ``"autoregressive:heads=1"``,
``"multilocation:act=tanh"``, ``"reasoning"`` or a raw expression in ``G`` such as
``"(G[0,0,0]-G[0,0,1])**2"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike, NDArray

from .activations import activation, hermite_activation
from .symbols import Activation
from .parse import (check_numbers, as_sympy, parse_expression, parse_float,
                    parse_int, parse_loss)

# the L x L x K array of pre-activation symbols a loss reads (a numpy object array or a
# LossArray); SymPy expressions and matrices, Any to the checker (SymPy ships no types)
_GArray = Any
_Expr = Any
__all__ = ["Loss", "mse_teacher_student", "softmax_teacher_student", "matrix_denoising",
           "denoising_order_parameters", "two_layer_attention", "TwoLayerAttention",
           "hermite_activation", "loss_from_spec", "row_softmax", "autoregressive",
           "multiple_location", "multi_step_reasoning", "bilinear_order_parameters"]


@dataclass(frozen=True, eq=False)
class Loss:
    """A named loss ``loss(G)``; ``min_K`` and ``L`` (None = any) constrain the array.

        >>> from attndyn.symbolic.symbols import g_array
        >>> loss = Loss("square", lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, min_K=2, L=1)
        >>> loss.fn(g_array(1, 2))
        (G_000 - G_001)**2
        >>> mse_teacher_student("h1").name
        'mse:h1,h1'
    """

    name: str
    fn: Callable
    description: str = ""
    min_K: int = 1
    L: int | None = None
    params: tuple = ()
    extra: dict = field(default_factory=dict)

    def __call__(self, G: _GArray) -> _Expr:
        shape = G.shape
        if len(shape) != 3 or shape[0] != shape[1]:
            raise ValueError(f"{self.name}: G must be an L x L x K array, got shape {shape}")
        if self.L is not None and shape[0] != self.L:
            raise ValueError(f"{self.name}: needs L = {self.L} tokens, got L = {shape[0]}")
        if shape[2] < self.min_K:
            raise ValueError(f"{self.name}: needs K >= {self.min_K} indices, got K = {shape[2]}")
        return self.fn(G)

    def __repr__(self) -> str:
        return f"Loss({self.name!r})"


def _check_index(k: object, name: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"{name} must be an int >= 0, got {k!r}")
    return int(k)


def mse_teacher_student(student: str | Activation = "h2", teacher: str | Activation | None = None,
                        *, student_index: int = 0, teacher_index: int = 1,
                        scale: _Expr | float | str = sp.Rational(1, 2)) -> Loss:
    """MSE teacher-student loss ``scale * sum_ij (sigma(G_ij,s) - sigma*(G_ij,t))^2``.

    Paper 003: eq. (22) (``F`` applied entrywise), eq. (48) and Figures 2-3 for
    ``L = 1``: ``L(z1, z2) = (1/2)(sigma(z1) - sigma*(z2))^2``; ``scale`` is the
    paper's 1/2 by default. ``student``/``teacher`` are activation names or
    :class:`~attndyn.symbolic.activations.Activation` objects (teacher defaults
    to the student's activation).

        >>> from attndyn.symbolic.symbols import g_array
        >>> loss = mse_teacher_student("h2")
        >>> loss
        Loss('mse:h2,h2')
        >>> loss.fn(g_array(1, 2))
        (sqrt(2)*G_000**2/2 - sqrt(2)*G_001**2/2)**2/2
    """
    s = activation(student, "student")
    t = s if teacher is None else activation(teacher, "teacher")
    ks = _check_index(student_index, "student_index")
    kt = _check_index(teacher_index, "teacher_index")
    if ks == kt:
        raise ValueError("student_index and teacher_index must differ")
    coef = _coefficient(scale, "scale")

    def fn(G: _GArray) -> _Expr:
        L = G.shape[0]
        return coef * sum((s(G[i, j, ks]) - t(G[i, j, kt])) ** 2
                           for i in range(L) for j in range(L))
    return Loss(f"mse:{s.name},{t.name}", fn,
                f"{coef} * sum_ij ({s.name}(G_ij{ks}) - {t.name}(G_ij{kt}))^2 (paper 003, eqs. 22, 48)",
                min_K=max(ks, kt) + 1, extra={"student": s, "teacher": t})


def row_softmax(M: Sequence[Sequence[_Expr]], beta: _Expr | float = 1) -> list[list[_Expr]]:
    """Row-wise softmax of a SymPy ``L x L`` matrix (list of rows).

        >>> a, b = sp.symbols("a b")
        >>> R = row_softmax([[a, b], [b, a]])
        >>> sp.simplify(R[0][0] + R[0][1])
        1
        >>> R[0][0].subs({a: 0, b: 0})
        1/2
    """
    L = len(M)
    out = []
    for i in range(L):
        ex = [sp.exp(beta * M[i][j]) for j in range(L)]
        z = sp.Add(*ex)
        out.append([e / z for e in ex])
    return out


def softmax_teacher_student(L: int = 2, *, student_index: int = 0, teacher_index: int = 1,
                            beta: _Expr | float = 1) -> Loss:
    """Softmax attention teacher-student loss for ``L`` tokens (paper 003, Figure 1):

        (1/2) sum_ij (softmax(beta G_s)_ij - softmax(beta G_t)_ij)^2,

    the softmax taken over each row ``j`` of the ``L x L`` score matrix. No
    closed form: its potential goes by the numeric route.

        >>> from attndyn.symbolic.symbols import g_array
        >>> loss = softmax_teacher_student(L=2)
        >>> loss, loss.min_K
        (Loss('softmax:L=2'), 2)
        >>> G = g_array(2, 2)
        >>> loss.fn(G).subs({G[i, j, 1]: G[i, j, 0] for i in range(2) for j in range(2)})
        0
    """
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"L must be an int >= 1, got {L!r}")
    ks = _check_index(student_index, "student_index")
    kt = _check_index(teacher_index, "teacher_index")
    beta = _coefficient(beta, "beta")

    def fn(G: _GArray) -> _Expr:
        Ls = G.shape[0]
        S = row_softmax([[G[i, j, ks] for j in range(Ls)] for i in range(Ls)], beta)
        T = row_softmax([[G[i, j, kt] for j in range(Ls)] for i in range(Ls)], beta)
        return sp.Rational(1, 2) * sum((S[i][j] - T[i][j]) ** 2 for i in range(Ls) for j in range(Ls))
    return Loss(f"softmax:L={L}", fn, "(1/2)||softmax(G_s) - softmax(G_t)||_F^2, row softmax "
                "(paper 003, Figure 1)", min_K=max(ks, kt) + 1, L=int(L))


_A = sp.Symbol("a", real=True)


def matrix_denoising(ell: str | _Expr = "-a") -> Loss:
    """Extensive-rank matrix denoising (paper 003, appendix B.5, eq. 67).

    Observation ``Y = S* + Z`` with ``Z`` GOE; the objective ``ell(Tr[Y S]/d)``
    depends on a single Gaussian variable,
    ``Tr[Y S]/d = Tr[S* S]/d + sqrt(2) ||S||_F / d^(3/2) g``, exactly at any
    ``d``. As an attention-indexed model this is ``L = K = 1``:
    ``loss(G) = ell(G_000)`` under the untied law with ``m = Tr[S* S]/d`` and
    ``q1 = q2 = ||S||_F^2 / d^3`` (:func:`denoising_order_parameters`).
    ``ell`` is an expression in ``a``; the default ``-a`` is the data term of
    the least-squares objective ``||Y - S||_F^2 / (2d)``.

        >>> from attndyn.symbolic.symbols import g_array
        >>> loss = matrix_denoising()
        >>> loss, loss.L
        (Loss('denoising:ell=-a'), 1)
        >>> loss.fn(g_array(1, 1))
        -G_000
    """
    if isinstance(ell, str):
        # the safe parser of attndyn.symbolic.parse: never evaluated as Python
        e = parse_expression(ell, what="ell", symbols={"a": _A})
    else:
        e = as_sympy(ell, "ell")
        if not isinstance(e, sp.Expr):
            raise TypeError(f"ell must be a SymPy expression in a, got {type(ell).__name__}")
        check_numbers(e, "ell")
    extra = e.free_symbols - {_A}
    if extra:
        raise ValueError(f"ell may only use the symbol a, found {sorted(map(str, extra))}")
    if _A not in e.free_symbols:
        raise ValueError(f"ell must depend on a, got {e}")

    def fn(G: _GArray) -> _Expr:
        return e.xreplace({_A: G[0, 0, 0]})
    return Loss(f"denoising:ell={e}", fn, f"ell(Tr[YS]/d) with ell(a) = {e} (paper 003, eq. 67)",
                min_K=1, L=1, extra={"ell": e})


def denoising_order_parameters(S: ArrayLike, S_star: ArrayLike
                               ) -> dict[str, NDArray[np.float64]]:
    """Untied order parameters of eq. (67) for ``K = L = 1``: ``m = Tr[S* S]/d``,
    ``q1 = q2 = ||S||_F^2 / d^3`` (so that ``Var = 2||S||_F^2/d^3``).

        >>> S = np.eye(4)
        >>> op = denoising_order_parameters(S, 2 * S)
        >>> {k: np.round(v, 6).tolist() for k, v in op.items()}
        {'m': [2.0], 'q1': [[0.0625]], 'q2': [[0.0625]]}
    """
    S = np.asarray(S, dtype=float)
    S_star = np.asarray(S_star, dtype=float)
    d = S.shape[0]
    if S.shape != (d, d) or S_star.shape != (d, d):
        raise ValueError("S and S_star must be square matrices of the same size")
    v = float(np.sum(S * S)) / d ** 3
    return {"m": np.array([float(np.trace(S_star @ S)) / d]), "q1": np.array([[v]]),
            "q2": np.array([[v]])}


class TwoLayerAttention(Loss):
    """See :func:`two_layer_attention`.

        >>> loss = two_layer_attention(heads=1)
        >>> isinstance(loss, TwoLayerAttention), loss.min_K
        (True, 10)
    """


def two_layer_attention(heads: int = 1, output: str = "linear", L: int | None = None) -> Loss:
    """Two-layer multi-head attention teacher-student (paper 003, appendix B.1, eqs. 50-53).

    Network (rows of ``X`` are tokens, ``X0 ~ N(0, C (x) I_d)``)::

        X1 = X0 + sum_h softmax(X0 S0^(h) X0^T / sqrt d) X0 V0^(h)       (eq. 51)
        A2 = X1 S1 X1^T / sqrt d,      y = out(A2)

    with ``S0^(h) = K0^(h) Q0^(h)T``, ``S1 = K1 Q1^T``. Expanding ``A2`` (eq. 53)
    gives ``A2 = G_b + sum_i s_i G_ci + sum_j G_dj s_j^T + sum_ij s_i G_eij s_j^T``
    with ``s_h = softmax(G_ah)`` and the effective bilinear forms
    ``G_k = X0 S~_k X0^T / sqrt d`` of the matrices (per network, in this order)::

        a_h = S0^(h)                (H forms)
        b   = S1                    (1)
        c_i = V0^(i) S1             (H)
        d_j = S1 V0^(j)T            (H)
        e_ij = V0^(i) S1 V0^(j)T    (H^2)

    Student forms are ``0 .. Kh-1``, teacher forms ``Kh .. 2Kh-1``,
    ``Kh = 1 + 3H + H^2``; the loss is ``(1/2)||y_s - y_t||_F^2`` and ``out`` is
    ``"linear"`` or a row ``"softmax"``. The effective matrices are not
    centred or symmetric: use the untied (or general) law.
    :meth:`effective_matrices` and :meth:`forward` compute the matrices and the
    network itself from weights, to check the expansion at finite ``d``.

        >>> loss = two_layer_attention(heads=1)
        >>> loss, loss.L, loss.min_K
        (Loss('attention2:heads=1,output=linear'), None, 10)
    """
    if (isinstance(heads, bool) or not isinstance(heads, (int, np.integer))
            or not 1 <= heads <= MAX_HEADS):
        raise ValueError(f"heads must be an int in [1, {MAX_HEADS}], got {heads!r}")
    if output not in ("linear", "softmax"):
        raise ValueError(f"output must be 'linear' or 'softmax', got {output!r}")
    H = int(heads)
    Kh = 1 + 3 * H + H * H
    names = ([f"S0^({h})" for h in range(H)] + ["S1"] + [f"V0^({i}) S1" for i in range(H)]
             + [f"S1 V0^({j})T" for j in range(H)]
             + [f"V0^({i}) S1 V0^({j})T" for i in range(H) for j in range(H)])

    net_output, fn = _two_layer_loss(H, Kh, output)
    effective_matrices, forward = _two_layer_network(H, output)
    return TwoLayerAttention(
        f"attention2:heads={H},output={output}", fn,
        f"two-layer {H}-head attention teacher-student through {2 * Kh} effective bilinear "
        "forms (paper 003, appendix B.1)", min_K=2 * Kh, L=L,
        extra={"heads": H, "forms_per_network": Kh, "names": names, "output": output,
               "effective_matrices": effective_matrices, "forward": forward,
               "network_output": net_output})


def _two_layer_loss(H: int, Kh: int, output: str
                    ) -> tuple[Callable[[_GArray, int], _Expr], Callable[[_GArray], _Expr]]:
    """``(net_output, fn)`` of :func:`two_layer_attention`: the output ``A2`` (or its row
    softmax) of network ``net`` (0 student, 1 teacher) from the forms ``G`` (eq. 53), and
    the loss ``(1/2)||y_s - y_t||_F^2``."""

    def mat(G: _GArray, k: int) -> _Expr:
        Ls = G.shape[0]
        return sp.Matrix(Ls, Ls, lambda i, j: G[i, j, k])

    def net_output(G: _GArray, net: int) -> _Expr:
        base = net * Kh
        Ls = G.shape[0]
        sm = [sp.Matrix(row_softmax([[G[i, j, base + h] for j in range(Ls)] for i in range(Ls)]))
              for h in range(H)]
        A2 = mat(G, base + H)
        for i in range(H):
            A2 += sm[i] * mat(G, base + H + 1 + i)
        for j in range(H):
            A2 += mat(G, base + 2 * H + 1 + j) * sm[j].T
        for i in range(H):
            for j in range(H):
                A2 += sm[i] * mat(G, base + 3 * H + 1 + i * H + j) * sm[j].T
        if output == "softmax":
            A2 = sp.Matrix(row_softmax([[A2[i, j] for j in range(Ls)] for i in range(Ls)]))
        return A2

    def fn(G: _GArray) -> _Expr:
        ys = net_output(G, 0)
        yt = net_output(G, 1)
        return sp.Rational(1, 2) * sum((ys[i, j] - yt[i, j]) ** 2
                                       for i in range(ys.rows) for j in range(ys.cols))
    return net_output, fn


def _two_layer_network(H: int, output: str
                       ) -> tuple[Callable[..., list[np.ndarray]], Callable[..., np.ndarray]]:
    """``(effective_matrices, forward)`` of :func:`two_layer_attention`: the effective
    matrices of one network from its weights and the network computed directly."""

    def effective_matrices(S0: Sequence[ArrayLike], V0: Sequence[ArrayLike],
                           S1: ArrayLike) -> list[np.ndarray]:
        """The ``Kh`` effective matrices of one network from its weights
        (``S0``, ``V0``: lists of ``H`` d x d arrays; ``S1``: d x d)."""
        S0a = [np.asarray(a, dtype=float) for a in S0]
        V0a = [np.asarray(a, dtype=float) for a in V0]
        S1a = np.asarray(S1, dtype=float)
        if len(S0a) != H or len(V0a) != H:
            raise ValueError(f"S0 and V0 must hold {H} matrices each")
        out = list(S0a) + [S1a] + [V @ S1a for V in V0a] + [S1a @ V.T for V in V0a]
        out += [Vi @ S1a @ Vj.T for Vi in V0a for Vj in V0a]
        return out

    def forward(X0: ArrayLike, S0: Sequence[np.ndarray], V0: Sequence[np.ndarray],
                S1: np.ndarray) -> np.ndarray:
        """The network output ``y`` computed directly (eqs. 50-51), ``X0`` of shape (L, d)."""
        X0 = np.asarray(X0, dtype=float)
        d = X0.shape[1]

        def sm(A: np.ndarray) -> np.ndarray:
            A = A - A.max(axis=1, keepdims=True)
            e = np.exp(A)
            out: np.ndarray = e / e.sum(axis=1, keepdims=True)
            return out
        X1 = X0 + sum(sm(X0 @ S0[h] @ X0.T / np.sqrt(d)) @ X0 @ V0[h] for h in range(H))
        A2 = X1 @ S1 @ X1.T / np.sqrt(d)
        return sm(A2) if output == "softmax" else A2
    return effective_matrices, forward


# -- appendix B.2-B.4 (issue 18) --------------------------------------------------------------
#: Most context tokens of the appendix-B.2/B.4 examples and of B.3 (whose label enumerates
#: the gate patterns through a recursion over the L^2 pairs)
MAX_B_TOKENS = 6
MAX_B3_TOKENS = 3
MAX_B_HEADS = 4


def _check_small_int(v: object, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")
    return int(v)


def _sigmoid(z: _Expr) -> _Expr:
    return 1 / (1 + sp.exp(-z))


def _softmax_list(row: Sequence[_Expr], beta: _Expr | float = 1) -> list[_Expr]:
    """Softmax of a list of SymPy expressions (one row; :func:`row_softmax` is square)."""
    ex = [sp.exp(beta * v) for v in row]
    z = sp.Add(*ex)
    return [e / z for e in ex]


def bilinear_order_parameters(mats: Sequence[ArrayLike]) -> dict[str, NDArray[np.float64]]:
    """Untied order parameters of effective matrices ``M_k`` (``d x d``) for forms
    ``G_ijk = x_i^T M_k x_j / sqrt(d)``, ``x_i ~ N(0, I_d)`` independent:
    ``m_k = Tr M_k / sqrt(d)``, ``q1_kl = Tr(M_k M_l^T)/d``, ``q2_kl = Tr(M_k M_l)/d``,
    so ``E G_ijk = delta_ij m_k`` and
    ``Cov(G_ijk, G_i'j'l) = d_ii' d_jj' q1_kl + d_ij' d_ji' q2_kl`` exactly at any ``d``.

        >>> M = np.array([[1.0, 2.0], [0.0, 1.0]])
        >>> op = bilinear_order_parameters([M])
        >>> {k: np.round(v, 3).tolist() for k, v in op.items()}
        {'m': [1.414], 'q1': [[3.0]], 'q2': [[1.0]]}
    """
    M = [np.asarray(a, dtype=float) for a in mats]
    if not M or any(a.ndim != 2 or a.shape != M[0].shape or a.shape[0] != a.shape[1]
                    for a in M):
        raise ValueError("mats must be a non-empty list of square matrices of one size")
    d = M[0].shape[0]
    K = len(M)
    m = np.array([np.trace(a) / np.sqrt(d) for a in M])
    q1 = np.array([[np.sum(M[k] * M[l]) / d for l in range(K)] for k in range(K)])
    q2 = np.array([[np.sum(M[k] * M[l].T) / d for l in range(K)] for k in range(K)])
    return {"m": m, "q1": q1, "q2": q2}


def _pair_index(H2: int) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int]]:
    """(a, b) with a <= b over 2H value matrices -> position in the pair list."""
    pairs = [(a, b) for a in range(H2) for b in range(a, H2)]
    return pairs, {p: i for i, p in enumerate(pairs)}


def autoregressive(L: int = 2, heads: int = 1) -> Loss:
    """Autoregressive next-token prediction (paper 003, appendix B.2, eqs. 54-58).

    ``L`` context tokens ``x_1..x_L ~ N(0, I_d)`` (the paper's ``L - 1``; the
    query is the last one, ``x_L`` here). Student (eq. 54):
    ``xhat = sum_h sum_j alpha_jh V_h x_j`` with
    ``alpha_.h = softmax_j(x_L^T W_h x_j / sqrt d)``. Teacher (eqs. 55-56): the
    next token ``y = sum_h sum_j a_jh V*_h x_j`` with independent gates
    ``a_jh ~ Bernoulli(p_jh)``, ``p_jh = sigmoid(x_L^T M_h x_j / sqrt d)`` (our
    reading of eq. 56: the gate of token ``j`` reads the query against ``x_j``
    through the teacher's ``M_h``). Loss: ``||xhat - y||^2 / d`` (eq. 57; the
    ``1/d`` makes it ``O(1)``) averaged over the gates, a function of ``G``:

        (1/d) ||sum_j U_j x_j||^2 + (1/d) sum_jh p_jh (1 - p_jh) ||V*_h x_j||^2,
        U_j = sum_h (alpha_jh V_h - p_jh V*_h),

    whose pieces ``x_j^T V_a^T V_b x_j' / d`` are the forms of
    ``M_ab = V_a^T V_b / sqrt d``. Forms (``K = 2H + H(2H+1)``), in order:
    ``W_1..W_H`` (student scores), ``M_1..M_H`` (teacher gates), then ``M_ab`` for
    ``a <= b`` over ``(V_1..V_H, V*_1..V*_H)``. The ``M_ab`` are neither centred
    nor symmetric: the untied law. ``extra``: ``effective_matrices(W, M, V, Vs)``,
    ``forward(X, W, M, V, Vs, rng)`` (the network itself on tokens ``X`` of shape
    ``(L, d)``, gates drawn from ``rng``), ``student_forms``, ``teacher_forms``.

        >>> loss = autoregressive(L=2)
        >>> loss, loss.L, loss.min_K
        (Loss('autoregressive:L=2,heads=1'), 2, 5)
    """
    L = _check_small_int(L, "L (context tokens)", 1, MAX_B_TOKENS)
    H = _check_small_int(heads, "heads", 1, MAX_B_HEADS)
    pairs, pos = _pair_index(2 * H)
    K = 2 * H + len(pairs)
    names = ([f"W_{h + 1}" for h in range(H)] + [f"M*_{h + 1}" for h in range(H)]
             + [f"V{'*' if a >= H else ''}_{a % H + 1}^T V{'*' if b >= H else ''}_{b % H + 1}"
                f" / sqrt d" for a, b in pairs])

    fn = _autoregressive_loss(H, pos)
    effective_matrices, forward = _autoregressive_network(H, pairs)
    return Loss(f"autoregressive:L={L},heads={H}", fn,
                f"||xhat - y||^2 / d, next-token prediction with {H}-head softmax attention over "
                f"{L} context tokens and Bernoulli gates (paper 003, appendix B.2)",
                min_K=K, L=L,
                extra={"heads": H, "names": names, "pairs": pairs,
                       "student_forms": list(range(H)) + [2 * H + i for i, (a, b) in
                                                         enumerate(pairs) if a < H],
                       "teacher_forms": list(range(H, 2 * H)) + [2 * H + i for i, (a, b) in
                                                                enumerate(pairs) if a >= H],
                       "effective_matrices": effective_matrices, "forward": forward})


def _autoregressive_loss(H: int, pos: dict[tuple[int, int], int]
                         ) -> Callable[[_GArray], _Expr]:
    """The loss of :func:`autoregressive` as a function of the forms ``G`` (``pos``: the
    position of the pair ``(a, b)``, ``a <= b``, among the ``M_ab``)."""

    def F(G: _GArray, j: int, jp: int, a: int, b: int) -> _Expr:
        # x_j^T V_a^T V_b x_j' / d as a form of M_ab (a <= b) or of M_ba transposed
        return G[j, jp, 2 * H + pos[(a, b)]] if a <= b else G[jp, j, 2 * H + pos[(b, a)]]

    def fn(G: _GArray) -> _Expr:
        Ls = G.shape[0]
        q = Ls - 1
        alpha = [_softmax_list([G[q, j, h] for j in range(Ls)]) for h in range(H)]
        p = [[_sigmoid(G[q, j, H + h]) for j in range(Ls)] for h in range(H)]
        coef = [[alpha[h][j] for h in range(H)] + [-p[h][j] for h in range(H)]
                for j in range(Ls)]
        total: _Expr = 0
        for j in range(Ls):
            for jp in range(Ls):
                for a in range(2 * H):
                    for b in range(2 * H):
                        total += coef[j][a] * coef[jp][b] * F(G, j, jp, a, b)
        for j in range(Ls):
            for h in range(H):
                total += p[h][j] * (1 - p[h][j]) * F(G, j, j, H + h, H + h)
        return total
    return fn


def _autoregressive_network(H: int, pairs: Sequence[tuple[int, int]]
                            ) -> tuple[Callable[..., list[np.ndarray]], Callable[..., float]]:
    """``(effective_matrices, forward)`` of :func:`autoregressive`: the effective matrices
    from the weights and the network's loss computed directly on tokens."""

    def effective_matrices(W: Sequence[ArrayLike], M: Sequence[ArrayLike],
                           V: Sequence[ArrayLike], Vs: Sequence[ArrayLike]
                           ) -> list[np.ndarray]:
        """The ``K`` effective matrices from the weights (lists of ``H`` d x d arrays)."""
        Wa, Ma, Va, Vsa = ([np.asarray(a, dtype=float) for a in x] for x in (W, M, V, Vs))
        if not (len(Wa) == len(Ma) == len(Va) == len(Vsa) == H):
            raise ValueError(f"W, M, V, Vs must hold {H} matrices each")
        d = Wa[0].shape[0]
        vals = Va + Vsa
        return Wa + Ma + [vals[a].T @ vals[b] / np.sqrt(d) for a, b in pairs]

    def forward(X: ArrayLike, W: Sequence[np.ndarray], M: Sequence[np.ndarray],
                V: Sequence[np.ndarray], Vs: Sequence[np.ndarray],
                rng: np.random.Generator) -> float:
        """``||xhat - y||^2 / d`` of the network on tokens ``X`` (shape ``(L, d)``), the
        gates ``a_jh`` drawn from the numpy Generator ``rng``."""
        X = np.asarray(X, dtype=float)
        Ls, d = X.shape
        q = X[-1]
        xhat = np.zeros(d)
        y = np.zeros(d)
        for h in range(H):
            s = X @ (W[h].T @ q) / np.sqrt(d)
            s = np.exp(s - s.max())
            alpha = s / s.sum()
            pg = 1 / (1 + np.exp(-(X @ (M[h].T @ q)) / np.sqrt(d)))
            a = rng.random(Ls) < pg
            xhat += V[h] @ (alpha @ X)
            y += Vs[h] @ (a.astype(float) @ X)
        return float(np.sum((xhat - y) ** 2) / d)
    return effective_matrices, forward


def multiple_location(L: int = 2, act: str | Activation = "tanh", *,
                      polarity: ArrayLike | None = None,
                      alpha: ArrayLike | None = None) -> Loss:
    """Multiple-location regression (paper 003, appendix B.3, eqs. 59-61).

    Student score ``f = sum_ij alpha_ij sigma(x_i^T W x_j / sqrt d)`` (eq. 59 before
    the sign); label ``y = sign(sum_ij S_ij eps_ij)`` (eq. 60) with independent
    ``eps_ij ~ Bernoulli(sigmoid(x_i^T W* x_j / sqrt d))`` (eq. 61, ``g`` the
    logistic function) and polarities ``S_ij = +-1``. The sign is not
    differentiable, so the loss trains the score: ``(1/2)(f - y)^2`` averaged over
    the ``eps`` (a function of ``G``):

        (1/2)(f^2 - 2 f E[y] + E[y^2]),  E[y] = P(s > 0) - P(s < 0),  E[y^2] = 1 - P(s = 0),

    ``s = sum S_ij eps_ij``, whose law is built pair by pair (``P_k(n) = (1 - g_k)
    P_(k-1)(n) + g_k P_(k-1)(n - S_k)``, never expanded). Forms: 0 = student ``W``,
    1 = teacher ``W*``. ``polarity`` (``L x L`` of +-1) defaults to +1 on the
    diagonal and -1 off it; ``alpha`` to ``1/L^2``; ``act`` (``sigma``) is an activation name or a polynomial
    string in ``x`` (safe parser) or an :class:`~attndyn.symbolic.activations.Activation`. ``extra["forward"](X, W, Ws, rng)``
    computes ``(1/2)(f - y)^2`` with the ``eps`` drawn from ``rng``.

        >>> loss = multiple_location(L=2)
        >>> loss, loss.L, loss.min_K
        (Loss('multilocation:L=2,act=tanh'), 2, 2)
    """
    L = _check_small_int(L, "L (tokens)", 1, MAX_B3_TOKENS)
    act = activation(act, "act")
    if polarity is None:
        Sp = [[1 if i == j else -1 for j in range(L)] for i in range(L)]
    else:
        Sarr = np.asarray(polarity)
        if Sarr.shape != (L, L) or not np.all(np.isin(Sarr, (-1, 1))):
            raise ValueError(f"polarity must be an {L} x {L} array of +1 and -1")
        Sp = [[int(v) for v in row] for row in Sarr]
    if alpha is None:
        al = [[sp.Rational(1, L * L)] * L for _ in range(L)]
    else:
        a = np.asarray(alpha, dtype=float)
        if a.shape != (L, L) or not np.all(np.isfinite(a)):
            raise ValueError(f"alpha must be a finite {L} x {L} array")
        al = [[_coefficient(float(v), "alpha") for v in row] for row in a]

    def fn(G: _GArray) -> _Expr:
        Ls = G.shape[0]
        f = sum(al[i][j] * act(G[i, j, 0]) for i in range(Ls) for j in range(Ls))
        dist: dict[int, _Expr] = {0: sp.Integer(1)}          # law of s, pair by pair
        for i in range(Ls):
            for j in range(Ls):
                g = _sigmoid(G[i, j, 1])
                new: dict[int, _Expr] = {}
                for n, pn in dist.items():
                    new[n] = new.get(n, 0) + (1 - g) * pn
                    m = n + Sp[i][j]
                    new[m] = new.get(m, 0) + g * pn
                dist = new
        Ey = sum(pn for n, pn in dist.items() if n > 0) - sum(pn for n, pn in dist.items() if n < 0)
        Ey2 = 1 - dist.get(0, 0)
        return sp.Rational(1, 2) * (f ** 2 - 2 * f * Ey + Ey2)

    alnum = np.array([[float(v) for v in row] for row in al])
    from .activations import X as _x
    act_np = sp.lambdify(_x, act.expr, "numpy")
    Snum = np.array(Sp, dtype=float)

    def forward(X: ArrayLike, W: np.ndarray, Ws: np.ndarray, rng: np.random.Generator
                ) -> float:
        """``(1/2)(f - y)^2`` on tokens ``X`` (shape ``(L, d)``), the ``eps`` from ``rng``."""
        X = np.asarray(X, dtype=float)
        d = X.shape[1]
        A = X @ W @ X.T / np.sqrt(d)
        B = X @ Ws @ X.T / np.sqrt(d)
        f = float(np.sum(alnum * act_np(A)))
        eps = rng.random(B.shape) < 1 / (1 + np.exp(-B))
        y = float(np.sign(np.sum(Snum * eps)))
        return 0.5 * (f - y) ** 2

    return Loss(f"multilocation:L={L},act={act.name}", fn,
                f"(1/2)(sum_ij alpha_ij {act.name}(G_ij0) - sign(sum_ij S_ij eps_ij))^2, eps_ij ~ "
                "Bernoulli(sigmoid(G_ij1)) averaged (paper 003, appendix B.3)", min_K=2, L=L,
                extra={"activation": act, "polarity": Snum, "alpha": alnum,
                       "effective_matrices": lambda W, Ws: [np.asarray(W, float),
                                                            np.asarray(Ws, float)],
                       "forward": forward, "student_forms": [0], "teacher_forms": [1]})


def multi_step_reasoning(L: int = 3) -> Loss:
    """Multi-step reasoning (paper 003, appendix B.4, eqs. 62-65).

    ``L`` tokens: context ``x_1..x_(L-1)`` and query ``x_L``. Teacher (eqs. 62-63):
    two latent pointers ``eps_h`` drawn independently with
    ``P(eps_h = k) = softmax_k(x_L^T W*_h x_k / sqrt d)`` over the context, and
    ``y = x_eps1^T U* x_eps2 / sqrt d``. Student (eqs. 64-65):
    ``z_h = sum_j alpha_jh x_j``, ``alpha_.h = softmax_j(x_L^T W_h x_j / sqrt d)``,
    ``yhat = z_1^T Wt z_2 / sqrt d``. (The ``1/sqrt d`` of the bilinear outputs makes
    them ``O(1)``.) Loss ``(1/2)(yhat - y)^2`` averaged over the pointers:

        (1/2)(yhat^2 - 2 yhat sum_kk' pi_k1 pi_k'2 G_kk'U + sum_kk' pi_k1 pi_k'2 G_kk'U^2).

    Forms: 0, 1 = student ``W_1, W_2``; 2 = ``Wt``; 3, 4 = teacher ``W*_1, W*_2``;
    5 = ``U*``. ``extra["forward"](X, W1, W2, Wt, Ws1, Ws2, Us, rng)`` is the network
    with the pointers drawn from ``rng``.

        >>> loss = multi_step_reasoning(L=3)
        >>> loss, loss.L, loss.min_K
        (Loss('reasoning:L=3'), 3, 6)
    """
    L = _check_small_int(L, "L (tokens, context + query)", 2, MAX_B_TOKENS)

    def fn(G: _GArray) -> _Expr:
        Ls = G.shape[0]
        q, ctx = Ls - 1, range(Ls - 1)
        a = [_softmax_list([G[q, j, h] for j in ctx]) for h in (0, 1)]
        pi = [_softmax_list([G[q, j, 3 + h] for j in ctx]) for h in (0, 1)]
        yhat = sum(a[0][j] * a[1][jp] * G[j, jp, 2] for j in ctx for jp in ctx)
        Ey = sum(pi[0][k] * pi[1][kp] * G[k, kp, 5] for k in ctx for kp in ctx)
        Ey2 = sum(pi[0][k] * pi[1][kp] * G[k, kp, 5] ** 2 for k in ctx for kp in ctx)
        return sp.Rational(1, 2) * (yhat ** 2 - 2 * yhat * Ey + Ey2)

    def sm(v: np.ndarray) -> np.ndarray:
        v = np.exp(v - v.max())
        out: np.ndarray = v / v.sum()
        return out

    def forward(X: ArrayLike, W1: np.ndarray, W2: np.ndarray, Wt: np.ndarray, Ws1: np.ndarray,
                Ws2: np.ndarray, Us: np.ndarray, rng: np.random.Generator) -> float:
        """``(1/2)(yhat - y)^2`` on tokens ``X`` (shape ``(L, d)``, query last)."""
        X = np.asarray(X, dtype=float)
        d = X.shape[1]
        C, q = X[:-1], X[-1]
        z = [sm(C @ (W.T @ q) / np.sqrt(d)) @ C for W in (W1, W2)]
        yhat = z[0] @ Wt @ z[1] / np.sqrt(d)
        e = [rng.choice(C.shape[0], p=sm(C @ (W.T @ q) / np.sqrt(d))) for W in (Ws1, Ws2)]
        y = C[e[0]] @ Us @ C[e[1]] / np.sqrt(d)
        return 0.5 * float(yhat - y) ** 2

    return Loss(f"reasoning:L={L}", fn,
                "(1/2)(z_1^T Wt z_2 - x_eps1^T U* x_eps2)^2 / d with softmax pointers, averaged "
                "(paper 003, appendix B.4)", min_K=6, L=L,
                extra={"names": ["W_1", "W_2", "Wt", "W*_1", "W*_2", "U*"],
                       "effective_matrices": lambda *mats: [np.asarray(m, float) for m in mats],
                       "forward": forward, "student_forms": [0, 1, 2],
                       "teacher_forms": [3, 4, 5]})


# -- CLI specs -----------------------------------------------------------------------------
#: Largest ``heads`` of :func:`two_layer_attention` (``2 (1 + 3H + H^2)`` forms).
MAX_HEADS = 8
#: Range of the softmax inverse temperature in a spec: ``0 < |beta| <= MAX_BETA``.
MAX_BETA = 100.0
#: Most tokens of a ``softmax:L=..`` spec.
MAX_SPEC_L = 16


def _coefficient(value: object, name: str) -> _Expr:
    """A real, finite SymPy coefficient from a number, a SymPy expression or a plain
    decimal string (never an expression string)."""
    if isinstance(value, str):
        v = parse_float(value, name)
        return sp.Integer(int(v)) if v == int(v) and abs(v) < 2 ** 53 else sp.Float(v)
    v = as_sympy(value, name)
    if not isinstance(v, sp.Expr):
        raise TypeError(f"{name} must be a number or a SymPy expression, got {type(value).__name__}")
    check_numbers(v, name)
    return v


def _split_top(text: str) -> list:
    """Split on commas outside parentheses and brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _kv(text: str, spec: str) -> dict:
    out = {}
    for part in _split_top(text):
        if "=" not in part:
            raise ValueError(f"loss spec {_short(spec)}: expected key=value, got {_short(part)}")
        k, v = part.split("=", 1)
        if k.strip() in out:
            raise ValueError(f"loss spec {_short(spec)}: option {k.strip()!r} given twice")
        out[k.strip()] = v.strip()
    return out


def _short(text: object, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n - 3] + "...")


#: bounds of :func:`loss_from_spec` (K as the alphabet allows; the symbols of G bounded)
MAX_SPEC_K = 255
MAX_SPEC_L = 64
MAX_SPEC_SYMBOLS = 1 << 16


def loss_from_spec(spec: str, K: int, L: int, params: Sequence[str] | None = None
                   ) -> tuple[Loss, tuple[sp.Symbol, ...]]:
    """Parse a CLI loss spec into ``(loss, params)``.

    ``params`` is a tuple of the free SymPy symbols of the loss other than ``G``
    (runtime parameters of the compiled gradient; empty for the named losses).
    The argument ``params`` declares the parameter names a raw expression may
    use; ``None`` (default) accepts any plain identifier (letters, digits,
    ``_``, not a Python builtin or SymPy constant) as a parameter, ``()``
    accepts none (the CLI).

    ===================================  ===============================================================
    ``mse:<act>[,<act>]``                :func:`mse_teacher_student`, student 0, teacher 1
    ``softmax[:L=..,beta=..]``           :func:`softmax_teacher_student` (``beta`` a plain
                                         number, ``0 < |beta| <= 100``)
    ``denoising[:ell=<expr>]``           :func:`matrix_denoising` (``ell`` in ``a``)
    ``attention2[:heads=..,output=..]``  :func:`two_layer_attention` (``heads <= 8``)
    ``autoregressive[:heads=..]``        :func:`autoregressive` over the ``L`` tokens (``heads <= 4``)
    ``multilocation[:act=..]``           :func:`multiple_location` (``L <= 3``; ``act`` an activation)
    ``reasoning``                        :func:`multi_step_reasoning` (``L - 1`` context tokens + query)
    anything else                        an expression in ``G[i,j,k]`` (0-based; ``G1..GK`` for
                                         ``L = 1``) with ``exp, log, sqrt, tanh, erf, abs, max,
                                         min, relu, sigmoid, softplus, gelu, h<k>, He<k>``
    ===================================  ===============================================================

    Text is never evaluated as Python: expressions (raw losses, ``ell``,
    polynomial activations in ``x``) go through the whitelist parser of
    :mod:`attndyn.symbolic.parse` with its size limits; options are plain
    numbers. Anything else raises a one-line ``ValueError``.

        >>> loss, params = loss_from_spec("mse:h2", K=2, L=1)
        >>> loss, params
        (Loss('mse:h2,h2'), ())
        >>> loss, params = loss_from_spec("(G[0,0,0] - b*G[0,0,1])**2", K=2, L=1)
        >>> params
        (b,)
    """
    _check_spec_sizes(spec, K, L)
    spec = spec.strip()
    head, _, rest = spec.partition(":")
    head = head.strip().lower()
    loss = _named_loss(head, rest, spec, L)
    if loss is not None:
        _check_named_loss(loss, K, L)
        return loss, ()
    # raw expression in G
    if not re.search(r"\bG\s*\[", spec) and not (L == 1 and re.search(r"\bG\d+\b", spec)):
        raise ValueError(f"unknown loss spec {_short(spec)}: use mse:<act>[,<act>], softmax, "
                         "denoising, attention2, autoregressive, multilocation, reasoning, or an "
                         "expression in G[i,j,k]")
    expr, found = parse_loss(spec, K, L, params=params, what="loss")
    raw = Loss(f"expr:{spec}", lambda _G, e=expr: e, spec, min_K=1, L=L, params=found)
    return raw, found


def _check_spec_sizes(spec: str, K: int, L: int) -> None:
    """A non-empty spec within the parser's length limit; ``K``, ``L`` ints in range and the
    ``L x L x K`` symbols bounded before they are made."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("loss spec must be a non-empty string")
    for name, val, hi in (("K", K, MAX_SPEC_K), ("L", L, MAX_SPEC_L)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be an int >= 1, got {val!r}")
        if val > hi:  # bounded before the L x L x K symbols are made
            raise ValueError(f"{name} must be in 1..{hi}, got {val}")
    if L * L * K > MAX_SPEC_SYMBOLS:
        raise ValueError(f"L x L x K = {L * L * K} pre-activations: at most {MAX_SPEC_SYMBOLS}")
    from .parse import MAX_CHARS
    if len(spec) > MAX_CHARS:
        raise ValueError(f"loss spec too long ({len(spec)} characters, limit {MAX_CHARS})")


def _named_loss(head: str, rest: str, spec: str, L: int) -> Loss | None:
    """The library loss a spec names (``head:rest``), or ``None`` for a raw expression."""
    if head == "mse" and rest:
        acts = _split_top(rest)
        if not 1 <= len(acts) <= 2:
            raise ValueError(f"loss spec {_short(spec)}: use mse:<student>[,<teacher>]")
        return mse_teacher_student(acts[0], acts[1] if len(acts) == 2 else None)
    if head == "softmax":
        return _softmax_spec(rest, spec, L)
    if head == "denoising":
        kv = _kv(rest, spec)
        ell = kv.pop("ell", "-a")
        if kv:
            raise ValueError(f"loss spec {_short(spec)}: unknown options {sorted(kv)} "
                             "(denoising takes ell)")
        return matrix_denoising(ell)
    if head == "attention2":
        return _attention2_spec(rest, spec)
    if head in ("autoregressive", "multilocation", "reasoning"):
        return _appendix_b_spec(head, rest, spec, L)
    return None


def _softmax_spec(rest: str, spec: str, L: int) -> Loss:
    """``softmax[:L=..,beta=..]``: :func:`softmax_teacher_student` (``beta`` a plain number)."""
    kv = _kv(rest, spec)
    Ls = parse_int(kv.pop("L", str(L)), "softmax option L", 1, MAX_SPEC_L)
    beta = parse_float(kv.pop("beta", "1"), "softmax option beta", -MAX_BETA, MAX_BETA,
                       nonzero=True)
    if kv:
        raise ValueError(f"loss spec {_short(spec)}: unknown options {sorted(kv)} "
                         "(softmax takes L, beta)")
    if Ls != L:
        raise ValueError(f"loss spec {_short(spec)} is for L = {Ls} tokens but L = {L}")
    return softmax_teacher_student(Ls, beta=sp.Integer(int(beta)) if beta == int(beta)
                                   else sp.Float(beta))


def _attention2_spec(rest: str, spec: str) -> Loss:
    """``attention2[:heads=..,output=..]``: :func:`two_layer_attention`."""
    kv = _kv(rest, spec)
    H = parse_int(kv.pop("heads", "1"), "attention2 option heads", 1, MAX_HEADS)
    out = kv.pop("output", "linear")
    if out not in ("linear", "softmax"):
        raise ValueError(f"attention2 option output must be 'linear' or 'softmax', "
                         f"got {_short(out)}")
    if kv:
        raise ValueError(f"loss spec {_short(spec)}: unknown options {sorted(kv)} "
                         "(attention2 takes heads, output)")
    return two_layer_attention(H, out)


def _appendix_b_spec(head: str, rest: str, spec: str, L: int) -> Loss:
    """``autoregressive[:heads=..]``, ``multilocation[:act=..]``, ``reasoning``: the
    appendix-B.2-B.4 losses over the ``L`` tokens (``L`` checked against their ranges)."""
    kv = _kv(rest, spec)
    allowed = {"autoregressive": ("heads",), "multilocation": ("act",),
               "reasoning": ()}[head]
    unknown = sorted(set(kv) - set(allowed))
    if unknown:
        raise ValueError(f"loss spec {_short(spec)}: unknown options {unknown} ({head} takes "
                         f"{', '.join(allowed) if allowed else 'no options'})")
    if head == "autoregressive":
        H = parse_int(kv.get("heads", "1"), "autoregressive option heads", 1, MAX_B_HEADS)
        loss = autoregressive(L, H) if L <= MAX_B_TOKENS else None
    elif head == "multilocation":
        loss = multiple_location(L, kv.get("act", "tanh")) if L <= MAX_B3_TOKENS else None
    else:
        loss = multi_step_reasoning(L) if 2 <= L <= MAX_B_TOKENS else None
    if loss is None:
        hi = MAX_B3_TOKENS if head == "multilocation" else MAX_B_TOKENS
        raise ValueError(f"loss spec {_short(spec)} needs L in [{2 if head == 'reasoning' else 1}, "
                         f"{hi}] tokens, got L = {L}")
    return loss


def _check_named_loss(loss: Loss, K: int, L: int) -> None:
    """A library loss fits the model: its ``L``, at least (or exactly) its forms ``K``."""
    if loss.L is not None and loss.L != L:
        raise ValueError(f"loss {loss.name} needs L = {loss.L}, got L = {L}")
    if K < loss.min_K:
        raise ValueError(f"loss {loss.name} needs K >= {loss.min_K} indices, got K = {K}")
    if loss.name.startswith(("attention2", "autoregressive", "multilocation", "reasoning")) \
            and K != loss.min_K:
        raise ValueError(f"loss {loss.name} uses exactly K = {loss.min_K} forms, got K = {K}")
