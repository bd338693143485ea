"""Sizes before building (issue 10, section 5): closed-form counts, and a clear
refusal, in well under a second, of anything that would not fit."""

import itertools
import math
import re
import time

import numpy as np
import pytest
from hang_guard import finishes

import attndyn
from attndyn.cli import main
from attndyn.symbolic import words as W
from attndyn.symbolic.hierarchy import (MAX_K, check_tied_size, estimate_tied_size,
                                        tied_structure)
from attndyn.symbolic.untied import estimate_size
from attndyn.symbolic.words import (Alphabet, SizeError, bracelet_count, canonical,
                                    canonical_words, orbit_count, word_count)

LINEAR = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731
GIB = 2 ** 30


@pytest.fixture
def memory_16g(monkeypatch):
    """A fixed 16 GiB of available memory, so the refusals do not depend on the host."""
    monkeypatch.setattr(W, "available_memory", lambda: 16 * GIB)


def _fast(fn, *args, **kw):
    """The refusal's message; the refusal comes before any work (a hang guard, not a timing)."""
    def refused():
        with pytest.raises(ValueError) as info:
            fn(*args, **kw)
        return str(info.value)
    return finishes(refused, what=getattr(fn, "__name__", repr(fn)))


@pytest.mark.parametrize("inv", [None, (1, 0), (1, 0, 2), (0, 2, 1, 3), (1, 0, 3, 2)])
def test_orbit_count_equals_brute_force(inv):
    K = 2 if inv is None else len(inv)
    A = Alphabet(K, inv)
    for n in range(1, 7):
        assert orbit_count(n, A) == len({canonical(w, A) for w in
                                         itertools.product(range(K), repeat=n)}), n


def test_orbit_count_is_bracelet_count_for_tied_alphabets():
    for K in (1, 2, 3, 5):
        for n in (1, 2, 7, 12, 31):
            assert orbit_count(n, K) == bracelet_count(n, K)
    assert orbit_count(60, 2) == bracelet_count(60, 2)  # exact big integers


def test_word_count_matches_enumeration_and_stops_early():
    A = Alphabet(4, (1, 0, 2, 3))  # the untied alphabet of one index
    assert word_count(6, A) == len(canonical_words(6, A))
    assert finishes(lambda: word_count(10 ** 9, 2, cap=10 ** 6), what="word_count") > 10 ** 6


@pytest.mark.parametrize("K,tr,M", [(1, (0,), 9), (2, (0,), 12), (2, (0, 1), 9), (2, (), 6),
                                    (3, (0, 1), 7), (4, (2,), 5)])
def test_estimate_is_exact_in_moments_and_bounds_terms(K, tr, M):
    s = tied_structure(K, tr, M)
    moments, terms = estimate_tied_size(K, len(tr), M)
    assert moments == s.n_moments
    assert s.n_terms <= terms <= 8 * max(s.n_terms, 1) + moments  # merging: at most a few x


def test_hierarchy_30_and_1e9_refused(memory_16g):
    model = attndyn.TiedModel(2, [0], LINEAR)
    msg = _fast(model.hierarchy, 30)
    assert "order-30" in msg and "terms" in msg and "GiB" in msg and "max_terms" in msg
    _fast(model.hierarchy, 10 ** 9)
    assert 30 not in model._hier


def test_huge_order_refused_whatever_the_memory():
    # no machine holds K**n / (2n) words for n = 10**9: no patching needed
    model = attndyn.TiedModel(2, [0], LINEAR)
    _fast(model.hierarchy, 10 ** 9)
    _fast(canonical_words, 10 ** 9, 2)


def test_max_terms_lowers_and_raises_the_limit(monkeypatch):
    with pytest.raises(SizeError, match="max_terms = 100"):
        tied_structure(2, [0], 10, max_terms=100)
    monkeypatch.setattr(W, "available_memory", lambda: 2 ** 16)  # 64 KiB: order 12 too large
    with pytest.raises(SizeError, match="available memory"):
        tied_structure(2, [0], 12)
    s = tied_structure(2, [0], 12, max_terms=10 ** 6)
    assert s.n_terms == 2336
    for bad in (0, -1, 2.5, True):
        with pytest.raises((TypeError, ValueError), match="max_terms"):
            check_tied_size(2, [0], 4, bad)


def test_model_K_bounded():
    attndyn.TiedModel(2, [0], LINEAR)  # the imports are not part of the refusal
    msg = _fast(attndyn.TiedModel, 10 ** 6, [0], LINEAR)
    assert "K" in msg and str(MAX_K) in msg
    _fast(tied_structure, MAX_K + 1, [0], 2)


def test_untied_words_40_refused(memory_16g):
    model = attndyn.UntiedModel(1, [0], lambda G: G[0, 0, 0] ** 2)
    msg = _fast(model.words, 40)
    assert "length 40" in msg
    assert len(model.words(3)) == word_count(3, model.alphabet)


def test_sgd_order_40_refused(memory_16g):
    model = attndyn.TiedModel(2, [0], LINEAR)
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((8, 8)) / 8, rng.standard_normal((8, 8)) / 8]
    _fast(attndyn.sgd, model, init, eta=0.01, batch=4, t_eval=[0.0, 0.01], seed=0, order=40)


@pytest.mark.parametrize("argv,msg", [
    (["derive", "--order", "40"], "order-40"),
    (["derive", "--K", "10000"], "--K"),
    (["integrate", "--order", "40"], "order-40"),
    (["derive", "--order", "12", "--max-terms", "100"], "max_terms = 100"),
])
def test_cli_refuses_sizes(argv, msg, capsys, memory_16g):
    rc, err = finishes(lambda: (main(argv), capsys.readouterr().err), what=" ".join(argv))
    assert rc == 2
    err = [ln for ln in err.splitlines() if ln]
    assert len(err) == 1 and msg in err[0], err


