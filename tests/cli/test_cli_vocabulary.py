"""One vocabulary across subcommands (issue 30, item 6): ``--t-end``, ``--order``, ``--d``,
``--seeds``; the old spellings still parse, with a one-line notice on stderr."""

from __future__ import annotations

import argparse

import pytest

from attndyn.cli import _parser


def _sub(name):
    p = _parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _opts(name):
    return {s: a for a in _sub(name)._actions for s in a.option_strings}


@pytest.mark.parametrize("command,old,new,value", [
    ("sgd", "--T", "--t-end", "0.5"),
    ("compare", "--T", "--t-end", "0.5"),
    ("compare", "--n-seeds", "--seeds", "3"),
])
def test_old_spellings_parse_with_one_notice(command, old, new, value, capsys):
    base = [command, "--eta", "0.1"]
    a = _parser().parse_args(base + [old, value])
    err = capsys.readouterr().err
    assert err == f"attndyn {command}: {old} is deprecated, use {new}\n"
    b = _parser().parse_args(base + [new, value])
    assert capsys.readouterr().err == ""
    dest = new[2:].replace("-", "_")
    assert getattr(a, dest) == getattr(b, dest) and str(getattr(b, dest)) == value
    # the old name is an alias of the canonical option (one action), not a second option
    opts = _opts(command)
    assert opts[old] is opts[new]


def test_one_name_per_concept():
    """Each concept has one spelling wherever it exists."""
    for cmd in ("integrate", "verify", "sgd", "compare"):
        assert "--t-end" in _opts(cmd) and "--d" in _opts(cmd), cmd
    for cmd in ("derive", "integrate", "sgd", "compare"):
        assert "--order" in _opts(cmd), cmd
    # the number of independent SGD runs is --seeds; --seed is the seed itself
    for cmd in ("compare", "reproduce"):
        assert "--seeds" in _opts(cmd), cmd
        assert "independent SGD runs" in _opts(cmd)["--seeds"].help, cmd
    for cmd in ("integrate", "verify", "sgd", "compare"):
        assert "--seed" in _opts(cmd), cmd
    # --order counts the same thing everywhere: words of length <= M
    for cmd in ("derive", "integrate", "sgd", "compare"):
        assert "length <= M" in _opts(cmd)["--order"].help, cmd
    # --d is the dimension d everywhere
    for cmd in ("integrate", "verify", "sgd", "compare"):
        assert "dimension d" in _opts(cmd)["--d"].help, cmd
    banned = {"--T", "--n-seeds", "--horizon", "--dim", "--M"}
    for cmd in ("derive", "integrate", "verify", "sgd", "compare", "sweep", "reproduce"):
        for o, a in _opts(cmd).items():
            if o in banned:  # only as a deprecated alias
                assert isinstance(a, type(_opts("sgd")["--T"])), (cmd, o)
