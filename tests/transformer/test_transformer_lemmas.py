"""Paper 000's kernels (Definition B.5), Lemma 4.1 / B.6, Assumption 5.1,
Lemma 5.3, Theorem 5.5, Definition 5.2 and the empirical scaling sweep."""

import ast
import math
import pathlib

import numpy as np
import pytest

from attndyn.numeric.core.results import Trajectory
from attndyn.numeric.transformer import (Transformer, assumption_sweep, build, definition52,
                                         kernel_parts, lemma41, lemma41_sweep, lemma53,
                                         load_sweep, log10_required_width, required_width,
                                         scaling_sweep, theorem55, train)
from attndyn.numeric.transformer.data import rms_normalise

ROOT = pathlib.Path(__file__).resolve().parents[2]
SETUP = dict(N=2, L=4, d=4, m=32, n=6, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
             token_norm="unit", E_scale=0.5, n_test=32)


def _xy(n, L, d, seed=1):
    rng = np.random.default_rng(seed)
    return rms_normalise(rng.standard_normal((n, L, d)), "unit"), rng.standard_normal((n, L, d))


def test_kernel_equals_definition_b5_literally():
    """H = <beta, beta> + <gamma, gamma> with beta, gamma built by np.kron."""
    mdl = Transformer(2, 3, 4, 10, eps=1.0, omega=0.8, kappa=0.6, seed=2)
    X, _ = _xy(2, 3, 4)
    c = mdl.hidden(X)
    for k in range(2):
        Lam, P, O, Z = c.Lam[k], c.P[k], c.O[k], c.Z[k]
        W = mdl.W[k]
        betas, gammas = [], []
        for p in range(6):
            i, l = divmod(p, 3)
            ind = (W.T @ O[p] > 0).astype(float)
            betas.append(mdl.omega / math.sqrt(mdl.m) * np.kron(O[p], ind))
            sig = P[i, l]
            J = np.diag(sig) - np.outer(sig, sig)
            K = np.kron(Lam[i, l][None, :], Lam[i])          # L x d^2
            s = W @ ind
            gammas.append(mdl.omega * mdl.kappa / math.sqrt(mdl.m) * (K.T @ J @ Lam[i] @ s))
        Bm, Gm = np.array(betas), np.array(gammas)
        Hb, Hg = kernel_parts(mdl, X, k)
        np.testing.assert_allclose(Hb, Bm @ Bm.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(Hg, Gm @ Gm.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(mdl.kernel(X, k), Bm @ Bm.T + Gm @ Gm.T, rtol=1e-12,
                                   atol=1e-12)
        # rows ordered p = i L + l: O rows are o_{iL+l}
        np.testing.assert_allclose(O[4], Lam[1].T @ P[1, 1], rtol=1e-13)


def test_lemma41_exact_side_and_special_cases():
    mdl = Transformer(2, 4, 4, 32, eps=1.0, omega=1.0, kappa=0.2, seed=1)
    X, Y = _xy(5, 4, 4)
    r = lemma41(mdl, X, Y)
    g = mdl.gradients(X, Y)
    assert r["exact"] == pytest.approx(-sum(np.sum(q["U"] ** 2) + np.sum(q["W"] ** 2)
                                            for q in g), rel=1e-13)
    # d = 1: a_r a_r^T = 1 exactly, so the W part of the lemma is exact
    m1 = Transformer(2, 4, 1, 32, eps=1.0, omega=1.0, kappa=0.2, seed=1)
    X1, Y1 = _xy(5, 4, 1)
    r1 = lemma41(m1, X1, Y1)
    np.testing.assert_allclose(r1["lemma_W"], r1["exact_W"], rtol=1e-12)
    # L = 1: the softmax is constant, both U parts vanish
    mL = Transformer(3, 1, 4, 32, eps=1.0, omega=1.0, kappa=0.2, seed=1)
    XL, YL = _xy(5, 1, 4)
    rL = lemma41(mL, XL, YL)
    assert max(rL["exact_U"]) < 1e-25 and max(rL["lemma_U"]) < 1e-25


def test_lemma41_width_sweep_trend():
    sw = lemma41_sweep(SETUP, widths=(16, 64, 256, 1024), seeds=3)
    assert sw.x_name == "m" and sw["gap"].shape == (4,)
    # the W part's gap shrinks with m (measured: about m^-0.4); the U part's grows
    assert sw.fits["gap_W"]["exponent"] < -0.2
    assert sw.fits["gap_U"]["exponent"] > 0.5
    assert sw["gap_W"][-1] < sw["gap_W"][0]


def test_assumption_and_lemma53(tmp_path):
    sw = assumption_sweep(SETUP, "m", [4, 64, 256], seeds=2)
    # rank H' <= m d = 16 < n L = 24 at m = 4: Assumption 5.1 fails; it holds for wide layers
    assert sw["fraction_pd"][0] == 0.0 and abs(sw["lambda_max"][0]) < 1e-12
    assert np.all(sw["fraction_pd"][1:] == 1.0) and np.all(sw["lambda_min"][1:] > 0)
    r = lemma53(SETUP, T=0.1, seeds=2, n_eval=3, rtol=1e-4, atol=1e-7)
    assert r.status == 0
    assert 0.0 <= r.fits["fraction_violated_units"] <= 1.0
    lam, minH = r["lambda"], r["min_lambda_H"]
    np.testing.assert_array_equal(r["violated_units"], (minH / SETUP["omega"] < lam / 2))
    back = load_sweep(r.save(tmp_path / "l53"))
    np.testing.assert_array_equal(back.y, r.y)
    assert back.fits == r.fits


def test_theorem55_on_exact_exponential_and_on_a_run():
    t = np.linspace(0, 2, 9)
    traj = Trajectory(t=t, y=np.exp(-2 * t)[None], names=["loss"])
    out = theorem55(traj, lam=1.0, omega=1.0, eps=1.0)
    assert out["ratio"] == pytest.approx(2.0, rel=1e-12) and out["holds"]
    out = theorem55(traj, lam=3.0, omega=1.0, eps=1.0)
    assert not out["holds"] and out["ratio"] == pytest.approx(2 / 3, rel=1e-12)
    student, data = build(SETUP, 2)
    lam = definition52(student, data.X, delta=0.05, c_exp=0.1)["lambda"]
    assert lam > 0
    res = train(student, data, T=0.2, method="flow", n_eval=4, rtol=1e-4, atol=1e-7)
    out = theorem55(res, lam=lam, omega=student.omega, eps=student.eps)
    assert out["predicted_rate"] == pytest.approx(lam, rel=1e-12)
    assert np.all(np.isfinite(out["effective_rate"])) and out["ratio"] > 0


def test_required_width():
    lg = log10_required_width(8, 4, 4, 2, 0.5, 0.1, 0.05, c_exp=0.5, prefactor=2.0)
    direct = 2.0 * 8 ** 3 * 4 ** 5 * math.exp(0.5 * 4) / (0.5 ** 6 * 0.1 ** 6 * 0.05 ** 3 * 4)
    assert 10 ** lg == pytest.approx(direct, rel=1e-12)
    assert required_width(8, 4, 4, 2, 1e-40, 1e-40, 0.05, c_exp=1.0) == math.inf
    with pytest.raises(ValueError, match="lam"):
        required_width(8, 4, 4, 2, 0.5, 0.0, 0.05, c_exp=0.5)
    with pytest.raises(ValueError, match="delta"):
        required_width(8, 4, 4, 2, 0.5, 0.1, 1.5, c_exp=0.5)
    student, data = build(SETUP, 1)
    rep = definition52(student, data.X, delta=0.05, c_exp=0.1, omega_const=1.0, B=1.0)
    assert rep["m_used"] == 32 and rep["log10_m_required"] > rep["log10_m_used"]
    assert rep["premise_met"] is False


def test_scaling_sweep_small(tmp_path):
    sw = scaling_sweep(SETUP, "N", [4, 8], T=0.05, seeds=1, n_eval=2, rtol=1e-4, atol=1e-7)
    assert sw.names[:3] == ["excess_risk", "excess_risk_std", "loss"]
    assert "bound_data_law" in sw.names and np.all(np.isfinite(sw["bound_data_law"]))
    assert math.isfinite(sw.fits["excess_risk"]["exponent"])
    c = sw.fits["c_stat_fitted"]
    np.testing.assert_allclose(sw["bound_data_law"], c * 0.01 / sw.x, rtol=1e-12)
    back = load_sweep(sw.save(tmp_path / "s"))
    assert back.names == sw.names
    with pytest.raises(ValueError, match="zeta"):
        scaling_sweep(SETUP, "M", [8, 16], T=0.05)
    with pytest.raises(ValueError, match="variable"):
        scaling_sweep(SETUP, "X", [8, 16], T=0.05)
    with pytest.raises(ValueError, match="missing"):
        scaling_sweep({"N": 2}, "N", [8], T=0.05)


def _imports(path):
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = ("." * node.level) + (node.module or "")
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_layering_transformer_and_attention_never_import_each_other():
    for f in (ROOT / "numeric" / "transformer").glob("*.py"):
        bad = [m for m in _imports(f) if "attention" in m.split(".")]
        assert not bad, f"{f.name} imports {bad}"
    for f in (ROOT / "numeric" / "attention").glob("*.py"):
        bad = [m for m in _imports(f) if "transformer" in m.split(".")]
        assert not bad, f"{f.name} imports {bad}"
