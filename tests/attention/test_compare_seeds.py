"""compare(n_seeds=...) is bounded before any work: n_seeds = 10**6 started a million SGD
runs (all kept in memory) with no upfront check."""

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention import compare as cmp_mod
from attndyn.numeric.attention.compare import MAX_SEEDS, compare


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


class Ran(Exception):
    pass


def _ran(*a, **k):
    raise Ran


@pytest.fixture
def no_work(monkeypatch):
    for name in ("sgd", "sgd_runs", "gaussian_init"):
        monkeypatch.setattr(cmp_mod, name, _ran)


KW = dict(eta=0.05, batch=8, t_eval=[0, 0.1])


@pytest.mark.parametrize("init", [{"d": 10, "seed": 0}, "weights"])
@pytest.mark.parametrize("n", [MAX_SEEDS + 1, 10 ** 6, np.int64(10 ** 9)])
def test_too_many_seeds_refused_before_any_run(no_work, init, n):
    m = attndyn.TiedModel(2, [0], square)
    if init == "weights":
        init = [np.eye(10), np.eye(10)]
    with pytest.raises(ValueError, match=rf"^n_seeds must be an int in \[1, {MAX_SEEDS}\]"):
        compare(m, init, n_seeds=n, **KW)


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "3"])
def test_bad_seed_counts_name_the_range(no_work, n):
    m = attndyn.TiedModel(2, [0], square)
    with pytest.raises(ValueError, match=rf"^n_seeds must be an int in \[1, {MAX_SEEDS}\]"):
        compare(m, {"d": 10}, n_seeds=n, **KW)


def test_the_bound_itself_runs(no_work):
    m = attndyn.TiedModel(2, [0], square)
    with pytest.raises(Ran):
        compare(m, {"d": 10}, n_seeds=MAX_SEEDS, **KW)
