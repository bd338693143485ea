"""verify --orders: a repeated order is refused (2,2 ran the same truncation check twice)."""

import pytest

from attndyn.cli import main


@pytest.mark.parametrize("orders", ["2,2", "8,12,8", "4,4,4"])
def test_repeated_order_refused_before_any_work(orders, capsys):
    assert main(["verify", "--orders", orders]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"--orders must list distinct orders, got {orders}" in err, err
