"""Quadrature rules for standard normal expectations, and the choice by dimension.

Rules are ``(Z, w)`` with nodes ``Z`` of shape ``(n, dim)`` for ``z ~ N(0, I)``
and weights summing to one:

- ``tensor``: tensor Gauss-Hermite, ``n`` nodes per axis, with the negligible
  corner nodes pruned (their total weight is kept below a fraction of the
  tolerance); the default in few dimensions;
- ``sparse``: Smolyak sparse grid (combination technique) on Gauss-Hermite
  rules of ``2i - 1`` nodes at level ``i``; for moderate dimensions;
- ``rqmc``: randomised quasi-Monte Carlo, scrambled Sobol points mapped by the
  normal quantile, ``R`` independent scramblings from
  ``numpy.random.SeedSequence(seed)``: deterministic for a given seed, error
  reported as three standard errors across the scramblings.

:func:`choose_rule` picks the method by dimension (``dim <= 4`` tensor,
``dim <= 10`` sparse, beyond rqmc) and refines it until two successive
estimates of the requested outputs agree to the tolerance (or the point budget
is reached, with a warning). The difference of the last two refinements is the
reported error: it bounds the error of the coarser rule and, under geometric
convergence, overestimates that of the finer one, which is the one kept.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    from attndyn.numeric.core.types import ArrayLike

__all__ = ["QuadratureRule", "gh_rule", "tensor_rule", "trapezoid_rule", "smolyak_rule", "rqmc_rules",
           "choose_rule", "METHODS"]

METHODS = ("auto", "tensor", "sparse", "rqmc")


@dataclass
class QuadratureRule:
    """A quadrature rule for ``N(0, I_dim)``.

    ``parts`` lists sub-rules whose spread gives the error at any point
    (the RQMC scramblings), ``coarse`` the previous refinement (tensor, sparse).
    """

    method: str
    dim: int
    nodes: np.ndarray
    weights: np.ndarray
    level: int
    error: float = float("nan")
    seed: int | None = None
    coarse: "QuadratureRule | None" = None
    parts: list[QuadratureRule] = field(default_factory=list)

    @property
    def size(self) -> int:
        return int(self.weights.size)

    def describe(self) -> str:
        lev = {"tensor": "nodes/axis", "sparse": "level", "rqmc": "log2 points",
               "trapezoid": "halvings of the spacing 0.4"}[self.method]
        return f"{self.method} ({lev} {self.level}, {self.size} points, dim {self.dim})"


@lru_cache(maxsize=128)
def gh_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss-Hermite rule with ``n`` nodes, weights summing to 1."""
    if n < 1 or n > 350:
        raise ValueError(f"number of nodes must be in 1..350, got {n}")
    if n == 1:
        z, w = np.zeros(1), np.ones(1)
    else:
        z, w = np.polynomial.hermite_e.hermegauss(n)
        w = w / w.sum()
    z.setflags(write=False)
    w.setflags(write=False)
    return z, w


