"""Inputs of the theory checks (seed lists, Definition 5.2's width, the SGD rate gap, the
NTK predictor), found in an audit: each is refused by name before any work, never with an
OverflowError, a MemoryError, a LAPACK failure or a numpy message."""

import numpy as np
import pytest

from attndyn.numeric.transformer import (Transformer, build, definition52,
                                         log10_required_width)
from attndyn.numeric.transformer.lemmas import seed_list
from attndyn.numeric.transformer.ntk import ntk_predictor
from attndyn.numeric.transformer.sgd_theory import sgd_rate_gap

SETUP = dict(N=1, L=2, d=2, m=8, n=4, eps=1.0, omega=1.0, kappa=0.5, xi=0.1, n_test=8)
WIDTH = (10, 2, 3, 1, 0.1, 0.5, 0.05)


@pytest.mark.parametrize("seeds, exc", [(10 ** 12, ValueError), ("ab", TypeError),
                                        ([-1], ValueError), ([1.5], TypeError),
                                        ([True], TypeError), (None, TypeError)])
def test_seed_list_refusals_name_seeds(seeds, exc):
    # 10**12 built a list of 10**12 ints (MemoryError); 1.5 was truncated to 1
    with pytest.raises(exc, match="seeds"):
        seed_list(seeds)


def test_seed_list_values_unchanged():
    assert seed_list(3) == [0, 1, 2]
    assert seed_list([4, np.int64(7)]) == [4, 7]


@pytest.mark.parametrize("c_exp, exc", [("1", TypeError), (None, TypeError),
                                        (10 ** 400, ValueError), (-1.0, ValueError)])
def test_required_width_c_exp_checked(c_exp, exc):
    with pytest.raises(exc, match="c_exp"):
        log10_required_width(*WIDTH, c_exp=c_exp)


@pytest.mark.parametrize("kw, match", [(dict(delta=2.0, c_exp=1.0), "delta"),
                                       (dict(delta=0.05, c_exp="x"), "c_exp"),
                                       (dict(delta=0.05, c_exp=1.0, prefactor=0.0),
                                        "prefactor")])
def test_definition52_checks_its_constants_whatever_lambda(kw, match):
    # with lambda <= 0 (m = 8 < nL here) the constants were never looked at
    student, data = build(SETUP, 0)
    with pytest.raises((TypeError, ValueError), match=match):
        definition52(student, data.X, **kw)


def _model_xy():
    m = Transformer(1, 2, 3, 8, 1.0, 1.0, 0.5, rng=0)
    X = np.random.default_rng(1).standard_normal((6, 2, 3))
    return m, X, Transformer(1, 2, 3, 8, 1.0, 1.0, 0.5, rng=2)(X)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(lam=1.0, n_batches=10 ** 12), ValueError, "n_batches"),
    (dict(lam=1.0, n_batches=0), ValueError, "n_batches"),
    (dict(lam=1.0, n_batches=2.5), TypeError, "n_batches"),
    (dict(lam=1.0, delta=2.0), ValueError, "delta"),
    (dict(lam=1.0, delta=0.0), ValueError, "delta"),
    (dict(lam="x"), TypeError, "lam"),
    (dict(lam=np.nan), ValueError, "lam"),
])
def test_sgd_rate_gap_checks_its_arguments(kw, exc, match):
    m, X, Y = _model_xy()
    with pytest.raises(exc, match=match):
        sgd_rate_gap(m, X, Y, 3, **kw)


@pytest.mark.parametrize("bad, match", [("nan", "X_train"), ("E", "E")])
def test_ntk_predictor_checks_its_inputs(bad, match):
    _, X, Y = _model_xy()
    if bad == "nan":
        X = X.copy()
        X[0, 0, 0] = np.nan
        with pytest.raises(ValueError, match=match):
            ntk_predictor(X, Y)
    else:
        with pytest.raises(ValueError, match=match):
            ntk_predictor(X, Y, E=np.ones((3, 3)))
