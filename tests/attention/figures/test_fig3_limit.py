"""Fig. 3's untied d -> infinity limit against SGD from draws of its law (issue 27)."""

import numpy as np
import pytest

from attndyn.numeric.attention.figures import fig3 as F3
from attndyn.numeric.attention.figures.common import figure_settings

TINY = dict(d=16, batch=34, T=0.02, n_t=3, mc_d=(12, 16), mc_n=500, limit_sizes=(8, 16),
            limit_rotations=2)


def _s(**kw):
    s, _ = F3._fig3_settings("mini", 2, dict(TINY, **kw))
    return s


def test_law_runs_draw_one_start_per_seed_and_the_fixed_runs_share_one():
    s = _s()
    (_, p0, _, _), (_, p1, _, _) = (F3._sgd_setup("h1:law", sd, s) for sd in (0, 1))
    (_, f0, _, _), (_, f1, _, _) = (F3._sgd_setup("h1", sd, s) for sd in (0, 1))
    assert not np.allclose(p0[0][0], p1[0][0]) and not np.allclose(p0[1][0], p1[1][0])
    np.testing.assert_array_equal(f0[0][0], f1[0][0])
    with pytest.raises(ValueError, match="allowed"):
        F3._sgd_setup("h2:law", 0, s)    # h2 is not in law_acts
    with pytest.raises(ValueError, match="allowed"):
        F3._sgd_setup("h9", 0, s)


@pytest.mark.slow
def test_fig3_draws_the_limit_and_judges_it_in_seed_units():
    r = F3.fig3("mini", acts=("h1",), **TINY)
    assert {"h1/limit", "h1/sgd_law/seed0", "h1/sgd_law/seed1", "h1/sgd/seed0"} <= set(r.curves)
    lim = r.extra["limit"]["h1"]
    assert lim["status"] == 0 and np.isfinite(lim["z"][0]) and lim["err"] > 0
    claim = [c for c in r.claims if "d -> infinity limit" in c.text]
    assert len(claim) == 1 and "rms z" in claim[0].measured
    assert claim[0].held == (lim["z"][0] <= 3.0)
    assert np.all(np.isfinite(r.curves["h1/limit"].error["q1_12"]))


def test_fig3_settings_keep_the_law_keys_overridable():
    s = figure_settings("fig3", "quick", {"limit_rotations": 3})
    assert s["limit_rotations"] == 3 and s["law_acts"] == ("h1",)
    assert figure_settings("fig3", "quick", {})["seeds"] >= 4
