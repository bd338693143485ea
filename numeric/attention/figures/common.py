"""Shared settings and Monte-Carlo helpers of the figures (:mod:`attndyn.numeric.attention.figures`)."""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from attndyn.numeric.core.claims import Claim

if TYPE_CHECKING:
    from attndyn.numeric.core.claims import FigureRun
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import ArrayLike, PathLike

# a figure's settings (SETTINGS[name][mode] with the overrides and the mode)
_Settings = dict[str, Any]

__all__ = ["SETTINGS"]

# mode -> settings. "quick": CPU-sized, same eta d / B as the caption.
SETTINGS: dict[str, dict[str, _Settings]] = {
    "fig1": {
        "mini": dict(d=30, eta=0.01, batch=40, T=0.1, T_short=0.04, scale=0.5, orders=(2, 4),
                     n_t=11, seeds=2),
        # T = 6: the overlaps move by >= 10 seed SDs (q_12: 9.3 SD at T = 4, measured)
        "quick": dict(d=80, eta=0.01, batch=100, T=6.0, T_short=0.1, scale=0.5,
                      orders=(2, 4, 6), n_t=61, seeds=4),
        "full": dict(d=400, eta=0.01, batch=512, T=1.0, T_short=0.1, scale=0.5,
                     orders=(2, 4, 6, 8), n_t=41, seeds=4),
    },
    "fig2": {
        # scan_d / scan_seeds: the direct-S flow from Gaussian starts at growing d (eq. 418 is a
        # d -> infinity statement); mc_d / mc_n: Monte Carlo of the exact finite-d SGD drift of
        # tied h3 against the matrix flow (Gaussian equivalence holds only as d -> infinity)
        "mini": dict(d=30, eta=0.005, batch=40, T=0.4, n_t=9, acts=("h1", "h2", "h3"),
                     scan_d=(20, 40), scan_seeds=2, mc_d=(20, 40), mc_n=20000, seeds=2),
        # B = 400, not the caption's eta d/B: at d = 80 and 120 the degree-6 h3 loss
        # diverges with B = 100-150 (measured, eta 0.005 and 0.0025)
        "quick": dict(d=80, eta=0.005, batch=400, T=2.0, n_t=41, acts=("h1", "h2", "h3"),
                      scan_d=(80, 160, 400, 800), scan_seeds=16, mc_d=(40, 80, 160, 320),
                      mc_n=200000, seeds=4),
        "full": dict(d=400, eta=0.005, batch=512, T=2.0, n_t=41, acts=("h1", "h2", "h3"),
                     scan_d=(100, 200, 400, 800, 1600), scan_seeds=16,
                     mc_d=(50, 100, 200, 400), mc_n=400000, seeds=4),
    },
    "fig3": {
        # mc_d / mc_n: Monte Carlo of the exact finite-d loss at the start against the
        # Gaussian-equivalent potential Phi (the theory's d -> infinity input)
        # law_acts / limit_sizes / limit_rotations: SGD from one draw of the law per seed
        # against the untied d -> infinity limit (Richardson over limit_sizes)
        "mini": dict(d=30, eta=0.01, batch=64, T=0.2, n_t=9, acts=("h1", "h2", "h3"),
                     mc_d=(20, 40), mc_n=20000, seeds=2, law_acts=("h1",),
                     limit_sizes=(16, 32), limit_rotations=2),
        # 8 seeds: with 4, rms z of an unbiased theory exceeds 3 in 3-6% of runs (t_3 tails)
        "quick": dict(d=80, eta=0.01, batch=400, T=1.0, n_t=21, acts=("h1", "h2", "h3"),
                      mc_d=(40, 80, 160, 320), mc_n=200000, seeds=8, law_acts=("h1",),
                      limit_sizes=(100, 200), limit_rotations=6),
        "full": dict(d=800, eta=0.01, batch=4096, T=1.0, n_t=21, acts=("h1", "h2", "h3"),
                     mc_d=(100, 200, 400, 800), mc_n=200000, seeds=4, law_acts=("h1",),
                     limit_sizes=(100, 200), limit_rotations=8),
    },
    "fig4": {
        "mini": dict(d=40, eta=0.01, batch=50, T=0.3, T_short=0.15, scale=0.5,
                     orders=(2, 4, 8), n_t=13, seeds=2),
        "quick": dict(d=160, eta=0.01, batch=200, T=1.0, T_short=0.15, scale=0.5,
                      orders=(2, 4, 8, 12), n_t=41, seeds=4),
        "full": dict(d=400, eta=0.01, batch=512, T=1.0, T_short=0.15, scale=0.5,
                     orders=(2, 4, 8, 12), n_t=41, seeds=4),
    },
}


