"""Tied attention ``S_k = W_k W_k^T`` (paper 003, section 3): the model on top
(:mod:`.model`), its theories below (:mod:`.theory`, :mod:`.hierarchy`, :mod:`.flow`,
:mod:`.limit`), the finite-eta corrections (:mod:`.noise`, :mod:`.noise_flow`,
:mod:`.finite_width`), assumptions and Corollary 2's constants (:mod:`.assumptions`,
:mod:`.bounds`), the SGD runner (:mod:`.runner`) and example models (:mod:`.examples`).
``TiedModel`` loads lazily (importing a sub-module never loads the model)."""

import importlib as _importlib

__all__ = ["TiedModel"]


def __getattr__(name: str):
    if name == "TiedModel":
        return _importlib.import_module("attndyn.numeric.attention.tied.model").TiedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
