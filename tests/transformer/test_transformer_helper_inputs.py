"""The gradient and kernel helpers' inputs, found in an audit: a NaN or a broadcast shape
must not pass as agreement, and a wrong shape or step is refused by name."""

import numpy as np
import pytest

from attndyn.numeric.transformer import (Transformer, block_output,
                                         finite_difference_gradients, lemma_adjoints,
                                         min_eigenvalue, relative_error)


def _setup():
    m = Transformer(2, 3, 2, 4, 1.0, 1.0, 1.0, rng=0)
    X = np.random.default_rng(1).standard_normal((2, 3, 2))
    return m, X, 0.5 * X


@pytest.mark.parametrize("a, b", [(np.array([np.nan]), np.ones(1)),
                                  (np.ones(2), np.array([1.0, np.nan])),
                                  (np.array([np.inf, 0.0]), np.array([np.inf, 0.0]))])
def test_relative_error_of_non_finite_values_is_nan(a, b):
    # it returned 0.0 for a NaN gradient against any other, so "< tol" passed
    assert np.isnan(relative_error(a, b))


def test_relative_error_refuses_different_sizes():
    # (3,) against (1,) broadcast and read as equal
    with pytest.raises(ValueError, match="same number of entries"):
        relative_error(np.ones(3), np.ones(1))


def test_relative_error_of_gradient_lists_unchanged():
    m, X, Y = _setup()
    g = m.gradients(X, Y)
    assert relative_error(g, g) == 0.0
    assert relative_error(np.array([3.0, 4.0]), np.array([3.0, 4.5])) == pytest.approx(
        0.5 / np.hypot(3.0, 4.5), rel=1e-15)


@pytest.mark.parametrize("h", [0.0, -1e-5, np.nan, np.inf, "a", None])
def test_finite_difference_step_checked(h):
    m, X, Y = _setup()
    with pytest.raises((TypeError, ValueError), match=r"\bh\b"):
        finite_difference_gradients(m, X, Y, h=h)


@pytest.mark.parametrize("kw, match", [
    (dict(Lam=np.ones((2, 4, 2))), "Lam"),
    (dict(Lam=np.ones((3, 2))), "Lam"),
    (dict(Lam=np.full((1, 3, 2), np.nan)), "Lam"),
    (dict(Lam=np.ones((1, 3, 2)), U=np.ones((3, 3))), "U"),
    (dict(Lam=np.ones((1, 3, 2)), W=np.ones((2, 5))), "W"),
])
def test_block_output_checks_its_inputs(kw, match):
    m, _, _ = _setup()
    Lam = kw.pop("Lam")
    with pytest.raises(ValueError, match=rf"\b{match}\b"):
        block_output(m, Lam, 0, **kw)


def test_block_output_accepts_a_list_and_keeps_its_values():
    m, X, _ = _setup()
    c = m.hidden(X)
    np.testing.assert_array_equal(block_output(m, c.Lam[1], 1), c.mu[1])
    np.testing.assert_array_equal(block_output(m, c.Lam[0].tolist(), 0), c.mu[0])


@pytest.mark.parametrize("H", [np.ones((2, 3)), np.ones((0, 0)), np.ones(4)])
def test_min_eigenvalue_needs_a_square_matrix(H):
    with pytest.raises(ValueError, match="square"):
        min_eigenvalue(H)


@pytest.mark.parametrize("Y", [np.ones((1, 3, 2)), np.ones(2), np.ones((5, 5))])
def test_lemma_adjoints_refuses_a_target_of_another_shape(Y):
    # (1, L, d) and (d,) broadcast against F silently
    m, X, _ = _setup()
    with pytest.raises(ValueError, match=r"\bY\b"):
        lemma_adjoints(m, m.hidden(X), Y)
