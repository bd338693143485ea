"""Labelled results save and load; initial moments of standard initialisations."""

from fractions import Fraction

import numpy as np
import pytest

from attndyn import load_result
from attndyn.symbolic.initial import FreeInit, narayana_moment, scalar, wishart

from conftest import random_psd


def test_save_load_roundtrip(tmp_path, d3_model):
    rng = np.random.default_rng(1)
    S = [random_psd(rng, 12), random_psd(rng, 12)]
    r = d3_model.hierarchy(6).integrate(S, np.linspace(0, 0.05, 4))
    p = r.save(tmp_path / "x")
    back = load_result(p)
    assert np.array_equal(back.t, r.t) and np.array_equal(back.y, r.y)
    assert back.names == r.names and back.words == r.words
    assert back.status == r.status and back.message == r.message
    assert back.params == r.params
    assert np.array_equal(back.moment((1, 0)), r.moment((0, 1)))
    assert np.array_equal(back.observable("q_12"), r.moment((0, 1)))
    assert back.diagnostics["truncation_error_low"] == pytest.approx(r.diagnostics["truncation_error_low"])


def test_marchenko_pastur_moments():
    # Narayana: m_3 = a + 3a^2 + a^3 for sigma = 1
    a = Fraction(1, 3)
    assert narayana_moment(3, 1, a) == a + 3 * a ** 2 + a ** 3
    fi = FreeInit([wishart(2, a)])
    assert fi.moment((0, 0)) == 16 * (a + a ** 2)


def test_free_moments_match_large_random_matrices():
    rng = np.random.default_rng(7)
    d = 1500
    W1 = rng.standard_normal((d, d // 2)) / np.sqrt(d)
    W2 = 0.8 * rng.standard_normal((d, d)) / np.sqrt(d)
    mats = [W1 @ W1.T, W2 @ W2.T, 1.5 * np.eye(d)]
    fi = FreeInit([wishart(1, Fraction(1, 2)), wishart(Fraction(4, 5), 1), scalar(Fraction(3, 2))])
    from attndyn.kernels.moments import word_traces
    words = [(0, 1), (0, 0, 1), (0, 1, 0, 1), (0, 0, 1, 1), (0, 1, 2, 0, 1), (1, 1, 1)]
    exact = np.array(fi(words))
    sampled = word_traces(mats, words)
    np.testing.assert_allclose(sampled, exact, rtol=2e-2)


def test_free_init_feeds_the_ladder(d3_model):
    fi = FreeInit([wishart(0.5, 0.5), scalar(1)])
    r = d3_model.hierarchy(10).integrate(fi, np.linspace(0, 0.2, 5))
    assert r.success, r.message
    # S2 = I and eq. (348) with the Marchenko-Pastur law of S1(0)
    assert np.allclose(r.moment((0, 1)), r.moment((0,)))


@pytest.mark.parametrize("word,err", [((0.7, 1), TypeError), ("01", TypeError),
                                      ((True,), TypeError), ((-1, 0), ValueError),
                                      (0, TypeError), ("q_12", TypeError)])
def test_moment_refuses_what_is_not_a_word(word, err, d3_model):
    # int() truncated: moment((0.7, 1)) was q_12, moment("01") too, moment((True,)) mu_2
    r = d3_model.hierarchy(4).integrate([np.eye(4) / 2, np.eye(4)], [0.0, 0.01])
    with pytest.raises(err, match="word"):
        r.moment(word)
    assert np.array_equal(r.moment(np.array([1, 0])), r.moment((0, 1)))
