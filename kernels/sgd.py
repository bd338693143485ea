"""Finite-d online SGD kernels for tied, untied and direct-S attention (numba).

Each kernel runs a block of ``n_steps`` mini-batch SGD steps entirely inside
numba: fresh Gaussian samples ``x ~ N(0, C (x) I_d)`` (one ``(B*L, d)`` block per
step, rows ``s*L + i`` = token ``i`` of sample ``s``), the pre-activations, the
per-sample loss and ``dL/dG`` through a compiled first-class function
(signature ``attndyn.kernels.rhs.VALGRAD_SIG``), the batch gradient, and the
update. The three large products of a step go to BLAS through ``np.dot``:

- tied (paper 003, eqs. 7-9): ``P = X @ [W_1 .. W_K]`` (student and teacher
  pre-activations), ``grad = X^T @ Y`` with ``Y_i = sum_j (D_ij + D_ji) P_j``;
  ``G_ijk = (x_i^T S_k x_j - C_ij Tr S_k)/sqrt(d)`` with ``S_k = W_k W_k^T``;
- untied (eq. 25): ``P = X @ [U | V]``, ``G_ijk = x_i^T U_k V_k^T x_j / sqrt(d)``;
- direct S (eq. 395): ``P = X @ [S_1 .. S_K]``,
  ``G_ijk = (x_i^T S_k x_j - C_ij Tr S_k)/sqrt(d)``.

Every update is ``theta <- theta - eta * (batch-mean gradient) - (eta*gamma/d) * theta``
on the trainable parameters only (the slots listed first). Each kernel stops
at the first non-finite loss (status -3) or at weights that are non-finite or
exceed ``blowup`` (status -4), and reports the step in ``info``; it never writes
the failed update into the loss record.

Random numbers come from xoshiro256** generators and a 256-layer ziggurat for
the normal distribution: ``N_LANES`` independent streams (a ``(N_LANES, 4)``
``uint64`` state drawn from one ``SeedSequence``), stream ``j`` filling the
samples ``[j B / N_LANES, (j+1) B / N_LANES)``. The per-sample work runs in
``N_CHUNKS`` fixed chunks of the batch and the update in fixed row chunks, all
under ``prange``, with the partial sums added in a fixed order. So a run is
bit-identical for a given seed whatever the number of threads and the block
sizes, and the non-BLAS part of a step scales with the cores like the products.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np
from numba import int64, njit, prange, types, uint64

from .rhs import VALGRAD_FTYPE

__all__ = [
    "STATUS", "status_message", "fill_normal", "standard_normal", "seed_state",
    "ziggurat_tables", "tied_steps", "untied_steps", "s_steps", "workspace", "draw_samples",
    "N_LANES", "N_CHUNKS",
]

# ---------------------------------------------------------------------------
# compilation on first use
#
# numba compiles a function given with its signature when it is decorated, so importing
# this module compiled the three parallel step kernels; that starts numba's threading layer
# (GNU OpenMP without TBB), and a worker forked from such a process aborts ("fork() called
# from a process already using GNU OpenMP"). Here every kernel keeps its one signature, but
# it is compiled (or loaded from numba's cache) when a step kernel is first called: ``_jit``
# records the signature on a lazy dispatcher, ``_entry`` wraps a step kernel called from
# Python, and ``_ensure_compiled`` compiles a kernel after the module's kernels it calls,
# each for its signature only (then closed to others, as numba does for given signatures).

_SIGS: dict = {}          # name -> (dispatcher, signature) of every kernel of this module
_COMPILE_LOCK = threading.RLock()


def _jit(sig, **opts):
    """``numba.njit(sig, **opts)``, compiled on first use instead of at import."""
    def deco(fn):
        disp = njit(**opts)(fn)
        _SIGS[fn.__name__] = (disp, sig)
        return disp
    return deco


def _ensure_compiled(name: str):
    """Compile kernel ``name`` for its signature, after the kernels of this module it calls
    (a jitted caller needs its callees typed); returns its dispatcher."""
    disp, sig = _SIGS[name]
    if sig.args in disp.overloads:
        return disp
    with _COMPILE_LOCK:
        for callee in disp.py_func.__code__.co_names:
            if callee in _SIGS and callee != name:
                _ensure_compiled(callee)
        if sig.args not in disp.overloads:
            disp.compile(sig)
            disp.disable_compile()
    return disp


class _Entry:
    """A step kernel called from Python: compiled for its signature at the first call. The
    compiled numba dispatcher is :meth:`dispatcher` (``signatures``, ``py_func``, ...)."""

    def __init__(self, name: str, py_func):
        self._name = name
        self._disp = None
        self.py_func = py_func
        functools.update_wrapper(self, py_func)

    def dispatcher(self):
        if self._disp is None:
            self._disp = _ensure_compiled(self._name)
        return self._disp

    def __call__(self, *args):
        disp = self._disp
        if disp is None:
            disp = self.dispatcher()
        return disp(*args)


def _entry(sig, **opts):
    """:func:`_jit` for a kernel called from Python only."""
    def deco(fn):
        _jit(sig, **opts)(fn)
        return _Entry(fn.__name__, fn)
    return deco


N_LANES = 32   # independent random streams per run (fixed: results do not depend on threads)
N_CHUNKS = 32  # chunks of the batch / of the weight rows for the parallel loops (fixed)

STATUS = {
    0: "success: SGD reached the last checkpoint",
    -3: "the loss became non-finite at step {step}: the learning rate is too large for this "
        "loss and scale; use a smaller learning rate (eta) or a larger batch",
    -4: "the weights became non-finite or larger than {blowup:.3g} at step {step}: SGD diverged; "
        "use a smaller learning rate (eta), a larger batch or weight decay",
    -9: "internal error: the kernel's workspace arrays have the wrong shapes",
}


def status_message(status: int, step: int, blowup: float = 0.0) -> str:
    return STATUS[int(status)].format(step=step, blowup=blowup)


# ---------------------------------------------------------------------------
# normal random numbers: xoshiro256** + ziggurat (Marsaglia & Tsang layout)

_ZIG_N = 256
# r solves the closing condition of the 256-layer normal ziggurat: the layer
# recursion x_{i+1} = f^{-1}(v/x_i + f(x_i)), x_1 = r, with the common area
# v = r f(r) + int_r^inf f, ends with a top layer of area v
# (checked by ``ziggurat_tables(check=True)`` and the tests).
_ZIG_R = 3.6541528853610088


def ziggurat_tables(r: float = _ZIG_R, check: bool = False):
    """Layer abscissae ``x[0..256]`` and ``f(x) = exp(-x^2/2)`` of the ziggurat.

    ``x[0] = v/f(r)`` (the base layer, tail included), ``x[1] = r``, decreasing
    to ``x[256] = 0``. With ``check=True`` also return the closing defect
    ``x[255] (1 - f(x[255])) - v`` (zero for the right ``r``).
    """
    f = lambda x: math.exp(-0.5 * x * x)  # noqa: E731
    v = r * f(r) + math.sqrt(math.pi / 2.0) * math.erfc(r / math.sqrt(2.0))
    x = np.zeros(_ZIG_N + 1)
    x[0] = v / f(r)
    x[1] = r
    for i in range(1, _ZIG_N - 1):
        x[i + 1] = math.sqrt(-2.0 * math.log(v / x[i] + f(x[i])))
    x[_ZIG_N] = 0.0
    fx = np.exp(-0.5 * x * x)
    if check:
        return x, fx, x[_ZIG_N - 1] * (1.0 - f(x[_ZIG_N - 1])) - v
    return x, fx


_ZX, _ZF = ziggurat_tables()
_M53 = 1.0 / 9007199254740992.0  # 2**-53

_u64_1 = types.uint64[::1]
_u64_2 = types.uint64[:, ::1]
_f64_1 = types.float64[::1]
_f64_2 = types.float64[:, ::1]
_i64_1 = types.int64[::1]


# ---------------------------------------------------------------------------
# reductions shared by the three step kernels (fixed order: bit-identical runs)

@_jit(types.float64(_f64_2), cache=True)
def _batch_loss_sum(parts):
    """Sum of the chunks' losses (column 0); NaN if a chunk flagged a non-finite loss."""
    lsum = 0.0
    for ch in range(parts.shape[0]):
        if parts[ch, 1] != 0.0:
            return math.nan
        lsum += parts[ch, 0]
    return lsum


