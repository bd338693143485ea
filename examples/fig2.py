"""Figure 2 of paper 003: tied W against direct S
==============================================

Paper 003, Figure 2: tied W against direct S from an uninformative start,
MSE teacher-student with h1, h2, h3 (L = 1).

Same as ``attndyn reproduce fig2``; change a setting by keyword, e.g.
``fig2("quick", acts=("h2",), d=100, T=3.0)``.
"""

from attndyn.numeric.attention.figures.fig2 import fig2

run = fig2("quick")  # 4 SGD seeds: the claims are in seed units (rms z)
print(run.table())
print(run.extra["escape_tau"])          # first tau = eta n / d with |p_12| >= 0.1, tied
scan = run.extra["direct_scan"]         # direct-S flow from Gaussian starts at growing d
print(scan["d"], scan["pmax"]["h2"])    # mean max |p| over the horizon: falls like 1/d (eq. 418)
run.save("fig2_out")
