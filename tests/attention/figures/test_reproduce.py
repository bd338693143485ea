"""``attndyn reproduce``: miniatures of every figure (default suite, seconds) and
one ``slow`` test per figure that runs ``--quick`` and requires every claim to hold."""

import json
import os

import numpy as np
import pytest

import attndyn
from attndyn.cli import main
from attndyn.numeric.attention.figures import common as F
from attndyn.numeric.attention.figures import fig2 as F2
from attndyn.numeric.attention.figures import fig3 as F3
from attndyn.numeric.attention.figures import fig4 as F4
from attndyn.numeric.core.claims import Claim, FigureRun, claims_table


def _check_saved(run, tmp_path):
    paths = run.save(tmp_path, png=False)
    meta = json.load(open(paths["json"]))
    assert meta["figure"] == run.name and meta["settings"]["mode"] == "mini"
    assert len(meta["claims"]) == len(run.claims) >= 2
    for label, p in paths["curves"].items():
        r = attndyn.load_result(p)
        np.testing.assert_array_equal(r.t, run.curves[label].t)
    return meta


def test_fig4_miniature(tmp_path):
    run = F4.fig4("mini")
    assert {"sgd/seed0", "limit", "flow", "truncation/M2", "truncation_full/M8"} <= set(run.curves)
    meta = _check_saved(run, tmp_path)
    assert meta["settings"]["sgd_seeds"] == [0, 1]   # mini: 2 seeds (claims in seed units)
    assert set(run.extra["paired_rms_z"]) == {"flow", "noise", "noise+finite-d"}
    assert {"flow_noise", "flow_noise_finite-d"} <= set(run.curves)
    # the error to the exact hierarchy falls with the order even at this size
    e = run.extra["to_flow_err_short"]
    assert e["2"] > e["4"] > e["8"]
    assert "truncation error" in run.table()
    # each order also with SGD's noise rows (short horizon), stored and saved under its own name
    s = run.settings
    zn, zt = run.extra["truncation_noise_z_short"], run.extra["truncation_z_short"]
    assert set(zn) == set(zt) == set(run.extra["truncation_noise_status_short"]) == {"2", "4", "8"}
    for M in s["orders"]:
        rn, rs = run.curves[f"truncation_noise/M{M}"], run.curves[f"truncation/M{M}"]
        np.testing.assert_array_equal(rn.t, rs.t)
        assert rn.params["correction"] == "noise"
        assert rn.params["eta_d_over_B"] == pytest.approx(s["eta"] * s["d"] / s["batch"])
        assert not np.allclose(rn.observable("q_11")[1:], rs.observable("q_11")[1:], rtol=1e-9)
    assert zn != zt
    (claim,) = [c for c in run.claims if c.text.startswith("truncation error to SGD")]
    assert 'correction="noise"' in claim.text
    judged = claim.measured.partition("not judged")[0]
    assert ", ".join(f"M={M}: {zn[M]:.2f}" for M in zn) in judged


def test_fig2_fig3_miniatures(tmp_path):
    r2 = F2.fig2("mini", acts=("h1",), T=0.2, n_t=5)
    assert {"h1/tied_sgd/seed0", "h1/S_sgd/seed0", "h1/tied_flow", "h1/S_ode"} <= set(r2.curves)
    _check_saved(r2, tmp_path)
    r3 = F3.fig3("mini", acts=("h1",), T=0.05, n_t=5)
    assert {"h1/sgd/seed0", "h1/theory_slaved"} <= set(r3.curves)
    assert r3.extra["theory_err"]["h1"] < 2e-2  # h1: slaved flow tracks SGD
    _check_saved(r3, tmp_path)


def test_fig2_fig3_miniature_claims():
    # every claim of the full activation set is built (verdicts not meaningful at this size)
    r2 = F2.fig2("mini", T=0.1, n_t=3, scan_d=(16, 32), scan_seeds=1, mc_d=(16, 32), mc_n=2000)
    texts = " | ".join(c.text for c in r2.claims)
    assert "vanishes as d -> infinity" in texts and "tied h3" in texts
    scan = r2.extra["direct_scan"]
    assert scan["d"] == [16, 32] and set(scan["pmax"]) == {"h1", "h2", "h3"}
    # h3's direct-S flow is flat at the start (its cross-gradient is quadratic in p)
    assert abs(scan["amp"]["h3"][0] - 1.0) < 0.05
    r3 = F3.fig3("mini", T=0.05, n_t=3, mc_d=(16, 32), mc_n=2000)
    texts = " | ".join(c.text for c in r3.claims)
    assert "delayed for higher-order activations" in texts and "approaches the exact" in texts
    assert r3.extra["teacher_signal_limit"] == pytest.approx({"h1": 1.0, "h2": 0.0, "h3": 0.0},
                                                             abs=1e-12)
    assert set(r3.extra["loss_gap"]["gap"]) == {"h2", "h3"}


