"""transformer train/premises: --lr is the SGD step; under --method flow (the default) it
was silently ignored. It is refused, as the CLI refuses other options that do not apply."""

import pytest

from attndyn.cli import main
from attndyn.numeric import transformer as tr

ARGS = ("--N 2 --L 3 --d 4 --m 16 --n 4 --eps 1 --omega 1 --kappa 1/sqrt(m) --xi 0.1 "
        "--token-norm unit --E-scale 0.5 --n-test 16").split()


class Ran(Exception):
    pass


def _ran(*a, **k):
    raise Ran


@pytest.mark.parametrize("action", ["train", "premises"])
@pytest.mark.parametrize("extra", [[], ["--method", "flow"]])
def test_lr_under_flow_refused_before_any_work(action, extra, capsys, monkeypatch):
    monkeypatch.setattr(tr, "train", _ran)
    rc = main(["transformer", action, *ARGS, "--T", "0.05", "--lr", "0.1", *extra])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--lr applies to --method sgd only" in err, err


def test_lr_with_sgd_is_taken(monkeypatch, capsys):
    seen = []

    def train(*a, **k):
        seen.append(k)
        raise Ran

    monkeypatch.setattr(tr, "train", train)
    main(["transformer", "train", *ARGS, "--T", "0.05", "--method", "sgd", "--lr", "0.1"])
    assert seen and seen[0]["lr"] == 0.1 and seen[0]["method"] == "sgd"
    assert "--lr applies" not in capsys.readouterr().err
