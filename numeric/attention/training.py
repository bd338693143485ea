"""Finite-d online SGD on attention-indexed models, with the theory's observables.

:func:`sgd` runs mini-batch online SGD with fresh samples ``x ~ N(0, C (x) I_d)``
at every step on a :class:`~attndyn.TiedModel` (factors ``W_k``), an
:class:`~attndyn.UntiedModel` (pairs ``(U_k, V_k)``) or an
:class:`~attndyn.SModel` (matrices ``S_k``), and records at checkpoints the same
observables as the theory, under the same names.

Time mapping (``n`` = number of mini-batch steps, each with ``B`` samples and
the batch-mean gradient; the batch size does not enter the time, it only
divides the noise):

==========  =================================  ==========================
model       update                              ODE time
==========  =================================  ==========================
tied        ``W <- W - eta g - (eta gamma/d) W``  ``t = 4 eta n / d``
direct S    ``S <- S - eta (g + (gamma/d) S)``     ``tau = eta n / d``
untied      ``U, V <- ... - (eta gamma/d) U, V``  slow ``tau = eta n / d``;
                                                    fast ``t = eta n``
==========  =================================  ==========================

Checkpoint times ``t_eval`` are rounded to whole steps, ``n_i = round(t_i / dt)``,
and the result reports the exact times ``n_i * dt``. The residual against the
deterministic flow is the second-order (noise) term of the update and scales
like ``eta * d / B`` (MATH.md).

Observables:

- tied: the normalised traces of every canonical word up to ``order`` (names
  ``mu_1``, ``q_12``, ``mu_112`` as in the hierarchy), the structural overlaps
  ``p_kl = q_kl - t_k t_l`` (eq. 15, ``k <= l``) and ``loss``;
- untied: ``m_k``, ``tA_k``, ``tB_k``, ``q1_kl``, ``q2_kl`` and the words over
  ``{M, M^T, A, B}`` up to ``order`` (names ``mu_M1_Mt2``...), and ``loss``;
- direct S: ``t_k``, ``Psi_kl``, ``Omega_kl``, ``p_Psi_kl``, ``p_Omega_kl``,
  ``p_plus_kl``, ``p_minus_kl`` (eqs. 406-408) and ``loss``.

``loss`` is the population-loss estimate at the checkpoint: the mean loss of
the ``B`` fresh samples of the step taken from there (before its update), an
unbiased estimate of ``Phi`` at the checkpoint's weights.

Seeds: ``seed`` is anything ``numpy.random.SeedSequence`` accepts (or a
``SeedSequence``, or the dict stored in ``result.seed``); the same seed gives a
bit-identical trajectory. :func:`sgd_runs` spawns independent seeds with
``SeedSequence.spawn``.
"""

from __future__ import annotations

import math
import time as _time
import weakref
from contextlib import contextmanager

import numpy as np

from attndyn.kernels import sgd as _k
from attndyn.kernels.moments import word_traces
from attndyn.symbolic.lossgrad import loss_gradient
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

from ..core.compile import load_generated
from .tied import TiedModel, check_t_eval
from ..core.progress import Progress
from ..core.results import IntegrationError, Trajectory
from .direct import SModel, obs_key, s_observable_names, s_observables
from .untied import UntiedModel

__all__ = ["sgd", "sgd_runs", "gaussian_init", "resolve_seed", "seed_record", "time_step",
           "compiled_loss", "tied_observable_names"]

_LOSS_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------------
# argument checks

def _check_eta(eta) -> float:
    if isinstance(eta, bool) or not isinstance(eta, (int, float, np.integer, np.floating)):
        raise TypeError(f"eta (learning rate) must be a real number > 0, got {eta!r}")
    eta = float(eta)
    if not math.isfinite(eta) or eta <= 0:
        raise ValueError(f"eta (learning rate) must be a finite number > 0, got {eta}")
    return eta


def _check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
        raise TypeError(f"batch must be an int >= 1, got {batch!r}")
    if batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch}")
    return int(batch)


def _check_order(order, default) -> int:
    if order is None:
        return default
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"order must be an int >= 1, got {order!r}")
    if order < 1:
        raise ValueError(f"order must be an int >= 1, got {order}")
    return int(order)


