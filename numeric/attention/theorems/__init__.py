"""Paper 003's theorems, corollaries and assumptions as numerical checks (issue 18).

Each module registers its checks with :func:`attndyn.numeric.core.checks.register`
when imported; ``attndyn verify`` runs them (:func:`~attndyn.numeric.core.checks.run_checks`).
The assumption diagnostics live in :mod:`.assumptions`. One import per module below,
a plain list: a new module adds one line.
"""

from . import truncations  # noqa: F401  key "trunc": truncations vs the exact matrix flow
from . import thm1  # noqa: F401  key "thm1": Theorem 1 / Corollary 5 at finite d
from . import cor1_landscape  # noqa: F401  key "cor1": Corollary 1, the constrained minimum
from . import cor3  # noqa: F401  key "cor3": Corollary 3, N_wr(c) ~ d^2 log d from SGD
from . import cor6_recovery  # noqa: F401  key "recovery": D.5 / Cor. 6, PL second-phase rate
from . import cor2_truncation  # noqa: F401  key "cor2": Corollary 2 with the proof's constants
from . import cor4  # noqa: F401  key "cor4": Corollary 4 (i), untied N_wr ~ d^2 log d from SGD
from . import cor7  # noqa: F401  key "cor7": Corollary 7 case 1, direct-S N_wr ~ d^2 log d
from . import f4_strong_recovery  # noqa: F401  key "f4": F.4 / Cor. 9, untied strong recovery
from . import cor8_bound  # noqa: F401  key "cor8": Corollary 8, untied truncations and the cone P
from . import d5_example  # noqa: F401  key "d5": the D.5 example (392)-(394), PL for (G1 - G2)^2
