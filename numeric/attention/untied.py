"""Untied attention ``S_k = U_k V_k^T`` (paper 003, section 4): model, letters, observables.

This module holds what the SGD kernel and its observables need now; the
untied theory (fast flow (28), slow hierarchy (31)-(32)) builds on it.

Order parameters (MATH.md), with ``M_k = U_k V_k^T``, ``A_k = U_k U_k^T``,
``B_k = V_k V_k^T``:

- ``m_k = Tr M_k / sqrt(d)`` (the pre-activation mean, ``E G_ijk = C_ij m_k``);
- ``tA_k = Tr A_k / d``, ``tB_k = Tr B_k / d``;
- ``q1_kl = Tr(M_k M_l^T)/d``, ``q2_kl = Tr(M_k M_l)/d``;
- words over the alphabet ``{M_k, M_k^T, A_k, B_k}`` (eq. 26), normalised traces.

Letters: ``4k`` is ``M_k``, ``4k+1`` is ``M_k^T``, ``4k+2`` is ``A_k`` and
``4k+3`` is ``B_k``; the transpose involution swaps ``M_k`` and ``M_k^T`` and
fixes ``A_k``, ``B_k``. Printed names are 1-based: ``M1``, ``Mt1``, ``A1``, ``B1``.

Time scales for ``U <- U - eta*(batch-mean grad) - (eta*gamma/d) U`` (and V):
fast ``t = eta * n`` (the means move), slow ``tau = eta * n / d`` (the traces move).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.potential import _call_loss, g_array
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import Alphabet, canonical_words

from ..core.validate import check_loss, check_model_args

__all__ = ["UntiedModel", "M", "MT", "A", "B"]

M, MT, A, B = 0, 1, 2, 3  # letter kinds; letter = 4*k + kind


class UntiedModel:
    """Untied attention ``S_k = U_k V_k^T`` (paper 003, eqs. 24-25).

    Parameters are those of :class:`attndyn.TiedModel`: ``K`` indices, the
    ``trainable`` ones (the others are fixed teachers), ``loss(G)`` returning a
    SymPy expression of the ``L x L x K`` pre-activations
    ``G_ijk = x_i^T U_k V_k^T x_j / sqrt(d)`` (not centred: its mean is
    ``C_ij m_k``), ``L`` tokens, token covariance ``C`` and weight decay ``gamma``.
    """

    kind = "untied"

    def __init__(self, K: int, trainable, loss: Callable, L: int = 1, C=None,
                 weight_decay: float = 0.0, *, params: dict | None = None):
        self.K, self.trainable, self.L, self.C, self.weight_decay = check_model_args(
            K, trainable, L, C, weight_decay)
        self.loss = check_loss(loss, self.L, self.K)  # fails early on a bad loss
        self.params = dict(params or {})
        inv = []
        for k in range(self.K):
            inv += [4 * k + MT, 4 * k + M, 4 * k + A, 4 * k + B]
        self.alphabet = Alphabet(4 * self.K, inv)
        self.letter_names = []
        for k in range(self.K):
            self.letter_names += [f"M{k + 1}", f"Mt{k + 1}", f"A{k + 1}", f"B{k + 1}"]
        self._words: dict = {}

    def __repr__(self):
        return (f"UntiedModel(K={self.K}, trainable={self.trainable}, L={self.L}, "
                f"weight_decay={self.weight_decay})")

    # -- letters and words -------------------------------------------------
    @staticmethod
    def letter(kind: int, k: int) -> int:
        """Letter of ``M`` (kind 0), ``M^T`` (1), ``A`` (2) or ``B`` (3) of index ``k``."""
        return 4 * int(k) + int(kind)

    def words(self, order: int) -> list:
        """Canonical words over ``{M_k, M_k^T, A_k, B_k}`` up to length ``order``."""
        o = check_order(order)
        w = self._words.get(o)
        if w is None:
            w = self._words[o] = canonical_words(o, self.alphabet)
        return w

    def word_name(self, word) -> str:
        return word_label(word, self.alphabet.K, self.letter_names)

    def params_dict(self) -> dict:
        import sympy as sp
        G = g_array(self.L, self.K)
        return {"model": "untied", "K": self.K, "trainable": list(self.trainable), "L": self.L,
                "C": [[float(self.C[i, j]) for j in range(self.L)] for i in range(self.L)],
                "weight_decay": self.weight_decay,
                "loss": sp.sstr(_call_loss(self.loss, G)),
                "params": {k: float(v) for k, v in self.params.items()}}

    # -- matrices ------------------------------------------------------------
    def check_factors(self, init, name: str = "init") -> list:
        """Validate ``K`` pairs ``(U_k, V_k)`` of ``d x d_k`` arrays (same ``d``)."""
        try:
            pairs = list(init)
        except TypeError:
            raise TypeError(f"{name} must be a list of K = {self.K} pairs (U_k, V_k)") from None
        if len(pairs) != self.K:
            raise ValueError(f"{name} must hold K = {self.K} pairs (U_k, V_k), got {len(pairs)}")
        out = []
        d = None
        for k, pr in enumerate(pairs):
            try:
                U, V = pr
            except (TypeError, ValueError):
                raise TypeError(f"{name}[{k}] must be a pair (U_k, V_k)") from None
            U = np.asarray(U, dtype=np.float64)
            V = np.asarray(V, dtype=np.float64)
            if U.ndim == 1:
                U = U[:, None]
            if V.ndim == 1:
                V = V[:, None]
            if U.ndim != 2 or V.ndim != 2 or U.shape != V.shape:
                raise ValueError(f"{name}[{k}]: U_k and V_k must be d x d_k arrays of the same "
                                 f"shape, got {U.shape} and {V.shape}")
            if d is None:
                d = U.shape[0]
            if U.shape[0] != d:
                raise ValueError(f"{name}[{k}] must have d = {d} rows like {name}[0], "
                                 f"got shape {U.shape}")
            if U.shape[1] < 1:
                raise ValueError(f"{name}[{k}] must have at least one column (d_k >= 1)")
            if not (np.all(np.isfinite(U)) and np.all(np.isfinite(V))):
                raise ValueError(f"{name}[{k}] must be finite")
            out.append((U, V))
        if d < 2:
            raise ValueError(f"{name}: the dimension d must be >= 2, got {d}")
        return out

    def order_parameters(self, init) -> dict:
        """``m, tA, tB, q1, q2`` of the pairs ``(U_k, V_k)`` (numpy arrays)."""
        pairs = self.check_factors(init)
        d = pairs[0][0].shape[0]
        Ms = [U @ V.T for U, V in pairs]
        m = np.array([np.trace(Mk) / np.sqrt(d) for Mk in Ms])
        tA = np.array([np.sum(U * U) / d for U, _ in pairs])
        tB = np.array([np.sum(V * V) / d for _, V in pairs])
        K = self.K
        q1 = np.array([[np.sum(Ms[k] * Ms[l]) / d for l in range(K)] for k in range(K)])
        q2 = np.array([[np.sum(Ms[k] * Ms[l].T) / d for l in range(K)] for k in range(K)])
        return {"m": m, "tA": tA, "tB": tB, "q1": q1, "q2": q2}