def _model_kind(model) -> str:
    if isinstance(model, TiedModel):
        return "tied"
    if isinstance(model, UntiedModel):
        return "untied"
    if isinstance(model, SModel):
        return "s"
    raise TypeError(f"model must be a TiedModel, UntiedModel or SModel, got {type(model).__name__}")


def _check_factor_list(model, init, name="init") -> list:
    """Tied factors ``W_k``: ``d x d_k`` arrays with a common ``d >= 2``."""
    try:
        mats = [np.asarray(w, dtype=np.float64) for w in init]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a list of K = {model.K} arrays W_k (d x d_k)") from None
    if len(mats) != model.K:
        raise ValueError(f"{name} must hold K = {model.K} factors W_k, got {len(mats)}")
    out = []
    d = None
    for k, w in enumerate(mats):
        if w.ndim == 1:
            w = w[:, None]
        if w.ndim != 2 or w.shape[1] < 1:
            raise ValueError(f"{name}[{k}] must be a d x d_k array (d_k >= 1), got shape {w.shape}")
        if d is None:
            d = w.shape[0]
        if w.shape[0] != d:
            raise ValueError(f"{name}[{k}] must have d = {d} rows like {name}[0], got shape "
                             f"{w.shape}")
        if not np.all(np.isfinite(w)):
            raise ValueError(f"{name}[{k}] must be finite")
        out.append(w)
    if d < 2:
        raise ValueError(f"{name}: the dimension d must be >= 2, got {d}")
    return out


# ---------------------------------------------------------------------------
# seeds

def resolve_seed(seed) -> np.random.SeedSequence:
    """A ``SeedSequence`` from ``None`` (fresh entropy), an int, a sequence of ints,
    a ``SeedSequence`` or a dict ``{"entropy": ..., "spawn_key": [...]}``."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, dict):
        try:
            return np.random.SeedSequence(seed["entropy"], spawn_key=tuple(seed.get("spawn_key", ())))
        except (KeyError, TypeError, ValueError):
            raise ValueError("seed dict must be {'entropy': int, 'spawn_key': [ints]}") from None
    if isinstance(seed, (bool, float)) or isinstance(seed, np.random.Generator):
        raise TypeError("seed must be None, an int >= 0, a sequence of ints or a SeedSequence")
    try:
        return np.random.SeedSequence(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid seed {seed!r}: {exc}") from None


def seed_record(ss: np.random.SeedSequence) -> dict:
    """JSON-able record of a ``SeedSequence``; :func:`resolve_seed` rebuilds it."""
    ent = ss.entropy
    ent = [int(e) for e in ent] if isinstance(ent, (list, tuple, np.ndarray)) else int(ent)
    return {"entropy": ent, "spawn_key": [int(k) for k in ss.spawn_key]}


# ---------------------------------------------------------------------------
# compiled loss

def compiled_loss(model):
    """``(LossGradient, compiled lossgrad, parameter vector)`` of a model's loss."""
    ent = _LOSS_CACHE.get(model)
    if ent is None:
        loss = getattr(model, "loss", None)
        if loss is None:
            raise ValueError("SGD needs the model's loss callable (this model was built from a "
                             "numeric potential only)")
        import sympy as sp
        psyms = [sp.Symbol(str(k), real=True) for k in model.params]
        lg = loss_gradient(loss, model.K, model.L, params=psyms)
        fn = load_generated(lg.numba_source("lossgrad"), "lossgrad")
        p = np.array([float(v) for v in model.params.values()], dtype=np.float64)
        ent = (lg, fn, p)
        _LOSS_CACHE[model] = ent
    return ent


def _cov_factor(model):
    C = np.array(model.C.evalf(), dtype=np.float64)
    L = C.shape[0]
    ident = bool(np.array_equal(C, np.eye(L)))
    lam, V = np.linalg.eigh(C)
    F = np.ascontiguousarray(V * np.sqrt(np.clip(lam, 0.0, None)))
    return np.ascontiguousarray(C), F, ident


def time_step(model, eta: float, d: int, time: str = "slow") -> float:
    """ODE time per SGD step: tied ``4 eta/d``; S ``eta/d``; untied ``eta/d`` (slow)
    or ``eta`` (fast)."""
    kind = _model_kind(model)
    if kind == "tied":
        return 4.0 * eta / d
    if kind == "s":
        return eta / d
    if time == "slow":
        return eta / d
    if time == "fast":
        return eta
    raise ValueError(f"time must be 'slow' or 'fast', got {time!r}")


