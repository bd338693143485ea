"""The finite-d escape-time law of the tied model with the linear activation
(theorems/escape.py, tied part) against its rungs: the closed-form flow against the matrix
flow, the noise formula against one SGD step sampled, the tangent against finite differences,
and the law against SGD seeds (d = 24 by default, d = 40 and 80 slow)."""

import math

import numpy as np
import pytest

from attndyn.numeric.attention.theorems import escape as esc
from attndyn.numeric.attention.theorems.cor3 import measure_weak_recovery, overlap_p12
from attndyn.numeric.attention.tied.model import TiedModel
from attndyn.symbolic.losses import mse_teacher_student


def _model():
    return TiedModel(2, [0], mse_teacher_student("h1"))


def _start(d, seed):
    rng = np.random.default_rng(seed)
    W1, W2 = rng.standard_normal((2, d, d)) * math.sqrt(0.5 / d)
    return W1 @ W1.T, W2 @ W2.T


def test_closed_form_flow_is_the_matrix_flow():
    S1, S2 = _start(12, 0)
    t = np.linspace(0.0, 0.9, 7)
    fl = _model().matrix_flow([S1, S2], t, order=2, rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(esc.riccati_overlap(S1, S2, t) - overlap_p12(fl))) < 1e-10
    with pytest.raises(ValueError, match="S1 and S2"):
        esc.riccati_overlap(S1, S2[:3, :3], t)


def test_tangent_is_the_derivative_of_the_closed_form():
    # N(u) = d p_12(T) / d S(u) (times d): the noise propagator of the law
    S1, S2 = _start(10, 1)
    S0, lam = esc._riccati_basis(S1, S2)
    u, T = 0.2, 0.6
    S = esc._riccati_S(S0, lam, u)
    _, A = esc._riccati_parts(S, lam, T - u)
    Ai = np.linalg.inv(A)
    N = (Ai * (np.exp(2 * lam * (T - u)) * (lam - lam.mean()))[None, :]) @ Ai.T
    E = np.random.default_rng(2).standard_normal((10, 10))
    E = (E + E.T) / 2
    h = 1e-5
    fd = (esc._riccati_p(S + h * E, lam, T - u) - esc._riccati_p(S - h * E, lam, T - u)) / (2 * h)
    assert fd == pytest.approx(np.sum(E * N) / 10, rel=1e-6)


def test_variance_of_a_product_of_quadratic_forms():
    # Var(Q_D Q_M) = 4 Tr D^2 Tr M^2 + 4 Tr(DM)^2 + 32 Tr(D^2 M^2) + 16 Tr(DMDM), the
    # single-sample variance behind noise_sd, against 4e5 Gaussian samples
    rng = np.random.default_rng(3)
    d = 6
    D, M = (x + x.T for x in rng.standard_normal((2, d, d)) / 2)
    x = rng.standard_normal((400_000, d))
    qd = np.einsum("ni,ij,nj->n", x, D, x) - np.trace(D)
    qm = np.einsum("ni,ij,nj->n", x, M, x) - np.trace(M)
    DM = D @ M
    V = (4 * np.sum(D * D) * np.sum(M * M) + 4 * np.trace(DM) ** 2
         + 32 * np.sum((D @ D) * (M @ M)) + 16 * np.sum(DM * DM.T))
    emp = np.var(qd * qm)
    se = np.std((qd * qm - (qd * qm).mean()) ** 2) / math.sqrt(x.shape[0])
    assert abs(emp - V) < 4 * se
    # the Isserlis part alone misses it by many standard errors: the cumulant term is needed
    assert abs(emp - (4 * np.sum(D * D) * np.sum(M * M) + 4 * np.trace(DM) ** 2)) > 10 * se


def test_law_round_trip_and_bad_input(tmp_path):
    law = esc.tied_escape_law(0.1, 16, n_draws=50, n_noise=2, n_shift=1, seed=4, limit=False)
    assert len(law.start) == 50 and law.noise_sd > 0
    back = esc.TiedEscapeLaw.load(law.save(tmp_path / "tied.json"))
    def fields(x):  # T_inf is nan with limit=False (not computed)
        return {k: v for k, v in x.as_dict().items() if k != "T_inf"}
    assert fields(back) == fields(law) and math.isnan(back.T_inf)
    assert isinstance(esc.load_escape_law(tmp_path / "tied.json"), esc.TiedEscapeLaw)
    with pytest.raises(ValueError, match="not a saved escape law"):
        esc.EscapeLaw.load(tmp_path / "tied.json")
    s = law.sample(1000, 1, noise=False)
    assert set(np.unique(s)) <= set(law.start)
    assert np.std(law.sample(1000, 1, initial=False)) == pytest.approx(law.noise_sd, rel=0.1)
    for kw, msg in (({"c": 0.3}, "c must be below"), ({"d": 3}, "d must"),
                    ({"batch": 0}, "batch must"), ({"n_draws": 1}, "n_draws must"),
                    ({"n_noise": 0}, "n_noise must"), ({"scale": -1.0}, "scale must")):
        args = {"c": 0.1, "d": 16, "limit": False, "n_draws": 5, "n_noise": 1, **kw}
        with pytest.raises(ValueError, match=msg):
            esc.tied_escape_law(args.pop("c"), args.pop("d"), **args)


def _measured(d, n, seed, T_max):
    r = measure_weak_recovery(_model(), d, 0.1, n_seeds=n, seed=seed, batch=16,
                              scale=math.sqrt(0.5), T_max=T_max, checkpoints=240, flow=False)
    return np.asarray(r["T_sgd"])


def _agrees(c, lo=0.65, hi=1.45):
    return c["ks_pvalue"] > 0.01 and abs(c["z_mean"]) < 3 and lo < c["sd_ratio"] < hi


def test_tied_escape_law_against_sgd_small():
    T = _measured(24, 40, [8, 24], 1.3)
    law = esc.tied_escape_law(0.1, 24, n_draws=1000, n_noise=8, n_shift=1, seed=[1, 24],
                              limit=False)
    c = esc.compare_escape(law, T, n_mc=50_000)
    assert _agrees(c), c
    # a law with the wrong spread (the start drawn at 4 d: half the SD) is rejected
    wrong = esc.tied_escape_law(0.1, 96, n_draws=300, n_noise=2, n_shift=0, seed=[1, 96],
                                limit=False)
    assert not _agrees(esc.compare_escape(wrong, T, n_mc=50_000))


@pytest.mark.slow
@pytest.mark.parametrize("d", [40, 80])
def test_tied_escape_law_against_sgd_reported_sizes(d):
    T = _measured(d, 40, [7, d], 0.8)
    law = esc.tied_escape_law(0.1, d, n_draws=2000, seed=[1, d], limit=False)
    c = esc.compare_escape(law, T)
    assert _agrees(c), c
