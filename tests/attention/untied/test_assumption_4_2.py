"""Assumption 4.2 of paper 003 (untied factors of extensive rank with bounded operator norm):
Gaussian pairs hold it, a rank-one factor of the same Frobenius norm fails it, and so does
a bound C0 below the measured operator norm."""

import math

import numpy as np
import pytest

from attndyn.numeric.attention.untied import assumptions as UA
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.numeric.attention.training import gaussian_init
from attndyn.symbolic.losses import mse_teacher_student


def _model():
    return UntiedModel(2, [0], mse_teacher_student("h1"))


def test_gaussian_pairs_hold_and_report_C0():
    m = _model()
    d = 120
    pairs = gaussian_init(m, d, scale=[0.8, 1.0], seed=3)
    v = UA.assumption_4_2(m, pairs)
    assert v.holds is True and v.assumption == "4.2"
    # square Gaussian factors: ||X||_op -> 2 scale, stable-rank fraction -> 1/4
    assert v.values["C0"] == pytest.approx(2.0, rel=0.1)
    assert min(r["rank_fraction"] for r in v.values["factors"]) == pytest.approx(0.25, abs=0.05)
    for r in v.values["factors"]:
        s = 0.8 if r["k"] == 0 else 1.0
        assert r["fro_over_sqrt_d"] == pytest.approx(s, rel=0.05)
    assert UA.assumption_4_2(m, pairs, C0=2.5).holds is True


def test_rank_one_factor_fails():
    m = _model()
    d = 120
    (U1, V1), (U2, V2) = gaussian_init(m, d, seed=4)
    # ||U||_F = sqrt(d) as for a Gaussian factor, but all of it in one direction: ||U||_op = sqrt(d)
    e = np.zeros((d, d))
    e[0, 0] = math.sqrt(d)
    v = UA.assumption_4_2(m, [(e, V1), (U2, V2)])
    assert v.holds is False
    assert "U1" in v.message and "extensive rank" in v.message
    assert v.values["C0"] == pytest.approx(math.sqrt(d))


def test_C0_below_the_operator_norm_fails():
    m = _model()
    pairs = gaussian_init(m, 80, seed=5)
    v = UA.assumption_4_2(m, pairs, C0=1.0)
    assert v.holds is False and "C_0" in v.message


def test_bad_arguments_are_refused():
    m = _model()
    pairs = gaussian_init(m, 20, seed=6)
    with pytest.raises(ValueError, match="min_rank_fraction"):
        UA.assumption_4_2(m, pairs, min_rank_fraction=0.0)
    with pytest.raises(ValueError, match="C0"):
        UA.assumption_4_2(m, pairs, C0=float("nan"))


def test_untied_diagnostics_include_4_2():
    m = _model()
    pairs = gaussian_init(m, 40, seed=7)
    labels = [v.assumption for v in m.theory.assumptions(pairs, quick=True)]
    assert labels[:3] == ["4.1", "4.2", "4.4"]
