"""Paper 003's theorems, corollaries and assumptions as numerical checks (issue 18).

Each module registers its checks with :func:`attndyn.numeric.core.checks.register`
when imported; ``attndyn verify`` runs them (:func:`~attndyn.numeric.core.checks.run_checks`).
The assumption diagnostics live in :mod:`.assumptions`. One import per module below,
a plain list: a new module adds one line.
"""

from . import trunc  # noqa: F401  key "trunc": truncations vs the exact matrix flow
from . import thm1  # noqa: F401  key "thm1": Theorem 1 / Corollary 5 at finite d
