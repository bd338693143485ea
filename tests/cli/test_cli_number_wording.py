"""check_number's message: without an upper bound it said "a finite number in (0, inf]",
which contradicts itself (inf is not finite and not allowed)."""

import math

import pytest

from attndyn._cli_common import check_number
from attndyn.cli import main


@pytest.mark.parametrize("kw, want", [
    ({}, "--x must be a finite number > 0, got -1"),
    ({"strict": False}, "--x must be a finite number >= 0, got -1"),
    ({"low": 2.0}, "--x must be a finite number > 2, got -1"),
    ({"high": 5.0}, "--x must be a finite number in (0, 5], got -1"),
    ({"strict": False, "high": 5.0}, "--x must be a finite number in [0, 5], got -1"),
])
def test_range_text(kw, want):
    with pytest.raises(ValueError) as err:
        check_number(-1.0, "x", **kw)
    assert str(err.value) == want


@pytest.mark.parametrize("bad", [math.inf, math.nan, 0.0])
def test_inf_is_refused_as_not_finite(bad):
    with pytest.raises(ValueError, match=r"^--x must be a finite number > 0, got "):
        check_number(bad, "x")


def test_cli_line(capsys):
    assert main(["integrate", "--atol", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--atol must be a finite number > 0, got -1" in err and "inf]" not in err, err
