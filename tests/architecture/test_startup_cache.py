"""Start-up path (issue 11 item 3): the potential cache, loss tracing, FreeInit moments.

A cached model must give the same gradient source, Taylor program, labels and
integration results as a model derived with SymPy; a damaged or foreign entry is
rejected and rebuilt; the warm path imports neither SymPy nor scipy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest

import attndyn
from attndyn.numeric.attention.potentials import cache as potcache
from attndyn.symbolic.hierarchy import tied_structure
from attndyn.symbolic.initial import FreeInit, scalar, wishart


def linear(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "potentials"
    d.mkdir(mode=0o700)
    monkeypatch.setattr(potcache, "cache_folder", lambda: d)
    return d


def _entries(folder):
    return sorted(folder.glob("tied_*.npz"))


# -- tracing ------------------------------------------------------------------------------
def test_trace_is_canonical_and_separates_losses():
    t1 = potcache.trace_loss(linear, 1, 2)
    t2 = potcache.trace_loss(lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, 1, 2)
    assert t1 is not None and t1 == t2
    others = [lambda G: (G[0, 0, 1] - G[0, 0, 0]) ** 2,      # operand order
              lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2.0,    # float exponent: another SymPy expr
              lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 3,
              lambda G: 0.5 * (G[0, 0, 0] - G[0, 0, 1]) ** 2,
              lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 / 2,
              lambda G: (G[0, 0, -2] - G[0, 0, 1]) ** 2 + 0]
    traces = [potcache.trace_loss(f, 1, 2) for f in others]
    assert all(t is not None for t in traces)
    assert len({json.dumps(t) for t in [t1] + traces}) == 1 + len(traces)
    # a negative index is the same symbol: the same node
    neg = potcache.trace_loss(lambda G: (G[0, 0, -2] - G[0, 0, 1]) ** 2, 1, 2)
    assert neg == t1
    # shared subexpressions are stored once: the trace stays linear in the operations
    def deep(G):
        x = G[0, 0, 0]
        for _ in range(40):
            x = x * x + 1
        return x
    assert len(potcache.trace_loss(deep, 1, 1)["nodes"]) < 200


@pytest.mark.parametrize("loss", [
    lambda G: abs(G[0, 0, 0]),
    lambda G: G[0, 0, 0] if G[0, 0, 0] > 0 else 0,
    lambda G: np.tanh(G[0, 0, 0]),
    lambda G: G[0, 0, 0] * np.float64(2.0),
    lambda G: G[0, 0, 0] * True,
    lambda G: G[0, 0, 0] ** 2 + float("inf"),
    lambda G: G[0],
    lambda G: G[0, 0, 5],
    lambda G: G[0, 0, 0] // 2,
    lambda G: sum(G),
    lambda G: 3,
])
def test_untraceable_losses_take_the_sympy_path(loss):
    assert potcache.trace_loss(loss, 1, 2) is None


def test_sympy_functions_are_not_traced():
    import sympy as sp
    assert potcache.trace_loss(lambda G: sp.tanh(G[0, 0, 0]) ** 2, 1, 1) is None
    assert potcache.trace_loss(lambda G: sp.Rational(1, 2) * G[0, 0, 0] ** 2, 1, 1) is None
    assert potcache.trace_loss(sp.Symbol("x") ** 2, 1, 1) is None


# -- hit, miss, damaged entries ---------------------------------------------------------------
def _run(model, order=6):
    h = model.hierarchy(order)
    r = h.integrate(FreeInit([wishart(0.5, 0.5), scalar(1)]), [0.0, 0.02, 0.05], check=None,
                    method="truncation")
    assert r.success, r.message
    return h, r


def test_miss_then_hit_gives_the_same_model(folder):
    cold = attndyn.TiedModel(2, [0], linear)          # miss: derived and stored
    assert cold._potential is not None and len(_entries(folder)) == 1
    h0, r0 = _run(cold)                                # the program is added to the entry
    warm = attndyn.TiedModel(2, [0], linear)          # hit: nothing derived
    assert warm._potential is None and warm._entry is not None
    assert not isinstance(warm._entry.program, str)
    h1, r1 = _run(warm)
    assert warm._potential is None                     # still not derived after integrating
    assert warm._entry.grad_source == cold.potential.numba_source("grad")
    assert warm.params_dict() == cold.params_dict()
    for a, b in zip(h0._gamma_program, h1._gamma_program):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert r1.names == r0.names and r1.words == r0.words and r1.params == r0.params
    assert np.array_equal(r1.y, r0.y)                  # the same kernel on the same inputs
    # asked for, the symbolic potential is derived on demand and is the same
    assert warm.potential is not None and str(warm.potential.phi) == str(cold.potential.phi)
    assert warm.C == cold.C


def test_no_cache_folder_still_works(monkeypatch):
    monkeypatch.setattr(potcache, "cache_folder", lambda: None)
    m = attndyn.TiedModel(2, [0], linear)
    _, r = _run(m, 4)
    assert r.success


def test_keys_separate_params_C_and_shape(folder):
    import sympy as sp
    a = sp.Symbol("a", real=True)

    def with_a(G):
        return a * (G[0, 0, 0] - G[0, 0, 1]) ** 2
    m1 = attndyn.TiedModel(2, [0], with_a, params={"a": 0.5})   # srepr key (SymPy symbol)
    m2 = attndyn.TiedModel(2, [0], with_a, params={"a": 0.5})
    assert m2._potential is None and m2._entry.key == m1._entry.key
    m3 = attndyn.TiedModel(2, [0], with_a, params={"a": 0.25})
    assert m3._entry.key != m1._entry.key
    C = [[1, Fraction(1, 2)], [Fraction(1, 2), 1]]
    m4 = attndyn.TiedModel(2, [0], linear, L=2, C=C)
    m5 = attndyn.TiedModel(2, [0], linear, L=2)
    assert m4._entry.key != m5._entry.key
    assert len(_entries(folder)) == 4
    # the parameter value reaches the program (key includes it): a = 0.25 halves Gamma
    g1 = m2.hierarchy(4)._gamma_program[2]
    g3 = m3.hierarchy(4)._gamma_program[2]
    np.testing.assert_allclose(g3, 0.5 * g1, rtol=1e-15)


def _damage(path, how):
    if how == "garbage":
        path.write_bytes(b"not a zip file at all")
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        with np.load(path, allow_pickle=False) as z:
            arrays = {n: z[n] for n in z.files}
        meta = json.loads(str(arrays["meta"]))
        if how == "tampered":            # changed content, old digest
            meta["phi"] = "0"
        elif how == "foreign":           # another key's entry under this name
            meta["key"] = meta["key"].replace('"K":2', '"K":3')
        elif how == "bad_program":       # an output outside Gamma, digest recomputed
            arrays["prog_out"] = arrays["prog_out"] + 99
        elif how == "pickle":
            arrays["extra"] = np.array([object()], dtype=object)
        arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
        if how in ("foreign", "bad_program"):
            prog = {n: arrays[n] for n in potcache._PROGRAM if n in arrays}
            arrays["digest"] = np.array(potcache._digest(str(arrays["meta"]), prog))
        with open(path, "wb") as f:
            np.savez(f, **arrays)


@pytest.mark.parametrize("how", ["garbage", "truncated", "tampered", "foreign", "bad_program",
                                 "pickle"])
def test_damaged_entry_is_rejected_and_rebuilt(folder, how):
    cold = attndyn.TiedModel(2, [0], linear)
    _, r0 = _run(cold, 4)
    (path,) = _entries(folder)
    assert potcache.load_entry(cold._entry.key) is not None
    _damage(path, how)
    assert potcache.load_entry(cold._entry.key) is None
    again = attndyn.TiedModel(2, [0], linear)
    assert again._potential is not None              # derived afresh, not trusted
    _, r1 = _run(again, 4)
    assert np.array_equal(r1.y, r0.y) and r1.params == r0.params
    entry = potcache.load_entry(cold._entry.key)      # and the entry was rewritten
    assert entry is not None and entry.phi_text == str(cold.potential.phi)


# -- FreeInit moments -------------------------------------------------------------------------
@pytest.mark.parametrize("specs,K,order", [
    ([wishart(0.5, 0.5), scalar(1)], 2, 12),
    ([wishart(0.7, 1.5), scalar(0.3)], 2, 10),
    ([wishart(0.5, 0.6), wishart(0.9, 1.5)], 2, 9),
    ([scalar(0.5), wishart(0.5, 2.0), scalar(1.3)], 3, 7),
    ([wishart(Fraction(1, 2), Fraction(3, 2)), scalar(Fraction(2, 3))], 2, 9),
    ([wishart(1, 1), scalar(0)], 2, 8),
    ([scalar(0.7), wishart(0.8, 0.6)], 2, 11),
    ([wishart(0.8, 0.6)], 1, 9),
    ([scalar(2), scalar(0.5)], 2, 8),
])
def test_structure_moments_equal_the_per_word_moments(specs, K, order):
    s = tied_structure(K, [0], order)
    law = FreeInit(specs)
    ref = np.array(law(s.words), dtype=np.float64)
    got = law.structure_moments(s)
    assert got.dtype == np.float64 and got.shape == ref.shape
    # the same arithmetic per distinct (scalar letters, random letters) pair: equal floats
    assert np.array_equal(got, ref)


def test_structure_moments_without_int64_codes(monkeypatch):
    import attndyn.symbolic.initial as init
    monkeypatch.setattr(init, "_CODE_LIMIT", 1)  # the sorted-rows branch at every length
    s = tied_structure(3, [0], 7)
    law = FreeInit([scalar(0.5), wishart(0.5, 2.0), wishart(0.8, 0.7)])
    assert np.array_equal(law.structure_moments(s), np.array(law(s.words)))


def test_structure_moments_with_too_few_specs_raise():
    s = tied_structure(3, [0], 4)
    with pytest.raises(ValueError, match="the law has 2 specs; .* one per index, K = 3"):
        FreeInit([wishart(1, 1), scalar(1)]).structure_moments(s)


def test_hierarchy_uses_the_same_initial_state():
    m = attndyn.TiedModel(2, [0], linear)
    h = m.hierarchy(8)
    law = FreeInit([wishart(0.6, 0.5), scalar(0.9)])
    assert np.array_equal(h.initial_state(law), np.array(law(h.words)))

    class Shifted(FreeInit):  # a subclass with its own __call__ is called as before
        def __call__(self, words):
            return [v + 1.0 for v in super().__call__(words)]
    assert np.array_equal(h.initial_state(Shifted(law.specs)), np.array(law(h.words)) + 1.0)


# -- the warm path imports neither SymPy nor scipy ------------------------------------------
_WARM = textwrap.dedent("""
    import sys, json
    import attndyn
    from attndyn.symbolic.initial import FreeInit, scalar, wishart
    m = attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
    h = m.hierarchy(8)
    r = h.integrate(FreeInit([wishart(0.5, 0.5), scalar(1)]), [0.0, 0.01], check=None,
                    method="truncation")
    assert r.success, r.message
    heavy = [k for k in ("sympy", "scipy.integrate", "scipy.optimize", "scipy.sparse", "tqdm",
                         "attndyn.numeric.attention.theorems", "attndyn.numeric.attention.tied.limit")
             if k in sys.modules]
    print(json.dumps({"sympy": "sympy" in sys.modules, "heavy": heavy,
                      "derived": m._potential is not None,
                      "y": r.y[:, -1].tolist(), "integrator": r.params["integrator"]}))
""")


def test_warm_start_imports_no_sympy(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))  # a fresh private cache for this test
    env.pop("XDG_CACHE_HOME", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", _WARM], env=env, check=True,
                                      capture_output=True, text=True).stdout)
            for _ in range(2)]
    cold, warm = runs
    assert cold["sympy"] and cold["derived"]
    assert not warm["sympy"] and not warm["derived"]
    assert warm["heavy"] == []  # none of these is needed to integrate a cached model
    assert warm["integrator"] == cold["integrator"] == "taylor"
    assert warm["y"] == cold["y"]
