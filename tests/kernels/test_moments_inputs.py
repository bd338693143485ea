"""word_traces (kernels/moments.py) refuses what is not a list of matrices and words of
its letters, by name, instead of wrapping, recursing or casting."""

import numpy as np
import pytest

from attndyn.kernels.moments import word_traces

S = [0.5 * np.eye(3), np.diag([1.0, 2.0, 3.0])]


@pytest.mark.parametrize("words,err,msg", [
    ([(-1,)], ValueError, "letter -1"),       # was mats[-1]: the last matrix, silently
    ([(2,)], ValueError, "letter 2"),         # was IndexError
    ([()], ValueError, "empty word"),         # was RecursionError
    ([(0.5,)], TypeError, "letter 0.5"),
])
def test_bad_words(words, err, msg):
    with pytest.raises(err, match=msg):
        word_traces(S, words)


@pytest.mark.parametrize("mats,err,msg", [
    ([], ValueError, "at least one"),
    ([np.ones((3, 2))] * 2, ValueError, "square"),
    ([np.eye(3), np.eye(2)], ValueError, "same d"),
    ([np.zeros((0, 0))] * 2, ValueError, "d >= 1"),
    ([1j * np.eye(3)] * 2, TypeError, "real"),   # was cast with a ComplexWarning
])
def test_bad_matrices(mats, err, msg):
    with pytest.raises(err, match=msg):
        word_traces(mats, [(0,)])


def test_values_unchanged():
    got = word_traces(S, [(0,), (1, 1), (0, 1, 1), (np.int64(1),)])
    assert np.array_equal(got, [0.5, 14 / 3, 7 / 3, 2.0])
