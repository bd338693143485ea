"""Paper 003's assumptions as diagnostics: does the premise hold for this model and start?

Each function returns a :class:`Verdict` (``holds``: True, False, or None when it cannot be
decided; the numbers behind it; a one-line message). The paper states its assumptions in
the limit ``d -> infinity``; at one finite ``d`` a limit cannot be observed, so the
finite-d versions below use stated thresholds (documented per function) in place of
"tends to 0" and "Theta(sqrt d)".

- :func:`assumption_2_1`: the loss is four times continuously differentiable with
  derivatives of polynomial growth (tied, Theorem 2); :func:`assumption_2_2`: initial
  ``||W_k||_F = Theta(sqrt d)`` and ``||W_k||_op <= C_0``; :func:`assumption_2_4`:
  ``gamma > gamma*`` with a sufficient ``gamma*`` computed from the proof's constants
  (:mod:`.truncation`); :func:`assumption_2` combines them.
- :func:`assumption_3`: the uninformative tied start (eq. 16).
- :func:`assumption_4_4` (untied balance), :func:`assumption_5` (strong convexity of
  ``Phi`` in the trainable means), :func:`assumption_6` (freeness of the student and
  teacher algebras).
- :func:`assumption_9_4`: ``gamma > gamma*`` for direct optimisation over ``S`` (eq. 448).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Verdict", "diagnose", "assumption_2_1", "tied_factors_or_matrices"]


@dataclass(frozen=True)
class Verdict:
    """A labelled verdict: ``assumption`` (e.g. ``"2.4"``), ``holds`` (True / False /
    None = undecided), ``message`` (one line, with the numbers), ``values`` (the numbers,
    JSON-ready)."""

    assumption: str
    holds: bool | None
    message: str
    values: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return {True: "holds", False: "not met", None: "undecided"}[self.holds]

    def __str__(self) -> str:
        return f"Assumption {self.assumption} {self.label}: {self.message}"

    def as_dict(self) -> dict:
        from attndyn.numeric.core.labelled import jsonable
        return {"assumption": self.assumption, "holds": self.holds, "label": self.label,
                "message": self.message, "values": jsonable(self.values)}


# ---------------------------------------------------------------------------------------
# helpers

def spectral_norm(S) -> float:
    """Spectral norm of a square matrix (symmetric: the largest |eigenvalue|)."""
    S = np.asarray(S, float)
    if np.allclose(S, S.T):
        lam = np.linalg.eigvalsh(0.5 * (S + S.T))
        return float(max(abs(lam[0]), abs(lam[-1])))
    return float(np.linalg.norm(S, 2))


def tied_factors_or_matrices(model, init) -> tuple:
    """``(S_k, C_0)`` from tied factors ``W_k`` (``d x d_k``) or matrices ``S_k``
    (``d x d`` PSD): ``C_0 = max_k ||W_k||_op = max_k sqrt(||S_k||_op)``."""
    init = list(init)
    if len(init) != model.K:
        raise ValueError(f"init must hold K = {model.K} factors or matrices, got {len(init)}")
    arrs = [np.asarray(a, float) for a in init]
    square_psd = all(a.ndim == 2 and a.shape[0] == a.shape[1] for a in arrs)
    if square_psd:
        try:
            mats = model.check_matrices(arrs)
        except ValueError:
            square_psd = False
    if not square_psd:
        Ws = model.check_init(arrs)
        mats = [W @ W.T for W in Ws]
    C0 = math.sqrt(max(spectral_norm(S) for S in mats))
    return mats, C0


def _loss_expression(model):
    from attndyn.symbolic.gaussian import g_array
    from attndyn.symbolic.potential import call_loss
    import sympy as sp
    G = g_array(model.L, model.K)
    return call_loss(model.loss, G), list(sp.flatten(G.tolist()))


# ---------------------------------------------------------------------------------------
# Assumption 2 (tied): regularity, bounded moments, gamma > gamma*

_BOUNDED_SMOOTH = ("tanh", "erf", "erfc", "atan", "sin", "cos")


def assumption_2_1(model, derivatives: int = 4, label: str = "2.1") -> Verdict:
    """The loss is ``derivatives`` times continuously differentiable with derivatives of
    polynomial growth. A polynomial loss holds; one with a non-smooth atom (``Abs``,
    ``Max``, ``Heaviside``, ``Piecewise``...) of the pre-activations fails; smooth losses
    built only from polynomials and bounded smooth functions (``tanh``, ``erf``, ``sin``...)
    hold; anything else (``exp``, ``log``, ``sqrt``: growth or singularities not decided
    symbolically) is undecided."""
    import sympy as sp

    from attndyn.symbolic.potential import is_polynomial, nonsmooth_atoms

    if model.loss is None:
        return Verdict(label, None, "the model has a numeric potential and no loss expression")
    expr, syms = _loss_expression(model)
    syms = [s for s in syms if isinstance(s, sp.Symbol)]
    if is_polynomial(expr, syms):
        return Verdict(label, True, "the loss is a polynomial in G (smooth, polynomial growth)",
                       {"kind": "polynomial"})
    bad = nonsmooth_atoms(expr, syms)
    if bad:
        return Verdict(label, False, f"the loss is not C^{derivatives}: non-smooth "
                       f"{', '.join(sorted({type(a).__name__ for a in bad}))} of G",
                       {"kind": "nonsmooth", "atoms": sorted(str(a) for a in bad)[:5]})
    funcs = {type(f).__name__ for f in expr.atoms(sp.Function) if f.free_symbols & set(syms)}
    pows = [p for p in expr.atoms(sp.Pow) if p.free_symbols & set(syms)
            and not (p.exp.is_Integer and p.exp > 0)]
    if funcs <= set(_BOUNDED_SMOOTH) and not pows:
        return Verdict(label, True, f"polynomials and bounded smooth functions "
                       f"({', '.join(sorted(funcs))}) of G: smooth, polynomial growth",
                       {"kind": "bounded-smooth", "functions": sorted(funcs)})
    what = ", ".join(sorted(funcs)) or "a non-integer power"
    return Verdict(label, None, f"smoothness and growth of {what} not decided symbolically",
                   {"kind": "undecided", "functions": sorted(funcs)})


# ---------------------------------------------------------------------------------------
# Assumption 3 (tied uninformative start)


# ---------------------------------------------------------------------------------------
# untied: Assumptions 4.4, 5, 6


# ---------------------------------------------------------------------------------------
# Assumption 9.4 (direct S)


# ---------------------------------------------------------------------------------------
# what compare and integrate report


def diagnose(model, init, quick: bool = False) -> list:
    """The assumptions of the theorem behind ``model``'s theory, at the initial weights
    ``init`` (tied factors or matrices, untied pairs, direct-S matrices): tied 2.1, 2.2,
    2.4 and 3; untied 4.1, 4.4, 5 and 6; direct S 9.1 and 9.4. ``quick``: the cheap
    version of Assumption 6 (what ``compare`` runs). Each model says which assumptions
    its theorem has (``model.theory.assumptions``); one without diagnostics gives
    ``[]``."""
    return list(model.theory.assumptions(init, quick=quick))


def poly_bounds(expr, syms, rho: float):
    """``(sup |p|, [sup |dp/ds| for s in syms])`` over ``|s| <= rho`` for a polynomial
    ``p`` in ``syms`` (``None`` when ``expr`` is not a polynomial in them)."""
    import sympy as sp

    try:
        P = sp.Poly(sp.expand(expr), *syms)
    except sp.PolynomialError:
        return None
    if any(not c.is_number for c in P.coeffs()):
        return None
    sup = 0.0
    grads = [0.0] * len(syms)
    for monom, c in P.terms():
        c = abs(float(c))
        deg = sum(monom)
        sup += c * rho ** deg
        for i, a in enumerate(monom):
            if a:
                grads[i] += c * a * rho ** (deg - 1)
    return sup, grads