def figure_settings(name: str, mode: str, overrides: dict[str, Any]) -> _Settings:
    if mode not in SETTINGS[name]:
        raise ValueError(f"mode must be one of {sorted(SETTINGS[name])}, got {mode!r}")
    s = dict(SETTINGS[name][mode])
    for k, v in overrides.items():
        if k not in s:
            raise ValueError(f"{name}: unknown setting {k!r}; allowed {sorted(s)}")
        s[k] = v
    s["mode"] = mode
    return s


def figure_seeds(seeds: int | Iterable[int] | None, base: int, default: int = 1) -> list[int]:
    if seeds is None:
        seeds = default
    if isinstance(seeds, int):
        if seeds < 1 or seeds > 64:
            raise ValueError(f"seeds must be in [1, 64], got {seeds}")
        return [base + i for i in range(seeds)]
    return [int(s) for s in seeds]


def fmt(x: float) -> str:
    return f"{x:.2e}" if np.isfinite(x) else str(x)


def first_cross(t: np.ndarray, y: ArrayLike, level: float) -> float:
    idx = np.nonzero(np.asarray(y) >= level)[0]
    return float(t[idx[0]]) if idx.size else float("inf")


def sgd_completed(run: FigureRun) -> Claim:
    """Claim: every SGD curve of the figure reached its last checkpoint."""
    bad = [f"{k}: status {v.status} at t = {v.t[-1]:.3g}" for k, v in run.curves.items()
           if "sgd" in k and v.status != 0]
    n = sum(1 for k in run.curves if "sgd" in k)
    return Claim("every SGD run reached the horizon (no divergence)", not bad,
                 f"{n - len(bad)} of {n} runs completed" + ("; " + "; ".join(bad) if bad else ""),
                 "a diverged run keeps its finite checkpoints; the other claims use them")


def mpl() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------
# finite-d checks of Gaussian equivalence: Monte Carlo over the inputs x

