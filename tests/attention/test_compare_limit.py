"""compare(theory="limit") for the untied model: one draw of the law per SGD seed (by default
when the law is given), the d -> infinity limit from the law, the gap judged in seed units
(Comparison.z, rms_z)."""

import numpy as np
import pytest

from attndyn.numeric import compare
from attndyn.numeric.attention.training import gaussian_init
from attndyn.numeric.attention.untied.limit import UntiedLaw, gaussian_pair
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.symbolic.losses import mse_teacher_student

ROWS = ["tA_1", "tB_1", "q1_11", "q1_12", "q2_12"]
KW = dict(eta=0.05, batch=200, t_eval=np.linspace(0.0, 0.4, 5), theory="limit", seed=0,
          names=ROWS)
LIMIT = {"sizes": (40, 80), "rotations": 2, "seed": 5}
LAW = UntiedLaw([gaussian_pair(1.0), gaussian_pair(1.0)])      # gaussian_init's, scale 1


def _model():
    return UntiedModel(2, [0], mse_teacher_student("h1"))


def test_one_draw_per_seed_and_seed_units():
    m = _model()
    c = compare(m, {"d": 40, "seed": 1}, n_seeds=6, theory_kwargs={**LIMIT, "law": LAW}, **KW)
    assert c.status == 0 and c.params["init_per_seed"] is True
    assert c.params["theory"] == "limit"
    t0 = [r.y[r.names.index("tA_1")][0] for r in c.runs]
    assert len(set(np.round(t0, 12))) == 6                 # six different starts
    assert c.theory.kind == "untied_limit"
    z = c.rms_z()
    assert set(z) == set(ROWS)
    # six seeds: an unbiased theory gives about 1.3
    assert max(z.values()) < 4.0, z
    assert np.all(np.isfinite(c.z("q1_12")))
    # forced, with the law read off the first draw
    c2 = compare(m, {"d": 40, "seed": 1}, n_seeds=6, theory_kwargs=LIMIT, init_per_seed=True,
                 **KW)
    assert c2.params["init_per_seed"] is True
    assert max(c2.rms_z().values()) < 4.0


def test_a_wrong_law_is_seen_in_seed_units():
    m = _model()
    wrong = UntiedLaw([gaussian_pair(1.3), gaussian_pair(1.0)])
    c = compare(m, {"d": 40, "seed": 1}, n_seeds=6,
                theory_kwargs={**LIMIT, "law": wrong}, **KW)
    assert c.status == 0
    assert c.rms_z(["tA_1"])["tA_1"] > 10


def test_one_seed_given_pairs_or_no_law_keep_one_start():
    m = _model()
    c0 = compare(m, {"d": 30, "seed": 2}, n_seeds=2, theory_kwargs=LIMIT, **KW)
    assert c0.params["init_per_seed"] is False            # no law given: one start
    a, b = (r.y[r.names.index("tA_1")][0] for r in c0.runs)
    assert a == b
    c1 = compare(m, {"d": 30, "seed": 2}, n_seeds=1, theory_kwargs=LIMIT, **KW)
    assert c1.params["init_per_seed"] is False
    ref = m.order_parameters(gaussian_init(m, 30, seed=2))
    assert c1.runs[0].y[c1.runs[0].names.index("tA_1")][0] == pytest.approx(ref["tA"][0])
    assert np.all(np.isnan(c1.z("tA_1")))                  # one seed: no seed unit
    pairs = gaussian_init(m, 30, seed=3)
    c2 = compare(m, pairs, n_seeds=2, theory_kwargs=LIMIT, **KW)
    assert c2.params["init_per_seed"] is False
    a, b = (r.y[r.names.index("tA_1")][0] for r in c2.runs)
    assert a == b


def test_limit_needs_the_slow_time_and_names_bad_rows():
    m = _model()
    with pytest.raises(ValueError, match="theory for an UntiedModel"):
        compare(m, {"d": 20, "seed": 0}, eta=0.05, batch=50, t_eval=[0.0, 0.1],
                theory="limits")
    with pytest.raises(ValueError, match="init_per_seed=True needs a theory of the law"):
        compare(m, {"d": 20, "seed": 0}, eta=0.05, batch=50, t_eval=[0.0, 0.1],
                theory="slaved", n_seeds=2, init_per_seed=True)
    with pytest.raises(TypeError, match="init_per_seed"):
        compare(m, {"d": 20, "seed": 0}, eta=0.05, batch=50, t_eval=[0.0, 0.1],
                theory="limit", init_per_seed="yes")
    c = compare(m, {"d": 20, "seed": 0}, n_seeds=2, theory_kwargs=LIMIT, **KW)
    with pytest.raises(KeyError, match="no observable"):
        c.z("q_12")
