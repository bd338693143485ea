"""The tied theories: matrix flow, truncated hierarchy, d -> infinity limit, and the corrections."""

from __future__ import annotations

import numpy as np

from attndyn.numeric.attention.tied.runner import tied_observable_names
from attndyn.numeric.core.results import Trajectory

__all__ = []


def _noise_theory(self, init, S, t, theory, order, check, words, kwargs):
    """``theory="hierarchy"`` / ``"limit"`` with ``correction="noise"``: the truncated
    hierarchy with the noise rows, from the matrices (hierarchy) or from the law of the
    factors (limit, ``d -> infinity`` at fixed ``eta d / B``; the truncation ``order``
    keyword of the limit is its longest reported word, the hierarchy runs at
    ``hierarchy_order``, default ``max(order, 8)``)."""
    from attndyn.numeric.attention.tied.noise_flow import noise_hierarchy
    eta, batch = kwargs.pop("eta"), kwargs.pop("batch")
    opts = {k: kwargs.pop(k) for k in ("rtol", "atol", "conv_tol", "blowup") if k in kwargs}
    chk = None if check is None else "auto"  # the corrected system's own ladder
    if theory == "hierarchy":
        h_order = order
        mu0, d = S, None
    else:
        from attndyn.numeric.attention.tied.limit import law_of_factors
        h_order = kwargs.pop("hierarchy_order", max(order, 8))
        law = kwargs.pop("law", None)
        mu0 = law_of_factors(self, self.check_init(init)) if law is None else law
        d = S[0].shape[0]
    unknown = sorted(kwargs)
    if unknown:
        raise ValueError(f"correction='noise' (theory={theory!r}) does not take {unknown}")
    th = noise_hierarchy(self.hierarchy(h_order), mu0, t, eta=eta, batch=batch, d=d,
                         check=chk, **opts)
    return _tied_theory_derived(self, th, words)


def _tied_theory_derived(model, res: Trajectory, words) -> Trajectory:
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
