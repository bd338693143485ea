"""Finite-d online SGD on attention-indexed models, with the theory's observables.

:func:`sgd` runs mini-batch online SGD with fresh samples ``x ~ N(0, C (x) I_d)``
at every step on a :class:`~attndyn.TiedModel` (factors ``W_k``), an
:class:`~attndyn.UntiedModel` (pairs ``(U_k, V_k)``) or an
:class:`~attndyn.SModel` (matrices ``S_k``), and records at checkpoints the same
observables as the theory, under the same names.

Time mapping (``n`` = number of mini-batch steps, each with ``B`` samples and
the batch-mean gradient; the batch size does not enter the time, it only
divides the noise):

========  ====================================  =========================
model     update                                ODE time
========  ====================================  =========================
tied      ``W <- W - eta g - (eta gamma/d) W``  ``t = 4 eta n / d``
direct S  ``S <- S - eta (g + (gamma/d) S)``    ``tau = eta n / d``
untied    ``U, V <- ... - (eta gamma/d) U, V``  slow ``tau = eta n / d``;
                                                fast ``t = eta n``
========  ====================================  =========================

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

Seeds: ``rng`` (alias ``seed``) is anything ``numpy.random.SeedSequence`` accepts, a
``SeedSequence``, a Generator or the dict stored in ``result.seed``, by the package's one
rule (:func:`~attndyn.numeric.core.validate.resolve_rng`); the same int gives a
bit-identical trajectory. :func:`sgd_runs` spawns independent seeds with
``SeedSequence.spawn``. Threads: :func:`~attndyn.numeric.core.threads.compute_threads`
(numba's ``threads``, BLAS ``blas_threads``, default 1).
"""

from __future__ import annotations

import math
import os
import time as _time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.kernels import sgd as _k
from attndyn.numeric.attention.base import check_model, resolve_seed
from attndyn.numeric.attention.xp_sgd import check_backend, xp_sgd
from attndyn.numeric.core.compile import load_generated
from attndyn.numeric.core.progress import Progress
from attndyn.numeric.core.results import IntegrationError, Trajectory
from attndyn.numeric.core.threads import compute_threads
from attndyn.numeric.core.validate import check_batch, check_eta, check_t_eval, resolve_rng
from attndyn.symbolic.lossgrad import loss_gradient

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.attention.base import AttentionModel, SGDRunner
    from attndyn.symbolic.lossgrad import LossGradient
    from attndyn.numeric.core.types import ArrayLike, RngLike

__all__ = ["sgd", "sgd_runs", "gaussian_init", "resolve_seed", "seed_record", "time_step",
           "compiled_loss", "sgd_memory_bytes", "available_memory"]

_LOSS_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

# the step counters of the kernels are int64
_MAX_STEPS = 2 ** 62


# ---------------------------------------------------------------------------
# argument checks

# ---------------------------------------------------------------------------
# seeds

def seed_record(ss: np.random.SeedSequence) -> dict:
    """JSON-able record of a ``SeedSequence``; :func:`resolve_seed` rebuilds it."""
    ent: Any = ss.entropy
    ent = [int(e) for e in ent] if isinstance(ent, (list, tuple, np.ndarray)) else int(ent)
    return {"entropy": ent, "spawn_key": [int(k) for k in ss.spawn_key]}


# ---------------------------------------------------------------------------
# compiled loss

def compiled_loss(model: AttentionModel
                  ) -> tuple[LossGradient, Callable[..., Any], NDArray[np.float64]]:
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


def _cov_factor(model: AttentionModel
                ) -> tuple[NDArray[np.float64], NDArray[np.float64], bool]:
    C = np.array(model.C.evalf(), dtype=np.float64)
    L = C.shape[0]
    ident = bool(np.array_equal(C, np.eye(L)))
    lam, V = np.linalg.eigh(C)
    F = np.ascontiguousarray(V * np.sqrt(np.clip(lam, 0.0, None)))
    return np.ascontiguousarray(C), F, ident


