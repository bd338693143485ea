"""Bad input gets a clear ValueError/TypeError naming the argument (issue 2)."""

import numpy as np
import pytest
import sympy as sp

import attndyn

LOSS = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2  # noqa: E731


@pytest.mark.parametrize("order,exc", [(-1, ValueError), (0, ValueError), (2.5, TypeError),
                                       ("3", TypeError), (True, TypeError)])
def test_bad_order(d3_model, order, exc):
    with pytest.raises(exc, match="order"):
        d3_model.hierarchy(order)


@pytest.mark.parametrize("trainable", [[2], [-1], [0, 0], ["a"]])
def test_bad_trainable(trainable):
    with pytest.raises((ValueError, TypeError), match="trainable"):
        attndyn.TiedModel(2, trainable, LOSS)


def test_bad_covariance():
    loss = lambda G: (G[0, 1, 0] - G[0, 1, 1]) ** 2  # noqa: E731
    with pytest.raises(ValueError, match="C must be symmetric"):
        attndyn.TiedModel(2, [0], loss, L=2, C=[[1, 0.5], [0.1, 1]])
    with pytest.raises(ValueError, match="C must be positive semi-definite"):
        attndyn.TiedModel(2, [0], loss, L=2, C=[[1, 2], [2, 1]])
    with pytest.raises(ValueError, match=r"C must have shape \(2, 2\)"):
        attndyn.TiedModel(2, [0], loss, L=2, C=np.eye(3))


def test_bad_loss():
    with pytest.raises(TypeError, match="loss must return a SymPy expression"):
        attndyn.TiedModel(2, [0], lambda G: "G1 - G2")
    with pytest.raises(TypeError, match="loss must be a callable"):
        attndyn.TiedModel(2, [0], "(G1-G2)**2")
    with pytest.raises(ValueError, match="free symbols"):
        attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - sp.Symbol("a")) ** 2)


def test_bad_other_scalars():
    with pytest.raises(ValueError, match="weight_decay"):
        attndyn.TiedModel(2, [0], LOSS, weight_decay=-1)
    with pytest.raises(ValueError, match="weight_decay"):
        attndyn.TiedModel(2, [0], LOSS, weight_decay=float("nan"))
    with pytest.raises(ValueError, match="K"):
        attndyn.TiedModel(0, [], LOSS)
    with pytest.raises(ValueError, match="L"):
        attndyn.TiedModel(2, [0], LOSS, L=0)


def test_bad_matrices(d3_model):
    h = d3_model.hierarchy(3)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 5))
    S = A @ A.T
    with pytest.raises(ValueError, match="matrices must hold K = 2"):
        h.moments_from_matrices([S])
    with pytest.raises(ValueError, match=r"matrices\[1\] must be a square"):
        h.moments_from_matrices([S, np.eye(4)])
    with pytest.raises(ValueError, match=r"matrices\[0\] must be symmetric"):
        h.moments_from_matrices([A, S])
    with pytest.raises(ValueError, match=r"matrices\[1\] must be finite"):
        h.moments_from_matrices([S, np.full((5, 5), np.nan)])


def test_bad_mu0_and_times(d3_model):
    h = d3_model.hierarchy(3)
    mu0 = np.full(h.n_moments, 0.5)
    bad = mu0.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="mu0 must be finite"):
        h.integrate(bad, [0, 1])
    with pytest.raises(ValueError, match=r"mu0 must have shape \(9,\)"):
        h.integrate(mu0[:-1], [0, 1])
    with pytest.raises(ValueError, match="t_eval must be non-decreasing"):
        h.integrate(mu0, [0, 1, 0.5])
    with pytest.raises(ValueError, match="t_eval must be >= 0"):
        h.integrate(mu0, [-1, 1])
    with pytest.raises(ValueError, match="rtol"):
        h.integrate(mu0, [0, 1], rtol=0)
    with pytest.raises(ValueError, match="check orders must exceed"):
        h.integrate([np.eye(3), np.eye(3)], [0, 1], check=3)
    with pytest.raises(ValueError, match="convergence check needs mu0"):
        h.integrate(mu0, [0, 1], check=5)


def _blowup_model():
    # Gamma_11 = -2 q_11 (loss -G^4/12): dS/dt = 8 q_11 S^2 blows up in finite time
    return attndyn.TiedModel(1, [0], lambda G: -G[0, 0, 0] ** 4 / 12)


def test_blowup_ends_with_status_not_hang():
    m = _blowup_model()
    assert np.allclose(m.gamma([[0.5]]), [[-1.0]])
    h = m.hierarchy(4)
    res = h.integrate({(0,): 1.0, (0, 0): 1.0, (0, 0, 0): 1.0, (0, 0, 0, 0): 1.0},
                      np.linspace(0, 10, 11), check=None)
    assert res.status in (-1, -3) and not res.success
    assert "blow" in res.message
    assert np.all(np.isfinite(res.y))
    assert res.t.size < 11
    from attndyn.numeric import IntegrationError
    with pytest.raises(IntegrationError):
        h.integrate({(0,): 1.0, (0, 0): 1.0, (0, 0, 0): 1.0, (0, 0, 0, 0): 1.0},
                    np.linspace(0, 10, 11), check=None, raise_on_failure=True)


def test_max_steps_status(d3_model):
    rng = np.random.default_rng(0)
    S = [np.diag(rng.random(4)), np.eye(4)]
    # DP5(4): the default Taylor integrator solves this nilpotent truncation in one step
    res = d3_model.hierarchy(6).integrate(S, np.linspace(0, 1, 3), max_steps=2, check=None,
                                          integrator="dopri5")
    assert res.status == -2 and "max_steps" in res.message