@_jit(types.float64(_f64_2, types.int64), cache=True)
def _column_sum(parts, j):
    acc = 0.0
    for ch in range(parts.shape[0]):
        acc += parts[ch, j]
    return acc


@_jit(types.boolean(_f64_2, types.int64), cache=True)
def _any_flag(parts, j):
    for ch in range(parts.shape[0]):
        if parts[ch, j] != 0.0:
            return True
    return False


@_jit(types.void(_u64_1, _f64_1), cache=True)
def fill_normal(state, out):
    """Fill ``out`` with independent standard normals; advances ``state``."""
    zx = _ZX
    zf = _ZF
    r = _ZIG_R
    s0 = state[0]
    s1 = state[1]
    s2 = state[2]
    s3 = state[3]
    n = out.size
    j = 0
    while j < n:
        # xoshiro256** step
        t1 = s1 * uint64(5)
        res = ((t1 << uint64(7)) | (t1 >> uint64(57))) * uint64(9)
        t = s1 << uint64(17)
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = (s3 << uint64(45)) | (s3 >> uint64(19))
        i = int64(res & uint64(255))
        neg = (res & uint64(256)) != uint64(0)
        z = float(int64(res >> uint64(11))) * _M53 * zx[i]
        if z < zx[i + 1]:  # inside the layer's rectangle: accept (~99% of draws)
            out[j] = -z if neg else z
            j += 1
            continue
        if i == 0:  # base layer beyond r: sample the tail |z| > r
            while True:
                t1 = s1 * uint64(5)
                a = ((t1 << uint64(7)) | (t1 >> uint64(57))) * uint64(9)
                t = s1 << uint64(17)
                s2 ^= s0
                s3 ^= s1
                s1 ^= s2
                s0 ^= s3
                s2 ^= t
                s3 = (s3 << uint64(45)) | (s3 >> uint64(19))
                t1 = s1 * uint64(5)
                b = ((t1 << uint64(7)) | (t1 >> uint64(57))) * uint64(9)
                t = s1 << uint64(17)
                s2 ^= s0
                s3 ^= s1
                s1 ^= s2
                s0 ^= s3
                s2 ^= t
                s3 = (s3 << uint64(45)) | (s3 >> uint64(19))
                xx = -math.log(1.0 - float(int64(a >> uint64(11))) * _M53) / r
                yy = -math.log(1.0 - float(int64(b >> uint64(11))) * _M53)
                if 2.0 * yy > xx * xx:
                    break
            z = r + xx
            out[j] = -z if neg else z
            j += 1
            continue
        # wedge between the rectangle and the curve
        t1 = s1 * uint64(5)
        a = ((t1 << uint64(7)) | (t1 >> uint64(57))) * uint64(9)
        t = s1 << uint64(17)
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = (s3 << uint64(45)) | (s3 >> uint64(19))
        y = zf[i] + float(int64(a >> uint64(11))) * _M53 * (zf[i + 1] - zf[i])
        if y < math.exp(-0.5 * z * z):
            out[j] = -z if neg else z
            j += 1
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = s3


