"""Figure 1 of paper 003: softmax attention, two tokens
====================================================

Paper 003, Figure 1: tied attention, L = 2 tokens, row-softmax teacher-student
MSE: truncation orders against SGD, the finite-d matrix flow and the d -> infinity
limit over the full horizon. The potential is non-polynomial (numeric route).

Same as ``attndyn reproduce fig1``; e.g. ``fig1("quick", orders=(2, 4), T=0.3)``.
"""

from attndyn.numeric.attention.figures.fig1 import fig1

run = fig1("quick")  # 4 SGD seeds: the claims are in seed units (rms z)
print(run.table())
run.save("fig1_out")
