"""Paper 000, section 7: the scaling-law figure
============================================

Paper 000, section 7: the two-stage bound against compute with the stage boundary,
the compute-optimal frontier N*(C) (exact and the paper's form), the time, data and
model laws and the noise drags, with the claims checked.

Same as ``attndyn reproduce scaling``. The paper hides its constants: pass your own,
e.g. ``scaling_figure("quick", L=8, d=64, N=1e4, alpha=1.0, prefactor=2.0, loss0=1.0)``
(c_stat is then the continuity constant prefactor loss0 / (L d)).
"""

from attndyn.numeric.scaling.figures import scaling_figure

run = scaling_figure("quick")
print(run.table())
run.save("scaling_out")
