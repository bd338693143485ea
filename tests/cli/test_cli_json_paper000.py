"""The ``--json`` envelope (``attndyn.cli/1``) of paper 000's commands, ``scaling`` and each
``transformer`` action (issue 30, item 6): one line of strict JSON that fits
``JSON_SCHEMA``, with the documented ``result`` keys and the numbers the text output prints."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from attndyn.cli import main

# the schema validator of test_cli_json.py (a sibling file; tests import by path)
_spec = importlib.util.spec_from_file_location(
    "_cli_json_checks", pathlib.Path(__file__).with_name("test_cli_json.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
check_output = _mod.check_output

ARGS = ("--N 2 --L 3 --d 4 --m 16 --n 4 --eps 1 --omega 1 --kappa 1/sqrt(m) --xi 0.1 "
        "--token-norm unit --E-scale 0.5 --n-test 16").split()


def test_scaling_json(capsys):
    rc = main(["scaling", "two_stage", "stage", "--C", "1e10,1e40", "--N", "1e5", "--xi", "1",
               "--L", "8", "--d", "4", "--alpha", "1", "--prefactor", "1", "--loss0", "1",
               "--c-stat", "1", "--zeta", "0.2", "--json"])
    env = check_output(capsys.readouterr().out, "scaling")
    assert rc == 0 and env["ok"] and env["status"] == 0 and env["saved"] == []
    res = env["result"]
    assert res["columns"] == ["C", "two_stage", "stage"] and res["fixed"]["N"] == 1e5
    assert [r["stage"] for r in res["rows"]] == [1.0, 2.0]
    assert res["rows"][1]["two_stage"] == pytest.approx(1e-5)
    assert res["unused"] == ["zeta"]


def test_scaling_json_infinities(capsys):
    assert main(["scaling", "critical_N", "--C", "0,inf", "--xi", "1", "--L", "1", "--d", "1",
                 "--json"]) == 0
    env = check_output(capsys.readouterr().out, "scaling")
    assert [r["critical_N"] for r in env["result"]["rows"]] == [1.0, "inf"]
    assert env["result"]["unused"] == []


def test_scaling_bad_input_prints_no_json(capsys):
    assert main(["scaling", "--C", "-1", "--xi", "1", "--L", "1", "--d", "1", "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "C >= 0" in cap.err


def test_transformer_train_json(tmp_path, capsys):
    out = tmp_path / "run.npz"
    rc = main(["transformer", "train", *ARGS, "--t-end", "0.05", "--n-eval", "2", "-o", str(out),
               "--json"])
    env = check_output(capsys.readouterr().out, "transformer")
    res = env["result"]
    assert rc == 0 and env["ok"] and env["saved"] == [str(out)]
    assert res["action"] == "train" and res["setup"]["m"] == 16 and res["seed"] == 0
    assert res["t_end"] == pytest.approx(0.05) and res["final"]["loss"] > 0


def test_transformer_kernel_json(capsys):
    assert main(["transformer", "kernel", *ARGS, "--layer", "0", "--json"]) == 0
    env = check_output(capsys.readouterr().out, "transformer")
    res = env["result"]
    assert env["saved"] == [] and res["action"] == "kernel"
    assert res["nL"] == 12 and res["rows"] == 12 and res["lambda"] > 0


def test_transformer_premises_json(capsys):
    rc = main(["transformer", "premises", *ARGS, "--t-end", "0.05", "--n-eval", "2",
               "--widths", "none", "--json"])
    env = check_output(capsys.readouterr().out, "transformer")
    res = env["result"]
    assert rc == env["status"] == 0 and res["action"] == "premises"
    assert res["rows"] and "lambda" in res["params"]


def test_transformer_lemmas_json(tmp_path, capsys):
    out = tmp_path / "gap.npz"
    assert main(["transformer", "lemmas", "lemma41", *ARGS, "--widths", "8,32", "--seeds", "2",
                 "-o", str(out), "--json"]) == 0
    env = check_output(capsys.readouterr().out, "transformer")
    res = env["result"]
    assert res["which"] == "lemma41" and res["x"] == [8.0, 32.0] and "gap" in res["observables"]
    assert env["saved"] == [str(out)] and "gap" in res["fits"]
    assert main(["transformer", "lemmas", "definition52", *ARGS, "--c-exp", "0.1",
                 "--json"]) == 0
    env = check_output(capsys.readouterr().out.splitlines()[-1], "transformer")
    assert env["result"]["which"] == "definition52" and env["result"]["premise_met"] is False
