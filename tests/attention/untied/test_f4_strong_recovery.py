"""F.4: untied strong recovery (Assumption 11, Corollary 9) with holds and fails cases."""

import numpy as np
import pytest

from attndyn.numeric.attention.theorems.f4_strong_recovery import (check_f4, corollary9,
                                                                   sign_law, untied_pl_ratio)
from attndyn.numeric.attention.untied.limit import limit_flow
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.numeric.core.checks import registered
from attndyn.symbolic.losses import mse_teacher_student


def _run(p, gamma=0.0, T=3.0, n=241):
    model = UntiedModel(2, [0], mse_teacher_student("h1"), weight_decay=gamma)
    t = np.linspace(0.0, T, n)
    lim = limit_flow(model, sign_law(40, 0.7, p), t, order=3)
    assert lim.status == 0
    return model, t, lim, untied_pl_ratio(model, lim)


def test_pl_ratio_exact_aligned():
    """Aligned law: Delta = E(|s| - c)^2 and the dissipation is 8 E[|s| (|s| - c)^2]."""
    model, t, lim, pl = _run(1.0)
    g, gw = np.polynomial.legendre.leggauss(40)
    x, wx = 1.0 + 0.8 * g, gw / 2
    rho = 4 * 0.7
    s = rho * x[:, None] * np.exp(rho * t) / (rho + 4 * x[:, None] * np.expm1(rho * t))
    D = wx @ (s - 0.7) ** 2
    diss = 8 * wx @ (s * (s - 0.7) ** 2)
    assert np.abs(pl["Delta"] - D).max() < 1e-10
    assert np.abs(pl["dissipation"] - diss).max() < 1e-9
    res = corollary9(t, pl["Delta"], pl["c"], 0.0, 0.05 * D[0])
    assert res["assumption11"] and res["c_min"] > 4 * 0.2 * 0.99   # c >= 4 min x
    assert res["bound_margin"] <= 1e-9 and res["T_eps_measured"] <= res["T_eps"]


def test_pl_ratio_identity_with_decay():
    """-dPsi/dtau from the moments against differences of Psi (gamma > 0, Psi* unknown)."""
    model, t, lim, pl = _run(1.0, gamma=0.2, T=0.5, n=401)
    fd = -np.gradient(pl["Delta"], t, edge_order=2)
    assert np.abs(fd[2:-2] - pl["dissipation"][2:-2]).max() < 1e-4 * np.abs(fd).max()


def test_assumption11_fails_anti_aligned():
    """A fraction of anti-aligned entries: Delta stalls at (1 - p) c^2 > Psi* = 0, c -> 0."""
    model, t, lim, pl = _run(0.8)
    res = corollary9(t, pl["Delta"], pl["c"], 0.0, 0.05 * pl["Delta"][0])
    assert not res["assumption11"]
    assert abs(res["Delta_end"] - 0.2 * 0.49) < 1e-3 and res["c_end"] < 1e-3
    assert "T_eps" not in res


@pytest.mark.slow
def test_check_f4_small():
    assert "f4" in registered()
    r = check_f4("small", 0)
    assert r.verdict == "held", r.detail
    assert r.data["anti"]["assumption11"] is False
    assert r.worst <= r.bound
