"""train() and excess_risk() inputs, found in an audit: output times and T are checked by
name before anything is allocated, and a test set whose targets do not match its inputs is
refused instead of broadcast into a wrong excess risk."""

import numpy as np
import pytest

from attndyn.numeric.transformer import Transformer, excess_risk, train


def _setup():
    m = Transformer(1, 2, 2, 4, 1.0, 1.0, 1.0, rng=0)
    X = np.random.default_rng(1).standard_normal((2, 2, 2))
    return m, X, 0.5 * X


@pytest.mark.parametrize("n_eval", [10 ** 10, 10 ** 6])
def test_more_output_times_than_the_limit_refused_before_allocating(n_eval):
    # n_eval = 1e10 asked numpy for 74.5 GiB of output times; each recorded row costs a
    # forward and backward pass, so rows are bounded like gradient evaluations (10^6, or
    # max_grad when it is larger)
    m, X, Y = _setup()
    with pytest.raises(ValueError, match=rf"n_eval = {n_eval}"):
        train(m, (X, Y), T=0.1, n_eval=n_eval)


def test_t_eval_longer_than_the_limit_refused():
    m, X, Y = _setup()
    with pytest.raises(ValueError, match="t_eval"):
        train(m, (X, Y), T=0.1, t_eval=np.zeros(10 ** 6 + 1), max_grad=5 * 10 ** 5)
    with pytest.raises(ValueError, match="t_eval"):
        train(m, (X, Y), T=0.1, t_eval=np.zeros(2 * 10 ** 6 + 1), max_grad=2 * 10 ** 6)


@pytest.mark.parametrize("T, exc", [(10 ** 400, ValueError), (None, TypeError),
                                    ("1", TypeError), (np.nan, ValueError)])
def test_T_checked_by_name(T, exc):
    m, X, Y = _setup()
    with pytest.raises(exc, match=r"\bT\b"):
        train(m, (X, Y), T=T)


def test_test_targets_of_another_shape_refused():
    m, X, Y = _setup()
    with pytest.raises(ValueError, match="F_test"):
        train(m, (X, Y, X, Y[:1]), T=0.1, n_eval=1)
    with pytest.raises(ValueError, match="F_test"):
        excess_risk(m, X, Y[:1])


@pytest.mark.parametrize("X_test", [np.ones((2, 3, 2)), np.full((2, 2, 2), np.nan)])
def test_excess_risk_checks_its_inputs(X_test):
    m, _, _ = _setup()
    with pytest.raises(ValueError, match="X_test"):
        excess_risk(m, X_test, np.ones(X_test.shape))


def test_excess_risk_accepts_lists_and_keeps_its_value():
    m, X, Y = _setup()
    r = excess_risk(m, X, Y)
    R = m(X) - Y
    assert r == float(np.vdot(R, R) / 2)
    assert excess_risk(m, X.tolist(), Y.tolist()) == r