def _product(z: np.ndarray, w: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor nodes (itertools.product order) and weights (the products taken left to
    right, as ``math.prod`` of each row would)."""
    if dim == 0:
        return np.zeros((1, 0)), np.ones(1)
    Z = np.stack([g.ravel() for g in np.meshgrid(*([z] * dim), indexing="ij")], axis=1)
    return np.ascontiguousarray(Z.reshape(-1, dim), dtype=float), _weights(w, dim)


def _weights(w: np.ndarray, dim: int) -> np.ndarray:
    """The tensor weights of :func:`_product` alone."""
    W: np.ndarray = np.asarray(w, dtype=float)
    for _ in range(dim - 1):
        W = np.multiply.outer(W, w)
    flat: np.ndarray = W.ravel().copy()
    return flat


def _pruned(W: np.ndarray, prune: float) -> np.ndarray:
    """Indices of the smallest weights whose total stays below ``prune`` (ties in index
    order). Only weights below ``prune`` can be among them, so only those are sorted."""
    cand = np.nonzero(W < prune)[0]
    order = cand[np.argsort(W[cand], kind="stable")]
    return order[np.cumsum(W[order]) < prune]


def tensor_rule(dim: int, n: int, prune: float = 0.0) -> QuadratureRule:
    """Tensor Gauss-Hermite rule; nodes are dropped, smallest weight first, while
    their total weight stays below ``prune``."""
    z, w = gh_rule(n)
    if dim == 0:
        return QuadratureRule("tensor", 0, np.zeros((1, 0)), np.ones(1), n)
    if prune <= 0:
        Z, W = _product(z, w, dim)
        return QuadratureRule("tensor", dim, Z, W, n)
    # the weights first, the nodes only where kept (48^4 nodes: 5.3 million, 94% pruned)
    W = _weights(w, dim)
    keep = np.ones(len(W), dtype=bool)
    keep[_pruned(W, prune)] = False
    idx = np.nonzero(keep)[0]
    Z = np.stack([np.asarray(z, dtype=float)[i] for i in np.unravel_index(idx, (n,) * dim)],
                 axis=1)
    return QuadratureRule("tensor", dim, np.ascontiguousarray(Z), np.ascontiguousarray(W[idx]), n)


def trapezoid_rule(dim: int, level: int, prune: float = 0.0, half_width: float = 13.0
                   ) -> QuadratureRule:
    """Tensor trapezoidal rule with spacing ``h = 0.4 / 2**level`` on
    ``[-half_width, half_width]^dim``, weights ``h phi(z)`` normalised to one,
    pruned as :func:`tensor_rule`.

    For an integrand analytic in the strip ``|Im z| < d`` the error falls like
    ``exp(-2 pi d / h)`` (plus the truncation ``exp(-half_width^2 / 2)``): far
    faster than Gauss-Hermite for activations with poles near the real axis
    (tanh, sigmoid), whose Gauss-Hermite error decays only like ``exp(-c sqrt(n))``.
    Used by the per-point refinement of the numeric potentials beyond the
    tensor Gauss-Hermite ladder in one and two dimensions.
    """
    if level < 0 or level > 6:
        raise ValueError(f"level must be in 0..6, got {level}")
    h = 0.4 / 2 ** level
    z = np.arange(-half_width, half_width + h / 2, h)
    w = np.exp(-z * z / 2)
    w = w / w.sum()
    Z, W = _product(z, w, dim)
    if prune > 0:
        keep = np.ones(len(W), dtype=bool)
        keep[_pruned(W, prune)] = False
        Z, W = Z[keep], W[keep]
    return QuadratureRule("trapezoid", dim, np.ascontiguousarray(Z), np.ascontiguousarray(W),
                          level)


def smolyak_rule(dim: int, level: int) -> QuadratureRule:
    """Smolyak sparse grid ``A(level + dim, dim)`` on Gauss-Hermite rules of
    ``2i - 1`` nodes (combination technique, duplicate nodes merged)."""
    if level < 0:
        raise ValueError("level must be >= 0")
    q = level + dim
    acc: dict = {}
    for k in range(max(dim, q - dim + 1), q + 1):
        coef = (-1) ** (q - k) * math.comb(dim - 1, q - k)
        for idx in _compositions(k, dim):
            rules = [gh_rule(2 * i - 1) for i in idx]
            for combo in itertools.product(*[range(len(r[0])) for r in rules]):
                node = tuple(round(float(rules[d][0][c]), 14) for d, c in enumerate(combo))
                wt = coef * math.prod(float(rules[d][1][c]) for d, c in enumerate(combo))
                acc[node] = acc.get(node, 0.0) + wt
    items = [(k, v) for k, v in acc.items() if abs(v) > 1e-300]
    Z = np.array([k for k, _ in items], dtype=float).reshape(-1, dim)
    W = np.array([v for _, v in items], dtype=float)
    return QuadratureRule("sparse", dim, np.ascontiguousarray(Z), np.ascontiguousarray(W), level)


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """All tuples of ``parts`` ints >= 1 summing to ``total``."""
    if parts == 1:
        if total >= 1:
            yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _compositions(total - first, parts - 1):
            yield (first,) + rest


def rqmc_rules(dim: int, log2_points: int, randomisations: int = 8, seed: int = 0
               ) -> list[QuadratureRule]:
    """``randomisations`` independently scrambled Sobol rules of ``2**log2_points``
    points each, mapped to ``N(0, I)``; deterministic for a given seed."""
    from scipy.special import ndtri
    from scipy.stats import qmc

    children = np.random.SeedSequence(seed).spawn(randomisations)
    out = []
    for ss in children:
        eng = qmc.Sobol(d=dim, scramble=True, rng=np.random.default_rng(ss))
        U = eng.random_base2(log2_points)
        U = np.clip(U, 1e-16, 1 - 1e-16)
        Z = ndtri(U)
        out.append(QuadratureRule("rqmc", dim, np.ascontiguousarray(Z),
                                  np.full(len(Z), 1.0 / len(Z)), log2_points, seed=seed))
    return out


def merge(parts: Sequence[QuadratureRule], dim: int, level: int, seed: int) -> QuadratureRule:
    Z = np.concatenate([p.nodes for p in parts])
    W = np.concatenate([p.weights for p in parts]) / len(parts)
    return QuadratureRule("rqmc", dim, np.ascontiguousarray(Z), np.ascontiguousarray(W), level,
                          seed=seed, parts=list(parts))


def _scale(v: ArrayLike) -> float:
    return max(1.0, float(np.max(np.abs(v)))) if np.size(v) else 1.0


def _refine(rules: Iterable[QuadratureRule], evaluate: Callable[[QuadratureRule], ArrayLike],
            tol: float, max_points: int) -> tuple[QuadratureRule, bool]:
    """Walk a sequence of ever finer rules until two consecutive estimates agree to
    ``tol * scale``; the difference is the finer rule's ``.error``. Returns
    ``(rule, converged)``; unconverged, the last rule that fits ``max_points``."""
    prev: tuple[QuadratureRule, np.ndarray] | None = None
    for rule in rules:
        if rule.size > max_points and prev is not None:
            break
        val = np.asarray(evaluate(rule), dtype=float)
        if prev is not None:
            rule.error = float(np.max(np.abs(val - prev[1])))
            rule.coarse = prev[0]
            if rule.error <= tol * _scale(val):
                return rule, True
        prev = (rule, val)
    assert prev is not None  # every caller's sequence has a first rule
    return prev[0], False

def choose_rule(dim: int, evaluate: Callable[[QuadratureRule], ArrayLike], tol: float = 1e-8,
                method: str = "auto", seed: int = 0,
                max_points: int = 400_000, randomisations: int = 8) -> QuadratureRule:
    """Refine a rule until ``evaluate(rule)`` (a vector) changes by at most
    ``tol * max(1, |value|)`` between refinements.

    ``method="auto"`` chooses by dimension: tensor for ``dim <= 4``, sparse for
    ``dim <= 10``, rqmc beyond (and rqmc when a sparse grid runs out of
    points). The returned rule carries ``error`` (the last difference, or three
    standard errors for rqmc) and ``coarse`` / ``parts`` for error estimates
    at other inputs.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0, got {tol!r}")
    if method == "auto":
        method = "tensor" if dim <= 4 else ("sparse" if dim <= 10 else "rqmc")
    if method == "tensor":
        sched = [3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112,
                 128, 160, 192, 256, 320]
        # the first rule always; then stop before a grid far beyond max_points
        sizes = itertools.takewhile(lambda n: n == sched[0] or n ** dim <= 4 * max_points, sched)
        rules = (tensor_rule(dim, n, prune=1e-2 * tol) for n in sizes)
        rule, done = _refine(rules, evaluate, tol, max_points)
        if done:
            return rule
        warnings.warn(f"tensor Gauss-Hermite did not reach tol {tol:g} within {max_points} "
                      f"points (estimated error {rule.error:.3g})", RuntimeWarning, stacklevel=3)
        return rule
    if method == "sparse":
        rule, done = _refine((smolyak_rule(dim, level) for level in range(1, 40)), evaluate, tol,
                             max_points)
        if done:
            return rule
        warnings.warn(f"sparse grid did not reach tol {tol:g} within {max_points} points "
                      f"(estimated error {rule.error:.3g}); switching to rqmc",
                      RuntimeWarning, stacklevel=3)
        method = "rqmc"
    # rqmc
    best: QuadratureRule | None = None
    for m in range(8, 31):
        if randomisations * 2 ** m > max_points and best is not None:
            break
        parts = rqmc_rules(dim, m, randomisations, seed)
        vals = np.array([np.asarray(evaluate(pr), dtype=float) for pr in parts])
        mean = vals.mean(axis=0)
        se = vals.std(axis=0, ddof=1) / math.sqrt(len(parts))
        rule = merge(parts, dim, m, seed)
        rule.error = float(3 * np.max(se))
        best = rule
        if rule.error <= tol * _scale(mean):
            return rule
    assert best is not None  # the first level always runs
    warnings.warn(f"rqmc did not reach tol {tol:g} within {max_points} points (reported error "
                  f"{best.error:.3g})", RuntimeWarning, stacklevel=3)
    return best
