"""Figure 4 of paper 003: the D.3 loss over the full horizon
=========================================================

Paper 003, Figure 4: the D.3 loss (G_1 - G_2)^2, truncation orders against SGD,
with the exact d -> infinity limit over the full horizon.

Same as ``attndyn reproduce fig4``; change any setting by keyword, e.g.
``fig4("quick", seeds=3, d=200, batch=256, orders=(2, 6, 10))``.
Settings: ``attndyn.numeric.attention.figures.SETTINGS["fig4"]``.
"""

from attndyn.numeric.attention.figures import fig4

run = fig4("quick", seeds=1)            # "full": d = 400, eta 0.01, B 512 (the caption)
print(run.table())                      # claims with measured verdicts
paths = run.save("fig4_out")            # PNG, JSON (settings, claims), one .npz per curve
print(paths["png"], paths["json"])
sgd = run.curves["sgd/seed0"]           # every curve is a labelled Trajectory
print(sgd.t[-1], sgd.observable("q_11")[-1], run.curves["limit"].observable("q_11")[-1])
