"""Finite-d online SGD of the direct-S model (appendix E): the runner the generic driver
calls (the matrices ``S_k`` themselves are the weights) and the observables ``t_k``,
``Psi_kl``, ``Omega_kl`` of eqs. (402)-(404)."""

from __future__ import annotations

import numpy as np

from attndyn.numeric.attention.base import obs_key, SGDRunner

__all__ = ["s_observable_names", "s_observables"]


def s_observable_names(K: int) -> list:
    """Observables of the direct-S model: ``t_k``, ``Psi_kl``, ``Omega_kl`` (every
    ordered pair), the structural overlaps ``p_Psi_kl``, ``p_Omega_kl``,
    ``p_plus_kl``, ``p_minus_kl`` (eqs. 406-408), and ``loss``."""
    names = [obs_key("t", k) for k in range(K)]
    for nm in ("Psi", "Omega", "p_Psi", "p_Omega", "p_plus", "p_minus"):
        names += [obs_key(nm, k, l) for k in range(K) for l in range(K)]
    return names + ["loss"]


def s_observables(t, Psi, Omega, loss) -> np.ndarray:
    """Observable vector in the order of :func:`s_observable_names`."""
    t = np.asarray(t, dtype=float)
    tt = np.outer(t, t)
    pP = Psi - tt
    pO = Omega - tt
    return np.concatenate([t, np.ravel(Psi), np.ravel(Omega), pP.ravel(), pO.ravel(),
                           ((pO + pP) / 2).ravel(), ((pO - pP) / 2).ravel(), [loss]])


def direct_order_parameters(mats):
    K = len(mats)
    d = mats[0].shape[0]
    t = np.array([np.trace(m) / d for m in mats])
    Psi = np.empty((K, K))
    Om = np.empty((K, K))
    for k in range(K):
        for l in range(k, K):
            Psi[k, l] = Psi[l, k] = np.sum(mats[k] * mats[l].T) / d
            Om[k, l] = Om[l, k] = np.sum(mats[k] * mats[l]) / d
    return t, Psi, Om


class SRunner(SGDRunner):
    """Matrices side by side in one array (trainable slots first) for
    :func:`attndyn.kernels.sgd.s_steps`."""

    def __init__(self, model, mats):
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

    def workspace_shape(self, B, L):
        return (B, L, self.d, self.W.shape[1], self.n_tr * self.d)

    def step(self, n, eta, gamma, B, lossfn, lp, C, F, ident, state, blowup, losses, info, ws):
        from attndyn.kernels import sgd as _k
        _k.s_steps(self.W, self.kidx, self.n_tr, C, F, ident, eta, gamma, B, n, lossfn, lp,
                   state, blowup, losses, info, *ws)

    def observables(self):
        t, Psi, Om = direct_order_parameters([self.matrix(k) for k in range(self.model.K)])
        return s_observables(t, Psi, Om, np.nan)[:-1]
