"""Generic array-driven numba kernels (numpy and numba only)."""

import os as _os

from ._cachedir import drop_stale_numba_cache as _drop_stale_numba_cache
from ._cachedir import install_cache_guard as _install_cache_guard
from ._cachedir import numba_locator_fallback as _numba_locator_fallback

# a read-only install (and home) would make every cache=True kernel fail at
# import with numba's "no locator available": use a private folder instead
_numba_locator_fallback(_os.path.dirname(_os.path.abspath(__file__)))
# a corrupted or unwritable numba cache of the package's own kernels repairs itself
_install_cache_guard(_os.path.dirname(_os.path.abspath(__file__)))
_install_cache_guard(_os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))),
                                   "numeric"))
# numba keys a cached kernel by its own file only; the kernels inline each other
_drop_stale_numba_cache(_os.path.dirname(_os.path.abspath(__file__)))
