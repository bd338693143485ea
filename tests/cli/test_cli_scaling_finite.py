"""scaling: an input that reads as a non-finite float (1e400 overflows to inf, 'nan',
'inf') is refused naming the option; --C 1e400 was evaluated (critical_N = inf)."""

import pytest

from attndyn._cli_scaling import parse_spec
from attndyn.cli import main

BASE = ["scaling", "--xi", "1", "--L", "128", "--d", "64"]


@pytest.mark.parametrize("text", ["1e400", "inf", "-inf", "nan", "1e6,1e400", "1,NaN,3"])
def test_non_finite_value_refused(text):
    with pytest.raises(ValueError, match=r"^--C: values must be finite numbers"):
        parse_spec("C", text)


@pytest.mark.parametrize("text", ["1e400:1e401:3", "1:inf:3:lin"])
def test_non_finite_range_refused(text):
    with pytest.raises(ValueError, match=r"^--C"):
        parse_spec("C", text)


def test_cli_refuses_before_evaluating(capsys):
    assert main([*BASE, "--C", "1e400"]) == 2
    out, err = capsys.readouterr()
    assert "critical_N" not in out and err.count("\n") == 1, (out, err)
    assert "--C: values must be finite numbers, got '1e400'" in err, err


def test_finite_values_unchanged():
    assert parse_spec("C", "1e6,2.5") == [1e6, 2.5]
    assert parse_spec("C", "1e300") == [1e300]