def test_cli_max_terms_raises_the_limit(capsys, monkeypatch):
    monkeypatch.setattr(W, "available_memory", lambda: 2 ** 12)  # 4 KiB: only tiny orders
    assert main(["derive", "--order", "6"]) == 2
    assert "available memory" in capsys.readouterr().err
    assert main(["derive", "--order", "6", "--max-terms", "1000"]) == 0
    assert "order 6" in capsys.readouterr().out


@pytest.mark.parametrize("integrator", ["taylor", "dopri5"])
def test_wall_clock_limit_and_step_cap_across_chunks(integrator):
    """Long integrations run in chunks: a time limit ends them with status -4, and
    max_steps still counts every step of every chunk."""
    from attndyn.numeric.core.results import IntegrationError
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    h = attndyn.TiedModel(2, [0], LINEAR, weight_decay=8.0).hierarchy(10)
    init = FreeInit([wishart(0.5, 0.5), scalar(1)])
    kw = dict(check=None, method="truncation", integrator=integrator, rtol=1e-12, atol=1e-14)
    h.integrate(init, [0, 0.01], **kw)  # compiled or loaded
    t0 = time.perf_counter()
    r = h.integrate(init, [0.0, 1e7], time_limit=0.2, **kw)
    # the limit is what ended it (status -4); a stop long after 0.2 s would be a missed check
    assert time.perf_counter() - t0 < 30.0
    assert r.status == -4 and "wall-clock limit" in r.message and 0 < r.diagnostics["t_reached"]
    with pytest.raises(IntegrationError, match="wall-clock"):
        h.integrate(init, [0.0, 1e7], time_limit=0.2, raise_on_failure=True, **kw)
    r = h.integrate(init, [0.0, 1e7], max_steps=450, **kw)
    assert r.status == -2 and r.diagnostics["steps"] == 450
    with pytest.raises(ValueError, match="time_limit"):
        h.integrate(init, [0.0, 1.0], time_limit=-1.0, **kw)


def test_structure_disk_cache_round_trip_and_damage(tmp_path):
    """The on-disk structure cache (npz, no pickles) returns the same arrays, and a damaged
    or foreign file is rebuilt, never trusted."""
    import os

    from attndyn.symbolic import hierarchy as H
    a = tied_structure(2, [0], 14)  # 8278 terms: below the caching threshold by default
    H_min = H._CACHE_MIN_TERMS
    H._CACHE_MIN_TERMS = 0
    try:
        b = tied_structure(2, [0], 14, cache_dir=tmp_path)
        path = H._cache_path(tmp_path, 2, (0,), 14)
        assert os.path.exists(path)
        c = tied_structure(2, [0], 14, cache_dir=tmp_path)  # loaded
        for s in (b, c):
            for name in ("indptr", "src", "slot", "slot_coef", "slot_ent", "gather", "offsets"):
                assert np.array_equal(getattr(s, name), getattr(a, name)), name
            assert s.words == a.words
        with open(path, "r+b") as f:  # truncate: a damaged file
            f.truncate(100)
        assert H.TiedStructure.load(path, 2, (0,), 14) is None
        d = tied_structure(2, [0], 14, cache_dir=tmp_path)
        assert np.array_equal(d.src, a.src)
        # a valid file of another order under this name is refused by its key
        tied_structure(2, [0], 12, cache_dir=tmp_path)
        os.replace(H._cache_path(tmp_path, 2, (0,), 12), path)
        assert H.TiedStructure.load(path, 2, (0,), 14) is None
        assert tied_structure(2, [0], 14, cache_dir=tmp_path).n_terms == a.n_terms
    finally:
        H._CACHE_MIN_TERMS = H_min


def test_refusal_states_the_whole_size_not_where_the_estimate_stopped(memory_16g):
    # the estimate stops once past the limit; the message gave those partial sums as the
    # size (order 40: "~1e+07 moments ... ~30.7 GiB, ~110 s", the same for order 10**6)
    msg = _fast(check_tied_size, 2, [0], 40)
    got = re.search(r"has ~(\S+) moments and ~(\S+) terms \(build ~(\S+) GiB", msg)
    moments, terms = estimate_tied_size(2, 1, 40)  # uncapped: exact moments (~2.8e10)
    assert float(got.group(1)) == pytest.approx(moments, rel=5e-3)
    assert float(got.group(2)) == pytest.approx(terms, rel=5e-3)
    assert float(got.group(3)) == pytest.approx(terms * 60 / GIB, rel=5e-3)
    huge = _fast(check_tied_size, 2, [0], 10 ** 9)  # beyond a float: a power of ten
    got = re.search(r"has ~10\^(\d+) moments", huge)
    assert got and abs(int(got.group(1)) - 10 ** 9 * math.log10(2)) < 20, huge


@pytest.mark.parametrize("order", [500, 10 ** 9])
def test_untied_hierarchy_beyond_a_float_refused_with_its_size(order):
    # estimate_size summed 6**w as floats: OverflowError from inside it from order ~400
    model = attndyn.UntiedModel(2, [0], LINEAR)
    msg = _fast(model.hierarchy, order)
    assert f"order-{order} untied hierarchy" in msg and "max_moments" in msg, msg
    assert estimate_size(6, 4) == pytest.approx(sum(6 ** w / (2 * w) for w in range(1, 5)))
