"""Finite-d online SGD written once against the Python array API (NumPy on a CPU, CuPy on a GPU).

The same update rule, time scale and observables as the numba kernels of
:mod:`attndyn.kernels.sgd` (``attndyn.sgd(..., backend="numba")``), equal to them in
distribution (not bit for bit: the random numbers come from the device's own
generator). A step on ``B`` fresh samples ``x ~ N(0, C (x) I_d)`` (rows
``s*L + i``, token ``i`` of sample ``s``):

- tied (paper 003, eqs. 7-9), weights ``W_k`` (``"factors"``):
  ``G_ijk = (x_i^T W_k W_k^T x_j - C_ij Tr S_k)/sqrt(d)``,
  ``W_k <- (1 - eta gamma/d + 2 eta c_k/(B sqrt d)) W_k - eta/(B sqrt d) X^T Y_k`` with
  ``Y_k,i = sum_j (D_ijk + D_jik) X_j W_k``, ``c_k = sum_s sum_ij D_ijk C_ij``;
- untied (eq. 25), pairs ``(U_k, V_k)`` (``"pairs"``): ``G_ijk = x_i^T U_k V_k^T x_j/sqrt(d)``,
  ``U_k <- (1 - eta gamma/d) U_k - eta/(B sqrt d) sum_s sum_ij D_ijk x_i x_j^T V_k`` and the
  same for ``V_k`` with ``i, j`` exchanged; a fixed teacher enters through one product
  with ``S_k = U_k V_k^T`` precomputed (``teacher="S"``: 5 products a step instead of 6
  for one student and one teacher of width ``d``);
- direct S (eq. 395), matrices ``S_k`` (``"matrices"``):
  ``G_ijk = (x_i^T S_k x_j - C_ij Tr S_k)/sqrt(d)``,
  ``S_k <- (1 - eta gamma/d) S_k - eta/(B sqrt d) sum_s sum_ij D_ijk x_i x_j^T
  + (eta c_k/(B sqrt d)) I``.

``D_ijk = dL/dG_ijk`` comes from the model's SymPy loss, evaluated on whole
batches by :class:`attndyn.numeric.core.xp.ExpressionEvaluator` (no code is
printed). Only the trainable indices move; the teachers stay as given. The time
per step and the checkpoints are the model's (:attr:`time_scales`), the
observables are computed on the host at each checkpoint by the model's own
:meth:`sgd_runner` (so they are the numba backend's, by construction), and
``loss`` is the mean loss of the ``B`` fresh samples of the step taken from the
checkpoint. Blow-up: a non-finite batch loss (status -3) or a trainable weight
non-finite or above ``blowup`` (status -4) stops a seed at that step, with the
message of the numba kernels; the checkpoints before it are kept.

Several seeds can run as one batched product (:func:`xp_sgd_runs`,
``seeds_per_product``): every array carries a leading seed axis, the students'
products are stacked matrix products and the fixed teachers' one product over all
seeds' samples. Each seed keeps its own random stream, so a seed's trajectory does
not depend on which seeds run beside it (bit-identical on NumPy when the products
are, which docs/sgd.md reports as measured).

The step is picked by the model's protocol member ``sgd_form`` (``"factors"``,
``"pairs"``, ``"matrices"``); a parameterisation with another form adds a step
class to ``_STEPS``.
"""

from __future__ import annotations

import math
import time as _time
from contextlib import nullcontext as _nullcontext
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attndyn.kernels.sgd import status_message
from attndyn.numeric.core import xp as _xp
from attndyn.numeric.core.progress import Progress
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.threads import compute_threads
from attndyn.numeric.core.validate import check_eta, check_t_eval, resolve_rng

from attndyn.numeric.attention.base import check_model

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.attention.base import AttentionModel, SGDRunner, TimeScale
    from attndyn.numeric.core.types import ArrayLike, RngLike

__all__ = ["xp_sgd", "xp_sgd_runs", "xp_memory_bytes", "check_backend", "BACKENDS",
           "TEACHER_MODES"]

TEACHER_MODES = ("auto", "S", "factors")
BACKENDS = ("numba", "array-api")
_MAX_STEPS = 2 ** 62
_SYNC_STEPS = 256  # steps between two reads of the loss and blow-up flags on the host
# an array of the namespace xp (NumPy, CuPy, ...) and the namespace itself: the array API
# has no common static type for them
_Arr = Any
_Namespace = Any


# ---------------------------------------------------------------------------
# arguments

