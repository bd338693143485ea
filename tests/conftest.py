import os
import sys

import numpy as np
import pytest
from hypothesis import settings

# tests live in folders that mirror the source; the shared helpers (golden.py, this file's
# random_psd, surrogate_reference.py) are imported by name from this folder
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

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
