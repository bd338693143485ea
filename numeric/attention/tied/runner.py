"""Finite-d online SGD of the tied model: the runner the generic driver calls."""

from __future__ import annotations

import numpy as np

from attndyn.numeric.attention.base import finite_word_traces, obs_key, SGDRunner
from attndyn.numeric.core.results import Trajectory
from attndyn.numeric.core.validate import real_array
from attndyn.symbolic.printing import word_label
from attndyn.symbolic.words import canonical_words

__all__ = ["tied_observable_names", "theory_rows"]


def check_factor_list(model, init, name="init") -> list:
    """Tied factors ``W_k``: real ``d x d_k`` arrays with a common ``d >= 2``."""
    try:
        mats = [real_array(w, f"{name}[{k}]") for k, w in enumerate(init)]
    except TypeError as exc:
        if "real, got a complex" in str(exc):
            raise
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


def tied_observable_names(K: int, words) -> list:
    """Names of the tied SGD observables: the words, ``p_kl`` (``k <= l``, when the
    words of length 2 are there) and ``loss``."""
    names = [word_label(w, K) for w in words]
    if any(len(w) == 2 for w in words):
        names += [obs_key("p", k, l) for k in range(K) for l in range(k, K)]
    return names + ["loss"]


def _tied_derived(K, words, vals):
    """Append ``p_kl = q_kl - t_k t_l`` (eq. 15) to a vector of word traces."""
    idx = {tuple(w): i for i, w in enumerate(words)}
    if not any(len(w) == 2 for w in words):
        return vals
    t = np.array([vals[idx[(k,)]] for k in range(K)])
    p = [vals[idx[(k, l)]] - t[k] * t[l] for k in range(K) for l in range(k, K)]
    return np.concatenate([vals, p])


class TiedRunner(SGDRunner):
    """Factors side by side in one array ``W`` (trainable slots first) for
    :func:`attndyn.kernels.sgd.tied_steps`."""

    def __init__(self, model, Ws, order):
        self.model = model
        self.order = order
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

    def workspace_shape(self, B, L):
        return (B, L, self.d, self.W.shape[1], int(self.col[self.n_tr]))

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        from attndyn.kernels import sgd as _k
        _k.tied_steps(self.W, self.col, self.kidx, self.n_tr, C, F, ident, eta, gamma, B, n,
                      lossfn, lp, state, blowup, losses, info, *ws)

    def observables(self):
        K = self.model.K
        S = []
        for k in range(K):
            Wk = self.factor(k)
            S.append(Wk @ Wk.T)
        vals = finite_word_traces(S, self.words, "W_k W_k^T")
        return _tied_derived(K, self.words, vals)

    def params(self):
        return {"order": self.order, "widths": list(self.widths)}


def theory_rows(model, res: Trajectory, words) -> Trajectory:
    """Add ``p_kl`` and ``loss = Phi(q)`` rows to a tied theory trajectory."""
    K = model.K
    names = tied_observable_names(K, words)
    rows = np.array([res.moment(w) for w in words]) if words else np.zeros((0, res.t.size))
    extra = []
    if any(len(w) == 2 for w in words):
        t = np.array([res.moment((k,)) for k in range(K)])
        for k in range(K):
            for l in range(k, K):
                extra.append(res.moment((k, l)) - t[k] * t[l])
    loss = np.full(res.t.size, np.nan)
    pot = model.potential
    if pot is not None and any(len(w) == 2 for w in words):
        import sympy as sp
        qs = [pot.q[k, l] for k in range(K) for l in range(k, K)]
        psyms = list(pot.params)
        f = sp.lambdify(qs + psyms, pot.phi, "numpy")
        qv = [res.moment((k, l)) for k in range(K) for l in range(k, K)]
        loss = np.broadcast_to(np.asarray(f(*qv, *model.gradient_parameters), float),
                               res.t.shape).copy()
    y = np.vstack([rows] + ([np.array(extra)] if extra else []) + [loss[None, :]])
    return Trajectory(t=res.t, y=y, names=names, words=[tuple(w) for w in words],
                      kind=res.kind, params=res.params, status=res.status, message=res.message,
                      diagnostics=res.diagnostics)
