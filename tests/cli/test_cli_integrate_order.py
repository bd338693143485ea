"""integrate: --order and --rtol out of range name the CLI option ("--order"), not the
Python argument ("order must be an int >= 1, got 0", from the hierarchy)."""

import pytest

from attndyn.cli import main


@pytest.mark.parametrize("argv, want", [
    (["integrate", "--order", "0"], "--order must be an integer >= 1, got 0"),
    (["integrate", "--order", "-3"], "--order must be an integer >= 1, got -3"),
    (["integrate", "--model", "untied", "--order", "0"], "--order must be an integer >= 1, got 0"),
    (["integrate", "--rtol", "1.5"], "--rtol must be a finite number in (0, 1), got 1.5"),
    (["integrate", "--rtol", "1"], "--rtol must be a finite number in (0, 1), got 1"),
])
def test_named_as_the_option(argv, want, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and want in err, err
