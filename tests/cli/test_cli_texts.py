"""Help texts and messages agree with the program (issue 30, item 7): the convergence check
described one way, no Python list brackets in the messages the CLI formats, ``verify
--list`` in aligned columns, ``reproduce --help`` honest about Fig. 2 quick."""

from __future__ import annotations

import argparse
import re

import pytest

from attndyn.cli import _parser, main


def _opts(name):
    p = _parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return {s: a for a in sub.choices[name]._actions for s in a.option_strings}


def test_convergence_check_described_one_way():
    """One wording, with each command's true second order: integrate checks M against
    M - 2 (M + 2 below order 4; the library's check="auto"), verify's trunc check against
    M + 2."""
    pattern = re.compile(r"the truncation at order M is compared with order (.+?) on the "
                         r"moments of length <= 2")
    integrate = pattern.search(_opts("integrate")["--conv-tol"].help)
    verify = pattern.search(_opts("verify")["--conv-tol"].help)
    assert integrate and verify
    assert integrate.group(1) == "M - 2 (M + 2 below order 4; untied: M + 2)"
    assert verify.group(1) == "M + 2"
    for cmd in ("integrate", "verify"):
        assert "M vs M-2" not in _opts(cmd)["--conv-tol"].help


def test_integrate_convergence_help_matches_the_library():
    """What integrate's help says its check compares: tied order 6 against 4, order 2
    against 4, untied order 2 against 4 (``check="auto"``, which ``attndyn integrate``
    uses)."""
    import numpy as np

    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    model = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    for order, other in ((6, 4), (2, 4)):
        res = model.hierarchy(order).integrate(init, np.linspace(0, 0.01, 2), check="auto",
                                               method="truncation")
        assert res.diagnostics["ladder"] == [other], order
    untied = attndyn.UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    pairs = untied.gaussian_init(12, seed=0)
    res = untied.hierarchy(2).integrate(pairs, np.linspace(0, 0.01, 2), check="auto")
    assert res.diagnostics["ladder"] == [4]


@pytest.mark.parametrize("spec,word", [
    ('function = "bounds"\nbogus = 1\n[grid]\nC = [1e10]\n', "unknown keys bogus; allowed: "),
    ('function = "bounds"\n[grid]\nnope = [1]\n', "its parameters: "),
    ('function = "bounds"\n[fixed]\nC = 1e10\n[grid]\nC = [1e10]\n', "spec: C appear in both"),
])
def test_sweep_messages_without_list_brackets(spec, word, tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(spec)
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert word in err and "['" not in err and "[]" not in err, err


def test_derive_header_without_list_brackets(capsys):
    assert main(["derive", "--K", "3", "--trainable", "0,1", "--loss", "G1*G2*G3",
                 "--order", "1"]) == 0
    assert "K=3, trainable=0,1," in capsys.readouterr().out


def test_verify_list_columns_aligned(capsys):
    assert main(["verify", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    head = lines[0]
    assert head.split() == ["check", "paper", "title"]
    p, t = head.index("paper"), head.index("title")
    for line in lines[1:]:
        # every column starts at its header's position, after at least two spaces
        assert line[p - 2:p] == "  " and line[p] != " ", line
        assert line[t - 2:t] == "  " and line[t] != " ", line


def test_reproduce_quick_help_names_the_fig2_exception():
    h = _opts("reproduce")["--quick"].help
    assert "Fig. 2" in h and "B = 400" in h
    assert "with the caption's eta d/B (default)" not in h
