"""The finite-d escape-time law of direct S with the linear loss (theorems/escape.py) against
SGD seeds: quantiles, KS distance, mean in seed units; a fast case at d = 24 and the sizes of
docs/theorems.md under the slow marker."""

import math

import numpy as np
import pytest

from attndyn.numeric.attention.direct.model import SModel
from attndyn.numeric.attention.theorems.escape import (EscapeLaw, compare_escape,
                                                       direct_escape_law)
from attndyn.numeric.attention.theorems.weak_recovery import measure_crossings
from attndyn.symbolic.losses import mse_teacher_student


def test_law_limits_and_round_trip(tmp_path):
    law = direct_escape_law(0.2, 10**6, batch=16)
    assert law.T_inf == pytest.approx(0.5 * math.log(5 / 3))
    s = law.sample(20_000, 1)
    assert abs(s.mean() - law.T_inf) < 1e-4 and s.std() < 1e-4   # spread O(1/d)
    small = direct_escape_law(0.2, 40, batch=16)
    # the start's offset: E|alpha| and E a - 1/2 = 1/(2d) both make small d cross early
    assert small.sample(50_000, 2).mean() < small.T_inf - 0.02
    sd0 = small.sample(50_000, 2, noise=False).std()
    sdn = small.sample(50_000, 2, initial=False).std()
    assert sdn < 0.2 * sd0          # the start dominates the SGD noise at eta = 1/(d log d)
    # the noise variance scales like eta / B
    big = direct_escape_law(0.2, 40, batch=1)
    assert big.noise_sd == pytest.approx(small.noise_sd * 4, rel=1e-9)
    assert EscapeLaw.load(small.save(tmp_path / "law.json")) == small


def test_law_bad_input():
    for kw, msg in (({"c": 0.6}, "c must be below"), ({"d": 3}, "d must"),
                    ({"batch": 0}, "batch must"), ({"eta": -1.0}, "eta must")):
        args = {"c": 0.2, "d": 40, **kw}
        with pytest.raises(ValueError, match=msg):
            direct_escape_law(args.pop("c"), args.pop("d"), **args)
    with pytest.raises(ValueError, match="n must"):
        direct_escape_law(0.2, 40).sample(0)


def _measured(d, n, seed):
    m = SModel(2, [0], mse_teacher_student("h1"))
    law = direct_escape_law(0.2, d, batch=16)
    r = measure_crossings(m, d, 0.2, n_seeds=n, seed=seed, batch=16, T_max=1.8 * law.T_inf,
                          checkpoints=240)
    return compare_escape(law, r["T_sgd"])


def test_escape_law_against_sgd_small():
    c = _measured(24, 40, [7, 24])
    assert c["ks_pvalue"] > 0.01 and abs(c["z_mean"]) < 3
    assert 0.7 < c["sd_ratio"] < 1.4
    # and the d -> infinity time alone is rejected: SGD crosses ~20% early at d = 24
    assert (c["mean_sgd"] - c["T_inf"]) / (c["sd_sgd"] / math.sqrt(c["n"])) < -5


@pytest.mark.slow
@pytest.mark.parametrize("d", [40, 80])
def test_escape_law_against_sgd_reported_sizes(d):
    c = _measured(d, 40, [7, d])
    assert c["ks_pvalue"] > 0.01 and abs(c["z_mean"]) < 3
    assert 0.6 < c["sd_ratio"] < 1.5
