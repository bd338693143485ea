"""The untied golden scenarios (``UNTIED_SCENARIOS`` of tests/golden.py): every backend
reproduces them.

- the theory routes agree: the slow hierarchy truncated at ``order`` equals the slaved
  flow within the truncation ``tol`` on ``h_horizon``; the full finite-d flow (fast time
  ``tau d``, the matrix flow of the pairs) follows the slaved flow within ``flow_tol`` on
  the traces and ``mean_tol`` on the mean (finite-d corrections of the slow limit; the
  gaps shrink at twice the d);
- SGD on each backend (numba, the array API on NumPy) follows the full flow in seed units:
  rms z over the times <= ``z_ok`` on every observable (16 seeds; the largest of 40
  groups of seeds measured at d = 24: 2.70). The check has power: the slaved flow, off
  by O(1/d), and a loss 1.25x too large fail it;
- the two backends are equal in distribution (max |z| of the seed means over every
  checkpoint and observable <= 3.5, median spread ratio within 0.6-1.6), and a seed's
  rerun from its stored seed record is identical on each.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pytest
import sympy as sp

from golden import (UNTIED_SCENARIOS, cached_sgd_seeds, check_backends_equal_in_distribution,
                    check_seed_reruns_identically, theory_z)

from attndyn.numeric import untied_flow

NAMES = [s.name for s in UNTIED_SCENARIOS]
BY_NAME = {s.name: s for s in UNTIED_SCENARIOS}
OBS = ("tA_1", "tB_1", "q1_11", "q2_11", "q1_12", "q2_12")


def _sgd(name, backend, seed):
    return cached_sgd_seeds(BY_NAME[name], backend, seed)


@lru_cache(maxsize=None)
def _flow(name):
    """The full finite-d flow at the SGD times, rows named as the SGD's (``compare``'s
    ``theory="flow"``)."""
    sc = BY_NAME[name]
    return sc.model().theory.run(sc.init(), sc.times(), name="flow", order=2, check=None,
                                 words=None)


@pytest.mark.parametrize("name", NAMES)
def test_hierarchy_reproduces_the_slaved_flow(name):
    sc = BY_NAME[name]
    model, pairs = sc.model(), sc.init()
    t = np.linspace(0.0, sc.h_horizon, 3)
    slaved = untied_flow(model, pairs, t, mode="slaved", rtol=1e-12, atol=1e-14)
    # check=None: the truncation's error is measured here against the slaved flow itself
    res = model.hierarchy(sc.order).integrate(pairs, t, check=None, rtol=1e-12, atol=1e-14)
    assert slaved.success and res.success, (slaved.message, res.message)
    err = max(float(np.abs(res.observable(o) - slaved.observable(o)).max()) for o in OBS)
    assert err < 10 * sc.tol, (name, err)
    moved = max(float(np.ptp(slaved.observable(o))) for o in OBS)
    assert moved > 100 * sc.tol  # the dynamics is not trivial on this horizon


def _full_vs_slaved(sc):
    """The largest gap between the full flow (fast time) and the slaved flow (slow time) on
    the traces and on the mean ``m_1``, and how far the traces move."""
    model, pairs = sc.model(), sc.init()
    t = sc.times()
    full = untied_flow(model, pairs, t * sc.d, mode="full")
    slaved = untied_flow(model, pairs, t, mode="slaved")
    assert full.success and slaved.success
    gap = max(float(np.abs(full.observable(o) - slaved.observable(o)).max()) for o in OBS)
    gap_m = float(np.abs(full.observable("m_1") - slaved.observable("m_1")).max())
    return gap, gap_m, max(float(np.ptp(full.observable(o))) for o in OBS)


@pytest.mark.parametrize("name", NAMES)
def test_full_flow_follows_the_slaved_flow(name):
    sc = BY_NAME[name]
    gap, gap_m, moved = _full_vs_slaved(sc)
    assert gap < sc.flow_tol and gap_m < sc.mean_tol, (name, gap, gap_m)
    assert moved > 10 * sc.flow_tol
    # the gap is the finite-d correction of the slow limit: it shrinks at twice the d
    gap2, gap2_m, _ = _full_vs_slaved(dataclasses.replace(sc, d=2 * sc.d))
    assert gap2 < gap / 1.2 and gap2_m < gap_m / 1.6, (name, gap, gap2, gap_m, gap2_m)


@pytest.mark.parametrize("backend", ["numba", "array-api"])
@pytest.mark.parametrize("name", NAMES)
def test_sgd_follows_the_flow_in_seed_units(name, backend):
    sc = BY_NAME[name]
    runs, Y = _sgd(name, backend, 1 if backend == "numba" else 2)
    z = theory_z(Y, runs[0].names, _flow(name), sc.exact_tol)
    assert max(z.values()) <= sc.z_ok, (name, backend, z)


def test_the_seed_check_has_power():
    """The slaved flow (O(1/d) off the full flow) and the flow of a loss 1.25x too large
    both fail the check SGD passes against the full flow."""
    name = NAMES[0]
    sc = BY_NAME[name]
    runs, Y = _sgd(name, "numba", 1)
    slaved = sc.model().theory.run(sc.init(), sc.times(), name="slaved", order=2, check=None,
                                   words=None)
    assert max(theory_z(Y, runs[0].names, slaved, sc.exact_tol).values()) > 3 * sc.z_ok
    m = sc.model()
    wrong = type(m)(m.K, m.trainable, lambda G: sp.Rational(5, 4) * m.loss(G), L=m.L, C=m.C,
                    weight_decay=m.weight_decay)
    off = wrong.theory.run(sc.init(), sc.times(), name="flow", order=2, check=None, words=None)
    assert max(theory_z(Y, runs[0].names, off, sc.exact_tol).values()) > 3 * sc.z_ok


@pytest.mark.parametrize("name", NAMES)
def test_backends_equal_in_distribution(name):
    check_backends_equal_in_distribution(BY_NAME[name])


@pytest.mark.parametrize("backend", ["numba", "array-api"])
def test_a_seed_reruns_identically(backend):
    check_seed_reruns_identically(BY_NAME[NAMES[-1]], backend)
