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
from typing import Any

# public name -> module that defines it: the one table of the package's face
# (``attndyn`` exports the same names, plus its own sweep helpers)
EXPORTS = {
    # the model protocol and the three parameterisations of paper 003
    "AttentionModel": "attndyn.numeric.attention.base",
    "Theory": "attndyn.numeric.attention.base",
    "Correction": "attndyn.numeric.attention.base",
    "Hierarchy": "attndyn.numeric.attention.base",
    "CapabilityError": "attndyn.numeric.attention.base",
    "TiedModel": "attndyn.numeric.attention.tied.model",
    "TiedHierarchy": "attndyn.numeric.attention.tied.hierarchy",
    "SModel": "attndyn.numeric.attention.direct.model",
    "UntiedModel": "attndyn.numeric.attention.untied.model",
    "UntiedHierarchy": "attndyn.numeric.attention.untied.hierarchy",
    # the drivers
    "matrix_flow": "attndyn.numeric.attention.flow",
    "limit_flow": "attndyn.numeric.attention.tied.limit",
    "untied_flow": "attndyn.numeric.attention.untied.fastslow",
    "sgd": "attndyn.numeric.attention.training",
    "sgd_runs": "attndyn.numeric.attention.training",
    "gaussian_init": "attndyn.numeric.attention.training",
    "xp_sgd": "attndyn.numeric.attention.xp_sgd",
    "xp_sgd_runs": "attndyn.numeric.attention.xp_sgd",
    # initial laws and the spectral density of the d -> infinity limit
    "UntiedLaw": "attndyn.numeric.attention.untied.limit",
    "gaussian_pair": "attndyn.numeric.attention.untied.limit",
    "DiagonalLaw": "attndyn.numeric.attention.untied.limit",
    "spectral_density": "attndyn.numeric.attention.tied.spectral",
    "SpectralDensity": "attndyn.numeric.attention.limitcore",
    "compare": "attndyn.numeric.attention.compare",
    "Comparison": "attndyn.numeric.attention.compare",
    "load_comparison": "attndyn.numeric.attention.compare",
    # results
    "Trajectory": "attndyn.numeric.core.results",
    "load_result": "attndyn.numeric.core.results",
    "IntegrationError": "attndyn.numeric.core.results",
    "TruncationNotConverged": "attndyn.numeric.core.results",
    # paper 000
    "Transformer": "attndyn.numeric.transformer.model",
    "lambertw": "attndyn.numeric.scaling.lambertw",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attndyn.numeric' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
