"""Paper 000, scaling laws: the bounds of Theorems 5.5, 6.2, 7.1 and 7.2 (:mod:`.bounds`,
re-exported here, so ``attndyn.numeric.scaling.threshold_compute`` works), their plots
(:mod:`.plots`) and the Lambert W front end (:mod:`.lambertw`).
Imports nothing from :mod:`attndyn.numeric.attention`."""

import os as _os
from typing import Any as _Any

from attndyn.kernels._cachedir import drop_stale_dependent_cache as _drop_stale

# the bounds' cached kernels inline the Lambert W kernels: their cache goes when those change
_drop_stale(_os.path.dirname(_os.path.abspath(__file__)))

from . import bounds as _bounds  # noqa: E402
from .bounds import *  # noqa: F401,F403  (the public bounds API)
from .bounds import __all__  # noqa: F401


def __getattr__(name: str) -> _Any:
    # private helpers of the bounds module (used by the CLI and the tests)
    try:
        return getattr(_bounds, name)
    except AttributeError:
        raise AttributeError(f"module 'attndyn.numeric.scaling' has no attribute {name!r}") from None