def check_int(x: object, name: str, low: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {low}, got {x!r}")
    if x < low:
        raise ValueError(f"{name} must be an int >= {low}, got {x}")
    return int(x)


def _seed_record(ss: np.random.SeedSequence) -> dict:
    ent: Any = ss.entropy
    ent = [int(e) for e in ent] if isinstance(ent, (list, tuple, np.ndarray)) else int(ent)
    return {"entropy": ent, "spawn_key": [int(k) for k in ss.spawn_key]}


def _checkpoint_steps(t_eval: np.ndarray, dt: float, eta: float, d: int,
                      label: str) -> NDArray[np.int64]:
    ratio = t_eval[-1] / dt
    if not ratio < _MAX_STEPS:
        raise ValueError(f"t_eval up to {t_eval[-1]:g} needs {ratio:.3g} SGD steps of "
                         f"dt = {dt:.3g} "
                         f"({label}, eta = {eta:g}, d = {d}): more than 2**62")
    steps = np.rint(t_eval / dt).astype(np.int64)
    n_t, n_s = np.unique(t_eval).size, np.unique(steps).size
    if n_s < n_t:
        raise ValueError(
            f"the checkpoint grid t_eval cannot be resolved by the SGD step: one step is "
            f"dt = {dt:.4g} of ODE time ({label}, eta = {eta:g}, d = {d}), and the {n_t} distinct "
            f"times of t_eval (up to {t_eval[-1]:g}) round to only {n_s} distinct steps; use "
            "fewer checkpoints, a longer horizon or a smaller eta")
    return steps


def check_backend(backend: str, device: str | None, dtype: Any) -> bool:
    """Whether ``attndyn.sgd(..., backend=, device=, dtype=)`` runs the array-API steps
    (``backend="array-api"``); the numba kernels take only ``device`` None/"cpu" and float64."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'numba' or 'array-api', got {backend!r}")
    if backend == "array-api":
        return True
    if device not in (None, "cpu"):
        raise ValueError(f"device={device!r} needs backend='array-api' (the numba kernels run "
                         "on the CPU)")
    if dtype not in ("float64", np.float64):
        raise ValueError(f"dtype={dtype!r} needs backend='array-api' (the numba kernels run in "
                         "float64)")
    return False


_LOSS_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _loss_evaluator(model: AttentionModel, trainable_inputs: Sequence[int]
                    ) -> _xp.ExpressionEvaluator:
    """The loss value and ``dL/dG`` at ``trainable_inputs`` (flat indices of ``G``),
    derived once per model."""
    key = tuple(trainable_inputs)
    per_model = _LOSS_CACHE.setdefault(model, {})
    if key not in per_model:
        per_model[key] = _derive_loss(model, key)
    ev: _xp.ExpressionEvaluator = per_model[key]
    return ev


def _derive_loss(model: AttentionModel, trainable_inputs: Sequence[int]
                 ) -> _xp.ExpressionEvaluator:
    import sympy as sp

    from attndyn.symbolic.lossgrad import loss_gradient
    loss = getattr(model, "loss", None)
    if loss is None:
        raise ValueError("SGD needs the model's loss callable (this model was built from a "
                         "numeric potential only)")
    psyms = [sp.Symbol(str(k), real=True) for k in model.params]
    lg = loss_gradient(loss, model.K, model.L, params=psyms)
    values = [float(v) for v in model.params.values()]
    exprs = [lg.expr] + [lg.grad[i] for i in trainable_inputs]
    return _xp.ExpressionEvaluator(exprs, lg.symbols, psyms, values)


def _cov(model: AttentionModel) -> tuple[np.ndarray, np.ndarray, bool]:
    C = np.array(model.C.evalf(), dtype=np.float64)
    L = C.shape[0]
    lam, V = np.linalg.eigh(C)
    F = V * np.sqrt(np.clip(lam, 0.0, None))
    return C, F, bool(np.array_equal(C, np.eye(L)))


# ---------------------------------------------------------------------------
# the three steps

class _Step:
    """Weights of ``R`` seeds on the device and one SGD step on a batch ``X (R, B*L, d)``.

    ``step(X, eta, gamma, blowup, update)`` returns the per-seed batch loss sums
    ``(R,)`` and, with ``update``, the per-seed blow-up flags ``(R,)`` (device arrays,
    not read here: the driver reads them every ``_SYNC_STEPS`` steps)."""

    form = ""
    teacher_mode: str | None = None
    d: int

    def __init__(self, model: AttentionModel, weights: list[Any], xp: _Namespace, dtype: Any,
                 R: int, C: np.ndarray, teacher: str) -> None:
        self.xp, self.dtype, self.R = xp, dtype, R
        self.K, self.L = model.K, model.L
        self.tr = list(model.trainable)
        self.fixed = [k for k in range(model.K) if k not in self.tr]
        self.weights = weights
        self.C = [[float(c) for c in row] for row in C]
        self.teacher = teacher
        self.setup()
        L, K = self.L, self.K
        self.grad_inputs = [(i * L + j) * K + k for k in self.tr for i in range(L)
                            for j in range(L)]
        self.lossgrad = _loss_evaluator(model, self.grad_inputs)

    def setup(self) -> None:
        """Lay the weights out on the device (each form its own)."""
        raise NotImplementedError

    def step(self, X: _Arr, eta: float, gamma: float, blowup: float, update: bool = True
             ) -> tuple[_Arr, _Arr]:
        """Per-seed batch loss sums and blow-up flags (each form its own)."""
        raise NotImplementedError

    def host(self, r: int) -> list[Any]:
        """The weights of seed ``r`` on the host (each form its own)."""
        raise NotImplementedError

    @staticmethod
    def words_per_seed(model: AttentionModel, weights: Any, B: int, teacher: str) -> int:
        """Device words one seed's step holds (each form its own)."""
        raise NotImplementedError

    def _dev(self, a: ArrayLike, seeds: bool = False) -> _Arr:
        a = np.ascontiguousarray(a, dtype=np.float64)
        if seeds:
            a = np.ascontiguousarray(np.broadcast_to(a, (self.R,) + a.shape))
        return self.xp.asarray(a, dtype=self.dtype)

    def _idx(self, i: int, j: int, k: int) -> int:
        return (i * self.L + j) * self.K + k

    def _full(self, v: float | _Arr, like: _Arr) -> _Arr:
        """An array of the batch's shape from a loss output (a constant is a Python float)."""
        if isinstance(v, float):
            return self.xp.full(like.shape, v, dtype=self.dtype)
        return v

    def _losses(self, cols: list[Any], like: _Arr) -> tuple[_Arr, dict[int, _Arr]]:
        outs = self.lossgrad.evaluate(self.xp, cols)
        val = self._full(outs[0], like)
        D: dict[int, _Arr] = {}
        for idx, g in zip(self.grad_inputs, outs[1:]):
            D[idx] = self._full(g, like)
        return self.xp.sum(val, axis=-1), D

    def _bad(self, W: _Arr, blowup: float) -> _Arr:
        xp = self.xp
        return xp.any(xp.logical_not(xp.abs(W) <= blowup), axis=(1, 2))


def _dot(xp: _Namespace, a: _Arr, b: _Arr) -> _Arr:
    """Row dot products over the last axis."""
    return xp.sum(a * b, axis=-1)


class _Factors(_Step):
    """Tied: ``S_k = W_k W_k^T`` (eqs. 7-9)."""

    form = "factors"

    def setup(self) -> None:
        W = self.weights
        self.d = W[0].shape[0]
        self.w = {k: W[k].shape[1] for k in range(self.K)}
        self.off: dict[int, int] = {}
        pos = 0
        for k in self.tr:
            self.off[k] = pos
            pos += self.w[k]
        self.Dtr = pos
        pos = 0
        for k in self.fixed:
            self.off[k] = pos
            pos += self.w[k]
        self.Wtr: _Arr = (self._dev(np.hstack([W[k] for k in self.tr]), seeds=True)
                          if self.tr else None)
        self.Wfix: _Arr = self._dev(np.hstack([W[k] for k in self.fixed])) if self.fixed else None
        self.trfix = {k: float(np.sum(W[k] * W[k])) for k in self.fixed}
        self.products = (1 if self.tr else 0) + (1 if self.fixed else 0) + (1 if self.tr else 0)

    def step(self, X: _Arr, eta: float, gamma: float, blowup: float, update: bool = True
             ) -> tuple[_Arr, _Arr]:
        xp, L, R, d = self.xp, self.L, self.R, self.d
        B = X.shape[1] // L
        sqd = math.sqrt(d)
        cols: list[Any] = [None] * (L * L * self.K)
        P = {}
        tr_S = {}
        if self.tr:
            Ptr = xp.reshape(xp.matmul(X, self.Wtr), (R, B, L, self.Dtr))
            for k in self.tr:
                o = self.off[k]
                P[k] = Ptr[..., o:o + self.w[k]]
                Wk = self.Wtr[..., o:o + self.w[k]]
                tr_S[k] = xp.reshape(xp.sum(Wk * Wk, axis=(1, 2)), (R, 1))
        if self.fixed:
            Pf = xp.matmul(xp.reshape(X, (R * B * L, d)), self.Wfix)
            Pf = xp.reshape(Pf, (R, B, L, Pf.shape[-1]))
            for k in self.fixed:
                o = self.off[k]
                P[k] = Pf[..., o:o + self.w[k]]
                tr_S[k] = self.trfix[k]
        for k in range(self.K):
            for i in range(L):
                for j in range(i, L):
                    g = _dot(xp, P[k][:, :, i, :], P[k][:, :, j, :]) - self.C[i][j] * tr_S[k]
                    g = g / sqd
                    cols[self._idx(i, j, k)] = g
                    cols[self._idx(j, i, k)] = g
        lsum, D = self._losses(cols, cols[0])
        if not update or not self.tr:
            return lsum, (None if not update else xp.zeros(R, dtype=xp.bool))
        Ys, shrinks = [], []
        for k in self.tr:
            rows = []
            cs = 0.0
            for i in range(L):
                acc = None
                for j in range(L):
                    cij = D[self._idx(i, j, k)] + D[self._idx(j, i, k)]
                    term = cij[..., None] * P[k][:, :, j, :]
                    acc = term if acc is None else acc + term
                    if self.C[i][j] != 0.0:
                        cs = cs + self.C[i][j] * D[self._idx(i, j, k)]
                rows.append(acc)
            Ys.append(xp.stack(rows, axis=2))
            c = xp.sum(cs, axis=-1) if not isinstance(cs, float) else xp.zeros(R, dtype=self.dtype)
            sh = 1.0 - eta * gamma / d + 2.0 * eta * c / (B * sqd)
            shrinks.append(xp.broadcast_to(xp.reshape(sh, (R, 1, 1)), (R, 1, self.w[k])))
        Y = xp.reshape(xp.concat(Ys, axis=-1) if len(Ys) > 1 else Ys[0], (R, B * L, self.Dtr))
        Gr = xp.matmul(xp.matrix_transpose(X), Y)
        shrink = xp.concat(shrinks, axis=-1) if len(shrinks) > 1 else shrinks[0]
        self.Wtr = shrink * self.Wtr - (eta / (B * sqd)) * Gr
        return lsum, self._bad(self.Wtr, blowup)

    def host(self, r: int) -> list[Any]:
        Wh: Any = _xp.to_host(self.Wtr[r, ...]).astype(np.float64) if self.tr else None
        out = []
        for k in range(self.K):
            if k in self.tr:
                o = self.off[k]
                out.append(np.ascontiguousarray(Wh[:, o:o + self.w[k]]))
            else:
                out.append(self.weights[k])
        return out

    @staticmethod
    def words_per_seed(model: AttentionModel, W: Sequence[np.ndarray], B: int,
                       teacher: str) -> int:
        d, L = W[0].shape[0], model.L
        D = sum(w.shape[1] for w in W)
        Dtr = sum(W[k].shape[1] for k in model.trainable)
        return int(B * L * (d + D + 2 * Dtr) + 3 * d * Dtr)


class _Pairs(_Step):
    """Untied: ``S_k = U_k V_k^T`` (eq. 25); a fixed teacher as ``S_k`` (``teacher="S"``)
    or as its factors."""

    form = "pairs"

    def setup(self) -> None:
        pairs = self.weights
        self.d = d = pairs[0][0].shape[0]
        self.w = {k: pairs[k][0].shape[1] for k in range(self.K)}
        self.uoff: dict[int, int] = {}
        self.voff: dict[int, int] = {}
        pos = 0
        for k in self.tr:
            self.uoff[k] = pos
            pos += self.w[k]
        for k in self.tr:
            self.voff[k] = pos
            pos += self.w[k]
        self.Dtr2 = pos
        mode = self.teacher
        if mode == "auto":  # one d x d product instead of two d x d_k: fewer flops iff d < 2 d_k
            mode = "S" if sum(d for _ in self.fixed) < sum(2 * self.w[k] for k in self.fixed) \
                else "factors"
        self.teacher_mode = mode if self.fixed else "none"
        if self.tr:
            self.UVtr = self._dev(np.hstack([pairs[k][0] for k in self.tr]
                                            + [pairs[k][1] for k in self.tr]), seeds=True)
        # column offsets of the fixed factors: k (U_k, or S_k) and (k, "v") (V_k)
        self.fpos: dict[int | tuple[int, str], int] = {}
        if self.fixed and mode == "S":
            self.Sfix = self._dev(np.hstack([pairs[k][0] @ pairs[k][1].T for k in self.fixed]))
            for a, k in enumerate(self.fixed):
                self.fpos[k] = a * d
        elif self.fixed:
            pos = 0
            for k in self.fixed:
                self.fpos[k] = pos
                pos += self.w[k]
            for k in self.fixed:
                self.fpos[(k, "v")] = pos
                pos += self.w[k]
            self.UVfix = self._dev(np.hstack([pairs[k][0] for k in self.fixed]
                                             + [pairs[k][1] for k in self.fixed]))
        # products per step: students' [U|V], the teachers' one, the gradient
        self.products = (2 if self.tr else 0) + (1 if self.fixed else 0)

    def step(self, X: _Arr, eta: float, gamma: float, blowup: float, update: bool = True
             ) -> tuple[_Arr, _Arr]:
        xp, L, R, d = self.xp, self.L, self.R, self.d
        B = X.shape[1] // L
        sqd = math.sqrt(d)
        cols = [None] * (L * L * self.K)
        PU, PV = {}, {}
        if self.tr:
            Ptr = xp.reshape(xp.matmul(X, self.UVtr), (R, B, L, self.Dtr2))
            for k in self.tr:
                PU[k] = Ptr[..., self.uoff[k]:self.uoff[k] + self.w[k]]
                PV[k] = Ptr[..., self.voff[k]:self.voff[k] + self.w[k]]
        if self.fixed:
            Xf = xp.reshape(X, (R * B * L, d))
            if self.teacher_mode == "S":
                Q = xp.reshape(xp.matmul(Xf, self.Sfix), (R, B, L, d * len(self.fixed)))
                X4 = xp.reshape(X, (R, B, L, d))
                for k in self.fixed:
                    PU[k] = Q[..., self.fpos[k]:self.fpos[k] + d]
                    PV[k] = X4  # G_ij = x_i^T S x_j = (x_i^T S) . x_j
            else:
                Pf = xp.matmul(Xf, self.UVfix)
                Pf = xp.reshape(Pf, (R, B, L, Pf.shape[-1]))
                for k in self.fixed:
                    PU[k] = Pf[..., self.fpos[k]:self.fpos[k] + self.w[k]]
                    PV[k] = Pf[..., self.fpos[(k, "v")]:self.fpos[(k, "v")] + self.w[k]]
        for k in range(self.K):
            for i in range(L):
                for j in range(L):
                    cols[self._idx(i, j, k)] = _dot(xp, PU[k][:, :, i, :], PV[k][:, :, j, :]) / sqd
        lsum, D = self._losses(cols, cols[0])
        if not update or not self.tr:
            return lsum, (None if not update else xp.zeros(R, dtype=xp.bool))
        YU, YV = [], []
        for k in self.tr:
            ru, rv = [], []
            for i in range(L):
                au = av = None
                for j in range(L):
                    # dG_ij/dU = x_i (V^T x_j)^T, dG_ji/dV = x_i (U^T x_j)^T
                    tu = D[self._idx(i, j, k)][..., None] * PV[k][:, :, j, :]
                    tv = D[self._idx(j, i, k)][..., None] * PU[k][:, :, j, :]
                    au = tu if au is None else au + tu
                    av = tv if av is None else av + tv
                ru.append(au)
                rv.append(av)
            YU.append(xp.stack(ru, axis=2))
            YV.append(xp.stack(rv, axis=2))
        Y = xp.reshape(xp.concat(YU + YV, axis=-1), (R, B * L, self.Dtr2))
        Gr = xp.matmul(xp.matrix_transpose(X), Y)
        self.UVtr = (1.0 - eta * gamma / d) * self.UVtr - (eta / (B * sqd)) * Gr
        return lsum, self._bad(self.UVtr, blowup)

    def host(self, r: int) -> list[Any]:
        W: Any = _xp.to_host(self.UVtr[r, ...]).astype(np.float64) if self.tr else None
        out = []
        for k in range(self.K):
            if k in self.tr:
                u, v, w = self.uoff[k], self.voff[k], self.w[k]
                out.append((np.ascontiguousarray(W[:, u:u + w]),
                            np.ascontiguousarray(W[:, v:v + w])))
            else:
                out.append(self.weights[k])
        return out

    @staticmethod
    def words_per_seed(model: AttentionModel, pairs: Sequence[tuple[np.ndarray, np.ndarray]],
                       B: int, teacher: str) -> int:
        d, L = pairs[0][0].shape[0], model.L
        Dtr2 = sum(2 * pairs[k][0].shape[1] for k in model.trainable)
        fix = sum(max(d, 2 * pairs[k][0].shape[1]) for k in range(model.K)
                  if k not in model.trainable)
        return int(B * L * (d + fix + 3 * Dtr2) + 3 * d * Dtr2)


class _Matrices(_Step):
    """Direct S (eq. 395): the matrices ``S_k`` themselves."""

    form = "matrices"

    def setup(self) -> None:
        S = self.weights
        self.d = d = S[0].shape[0]
        ntr = len(self.tr)
        self.Str: _Arr = (self._dev(np.hstack([S[k] for k in self.tr]), seeds=True)
                          if self.tr else None)
        self.Sfix = self._dev(np.hstack([S[k] for k in self.fixed])) if self.fixed else None
        self.trfix = {k: float(np.trace(S[k])) for k in self.fixed}
        self.eye = self._dev(np.hstack([np.eye(d)] * ntr)) if self.tr else None
        self.products = (2 if self.tr else 0) + (1 if self.fixed else 0)

    def step(self, X: _Arr, eta: float, gamma: float, blowup: float, update: bool = True
             ) -> tuple[_Arr, _Arr]:
        xp, L, R, d = self.xp, self.L, self.R, self.d
        B = X.shape[1] // L
        sqd = math.sqrt(d)
        X4 = xp.reshape(X, (R, B, L, d))
        cols = [None] * (L * L * self.K)
        P, tr_S = {}, {}
        if self.tr:
            Ptr = xp.reshape(xp.matmul(X, self.Str), (R, B, L, d * len(self.tr)))
            for a, k in enumerate(self.tr):
                P[k] = Ptr[..., a * d:(a + 1) * d]
                tr_S[k] = xp.reshape(xp.linalg.trace(self.Str[..., a * d:(a + 1) * d]), (R, 1))
        if self.fixed:
            Pf = xp.matmul(xp.reshape(X, (R * B * L, d)), self.Sfix)
            Pf = xp.reshape(Pf, (R, B, L, Pf.shape[-1]))
            for a, k in enumerate(self.fixed):
                P[k] = Pf[..., a * d:(a + 1) * d]
                tr_S[k] = self.trfix[k]
        for k in range(self.K):
            for i in range(L):
                for j in range(L):
                    g = _dot(xp, P[k][:, :, i, :], X4[:, :, j, :]) - self.C[i][j] * tr_S[k]
                    cols[self._idx(i, j, k)] = g / sqd
        lsum, D = self._losses(cols, cols[0])
        if not update or not self.tr:
            return lsum, (None if not update else xp.zeros(R, dtype=xp.bool))
        Ys, diags = [], []
        for k in self.tr:
            rows = []
            cs = 0.0
            for i in range(L):
                acc = None
                for j in range(L):
                    dij = D[self._idx(i, j, k)]
                    term = dij[..., None] * X4[:, :, j, :]  # dG_ij/dS = x_i x_j^T / sqrt(d)
                    acc = term if acc is None else acc + term
                    if self.C[i][j] != 0.0:
                        cs = cs + self.C[i][j] * dij
                rows.append(acc)
            Ys.append(xp.stack(rows, axis=2))
            c = xp.sum(cs, axis=-1) if not isinstance(cs, float) else xp.zeros(R, dtype=self.dtype)
            diags.append(xp.broadcast_to(xp.reshape(eta * c / (B * sqd), (R, 1, 1)), (R, 1, d)))
        Y = xp.reshape(xp.concat(Ys, axis=-1) if len(Ys) > 1 else Ys[0], (R, B * L, d * len(Ys)))
        Gr = xp.matmul(xp.matrix_transpose(X), Y)
        diag = xp.concat(diags, axis=-1) if len(diags) > 1 else diags[0]
        self.Str = (1.0 - eta * gamma / d) * self.Str - (eta / (B * sqd)) * Gr + diag * self.eye
        return lsum, self._bad(self.Str, blowup)

    def host(self, r: int) -> list[Any]:
        S: Any = _xp.to_host(self.Str[r, ...]).astype(np.float64) if self.tr else None
        d = self.d
        out = []
        for k in range(self.K):
            if k in self.tr:
                a = self.tr.index(k)
                out.append(np.ascontiguousarray(S[:, a * d:(a + 1) * d]))
            else:
                out.append(self.weights[k])
        return out

    @staticmethod
    def words_per_seed(model: AttentionModel, S: Sequence[np.ndarray], B: int,
                       teacher: str) -> int:
        d, L, ntr = S[0].shape[0], model.L, len(model.trainable)
        return int(B * L * (d + d * model.K + 2 * d * ntr) + 4 * d * d * ntr)


_STEPS: dict[str, type[_Step]] = {cls.form: cls for cls in (_Factors, _Pairs, _Matrices)}


def _step_class(model: AttentionModel) -> type[_Step]:
    form = model.sgd_form
    cls = _STEPS.get(form or "")
    if cls is None:
        raise ValueError(f"the array-API SGD backend has no step for {type(model).__name__} "
                         f"(sgd_form = {form!r}; it has {', '.join(map(repr, sorted(_STEPS)))}); "
                         "use backend='numba'")
    return cls


# ---------------------------------------------------------------------------
# samples x ~ N(0, C (x) I_d), one random stream per seed

class _Sampler:
    def __init__(self, xp: _Namespace, dtype: Any, seeds: Sequence[np.random.SeedSequence],
                 F: np.ndarray, ident: bool, B: int, L: int, d: int) -> None:
        self.xp, self.dtype, self.B, self.L, self.d = xp, dtype, B, L, d
        self.draws = [_xp.normal_generator(xp, ss) for ss in seeds]
        self.F = [[float(f) for f in row] for row in F]
        self.ident = ident

    def draw(self) -> _Arr:
        xp, B, L, d, R = self.xp, self.B, self.L, self.d, len(self.draws)
        Z = xp.empty((R, B * L, d), dtype=self.dtype)
        for r, draw in enumerate(self.draws):
            draw((B * L, d), self.dtype, out=Z[r, ...])
        if self.ident:
            return Z
        Z4 = xp.reshape(Z, (R, B, L, d))
        rows = []
        for i in range(L):  # x_i = sum_m F_im z_m
            acc = None
            for m in range(L):
                f = self.F[i][m]
                if f != 0.0:
                    acc = f * Z4[:, :, m, :] if acc is None else acc + f * Z4[:, :, m, :]
            rows.append(acc if acc is not None else xp.zeros((R, B, d), dtype=self.dtype))
        return xp.reshape(xp.stack(rows, axis=2), (R, B * L, d))


# ---------------------------------------------------------------------------
# driver

def xp_memory_bytes(model: AttentionModel, init: Sequence[Any], batch: int, n_seeds: int = 1,
                    dtype: str = "float64", teacher: str = "auto") -> int:
    """Bytes of device arrays one batched step of ``n_seeds`` seeds holds (an estimate:
    samples, products, gradient factors, weights and their update, twice for the
    temporaries of the loss)."""
    model = check_model(model)
    weights = model.check_init(init)
    cls = _step_class(model)
    item = 4 if str(dtype) == "float32" else 8
    B = check_int(batch, "batch")
    return int(2 * item * check_int(n_seeds, "n_seeds")
               * cls.words_per_seed(model, weights, B, teacher))


def _check_memory(need: int, max_memory: float | None, xp: _Namespace, what: str) -> None:
    limit: float | None
    if max_memory is None:
        limit = _xp.free_memory(xp)
        src = "the free memory of the device"
        if limit is None:
            return
    else:
        if isinstance(max_memory, bool) or not isinstance(
                max_memory, (int, float, np.integer, np.floating)) or not max_memory > 0:
            raise ValueError(f"max_memory must be a number of bytes > 0, got {max_memory!r}")
        limit, src = max_memory, "max_memory"
    if need > limit:
        raise ValueError(f"sgd (array-API): {what} need about {need / 2**30:.3g} GiB of device "
                         f"arrays, above {src} ({limit / 2**30:.3g} GiB); use a smaller batch, "
                         "fewer seeds per product or float32, or raise max_memory=")


class _Book:
    """Per-seed records of a batched run: losses per step, statuses, checkpoints."""

    def __init__(self, R: int, n_total: int, n_obs: int, n_out: int) -> None:
        self.losses = np.full((R, n_total + 1), np.nan)
        self.ys = np.full((R, n_obs, n_out), np.nan)
        self.alive = np.ones(R, dtype=bool)
        self.status = np.zeros(R, dtype=np.int64)
        self.fail_step = np.full(R, -1, dtype=np.int64)
        self.recorded = np.zeros(R, dtype=np.int64)
        self.done = 0

    def absorb(self, lh: np.ndarray, bh: np.ndarray) -> None:
        """Mean losses ``lh`` and blow-up flags ``bh`` (``(R, n)``) of the next ``n`` steps:
        a seed stops at its first non-finite loss (-3) or bad weights (-4), as in the
        numba kernels (the loss of a -4 step is kept, that of a -3 step is not)."""
        n = lh.shape[1]
        for r in np.flatnonzero(self.alive):
            fin = np.isfinite(lh[r])
            bad_at = np.flatnonzero(~fin | bh[r])
            if bad_at.size:
                j = int(bad_at[0])
                keep = j + (1 if fin[j] else 0)
                self.status[r] = -3 if not fin[j] else -4
                self.fail_step[r] = self.done + j
                self.alive[r] = False
                self.losses[r, self.done:self.done + keep] = lh[r, :keep]
            else:
                self.losses[r, self.done:self.done + n] = lh[r]
        self.done += n


def _run(model: AttentionModel, init: Sequence[Any], seeds: Sequence[np.random.SeedSequence],
         *, eta: float, batch: int, t_eval: ArrayLike, order: int | None, time: str,
         device: str | None, dtype: Any, progress: bool | None, blowup: float,
         raise_on_failure: bool, max_memory: float | None, teacher: str,
         blas_threads: int | str | None = None) -> list[Trajectory]:
    """Run ``len(seeds)`` seeds as one batched product; one Trajectory per seed."""
    model = check_model(model)
    eta = check_eta(eta)
    B = check_int(batch, "batch")
    t_eval = check_t_eval(t_eval)
    scale = model.time_scale(time)
    if isinstance(blowup, bool) or not isinstance(blowup, (int, float)) or not blowup > 0:
        raise ValueError(f"blowup must be a number > 0, got {blowup!r}")
    if teacher not in TEACHER_MODES:
        raise ValueError(f"teacher must be one of {TEACHER_MODES}, got {teacher!r}")
    cls = _step_class(model)
    runner0 = model.sgd_runner(init, order)  # validates init and order; names the rows
    weights = model.check_init(init)
    xp = _xp.namespace(device)
    dt_x = _xp.check_dtype(xp, dtype)
    dtype_name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    R = len(seeds)
    d = runner0.d
    dt = scale.step(eta, d)
    steps = _checkpoint_steps(t_eval, dt, eta, d, scale.label)
    n_total = int(steps[-1])
    need = xp_memory_bytes(model, init, B, R, dtype_name, teacher)
    _check_memory(need, max_memory, xp, f"batch = {B}, d = {d}, L = {model.L} and {R} seed(s)")
    C, F, ident = _cov(model)
    gamma = float(model.weight_decay)
    n_obs = len(runner0.names)
    # on NumPy the products run in this process's BLAS: limited by the package's policy
    threads = compute_threads(blas_threads=blas_threads) if _xp.is_numpy(xp) else _nullcontext()
    with threads, _xp.device_context(device), _xp.quiet_fp(xp):
        step = cls(model, weights, xp, dt_x, R, C, teacher)
        sampler = _Sampler(xp, dt_x, seeds, F, ident, B, model.L, d)
        book = _Book(R, n_total, n_obs, steps.size)
        t0 = _time.perf_counter()
        with Progress(n_total, f"sgd {model.kind} d={d} B={B} ({device})", enabled=progress) as bar:
            for i, target in enumerate(steps):
                while book.done < target and book.alive.any():
                    n = int(min(_SYNC_STEPS, target - book.done))
                    ls, bads = [], []
                    for _ in range(n):
                        lsum, bad = step.step(sampler.draw(), eta, gamma, float(blowup))
                        ls.append(lsum)
                        bads.append(bad)
                    book.absorb(_xp.to_host(xp.stack(ls, axis=1)).astype(np.float64) / B,
                                _xp.to_host(xp.stack(bads, axis=1)))
                    bar.update(n)
                if not book.alive.any():
                    break
                for r in map(int, np.flatnonzero(book.alive)):
                    book.ys[r, :-1, i] = model.sgd_runner(step.host(r), order).observables()
                    book.recorded[r] = i + 1
            if book.alive.any():  # loss at the last checkpoint: one fresh batch, no update
                lsum, _ = step.step(sampler.draw(), 0.0, 0.0, math.inf, update=False)
                lh = _xp.to_host(lsum).astype(np.float64) / B
                for r in map(int, np.flatnonzero(book.alive)):
                    book.losses[r, n_total] = lh[r] if np.isfinite(lh[r]) else np.nan
        _xp.synchronize(xp)
        wall = _time.perf_counter() - t0
    out = []
    for r, ss in enumerate(seeds):
        out.append(_trajectory(model, runner0, ss, book.ys[r], book.losses[r], steps,
                               int(book.recorded[r]), int(book.status[r]),
                               int(book.fail_step[r]), dt, n_total, d, B, eta, gamma, blowup,
                               scale, wall, device, dtype_name, R, step.teacher_mode))
    if raise_on_failure:
        for res in out:
            if res.status != 0:
                raise IntegrationError(res.message)
    return out


def _trajectory(model: AttentionModel, runner0: SGDRunner, ss: np.random.SeedSequence,
                ys: np.ndarray, losses: np.ndarray, steps: np.ndarray, recorded: int,
                status: int, fail_step: int, dt: float, n_total: int, d: int, B: int,
                eta: float, gamma: float, blowup: float, scale: TimeScale, wall: float,
                device: str | None, dtype: str, R: int, teacher_mode: str | None
                ) -> Trajectory:
    """One seed's result, laid out as :func:`attndyn.sgd`'s (same rules for failures)."""
    ys = ys.copy()
    ys[-1, :recorded] = losses[steps[:recorded]]
    keep = np.zeros(steps.size, dtype=bool)
    keep[:recorded] = True
    if status != 0:
        keep &= steps < fail_step
    keep &= np.all(np.isfinite(ys), axis=0)
    if not np.all(keep[:recorded]) and status == 0:
        status = -3
        fail_step = int(steps[np.argmin(keep[:recorded])]) if recorded else 0
    first_bad = int(np.argmin(keep)) if not keep.all() else steps.size
    keep[first_bad:] = False
    ys = ys[:, keep]
    steps_kept = steps[keep]
    if status == 0:
        message = (f"success: {n_total} SGD steps (d = {d}, B = {B}, eta = {eta:g}), "
                   f"{steps.size} checkpoints up to t = {n_total * dt:.6g}")
    else:
        last = f"t = {steps_kept[-1] * dt:.6g}" if steps_kept.size else "none"
        message = (status_message(status, fail_step, blowup)
                   + f" (t = {fail_step * dt:.6g}); the trajectory keeps the checkpoints before "
                   f"the failure (last: {last})")
    params = model.params_dict()
    params.update({"d": d, "eta": eta, "batch": B, "gamma": gamma, "seed": _seed_record(ss),
                   "dt": dt, "n_steps": n_total, "blowup": float(blowup), "time": scale.label,
                   "backend": "array-api", "device": str(device), "dtype": dtype})
    params.update(runner0.params())
    words = None if runner0.words is None else [tuple(w) for w in runner0.words]
    return Trajectory(t=steps_kept * dt, y=ys, names=list(runner0.names), words=words,
                      kind="sgd", params=params, seed=_seed_record(ss), status=status,
                      message=message,
                      diagnostics={"steps": steps_kept, "wall_s": wall, "failed_step": fail_step,
                                   "model": model.kind, "backend": "array-api",
                                   "device": str(device), "dtype": dtype,
                                   "seeds_per_product": R, "teacher": teacher_mode},
                      inv=runner0.inv)


def xp_sgd(model: AttentionModel, init: Sequence[Any], *, eta: float, batch: int,
           t_eval: ArrayLike, rng: RngLike = None, seed: RngLike = None,
           order: int | None = None, time: str = "slow", device: str = "cpu",
           dtype: str = "float64", progress: bool | None = None, blowup: float = 1e6,
           raise_on_failure: bool = False, max_memory: float | None = None,
           teacher: str = "auto", blas_threads: int | None = None) -> Trajectory:
    """Finite-d online SGD through the array API (NumPy on ``device="cpu"``, CuPy on
    ``"cuda"``/``"cuda:N"``), equal in distribution to ``attndyn.sgd`` (numba).

    Same arguments, update rule (paper 003 eqs. 7-9 tied, 25 untied, 395 direct
    S), time scale, checkpoints, observables, failure statuses and result layout
    as :func:`attndyn.sgd`; the module docstring gives the step. Extra:

    device : {"cpu", "cuda", "cuda:N"}
        Refused with one line naming what is missing (CuPy, a CUDA device,
        array-api-compat) when it cannot be used.
    dtype : {"float64", "float32"}
        Arithmetic of the step (observables are computed in float64 on the host).
    teacher : {"auto", "S", "factors"}
        Untied only: a fixed teacher through ``S_k = U_k V_k^T`` (one ``d x d``
        product) or through its factors (two ``d x d_k`` products); ``"auto"``
        takes the one with fewer multiply-adds (``S`` when ``d < 2 d_k``).

    blas_threads : int or "auto", optional
        BLAS threads of the NumPy products (:func:`~attndyn.numeric.core.threads.compute_threads`:
        default ``ATTNDYN_BLAS_THREADS`` or 1).

    ``rng`` (alias ``seed``; both is an error): the package's rule
    (:func:`~attndyn.numeric.core.validate.resolve_rng`, SPEC 7): the same int or
    SeedSequence gives the same trajectory on the same device (bit for bit on NumPy), not
    the numba backend's; a Generator is a source of entropy and advances.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> init = attndyn.gaussian_init(model, 16, rng=0)
    >>> r = attndyn.xp_sgd(model, init, eta=0.01, batch=4, t_eval=[0.0, 0.1], rng=1, order=2)
    >>> r.status, r.names[:5]
    (0, ['mu_1', 'mu_2', 'q_11', 'q_12', 'q_22'])
    """
    ss = resolve_rng(rng, seed, name="xp_sgd")
    return _run(model, init, [ss], eta=eta, batch=batch, t_eval=t_eval, order=order, time=time,
                device=device, dtype=dtype, progress=progress, blowup=blowup,
                raise_on_failure=raise_on_failure, max_memory=max_memory, teacher=teacher,
                blas_threads=blas_threads)[0]


def xp_sgd_runs(model: AttentionModel, init: Sequence[Any], *, n_seeds: int,
                rng: RngLike = None, seed: RngLike = None, seeds_per_product: int | None = None,
                **kwargs: Any) -> list[Trajectory]:
    """``n_seeds`` independent :func:`xp_sgd` runs from the same ``init``, seeded by
    ``SeedSequence(rng).spawn(n_seeds)`` (as ``attndyn.numeric.sgd_runs``; ``rng``, alias
    ``seed``, by :func:`~attndyn.numeric.core.validate.resolve_rng`), run
    ``seeds_per_product`` at a time as one batched product. Default: one at a time on a
    CPU (batching measured 0.89-1.34x the per-seed time on one NumPy core, docs/sgd.md),
    on a GPU as many seeds as fit in a quarter of its free memory. A seed's trajectory
    does not depend on the grouping except through the products' rounding (none
    measured on NumPy: bit-identical).

    Each run is :func:`xp_sgd` (paper 003, eqs. 7, 25 or 395).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> init = attndyn.gaussian_init(model, 16, rng=0)
    >>> runs = attndyn.xp_sgd_runs(model, init, n_seeds=2, eta=0.01, batch=4, t_eval=[0.0, 0.1],
    ...                            rng=1)
    >>> len(runs), [r.status for r in runs]
    (2, [0, 0])
    """
    n_seeds = check_int(n_seeds, "n_seeds")
    kw = _defaults(kwargs)
    if seeds_per_product is None:
        xp = _xp.namespace(kw["device"])
        free = _xp.free_memory(xp)
        if _xp.is_numpy(xp) or free is None:
            seeds_per_product = 1
        else:
            one = xp_memory_bytes(model, init, kw["batch"], 1, kw["dtype"], kw["teacher"])
            seeds_per_product = int(max(1, min(n_seeds, (free // 4) // max(one, 1))))
    per = check_int(seeds_per_product, "seeds_per_product")
    children = resolve_rng(rng, seed, name="xp_sgd_runs").spawn(n_seeds)
    out = []
    for a in range(0, n_seeds, per):
        out += _run(model, init, children[a:a + per], **kw)
    return out


def _defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    allowed = {"eta", "batch", "t_eval", "order", "time", "device", "dtype", "progress", "blowup",
               "raise_on_failure", "max_memory", "teacher", "blas_threads"}
    extra = set(kwargs) - allowed
    if extra:
        raise TypeError(f"xp_sgd_runs got unexpected keyword arguments {sorted(extra)}")
    for req in ("eta", "batch", "t_eval"):
        if req not in kwargs:
            raise TypeError(f"xp_sgd_runs needs the keyword argument {req!r}")
    check_int(kwargs["batch"], "batch")
    out = {"order": None, "time": "slow", "device": "cpu", "dtype": "float64", "progress": None,
           "blowup": 1e6, "raise_on_failure": False, "max_memory": None, "teacher": "auto",
           "blas_threads": None}
    out.update(kwargs)
    return out