def time_step(model: AttentionModel, eta: float, d: int, time: str = "slow") -> float:
    """ODE time per SGD step (the model's :attr:`time_scales`): tied ``4 eta/d``; S
    ``eta/d``; untied ``eta/d`` (slow) or ``eta`` (fast)."""
    return check_model(model).time_step(eta, d, time)


# ---------------------------------------------------------------------------
# initial conditions

def gaussian_init(model: AttentionModel, d: int, *, width: int | Sequence[int] | None = None,
                  scale: float | Sequence[float] = 1.0, rng: RngLike = None,
                  seed: RngLike = None, symmetric: bool = False) -> list[Any]:
    """Independent Gaussian initial weights (a seeded initialisation).

    - tied: ``W_k`` of shape ``(d, d_k)``, entries ``N(0, scale_k^2/d_k)``, so
      ``t_k ~ scale_k^2``;
    - untied: pairs ``(U_k, V_k)``, entries ``N(0, scale_k^2/d_k)``
      (``tA_k ~ tB_k ~ scale_k^2``, ``m_k = O(d^-1/2)``);
    - direct S: ``S_k`` with entries ``N(0, scale_k^2/d)`` (``Omega_kk ~ scale_k^2``,
      ``t_k, Psi_kk = O(1/d)``), symmetrised (``Psi = Omega``) with ``symmetric=True``.

    ``width`` (``d_k``, default ``d``) and ``scale`` are numbers or per-index
    sequences. Independent inits are uninformative (structural overlaps
    ``O(1/d)``). ``rng`` (alias ``seed``): the package's rule,
    :func:`~attndyn.numeric.core.validate.resolve_rng`. Calls :meth:`AttentionModel.gaussian_init`.

    These are the i.i.d. initialisations of Assumption 2.2 (tied) and of section 4
    (untied): the moments ``mu_alpha(0) = Tr(S_{k_1} ... S_{k_w}) / d`` (eq. 8) concentrate
    as ``d -> infinity`` on the Marchenko-Pastur (free) values of the law.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> W = attndyn.gaussian_init(model, 8, width=[4, 8], rng=0)
    >>> [w.shape for w in W]
    [(8, 4), (8, 8)]
    """
    return check_model(model).gaussian_init(
        d, width=width, scale=scale, seed=resolve_rng(rng, seed, name="gaussian_init"),
        symmetric=symmetric)


# ---------------------------------------------------------------------------
# sizes

