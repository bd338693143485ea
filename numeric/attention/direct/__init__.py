"""Direct attention matrices ``S_k`` (paper 003, appendix E): the model and its closed
ODE (:mod:`.model`), the theory and Assumption 9.4 (:mod:`.theory`), the SGD runner
(:mod:`.runner`) and the noise terms (:mod:`.noise`). ``SModel`` loads lazily."""

import importlib as _importlib

__all__ = ["SModel"]


def __getattr__(name: str):
    if name == "SModel":
        return _importlib.import_module("attndyn.numeric.attention.direct.model").SModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
