"""Paper 003, attention-indexed models: the model protocol (:mod:`.base`), one module per
parameterisation (:mod:`.tied`, :mod:`.direct`, :mod:`.untied`), and the drivers that run any
model through the protocol: the matrix flow (:mod:`.flow`), finite-d online SGD
(:mod:`.training`) and the SGD-vs-theory comparison (:mod:`.compare`); numeric potentials
(:mod:`.potentials`, :mod:`.quadrature`). Imports nothing from ``transformer`` or ``scaling``."""

import os as _os

from attndyn.kernels._cachedir import drop_stale_dependent_cache as _drop_stale

# cached kernels here (untied theory) inline the package's kernels and each other
_drop_stale(_os.path.dirname(_os.path.abspath(__file__)))

