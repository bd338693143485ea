"""Messages print choices and orders as plain text, never as Python lists (issue 23)."""

import numpy as np
import pytest

import attndyn


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def test_tied_convergence_message_has_no_brackets():
    m = attndyn.TiedModel(2, [0], square)
    S = [np.diag([1.0, 0.5, 0.2]), np.diag([0.3, 0.8, 0.1])]
    r = m.hierarchy(6).integrate(S, [0.0, 0.2], check=[4], method="truncation")
    assert "orders 6 and 4" in r.message and "[" not in r.message


def test_sweep_task_and_solver_choices_are_plain():
    from attndyn._sweep_tasks import task_signature
    with pytest.raises(ValueError, match="choose one of") as e:
        task_signature("no_such_task")
    assert "[" not in str(e.value)
    from attndyn.numeric.attention.odesolve import check_solver_args
    with pytest.raises(ValueError, match="method must be one of BDF, DOP853") as e:
        check_solver_args(1e-6, 1e-9, 1e10, "XX")
    assert "[" not in str(e.value)


def test_comparison_missing_observable_is_plain():
    from attndyn.numeric.attention.compare import compare
    c = compare(attndyn.TiedModel(2, [0], square), {"d": 10, "scale": 0.5}, eta=0.05, batch=8,
                t_eval=[0, 0.1], seed=0, names=["q_12", "mu_1"])
    with pytest.raises(KeyError, match="have q_12, mu_1"):
        c.error("zzz")
