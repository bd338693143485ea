"""Untied attention ``S_k = U_k V_k^T`` (paper 003, section 4): the model (:mod:`.model`),
the compiled potential and coefficients (:mod:`.coefficients`), the fast-slow flows and
weak recovery (:mod:`.fastslow`), the slow hierarchy (:mod:`.hierarchy`), the theory
dispatch (:mod:`.theory`), the noise terms (:mod:`.noise`) and the assumptions
(:mod:`.assumptions`). ``UntiedModel`` loads lazily."""

import importlib as _importlib
import os as _os

from attndyn.kernels._cachedir import drop_stale_dependent_cache as _drop_stale

# cached kernels here (coefficients.py) inline the package's kernels and each other
_drop_stale(_os.path.dirname(_os.path.abspath(__file__)))

__all__ = ["UntiedModel"]


def __getattr__(name: str):
    if name == "UntiedModel":
        return _importlib.import_module("attndyn.numeric.attention.untied.model").UntiedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
