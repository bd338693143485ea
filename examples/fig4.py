"""Figure 4 of paper 003: the D.3 loss over the full horizon
=========================================================

Paper 003, Figure 4: the D.3 loss (G_1 - G_2)^2, truncation orders against SGD,
with the exact d -> infinity limit over the full horizon.

Same as ``attndyn reproduce fig4``; change any setting by keyword, e.g.
``fig4("quick", seeds=3, d=200, batch=256, orders=(2, 6, 10))``.
Settings: ``attndyn.numeric.attention.figures.common.SETTINGS["fig4"]``.
"""

from attndyn.numeric.attention.figures.fig4 import fig4

run = fig4("quick")  # 4 SGD seeds: the claims are in seed units (rms z)            # "full": d = 400, eta 0.01, B 512 (the caption)
print(run.table())                      # claims with measured verdicts
paths = run.save("fig4_out")            # PNG, JSON (settings, claims), one .npz per curve
print(paths["png"], paths["json"])
sgd = run.curves["sgd/seed0"]           # every curve is a labelled Trajectory
print(sgd.t[-1], sgd.observable("q_11")[-1], run.curves["limit"].observable("q_11")[-1])
print(run.extra["paired_rms_z"])        # rms z of SGD against each theory from its own start

# The same figure as a resumable job on a process pool (or a dask Client), each SGD run
# stored as it finishes: rerunning after a kill loads the stored runs.
from attndyn.numeric.attention.figures.common import TaskRunner  # noqa: E402

job = fig4("mini", runner=TaskRunner(None, cache_dir="fig4_cache", workers=2, plan=True))