# ---------------------------------------------------------------------------
# initial conditions

def gaussian_init(model, d: int, *, width=None, scale=1.0, seed=None, symmetric: bool = False):
    """Independent Gaussian initial weights (a seeded initialisation).

    - tied: ``W_k`` of shape ``(d, d_k)``, entries ``N(0, scale_k^2/d_k)``, so
      ``t_k ~ scale_k^2``;
    - untied: pairs ``(U_k, V_k)``, entries ``N(0, scale_k^2/d_k)``
      (``tA_k ~ tB_k ~ scale_k^2``, ``m_k = O(d^-1/2)``);
    - direct S: ``S_k`` with entries ``N(0, scale_k^2/d)`` (``Omega_kk ~ scale_k^2``,
      ``t_k, Psi_kk = O(1/d)``), symmetrised (``Psi = Omega``) with ``symmetric=True``.

    ``width`` (``d_k``, default ``d``) and ``scale`` are numbers or per-index
    sequences. Independent inits are uninformative (structural overlaps
    ``O(1/d)``).
    """
    kind = _model_kind(model)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    d = int(d)
    K = model.K

    def per(x, name, cast):
        vals = list(x) if isinstance(x, (list, tuple, np.ndarray)) else [x] * K
        if len(vals) != K:
            raise ValueError(f"{name} must be a number or K = {K} numbers")
        return [cast(v) for v in vals]
    widths = per(d if width is None else width, "width", int)
    if any(w < 1 for w in widths):
        raise ValueError(f"width must be >= 1, got {widths}")
    scales = per(scale, "scale", float)
    if any(not math.isfinite(s) or s < 0 for s in scales):
        raise ValueError(f"scale must be finite and >= 0, got {scales}")
    rng = np.random.default_rng(resolve_seed(seed))
    out = []
    for k in range(K):
        if kind == "tied":
            out.append(rng.standard_normal((d, widths[k])) * (scales[k] / math.sqrt(widths[k])))
        elif kind == "untied":
            sd = scales[k] / math.sqrt(widths[k])
            out.append((rng.standard_normal((d, widths[k])) * sd,
                        rng.standard_normal((d, widths[k])) * sd))
        else:
            S = rng.standard_normal((d, d)) * (scales[k] / math.sqrt(d))
            if symmetric:
                S = (S + S.T) / math.sqrt(2.0)
            out.append(S)
    return out


# ---------------------------------------------------------------------------
# observables

def tied_observable_names(K: int, words) -> list:
    names = [word_label(w, K) for w in words]
    if any(len(w) == 2 for w in words):
        names += [obs_key("p", k, l) for k in range(K) for l in range(k, K)]
    return names + ["loss"]


def _tied_derived(K, words, vals):
    """Append ``p_kl = q_kl - t_k t_l`` to a vector of word traces."""
    idx = {tuple(w): i for i, w in enumerate(words)}
    if not any(len(w) == 2 for w in words):
        return vals
    t = np.array([vals[idx[(k,)]] for k in range(K)])
    p = [vals[idx[(k, l)]] - t[k] * t[l] for k in range(K) for l in range(k, K)]
    return np.concatenate([vals, p])


