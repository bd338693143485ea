"""SModel(potential=...): a built direct-S potential or the NumericRoute the symbolic
layer returns is the model's potential (issue 25, item 3), and its closed ODE runs on
it; wrong ones are refused with an error that names the function to call."""

import numpy as np
import pytest

from attndyn import SModel, matrix_flow
from attndyn.numeric.attention.potentials import direct_potential, untied_potential
from attndyn.symbolic import potential as sym
from attndyn.symbolic.losses import mse_teacher_student

PSI = np.array([[0.4, 0.1], [0.1, 0.3]])
OMEGA = np.array([[0.9, 0.2], [0.2, 0.8]])


def test_numeric_route_is_built_and_used():
    loss = mse_teacher_student("tanh")
    route = sym.direct_potential(loss, 2, route="numeric", tol=1e-9)
    model = SModel(2, [0], loss, potential=route)
    assert model.potential is model.given_potential and model.potential.route == "numeric"
    ref = SModel(2, [0], loss)
    for a, b in zip(model.gradients(PSI, OMEGA)[:2], ref.gradients(PSI, OMEGA)[:2]):
        assert np.allclose(a, b, rtol=1e-7, atol=1e-9)
    rng = np.random.default_rng(3)
    S = [rng.standard_normal((6, 6)) / np.sqrt(6) for _ in range(2)]
    r1, r0 = matrix_flow(model, S, [0.0, 0.05, 0.1]), matrix_flow(ref, S, [0.0, 0.05, 0.1])
    assert r1.status == 0 and np.allclose(r1.y, r0.y, rtol=1e-6, atol=1e-9)


def test_exact_potential_is_used_as_is():
    loss = lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2 * (1 + G[0, 0, 0] ** 2)  # noqa: E731
    pot = sym.direct_potential(loss, 2)
    model = SModel(2, [0], loss, potential=pot)
    assert model.potential is pot
    for a, b in zip(model.gradients(PSI, OMEGA), SModel(2, [0], loss).gradients(PSI, OMEGA)):
        assert np.allclose(a, b, rtol=1e-13, atol=1e-14)


def test_wrong_potentials_are_refused_naming_the_builder():
    loss = mse_teacher_student("tanh")
    with pytest.raises(TypeError, match=r"untied potential given to a direct model.*direct_potential"):
        SModel(2, [0], loss, potential=untied_potential(mse_teacher_student("h2"), 2))
    with pytest.raises(TypeError, match=r"direct_potential\(loss, K, L"):
        SModel(2, [0], loss, potential="tanh")
    with pytest.raises(ValueError, match="L = 2 tokens, the model has L = 1"):
        SModel(2, [0], loss, potential=direct_potential(
            lambda G: (G[0, 1, 0] - G[0, 1, 1]) ** 2, 2, 2))
