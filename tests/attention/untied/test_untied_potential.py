"""UntiedModel(potential=...): a built untied potential or the NumericRoute the symbolic
layer returns is taken as the model's potential (issue 25, item 3); wrong ones are
refused with an error that names the function to call."""

import numpy as np
import pytest
import sympy as sp

from attndyn import UntiedModel
from attndyn.numeric.attention.potentials import tied_potential, untied_potential
from attndyn.symbolic import potential as sym
from attndyn.symbolic.losses import mse_teacher_student

M0 = np.array([0.3, -0.2])
Q1 = np.array([[0.9, 0.2], [0.2, 0.7]])
Q2 = np.array([[0.5, 0.1], [0.1, 0.4]])


def _grads(model):
    return model.theory.coefficients.gradients(M0, Q1, Q2)


def test_numeric_route_is_built_and_used():
    loss = mse_teacher_student("tanh")
    route = sym.untied_potential(loss, 2, route="numeric", tol=1e-9)
    model = UntiedModel(2, [0], loss, potential=route)
    assert model.given_potential.route == "numeric" and model.given_potential.kind == "untied"
    assert model.theory.coefficients.potential is model.given_potential
    ref = _grads(UntiedModel(2, [0], loss))   # derived from the loss: the same route, tol 1e-8
    got = _grads(model)
    for k in ref:
        assert np.allclose(got[k], ref[k], rtol=1e-7, atol=1e-9), k


def test_exact_potential_is_used_as_is():
    loss = lambda G: (G[0, 0, 0] - 2 * G[0, 0, 1]) ** 2 + G[0, 0, 0] ** 3  # noqa: E731
    pot = sym.untied_potential(loss, 2)
    assert pot.route == "wick"
    model = UntiedModel(2, [0], loss, potential=pot)
    assert model.theory.coefficients.potential is pot
    ref, got = _grads(UntiedModel(2, [0], loss)), _grads(model)
    for k in ref:
        assert np.allclose(got[k], ref[k], rtol=1e-13, atol=1e-14), k


def test_wrong_potentials_are_refused_naming_the_builder():
    loss = mse_teacher_student("tanh")
    with pytest.raises(TypeError, match=r"tied potential given to a untied model.*untied_potential"):
        UntiedModel(2, [0], loss, potential=tied_potential(mse_teacher_student("h2"), 2))
    with pytest.raises(TypeError, match=r"tied numeric route given to a untied model.*untied_potential"):
        UntiedModel(2, [0], loss, potential=sym.tied_potential(loss, 2, route="numeric"))
    with pytest.raises(TypeError, match=r"untied_potential\(loss, K, L"):
        UntiedModel(2, [0], loss, potential=object())
    with pytest.raises(ValueError, match="K = 3, the model has K = 2"):
        UntiedModel(2, [0], loss, potential=untied_potential(
            lambda G: (G[0, 0, 0] - G[0, 0, 2]) ** 2, 3))
    with pytest.raises(ValueError, match="token covariance"):
        UntiedModel(2, [0], loss, L=2, C=np.eye(2), potential=sym.untied_potential(
            lambda G: (G[0, 1, 0] - G[0, 1, 1]) ** 2, 2, 2, C=[[1, 0.5], [0.5, 1]]))
    a = sp.Symbol("a", real=True)
    with pytest.raises(ValueError, match="parameters"):
        UntiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2, params={"b": 1.0},
                    potential=sym.untied_potential(lambda G: a * (G[0, 0, 0] - G[0, 0, 1]) ** 2,
                                                   2, params=[a]))


def test_a_tied_model_checks_the_token_covariance_of_its_potential():
    """``TiedModel(potential=...)`` runs the same K, L and C checks as the untied model."""
    import attndyn
    route = sym.tied_potential(lambda G: (G[0, 1, 0] - G[0, 1, 1]) ** 2, 2, 2,
                               C=[[1, 0.5], [0.5, 1]], route="numeric")
    with pytest.raises(ValueError, match="token covariance"):
        attndyn.TiedModel(2, [0], lambda G: (G[0, 1, 0] - G[0, 1, 1]) ** 2, L=2,
                          C=[[1, 0.25], [0.25, 1]], potential=route)
    with pytest.raises(ValueError, match="K = 3, the model has K = 2"):
        attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2,
                          potential=sym.tied_potential(lambda G: (G[0, 0, 0] - G[0, 0, 2]) ** 2,
                                                       3, route="numeric"))