class _Runner:
    """One SGD run: arrays laid out for a kernel, a block stepper, observables."""

    def observables(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


class _TiedRunner(_Runner):
    def __init__(self, model, init, order):
        Ws = _check_factor_list(model, init)
        self.model = model
        self.d = Ws[0].shape[0]
        self.widths = [w.shape[1] for w in Ws]
        tr = list(model.trainable)
        self.slots = tr + [k for k in range(model.K) if k not in tr]
        col = np.zeros(len(self.slots) + 1, dtype=np.int64)
        for a, k in enumerate(self.slots):
            col[a + 1] = col[a] + self.widths[k]
        self.col = col
        self.kidx = np.array(self.slots, dtype=np.int64)
        self.n_tr = len(tr)
        self.W = np.ascontiguousarray(np.hstack([Ws[k] for k in self.slots]))
        self.words = canonical_words(order, model.alphabet)
        self.names = tied_observable_names(model.K, self.words)
        self.macs = self.W.shape[1] + col[self.n_tr]

    def factor(self, k):
        a = self.slots.index(k)
        return self.W[:, self.col[a]:self.col[a + 1]]

    def workspace(self, B, L):
        return _k.workspace(B, L, self.d, self.W.shape[1], int(self.col[self.n_tr]))

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        _k.tied_steps(self.W, self.col, self.kidx, self.n_tr, C, F, ident, eta, gamma, B, n,
                      lossfn, lp, state, blowup, losses, info, *ws)

    def observables(self):
        K = self.model.K
        S = []
        for k in range(K):
            Wk = self.factor(k)
            S.append(Wk @ Wk.T)
        vals = word_traces(S, self.words)
        return _tied_derived(K, self.words, vals)


class _UntiedRunner(_Runner):
    def __init__(self, model, init, order):
        pairs = model.check_factors(init)
        self.model = model
        self.d = pairs[0][0].shape[0]
        self.widths = [U.shape[1] for U, _ in pairs]
        tr = list(model.trainable)
        fixed = [k for k in range(model.K) if k not in tr]
        self.slots = tr + fixed
        ns = len(self.slots)
        uoff = np.zeros(ns, dtype=np.int64)
        voff = np.zeros(ns, dtype=np.int64)
        cols = []
        pos = 0
        for group in (tr, fixed):  # [U_tr | V_tr | U_fixed | V_fixed]
            for k in group:
                uoff[self.slots.index(k)] = pos
                cols.append(pairs[k][0])
                pos += self.widths[k]
            for k in group:
                voff[self.slots.index(k)] = pos
                cols.append(pairs[k][1])
                pos += self.widths[k]
        self.uoff, self.voff = uoff, voff
        self.width = np.array([self.widths[k] for k in self.slots], dtype=np.int64)
        self.kidx = np.array(self.slots, dtype=np.int64)
        self.n_tr = len(tr)
        self.W = np.ascontiguousarray(np.hstack(cols))
        self.words = model.words(order)
        K = model.K
        self.names = ([model.word_name(w) for w in self.words]
                      + [obs_key("m", k) for k in range(K)] + [obs_key("tA", k) for k in range(K)]
                      + [obs_key("tB", k) for k in range(K)]
                      + [obs_key("q1", k, l) for k in range(K) for l in range(K)]
                      + [obs_key("q2", k, l) for k in range(K) for l in range(K)] + ["loss"])
        self.macs = self.W.shape[1] + 2 * sum(self.widths[k] for k in tr)

    def pair(self, k):
        a = self.slots.index(k)
        w = self.width[a]
        return (self.W[:, self.uoff[a]:self.uoff[a] + w], self.W[:, self.voff[a]:self.voff[a] + w])

    def workspace(self, B, L):
        dtr2 = 2 * int(sum(self.width[:self.n_tr]))
        return _k.workspace(B, L, self.d, self.W.shape[1], dtr2)

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        _k.untied_steps(self.W, self.uoff, self.voff, self.width, self.kidx, self.n_tr, C, F,
                        ident, eta, gamma, B, n, lossfn, lp, state, blowup, losses, info, *ws)

    def observables(self):
        K = self.model.K
        d = self.d
        mats = []
        Ms = []
        tA = np.empty(K)
        tB = np.empty(K)
        for k in range(K):
            U, V = self.pair(k)
            Mk = U @ V.T
            Ms.append(Mk)
            mats += [Mk, Mk.T, U @ U.T, V @ V.T]
            tA[k] = np.sum(U * U) / d
            tB[k] = np.sum(V * V) / d
        m = np.array([np.trace(Mk) for Mk in Ms]) / math.sqrt(d)
        q1 = np.array([[np.sum(Ms[k] * Ms[l]) / d for l in range(K)] for k in range(K)])
        q2 = np.array([[np.sum(Ms[k] * Ms[l].T) / d for l in range(K)] for k in range(K)])
        w = word_traces(mats, self.words)
        return np.concatenate([w, m, tA, tB, q1.ravel(), q2.ravel()])


class _SRunner(_Runner):
    def __init__(self, model, init, order):
        mats = model.check_matrices(init)
        self.model = model
        self.d = mats[0].shape[0]
        tr = list(model.trainable)
        self.slots = tr + [k for k in range(model.K) if k not in tr]
        self.kidx = np.array(self.slots, dtype=np.int64)
        self.n_tr = len(tr)
        self.W = np.ascontiguousarray(np.hstack([mats[k] for k in self.slots]))
        self.names = s_observable_names(model.K)
        self.words = None
        self.macs = self.d * (len(self.slots) + self.n_tr)

    def matrix(self, k):
        a = self.slots.index(k)
        return self.W[:, a * self.d:(a + 1) * self.d]

    def workspace(self, B, L):
        return _k.workspace(B, L, self.d, self.W.shape[1], self.n_tr * self.d)

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        _k.s_steps(self.W, self.kidx, self.n_tr, C, F, ident, eta, gamma, B, n, lossfn, lp,
                   state, blowup, losses, info, *ws)

    def observables(self):
        from .direct import _order_parameters
        t, Psi, Om = _order_parameters([self.matrix(k) for k in range(self.model.K)])
        return s_observables(t, Psi, Om, np.nan)[:-1]


# ---------------------------------------------------------------------------
# driver

def _check_threads(threads):
    import numba
    if threads is None:
        return int(numba.config.NUMBA_NUM_THREADS)
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be None or an int >= 1, got {threads!r}")
    return int(min(threads, numba.config.NUMBA_NUM_THREADS))


@contextmanager
def _numba_threads(n: int):
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def sgd(model, init, *, eta, batch, t_eval, seed=None, order=None, time: str = "slow",
        progress=None, blowup: float = 1e6, threads: int | None = 1,
        raise_on_failure: bool = False) -> Trajectory:
    """Run finite-d mini-batch online SGD and record the theory's observables.

    Parameters
    ----------
    model : TiedModel, UntiedModel or SModel
    init : list
        Tied: the factors ``W_k`` as ``d x d_k`` arrays (``S_k = W_k W_k^T``);
        untied: pairs ``(U_k, V_k)``; S: the ``d x d`` matrices ``S_k``.
        Non-trainable entries are the fixed teachers. Not modified.
    eta : float
        Learning rate ``> 0``.
    batch : int
        Mini-batch size ``B >= 1`` (fresh samples every step).
    t_eval : array
        Checkpoints in the paper's ODE time (tied ``t = 4 eta n/d``, S
        ``tau = eta n/d``, untied slow ``eta n/d`` or fast ``eta n``), rounded
        to whole steps.
    seed : None, int, sequence, SeedSequence or dict
        Same seed, same trajectory (bit for bit).
    order : int, optional
        Longest word recorded (tied default 2, untied default 2).
    time : {"slow", "fast"}
        Untied only: the time scale of ``t_eval`` and of the result.
    progress : bool or None
        Progress bar on stderr; ``None`` shows it only on a terminal.
    blowup : float
        A weight above this in absolute value stops the run (status -4).
    threads : int or None
        numba threads for the non-BLAS part of a step (samples, per-sample
        loss, update); ``None`` uses all of numba's threads. The default 1
        avoids oversubscription with the BLAS threads (``OPENBLAS_NUM_THREADS``),
        which is severe on small or shared machines; raise it on a quiet
        many-core machine. Results do not depend on it (fixed chunking).
    raise_on_failure : bool
        Raise :class:`IntegrationError` instead of returning a failed status.

    Returns
    -------
    Trajectory
        ``kind="sgd"``; ``.t`` in ODE time; ``.moment(word)`` (tied, untied) and
        ``.observable(name, *indices)``; ``.status`` (0, or -3 non-finite loss,
        -4 diverging weights), ``.success``, ``.message``; ``params`` holds
        every argument and the seed record, ``diagnostics["steps"]`` the step
        of each checkpoint. A failed run keeps the checkpoints before the
        failure, never NaN values.
    """
    kind = _model_kind(model)
    eta = _check_eta(eta)
    B = _check_batch(batch)
    t_eval = check_t_eval(t_eval)
    if kind == "untied" and time not in ("slow", "fast"):
        raise ValueError(f"time must be 'slow' or 'fast', got {time!r}")
    if kind != "untied" and time != "slow":
        raise ValueError("time applies to an UntiedModel only (tied: t = 4 eta n/d, "
                         "S: tau = eta n/d)")
    if isinstance(blowup, bool) or not isinstance(blowup, (int, float)) or not blowup > 0:
        raise ValueError(f"blowup must be a number > 0, got {blowup!r}")
    if kind == "tied":
        runner = _TiedRunner(model, init, _check_order(order, 2))
    elif kind == "untied":
        runner = _UntiedRunner(model, init, _check_order(order, 2))
    else:
        if order is not None:
            raise ValueError("order does not apply to an SModel (its theory closes in t, Psi, Omega)")
        runner = _SRunner(model, init, None)
    n_threads = _check_threads(threads)
    ss = resolve_seed(seed)
    state = _k.seed_state(ss)
    _, lossfn, lp = compiled_loss(model)
    C, F, ident = _cov_factor(model)
    d = runner.d
    dt = time_step(model, eta, d, time)
    steps = np.rint(t_eval / dt).astype(np.int64)
    n_total = int(steps[-1])
    gamma = float(model.weight_decay)
    # steps per kernel call: about 2e9 multiply-adds (a fraction of a second), so the
    # bar moves, Python stays idle and per-call costs vanish
    macs = float(B * model.L * d * max(runner.macs, 1))
    chunk = int(max(1, min(4096, 2e9 // macs)))
    ws = runner.workspace(B, model.L)
    losses = np.empty(n_total + 1)
    info = np.zeros(2, dtype=np.int64)
    n_obs = len(runner.names)
    ys = np.empty((n_obs, steps.size))
    recorded = 0
    done = 0
    status, fail_step = 0, -1
    t0 = _time.perf_counter()
    with Progress(n_total, f"sgd {kind} d={d} B={B}", enabled=progress) as bar, \
            _numba_threads(n_threads):
        for i, target in enumerate(steps):
            while done < target:
                n = int(min(chunk, target - done))
                buf = losses[done:done + n]
                runner.step(n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, buf, info, ws)
                if info[0] != 0:
                    status = int(info[0])
                    fail_step = done + int(info[1])
                    break
                done += n
                bar.update(n)
            if status != 0:
                break
            ys[:-1, i] = runner.observables()
            recorded = i + 1
        if status == 0:  # loss estimate at the last checkpoint: one fresh batch, no update
            ev = np.empty(1)
            runner.step(1, 0.0, 0.0, B, lossfn, lp, C, F, ident, state, math.inf, ev, info, ws)
            losses[n_total] = ev[0] if info[0] == 0 else np.nan
    wall = _time.perf_counter() - t0
    ys[-1, :recorded] = losses[steps[:recorded]]
    # keep only finite checkpoints (a failure at step n invalidates the loss at n)
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
        message = (_k.status_message(status, fail_step, blowup)
                   + f" (t = {fail_step * dt:.6g}); the trajectory keeps the checkpoints before "
                   f"the failure (last: {last})")
    params = model.params_dict()
    params.update({"d": d, "eta": eta, "batch": B, "gamma": gamma, "seed": seed_record(ss),
                   "dt": dt, "n_steps": n_total, "blowup": float(blowup),
                   "time": {"tied": "t = 4 * eta * n / d", "s": "tau = eta * n / d",
                            "untied": ("tau = eta * n / d" if time == "slow"
                                       else "t = eta * n")}[kind]})
    if kind != "s":
        params["order"] = _check_order(order, 2)
        params["widths"] = list(runner.widths)
    inv = model.alphabet.inv if kind == "untied" else None
    # the word rows come first, so `words[i]` labels row i (the named rows follow)
    words = None if runner.words is None else [tuple(w) for w in runner.words]
    res = Trajectory(t=steps_kept * dt, y=ys, names=list(runner.names), words=words, kind="sgd",
                     params=params, seed=seed_record(ss), status=status, message=message,
                     diagnostics={"steps": steps_kept, "wall_s": wall, "failed_step": fail_step,
                                  "model": kind, "threads": n_threads}, inv=inv)
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res


def sgd_runs(model, init, *, n_seeds: int, seed=None, **kwargs) -> list:
    """``n_seeds`` independent :func:`sgd` runs from the same ``init``, seeded by
    ``SeedSequence(seed).spawn(n_seeds)``."""
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, (int, np.integer)) or n_seeds < 1:
        raise ValueError(f"n_seeds must be an int >= 1, got {n_seeds!r}")
    children = resolve_seed(seed).spawn(int(n_seeds))
    return [sgd(model, init, seed=c, **kwargs) for c in children]
