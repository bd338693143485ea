"""Fig. 3's law (h1, standard Gaussian pairs): the finite-d slaved flow approaches the untied
d -> infinity limit, and the draws' means extrapolated in 1/d agree with ``limit_flow``
(docs/untied.md, "Fig. 3's law, measured")."""

import numpy as np
import pytest

from attndyn import gaussian_init
from attndyn.numeric.attention.untied.fastslow import untied_flow
from attndyn.numeric.attention.untied.limit import UntiedLaw, gaussian_pair, limit_flow
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.symbolic.losses import mse_teacher_student

ROWS = ("tA_1", "tB_1", "q1_11", "q2_11", "q1_12", "q2_12")


def _draws(model, d, n, tau):
    """Rows of the finite-d slaved flow from ``n`` draws of the law at size ``d``."""
    out = []
    for s in range(n):
        f = untied_flow(model, gaussian_init(model, d, seed=[2700, d, s]), tau, mode="slaved")
        assert f.status == 0, f.message
        names = list(f.names)
        out.append([f.y[names.index(r)] for r in ROWS])
    return np.array(out)                                  # draws x rows x times


def _wls_intercept(x, y, s):
    """Weighted least squares y = L + B x; L and its standard error (scaled by the fit's
    sqrt(chi2/dof) when above 1)."""
    X = np.c_[np.ones_like(x), x]
    w = 1 / s ** 2
    cov = np.linalg.inv(X.T @ (X * w[:, None]))
    b = cov @ X.T @ (w * y)
    scale = max(1.0, np.sqrt(np.sum(w * (y - X @ b) ** 2) / (len(x) - 2)))
    return b[0], np.sqrt(cov[0, 0]) * scale


@pytest.mark.slow
def test_finite_d_flow_extrapolates_to_the_limit():
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    law = UntiedLaw([gaussian_pair(1.0), gaussian_pair(1.0)])
    tau = np.array([0.0, 0.5, 1.0])
    plan = {100: 12, 200: 6, 400: 3}
    Y = {d: _draws(model, d, n, tau) for d, n in plan.items()}
    ds = np.array(list(plan), float)
    lim = limit_flow(model, law, tau, sizes=(100, 200), rotations=6, seed=27)
    assert lim.status == 0, lim.message
    lim_y = np.array([lim.y[list(lim.names).index(r)] for r in ROWS])
    # the draws' means extrapolated in 1/d (weighted by their standard errors)
    L, sL = np.zeros((len(ROWS), tau.size)), np.zeros((len(ROWS), tau.size))
    for r in range(len(ROWS)):
        for j in range(1, tau.size):
            mean = np.array([Y[d][:, r, j].mean() for d in plan])
            se = np.array([Y[d][:, r, j].std(ddof=1) / np.sqrt(len(Y[d])) for d in plan])
            L[r, j], sL[r, j] = _wls_intercept(1 / ds, mean, se)
    # each draw approaches it like d^-a with a near 1 (the O(1/d) fluctuations of the initial
    # overlaps); an O(d^-1/2) error in the flow or in the draws gives a near 1/2. (The gap to
    # this cheap limit flattens at d = 400: its stated error, 0.011-0.040, is larger.)
    gap = np.array([np.sqrt(np.mean([np.abs(y - L)[:, 1:].max() ** 2 for y in Y[d]]))
                    for d in plan])
    a = -np.polyfit(np.log(ds), np.log(gap), 1)[0]
    assert 0.75 < a < 1.4, (gap, a)
    # the extrapolation agrees with the limit within the combined error (2 se and the stated)
    for r, name in enumerate(ROWS):
        err = lim.error[name]
        for j in (1, 2):
            assert abs(L[r, j] - lim_y[r, j]) < np.hypot(2 * sL[r, j], err[j]), (
                name, tau[j], L[r, j], sL[r, j], lim_y[r, j], err[j])
