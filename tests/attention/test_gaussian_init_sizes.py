"""gaussian_init refuses weights that cannot fit before drawing them (numpy's MemoryError
for 6.94 EiB came first), for the three parameterisations."""

import numpy as np
import pytest
from hang_guard import finishes

import attndyn
from attndyn.symbolic import words as W

LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731
GIB = 2 ** 30


@pytest.fixture
def memory_16g(monkeypatch):
    monkeypatch.setattr(W, "available_memory", lambda: 16 * GIB)


def _models():
    return [attndyn.TiedModel(2, [0], LOSS), attndyn.UntiedModel(2, [0], LOSS),
            attndyn.SModel(2, [0], LOSS)]


@pytest.mark.parametrize("k", range(3))
def test_huge_d_refused_with_its_size(k, memory_16g):
    model = _models()[k]

    def refused():
        with pytest.raises(ValueError, match=r"gaussian_init: .* GiB .*available memory"):
            attndyn.gaussian_init(model, 10 ** 9, seed=0)
    finishes(refused, what=type(model).__name__)


def test_sizes_follow_what_each_model_draws(memory_16g):
    tied, untied, s = _models()
    d = 2 ** 16  # tied and untied: d x 1 factors (1 MiB); S: d x d matrices (64 GiB)
    assert [w.shape for w in attndyn.gaussian_init(tied, d, width=1, seed=0)] == [(d, 1)] * 2
    pairs = attndyn.gaussian_init(untied, d, width=1, seed=0)
    assert [u.shape for p in pairs for u in p] == [(d, 1)] * 4
    with pytest.raises(ValueError, match="64 GiB"):
        attndyn.gaussian_init(s, d, width=1, seed=0)
    assert tied.init_floats(10, [3, 4]) == 70 and untied.init_floats(10, [3, 4]) == 140
    assert s.init_floats(10, [3, 4]) == 200
    assert np.all(np.isfinite(attndyn.gaussian_init(s, 8, seed=0)[0]))