def hermite_np(act: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """numpy ``h_k = He_k / sqrt(k!)`` and ``h_k'`` for the activation name ``"h<k>"``."""
    from numpy.polynomial import hermite_e as He

    if not (isinstance(act, str) and act[:1] == "h" and act[1:].isdigit()
            and 1 <= int(act[1:]) <= 8):
        raise ValueError(f"activation must be one of 'h1' ... 'h8', got {act!r}")
    k = int(act[1:])
    c = np.zeros(k + 1)
    c[k] = 1.0 / math.sqrt(math.factorial(k))
    dc = He.hermeder(c)
    return (lambda z: He.hermeval(z, c)), (lambda z: He.hermeval(z, dc))


def mc_batches(d: int, n: int, seed: Any, n_chunks: int = 10) -> Iterator[np.ndarray]:
    """``n_chunks`` blocks of ``n // n_chunks`` inputs ``x ~ N(0, I_d)`` (rows)."""
    rng = np.random.default_rng(seed)
    m = max(n // n_chunks, 1)
    for _ in range(n_chunks):
        yield rng.standard_normal((m, d))


def quad(X: np.ndarray, A: np.ndarray, shift: Any = 0.0) -> np.ndarray:
    """Rows ``(x^T A x - shift) / sqrt(d)``."""
    out: np.ndarray = (np.einsum("ij,ij->i", X @ A, X) - shift) / math.sqrt(X.shape[1])
    return out


def mean_se(vals: ArrayLike) -> tuple[float, float]:
    v = np.asarray(vals, float)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")


def slope(x: ArrayLike, y: ArrayLike) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return (float(np.polyfit(lx, ly, 1)[0]) if lx.size > 1 and np.all(np.isfinite(ly))
            else float("nan"))


# ---------------------------------------------------------------------------
# Figure 4: appendix D.3, loss (G_1 - G_2)^2, truncation orders vs SGD


# ---------------------------------------------------------------------------
# Figure 2: tied W vs direct S from an uninformative start, h1/h2/h3


# ---------------------------------------------------------------------------
# Figure 3: untied, single token, h1/h2/h3, symmetric overlap


# ---------------------------------------------------------------------------
# Figure 1: tied, L = 2, softmax, MSE, truncation orders vs SGD




# ---------------------------------------------------------------------------
# the SGD runs of a figure as tasks: one (curve, seed) per task, on the sweep machinery

FIGURE_NAMES = ("fig1", "fig2", "fig3", "fig4")
_GPU_FLOPS = 6.0e13    # an H200's FP64 peak (tensor cores), FLOP/s: an assumption, not measured
_GPU_EFFICIENCY = 0.5  # assumed fraction of the peak reached by the step's GEMMs
_GPU_STEP_FLOOR = 1e-4  # s per step: about ten kernel launches of ~10 us (assumed)
_CPU_FLOPS = 4.5e10    # one core of this machine in the SGD GEMMs (42-49 GFLOP/s measured)


def _setup_of(figure: str) -> Callable[..., Any]:
    """The ``_sgd_setup(curve, sgd_seed, s)`` of a figure module (fixed names only)."""
    import importlib

    if figure not in FIGURE_NAMES:
        raise ValueError(f"figure must be one of {FIGURE_NAMES}, got {figure!r}")
    setup: Callable[..., Any] = importlib.import_module(
        f"attndyn.numeric.attention.figures.{figure}")._sgd_setup
    return setup


def _settings_text(s: _Settings) -> str:
    """The settings as canonical JSON (the key of a task and of its cache folder)."""
    import json

    from attndyn.numeric.core.labelled import jsonable
    return json.dumps(jsonable(s, nonfinite="float"), sort_keys=True)


def _log_line(path: PathLike | None, text: str) -> None:
    if path is None:
        return
    import os
    # one short append per line: O_APPEND keeps lines of concurrent workers whole
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{time.time():.3f} pid={os.getpid()} {text}\n")
        f.flush()


class SGDTask:
    """One SGD run of a figure: ``task(figure=, curve=, sgd_seed=, settings=)`` rebuilds the
    curve's model and initial condition from the settings (JSON text) and runs
    :func:`attndyn.numeric.attention.training.sgd` with the SGD seed ``sgd_seed``, the
    same run whatever process or machine it lands on. Picklable (module-level class), so it
    runs on a process pool or a ``dask.distributed`` cluster; ``log`` (a path) gets a
    ``start`` and a ``done`` line per task."""

    sweep_id = "attndyn.figures:sgd_task/1"

    def __init__(self, log: PathLike | None = None, backend: str = "numba", device: Any = None,
                 dtype: str = "float64") -> None:
        self.log, self.backend, self.device, self.dtype = log, backend, device, dtype

    def __call__(self, figure: str, curve: str, sgd_seed: int, settings: str) -> Trajectory:
        import json

        from attndyn.numeric.attention.training import sgd

        s = json.loads(settings)
        model, init, t_eval, kw = _setup_of(figure)(curve, int(sgd_seed), s)
        kw.pop("_steps_per_unit", None)
        _log_line(self.log, f"start {figure} {curve} seed={sgd_seed}")
        c0 = time.process_time()
        r = sgd(model, init, eta=s["eta"], batch=s["batch"], t_eval=t_eval, seed=int(sgd_seed),
                backend=self.backend, device=self.device, dtype=self.dtype, progress=False, **kw)
        _log_line(self.log, f"done {figure} {curve} seed={sgd_seed} cpu_s="
                            f"{time.process_time() - c0:.2f} status={r.status}")
        return r


def calibrate(figure: str, curve: str, s: _Settings, *, steps: int = 20, backend: str = "numba",
              device: Any = None) -> dict[str, float]:
    """CPU seconds per SGD step of one curve (process time of ``steps`` steps after a warm-up
    step) and the steps of a whole run; the FLOP count of a step estimated from the CPU time
    at the measured GEMM rate of one core (45 GFLOP/s: the kernel runs at 1.12x the GEMM
    floor), and a GPU time estimated from it: ``max(FLOP / (0.5 x 60 TFLOP/s), 0.1 ms)`` per
    step (an H200's FP64 peak at an assumed 50 % efficiency, and an assumed kernel-launch
    floor); the GPU figure is an estimate, never a measurement."""
    import numpy as np

    from attndyn.numeric.attention.training import sgd

    model, init, t_eval, kw = _setup_of(figure)(curve, 0, s)
    per_unit = float(kw.pop("_steps_per_unit"))
    n_run = int(round(float(t_eval[-1]) * per_unit))
    steps = max(1, min(int(steps), n_run))
    run = lambda n: sgd(model, init, eta=s["eta"], batch=s["batch"],  # noqa: E731
                        t_eval=np.array([0.0, n / per_unit]), seed=0, backend=backend,
                        device=device, progress=False, **kw)
    run(1)  # compile
    c0 = time.process_time()
    run(steps)
    per_step = (time.process_time() - c0) / steps
    flop = per_step * _CPU_FLOPS
    gpu_step = max(flop / (_GPU_EFFICIENCY * _GPU_FLOPS), _GPU_STEP_FLOOR)
    return {"cpu_s_per_step": per_step, "steps": n_run, "cpu_s": per_step * n_run,
            "flop_per_step_est": flop, "gpu_s_est": gpu_step * n_run}


class TaskRunner:
    """Runs the SGD tasks of a figure: in this process (``executor="serial"``), on a local
    process pool (``None``) or a ``dask.distributed`` client, through
    :func:`attndyn._sweep.sweep`. With ``cache_dir`` every finished task is stored as it
    completes (in ``<cache_dir>/<figure>-<key>``, the key a hash of the settings, the tasks
    and the backend) and a rerun loads it instead of recomputing; ``tasks.log`` there lists
    each task's start and end. ``plan=True`` prints the tasks and the time estimate of a short
    calibration run first."""

    def __init__(self, executor: Any = "serial", *, cache_dir: PathLike | None = None,
                 workers: int | None = None, backend: str = "numba", device: Any = None,
                 progress: bool | None = None, plan: bool = False,
                 out: Callable[[str], Any] | None = None) -> None:
        self.executor, self.cache_dir, self.workers = executor, cache_dir, workers
        self.backend, self.device, self.progress, self.plan = backend, device, progress, plan
        self.out = out if out is not None else print
        self.last_folder: str | None = None

    def folder(self, figure: str, s: _Settings, tasks: Sequence[tuple[str, int]]) -> str | None:
        import hashlib
        import os

        if self.cache_dir is None:
            return None
        key = hashlib.sha256((_settings_text(s) + repr(sorted(tasks)) + str(self.backend)
                              + str(self.device)).encode()).hexdigest()[:12]
        return os.path.join(os.fspath(self.cache_dir), f"{figure}-{key}")

    def print_plan(self, figure: str, s: _Settings, tasks: Sequence[tuple[str, int]]) -> float:
        curves = sorted({c for c, _ in tasks})
        n_workers = self.workers or (os.cpu_count() or 1)
        lines = [f"plan: {figure} [{s.get('mode')}], {len(tasks)} SGD tasks "
                 f"({len(curves)} curve(s) x seeds {sorted({sd for _, sd in tasks})}), "
                 f"backend {self.backend}" + (f" on {self.device}" if self.device else "")]
        total = 0.0
        for c in curves:
            cal = calibrate(figure, c, s, backend=self.backend, device=self.device)
            n = sum(1 for cc, _ in tasks if cc == c)
            total += n * cal["cpu_s"]
            lines.append(f"  {c}: {cal['steps']} steps/task, {1e3 * cal['cpu_s_per_step']:.2f} ms "
                         f"CPU/step (calibrated), about {cal['cpu_s']:.0f} s CPU per task; GPU "
                         f"estimate {cal['gpu_s_est']:.1f} s/task (from the FLOP rate, not run)")
        lines.append(f"  total about {total:.0f} s CPU; about {total / n_workers:.0f} s wall on "
                     f"{n_workers} worker(s) if each gets a core")
        self.out("\n".join(lines))
        return total

    def run(self, figure: str, s: _Settings, tasks: Sequence[tuple[str, int]]
            ) -> dict[tuple[str, int], Trajectory]:
        """``{(curve, seed): Trajectory}`` for ``tasks = [(curve, seed), ...]``."""
        import os
        import warnings

        from attndyn._sweep import sweep

        tasks = [(str(c), int(sd)) for c, sd in tasks]
        if self.plan:
            self.print_plan(figure, s, tasks)
        text = _settings_text(s)
        folder = self.folder(figure, s, tasks)
        self.last_folder = folder
        log = None
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
            log = os.path.join(folder, "tasks.log")
            _log_line(log, f"run {figure} tasks={len(tasks)}")
        fn = SGDTask(log=log, backend=self.backend, device=self.device)
        grid = {"figure": [figure] * len(tasks), "curve": [c for c, _ in tasks],
                "sgd_seed": [sd for _, sd in tasks], "settings": [text] * len(tasks)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # failed tasks are reported below
            # no warm-up task in this process: the numba kernels are compiled once per
            # worker from the disk cache, and every task runs in parallel from the start
            res = sweep(fn, grid, zipped=True, executor=self.executor, cache_dir=folder,
                        workers=self.workers, progress=self.progress, seed=0, warm=False)
        out = {}
        for (c, sd), st, msg, r in zip(tasks, res.status, res.messages, res.results):
            if r is None:
                raise RuntimeError(f"{figure}: SGD task {c} seed {sd} failed: {msg}")
            out[(c, sd)] = r
        return out


def run_sgd_tasks(figure: str, s: _Settings, tasks: Sequence[tuple[str, int]],
                  runner: TaskRunner | None = None) -> dict[tuple[str, int], Trajectory]:
    """The SGD runs of ``tasks`` (``[(curve, seed)]``): with ``runner=None`` one after the
    other in this process, else through ``runner`` (:class:`TaskRunner`)."""
    if runner is None:
        fn = SGDTask()
        text = _settings_text(s)
        return {(c, sd): fn(figure, c, sd, text) for c, sd in tasks}
    return runner.run(figure, s, tasks)


# ---------------------------------------------------------------------------
# claims in seed units

def seed_z(runs: ArrayLike, theory: ArrayLike, paired: bool = True
           ) -> tuple[float, float, np.ndarray]:
    """z-scores over the plotted times ``t > 0`` of SGD runs against a theory.

    ``runs``: ``(n_seeds, n_t)``; ``theory``: ``(n_seeds, n_t)`` (paired: seed ``i``'s theory
    from seed ``i``'s matrices) or ``(n_t,)`` (one theory, e.g. from the law the SGD starts
    are drawn from). ``z(t) = mean_i D_i(t) / (sd_i D_i(t) / sqrt(n))`` with ``D_i = SGD_i -
    theory_i``. Returns ``(rms z, max |z|, z array)``; ``nan`` with fewer than 2 seeds."""
    import numpy as np

    Y = np.asarray(runs, float)
    T = np.asarray(theory, float)
    n_t = min(Y.shape[1], T.shape[-1])
    D = Y[:, :n_t] - (T[:, :n_t] if T.ndim == 2 else T[None, :n_t])
    n = D.shape[0]
    if n < 2:
        return float("nan"), float("nan"), np.full(n_t, np.nan)
    se = D.std(axis=0, ddof=1) / np.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, D.mean(axis=0) / np.where(se > 0, se, 1.0), 0.0)
    zz = z[1:] if n_t > 1 else z
    return float(np.sqrt(np.mean(zz ** 2))), float(np.max(np.abs(zz))), z


def fmt_z(rms: float, mx: float) -> str:
    return f"rms z {rms:.2f} (max |z| {mx:.2f})"


#: rms z over the plotted times under which a theory counts as tracking SGD in seed units
Z_OK = 3.0
