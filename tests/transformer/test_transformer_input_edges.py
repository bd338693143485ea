"""Bad and extreme input at the transformer's public entries, found in an audit: sizes
refused before anything is allocated, complex inputs refused instead of silently cut to
their real part, scalars that overflow a float, and per-token RMS normalisation at the ends
of the float range."""

import math

import numpy as np
import pytest

from attndyn.numeric.transformer import Transformer, make_data, positional_embedding
from attndyn.numeric.transformer.data import rms_normalise


def _model(**kw):
    args = dict(N=1, L=3, d=2, m=4, eps=1.0, omega=1.0, kappa=1.0, rng=0)
    args.update(kw)
    return Transformer(**args)


@pytest.mark.parametrize("L", [10 ** 5, 10 ** 6, 10 ** 12])
def test_huge_sequence_length_refused_before_allocating(L):
    # the causal mask is L x L: L = 1e6 asked numpy for 931 GiB before any check
    with pytest.raises(ValueError, match=rf"L = {L}"):
        _model(L=L)


def test_huge_positional_embedding_refused_before_allocating():
    with pytest.raises(ValueError, match=r"L d = 10000000000"):
        positional_embedding(10 ** 6, 10 ** 4)


@pytest.mark.parametrize("name", ["eps", "omega", "kappa"])
def test_scaling_too_large_for_a_float(name):
    with pytest.raises(ValueError, match=name):
        _model(**{name: 10 ** 400})


@pytest.mark.parametrize("bad, exc", [("2", TypeError), (None, TypeError), (1j, TypeError),
                                      (True, TypeError), (-1.0, ValueError),
                                      (math.inf, ValueError), (10 ** 400, ValueError)])
def test_E_scale_checked_and_named(bad, exc):
    with pytest.raises(exc, match="E_scale"):
        _model(E_scale=bad)


@pytest.mark.parametrize("method", ["forward", "hidden", "compact_output"])
def test_complex_inputs_refused(method):
    model = _model()
    X = np.ones((1, 3, 2)) * (1 + 1j)
    with pytest.raises(TypeError, match="X must be real"):
        getattr(model, method)(X)
    with pytest.raises(TypeError, match="Y must be real"):
        model.loss(np.ones((1, 3, 2)), X)


@pytest.mark.parametrize("kw, match", [(dict(n=10 ** 12), "n = 1000000000000"),
                                       (dict(n=2, n_test=10 ** 12), "n_test = 1000000000000"),
                                       (dict(n=10 ** 9), "n = 1000000000")])
def test_make_data_refuses_huge_sizes_before_drawing(kw, match):
    with pytest.raises(ValueError, match=match):
        make_data(_model(), xi=0.1, seed=0, **kw)


def test_make_data_noise_too_large_for_a_float():
    with pytest.raises(ValueError, match="xi"):
        make_data(_model(), 2, xi=10 ** 400, seed=0)


def test_make_data_checks_the_test_set_too():
    def nan_on_test(X):  # finite on the training inputs, NaN on the test inputs
        return X if X.shape[0] == 2 else X * np.nan

    def short_on_test(X):
        return X if X.shape[0] == 2 else X[:1]

    for teacher in (nan_on_test, short_on_test):
        with pytest.raises(ValueError, match="teacher"):
            make_data(teacher, 2, xi=0.1, seed=0, n_test=3, L=3, d=2)


@pytest.mark.parametrize("scale", [1e200, 1e-200, 5e-324])
def test_rms_normalise_at_the_ends_of_the_float_range(scale):
    # x x overflowed (tokens of 1e200 came back as 0) or underflowed (1e-200 was called
    # an all-zero token); the normalised token does not depend on the scale
    X = np.array([[[1.0, -2.0, 2.0], [3.0, 0.0, 4.0]]])
    ref = rms_normalise(X)
    np.testing.assert_allclose(rms_normalise(scale * X), ref, rtol=1e-15 if scale > 1e-300
                               else 0.5)
    np.testing.assert_allclose(rms_normalise(scale * X, "unit"), rms_normalise(X, "unit"),
                               rtol=1e-15 if scale > 1e-300 else 0.5)


def test_rms_normalise_bits_unchanged_in_range():
    X = np.random.default_rng(3).standard_normal((4, 5, 6))
    r = np.sqrt(np.mean(X * X, axis=-1, keepdims=True))
    np.testing.assert_array_equal(rms_normalise(X), X / r)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_rms_normalise_refuses_non_finite(bad):
    X = np.ones((1, 2, 3))
    X[0, 1, 2] = bad
    with pytest.raises(ValueError, match="X must be finite"):
        rms_normalise(X)


def test_rms_normalise_refuses_empty_tokens():
    with pytest.raises(ValueError, match="d >= 1"):
        rms_normalise(np.ones((1, 2, 0)))


def test_check_setup_noise_too_large_for_a_float():
    from attndyn.numeric.transformer import check_setup
    setup = dict(N=1, L=2, d=3, m=8, n=6, eps=1.0, omega=1.0, kappa=0.5, xi=10 ** 400)
    with pytest.raises(ValueError, match="xi"):
        check_setup(setup)


@pytest.mark.parametrize("kw", [dict(N=1, L=1, d=1, m=1, delta=5e-324, b_const=1e300),
                                dict(N=10 ** 200, L=10 ** 200, d=10 ** 200, m=4, B=1e100)])
def test_good_scalings_out_of_the_float_range_refused(kw):
    # B overflowed to inf and omega came back as 0.0 (which Transformer then refuses), or
    # d ** 2.5 raised OverflowError
    from attndyn.numeric.transformer import good_scalings
    with pytest.raises(ValueError, match="omega|B"):
        good_scalings(omega_const=1.0, **kw)
