"""Per-time premise rows of paper 000's lazy regime, recorded along a training run.

Kept apart from :mod:`.premises` (which drives whole runs through :func:`.training.train`)
so that ``train(..., record="premises")`` can build a recorder without importing its own
caller. The quantities are described in :mod:`.premises`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["premise_names", "PremiseRecorder"]


def premise_names(N):
    """The names of the premise rows that :class:`PremiseRecorder` records for a
    model of ``N`` layers: the drifts and norms of Lemma C.1 parts 1-4, the token norms
    (part 5), the smallest attention score (part 8), the loss bound (part 14), one
    ``part15_k`` per layer, the mean ``||gamma_p||^2`` (part 16) and the loss rate
    ``|grad L|^2 / L``.

        >>> premise_names(2)[-4:]
        ['part15_1', 'part15_2', 'gamma2_mean', 'rate']
    """
    return (["w_drift", "U_drift", "w_norm_max", "U_norm_max", "Lambda_norm_min",
             "Lambda_norm_max", "sigma_min", "part14"]
            + [f"part15_{k + 1}" for k in range(N)] + ["gamma2_mean", "rate"])


class PremiseRecorder:
    """Computes the premise rows of a model along a run (initial weights kept).

        >>> from attndyn.numeric.transformer import Transformer
        >>> tf = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=0)
        >>> X = np.random.default_rng(1).standard_normal((6, 2, 3))
        >>> Y = Transformer(N=1, L=2, d=3, m=8, eps=1.0, omega=1.0, kappa=0.5, rng=2)(X)
        >>> rec = PremiseRecorder(tf, X)
        >>> rec.names == premise_names(1), sorted(rec.lam)
        (True, ['definition', 'exact'])
    """

    def __init__(self, model, X):
        from .kernel import kernel_eigenvalues
        self.U0 = [u.copy() for u in model.U]
        self.W0 = [w.copy() for w in model.W]
        self.lam = {kn: min(e["lambda"] for e in kernel_eigenvalues(model, X, kernel=kn))
                    for kn in ("definition", "exact")}
        self.names = premise_names(model.N)

    def row(self, mdl, c, grads, deltas, loss):
        from .kernel import parts_from_cache
        n, L, d = c.F.shape
        r = {}
        r["w_drift"] = max(float(np.linalg.norm(w - w0, axis=0).max())
                           for w, w0 in zip(mdl.W, self.W0))
        r["U_drift"] = max(float(np.linalg.norm(u - u0)) for u, u0 in zip(mdl.U, self.U0))
        r["w_norm_max"] = max(float(np.linalg.norm(w, axis=0).max()) for w in mdl.W)
        r["U_norm_max"] = max(float(np.linalg.norm(u)) for u in mdl.U)
        norms = np.concatenate([np.linalg.norm(lam, axis=2).ravel() for lam in c.Lam])
        r["Lambda_norm_min"], r["Lambda_norm_max"] = float(norms.min()), float(norms.max())
        tril = np.tri(L, dtype=bool)
        r["sigma_min"] = min(float(P[:, tril].min()) for P in c.P)
        r["part14"] = loss / (L * d)
        eps2L = mdl.eps ** 2 * loss
        for k in range(mdl.N):
            dl = deltas[k]
            r[f"part15_{k + 1}"] = float(np.vdot(dl, dl)) / eps2L if eps2L > 0 else math.nan
        g2 = []
        for k in range(mdl.N):
            _, Hg = parts_from_cache(mdl, c, k)
            g2.append(np.diag(Hg))          # ||gamma_p||^2
        r["gamma2_mean"] = float(np.mean(np.concatenate(g2)))
        gn2 = float(sum(np.vdot(u, u) + np.vdot(w, w) for u, w in grads))
        r["rate"] = gn2 / loss if loss > 0 else math.nan
        return r
