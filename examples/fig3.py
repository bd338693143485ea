"""Figure 3 of paper 003: untied attention
=======================================

Paper 003, Figure 3: untied attention, single token, h1/h2/h3: the symmetric
overlap Tr((M1 + M1^T)(M2 + M2^T))/(2d) = q1_12 + q2_12, SGD against the
fast-slow theory (the slaved matrix flow).

Same as ``attndyn reproduce fig3``; e.g. ``fig3("quick", seeds=3, d=120)``.
"""

from attndyn.numeric.attention.figures.fig3 import fig3

run = fig3("quick")  # 4 SGD seeds: the claims are in seed units (rms z)
print(run.table())
print(run.extra["escape_order_sgd"])    # the caption's order: h1 < h2 < h3
print(run.extra["loss_gap"]["gap"])     # exact finite-d loss minus Phi at the start, per d
run.save("fig3_out")
