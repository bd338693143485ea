"""``attndyn transformer train|kernel|lemmas``."""

import json

import numpy as np
import pytest

from attndyn.cli import main
from attndyn.numeric.core.results import load_result
from attndyn.numeric.transformer import load_sweep

ARGS = ("--N 2 --L 3 --d 4 --m 16 --n 4 --eps 1 --omega 1 --kappa 1/sqrt(m) --xi 0.1 "
        "--token-norm unit --E-scale 0.5 --n-test 16").split()


def test_train_writes_a_labelled_result(tmp_path, capsys):
    out = tmp_path / "run.npz"
    rc = main(["transformer", "train", *ARGS, "--T", "0.05", "--n-eval", "2", "-o", str(out),
               "--observe", "kernel"])
    assert rc == 0
    res = load_result(out)
    assert res.kind == "transformer_flow" and "lambda_min_H_2" in res.names
    assert res.params["setup"]["m"] == 16
    assert np.all(np.diff(res.observable("loss")) < 0)


def test_kernel_and_lemmas(tmp_path, capsys):
    assert main(["transformer", "kernel", *ARGS, "--layer", "0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["result"]
    assert summary["nL"] == 12 and summary["lambda"] > 0
    assert main(["transformer", "kernel", *ARGS, "--layer", "0", "--kernel", "exact",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["result"]
    assert summary["rows"] == 48 and summary["kernel"] == "exact"
    out = tmp_path / "gap.npz"
    assert main(["transformer", "lemmas", "lemma41", *ARGS, "--widths", "8,32", "--seeds", "2",
                 "-o", str(out)]) == 0
    sw = load_sweep(out)
    assert list(sw.x) == [8.0, 32.0] and "gap" in sw.names
    assert main(["transformer", "lemmas", "definition52", *ARGS, "--c-exp", "0.1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.splitlines()[-1])["result"]
    assert rep["premise_met"] is False


def test_bad_input_exits_2(capsys):
    assert main(["transformer", "kernel", *ARGS, "--layer", "2"]) == 2
    assert "layer must be in" in capsys.readouterr().err
    bad = [a if a != "1/sqrt(m)" else "wide" for a in ARGS]
    with pytest.raises(SystemExit) as exc:  # argparse rejects the option itself
        main(["transformer", "kernel", *bad, "--layer", "0"])
    assert exc.value.code == 2 and "--kappa" in capsys.readouterr().err
    assert main(["transformer", "lemmas", "definition52", *ARGS]) == 2
    assert "--c-exp" in capsys.readouterr().err
