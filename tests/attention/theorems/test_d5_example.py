"""The D.5 example (eqs. 392-394): Phi and the gradient norm for (G1 - G2)^2, the reduction of
Assumption 8 to Tr[S1 E^2] >= c0 Tr[E^2] (c = 4 c0 along the flow), the full-rank case
where it holds and the rank-deficient teacher where it fails (c0 ~ 1/(4t))."""

import math

import numpy as np
import pytest

from attndyn.numeric.attention.theorems import d5_example as d5
from attndyn.numeric.core.checks import registered


def test_closed_forms_on_scalar_multiples_of_identity():
    d = 7
    a, b = 1.3, 0.4
    W1 = a * np.eye(d)
    S2 = b * np.eye(d)
    assert d5.population_loss(W1, S2) == pytest.approx(2 * (a * a - b) ** 2)
    g = d5.population_gradient(W1, S2)
    assert np.allclose(g, 8 * (a * a - b) * a / d * np.eye(d))
    # eq. (393) with its constant: ||grad||^2 = 64 Tr(S1 E^2)/d^2
    assert np.sum(g ** 2) == pytest.approx(64 * d * a * a * (a * a - b) ** 2 / d ** 2)
    assert d5.pl_constant(W1 @ W1.T, S2) == pytest.approx(a * a)


def test_gradient_against_central_differences():
    rng = np.random.default_rng(3)
    d = 9
    W1 = rng.normal(size=(d, d)) / 3
    W2 = rng.normal(size=(d, 2 * d)) / 4
    S2 = W2 @ W2.T
    g = d5.population_gradient(W1, S2)
    h = 1e-6
    for _ in range(5):
        V = rng.normal(size=W1.shape)
        fd = (d5.population_loss(W1 + h * V, S2) - d5.population_loss(W1 - h * V, S2)) / (2 * h)
        assert fd == pytest.approx(np.sum(g * V), rel=1e-6)


def test_pl_constant_sufficient_condition():
    """Tr(E S1 E) >= lambda_min(S1) Tr(E^2) (the paper's sufficient condition S1 >= c0 I),
    and c0 <= lambda_max(S1)."""
    rng = np.random.default_rng(4)
    for _ in range(50):
        d = int(rng.integers(2, 8))
        A = rng.normal(size=(d, d))
        B = rng.normal(size=(d, int(rng.integers(1, 2 * d))))
        S1, S2 = A @ A.T, B @ B.T
        w = np.linalg.eigvalsh(S1)
        c0 = d5.pl_constant(S1, S2)
        assert w[0] - 1e-10 <= c0 <= w[-1] + 1e-10
    assert math.isnan(d5.pl_constant(np.eye(3), np.eye(3)))


@pytest.mark.parametrize("fn", [d5.population_loss, d5.population_gradient, d5.pl_constant])
def test_bad_input(fn):
    with pytest.raises(ValueError):
        fn(np.eye(3), np.eye(4))
    with pytest.raises(ValueError):
        fn(np.full((2, 2), np.nan), np.eye(2))
    with pytest.raises(TypeError):
        fn(object(), np.eye(2))
    with pytest.raises(ValueError):
        d5.example_run(2, 4.0, 1.0, 11, 0)
    with pytest.raises(ValueError):
        d5.identities(20, 10, 0)


def test_identities_392_393_monte_carlo():
    r = d5.identities(16, 4000, 1)
    assert r["phi_rel_error"] <= 1e-10
    assert r["loss_392_vs_exact"] <= 1e-10
    assert r["grad_norm2_rel_error"] <= 1e-10
    assert r["fd_rel_error"] <= 1e-6
    assert abs(r["z_loss"]) <= 4
    assert 0.6 <= r["z_grad_rms"] <= 1.5


def test_pl_holds_full_rank_and_fails_rank_deficient():
    full = d5.example_run(32, 4.0, 6.0, 121, 1)
    assert full["reduction_error"] <= 1e-6          # Assumption 8's c(t) = 4 c0(t)
    assert full["exponent_error"] <= 0.02           # log(Delta0/DeltaT) = 8 int c0
    assert full["bound_382_margin"] <= 1e-9         # eq. (382) with c = 4 min c0
    assert full["c0_min"] > 0
    assert full["c0_end"] >= 0.9 * full["lambda_min_S2"]   # the local constant near S1 = S2
    assert full["lambda_min_S1_start"] < 0.1 * full["c0_min"]   # S1 >= c0 I fails at t = 0
    assert full["sufficient_violations"] == 0
    defi = d5.example_run(32, 0.5, 6.0, 121, 1)
    assert defi["reduction_error"] <= 1e-6
    assert defi["c0_end"] < 0.5 * full["c0_end"]    # (394) fails: c0 -> 0
    assert 0.7 <= defi["t_c0_end"] <= 1.3           # c0 ~ 1/(4t)
    assert 1.3 <= defi["tail_power"] <= 2.5         # power-law tail, not exponential
    assert defi["tail_rate"] < 0.5 * full["tail_rate"]


def test_check_d5_small_holds():
    assert "d5" in registered()
    r = d5.check_d5_example("small", 0)
    assert r.verdict == "held", r.detail
    assert 0 < r.worst <= d5.Z_RMS_MAX
    assert all(abs(s["vs_flow"]) < 0.02 for s in r.data["sgd"]["seeds"])


@pytest.mark.slow
def test_check_d5_slow_holds():
    r = d5.check_d5_example("slow", 0)
    assert r.verdict == "held", r.detail
