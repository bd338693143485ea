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

import math
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attndyn.numeric.attention.base import (AttentionModel, check_order_arg, finite_word_traces,
                                            obs_key, SGDRunner, TimeScale)
from attndyn.numeric.attention.untied.fastslow import CriticalMean, critical_mean, fast_flow
from attndyn.numeric.attention.untied.theory import UntiedTheory
from attndyn.numeric.core.validate import check_loss, check_model_args, real_array
from attndyn.symbolic.hierarchy import check_order
from attndyn.symbolic.potential import call_loss, g_array
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import Alphabet, canonical_words

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from attndyn.numeric.attention.untied.hierarchy import UntiedHierarchy
    from attndyn.numeric.core.results import Trajectory
    from attndyn.numeric.core.types import ArrayLike

__all__ = ["UntiedModel", "M", "MT", "A", "B"]

M, MT, A, B = 0, 1, 2, 3  # letter kinds; letter = 4*k + kind


class UntiedModel(AttentionModel):
    """Untied attention ``S_k = U_k V_k^T`` (paper 003, eqs. 24-25). Final (see
    :mod:`attndyn.numeric.attention.base`).

    Parameters are those of :class:`attndyn.TiedModel`: ``K`` indices, the
    ``trainable`` ones (the others are fixed teachers), ``loss(G)`` returning a
    SymPy expression of the ``L x L x K`` pre-activations
    ``G_ijk = x_i^T U_k V_k^T x_j / sqrt(d)`` (not centred: its mean is
    ``C_ij m_k``), ``L`` tokens, token covariance ``C`` and weight decay ``gamma``.
    ``potential``: the untied potential of ``loss`` when it was built already (a
    ``NumericPotential``, the ``NumericRoute`` that
    ``attndyn.symbolic.potential.untied_potential(..., route="numeric")`` returns, or an
    exact ``SymbolicPotential``), used by the theory instead of deriving one
    (:func:`attndyn.numeric.attention.potentials.as_potential`).

    Examples
    --------
    >>> import attndyn
    >>> model = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    >>> model
    UntiedModel(K=2, trainable=(0,), L=1, weight_decay=0.0)
    >>> model.hierarchy(2).names[:4]   # Tr(M_1)/d, Tr(A_1)/d, Tr(B_1)/d, Tr(M_2)/d (eq. 26)
    ['mu_M1', 'mu_A1', 'mu_B1', 'mu_M2']
    """

    kind = "untied"
    sgd_form = "pairs"
    # U, V <- ... - (eta gamma/d) U, V: the traces move on the slow scale, the means on the fast
    time_scales = (TimeScale("slow", "tau = eta * n / d", 1.0, 1),
                   TimeScale("fast", "t = eta * n", 1.0, 0))

    def __init__(self, K: int, trainable: Sequence[int], loss: Callable, L: int = 1,
                 C: ArrayLike | None = None, weight_decay: float = 0.0, *,
                 params: dict | None = None, potential: Any = None) -> None:
        self.K, self.trainable, self.L, self.C, self.weight_decay = check_model_args(
            K, trainable, L, C, weight_decay)
        self.loss = check_loss(loss, self.L, self.K)  # fails early on a bad loss
        self.params = dict(params or {})
        #: the untied potential given as ``potential=`` (None: derived from the loss); a
        #: NumericRoute is built (issue 25)
        self.given_potential = None
        if potential is not None:
            from attndyn.numeric.attention.potentials import as_potential
            self.given_potential = as_potential(potential, self.K, self.L, self.C, kind="untied",
                                                trajectory=False, params=list(self.params))
        inv = []
        for k in range(self.K):
            inv += [4 * k + MT, 4 * k + M, 4 * k + A, 4 * k + B]
        self.alphabet = Alphabet(4 * self.K, inv)
        self.letter_names = []
        for k in range(self.K):
            self.letter_names += [f"M{k + 1}", f"Mt{k + 1}", f"A{k + 1}", f"B{k + 1}"]
        self._words: dict = {}

    def _repr_html_(self) -> str:
        from attndyn.numeric.core.display import html_summary
        C = [[float(self.C[i, j]) for j in range(self.L)] for i in range(self.L)]
        return html_summary("UntiedModel", {
            "K": self.K, "trainable": list(self.trainable), "L": self.L, "C": C,
            "weight_decay": self.weight_decay, "corrections": list(self.theory.corrections)})

    def __repr__(self) -> str:
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

    def word_name(self, word: Sequence[int]) -> str:
        return word_label(word, self.alphabet.K, self.letter_names)

    def params_dict(self) -> dict:
        import sympy as sp
        G = g_array(self.L, self.K)
        return {"model": "untied", "K": self.K, "trainable": list(self.trainable), "L": self.L,
                "C": [[float(self.C[i, j]) for j in range(self.L)] for i in range(self.L)],
                "weight_decay": self.weight_decay,
                "loss": sp.sstr(call_loss(self.loss, G)),
                "params": {k: float(v) for k, v in self.params.items()}}

    # -- matrices ------------------------------------------------------------
    def check_factors(self, init: Sequence[Any], name: str = "init"
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Validate ``K`` pairs ``(U_k, V_k)`` of ``d x d_k`` arrays (same ``d``)."""
        try:
            pairs = list(init)
        except TypeError:
            raise TypeError(f"{name} must be a list of K = {self.K} pairs (U_k, V_k)") from None
        if len(pairs) != self.K:
            raise ValueError(f"{name} must hold K = {self.K} pairs (U_k, V_k), got {len(pairs)}")
        out = []
        d: Any = None
        for k, pr in enumerate(pairs):
            try:
                U, V = pr
            except (TypeError, ValueError):
                raise TypeError(f"{name}[{k}] must be a pair (U_k, V_k)") from None
            U = real_array(U, f"{name}[{k}] U_k")
            V = real_array(V, f"{name}[{k}] V_k")
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

    # -- the model protocol (attndyn.numeric.attention.base) ---------------------
    def observable_names(self, order: int | None = None) -> list[str]:
        """Words over ``{M, M^T, A, B}`` up to ``order`` (default 2), ``m_k``, ``tA_k``,
        ``tB_k``, ``q1_kl``, ``q2_kl`` and ``loss``."""
        return _untied_names(self, self.words(check_order_arg(order, 2)))

    def check_matrices(self, matrices: Sequence[Any], name: str = "matrices") -> list[Any]:
        """A state of the untied model: the pairs ``(U_k, V_k)`` (:meth:`check_factors`)."""
        return self.check_factors(matrices, name)

    def check_init(self, init: Sequence[Any], name: str = "init") -> list[Any]:
        return self.check_factors(init, name)

    def init_floats(self, d: int, widths: list[int]) -> int:
        """Two ``d x d_k`` factors ``(U_k, V_k)`` per index."""
        return 2 * d * sum(widths)

    def _draw_init(self, rng: np.random.Generator, d: int, widths: list[int],
                   scales: list[float], symmetric: bool) -> list[Any]:
        # U_k, V_k entries N(0, scale_k^2 / d_k): tA_k ~ tB_k ~ scale_k^2, m_k = O(d^-1/2)
        out = []
        for k in range(self.K):
            sd = scales[k] / math.sqrt(widths[k])
            out.append((rng.standard_normal((d, widths[k])) * sd,
                        rng.standard_normal((d, widths[k])) * sd))
        return out

    def sgd_runner(self, init: Sequence[Any], order: int | None = None) -> SGDRunner:
        return _UntiedRunner(self, self.check_factors(init), check_order_arg(order, 2))

    @cached_property
    def theory(self) -> UntiedTheory:
        """The :class:`~attndyn.numeric.attention.untied.theory.UntiedTheory` of this model."""
        return UntiedTheory(self)

    def matrix_flow(self, matrices: Sequence[Any], t_eval: ArrayLike, **options: Any
                    ) -> Trajectory:
        """The finite-d untied flow from pairs ``(U_k, V_k)`` (``self.theory.matrix_flow``)."""
        traj: Trajectory = self.theory.matrix_flow(matrices, t_eval, **options)
        return traj

    # -- the fast-slow theory (attndyn.numeric.attention.untied.fastslow) ----------
    def fast_flow(self, pairs: Sequence[Any], t_eval: ArrayLike, **kw: Any) -> Trajectory:
        """The fast flow (28) of the means on ``t = eta n``, moments frozen; see
        :func:`attndyn.numeric.attention.untied.fastslow.fast_flow`."""
        return fast_flow(self, pairs, t_eval, **kw)

    def critical_mean(self, pairs_or_state: Any, **kw: Any) -> CriticalMean:
        """``m*(q)`` of eq. (29), the root the fast flow reaches from ``m(0)``, with
        its label; see :func:`attndyn.numeric.attention.untied.fastslow.critical_mean`."""
        return critical_mean(self, pairs_or_state, **kw)

    def hierarchy(self, order: int, letters: Sequence[int] | None = None) -> UntiedHierarchy:
        """The slow hierarchy (31)-(32) truncated at ``order`` (eq. 892):
        :class:`attndyn.numeric.attention.untied.fastslow.UntiedHierarchy`."""
        hier: UntiedHierarchy = self.theory.hierarchy(order, letters)
        return hier

    def order_parameters(self, init: Sequence[Any]) -> dict:
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


def _untied_names(model: AttentionModel, words: Sequence[Sequence[int]]) -> list[str]:
    K = model.K
    return ([model.word_name(w) for w in words]
            + [obs_key("m", k) for k in range(K)] + [obs_key("tA", k) for k in range(K)]
            + [obs_key("tB", k) for k in range(K)]
            + [obs_key("q1", k, l) for k in range(K) for l in range(K)]
            + [obs_key("q2", k, l) for k in range(K) for l in range(K)] + ["loss"])


class _UntiedRunner(SGDRunner):
    """``W = [U_tr | V_tr | U_fixed | V_fixed]`` for :func:`attndyn.kernels.sgd.untied_steps`."""

    def __init__(self, model: UntiedModel, pairs: Sequence[tuple[np.ndarray, np.ndarray]],
                 order: int) -> None:
        self.model = model
        self.order = order
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
        self.words: list[tuple[int, ...]] = model.words(order)
        self.names = _untied_names(model, self.words)
        self.inv = model.alphabet.inv
        self.macs = self.W.shape[1] + 2 * sum(self.widths[k] for k in tr)

    def pair(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        a = self.slots.index(k)
        w = self.width[a]
        return (self.W[:, self.uoff[a]:self.uoff[a] + w], self.W[:, self.voff[a]:self.voff[a] + w])

    def workspace_shape(self, B: int, L: int) -> tuple[int, int, int, int, int]:
        return (B, L, self.d, self.W.shape[1], 2 * int(sum(self.width[:self.n_tr])))

    def step(self, n: int, eta: float, gamma: float, B: int, lossfn: Callable[..., Any],
             lp: np.ndarray, C: np.ndarray, F: np.ndarray, ident: bool, state: np.ndarray,
             blowup: float, losses: np.ndarray, info: np.ndarray,
             ws: tuple[np.ndarray, ...]) -> None:
        from attndyn.kernels import sgd as _k
        _k.untied_steps(self.W, self.uoff, self.voff, self.width, self.kidx, self.n_tr, C, F,
                        ident, eta, gamma, B, n, lossfn, lp, state, blowup, losses, info, *ws)

    def observables(self) -> NDArray[np.float64]:
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
        w = finite_word_traces(mats, self.words, "U_k V_k^T")
        return np.concatenate([w, m, tA, tB, q1.ravel(), q2.ravel()])

    def params(self) -> dict[str, Any]:
        return {"order": self.order, "widths": list(self.widths)}