def seed_state(seed_sequence: np.random.SeedSequence, lanes: int = N_LANES) -> np.ndarray:
    """The ``(lanes, 4)`` xoshiro256** states drawn from a ``SeedSequence``
    (``lanes=1`` gives one stream, shape ``(4,)``)."""
    st = np.ascontiguousarray(seed_sequence.generate_state(4 * lanes, dtype=np.uint64)
                              .reshape(lanes, 4))
    for row in st:
        if not row.any():  # the all-zero state is the one fixed point of xoshiro
            row[0] = np.uint64(0x9E3779B97F4A7C15)
    return st[0].copy() if lanes == 1 else st


def standard_normal(state: np.ndarray, size: int) -> np.ndarray:
    """``size`` standard normals from one stream ``state`` (shape ``(4,)``, advanced)."""
    out = np.empty(int(size))
    _ensure_compiled("fill_normal")(state, out)
    return out


def workspace(B: int, L: int, d: int, n_cols: int, n_grad_cols: int) -> tuple:
    """The four work arrays of a kernel: samples ``X (B*L, d)``, products
    ``P (B*L, n_cols)``, gradient factors ``Y (B*L, n_grad_cols)`` and the
    gradient ``Gr (d, n_grad_cols)``."""
    BL = B * L
    return (np.empty((BL, d)), np.empty((BL, n_cols)), np.empty((BL, n_grad_cols)),
            np.empty((d, n_grad_cols)))


# ---------------------------------------------------------------------------
# samples x ~ N(0, C (x) I_d)

@_jit(types.void(_f64_2, types.int64, types.int64, types.int64, _f64_2, types.boolean, _u64_1),
      cache=True)
