"""The SGD-vs-theory workflow: compare(), plots and the `attndyn sgd` / `attndyn compare` CLI."""

import numpy as np
import pytest
import sympy as sp

import attndyn
from attndyn.cli import main as cli_main
from attndyn.numeric.attention.compare import Comparison, compare, error_metrics
from attndyn.numeric.core.results import load_result
from attndyn.numeric.attention.training import gaussian_init, sgd


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def test_error_metrics():
    e = error_metrics(np.array([1.0, 2.0, 3.5]), np.array([1.0, 2.5, 3.0]))
    assert e["max_abs"] == 0.5 and e["final"] == 0.5
    assert e["rms"] == pytest.approx(np.sqrt(0.5 / 3)) and e["max_rel"] == pytest.approx(0.5 / 3)


def test_compare_tied_flow_aligned_with_errors_and_seeds():
    m = attndyn.TiedModel(2, [0], square)
    d, B = 60, 128
    c = compare(m, {"d": d, "scale": 0.5, "seed": 1}, eta=0.02 * B / d, batch=B,
                t_eval=np.linspace(0, 1, 6), seed=0, n_seeds=3)
    assert isinstance(c, Comparison) and c.success
    assert np.array_equal(c.t, c.sgd.t) and np.array_equal(c.t, c.theory.t)
    assert c.sgd.names == c.theory.names == c.names
    for n in ("mu_1", "q_11", "q_12", "p_12", "loss"):
        assert n in c.names
    assert c.max_error(["mu_1", "q_11", "q_12"]) < 5e-3
    # the theory's loss is Phi(q) = 2 q11 + 2 q22 - 4 q12 (MATH.md)
    th = c.theory
    q = {n: th.y[th.names.index(n)] for n in ("q_11", "q_22", "q_12")}
    np.testing.assert_allclose(th.y[th.names.index("loss")],
                               2 * q["q_11"] + 2 * q["q_22"] - 4 * q["q_12"], rtol=1e-10)
    # three spawned seeds: mean, spread, distinct runs
    assert len(c.runs) == 3 and c.spread is not None
    assert [tuple(r.seed["spawn_key"]) for r in c.runs] == [(0,), (1,), (2,)]
    np.testing.assert_allclose(c.sgd.y[0], np.mean([r.y[r.names.index(c.names[0])] for r in c.runs], 0))
    assert np.max(c.spread["q_12"]) > 0
    txt = c.table()
    assert "q_12" in txt and "seed std" in txt
    assert c.error("q_12", "rms") <= c.error("q_12", "max_abs")
    with pytest.raises(KeyError):
        c.error("nope")
    with pytest.raises(ValueError, match="metric"):
        c.error("q_12", "median")


def test_compare_same_initial_condition_for_both():
    m = attndyn.TiedModel(2, [0], square)
    W = gaussian_init(m, 40, seed=3, scale=0.5)
    c = compare(m, W, eta=0.05, batch=64, t_eval=[0, 0.2], seed=2)
    S = [w @ w.T for w in W]
    assert c.theory.y[c.names.index("q_12"), 0] == pytest.approx(np.trace(S[0] @ S[1]) / 40)
    assert c.sgd.y[c.names.index("q_12"), 0] == c.theory.y[c.names.index("q_12"), 0]


def test_compare_tied_hierarchy_converged_and_not():
    m = attndyn.TiedModel(2, [0], square)
    init = {"d": 50, "scale": 0.5, "seed": 1}
    short = compare(m, init, eta=0.02, batch=128, t_eval=np.linspace(0, 0.05, 3), seed=0,
                    theory="hierarchy", order=6, theory_kwargs={"conv_tol": 1e-3})
    assert short.success, short.message
    assert "mu_111" in short.names and short.max_error(["mu_1", "q_12"]) < 2e-3
    long = compare(m, init, eta=0.05, batch=128, t_eval=np.linspace(0, 1.0, 3), seed=0,
                   theory="hierarchy", order=4)
    assert long.status == 2 and "not converged" in long.message


def test_compare_smodel_ode_and_flow():
    F = lambda x: (x ** 2 - 1) / sp.sqrt(2)  # noqa: E731
    m = attndyn.SModel(2, [0], lambda G: (F(G[0, 0, 0]) - F(G[0, 0, 1])) ** 2 / 2)
    init = {"d": 50, "scale": [0.7, 0.5], "seed": 2}
    a = compare(m, init, eta=0.05, batch=50, t_eval=np.linspace(0, 0.5, 6), seed=0)
    b = compare(m, init, eta=0.05, batch=50, t_eval=np.linspace(0, 0.5, 6), seed=0, theory="flow")
    assert a.params["theory"] == "ode" and b.params["theory"] == "flow"
    np.testing.assert_allclose(a.theory.y, b.theory.y, atol=1e-7)
    assert np.array_equal(a.sgd.y, b.sgd.y)
    assert a.error("t_1") < 1e-2


