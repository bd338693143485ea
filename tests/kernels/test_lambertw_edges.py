"""Edge cases of the Lambert W kernels found in an audit: W0(exp(ell)) for ``ell`` near the
top of the float range, and the parallel array kernel's output length."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndyn.kernels.lambertw import lambertw_array, lambertw_log0_scalar


@pytest.mark.parametrize("ell", [1e300, 2.6e305, 1e306, 1e307, 1.7976931348623157e308])
def test_log0_near_the_top_of_the_float_range(ell):
    # w + log w = ell: for ell above 2^53 * 700 the root is ell - log(ell) to rounding; the
    # first Halley step used to form r * w with |r| ~ log(w) ~ 700, which overflows past
    # w ~ 2.56e305 and returned -inf
    w = lambertw_log0_scalar(ell)
    assert math.isfinite(w)
    assert w == ell - math.log(ell)


def test_log0_below_the_overflow_point_is_unchanged():
    # just below the old overflow point the value is the same as before the fix
    assert lambertw_log0_scalar(2.5e305) == 2.5e305


@pytest.mark.parametrize("n_out", [0, 2, 4])
def test_array_kernel_refuses_an_output_of_another_length(n_out):
    z = np.linspace(0.0, 1.0, 3)
    out = np.full(n_out, -7.0)
    with pytest.raises(ValueError, match="out"):
        lambertw_array(z, 0, out)
    assert np.all(out == -7.0)  # nothing written
