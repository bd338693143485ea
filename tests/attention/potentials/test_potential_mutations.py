"""Tests that a planted bug in the potential routes would fail (issue 25, item 4): each
compares with an independent computation (potential_reference.py or a function written
here), never the code with itself."""

import numpy as np
import pytest
from potential_reference import reference

from attndyn.numeric.attention.potentials.hermite import HermitePotential
from attndyn.numeric.attention.potentials import numeric_potential
from attndyn.numeric.attention.potentials.surrogate import (SurrogateError, build_surrogate,
                                                 from_coordinates)
from attndyn.symbolic.losses import mse_teacher_student


def _q(v1, v2, r):
    c = r * np.sqrt(v1 * v2)
    return np.array([[v1, c], [c, v2]])


def _gamma3(Q):
    """A smooth K = 3 'Gamma' with mixed terms in every pair of coordinates."""
    Q = np.asarray(Q, dtype=float)
    out = np.empty_like(Q)
    for n, q in enumerate(Q):
        v = np.diag(q)
        r = q / np.sqrt(np.outer(v, v))
        base = np.exp(0.3 * v[0] * v[1] - 0.2 * v[2]) * (1 + r[0, 1] * r[1, 2] - 0.5 * r[0, 2] * v[1])
        out[n] = base * q + 0.1 * np.outer(v, v) * r[0, 1] * r[0, 2]
    return out


def test_surrogate_of_an_entry_that_vanishes_on_the_centre_line():
    """Gamma_01 = q_01 = r sqrt(q_00 q_11) on a box centred at r = 0 (a trajectory's usual
    start): with a one-node coarsest level the mixed terms were never added (5e-2 off)."""
    def g(Q):
        q = np.asarray(Q, dtype=float)
        out = np.ones_like(q)
        out[:, 0, 1] = out[:, 1, 0] = q[:, 0, 1]
        return out
    lo, hi = np.array([0.5, 0.5, -0.3]), np.array([0.9, 0.8, 0.3])
    sur = build_surrogate(g, (lo, hi), K=2, rtol=1e-8, atol=1e-11, cache=False)
    rng = np.random.default_rng(2)
    Q = from_coordinates(lo + (hi - lo) * rng.random((200, 3)), 2)
    assert np.max(np.abs(sur.gamma_many(Q) - g(Q))) <= 1e-11 + 1e-8 * 0.3


def test_k3_surrogate_with_mixed_terms():
    """K = 3 (six coordinates, three correlations): every entry within the tolerance at
    random points of the box, against the function itself."""
    lo = np.array([0.8, 0.9, 0.7, 0.1, -0.2, 0.2])
    hi = np.array([1.0, 1.1, 0.9, 0.3, 0.0, 0.4])
    sur = build_surrogate(_gamma3, (lo, hi), K=3, rtol=1e-7, atol=1e-10, cache=False, n_check=32)
    rng = np.random.default_rng(5)
    Q = from_coordinates(lo + (hi - lo) * rng.random((200, 6)), 3)
    got, ref = sur.gamma_many(Q), _gamma3(Q)
    assert np.all(np.abs(got - ref) <= 1e-10 + 1e-7 * np.abs(ref))
    assert sur.certificate["passed"] and sur.certificate["max_ratio"] <= 0.5


def test_certificate_fails_on_a_reference_off_by_three_quarters_of_the_tolerance():
    """The certificate passes at a worst ratio of 0.5: a reference that differs from the
    source by 0.75 of the tolerance everywhere can never be met (SurrogateError), one that
    agrees gives a ratio <= 0.5."""
    def g(Q):
        q = np.asarray(Q, dtype=float)
        return np.exp(0.5 * q) + q ** 2
    lo, hi = np.array([0.5, 0.5, -0.3]), np.array([0.9, 0.8, 0.3])
    rtol, atol = 1e-8, 1e-11
    good = build_surrogate(g, (lo, hi), K=2, rtol=rtol, atol=atol, reference=g, cache=False)
    assert 0 < good.certificate["max_ratio"] <= 0.5 and good.certificate["passed"]

    def off(Q):
        v = g(Q)
        return v + 0.75 * (atol + rtol * np.abs(v))
    with pytest.raises(SurrogateError, match="certification failed after 3 rounds"):
        build_surrogate(g, (lo, hi), K=2, rtol=rtol, atol=atol, reference=off, cache=False)


@pytest.mark.parametrize("act", ["tanh", "sigmoid"])
def test_hermite_bound_covers_the_error_and_stops_at_half_the_tolerance(act):
    """Every stated bound covers the true error (independent reference), and the series
    stops once the bound is at most half of atol + rtol |Gamma| (or at m_max)."""
    rtol, atol = 1e-9, 1e-12
    hp = HermitePotential(act, rtol=rtol, atol=atol, q_max=4.0)
    for q in (_q(3.0, 0.03, 0.0), _q(0.3, 0.3, 0.5), _q(1.0, 2.0, -0.7), _q(0.1, 1.0, 0.9),
              _q(2.0, 2.0, 0.3)):
        g, bound, M = hp.gamma_with_bound(q)
        err = np.abs(g - reference(act, q))
        assert np.all(err <= bound + 1e-15), (q, err, bound)
        if M < hp.m_max:
            assert np.all(bound <= 0.5 * (atol + rtol * np.abs(g)) * (1 + 1e-12)), (q, bound)


def test_projection_outside_the_cone_against_the_reference():
    """A non-PSD q: the Hermite kernel and the compiled quadrature both give Gamma at the
    projection of q onto the PSD cone (eq. 92), computed here and integrated independently."""
    q = np.array([[1.0, 1.3], [1.3, 0.8]])
    lam, V = np.linalg.eigh(q)
    proj = (V * np.maximum(lam, 0.0)) @ V.T
    ref = reference("tanh", proj)
    hp = HermitePotential("tanh", q_max=4.0)
    g, bound, M = hp.gamma_with_bound(q)     # |rho| = 1 at the projection: the bound says how far
    assert np.all(np.abs(g - ref) <= bound) and np.max(bound) <= 1e-7
    out = np.empty(4)
    num = numeric_potential("tied", mse_teacher_student("tanh"), 2, 1, tol=1e-9)
    num.gradient_function()(q.ravel().copy(), num.parameters(), out)
    assert np.max(np.abs(out.reshape(2, 2) - ref)) <= 1e-9 * np.max(np.abs(ref)) + 1e-12
