"""Sweep specs: a non-finite number in [fixed] (eta = nan) is refused when the spec is
read, naming the key; it reached every point, each of which failed with status -10."""

import re

import pytest

from attndyn._cli_sweep import read_spec
from attndyn.cli import main

SPEC = """function = "sgd"
[fixed]
T = 0.01
{line}
[grid]
d = [20, 24]
"""


@pytest.mark.parametrize("line, key", [("eta = nan", "[fixed].eta"),
                                       ("eta = inf", "[fixed].eta"),
                                       ("eta = -inf", "[fixed].eta"),
                                       ("batch = [8, nan]", "[fixed].batch")])
def test_non_finite_fixed_value_refused(tmp_path, line, key):
    p = tmp_path / "s.toml"
    p.write_text(SPEC.format(line=line))
    with pytest.raises(ValueError, match="^" + re.escape(f"spec {key}: numbers must be finite, "
                                                         "got ")):
        read_spec(p)


def test_non_finite_grid_value_refused_at_the_spec(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('function = "sgd"\n[grid]\neta = [0.01, nan]\n')
    with pytest.raises(ValueError, match=r"^spec \[grid\]\.eta: numbers must be finite"):
        read_spec(p)


def test_cli_refuses_before_any_point(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SPEC.format(line="eta = nan"))
    assert main(["sweep", "s.toml", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "spec [fixed].eta: numbers must be finite, got nan" in err, err
    assert not (tmp_path / "out").exists()


def test_finite_spec_unchanged(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SPEC.format(line="eta = 0.01"))
    assert read_spec(p)["fixed"] == {"T": 0.01, "eta": 0.01}
