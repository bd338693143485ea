"""attndyn: learning dynamics of attention-indexed models, symbolic and numeric.

The package has three layers, installed as sub-packages:

- ``attndyn.symbolic`` (sympy, mpmath): words, hierarchies, potentials, printers;
- ``attndyn.kernels`` (numpy, numba): generic array-driven kernels;
- ``attndyn.numeric``: joins the two (models, integration drivers, SGD-vs-theory).

The public names below are loaded lazily, so that ``import attndyn.symbolic``
never pulls in numba.
"""

from __future__ import annotations

import importlib
from typing import Any

from attndyn.numeric import EXPORTS as _NUMERIC_EXPORTS

__version__ = "0.3.0"

# public name -> module that defines it: every name of ``attndyn.numeric``'s table, plus the
# parameter sweep
_EXPORTS = dict(_NUMERIC_EXPORTS)
_EXPORTS.update({
    "sweep": "attndyn._sweep",
    "SweepResult": "attndyn._sweep",
    "load_sweep": "attndyn._sweep",
})

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'attndyn' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
