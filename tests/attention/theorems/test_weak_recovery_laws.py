"""Corollaries 4 (i) and 7 case 1 as measured checks (`cor4`, `cor7`): the predicted N_wr of
every parameterisation, SGD d-scans fitted with cor3's machinery, and the fails cases (h2,
outside the premise: the checks must not say "held")."""

import math

import numpy as np
import pytest

import attndyn
from attndyn.cli import main
from attndyn.numeric.attention.direct.model import SModel
from attndyn.numeric.attention.theorems import cor4, cor7
from attndyn.numeric.attention.theorems.weak_recovery import (WeakRecoveryPrediction,
                                                              measure_crossings, weak_recovery)
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.numeric.core.checks import run_checks
from attndyn.symbolic.losses import mse_teacher_student


def _s(act="h1"):
    return SModel(2, [0], mse_teacher_student(act))


def test_direct_prediction_closed_form(tmp_path):
    """h1 direct S from the limit state: sigma(tau) = (1/2)(1 - exp(-2 tau)), so
    tau_wr(0.2) = log(5/3)/2 and N = B tau d^2 log d / c0."""
    p = weak_recovery(_s(), cor7.limit_state(1.0), 0.2, [100, 200], batch=16)
    assert p.T == pytest.approx(0.5 * math.log(5 / 3), rel=1e-6)   # interpolated crossing
    assert p.A == pytest.approx(16 * p.T)
    for d, n in zip(p.d, p.samples):
        assert n == pytest.approx(16 * math.ceil(p.T * d * d * math.log(d) - 1e-9))
    assert "case 1" in p.premise and "Theorem 4" in p.theory
    q = WeakRecoveryPrediction.load(p.save(tmp_path / "p.json"))
    assert q == p


def test_tied_and_untied_predictions():
    tied = attndyn.TiedModel(2, [0], mse_teacher_student("h1"))
    p = weak_recovery(tied, math.sqrt(0.5), 0.1, 100, c0=1.0, batch=16, T_max=1.0, n_grid=11)
    assert p.parameterisation == "tied" and p.A == pytest.approx(16 * p.T / 4)
    assert p.T == pytest.approx(0.4997, abs=2e-3)        # the limit flow's T_wr (docs)
    W = tied.gaussian_init(40, scale=math.sqrt(0.5), seed=3)
    f = weak_recovery(tied, W, 0.1, 40, T_max=1.0, n_grid=51)
    assert "finite-d matrix flow" in f.theory and abs(f.T / p.T - 1) < 0.2
    un = UntiedModel(2, [0], mse_teacher_student("h1"))
    pairs = un.gaussian_init(60, scale=1.0, seed=1)
    q = weak_recovery(un, pairs, 0.3, [60], T_max=1.0, n_grid=41)
    assert q.parameterisation == "untied" and 0.2 < q.T < 0.4 and "case (i)" in q.premise


def test_weak_recovery_bad_input():
    m = _s()
    st = cor7.limit_state(1.0)
    for kw, msg in (({"c": -1}, "c must"), ({"c": 0.2, "d": 1}, "d must"),
                    ({"c": 0.2, "batch": 0}, "batch must"),
                    ({"c": 0.2, "eta": -1.0}, "eta must")):
        kw = {"d": 50, **kw}
        with pytest.raises(ValueError, match=msg):
            weak_recovery(m, st, **kw)
    with pytest.raises(TypeError, match="model must be"):
        weak_recovery(object(), st, 0.2, 50)
    with pytest.raises(ValueError, match="n_seeds"):
        measure_crossings(m, 20, 0.2, n_seeds=0, seed=0)


def test_cor7_small_holds_and_prints_the_fit(capsys):
    assert main(["verify", "--only", "cor7", "--budget", "small"]) == 0
    out = capsys.readouterr().out
    assert "cor7" in out and "log-power k = " in out and "+-" in out
    assert "AIC d^2: " in out and "d^2 log d: " in out and "d^2 log^2 d: " in out
    assert "1 held, 0 not held" in out


def test_cor7_h2_outside_premise_is_not_held():
    r, = run_checks(["cor7"], budget="small", seed=0, options={"cor7": {"activation": "h2"}})
    assert r.verdict == "not applicable" and "case 2" in r.detail
    r, = run_checks(["cor4"], budget="small", seed=0, options={"cor4": {"activation": "h2"}})
    # at d_ref = 96 corollary4 finds neither (43) nor (46) for h2: case (i) fails either way
    assert r.verdict == "not applicable" and "premise fails" in r.detail
    assert "case (i)," not in r.detail


def test_cor4_small_scan():
    """The small budget's d = 24..96 carries an O(1/d) early crossing (the start's offset;
    -20% at d = 24), which pushes k up to about 1.5: the verdict is judged at the default
    budget (slow test below); here the machinery and the prefactor."""
    r = cor4.check_cor4("small", 0)
    fit = r.data["fit"]
    assert fit["preferred"] == "d^2 log d" and math.isfinite(fit["k_se_scaled"])
    assert r.data["prefactor_error"] <= 0.10 and r.worst == pytest.approx(abs(fit["k_hat"] - 1))
    ok = fit["preferred"] == "d^2 log d" and r.worst <= 0.5 and r.data["prefactor_error"] <= 0.1
    assert r.verdict == ("held" if ok else "not held")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["cor4", "cor7"])
def test_default_budget_holds(key):
    r, = run_checks([key], budget="default", seed=0)
    assert r.verdict == "held", r.detail
