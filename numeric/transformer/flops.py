r"""Floating-point operations per sample of the transformer (Lemma E.1), so that
compute ``C`` can be counted in FLOPs.

Lemma E.1 part 1: forward and backward on one sequence cost ``O(N L m d)``. The count
below is exact for the operations :meth:`Transformer._forward` and
:meth:`Transformer._backward` perform (a multiply-add is 2 FLOPs, an ``exp``, a compare or
a division 1), per layer and per sequence of ``L`` tokens:

forward: ``Lam U`` ``2Ld^2``, scores ``(Lam U) Lam^T`` ``2L^2 d``, masked softmax ``5L^2``
(scale, mask, max-shift, exp, normalise), ``o = S Lam`` ``2L^2 d``, ``Z = O W`` ``2Ldm``,
ReLU ``Lm``, ``ReLU(Z) A`` ``2Lmd``, the ``omega/sqrt m`` scale and the residual ``2Ld``;

backward: ``G A^T`` ``2Ldm``, scale and ReLU mask ``2Lm``, ``dW = O^T dZ`` ``2Ldm``,
``dO = dZ W^T`` ``2Lmd``, ``dP = dO Lam^T`` ``2L^2 d``, softmax backward ``5L^2``,
``T1 = dS Lam`` ``2L^2 d``, ``dU = Lam^T T1`` ``2Ld^2``, ``T2 = dS^T Lam`` ``2L^2 d``,
``P^T dO`` ``2L^2 d``, ``T1 U^T`` and ``T2 U`` ``4Ld^2``, the three adds ``3Ld``;

plus, once per sequence, the output scale, the residual ``F - Y`` and the squared sum
(``4Ld`` forward, ``2Ld`` for the output adjoint). The leading term is ``10 N L m d``
(forward ``4 N L m d``): Lemma E.1's ``O(N L m d)`` with constant 10.
"""

from __future__ import annotations

__all__ = ["flops_per_sample", "flops_breakdown"]


def flops_breakdown(N, L, d, m):
    """A dict of the FLOPs per sequence (Lemma E.1): ``forward``, ``backward``, ``total``
    and ``lemma_e1 = N L m d``.

        >>> fb = flops_breakdown(2, 4, 8, 16)
        >>> sorted(fb), fb["lemma_e1"] == 2 * 4 * 16 * 8
        (['backward', 'forward', 'lemma_e1', 'total'], True)
    """
    from .model import int_ge1
    N, L, d, m = (int_ge1(N, "N"), int_ge1(L, "L"), int_ge1(d, "d"), int_ge1(m, "m"))
    fwd_layer = (2 * L * d * d + 2 * L * L * d + 5 * L * L + 2 * L * L * d + 2 * L * d * m
                 + L * m + 2 * L * m * d + 2 * L * d)
    bwd_layer = (2 * L * d * m + 2 * L * m + 2 * L * d * m + 2 * L * m * d + 2 * L * L * d
                 + 5 * L * L + 2 * L * L * d + 2 * L * d * d + 2 * L * L * d + 2 * L * L * d
                 + 4 * L * d * d + 3 * L * d)
    fwd = N * fwd_layer + 4 * L * d
    bwd = N * bwd_layer + 2 * L * d
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd, "lemma_e1": N * L * m * d}


def flops_per_sample(N, L, d, m, *, backward=True) -> int:
    """FLOPs of one forward (and, by default, backward) pass on one sequence (Lemma E.1);
    see the module docstring. ``C`` in FLOPs for ``k`` gradient steps on
    batches of ``B`` sequences is ``k B flops_per_sample(...)``.

        >>> flops_per_sample(1, 2, 3, 8) == flops_breakdown(1, 2, 3, 8)["total"]
        True
        >>> flops_per_sample(1, 2, 3, 8, backward=False) == flops_breakdown(1, 2, 3, 8)["forward"]
        True
    """
    b = flops_breakdown(N, L, d, m)
    return b["total"] if backward else b["forward"]
