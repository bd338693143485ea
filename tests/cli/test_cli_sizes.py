"""Every size the CLI accepts is bounded before any work, and plain bad input is one line
with exit status 2, never a traceback nor a check reported "not held" (issue 23: D4, D9,
D11, D13)."""

from __future__ import annotations

import re

import pytest

from attndyn._cli_common import LIMITS
from attndyn.cli import main

SGD = ["--eta", "0.01", "--d", "20", "--batch", "8", "--t-end", "0.01"]


@pytest.mark.parametrize("argv,option,allowed", [
    (["sgd", *SGD, "--d", "1000000000"], "--d", "[2, 8192]"),
    (["compare", *SGD, "--d", "1000000"], "--d", "[2, 2048]"),
    (["compare", *SGD, "--d", "4096"], "--d", "[2, 2048]"),
    (["sgd", *SGD, "--n-out", "1000000"], "--n-out", "[1, 10000]"),
    (["sgd", *SGD, "--L", "1000000"], "--L", "[1, 16]"),
    (["sgd", *SGD, "--K", "255"], "--K", "[1, 32]"),
    (["derive", "--K", "64"], "--K", "[1, 32]"),
    (["derive", "--K", "0"], "--K", "[1, 32]"),  # said "an int in 1..255", the API's range
    (["sgd", *SGD, "--K", "-3"], "--K", "[1, 32]"),
    (["sgd", *SGD, "--batch", "1000000000"], "--batch", "[1, 1000000]"),
    (["sgd", *SGD, "--width", "1000000"], "--width", "[1, 8192]"),
    (["sgd", *SGD, "--order", "1000"], "--order", "[1, 12]"),
    (["sgd", *SGD, "--threads", "1000000"], "--threads", "[1, 1024]"),
    (["sgd", *SGD, "--seed", "-1"], "--seed", "[0, "),
    (["compare", *SGD, "--seeds", "1000000000"], "--seeds", "[1, 256]"),
    (["compare", *SGD, "--n-seeds", "1000000"], "--seeds", "[1, 256]"),
    (["integrate", "--n-out", "1000000000"], "--n-out", "[1, 10000]"),
    (["integrate", "--model", "untied", "--d", "1000000000"], "--d", "[2, 8192]"),
    (["integrate", "--L", "100"], "--L", "[1, 16]"),
    (["derive", "--L", "0"], "--L", "[1, 16]"),
    (["verify", "--d", "1000000000"], "--d", "[2, 1000]"),
    (["verify", "--orders", "2,99"], "--orders", "[1, 40]"),
    (["verify", "--orders", ",".join(["2"] * 9)], "--orders", "1 to 8"),
    (["verify", "--orders", "36"], "--orders 36", "order 38"),
    (["sweep", "x.toml", "--workers", "100000"], "--workers", "[1, 256]"),
    (["sweep", "x.toml", "--max-points", "1000000000"], "--max-points", "[1, 1000000]"),
])
def test_sizes_refused_before_any_work(argv, option, allowed, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    if "--n-seeds" in argv:  # the old spelling's notice comes first
        notice, err = err.split("\n", 1)
        assert notice == "attndyn compare: --n-seeds is deprecated, use --seeds"
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert option in err and allowed in err, err


def test_limits_cover_the_issue_sizes():
    for key in ("K", "L", "d", "width", "n_out", "seeds", "batch"):
        lo, hi = LIMITS[key]
        assert 1 <= lo <= hi < 10 ** 7, key


@pytest.mark.parametrize("argv,words", [
    (["integrate", "--t-end", "1e6"], ["--t-end", "(0, 10000]"]),
    (["sgd", "--eta", "0.01", "--t-end", "1e6"], ["--t-end 1e+06", "multiply-adds", "limit"]),
    (["compare", "--eta", "0.001", "--d", "400", "--seeds", "200", "--t-end", "10"],
     ["--seeds 200", "multiply-adds"]),
    (["integrate", "--time-limit", "-1"], ["--time-limit"]),
    (["integrate", "--model", "untied", "--time-limit", "5"], ["--time-limit", "tied"]),
])
def test_long_runs_refused_from_their_horizon(argv, words, capsys):
    """D4: the work is estimated from the horizon; ``integrate --t-end 1e6`` ran for minutes."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words), err


@pytest.mark.parametrize("argv,word", [
    (["integrate", "--init", "wishart(0.5,1e308),scalar(1)"], "--init"),
    (["integrate", "--init", "wishart(nan),scalar(1)"], "--init"),
    (["integrate", "--init", "wishart(1/0),scalar(1)"], "--init"),
    (["integrate", "--init", "scalar(1)," * 200], "--init"),
    (["sgd", *SGD, "--C", "1,0;0,1"], "--C"),
    (["sgd", *SGD, "--C", "nan"], "--C"),
    (["sgd", *SGD, "--scale", "1,2,3"], "--scale"),
    (["sgd", *SGD, "--weight-decay", "inf"], "--weight-decay"),
    (["sgd", *SGD, "--trainable", ""], "--trainable"),
    (["sgd", "--eta", "nan", "--d", "20"], "--eta"),
    (["sweep", "x.toml", "--scheduler", "garbage"], "--scheduler"),
    (["sweep", "x.toml", "--scheduler", "tcp://"], "--scheduler"),
])
def test_plain_bad_input_is_one_line(argv, word, capsys, tmp_path, monkeypatch):
    """D13: no traceback for plain bad input."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.toml").write_text('function = "bounds"\n[grid]\nC = [1e10]\n')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and word in err, err


def test_sweep_spec_must_be_a_regular_file(tmp_path, capsys):
    import os
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)  # reading it would block for ever
    assert main(["sweep", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert main(["sweep", "/dev/zero"]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_verify_input_errors_are_status_2_not_not_held(capsys):
    """D11: before, ``--orders 2,99`` ran and reported the check "not held" (exit 1)."""
    for argv in (["--orders", "2,99"], ["--d", "1000000000"], ["--orders", "0"],
                 ["--t-end", "1e9"], ["--conv-tol", "nan"], ["--only", "trunc", "--K", "0"]):
        assert main(["verify", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("attndyn verify: error: ") and err.count("\n") == 1, err
        assert not re.search(r"not held", err)
