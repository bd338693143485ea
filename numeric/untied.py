"""Deprecated alias of :mod:`attndyn.numeric.attention.untied` (the flat layout before 0.2).

Kept for one release; import from ``attndyn.numeric.attention.untied`` instead.
"""

import importlib as _importlib
import warnings as _warnings

_warnings.warn("attndyn.numeric.untied is deprecated and will be removed in 0.3; "
               "import from attndyn.numeric.attention.untied", DeprecationWarning, stacklevel=2)
_NEW = _importlib.import_module("attndyn.numeric.attention.untied.model")
globals().update({k: v for k, v in vars(_NEW).items() if not k.startswith("__")})
__all__ = list(getattr(_NEW, "__all__", ()))
__doc__ = _NEW.__doc__
