"""One name per concept across subcommands, help on every option, --json where numbers are
printed, --version."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from attndyn import __version__
from attndyn.cli import _parser, main


def _subparsers():
    p = _parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, sp in sub.choices.items():
        nested = [a for a in sp._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:  # attndyn transformer train|kernel|lemmas
            for sub_name, ssp in nested[0].choices.items():
                out[f"{name} {sub_name}"] = ssp
        else:
            out[name] = sp
    return out


def _options(sp):
    return {s: a for a in sp._actions if a.option_strings and a.dest != "help"
            for s in a.option_strings}


# concept -> the one canonical option name; aliases listed are accepted old names
CANONICAL = {
    "final time of a run": ("--t-end", {"--T"}),
    "output file": ("--out", {"-o", "--output"}),
    "machine-readable output": ("--json", set()),
    "number of output times": ("--n-out", set()),
    "seed": ("--seed", set()),
    "number of independent SGD runs": ("--seeds", {"--n-seeds"}),
}
# subcommands where --T is a variable of paper 000's bounds, not a run's horizon
BOUND_VARIABLES = {"scaling"}
PRINTS_NUMBERS = {"integrate", "verify", "scaling", "sgd", "compare", "sweep", "reproduce",
                  "transformer train", "transformer kernel", "transformer lemmas"}


def test_every_option_has_help():
    missing = [(cmd, s) for cmd, sp in _subparsers().items()
               for s, a in _options(sp).items() if not a.help]
    assert not missing, missing


def test_one_name_per_concept():
    bad = []
    for cmd, sp in _subparsers().items():
        opts = _options(sp)
        for concept, (name, aliases) in CANONICAL.items():
            for alias in aliases:
                if alias in opts and not (cmd in BOUND_VARIABLES and alias == "--T"):
                    # an old name may stay, as an alias of the canonical option only
                    if name not in opts or opts[alias] is not opts[name]:
                        bad.append((cmd, concept, alias))
    assert not bad, bad
    # the horizon of a run is --t-end wherever a run has one
    for cmd in ("integrate", "verify", "sgd", "compare", "transformer train"):
        assert "--t-end" in _options(_subparsers()[cmd]), cmd


def test_json_wherever_numbers_are_printed():
    subs = _subparsers()
    missing = [c for c in PRINTS_NUMBERS if "--json" not in _options(subs[c])]
    assert not missing, missing


def test_version():
    r = subprocess.run([sys.executable, "-m", "attndyn", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"attndyn {__version__}"


def test_integrate_json_and_save_only_on_success(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["integrate", "--order", "6", "--t-end", "0.05", "--n-out", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == 0 and out["saved"][0].endswith("attndyn-result.npz")
    assert (tmp_path / "attndyn-result.npz").exists()
    (tmp_path / "attndyn-result.npz").unlink()
    # a run that does not converge (status 2) writes no default file
    code = main(["integrate", "--order", "4", "--t-end", "3", "--n-out", "3",
                 "--method", "truncation", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["status"] != 0 and out["saved"] == []
    assert not (tmp_path / "attndyn-result.npz").exists()
    # ... unless a file was named
    assert main(["integrate", "--order", "4", "--t-end", "3", "--n-out", "3",
                 "--method", "truncation", "--out", "r.npz"]) == 1
    assert (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("cmd", ["sgd", "compare"])
def test_sgd_compare_json_and_old_T(cmd, capsys):
    argv = [cmd, "--eta", "0.01", "--d", "20", "--batch", "8", "--n-out", "3", "--json"]
    assert main(argv + ["--t-end", "0.1"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(argv + ["--T", "0.1"]) == 0  # the old name still works
    b = json.loads(capsys.readouterr().out)
    assert a["status"] == 0 and a["result"]["t"] == b["result"]["t"]
    assert a["result"]["t"][-1] == pytest.approx(0.1, rel=0.05)
