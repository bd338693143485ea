"""``attndyn reproduce``: miniatures of every figure (default suite, seconds) and
one ``slow`` test per figure that runs ``--quick`` and requires every claim to hold."""

import json
import os

import numpy as np
import pytest

import attndyn
from attndyn.cli import main
from attndyn.numeric.attention import figures as F
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
    run = F.fig4("mini")
    assert {"sgd/seed0", "limit", "flow", "truncation/M2", "truncation_full/M8"} <= set(run.curves)
    meta = _check_saved(run, tmp_path)
    assert meta["settings"]["sgd_seeds"] == [0]
    # the error to the exact hierarchy falls with the order even at this size
    e = run.extra["to_flow_err_short"]
    assert e["2"] > e["4"] > e["8"]
    assert "truncation error" in run.table()


def test_fig2_fig3_miniatures(tmp_path):
    r2 = F.fig2("mini", acts=("h1",), T=0.2, n_t=5)
    assert {"h1/tied_sgd/seed0", "h1/S_sgd/seed0", "h1/tied_flow", "h1/S_ode"} <= set(r2.curves)
    _check_saved(r2, tmp_path)
    r3 = F.fig3("mini", acts=("h1",), T=0.05, n_t=5)
    assert {"h1/sgd/seed0", "h1/theory_slaved"} <= set(r3.curves)
    assert r3.extra["theory_err"]["h1"] < 2e-2  # h1: slaved flow tracks SGD
    _check_saved(r3, tmp_path)


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


def test_bad_options(tmp_path, capsys):
    assert main(["reproduce", "fig4", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown setting"):
        F.fig4("mini", horizon=3)
    with pytest.raises(ValueError, match="mode must be"):
        F.fig2("huge")
    with pytest.raises(ValueError, match="seeds must be"):
        F.fig3("mini", seeds=0)


def test_claims_table_and_verdicts():
    c = [Claim("a", True, "1"), Claim("b", False, "2", "only short")]
    t = claims_table(c, "x")
    assert "[    held] a" in t and "[NOT HELD] b" in t and "condition: only short" in t
    assert not FigureRun("f", "t", {}, claims=c).all_held


_KNOWN = {  # claims measured NOT to hold at --quick (d = 80); see docs/figures.md
    "fig2": "direct S starts at an O(1/d) overlap 1.6e-2 > 1e-2; tied h3 escapes in SGD at "
            "tau 0.075, the flow at 0.16",
    "fig3": "h2, h3: the slaved flow is 4e-2 / 6e-2 from SGD before the escape and escapes later",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "fig4", "scaling", "fig1",
    *[pytest.param(n, marks=pytest.mark.xfail(reason=r, strict=True)) for n, r in _KNOWN.items()]])
def test_quick_every_claim_holds(name, tmp_path, capsys):
    rc = main(["reproduce", name, "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert "NOT HELD" not in out
    assert os.path.exists(tmp_path / f"{name}.png")
