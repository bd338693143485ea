"""scaling: an input that silently reads as a non-finite float (1e400 overflows to inf,
'nan') is refused naming the option; --C 1e400 was evaluated (critical_N = inf). An
infinity spelled out ('inf') stays the C -> inf limit (tests/scaling/test_scaling.py)."""

import pytest

from attndyn._cli_scaling import parse_spec
from attndyn.cli import main

BASE = ["scaling", "--xi", "1", "--L", "128", "--d", "64"]


@pytest.mark.parametrize("text", ["1e400", "-1e400", "nan", "1e6,1e400", "1,NaN,3"])
def test_overflow_and_nan_refused(text):
    with pytest.raises(ValueError, match=r"^--C: values must be numbers \('inf' spelled out"):
        parse_spec("C", text)


def test_spelled_infinity_is_the_limit():
    assert parse_spec("C", "0,inf") == [0.0, float("inf")]
    assert parse_spec("C", "Infinity") == [float("inf")]


@pytest.mark.parametrize("text", ["1e400:1e401:3", "1:inf:3:lin"])
def test_non_finite_range_refused(text):
    with pytest.raises(ValueError, match=r"^--C"):
        parse_spec("C", text)


def test_cli_refuses_before_evaluating(capsys):
    assert main([*BASE, "--C", "1e400"]) == 2
    out, err = capsys.readouterr()
    assert "critical_N" not in out and err.count("\n") == 1, (out, err)
    assert "--C: values must be numbers ('inf' spelled out for the limit), got '1e400', " \
           "which reads as inf in a float" in err, err


def test_finite_values_unchanged():
    assert parse_spec("C", "1e6,2.5") == [1e6, 2.5]
    assert parse_spec("C", "1e300") == [1e300]
