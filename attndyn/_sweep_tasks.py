"""The functions a sweep spec file may name (``attndyn sweep SPEC.toml``).

A spec is untrusted input: it can only name one of :data:`TASKS`, and only pass the keyword
arguments of that function, as TOML numbers, strings, booleans and lists. Each task builds its
model from the same safe ``--loss`` parser as the CLI, and returns a labelled result.
Models are memoised per process, so a worker compiles each loss once.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

__all__ = ["TASKS", "task_signature", "compare_tied", "sgd_tied", "integrate_tied",
           "scaling_bounds"]


@functools.lru_cache(maxsize=32)
def _tied_model(loss: str, K: int, trainable: tuple, L: int, weight_decay: float):
    from attndyn._cli_common import loss_from_option
    from attndyn.numeric.attention.tied.model import TiedModel
    return TiedModel(K, list(trainable), loss_from_option(loss, K, L), L,
                     weight_decay=weight_decay)


def _times(T, n_t):
    if isinstance(n_t, bool) or not isinstance(n_t, int) or not 2 <= n_t <= 100_000:
        raise ValueError(f"n_t must be an int in [2, 100000], got {n_t!r}")
    return np.linspace(0.0, float(T), n_t)


def compare_tied(*, loss: str = "square", d: int = 60, eta: float = 0.005, batch: int = 64,
                 T: float = 0.1, n_t: int = 6, K: int = 2, trainable=(0,), L: int = 1,
                 weight_decay: float = 0.0, scale: float = 0.5, init_seed: int = 0,
                 theory: str | None = None, order: int | None = None, replica: int = 0,
                 rng=None, seed=None):
    """SGD against theory for a tied model (:func:`attndyn.numeric.compare`) from a seeded
    Gaussian initialisation (``d``, ``scale``, ``init_seed``). ``replica`` only labels repeated
    points: each point has its own SGD seed (``rng``, alias ``seed``: the package's rule,
    :func:`~attndyn.numeric.core.validate.resolve_rng`)."""
    from attndyn.numeric.attention.compare import compare
    from attndyn.numeric.core.validate import resolve_rng
    model = _tied_model(str(loss), int(K), tuple(int(k) for k in trainable), int(L),
                        float(weight_decay))
    return compare(model, {"d": d, "scale": scale, "seed": init_seed}, eta=eta, batch=batch,
                   t_eval=_times(T, n_t), theory=theory, order=order,
                   seed=resolve_rng(rng, seed, name="compare task"))


def sgd_tied(*, loss: str = "square", d: int = 60, eta: float = 0.005, batch: int = 64,
             T: float = 0.1, n_t: int = 6, K: int = 2, trainable=(0,), L: int = 1,
             weight_decay: float = 0.0, scale: float = 0.5, init_seed: int = 0,
             order: int | None = None, replica: int = 0, rng=None, seed=None):
    """Finite-d online SGD of a tied model (:func:`attndyn.sgd`); ``rng`` (alias ``seed``) as
    :func:`~attndyn.numeric.core.validate.resolve_rng`."""
    from attndyn.numeric.attention.training import gaussian_init, sgd
    from attndyn.numeric.core.validate import resolve_rng
    model = _tied_model(str(loss), int(K), tuple(int(k) for k in trainable), int(L),
                        float(weight_decay))
    init = gaussian_init(model, d, scale=scale, seed=init_seed)
    return sgd(model, init, eta=eta, batch=batch, t_eval=_times(T, n_t), order=order,
               seed=resolve_rng(rng, seed, name="sgd task"))


def integrate_tied(*, loss: str = "square", order: int = 8, T: float = 0.1, n_t: int = 11,
                   K: int = 2, trainable=(0,), L: int = 1, weight_decay: float = 0.0,
                   d: int = 100, scale: float = 0.5, init_seed: int = 0):
    """The truncated tied hierarchy (eq. 11, 13) from the moments of seeded Gaussian factors,
    ``S_k = W_k W_k^T``."""
    from attndyn.numeric.attention.training import gaussian_init
    model = _tied_model(str(loss), int(K), tuple(int(k) for k in trainable), int(L),
                        float(weight_decay))
    W = gaussian_init(model, d, scale=scale, seed=init_seed)
    S = [w @ w.T for w in W]
    return model.hierarchy(order).integrate(S, _times(T, n_t))


def scaling_bounds(*, C: float = 1e12, N: float = 1e5, xi: float = 0.1, L: int = 8, d: int = 4):
    """Paper 000: the threshold compute ``C*(N)`` and the exact critical data size ``N*(C)``
    (Theorem 7.1), as numbers."""
    from attndyn.numeric.scaling import critical_data_size, threshold_compute
    return {"threshold_compute": float(threshold_compute(N, xi, L, d)),
            "critical_data_size": float(critical_data_size(C, xi, L, d))}


TASKS = {
    "compare": compare_tied,
    "sgd": sgd_tied,
    "integrate": integrate_tied,
    "bounds": scaling_bounds,
}


def task_signature(name: str) -> dict:
    """The keyword parameters of task ``name``: name -> default."""
    if name not in TASKS:
        raise ValueError(f"function {name!r} is not a sweep task; choose one of "
                         f"{', '.join(sorted(TASKS))}")
    return {p.name: p.default for p in inspect.signature(TASKS[name]).parameters.values()
            if p.name not in ("rng", "seed")}