def test_compare_bad_arguments():
    m = attndyn.TiedModel(2, [0], square)
    kw = dict(eta=0.05, batch=8, t_eval=[0, 0.1])
    with pytest.raises(ValueError, match="theory"):
        compare(m, {"d": 10}, theory="ode", **kw)
    with pytest.raises(ValueError, match="'d'"):
        compare(m, {"scale": 0.5}, **kw)
    with pytest.raises(ValueError, match="names"):
        compare(m, {"d": 10}, names=["q_12", "zzz"], **kw)
    with pytest.raises(ValueError, match="n_seeds"):
        compare(m, {"d": 10}, n_seeds=0, **kw)
    u = attndyn.UntiedModel(2, [0], square)
    with pytest.raises(ValueError, match="theory"):
        compare(u, {"d": 10}, theory="ode", **kw)
    c = compare(m, {"d": 10, "scale": 0.5}, names=["q_12", "mu_1"], **kw)
    assert c.names == ["q_12", "mu_1"]


def test_plots_take_ax():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from attndyn.numeric.core.plots import plot_comparison, plot_trajectory
    m = attndyn.TiedModel(2, [0], square)
    c = compare(m, {"d": 20, "scale": 0.5}, eta=0.05, batch=16, t_eval=[0, 0.1, 0.2], seed=0,
                n_seeds=2)
    ax = c.plot(["q_12", "mu_1"])
    assert ax is not None and len(ax.lines) >= 2
    fig, ax2 = plt.subplots()
    assert plot_comparison(c, names=["q_12"], ax=ax2) is ax2
    assert plot_trajectory(c.runs[0], names=["q_11"], ax=ax2) is ax2
    plt.close("all")


# ---------------------------------------------------------------------------
# CLI

def test_cli_sgd_saves_a_result(tmp_path, capsys):
    out = tmp_path / "run.npz"
    rc = cli_main(["sgd", "--model", "tied", "--d", "30", "--batch", "32", "--eta", "0.05",
                   "--T", "0.2", "--n-out", "3", "--seed", "4", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "success" in text and "t = 4 * eta * n / d" in text and "q_12" in text
    r = load_result(out)
    assert r.kind == "sgd" and r.t.size == 3 and r.params["seed"]["entropy"] == 4
    # the CLI's run equals the API's run with the same seeds
    m = attndyn.TiedModel(2, [0], square)
    ref = sgd(m, gaussian_init(m, 30, seed=4, scale=0.5), eta=0.05, batch=32,
              t_eval=np.linspace(0, 0.2, 3), seed=4)
    assert np.array_equal(ref.y, r.y)


@pytest.mark.parametrize("model", ["untied", "s"])
def test_cli_sgd_other_models(model, capsys):
    rc = cli_main(["sgd", "--model", model, "--loss", "h2", "--d", "20", "--batch", "16",
                   "--eta", "0.02", "--T", "0.1", "--n-out", "2", "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert ("m_1" in text) if model == "untied" else ("Psi_12" in text)


def test_cli_compare_with_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "cmp.png"
    rc = cli_main(["compare", "--model", "s", "--loss", "linear", "--d", "30", "--batch", "30",
                   "--eta", "0.1", "--T", "0.3", "--n-out", "4", "--n-seeds", "2",
                   "--plot", str(png), "--out", str(tmp_path / "c.npz")])
    assert rc == 0 and png.exists() and (tmp_path / "c_theory.npz").exists()
    text = capsys.readouterr().out
    assert "Psi_12" in text and "worst" in text and "theory=ode" in text


@pytest.mark.parametrize("argv,word", [
    (["sgd", "--eta", "-1"], "eta"),
    (["sgd", "--eta", "0.1", "--batch", "0"], "batch"),
    (["sgd", "--eta", "0.1", "--d", "1"], "--d"),
    (["sgd", "--eta", "0.1", "--trainable", "7"], "trainable"),
    (["sgd", "--eta", "0.1", "--L", "2", "--C", "1,2;2,1", "--loss", "G[0,0,0]**2"], "C"),
    (["sgd", "--eta", "0.1", "--loss", "G1*foo"], "foo"),
    (["compare", "--model", "untied", "--eta", "0.1", "--time", "fast"], "slow"),
])
def test_cli_bad_input_exit_2(argv, word, capsys):
    assert cli_main(argv + ["--d", "10"] if "--d" not in argv else argv) == 2
    err = capsys.readouterr().err
    assert word in err and "error" in err
