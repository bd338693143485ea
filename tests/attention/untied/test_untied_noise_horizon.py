"""The untied noise shift's truncated hierarchy is a short-time tool: when it stops, the
error names the tau it reached (issue 26's Fig. 3 lead)."""

import numpy as np
import pytest

from attndyn.numeric.attention.training import gaussian_init
from attndyn.numeric.attention.untied.model import UntiedModel
from attndyn.numeric.attention.untied.noise import noise_shift
from attndyn.numeric.core.results import IntegrationError
from attndyn.symbolic.losses import mse_teacher_student


@pytest.mark.slow
def test_noise_shift_that_stops_names_the_tau_reached():
    model = UntiedModel(2, [0], mse_teacher_student("h1"))
    pairs = gaussian_init(model, 24, seed=3024)
    tau = np.linspace(0.0, 1.0, 11)
    with pytest.raises(IntegrationError, match=r"order 4 stopped at tau = 0\.\d+ of 1"):
        noise_shift(model, pairs, tau, eta=0.01, batch=120, order=4, check=False)