def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` of
    ``/proc/meminfo``, else ``os.sysconf``), or ``None`` when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def sgd_memory_bytes(workspace_shape: Sequence[int], n_steps: int, n_obs: int,
                     n_out: int) -> int:
    """Bytes :func:`sgd` allocates for one run: the kernel's four work arrays
    (:func:`attndyn.kernels.sgd.workspace`), the per-step loss record and the
    checkpoint table (float64)."""
    B, L, d, n_cols, n_grad = (int(x) for x in workspace_shape)
    BL = B * L
    return 8 * (BL * d + BL * n_cols + BL * n_grad + d * n_grad + (n_steps + 1) + n_obs * n_out)


def _check_memory(need: int, limit: float | None, B: int, d: int, L: int,
                  n_steps: int) -> None:
    if limit is None:
        limit = available_memory()
        src = "the available memory"
        if limit is None:
            return
    else:
        if isinstance(limit, bool) or not isinstance(limit, (int, float, np.integer, np.floating)) \
                or not limit > 0:
            raise ValueError(f"max_memory must be a number of bytes > 0, got {limit!r}")
        src = "max_memory"
    if need > limit:
        raise ValueError(f"sgd: batch = {B}, d = {d}, L = {L} and {n_steps} steps need about "
                         f"{need / 2**30:.3g} GiB of buffers, above {src} ({limit / 2**30:.3g} "
                         "GiB); use a smaller batch or fewer steps, or raise max_memory=")


def _checkpoint_steps(t_eval: NDArray[np.float64], dt: float, eta: float, d: int,
                      label: str) -> NDArray[np.int64]:
    """Whole SGD steps of the checkpoints; a grid the step cannot resolve is an error."""
    ratio = t_eval[-1] / dt
    if not ratio < _MAX_STEPS:
        raise ValueError(f"t_eval up to {t_eval[-1]:g} needs {ratio:.3g} SGD steps of dt = {dt:.3g} "
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


# ---------------------------------------------------------------------------
# driver

def _check_threads(threads: int | None) -> int:
    import numba

    from attndyn.numeric.core.validate import check_threads
    # refused above numba's thread count, never clamped silently (threads=10**6)
    return check_threads(threads, numba.config.NUMBA_NUM_THREADS)


def sgd(model: AttentionModel, init: Sequence[Any], *, eta: float, batch: int,
        t_eval: ArrayLike, rng: RngLike = None, seed: RngLike = None, order: int | None = None,
        time: str = "slow", progress: bool | None = None, blowup: float = 1e6,
        threads: int | None = 1, blas_threads: int | None = None,
        raise_on_failure: bool = False, max_memory: float | None = None,
        backend: str = "numba", device: str | None = None, dtype: str = "float64"
        ) -> Trajectory:
    """Run finite-d mini-batch online SGD and record the theory's observables.

    The model supplies, through the protocol of
    :class:`~attndyn.numeric.attention.base.AttentionModel`, its validated
    weights and step kernel (:meth:`~AttentionModel.sgd_runner`), its
    observables and its time scales; this driver owns the seeds, the
    checkpoints, the block sizes, failures and the result.

    Parameters
    ----------
    model : AttentionModel (TiedModel, UntiedModel, SModel, ...)
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
        to whole steps. Distinct times that round to one step are an error
        (the step cannot resolve the grid).
    rng : None, int, sequence, SeedSequence, Generator or dict
        The package's rule (:func:`~attndyn.numeric.core.validate.resolve_rng`, SPEC 7):
        the same int, SeedSequence or stored dict gives the same trajectory (bit for bit);
        a Generator is a source of entropy and advances (the same object twice: two
        different runs). ``seed`` is its older name; passing both is an error.
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
    blas_threads : int or "auto", optional
        BLAS threads of the step's products, by the package's policy
        (:func:`~attndyn.numeric.core.threads.compute_threads`): default
        ``ATTNDYN_BLAS_THREADS`` or 1; ``"auto"``: ``cores // threads``.
    raise_on_failure : bool
        Raise :class:`IntegrationError` instead of returning a failed status.
    max_memory : float, optional
        Bytes the run's buffers may take (:func:`sgd_memory_bytes`); default
        the machine's available memory. Above it: ``ValueError`` before allocating.
    backend, device, dtype : str
        ``"numba"`` (default, CPU, float64) or ``"array-api"``: the same steps through
        the array API on ``device`` ``"cpu"`` (NumPy), ``"cuda"`` or ``"cuda:N"`` (CuPy),
        in ``dtype`` float64 or float32, equal in distribution to numba
        (:func:`~attndyn.numeric.attention.xp_sgd.xp_sgd`; ``threads`` is numba's only).

    Returns
    -------
    Trajectory
        ``kind="sgd"``; ``.t`` in ODE time; ``.moment(word)`` (tied, untied) and
        ``.observable(name, *indices)``; ``.status`` (0, or -3 non-finite loss,
        -4 diverging weights), ``.success``, ``.message``; ``params`` holds
        every argument and the seed record, ``diagnostics["steps"]`` the step
        of each checkpoint. A failed run keeps the checkpoints before the
        failure, never NaN values.

    Update rules (paper 003): tied ``W_k <- W_k - eta grad_{W_k} L(G) - (eta gamma / d) W_k``
    (eq. 7), untied the same for ``U_k`` and ``V_k`` (eq. 25), direct S
    ``S_k <- S_k - eta (grad_{S_k} L(G) + (gamma / d) S_k)`` (eq. 395), the gradient averaged
    over the mini-batch. The recorded moments ``mu_alpha = Tr(S_{k_1} ... S_{k_w}) / d``
    (eq. 8) are reported in ODE time: tied ``t = 4 eta n / d`` (eq. 9), untied slow and
    direct S ``tau = eta n / d`` (eqs. 31-32, 402).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> init = attndyn.gaussian_init(model, 16, rng=0)
    >>> r = attndyn.sgd(model, init, eta=0.01, batch=4, t_eval=[0.0, 0.1], rng=1, order=2)
    >>> r.status, r.names[:5], r.t
    (0, ['mu_1', 'mu_2', 'q_11', 'q_12', 'q_22'], array([0. , 0.1]))
    """
    if check_backend(backend, device, dtype):
        return xp_sgd(model, init, eta=eta, batch=batch, t_eval=t_eval, rng=rng, seed=seed,
                      order=order, blas_threads=blas_threads,
                      time=time, progress=progress, blowup=blowup, device=device or "cpu",
                      dtype=dtype, raise_on_failure=raise_on_failure, max_memory=max_memory)
    model = check_model(model)
    eta = check_eta(eta)
    B = check_batch(batch)
    t_eval = check_t_eval(t_eval)
    scale = model.time_scale(time)
    if isinstance(blowup, bool) or not isinstance(blowup, (int, float)) or not blowup > 0:
        raise ValueError(f"blowup must be a number > 0, got {blowup!r}")
    runner = model.sgd_runner(init, order)
    n_threads = _check_threads(threads)
    ss = resolve_rng(rng, seed, name="sgd")
    d = runner.d
    dt = scale.step(eta, d)
    steps = _checkpoint_steps(t_eval, dt, eta, d, scale.label)
    _check_memory(sgd_memory_bytes(runner.workspace_shape(B, model.L), int(steps[-1]),
                                   len(runner.names), steps.size), max_memory, B, d,
                  model.L, int(steps[-1]))
    run = _run_steps(model, runner, ss, steps, eta, B, blowup, progress, n_threads,
                     blas_threads)
    ys, steps_kept, status, fail_step = _kept_checkpoints(run["ys"], steps, run["recorded"],
                                                          run["status"], run["fail_step"])
    message = _sgd_message(status, fail_step, steps, steps_kept, dt, d, B, eta, blowup)
    params = model.params_dict()
    params.update({"d": d, "eta": eta, "batch": B, "gamma": float(model.weight_decay),
                   "seed": seed_record(ss), "dt": dt, "n_steps": int(steps[-1]),
                   "blowup": float(blowup), "time": scale.label})
    params.update(runner.params())
    # the word rows come first, so `words[i]` labels row i (the named rows follow)
    words = None if runner.words is None else [tuple(w) for w in runner.words]
    res = Trajectory(t=steps_kept * dt, y=ys, names=list(runner.names), words=words, kind="sgd",
                     params=params, seed=seed_record(ss), status=status, message=message,
                     diagnostics={"steps": steps_kept, "wall_s": run["wall"],
                                  "failed_step": fail_step, "model": model.kind,
                                  "threads": n_threads, "blas_threads": run["n_blas"]},
                     inv=runner.inv)
    if raise_on_failure and status != 0:
        raise IntegrationError(message)
    return res


def _run_steps(model: AttentionModel, runner: SGDRunner, ss: np.random.SeedSequence,
               steps: NDArray[np.int64], eta: float, B: int, blowup: float,
               progress: bool | None,
               n_threads: int, blas_threads: int | None) -> dict[str, Any]:
    """Run the SGD steps up to each checkpoint of ``steps`` in kernel chunks; the observables
    at the checkpoints reached, the batch losses, the status and the failed step."""
    d = runner.d
    n_total = int(steps[-1])
    n_obs = len(runner.names)
    state = _k.seed_state(ss)
    _, lossfn, lp = compiled_loss(model)
    C, F, ident = _cov_factor(model)
    gamma = float(model.weight_decay)
    # steps per kernel call: about 2e9 multiply-adds (a fraction of a second), so the
    # bar moves, Python stays idle and per-call costs vanish
    macs = float(B * model.L * d * max(runner.macs, 1))
    chunk = int(max(1, min(4096, 2e9 // macs)))
    ws = _k.workspace(*runner.workspace_shape(B, model.L))
    losses = np.empty(n_total + 1)
    info = np.zeros(2, dtype=np.int64)
    ys = np.empty((n_obs, steps.size))
    recorded = 0
    done = 0
    status, fail_step = 0, -1
    t0 = _time.perf_counter()
    with Progress(n_total, f"sgd {model.kind} d={d} B={B}", enabled=progress) as bar, \
            compute_threads(n_threads, blas_threads) as (_, n_blas):
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
    return {"ys": ys, "recorded": recorded, "status": status, "fail_step": fail_step,
            "wall": wall, "n_blas": n_blas}


def _kept_checkpoints(ys: NDArray[np.float64], steps: NDArray[np.int64], recorded: int,
                      status: int, fail_step: int
                      ) -> tuple[NDArray[np.float64], NDArray[np.int64], int, int]:
    """The finite checkpoints before a failure (a failure at step n invalidates the loss at
    n); a non-finite value in a run that did not fail is status -3 at its step."""
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
    return ys[:, keep], steps[keep], status, fail_step


def _sgd_message(status: int, fail_step: int, steps: NDArray[np.int64],
                 steps_kept: NDArray[np.int64], dt: float, d: int, B: int, eta: float,
                 blowup: float) -> str:
    """The one-line message of an SGD run: its size on success, else the failure, its time
    and the last checkpoint kept."""
    n_total = int(steps[-1])
    if status == 0:
        return (f"success: {n_total} SGD steps (d = {d}, B = {B}, eta = {eta:g}), "
                f"{steps.size} checkpoints up to t = {n_total * dt:.6g}")
    last = f"t = {steps_kept[-1] * dt:.6g}" if steps_kept.size else "none"
    return (_k.status_message(status, fail_step, blowup)
            + f" (t = {fail_step * dt:.6g}); the trajectory keeps the checkpoints before "
            f"the failure (last: {last})")


def sgd_runs(model: AttentionModel, init: Sequence[Any], *, n_seeds: int, rng: RngLike = None,
             seed: RngLike = None, **kwargs: Any) -> list[Trajectory]:
    """``n_seeds`` independent :func:`sgd` runs from the same ``init``, seeded by
    ``SeedSequence(rng).spawn(n_seeds)`` (``rng``, alias ``seed``: the package's rule,
    :func:`~attndyn.numeric.core.validate.resolve_rng`).

    Each run is :func:`sgd` (paper 003, eqs. 7, 25 or 395); the seed spread of the
    moments (eq. 8) is what :func:`~attndyn.numeric.attention.compare.compare` turns into
    seed units.

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> init = attndyn.gaussian_init(model, 16, rng=0)
    >>> runs = attndyn.sgd_runs(model, init, n_seeds=2, eta=0.01, batch=4, t_eval=[0.0, 0.1],
    ...                         rng=1)
    >>> len(runs), [r.status for r in runs]
    (2, [0, 0])
    >>> bool(runs[0].observable("q_11")[-1] != runs[1].observable("q_11")[-1])
    True
    """
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, (int, np.integer)) or n_seeds < 1:
        raise ValueError(f"n_seeds must be an int >= 1, got {n_seeds!r}")
    children = resolve_rng(rng, seed, name="sgd_runs").spawn(int(n_seeds))
    return [sgd(model, init, rng=c, **kwargs) for c in children]
