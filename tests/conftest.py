import os

import numpy as np
import pytest
from hypothesis import settings

# CI runs a fixed set of examples (no flaky draws); locally hypothesis explores
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# generated numba sources of the test run go to a private cache folder
os.environ.setdefault("ATTNDYN_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".attndyn-cache"))


def random_psd(rng, d, top=1.0):
    """Random PSD matrix with spectrum in [0, top] (largest eigenvalue = top)."""
    A = rng.standard_normal((d, d))
    S = A @ A.T / d
    return top * S / np.linalg.eigvalsh(S)[-1]


@pytest.fixture
def d3_model():
    import attndyn
    return attndyn.TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
