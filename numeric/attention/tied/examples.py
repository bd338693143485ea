"""Example tied models."""

from __future__ import annotations


__all__ = []


def _d3_model():
    from attndyn.numeric.attention.tied.model import TiedModel

    return TiedModel(2, [0], lambda G: (G[0, 0, 0] - G[0, 0, 1]) ** 2)
