"""Paper 003's Figures 1-4 as measured runs with claims (``attndyn reproduce``).

Each ``figN(mode="quick"|"full"|"mini", seeds=..., **overrides)`` runs the
curves of the figure (finite-d SGD per seed and the theory of the paper from the
same initial condition), checks the claims of its caption on the numbers and
returns a :class:`~attndyn.numeric.core.claims.FigureRun` (``.table()``,
``.plot()``, ``.save(out)``).

The captions give ``d``, the learning rate and the batch size but no horizon and
no initial scale; the choices made here (``common.SETTINGS``) are stated in every
figure's title and in ``docs/figures.md``. ``"quick"`` keeps the noise parameter
``eta d / B`` of the caption at a smaller ``d``; ``"full"`` is the caption's
setting; ``"mini"`` is a seconds-sized run for the default test suite.

Times: tied ``t = 4 eta n / d``; direct S ``tau = eta n / d``; untied slow
``tau = eta n / d`` (paper 003, eqs. 11, 402, 31).

One module per figure (:mod:`.fig1` .. :mod:`.fig4`); shared settings and helpers in
:mod:`.common`.
"""

from __future__ import annotations

from . import fig1, fig2, fig3, fig4

__all__ = ["FIGURES"]


#: name -> ``figN(mode, seeds, **overrides)``; ``figures.fig1`` is the module of Figure 1
FIGURES = {"fig1": fig1.fig1, "fig2": fig2.fig2, "fig3": fig3.fig3, "fig4": fig4.fig4}
