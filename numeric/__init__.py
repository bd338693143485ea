"""Numeric layer: joins the symbolic generators and the numba kernels.

Sub-packages, one per concern, with imports pointing one way
(``attention`` and ``transformer``/``scaling`` never import each other;
all of them may import ``core``):

- :mod:`attndyn.numeric.core`: results, compile-and-cache of generated source,
  validation, progress bars, trajectory plots;
- :mod:`attndyn.numeric.attention`: paper 003 (attention-indexed models): the
  model protocol and its tied, direct-S and untied parameterisations, the
  matrix flow, finite-d SGD, SGD-vs-theory comparison, numeric potentials;
- :mod:`attndyn.numeric.scaling`: paper 000's scaling-law bounds, their plots
  and the Lambert W front end.

The public names below load lazily, on first access.
"""

from __future__ import annotations

import importlib

# public name -> module that defines it
_EXPORTS = {
    "AttentionModel": "attndyn.numeric.attention.base",
    "TiedModel": "attndyn.numeric.attention.tied.model",
    "TiedHierarchy": "attndyn.numeric.attention.tied.hierarchy",
    "SModel": "attndyn.numeric.attention.direct.model",
    "UntiedModel": "attndyn.numeric.attention.untied.model",
    "untied_flow": "attndyn.numeric.attention.untied.fastslow",
    "matrix_flow": "attndyn.numeric.attention.flow",
    "limit_flow": "attndyn.numeric.attention.tied.limit",
    "sgd": "attndyn.numeric.attention.training",
    "sgd_runs": "attndyn.numeric.attention.training",
    "gaussian_init": "attndyn.numeric.attention.training",
    "compare": "attndyn.numeric.attention.compare",
    "Comparison": "attndyn.numeric.attention.compare",
    "Trajectory": "attndyn.numeric.core.results",
    "load_result": "attndyn.numeric.core.results",
    "IntegrationError": "attndyn.numeric.core.results",
    "TruncationNotConverged": "attndyn.numeric.core.results",
}

# modules of the flat layout before 0.2 -> their new home (kept one release, deprecated).
# ``sgd`` and ``compare`` have no alias: the names are the functions, and a module of the
# same name would shadow them once imported.
_MOVED = {
    "models": "attndyn.numeric.attention.tied.model",
    "smodel": "attndyn.numeric.attention.direct.model",
    "untied": "attndyn.numeric.attention.untied",
    "flow": "attndyn.numeric.attention.flow",
    "potentials": "attndyn.numeric.attention.potentials",
    "quadrature": "attndyn.numeric.attention.quadrature",
    "results": "attndyn.numeric.core.results",
    "compile": "attndyn.numeric.core.compile",
    "progress": "attndyn.numeric.core.progress",
    "plots": "attndyn.numeric.core.plots",
    "scaling_plots": "attndyn.numeric.scaling.plots",
    "lambertw": "attndyn.numeric.scaling.lambertw",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if name in _MOVED:  # ``from attndyn.numeric import models`` (old layout)
            return importlib.import_module(f"attndyn.numeric.{name}")
        raise AttributeError(f"module 'attndyn.numeric' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
