"""The lazy-regime premises recorded along runs (Lemma C.1, eqs. 6-9) and their table."""

import numpy as np
import pytest

from attndyn.cli import main
from attndyn.numeric.transformer import build, train
from attndyn.numeric.transformer.premises import load_premises, premises

S = dict(N=2, L=3, d=4, m=16, n=4, eps=1.0, omega=1.0, kappa="1/sqrt(m)", xi=0.1,
         token_norm="unit", E_scale=0.5, n_test=16)


def test_premise_rows_along_a_flow_run():
    student, data = build(S, 0)
    r = train(student, data, T=0.5, n_eval=3, record="premises")
    assert r.status == 0
    # drifts start at 0 and grow; part 15 for the last layer is exactly 4/n
    assert r.observable("w_drift")[0] == 0 and r.observable("U_drift")[0] == 0
    assert r.observable("w_drift")[-1] > 0
    np.testing.assert_allclose(r.observable("part15_2"), 4 / S["n"], rtol=1e-12)
    # rate = |grad L|^2 / L and -dL/dt = |grad L|^2 along the flow
    np.testing.assert_allclose(r.observable("rate") * r.observable("loss"),
                               r.observable("grad_norm2"), rtol=1e-12)
    assert set(r.params["premise_lambda"]) == {"definition", "exact"}
    sg = r.observable("sigma_min")
    assert np.all((sg > 0) & (sg <= 1))
    with pytest.raises(ValueError, match="record"):
        train(student, data, T=0.5, record="everything")


def test_premises_table_and_round_trip(tmp_path):
    rep = premises(S, 0, T=0.5, n_eval=3, widths=(8, 32))
    text = rep.table()
    for key in ("eq. (8)", "eq. (6)", "part 15", "part 16", "eq. (7)", "eq. (9)", "3 forms"):
        assert key in text
    row15 = [r for r in rep.rows if r["premise"] == "Lemma C.1 part 15"][0]
    assert "4/n" in row15["verdict"]
    path = rep.save(tmp_path / "p.npz")
    back = load_premises(path)
    assert back.rows == rep.rows


def test_premises_command(capsys):
    args = ("--N 2 --L 3 --d 4 --m 16 --n 4 --eps 1 --omega 1 --kappa 1/sqrt(m) --xi 0.1 "
            "--token-norm unit --E-scale 0.5 --n-test 16 --T 0.5 --n-eval 3 --widths none").split()
    assert main(["transformer", "premises", *args]) == 0
    out = capsys.readouterr().out
    assert "eq. (7)" in out and "verdict" in out
    assert main(["transformer", "premises", *args, "--method", "sgd", "--lr", "0.01",
                 "--batch-fraction", "0.5"]) == 0
    assert "part 15" in capsys.readouterr().out


def test_lemma_commands_refuse_empty_lists(capsys):
    args = ("--N 2 --L 3 --d 4 --m 16 --n 4 --eps 1 --omega 1 --kappa 1/sqrt(m) --xi 0.1").split()
    assert main(["transformer", "lemmas", "lemma41", *args, "--widths", ""]) == 2
    err = capsys.readouterr().err
    assert "--widths" in err and len(err.strip().splitlines()) == 1
    assert main(["transformer", "lemmas", "lemma53", *args, "--seeds", "0", "--T", "1"]) == 2
    err = capsys.readouterr().err
    assert "--seeds" in err and len(err.strip().splitlines()) == 1