def test_hermite_numpy_activations():
    z = np.linspace(-2.0, 2.0, 7)
    h2, dh2 = F.hermite_np("h2")
    h3, dh3 = F.hermite_np("h3")
    np.testing.assert_allclose(h2(z), (z * z - 1) / np.sqrt(2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dh2(z), np.sqrt(2) * z, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(h3(z), (z ** 3 - 3 * z) / np.sqrt(6), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dh3(z), (3 * z * z - 3) / np.sqrt(6), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="activation"):
        F.hermite_np("relu")


def test_finite_d_drift_mc_is_exact_for_linear():
    # For h1 the loss is quadratic in G, so the exact finite-d SGD drift is the matrix flow
    # (no non-Gaussian term): the Monte Carlo must agree within its error. A wrong factor in
    # the drift (the 4 of t = 4 eta n / d, the 2 of grad G) would fail here.
    from attndyn.numeric.attention.tied.model import TiedModel
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.symbolic.losses import mse_teacher_student

    tm = TiedModel(2, [0], mse_teacher_student("h1"))
    W = F2._rescale_tied(gaussian_init(tm, 24, seed=5))
    mean, se = F2._tied_p12_drift_mc(W, "h1", 40000, seed=1)
    flow = F2._tied_p12_drift_flow(tm, W)
    assert abs(flow) > 0.05 and abs(mean - flow) < 5 * se + 1e-3 * abs(flow), (mean, se, flow)


def test_untied_loss_mc_matches_phi_for_linear():
    from attndyn.numeric.attention.training import gaussian_init
    from attndyn.numeric.attention.untied.model import UntiedModel
    from attndyn.numeric.attention.untied.coefficients import coefficients
    from attndyn.symbolic.losses import mse_teacher_student

    m = UntiedModel(2, [0], mse_teacher_student("h1"))
    pairs = gaussian_init(m, 24, seed=3)
    op = m.order_parameters(pairs)
    (mean, se), = F3._untied_loss_mc(pairs, ["h1"], 40000, seed=2).values()
    phi = coefficients(m).phi(op["m"], op["q1"], op["q2"])
    assert abs(mean - phi) < 5 * se, (mean, se, phi)
    # eq. 49's teacher factor: E h2'(Z) = sqrt(2) m_2 for Z ~ N(m_2, v)
    m2 = mse_teacher_student("h2")
    assert F3._teacher_signal(UntiedModel(2, [0], m2), pairs, "h2") == pytest.approx(
        np.sqrt(2) * op["m"][1], rel=1e-10, abs=1e-14)


def test_scaling_miniature(tmp_path):
    from attndyn.numeric.scaling.figures import scaling_figure

    run = scaling_figure("mini")
    # the bounds need no randomness: every claim holds on the miniature's grid too
    assert run.all_held, run.table()
    assert "N_paper/N* = 0.993" in run.table()
    meta = run.save(tmp_path, png=False)
    assert json.load(open(meta["json"]))["all_held"]


@pytest.mark.slow
def test_scaling_cli_writes_png(tmp_path, capsys):
    rc = main(["reproduce", "scaling", "--mini", "--out", str(tmp_path), "--dpi", "30"])
    out = capsys.readouterr().out
    assert rc == 0 and "N_paper/N* = 0.993" in out and "NOT HELD" not in out
    assert json.load(open(tmp_path / "scaling.json"))["all_held"]
    assert os.path.exists(tmp_path / "scaling.png") and os.path.exists(tmp_path / "scaling.json")
    assert os.path.exists(tmp_path / "scaling.pdf")  # vector output by default


def test_bad_options(tmp_path, capsys):
    assert main(["reproduce", "fig4", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown setting"):
        F4.fig4("mini", horizon=3)
    with pytest.raises(ValueError, match="mode must be"):
        F2.fig2("huge")
    with pytest.raises(ValueError, match="seeds must be"):
        F3.fig3("mini", seeds=0)


def test_claims_table_and_verdicts():
    c = [Claim("a", True, "1"), Claim("b", False, "2", "only short")]
    t = claims_table(c, "x")
    assert "[    held] a" in t and "[NOT HELD] b" in t and "condition: only short" in t
    assert not FigureRun("f", "t", {}, claims=c).all_held


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fig4", "scaling", "fig1", "fig2", "fig3"])
def test_quick_every_claim_holds(name, tmp_path, capsys):
    rc = main(["reproduce", name, "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert "NOT HELD" not in out
    assert os.path.exists(tmp_path / f"{name}.png")
