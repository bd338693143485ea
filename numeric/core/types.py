"""Type aliases of the public signatures (used in annotations only).

- :data:`RngLike`: what ``rng=`` (and its alias ``seed=``) accepts, SPEC 7's rule in
  :func:`attndyn.numeric.core.validate.resolve_rng`: ``None``, an int, a ``SeedSequence``
  or a ``Generator``.
- :data:`PathLike`: a file name, as ``str`` or ``os.PathLike``.
- :data:`ArrayLike`: numpy's (anything ``np.asarray`` takes).
"""

from __future__ import annotations

import os
from typing import TypeAlias, Union

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["RngLike", "PathLike", "ArrayLike"]

RngLike: TypeAlias = Union[int, np.integer, np.random.SeedSequence, np.random.Generator, None]
PathLike: TypeAlias = Union[str, "os.PathLike[str]"]