def _fill_samples(X, L, s0, s1, F, ident, state):
    """Samples ``s0..s1-1`` (rows ``s*L + i``): ``x_i = sum_m F_im z_m``, ``z`` standard."""
    d = X.shape[1]
    if s1 <= s0:
        return
    if ident:
        fill_normal(state, X[s0 * L:s1 * L].reshape((s1 - s0) * L * d))
        return
    z = np.empty(L * d)
    for s in range(s0, s1):
        fill_normal(state, z)
        for i in range(L):
            row = s * L + i
            for c in range(d):
                X[row, c] = 0.0
            for m in range(L):
                f = F[i, m]
                if f != 0.0:
                    for c in range(d):
                        X[row, c] += f * z[m * d + c]


@_jit(types.void(_f64_2, types.int64, _f64_2, types.boolean, _u64_2), parallel=True, cache=True)
def draw_samples(X, L, F, ident, states):
    """Fill ``X`` (``B*L`` rows) with one batch; stream ``j`` draws samples
    ``[j B / n, (j+1) B / n)`` with ``n = states.shape[0]``."""
    nl = states.shape[0]
    B = X.shape[0] // L
    for lane in prange(nl):
        _fill_samples(X, L, lane * B // nl, (lane + 1) * B // nl, F, ident, states[lane])


# ---------------------------------------------------------------------------
# tied: W_k (d x d_k), slots side by side in W, trainable first

_TIED_CHUNK_SIG = types.void(
    types.int64, types.int64, types.int64,   # s0, s1, K
    _f64_2, _f64_2,                          # P, Y
    _i64_1, _i64_1, types.int64,             # col, kidx, n_tr
    _f64_2, _f64_1, types.float64,           # C, trS, sqrt(d)
    VALGRAD_FTYPE, _f64_1, _f64_1,           # loss, its parameters, part (out)
)


@_jit(_TIED_CHUNK_SIG, cache=True)
def _tied_chunk(s0, s1, K, P, Y, col, kidx, n_tr, C, trS, sqd, lossfn, lparams, part):
    """Samples ``s0..s1-1``: pre-activations, loss, gradient factors ``Y``.
    ``part = [loss sum, non-finite flag, sum_s sum_ij D_ijk C_ij per trainable slot]``."""
    L = C.shape[0]
    ns = kidx.size
    gvec = np.zeros(L * L * K)
    dvec = np.zeros(L * L * K)
    cm = np.empty((L, L))
    for a in range(n_tr):
        part[2 + a] = 0.0
    lsum = 0.0
    part[1] = 0.0
    for s in range(s0, s1):
        base = s * L
        for a in range(ns):
            k = kidx[a]
            for i in range(L):
                for j in range(i, L):
                    acc = 0.0
                    for c in range(col[a], col[a + 1]):
                        acc += P[base + i, c] * P[base + j, c]
                    g = (acc - C[i, j] * trS[a]) / sqd
                    gvec[(i * L + j) * K + k] = g
                    gvec[(j * L + i) * K + k] = g
        val = lossfn(gvec, lparams, dvec)
        if not math.isfinite(val):
            part[1] = 1.0
            break
        lsum += val
        for a in range(n_tr):
            k = kidx[a]
            cs = 0.0
            for i in range(L):
                for j in range(L):
                    dij = dvec[(i * L + j) * K + k]
                    cm[i, j] = dij + dvec[(j * L + i) * K + k]
                    cs += dij * C[i, j]
            part[2 + a] += cs
            for i in range(L):
                row = base + i
                for c in range(col[a], col[a + 1]):
                    Y[row, c] = 0.0
                for j in range(L):
                    cij = cm[i, j]
                    if cij != 0.0:
                        for c in range(col[a], col[a + 1]):
                            Y[row, c] += cij * P[base + j, c]
    part[0] = lsum


_SLOT_UPDATE_SIG = types.void(
    types.int64, types.int64, _f64_2, _f64_2,   # r0, r1, W, Gr
    _i64_1, types.int64, _f64_1,                # col, n_tr, shrink per slot
    types.float64, types.float64, _f64_1,       # scale, blowup, part (out)
)


@_jit(_SLOT_UPDATE_SIG, cache=True)
def _tied_update(r0, r1, W, Gr, col, n_tr, shrink, scale, blowup, part):
    """Rows ``r0..r1-1``: ``W = shrink_a W - scale Gr`` on the trainable slots.
    ``part = [sum of the new W^2 per trainable slot, bad flag]``."""
    bad = 0.0
    for a in range(n_tr):
        acc = 0.0
        sh = shrink[a]
        for r in range(r0, r1):
            for c in range(col[a], col[a + 1]):
                w = sh * W[r, c] - scale * Gr[r, c]
                W[r, c] = w
                acc += w * w
                if not abs(w) <= blowup:
                    bad = 1.0
        part[a] = acc
    part[n_tr] = bad


TIED_SIG = types.void(
    _f64_2,          # W (d, D): the factors W_k side by side, trainable slots first
    _i64_1,          # col (n_slots + 1): column offsets of the slots
    _i64_1,          # kidx (n_slots): model index k of each slot
    types.int64,     # n_tr: the first n_tr slots are trainable
    _f64_2,          # C (L, L)
    _f64_2,          # F (L, L), C = F F^T
    types.boolean,   # C is the identity
    types.float64,   # eta
    types.float64,   # gamma (weight decay)
    types.int64,     # B (batch)
    types.int64,     # n_steps
    VALGRAD_FTYPE,   # lossfn(G, p, dG) -> loss
    _f64_1,          # loss parameters
    _u64_2,          # rng states (N_LANES, 4)
    types.float64,   # blowup
    _f64_1,          # losses (n_steps): batch-mean loss before each step
    _i64_1,          # info (2): status, steps done
    _f64_2, _f64_2, _f64_2, _f64_2,  # workspace X (B*L, d), P (B*L, D), Y (B*L, Dtr), Gr (d, Dtr)
)


@_entry(TIED_SIG, parallel=True, cache=True)
def tied_steps(W, col, kidx, n_tr, C, F, ident, eta, gamma, B, n_steps, lossfn, lparams,
               states, blowup, losses, info, X, P, Y, Gr):
    """``n_steps`` tied online-SGD steps (paper 003, eq. 7), in place on ``W``.

    The workspace arrays are allocated once per run by the caller (fresh
    multi-megabyte buffers on every call would cost page faults).
    """
    d = W.shape[0]
    ns = kidx.size
    L = C.shape[0]
    K = 0
    for a in range(ns):
        K = max(K, kidx[a] + 1)
    Dtr = col[n_tr]
    info[0] = 0
    info[1] = 0
    if (X.shape[0] != B * L or X.shape[1] != d or P.shape[0] != B * L or P.shape[1] != W.shape[1]
            or Y.shape[0] != B * L or Y.shape[1] != Dtr or Gr.shape[0] != d or Gr.shape[1] != Dtr
            or col.size != ns + 1 or col[ns] != W.shape[1] or states.shape[1] != 4):
        info[0] = -9
        return
    nch = min(N_CHUNKS, B)
    nrc = min(N_CHUNKS, d)
    parts = np.zeros((nch, 2 + n_tr))
    uparts = np.zeros((nrc, n_tr + 1))
    trS = np.empty(ns)
    shrink = np.empty(n_tr)
    sqd = math.sqrt(d)
    for a in range(ns):  # teachers' traces are constant; students' are updated below
        acc = 0.0
        for r in range(d):
            for c in range(col[a], col[a + 1]):
                acc += W[r, c] * W[r, c]
        trS[a] = acc
    for step in range(n_steps):
        draw_samples(X, L, F, ident, states)
        np.dot(X, W, P)
        for ch in prange(nch):
            _tied_chunk(ch * B // nch, (ch + 1) * B // nch, K, P, Y, col, kidx, n_tr, C, trS,
                        sqd, lossfn, lparams, parts[ch])
        lsum = _batch_loss_sum(parts)
        if not math.isfinite(lsum):
            info[0] = -3
            info[1] = step
            return
        losses[step] = lsum / B
        if Dtr > 0:
            np.dot(X.T, Y, Gr)
        for a in range(n_tr):
            shrink[a] = 1.0 - eta * gamma / d + 2.0 * eta * _column_sum(parts, 2 + a) / (B * sqd)
        scale = eta / (B * sqd)
        for rc in prange(nrc):
            _tied_update(rc * d // nrc, (rc + 1) * d // nrc, W, Gr, col, n_tr, shrink, scale,
                         blowup, uparts[rc])
        for a in range(n_tr):
            trS[a] = _column_sum(uparts, a)
        ok = not _any_flag(uparts, n_tr)
        info[1] = step + 1
        if not ok:
            info[0] = -4
            info[1] = step
            return


# ---------------------------------------------------------------------------
# untied: U_k, V_k (d x d_k); W = [U_tr | V_tr | U_fixed | V_fixed]

_UNTIED_CHUNK_SIG = types.void(
    types.int64, types.int64, types.int64,   # s0, s1, K
    _f64_2, _f64_2,                          # P, Y
    _i64_1, _i64_1, _i64_1, _i64_1, types.int64,   # uoff, voff, width, kidx, n_tr
    types.int64, types.float64,              # L, sqrt(d)
    VALGRAD_FTYPE, _f64_1, _f64_1,           # loss, its parameters, part (out)
)


@_jit(_UNTIED_CHUNK_SIG, cache=True)
def _untied_chunk(s0, s1, K, P, Y, uoff, voff, width, kidx, n_tr, L, sqd, lossfn, lparams,
                  part):
    """Samples ``s0..s1-1`` of the untied step; ``part = [loss sum, non-finite flag]``."""
    ns = kidx.size
    gvec = np.zeros(L * L * K)
    dvec = np.zeros(L * L * K)
    lsum = 0.0
    part[1] = 0.0
    for s in range(s0, s1):
        base = s * L
        for a in range(ns):
            k = kidx[a]
            u0 = uoff[a]
            v0 = voff[a]
            for i in range(L):
                for j in range(L):
                    acc = 0.0
                    for c in range(width[a]):
                        acc += P[base + i, u0 + c] * P[base + j, v0 + c]
                    gvec[(i * L + j) * K + k] = acc / sqd
        val = lossfn(gvec, lparams, dvec)
        if not math.isfinite(val):
            part[1] = 1.0
            break
        lsum += val
        for a in range(n_tr):
            k = kidx[a]
            u0 = uoff[a]
            v0 = voff[a]
            for i in range(L):
                row = base + i
                for c in range(width[a]):
                    Y[row, u0 + c] = 0.0
                    Y[row, v0 + c] = 0.0
            for i in range(L):
                for j in range(L):
                    dij = dvec[(i * L + j) * K + k]
                    if dij != 0.0:
                        # dG_ij/dU = x_i (V^T x_j)^T, dG_ij/dV = x_j (U^T x_i)^T
                        for c in range(width[a]):
                            Y[base + i, u0 + c] += dij * P[base + j, v0 + c]
                            Y[base + j, v0 + c] += dij * P[base + i, u0 + c]
    part[0] = lsum


@_jit(types.void(types.int64, types.int64, _f64_2, _f64_2, types.int64, types.float64,
                 types.float64, types.float64, _f64_1), cache=True)
def _uniform_update(r0, r1, W, Gr, ncols, shrink, scale, blowup, part):
    """Rows ``r0..r1-1``: ``W[:, :ncols] = shrink W - scale Gr``; ``part[0]`` = bad flag."""
    bad = 0.0
    for r in range(r0, r1):
        for c in range(ncols):
            w = shrink * W[r, c] - scale * Gr[r, c]
            W[r, c] = w
            if not abs(w) <= blowup:
                bad = 1.0
    part[0] = bad


UNTIED_SIG = types.void(
    _f64_2,          # W (d, 2D): U and V columns (trainable U, trainable V, fixed U, fixed V)
    _i64_1,          # uoff (n_slots): first U column of each slot
    _i64_1,          # voff (n_slots): first V column of each slot
    _i64_1,          # width (n_slots): d_k
    _i64_1,          # kidx (n_slots)
    types.int64,     # n_tr (trainable slots first; their U, V fill the first 2*Dtr columns)
    _f64_2, _f64_2, types.boolean,            # C, F, identity flag
    types.float64, types.float64,             # eta, gamma
    types.int64, types.int64,                 # B, n_steps
    VALGRAD_FTYPE, _f64_1, _u64_2,            # loss, its parameters, rng states
    types.float64, _f64_1, _i64_1,            # blowup, losses, info
    _f64_2, _f64_2, _f64_2, _f64_2,  # workspace X (B*L, d), P (B*L, 2D), Y (B*L, 2Dtr), Gr (d, 2Dtr)
)


@_entry(UNTIED_SIG, parallel=True, cache=True)
def untied_steps(W, uoff, voff, width, kidx, n_tr, C, F, ident, eta, gamma, B, n_steps,
                 lossfn, lparams, states, blowup, losses, info, X, P, Y, Gr):
    """``n_steps`` untied online-SGD steps (paper 003, eq. 25), in place on ``W``."""
    d = W.shape[0]
    ns = kidx.size
    L = C.shape[0]
    K = 0
    for a in range(ns):
        K = max(K, kidx[a] + 1)
    Dtr2 = 0
    for a in range(n_tr):
        Dtr2 += 2 * width[a]
    info[0] = 0
    info[1] = 0
    if (X.shape[0] != B * L or X.shape[1] != d or P.shape[0] != B * L or P.shape[1] != W.shape[1]
            or Y.shape[0] != B * L or Y.shape[1] != Dtr2 or Gr.shape[0] != d
            or Gr.shape[1] != Dtr2 or states.shape[1] != 4):
        info[0] = -9
        return
    for a in range(ns):
        if (uoff[a] < 0 or voff[a] < 0 or uoff[a] + width[a] > W.shape[1]
                or voff[a] + width[a] > W.shape[1] or (a < n_tr and (uoff[a] + width[a] > Dtr2
                                                                     or voff[a] + width[a] > Dtr2))):
            info[0] = -9
            return
    nch = min(N_CHUNKS, B)
    nrc = min(N_CHUNKS, d)
    parts = np.zeros((nch, 2))
    uparts = np.zeros((nrc, 1))
    sqd = math.sqrt(d)
    for step in range(n_steps):
        draw_samples(X, L, F, ident, states)
        np.dot(X, W, P)
        for ch in prange(nch):
            _untied_chunk(ch * B // nch, (ch + 1) * B // nch, K, P, Y, uoff, voff, width, kidx,
                          n_tr, L, sqd, lossfn, lparams, parts[ch])
        lsum = _batch_loss_sum(parts)
        if not math.isfinite(lsum):
            info[0] = -3
            info[1] = step
            return
        losses[step] = lsum / B
        if Dtr2 > 0:
            np.dot(X.T, Y, Gr)
        scale = eta / (B * sqd)
        shrink = 1.0 - eta * gamma / d
        for rc in prange(nrc):
            _uniform_update(rc * d // nrc, (rc + 1) * d // nrc, W, Gr, Dtr2, shrink, scale, blowup,
                            uparts[rc])
        ok = not _any_flag(uparts, 0)
        info[1] = step + 1
        if not ok:
            info[0] = -4
            info[1] = step
            return


# ---------------------------------------------------------------------------
# direct S: S_k (d x d) side by side, trainable first

_S_CHUNK_SIG = types.void(
    types.int64, types.int64, types.int64,   # s0, s1, K
    _f64_2, _f64_2, _f64_2,                  # X, P, Y
    _i64_1, types.int64,                     # kidx, n_tr
    _f64_2, _f64_1, types.float64,           # C, trS, sqrt(d)
    VALGRAD_FTYPE, _f64_1, _f64_1,           # loss, its parameters, part (out)
)


@_jit(_S_CHUNK_SIG, cache=True)
def _s_chunk(s0, s1, K, X, P, Y, kidx, n_tr, C, trS, sqd, lossfn, lparams, part):
    """Samples ``s0..s1-1`` of the direct-S step.
    ``part = [loss sum, non-finite flag, sum_s sum_ij D_ijk C_ij per trainable slot]``."""
    L = C.shape[0]
    ns = kidx.size
    d = X.shape[1]
    gvec = np.zeros(L * L * K)
    dvec = np.zeros(L * L * K)
    for a in range(n_tr):
        part[2 + a] = 0.0
    lsum = 0.0
    part[1] = 0.0
    for s in range(s0, s1):
        base = s * L
        for a in range(ns):
            k = kidx[a]
            o = a * d
            for i in range(L):
                for j in range(L):
                    acc = 0.0
                    for c in range(d):
                        acc += P[base + i, o + c] * X[base + j, c]
                    gvec[(i * L + j) * K + k] = (acc - C[i, j] * trS[a]) / sqd
        val = lossfn(gvec, lparams, dvec)
        if not math.isfinite(val):
            part[1] = 1.0
            break
        lsum += val
        for a in range(n_tr):
            k = kidx[a]
            o = a * d
            cs = 0.0
            for i in range(L):
                row = base + i
                for c in range(d):
                    Y[row, o + c] = 0.0
                for j in range(L):
                    dij = dvec[(i * L + j) * K + k]
                    cs += dij * C[i, j]
                    if dij != 0.0:
                        # dG_ij/dS = (x_i x_j^T - C_ij I)/sqrt(d)
                        for c in range(d):
                            Y[row, o + c] += dij * X[base + j, c]
            part[2 + a] += cs
    part[0] = lsum


@_jit(types.void(types.int64, types.int64, _f64_2, _f64_2, types.int64, types.float64,
                 types.float64, _f64_1, types.float64, _f64_1), cache=True)
def _s_update(r0, r1, S, Gr, n_tr, shrink, scale, diag, blowup, part):
    """Rows ``r0..r1-1``: ``S_a = shrink S_a - scale Gr_a + diag_a I``; ``part[0]`` = bad flag."""
    d = S.shape[0]
    bad = 0.0
    for a in range(n_tr):
        o = a * d
        for r in range(r0, r1):
            for c in range(d):
                w = shrink * S[r, o + c] - scale * Gr[r, o + c]
                if r == c:
                    w += diag[a]
                S[r, o + c] = w
                if not abs(w) <= blowup:
                    bad = 1.0
    part[0] = bad


S_SIG = types.void(
    _f64_2,          # S (d, n_slots*d): S_k side by side, trainable slots first
    _i64_1,          # kidx (n_slots)
    types.int64,     # n_tr
    _f64_2, _f64_2, types.boolean,            # C, F, identity flag
    types.float64, types.float64,             # eta, gamma
    types.int64, types.int64,                 # B, n_steps
    VALGRAD_FTYPE, _f64_1, _u64_2,            # loss, its parameters, rng states
    types.float64, _f64_1, _i64_1,            # blowup, losses, info
    _f64_2, _f64_2, _f64_2, _f64_2,  # workspace X (B*L, d), P (B*L, ns*d), Y (B*L, ntr*d), Gr (d, ntr*d)
)


@_entry(S_SIG, parallel=True, cache=True)
def s_steps(S, kidx, n_tr, C, F, ident, eta, gamma, B, n_steps, lossfn, lparams, states,
            blowup, losses, info, X, P, Y, Gr):
    """``n_steps`` online-SGD steps directly on ``S_k`` (paper 003, eq. 395), in place."""
    d = S.shape[0]
    ns = kidx.size
    L = C.shape[0]
    K = 0
    for a in range(ns):
        K = max(K, kidx[a] + 1)
    info[0] = 0
    info[1] = 0
    if (S.shape[1] != ns * d or X.shape[0] != B * L or X.shape[1] != d or P.shape[0] != B * L
            or P.shape[1] != ns * d or Y.shape[0] != B * L or Y.shape[1] != n_tr * d
            or Gr.shape[0] != d or Gr.shape[1] != n_tr * d or states.shape[1] != 4):
        info[0] = -9
        return
    nch = min(N_CHUNKS, B)
    nrc = min(N_CHUNKS, d)
    parts = np.zeros((nch, 2 + n_tr))
    uparts = np.zeros((nrc, 1))
    trS = np.empty(ns)
    diag = np.empty(n_tr)
    sqd = math.sqrt(d)
    for step in range(n_steps):
        draw_samples(X, L, F, ident, states)
        for a in range(ns):
            acc = 0.0
            for r in range(d):
                acc += S[r, a * d + r]
            trS[a] = acc
        np.dot(X, S, P)
        for ch in prange(nch):
            _s_chunk(ch * B // nch, (ch + 1) * B // nch, K, X, P, Y, kidx, n_tr, C, trS, sqd,
                     lossfn, lparams, parts[ch])
        lsum = _batch_loss_sum(parts)
        if not math.isfinite(lsum):
            info[0] = -3
            info[1] = step
            return
        losses[step] = lsum / B
        if n_tr > 0:
            np.dot(X.T, Y, Gr)
        for a in range(n_tr):
            diag[a] = eta * _column_sum(parts, 2 + a) / (B * sqd)
        scale = eta / (B * sqd)
        shrink = 1.0 - eta * gamma / d
        for rc in prange(nrc):
            _s_update(rc * d // nrc, (rc + 1) * d // nrc, S, Gr, n_tr, shrink, scale, diag,
                      blowup, uparts[rc])
        ok = not _any_flag(uparts, 0)
        info[1] = step + 1
        if not ok:
            info[0] = -4
            info[1] = step
            return
