"""CLI: derive, integrate, verify (issue 2, item 10)."""

import subprocess
import sys

import numpy as np
import pytest

from attndyn.cli import main


def test_derive_default_prints_d3(capsys):
    assert main(["derive"]) == 0
    out = capsys.readouterr().out
    assert "order 3" in out
    # eq. (340)-(341) drift terms with Gamma = [[2, -2], [-2, 2]] written out
    assert "dmu_1/dt = -gamma*mu_1/2 - 4*q_11 + 4*q_12" in out or "dmu_1/dt = " in out
    assert "Gamma_12" in out or "4*q_12" in out


def test_derive_closed_form_and_latex(capsys):
    assert main(["derive", "--closed-form", "--potential", "--order", "3"]) == 0
    out = capsys.readouterr().out
    assert "Phi(q) = 2*q_11 - 4*q_12 + 2*q_22" in out
    assert "dq_11/dt = -8*mu_111 + 8*mu_112 - gamma*q_11" in out
    assert main(["derive", "--latex", "--order", "2"]) == 0
    out = capsys.readouterr().out
    assert r"\begin{aligned}" in out and r"\bar q_{11}" in out


def test_integrate_writes_labelled_result(tmp_path, capsys):
    from attndyn import load_result
    path = tmp_path / "r.npz"
    code = main(["integrate", "--order", "8", "--t-end", "0.1", "--n-out", "5", "--out", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    r = load_result(path)
    assert r.success and r.t.size == 5 and r.kind == "hierarchy"
    assert r.params["order"] == 8 and r.params["init"] == "wishart(0.5,0.5),scalar(1)"
    # S2 = I: q_12 = mu_1 exactly
    assert np.allclose(r.moment((0, 1)), r.moment((0,)))


def test_verify_holds_where_the_truncation_converges(capsys):
    assert main(["verify", "--orders", "8,12", "--d", "30", "--t-end", "0.05"]) == 0
    out = capsys.readouterr().out
    # the trunc options alone run the trunc check (the pre-suite verify) with its sub-table
    assert "trunc: 5 of 5 sub-checks held" in out
    assert not any(line.endswith(" not held") for line in out.splitlines())
    assert "verify: 1 held, 0 not held" in out


def test_verify_fails_where_a_truncation_does_not_converge(capsys):
    import json
    assert main(["verify", "--orders", "2,8", "--d", "30", "--t-end", "0.05", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "attndyn.cli/1" and report["status"] == 1
    [trunc] = report["result"]["checks"]
    assert trunc["check"] == "trunc" and trunc["verdict"] == "not held"
    verdicts = {c["check"]: c["verdict"] for c in trunc["data"]["rows"]}
    assert verdicts["order 2: converged in the order"] == "not held"
    assert verdicts["order 8: converged in the order"] == "held"
    assert not report["ok"]


def test_noise_rows_in_derive_integrate_and_compare(tmp_path, capsys):
    """Issue 16 from the command line: the printed noise rows, the corrected truncation,
    and compare --correction."""
    from attndyn import load_result
    assert main(["derive", "--noise", "--order", "2"]) == 0
    out = capsys.readouterr().out
    assert "d q_11/dt += (eta d / B) * [4 Lambda_11 mu_1 mu_1 + 2 Lambda_11 q_11]" in out
    assert "Lambda_11 = 8*q_11 - 16*q_12 + 8*q_22" in out
    assert main(["derive", "--finite-d", "--order", "2", "--loss", "(G1 - G2)**4"]) == 0
    out = capsys.readouterr().out
    assert "(kappa_4, O(1/d))" in out
    path = tmp_path / "n.npz"
    args = ["integrate", "--order", "8", "--t-end", "0.05", "--n-out", "3", "--out", str(path)]
    assert main(args) == 0
    base = load_result(path)
    main(args + ["--correction", "noise", "--eta", "0.01", "--batch", "10", "--d", "100"])
    capsys.readouterr()
    r = load_result(path)
    assert r.params["correction"] == "noise" and r.params["eta_d_over_B"] == pytest.approx(0.1)
    # the noise raises q_11 (2 Lambda q_11 + 4 Lambda mu_1^2 > 0)
    assert r.moment((0, 0))[-1] > base.moment((0, 0))[-1] + 1e-4
    assert main(["compare", "--eta", "0.01", "--batch", "10", "--d", "40", "--t-end", "0.05",
                 "--n-out", "3", "--correction", "noise", "--json"]) == 0
    import json
    rep = json.loads(capsys.readouterr().out)
    assert rep["result"]["params"]["correction"] == "noise"


@pytest.mark.parametrize("argv,msg", [
    (["derive", "--order", "0"], "order"),
    (["derive", "--trainable", "7"], "trainable"),
    (["derive", "--trainable", "x"], "trainable"),
    (["integrate", "--t-end", "-1"], "t-end"),
    (["integrate", "--init", "wishart(1)"], "--init"),
    (["derive", "--loss", "G[0,0,0]**"], "loss"),
    (["integrate", "--correction", "noise", "--eta", "0.01"], "--batch"),
    (["integrate", "--eta", "0.01"], "--correction noise"),
    (["derive", "--noise", "--latex"], "--latex"),
    (["derive", "--finite-d", "--loss", "tanh(G1)"], "degree <= 6"),
])
def test_bad_options_one_line_error(argv, msg):
    out = subprocess.run([sys.executable, "-m", "attndyn", *argv], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.strip().splitlines() if ln]
    assert len(lines) == 1, out.stderr
    assert msg in lines[0]
