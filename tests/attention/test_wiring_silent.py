"""Cases that returned a silent wrong answer (issue 23, "silent cases kept from before"):
a float width truncated, overflowing moments returned as inf, an unchecked blow-up of the
tied truncation reported as success."""

import numpy as np
import pytest

import attndyn


def square(G):
    return (G[0, 0, 0] - G[0, 0, 1]) ** 2


def test_gaussian_init_width_must_be_int():
    m = attndyn.TiedModel(2, [0], square)
    with pytest.raises(TypeError, match="width must be an int >= 1 .*got 2.7"):
        m.gaussian_init(10, width=2.7, seed=0)
    with pytest.raises(TypeError, match="got 2.0"):
        m.gaussian_init(10, width=[1, 2.0], seed=0)
    with pytest.raises(ValueError, match="width must be an int >= 1"):
        m.gaussian_init(10, width=0, seed=0)
    assert [w.shape for w in m.gaussian_init(10, width=[2, 3], seed=0)] == [(10, 2), (10, 3)]


def test_overflowing_moments_are_refused():
    m = attndyn.TiedModel(2, [0], square)
    S = [np.full((3, 3), 1e200), np.eye(3)]
    with pytest.raises(ValueError, match="moments overflow float64 .* although S is finite"):
        m.hierarchy(4).moments_from_matrices(S)
    with pytest.raises(ValueError, match="moments overflow float64"):
        attndyn.numeric.matrix_flow(m, S, [0.0, 0.1])
    u = attndyn.UntiedModel(2, [0], square)
    big = np.full((3, 3), 1e200)
    with pytest.raises(ValueError, match="overflow float64"):
        u.hierarchy(2).moments_from_matrices([(big, big), (np.eye(3), np.eye(3))])
    # finite matrices are unaffected
    mu = m.hierarchy(2).moments_from_matrices([np.eye(3), 2 * np.eye(3)])
    assert np.all(np.isfinite(mu))


def test_unchecked_blowup_of_the_truncation_is_not_success():
    # loss -(G1 - G2)^2 is unbounded below: the matrix flow blows up near t = 0.07, while the
    # order-6 truncation integrated to t = 50 with status 0 and max|mu| = 2.4e13
    m = attndyn.TiedModel(2, [0], lambda G: -(G[0, 0, 0] - G[0, 0, 1]) ** 2)
    init = m.gaussian_init(40, seed=0)
    mats = [w @ w.T for w in init]
    r = m.hierarchy(6).integrate(mats, np.linspace(0, 50, 11), check=None,
                                 method="truncation")
    assert r.status == -3 and "grew beyond" in r.message
    assert r.t.size < 11 and r.diagnostics["growth_bound"]["t"] > 0
    # a bounded run keeps status 0 and its "not checked" note
    ok = attndyn.TiedModel(2, [0], square).hierarchy(4).integrate(
        mats, np.linspace(0, 1, 3), check=None, method="truncation")
    assert ok.status == 0 and "convergence not checked" in ok.message
