"""Synthetic sequence-to-sequence data for paper 000's setting (section 3.2).

Inputs ``X_i`` (L x d) have i.i.d. standard Gaussian tokens, RMS-normalised
per token (``x <- x / sqrt(mean_k x_k^2)``, so ``||X_{i,l}||_2 = sqrt(d)``; with
``token_norm="unit"``, ``||X_{i,l}||_2 = 1``). Targets are
``Y_i = F*(X_i) + Xi_i`` with ``Xi`` i.i.d. ``N(0, xi^2)`` entries (so
``max Var[Xi_{l,k}] = xi^2``). The teacher ``F*`` is a
:class:`~attndyn.numeric.transformer.model.Transformer` (e.g. a random one of
the student's class) or any callable mapping (n, L, d) to (n, L, d).

Because the noise is centred and independent of ``X``, the excess risk of a
model ``F`` is ``R(F) - R(F*) = E ||F(X) - F*(X)||_F^2``; it is estimated on a
held-out test set of noiseless teacher outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .model import MAX_CACHE_BYTES, as_rng, int_ge1, seed_label

__all__ = ["SeqData", "make_data", "rms_normalise"]


def rms_normalise(X, token_norm="rms"):
    """Per-token RMS normalisation of an (n, L, d) array.

        >>> X = rms_normalise(np.arange(1.0, 13.0).reshape(2, 2, 3))
        >>> np.round((X ** 2).mean(axis=-1), 12)
        array([[1., 1.],
               [1., 1.]])
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim < 1 or X.shape[-1] < 1:
        raise ValueError(f"X must have tokens of d >= 1 entries on its last axis, got shape "
                         f"{X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X must be finite (found NaN or inf)")
    with np.errstate(over="ignore", under="ignore"):
        r = np.sqrt(np.mean(X * X, axis=-1, keepdims=True))
    # x x overflows beyond 1e154 and underflows below 1e-154: those tokens are scaled by
    # their largest entry first (the others keep the plain formula's bits)
    off = ~np.isfinite(r) | (r < 1e-150)
    if np.any(off):
        s = np.max(np.abs(X), axis=-1, keepdims=True)
        s = np.where(off & (s > 0), s, 1.0)
        Xs = X / s
        r = np.where(off, s * np.sqrt(np.mean(Xs * Xs, axis=-1, keepdims=True)), r)
    if np.any(r == 0):
        raise ValueError("X has an all-zero token, which cannot be RMS-normalised")
    X = X / r
    if token_norm == "unit":
        X = X / math.sqrt(X.shape[-1])
    elif token_norm != "rms":
        raise ValueError(f"token_norm must be 'rms' or 'unit', got {token_norm!r}")
    return X


@dataclass
class SeqData:
    """A training set ``(X, Y)`` with a noiseless test set ``(X_test, F_test)``.

        >>> from attndyn.numeric.transformer import Transformer
        >>> teacher = Transformer(N=1, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> data = make_data(teacher, 5, xi=0.1, seed=1, n_test=7)
        >>> isinstance(data, SeqData), data.X.shape, data.X_test.shape, data.xi
        (True, (5, 2, 3), (7, 2, 3), 0.1)
    """

    X: np.ndarray
    Y: np.ndarray
    X_test: np.ndarray | None = None
    F_test: np.ndarray | None = None
    xi: float = 0.0
    params: dict = field(default_factory=dict)

    @property
    def n(self):
        return self.X.shape[0]

    def subset(self, n):
        """The first ``n`` training sequences (same test set)."""
        n = int_ge1(n, "n")
        if n > self.n:
            raise ValueError(f"n must be <= {self.n}, got {n}")
        return SeqData(self.X[:n], self.Y[:n], self.X_test, self.F_test, self.xi,
                       dict(self.params, n=n))


def make_data(teacher, n, *, xi, seed, n_test=256, L=None, d=None, token_norm="rms"):
    """Draw ``n`` training and ``n_test`` test sequences from the teacher.

    Parameters
    ----------
    teacher : Transformer or callable
        ``F*``; a callable needs ``L`` and ``d``.
    n, n_test : int >= 1
    xi : float >= 0
        Noise standard deviation (variance ``xi^2``).
    seed : int, SeedSequence or Generator
        Draws inputs, then noise, then test inputs.

    Examples
    --------
    >>> from attndyn.numeric.transformer import Transformer
    >>> teacher = Transformer(N=1, L=2, d=3, m=4, eps=1.0, omega=1.0, kappa=0.5, rng=0)
    >>> data = make_data(teacher, 5, xi=0.0, seed=1, n_test=7)
    >>> bool(np.allclose(data.Y, teacher(data.X)))
    True
    """
    n = int_ge1(n, "n")
    n_test = int_ge1(n_test, "n_test")
    # (no float() before the range test: an int beyond the float range would overflow)
    if isinstance(xi, bool) or not isinstance(xi, (int, float, np.integer, np.floating)) \
            or not 0 <= xi <= 1.7976931348623157e308:
        raise ValueError(f"xi must be a finite real number >= 0, got {xi!r}")
    xi = float(xi)
    if hasattr(teacher, "forward") and hasattr(teacher, "L"):
        L, d = teacher.L, teacher.d
        f = teacher.forward
        tinfo = teacher.config()
    elif callable(teacher):
        if L is None or d is None:
            raise ValueError("a callable teacher needs L and d")
        L, d = int_ge1(L, "L"), int_ge1(d, "d")
        f = teacher
        tinfo = {"callable": getattr(teacher, "__name__", "callable")}
    else:
        raise TypeError("teacher must be a Transformer or a callable (n, L, d) -> (n, L, d)")
    for name, k in (("n", n), ("n_test", n_test)):
        # the draw, its normalised copy, the teacher's output and the targets
        if 4 * 8 * k * L * d > MAX_CACHE_BYTES:
            raise ValueError(f"{name} = {k} sequences of L d = {L * d} entries need "
                             f"{4 * 8 * k * L * d / 2**30:.1f} GiB, above the limit of "
                             f"{MAX_CACHE_BYTES / 2**30:.0f} GiB; reduce {name}")
    rng = as_rng(seed)
    X = rms_normalise(rng.standard_normal((n, L, d)), token_norm)
    Fx = np.asarray(f(X), dtype=np.float64)
    if Fx.shape != X.shape or not np.all(np.isfinite(Fx)):
        raise ValueError(f"teacher must return finite values of shape {X.shape}")
    Y = Fx + xi * rng.standard_normal(X.shape)
    Xt = rms_normalise(rng.standard_normal((n_test, L, d)), token_norm)
    Ft = np.asarray(f(Xt), dtype=np.float64)
    if Ft.shape != Xt.shape or not np.all(np.isfinite(Ft)):
        raise ValueError(f"teacher must return finite values of shape {Xt.shape} "
                         f"(on the test inputs)")
    return SeqData(X, Y, Xt, Ft, xi, {"n": n, "n_test": n_test, "xi": xi, "L": L, "d": d,
                                      "token_norm": token_norm, "seed": seed_label(seed),
                                      "teacher": tinfo})
