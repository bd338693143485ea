"""Paper 000, section 7: the two-stage scaling law
===============================================

Reproduce the qualitative picture of section 7 of paper 000.

Run ``python examples/scaling_laws.py [out.png]``. The figure has six panels:

1. the (C, N) phase diagram of eq. (3) for three noise levels;
2. the excess-risk bound against compute: at a fixed data size the bound
   decays exponentially (stage I) until the threshold C*(N), then stays at the
   data floor c_stat xi^2/N (stage II); growing the data with compute along
   N*(C) gives the C^(-1/6) power law with its Lambert-W logarithm;
3. the stage-II bound in the exact form against the paper's printed form and
   the leading term C^(-1/6) (log C)^(1/6);
4. to 6. the single-variable laws of Theorem 7.2 and the noise drag of
   section 7.2 (xi growing like N^(1/2) flattens the data law).

The paper leaves its constants (alpha, the stage-I prefactor, L(0, D) and
the O(xi^2/N) constant) unspecified. The values below are illustrative
choices, not values from the paper: alpha = 1, prefactor = loss0 = 1, and
c_stat = prefactor * loss0 / (L d), the one choice for which the two stages
meet at the threshold (see attndyn.numeric.scaling.threshold_jump).
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from attndyn.numeric import scaling as sc  # noqa: E402
from attndyn.numeric.scaling import plots as sp  # noqa: E402


def main(out="scaling_laws.png"):
    L, d = 8.0, 4.0
    alpha, prefactor, loss0 = 1.0, 1.0, 1.0  # illustrative, see the docstring
    c_stat = float(sc.continuity_constant(L, d, prefactor=prefactor, loss0=loss0))
    xis = [0.5, 1.0, 2.0]
    C = np.logspace(0, 60, 600)

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    sp.plot_phase_diagram(C, xis, L, d, ax=axes[0, 0])
    sp.plot_two_stage(np.logspace(18, 36, 600), xis, 1e4, L, d, alpha=alpha,
                      prefactor=prefactor, loss0=loss0, c_stat=c_stat, ax=axes[0, 1])

    ax = axes[0, 2]
    Cl = np.logspace(3, 240, 300)
    exact = sc.stage_two_bound(Cl, 1.0, L, d, c_stat=c_stat)
    paper = sc.stage_two_bound_paper(Cl, 1.0, c_stat=c_stat)
    lead = c_stat * 6 ** (-1 / 6) * Cl ** (-1 / 6) * np.log(Cl) ** (1 / 6)
    # compensated by C^(1/6): flat for a pure power law, the rise is the logarithm
    comp = Cl ** (1 / 6)
    ax.semilogx(Cl, exact * comp, label="exact: c xi^2 / N*(C)")
    ax.semilogx(Cl, paper * comp, "--", label="paper: c xi^(5/3) (C/W(C/xi^10))^(-1/6)")
    ax.semilogx(Cl, lead * comp, ":", label="leading: c 6^(-1/6) C^(-1/6) (log C)^(1/6)")
    ax.set_xlabel("compute C")
    ax.set_ylabel("C^(1/6) x stage-II bound (xi = 1)")
    ax.set_title("Lambert-W logarithmic correction")
    ax.legend(fontsize=7)

    sp.plot_single_variable_laws(np.logspace(0, 10, 300), np.logspace(1, 8, 300),
                                 np.logspace(2, 40, 300), 1.0, c_stat=c_stat,
                                 N_time=[1e1, 1e2, 1e3], N_model=1e3, drag_xi0=1.0,
                                 axes=axes[1])
    fig.suptitle("Paper 000, section 7: two-stage scaling law, single-variable laws, drags "
                 "(illustrative constants)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(main(*sys.argv[1:2]))
