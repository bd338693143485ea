"""Generic array-driven numba kernels (numpy and numba only)."""

import os as _os

from ._cachedir import numba_locator_fallback as _numba_locator_fallback

# a read-only install (and home) would make every cache=True kernel fail at
# import with numba's "no locator available": use a private folder instead
_numba_locator_fallback(_os.path.dirname(_os.path.abspath(__file__)))
