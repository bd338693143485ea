"""SPEC 7: one randomness rule (numeric.core.validate.resolve_rng) in every entry point.

The rule, checked in each entry point below through ``rng=`` and its alias ``seed=``:
the same int twice gives identical numbers; the same Generator object twice gives different
numbers (it is a source of entropy and advances); two Generators built the same way give
identical numbers, and not those of the int they were built from (the entropy is drawn
from the Generator, never taken from its seed); ``rng=`` and ``seed=`` together are an error.

``reproduce`` (the figures) takes seed counts, not a stream: its SGD runs are seeded
through ``sgd``, checked here.
"""

from __future__ import annotations

import numpy as np
import pytest

import attndyn
from attndyn.numeric.core.validate import RNG_RULE, resolve_rng

_LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731  (golden scenario d3-linear)


def _tied():
    return attndyn.TiedModel(2, [0], _LOSS)


def _init():
    from attndyn.numeric.attention.training import gaussian_init
    return gaussian_init(_tied(), 12, scale=0.5, seed=0)


_KW = dict(eta=0.01, batch=4, t_eval=[0.0, 0.02])


def _sgd(**kw):
    return attndyn.sgd(_tied(), _init(), progress=False, **_KW, **kw).y


def _sgd_runs(**kw):
    from attndyn.numeric.attention.training import sgd_runs
    return np.stack([r.y for r in sgd_runs(_tied(), _init(), n_seeds=2, progress=False,
                                           **_KW, **kw)])


def _gaussian_init(**kw):
    from attndyn.numeric.attention.training import gaussian_init
    return np.concatenate([w.ravel() for w in gaussian_init(_tied(), 6, **kw)])


def _xp_sgd(**kw):
    from attndyn.numeric.attention.xp_sgd import xp_sgd
    return xp_sgd(_tied(), _init(), progress=False, **_KW, **kw).y


def _xp_sgd_runs(**kw):
    from attndyn.numeric.attention.xp_sgd import xp_sgd_runs
    return np.stack([r.y for r in xp_sgd_runs(_tied(), _init(), n_seeds=2, progress=False,
                                              **_KW, **kw)])


def draw(a, rng=None):
    return a + np.random.default_rng(rng).standard_normal(3)


def _sweep(**kw):
    res = attndyn.sweep(draw, {"a": [0.0, 1.0]}, executor="serial", progress=False, **kw)
    return np.stack(res.results)


def _transformer(**kw):
    return attndyn.Transformer(1, 2, 4, 8, eps=1.0, omega=1.0, kappa=1.0, **kw).U[0]


def _compare(**kw):
    return attndyn.compare(_tied(), _init(), theory="flow", n_seeds=2, progress=False, **_KW,
                           **kw).sgd.y


ENTRIES = [_sgd, _sgd_runs, _gaussian_init, _xp_sgd, _xp_sgd_runs, _sweep, _transformer,
           _compare]


def _check_rule(fn, key):
    same = lambda a, b: np.array_equal(a, b)  # noqa: E731
    assert same(fn(**{key: 5}), fn(**{key: 5})), "the same int must give the same numbers"
    assert same(fn(**{key: np.random.SeedSequence(5)}), fn(**{key: 5}))
    g = np.random.default_rng(5)
    assert not same(fn(**{key: g}), fn(**{key: g})), \
        "the same Generator object twice must give different numbers (it advances)"
    assert same(fn(**{key: np.random.default_rng(5)}), fn(**{key: np.random.default_rng(5)})), \
        "two Generators built the same way must give the same numbers"
    assert not same(fn(**{key: np.random.default_rng(5)}), fn(**{key: 5})), \
        "a Generator is a source of entropy, not its seed: default_rng(5) differs from 5"


@pytest.mark.parametrize("fn", ENTRIES, ids=lambda f: f.__name__.strip("_"))
def test_rule_through_rng(fn):
    _check_rule(fn, "rng")
    with pytest.raises(TypeError, match="rng= or its alias seed=, not both"):
        fn(rng=1, seed=1)


@pytest.mark.parametrize("fn", ENTRIES, ids=lambda f: f.__name__.strip("_"))
def test_rule_through_the_seed_alias(fn):
    _check_rule(fn, "seed")


def test_resolve_rng_is_the_rule():
    assert resolve_rng(rng=7).entropy == resolve_rng(seed=7).entropy == 7
    assert resolve_rng(default=3).entropy == 3
    assert resolve_rng().entropy != resolve_rng().entropy  # fresh entropy
    ss = np.random.SeedSequence(4)
    assert resolve_rng(rng=ss) is ss
    assert resolve_rng(rng={"entropy": 4, "spawn_key": [2]}).spawn_key == (2,)
    g = np.random.default_rng(1)
    assert resolve_rng(rng=g).entropy != resolve_rng(rng=g).entropy
    with pytest.raises(TypeError, match="f: pass rng= or its alias seed=, not both"):
        resolve_rng(1, 1, name="f")
    with pytest.raises(TypeError, match="rng must be"):
        resolve_rng(rng=1.5)
    with pytest.raises(TypeError, match="seed must be"):
        resolve_rng(seed="7")
    with pytest.raises(ValueError, match="invalid rng"):
        resolve_rng(rng=-1)
    assert "advances" in RNG_RULE and "seed=" in RNG_RULE


def test_sweep_generator_root_is_recorded_and_resumes(tmp_path):
    """A sweep from a Generator is reproduced from the root it records."""
    g = np.random.default_rng(9)
    first = attndyn.sweep(draw, {"a": [0.0, 1.0]}, rng=g, executor="serial", progress=False)
    again = attndyn.sweep(draw, {"a": [0.0, 1.0]}, rng=first.params["seed"], executor="serial",
                          progress=False)
    assert np.array_equal(np.stack(first.results), np.stack(again.results))
