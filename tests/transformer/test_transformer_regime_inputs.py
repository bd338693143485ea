"""regime_scaling's helpers, found in an audit: exponential_phase scanned every start
against every end (a straight curve of 1e5 points would take about an hour; 3000 took
2.5 s), and hessian_lambda_max took unchecked inputs and iteration counts."""

import numpy as np
import pytest

from attndyn.numeric.transformer import Transformer
from attndyn.numeric.transformer.regime_scaling import exponential_phase, hessian_lambda_max
from hang_guard import finishes


def _quadratic_reference(t, y, spread=2.0):
    """The scan before the fix, kept to check that the new one returns the same pair."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    keep = np.concatenate([[True], np.diff(t) > 0])
    t, y = t[keep], y[keep]
    gap = y[:-1] - y[-1]
    ok = gap > 0
    if ok.sum() < 3:
        return 0.0, float("nan")
    tt, lg = t[:-1][ok], np.log(gap[ok])
    slopes = -np.diff(lg) / np.diff(tt)
    best, best_rate = 0.0, float("nan")
    for i in range(slopes.size):
        if slopes[i] <= 0:
            continue
        lo = hi = slopes[i]
        for j in range(i, slopes.size):
            if slopes[j] <= 0:
                break
            lo, hi = min(lo, slopes[j]), max(hi, slopes[j])
            if hi > spread * lo:
                break
            drop = lg[i] - lg[j + 1]
            if drop > best:
                best, best_rate = float(drop), float(drop / (tt[j + 1] - tt[i]))
    return best, best_rate


@pytest.mark.parametrize("seed", range(40))
def test_exponential_phase_same_as_the_quadratic_scan(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 60))
    t = np.sort(rng.uniform(0, 10, n))
    if seed % 3 == 0 and n > 8:
        t[5:8] = t[5]                           # repeated times
    kind = seed % 4
    if kind == 0:
        y = np.exp(-rng.uniform(0.1, 3) * t) + 0.1 * rng.standard_normal(n) ** 2
    elif kind == 1:
        y = np.cumsum(rng.standard_normal(n))
    elif kind == 2:
        y = np.exp(-np.cumsum(rng.uniform(0.0, 1.0, n)))
    else:
        y = 1.0 + np.exp(-2.0 * t) * (1 + 0.3 * np.sin(5 * t))
    for spread in (1.5, 2.0, 5.0, 0.5):
        np.testing.assert_equal(exponential_phase(t, y, spread=spread),  # NaN == NaN here
                                _quadratic_reference(t, y, spread))


def test_exponential_phase_is_linear_in_the_length():
    t = np.linspace(0.0, 10.0, 200001)
    e_folds, rate = finishes(lambda: exponential_phase(t, 0.1 + np.exp(-2.0 * t)), 10.0)
    assert e_folds > 15 and abs(rate - 2.0) < 0.1


def test_exponential_phase_needs_as_many_times_as_values():
    with pytest.raises(ValueError, match="same length"):
        exponential_phase(np.arange(5.0), np.ones(4))


def _model_xy():
    m = Transformer(1, 2, 3, 8, 1.0, 1.0, 0.5, rng=0)
    X = np.random.default_rng(1).standard_normal((6, 2, 3))
    return m, X, Transformer(1, 2, 3, 8, 1.0, 1.0, 0.5, rng=2)(X)


@pytest.mark.parametrize("iters, exc", [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                        (10 ** 12, ValueError)])
def test_hessian_iterations_checked(iters, exc):
    m, X, Y = _model_xy()
    with pytest.raises(exc, match="iters"):
        hessian_lambda_max(m, X, Y, iters=iters)


def test_hessian_inputs_checked():
    m, X, Y = _model_xy()
    with pytest.raises(ValueError, match=r"\bY\b"):
        hessian_lambda_max(m, X, Y[:, :1])
