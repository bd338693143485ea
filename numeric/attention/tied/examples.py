"""Example tied models shared by the figures and the checks of ``attndyn verify``."""

from __future__ import annotations

from attndyn.numeric.attention.tied.model import TiedModel

__all__ = ["d3_model"]


def d3_model() -> TiedModel:
    """The exactly solvable model of paper 003, appendix D.3 (eqs. 339-348): ``K = 2``,
    student 0 and fixed teacher 1, ``L = 1``, loss ``(G_1 - G_2)^2``."""

    def square(G):
        return (G[0, 0, 0] - G[0, 0, 1]) ** 2
    return TiedModel(2, [0], square)
