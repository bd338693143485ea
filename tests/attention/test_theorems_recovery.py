"""Corollary 3 (tied weak recovery, N_wr ~ d^2 log d) and strong recovery under the PL
condition (D.5, Corollary 6) as checks of ``attndyn verify`` (issue 18).

The helpers are tested on inputs whose answer is known (crossing times of sampled lines,
fits of exact power laws, the PL identity on a flow); the checks themselves run at the
``small`` budget (default suite) and ``slow`` (``-m slow``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndyn.numeric.attention.theorems import cor3, cor6_recovery as recovery
from attndyn.numeric.core.checks import CheckResult, registered


def test_registered():
    keys = registered()
    assert "cor3" in keys and "recovery" in keys
    assert keys["cor3"][0].startswith("Cor. 3")


def test_crossing_time_interpolates_and_refuses_bad_input():
    t = np.linspace(0, 1, 11)
    assert cor3.crossing_time(t, 0.3 * t, 0.15) == pytest.approx(0.5)
    assert cor3.crossing_time(t, -0.3 * t, 0.15) == pytest.approx(0.5)   # |p_12|
    assert cor3.crossing_time(t, 0.3 * t, 0.5) == math.inf
    assert cor3.crossing_time(t, 0.2 + t, 0.1) == 0.0
    for bad in (0.0, -1.0, math.nan, True):
        with pytest.raises(ValueError, match="threshold"):
            cor3.crossing_time(t, t, bad)
    with pytest.raises(ValueError, match="increasing"):
        cor3.crossing_time(t[::-1], t, 0.1)
    with pytest.raises(ValueError, match="finite"):
        cor3.crossing_time(t, np.full(11, np.nan), 0.1)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_fit_scaling_recovers_the_law_it_was_given(k):
    """Samples drawn as A d^2 (log d)^k with 3% log-normal noise: the fit prefers law k,
    and the free power of log d is k within 3 standard errors."""
    rng = np.random.default_rng(k)
    dims = [40, 57, 80, 113, 160, 226]
    samples = [3.0 * d ** 2 * math.log(d) ** k * np.exp(0.03 * rng.standard_normal(6))
               for d in dims]
    fit = cor3.fit_scaling(dims, samples)
    assert fit["preferred"] == list(cor3.SCALING_MODELS)[k]
    assert abs(fit["k_hat"] - k) <= 3 * fit["k_se_scaled"]
    name = list(cor3.SCALING_MODELS)[k]
    assert abs(fit["b_hat"] - fit["b_expected"][name]) <= 3 * fit["b_se_scaled"]
    assert fit["models"][name]["A"] == pytest.approx(3.0, rel=0.05)
    with pytest.raises(ValueError, match="at least 3"):
        cor3.fit_scaling(dims[:2], samples[:2])
    with pytest.raises(ValueError, match=">= 2 finite"):
        cor3.fit_scaling(dims[:3], [[1.0], [2.0, 3.0], [4.0, 5.0]])


def test_eq17_against_the_limit_flow():
    """eq. (17): dp_12/dt(0) = -2 Gamma_12 t_1 p_22 for h1, h2, h3 (MATH.md: 0.25, 0.25,
    0.1875 at t = 1/2, Var G = 1) against the exact limit flow's initial slope."""
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student
    for act, want in (("h1", 0.25), ("h2", 0.25), ("h3", 0.1875)):
        m = TiedModel(2, [0], mse_teacher_student(act))
        th = cor3.eq17_slopes(m)
        assert th["slope_eq17"] == pytest.approx(want, rel=1e-12)
        assert th["slope_limit"] == pytest.approx(th["slope_eq17"], rel=1e-5)


def test_measure_weak_recovery_is_seeded_and_tracks_the_flow():
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student
    m = TiedModel(2, [0], mse_teacher_student("h1"))
    a = cor3.measure_weak_recovery(m, 32, 0.1, n_seeds=2, seed=7, T_max=0.9)
    b = cor3.measure_weak_recovery(m, 32, 0.1, n_seeds=2, seed=7, T_max=0.9)
    assert a["samples"] == b["samples"]
    # h1: the flow is the exact expected drift; the gap is the update noise (~ c0/(B log d))
    for ts, tf in zip(a["T_sgd"], a["T_flow"]):
        assert abs(ts / tf - 1) < 0.1
    assert all(n == 16 * math.ceil(t / a["dt"]) for n, t in zip(a["samples"], a["T_sgd"]))
    for kw, frag in (({"d": 2}, "d must be"), ({"n_seeds": 0}, "n_seeds"),
                     ({"c": -0.1}, "c must be"), ({"T_max": math.inf}, "T_max")):
        args = {"d": 32, "c": 0.1, "n_seeds": 1, "seed": 0, "T_max": 0.9, **kw}
        with pytest.raises(ValueError, match=frag):
            cor3.measure_weak_recovery(m, args.pop("d"), args.pop("c"), **args)


def test_pl_identity_on_a_flow():
    """-d log Delta/dt = 2 c(t) with c from the words of length 3 (the dissipation formula),
    on a small tied h1 flow; Delta falls and c stays positive."""
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.symbolic.losses import mse_teacher_student
    m = TiedModel(2, [0], mse_teacher_student("h1"))
    W = m.gaussian_init(30, width=120, seed=3)
    t = np.linspace(0, 2, 201)
    fl = m.matrix_flow([w @ w.T for w in W], t, order=3)
    pl = recovery.pl_ratio(m, fl)
    fd = -np.gradient(np.log(pl["Delta"]), t, edge_order=2)
    np.testing.assert_allclose(fd[1:-1], 2 * pl["c"][1:-1], rtol=2e-3)
    assert np.all(pl["c"] > 0) and pl["Delta"][-1] < 1e-2 * pl["Delta"][0]
    with pytest.raises(ValueError, match="K = 2"):
        recovery.pl_ratio(TiedModel(3, [0], mse_teacher_student("h1")), fl)


def _check_ok(r: CheckResult):
    assert isinstance(r, CheckResult)
    assert r.verdict == "held", (r.measured, r.detail)
    assert math.isfinite(r.worst) and r.worst <= r.bound
    r.as_dict()   # JSON-ready


def test_cor3_small_budget():
    r = cor3.check_cor3("small", 0)
    _check_ok(r)
    fit = r.data["main"]["fit"]
    assert fit["preferred"] == "d^2 log d"
    assert r.data["main"]["prefactor_error"] <= cor3.PREFACTOR_TOL


def test_recovery_small_budget():
    _check_ok(recovery.check_recovery("small", 0))


def test_budget_refused():
    for mod in (cor3, recovery):
        with pytest.raises(ValueError, match="budget"):
            mod.config("huge")


@pytest.mark.slow
def test_cor3_default_budget():
    _check_ok(cor3.check_cor3("default", 0))


@pytest.mark.slow
def test_recovery_default_and_slow_budgets():
    _check_ok(recovery.check_recovery("default", 0))
    _check_ok(recovery.check_recovery("slow", 0))


@pytest.mark.slow
def test_cor3_slow_budget():
    """d = 50..400 for h1 (judged) and h2 (reported: its finite-d SGD runs ahead of the
    Gaussian-equivalent flow, see docs/theorems.md)."""
    r = cor3.check_cor3("slow", 0)
    _check_ok(r)
    assert len(r.data["extras"]) == 1
