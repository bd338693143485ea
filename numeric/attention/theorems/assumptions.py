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

__all__ = ["Verdict", "diagnose", "note_truncation", "assumption_2_1", "assumption_2_2", "assumption_2_4", "assumption_2",
           "assumption_3", "assumption_4_4", "assumption_5", "assumption_6",
           "assumption_9_4", "tied_factors_or_matrices", "tied_diagnostics",
           "untied_diagnostics", "direct_diagnostics"]


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
        from ...core.labelled import jsonable
        return {"assumption": self.assumption, "holds": self.holds, "label": self.label,
                "message": self.message, "values": jsonable(self.values)}


# ---------------------------------------------------------------------------------------
# helpers

def _op(S) -> float:
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
    C0 = math.sqrt(max(_op(S) for S in mats))
    return mats, C0


def _loss_expression(model):
    from attndyn.symbolic.gaussian import g_array
    from attndyn.symbolic.potential import _call_loss
    import sympy as sp
    G = g_array(model.L, model.K)
    return _call_loss(model.loss, G), list(sp.flatten(G.tolist()))


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

    from attndyn.symbolic.potential import _is_polynomial, _nonsmooth_atoms

    if model.loss is None:
        return Verdict(label, None, "the model has a numeric potential and no loss expression")
    expr, syms = _loss_expression(model)
    syms = [s for s in syms if isinstance(s, sp.Symbol)]
    if _is_polynomial(expr, syms):
        return Verdict(label, True, "the loss is a polynomial in G (smooth, polynomial growth)",
                       {"kind": "polynomial"})
    bad = _nonsmooth_atoms(expr, syms)
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


def assumption_2_2(model, init, min_rank_fraction: float = 0.05) -> Verdict:
    """``||W_k(0)||_F = Theta(sqrt d)`` and ``||W_k(0)||_op <= C_0`` (every index, teachers
    included). At one ``d`` this reads: every ``S_k`` is non-zero with stable rank
    ``||W_k||_F^2 / ||W_k||_op^2 >= min_rank_fraction * d`` (extensive rank); ``C_0`` is
    reported (it enters ``gamma*``)."""
    mats, C0 = tied_factors_or_matrices(model, init)
    d = mats[0].shape[0]
    fro = [float(np.trace(S)) / d for S in mats]           # ||W||_F^2 / d
    ops = [_op(S) for S in mats]                          # ||W||_op^2
    frac = [f / o if o > 0 else 0.0 for f, o in zip(fro, ops)]
    ok = all(o > 0 for o in ops) and min(frac) >= min_rank_fraction
    k = int(np.argmin(frac))
    msg = (f"C_0 = max ||W_k||_op = {C0:.4g}; smallest stable-rank fraction "
           f"||W_k||_F^2/(d ||W_k||_op^2) = {frac[k]:.3g} (index {k})"
           + ("" if ok else f" < {min_rank_fraction:g}: not of extensive rank at d = {d}"))
    return Verdict("2.2", ok, msg, {"C0": C0, "fro2_over_d": fro, "op2": ops,
                                    "rank_fraction": frac, "d": d})


def assumption_2_4(model, init, *, R: float | None = None) -> Verdict:
    """``gamma > gamma*`` (Assumption 2.4), with the sufficient ``gamma*`` of the proofs:
    Lemma 3 (``C_H C_*/gamma <= (C_* - C_0)/4``, ``C_* = 2 C_0 + 1``) and Corollary 2
    (eq. 321 with ``R = C_*^2``), see :func:`.truncation.proof_constants`. With ``R`` (a
    measured bound of ``||S_k(t)||_op`` along the solution) the Corollary 2 condition with
    that ``R`` is reported too. Undecided when ``Gamma`` is not a polynomial (no rigorous
    constants)."""
    from .truncation import measured_constants, proof_constants

    _, C0 = tied_factors_or_matrices(model, init)
    gamma = float(model.weight_decay)
    c = proof_constants(model, C0)
    if c is None:
        return Verdict("2.4", None, f"gamma = {gamma:g}; no sufficient gamma* computed: Gamma "
                       "is not a polynomial in q (no rigorous C_Gamma, L_Gamma)",
                       {"gamma": gamma, "C0": C0})
    vals = {"gamma": gamma, "gamma_star": c["gamma_star"], "C0": C0, "C_star": c["C_star"],
            "R": c["R"], "C_Gamma": c["C_Gamma"], "L_Gamma": c["L_Gamma"], "C_H": c["C_H"],
            "gamma_star_lemma3": c["gamma_star_lemma3"],
            "gamma_star_cor2": c["gamma_star_cor2"]}
    extra = ""
    if R is not None:
        m = measured_constants(model, float(R))
        vals.update({"R_measured": float(R), "gamma_star_measured": m["gamma_star"]})
        extra = (f"; with the measured R = {R:.4g}: gamma* = {m['gamma_star']:.4g} "
                 f"({'met' if gamma > m['gamma_star'] else 'not met'})")
    ok = gamma > c["gamma_star"]
    if ok:
        msg = (f"gamma = {gamma:g} > gamma* = {c['gamma_star']:.4g} (sufficient value from the "
               f"proofs' constants, C_0 = {C0:.3g}, C_* = {c['C_star']:.3g}){extra}")
    else:
        msg = (f"gamma = {gamma:g} <= gamma* = {c['gamma_star']:.4g} (sufficient value from "
               f"the proofs' constants: C_0 = {C0:.3g}, C_* = {c['C_star']:.3g}, C_Gamma = "
               f"{c['C_Gamma']:.3g}, L_Gamma = {c['L_Gamma']:.3g}); the truncation bound "
               f"(Corollary 2, eq. 14) does not apply{extra}")
    return Verdict("2.4", ok, msg, vals)


def assumption_2(model, init) -> list:
    """Assumptions 2.1, 2.2 and 2.4 for a tied model and its initial factors or matrices
    (2.3, convergence of the initial moments in probability, is a statement about a
    sequence in ``d`` and is not checked)."""
    return [assumption_2_1(model), assumption_2_2(model, init), assumption_2_4(model, init)]


# ---------------------------------------------------------------------------------------
# Assumption 3 (tied uninformative start)

def assumption_3(model, init, *, student: int = 0, teacher: int = 1,
                 tol: float | None = None) -> Verdict:
    """Eq. (16): ``p_12(0) = 0``, ``Tr(S1° ^2 S2°)/d -> 0``, ``Tr(S1° S2°^2)/d -> 0``
    (``S° = S - t I``, ``t = Tr S/d``), ``t_1(0) > 0`` and ``p_22 > 0``. At finite ``d``
    the three mixed quantities, each divided by the matching power of
    ``sqrt(p_11), sqrt(p_22)``, must be at most ``tol`` (default ``5/sqrt(d)``: an
    independent Gaussian student has them of order ``1/sqrt(d)`` or smaller)."""
    mats, _ = tied_factors_or_matrices(model, init)
    d = mats[0].shape[0]
    tol = 5.0 / math.sqrt(d) if tol is None else float(tol)
    S1, S2 = mats[student], mats[teacher]
    t1, t2 = np.trace(S1) / d, np.trace(S2) / d
    A, B = S1 - t1 * np.eye(d), S2 - t2 * np.eye(d)
    p11, p22 = np.sum(A * A) / d, np.sum(B * B) / d
    p12 = np.sum(A * B) / d
    m112 = np.sum((A @ A) * B) / d
    m122 = np.sum(A * (B @ B)) / d
    s1, s2 = math.sqrt(max(p11, 0.0)), math.sqrt(max(p22, 0.0))
    n12 = abs(p12) / (s1 * s2) if s1 * s2 > 0 else 0.0
    n112 = abs(m112) / (s1 * s1 * s2) if s1 * s2 > 0 else 0.0
    n122 = abs(m122) / (s1 * s2 * s2) if s1 * s2 > 0 else 0.0
    worst = max(n12, n112, n122)
    ok = bool(t1 > 0 and p22 > 0 and worst <= tol)
    parts = [f"p_12 = {p12:.3g}", f"Tr(S1°^2 S2°)/d = {m112:.3g}",
             f"Tr(S1° S2°^2)/d = {m122:.3g}", f"t_1 = {t1:.3g}", f"p_22 = {p22:.3g}"]
    why = []
    if not t1 > 0:
        why.append("t_1(0) = 0")
    if not p22 > 0:
        why.append("p_22 = 0")
    if worst > tol:
        why.append(f"normalised mixed moment {worst:.3g} > {tol:.3g}: the student is "
                   "informative")
    msg = ", ".join(parts) + ("" if ok else "; " + "; ".join(why))
    return Verdict("3", ok, msg, {"p12": p12, "mu112c": m112, "mu122c": m122, "t1": t1,
                                  "p22": p22, "normalised": [n12, n112, n122], "tol": tol,
                                  "d": d})


# ---------------------------------------------------------------------------------------
# untied: Assumptions 4.4, 5, 6

def _pairs(model, init):
    return model.check_factors(init)


def assumption_4_4(model, init, c_bal: float | None = None) -> Verdict:
    """For every trainable ``k``: ``tA_k(0) > 0``, ``tB_k(0) > 0`` and
    ``|tA_k - tB_k| >= c_bal`` (``tA = Tr(U U^T)/d``, ``tB = Tr(V V^T)/d``); default
    ``c_bal = 0.01 (tA_k + tB_k)``, a relative threshold (equal-variance Gaussian ``U``,
    ``V`` give ``|tA - tB| = O(d^-1/2) tA``)."""
    op = model.order_parameters(_pairs(model, init))
    rows = []
    ok = True
    for k in model.trainable:
        tA, tB = float(op["tA"][k]), float(op["tB"][k])
        cb = 0.01 * (tA + tB) if c_bal is None else float(c_bal)
        good = tA > 0 and tB > 0 and abs(tA - tB) >= cb
        ok &= good
        rows.append({"k": int(k), "tA": tA, "tB": tB, "gap": abs(tA - tB), "c_bal": cb,
                     "holds": bool(good)})
    bad = [r for r in rows if not r["holds"]]
    r = bad[0] if bad else rows[0]
    msg = (f"index {r['k']}: tA = {r['tA']:.4g}, tB = {r['tB']:.4g}, |tA - tB| = "
           f"{r['gap']:.3g} {'>=' if r['holds'] else '<'} c_bal = {r['c_bal']:.3g}"
           + ("" if ok else ": not balanced away from tA = tB (the denominator of eq. 30 is "
              "not controlled)"))
    return Verdict("4.4", bool(ok), msg, {"indices": rows})


def assumption_5(model, init, lam0: float = 0.0, n_segment: int = 5) -> Verdict:
    """Local strong convexity of ``Phi`` in the trainable means at the initial second
    moments ``q0``: the smallest eigenvalue of ``nabla^2_m Phi(m, q0)`` on the trainable
    block exceeds ``lam0`` along the segment from ``m(0)`` to the critical mean ``m*(q0)``
    that the fast flow reaches (:func:`~attndyn.numeric.attention.untied_theory.critical_mean`)
    -- the finite check of items 1-3 of Assumption 5 along the path the fast phase takes."""
    from attndyn.numeric.attention.untied_theory import critical_mean, theory

    pairs = _pairs(model, init)
    op = model.order_parameters(pairs)
    th = theory(model)
    tr = list(model.trainable)
    cm = critical_mean(model, pairs, warn=False)
    if cm.status != 0:
        return Verdict("5", False, f"no critical mean m*(q0): {cm.message}",
                       {"status": cm.status})
    lams = []
    for s in np.linspace(0.0, 1.0, n_segment):
        m = (1 - s) * op["m"] + s * cm.m
        H = th.gradients(m, op["q1"], op["q2"])["hess_m"][np.ix_(tr, tr)]
        lams.append(float(np.linalg.eigvalsh(0.5 * (H + H.T))[0]))
    lmin = min(lams)
    ok = lmin > lam0
    msg = (f"smallest eigenvalue of the m-Hessian on the segment m(0) = "
           f"{np.round(op['m'][tr], 4).tolist()} -> m* = {np.round(cm.m[tr], 4).tolist()} "
           f"({cm.label}): {lmin:.4g} {'>' if ok else '<='} lambda_0 = {lam0:g}")
    return Verdict("5", bool(ok), msg, {"lambda_min": lmin, "lambdas": lams,
                                        "m0": op["m"].tolist(), "m_star": cm.m.tolist(),
                                        "label": cm.label})


def assumption_6(model, init, *, student: int = 0, teacher: int = 1,
                 tol: float | None = None, quick: bool = False) -> Verdict:
    """Asymptotic freeness of the algebras of ``{M1, M1^T, A1, B1}`` and ``{M2, M2^T, A2,
    B2}`` (``A = U U^T``, ``B = V V^T``). Free algebras have vanishing normalised traces of
    alternating products of centred elements; checked on ``phi(a° b°)`` for all pairs of
    generators and ``phi(a° b° a'° b'°)`` with ``a' in {a, a^T}``, ``b' in {b, b^T}``, each
    divided by the ``L^2`` norms ``sqrt(phi(x° x°^T))``. Holds when the largest is at most
    ``tol`` (default ``5/sqrt(d)``). ``quick``: the length-2 moments only (no products
    beyond the generators)."""
    pairs = _pairs(model, init)
    d = pairs[0][0].shape[0]
    tol = 5.0 / math.sqrt(d) if tol is None else float(tol)

    def gens(k):
        U, V = pairs[k]
        M = U @ V.T
        return {"M": M, "M^T": M.T, "A": U @ U.T, "B": V @ V.T}

    def centred(X):
        return X - (np.trace(X) / d) * np.eye(d)

    gs = {n: centred(X) for n, X in gens(student).items()}
    gt = {n: centred(X) for n, X in gens(teacher).items()}
    norm = {n: math.sqrt(max(np.sum(X * X) / d, 0.0)) for n, X in {**{("s", a): b for a, b in
            gs.items()}, **{("t", a): b for a, b in gt.items()}}.items()}
    worst, where = 0.0, ""
    for a, X in gs.items():
        for b, Y in gt.items():
            na, nb = norm[("s", a)], norm[("t", b)]
            if na == 0 or nb == 0:
                continue
            v2 = abs(np.sum(X * Y.T)) / d / (na * nb)
            XY = None if quick else X @ Y
            for Xp, ap in (() if quick else ((X, a), (X.T, a + "^T"))):
                for Yp, bp in ((Y, b), (Y.T, b + "^T")):
                    v4 = abs(np.sum(XY * (Xp @ Yp).T)) / d / (na * nb) ** 2
                    if v4 > worst:
                        worst, where = v4, f"phi({_n(a, 1)}° {_n(b, 2)}° {_n(ap, 1)}° {_n(bp, 2)}°)"
            if v2 > worst:
                worst, where = v2, f"phi({_n(a, 1)}° {_n(b, 2)}°)"
    ok = worst <= tol
    msg = (f"largest normalised alternating centred moment {worst:.3g} ({where}) "
           f"{'<=' if ok else '>'} {tol:.3g}" + ("" if ok else ": the student and the "
                                                   "teacher are not free (informative start)"))
    return Verdict("6", bool(ok), msg, {"worst": worst, "where": where, "tol": tol, "d": d,
                                        "quick": bool(quick)})


def _n(name: str, k: int) -> str:
    """``M^T`` of index 1 -> ``M1^T``."""
    base, _, rest = name.partition("^")
    return f"{base}{k}" + (f"^{rest}" if rest else "")


# ---------------------------------------------------------------------------------------
# Assumption 9.4 (direct S)

def assumption_9_4(model, init) -> Verdict:
    """``gamma > gamma*`` for direct optimisation over ``S`` (Assumption 9.4), with the
    sufficient value of the proof (eq. 448): ``C_* = 2 C_0 + 1`` (``C_0 = max_k
    ||S_k(0)||_op``) and ``C_H / gamma <= (C_* - C_0)/4``, where ``C_H`` bounds
    ``||sum_l H_kl (S_l + S_l^T)||_op <= 2 C_* max_k sum_l sup |H_kl|`` over
    ``|Psi|, |Omega| <= C_*^2`` (``H_kl = E[d^2 loss/dG_k dG_l]``, polynomial bound)."""
    from .truncation import _poly_bounds

    mats = model.check_matrices(init)
    C0 = max(_op(S) for S in mats)
    Cs = 2.0 * C0 + 1.0
    gamma = float(model.weight_decay)
    pot = model.potential
    grad = getattr(pot, "gradients", {}).get("Omega") if pot is not None else None
    K = model.K
    if grad is None or getattr(pot, "params", ()):
        return Verdict("9.4", None, f"gamma = {gamma:g}; no closed-form H: gamma* not computed",
                       {"gamma": gamma, "C0": C0})
    syms = sorted(set().union(*[grad[k, l].free_symbols for k in range(K) for l in range(K)])
                  | set(pot.phi.free_symbols), key=lambda s: s.name)
    rowsum = 0.0
    for k in range(K):
        tot = 0.0
        for l in range(K):
            b = _poly_bounds(2 * grad[k, l], syms, Cs * Cs)   # H = 2 grad_Omega Phi
            if b is None:
                return Verdict("9.4", None, f"gamma = {gamma:g}; H is not a polynomial in "
                               "(Psi, Omega): gamma* not computed", {"gamma": gamma})
            tot += b[0]
        rowsum = max(rowsum, tot)
    CH = 2.0 * Cs * rowsum
    gstar = 4.0 * CH / (Cs - C0)
    ok = gamma > gstar
    msg = (f"gamma = {gamma:g} {'>' if ok else '<='} gamma* = {gstar:.4g} (sufficient value "
           f"from eq. 448: C_0 = {C0:.3g}, C_* = {Cs:.3g}, C_H = {CH:.4g})"
           + ("" if ok else "; the spectral control of Theorem 4's proof does not apply"))
    return Verdict("9.4", bool(ok), msg, {"gamma": gamma, "gamma_star": gstar, "C0": C0,
                                          "C_star": Cs, "C_H": CH})


# ---------------------------------------------------------------------------------------
# what compare and integrate report

def tied_diagnostics(model, init, quick=False):
    """Theorem 2 (tied): Assumptions 2.1, 2.2, 2.4 and, for one student and one teacher, 3."""
    out = [assumption_2_1(model), assumption_2_2(model, init), assumption_2_4(model, init)]
    if model.K == 2 and len(model.trainable) == 1:
        s = model.trainable[0]
        out.append(assumption_3(model, init, student=s, teacher=1 - s))
    return out


def untied_diagnostics(model, init, quick=False):
    """Theorem 3 (untied): Assumptions 4.1, 4.4, 5 and, for one student and one teacher, 6."""
    out = [assumption_2_1(model, derivatives=6, label="4.1"), assumption_4_4(model, init),
           assumption_5(model, init)]
    if model.K == 2 and len(model.trainable) == 1:
        s = model.trainable[0]
        out.append(assumption_6(model, init, student=s, teacher=1 - s, quick=quick))
    return out


def direct_diagnostics(model, init, quick=False):
    """Theorem 4 (direct S): Assumptions 9.1 and 9.4."""
    return [assumption_2_1(model, label="9.1"), assumption_9_4(model, init)]


def diagnose(model, init, quick: bool = False) -> list:
    """The assumptions of the theorem behind ``model``'s theory, at the initial weights
    ``init`` (tied factors or matrices, untied pairs, direct-S matrices): tied 2.1, 2.2,
    2.4 and 3; untied 4.1, 4.4, 5 and 6; direct S 9.1 and 9.4. ``quick``: the cheap
    version of Assumption 6 (what ``compare`` runs). Each model says which assumptions
    its theorem has (``AttentionModel.assumptions``); one without diagnostics gives
    ``[]``."""
    return list(model.assumptions(init, quick=quick))


def note_truncation(model, mu0, res) -> None:
    """For a truncated tied hierarchy integrated from matrices ``mu0``: record Assumption 2.4
    in ``res.diagnostics["assumptions"]`` and, when it is not met, say so in the message
    (the truncation bound of Corollary 2 does not apply; the run's own convergence check
    is what measures its error). Other ``mu0`` (moments, a law) carry no ``C_0``: nothing
    is added."""
    if not (isinstance(mu0, (list, tuple)) and len(mu0) == model.K
            and all(np.ndim(m) == 2 for m in mu0)):
        return
    v = assumption_2_4(model, mu0)
    res.diagnostics["assumptions"] = [v.as_dict()]
    if v.holds is False:
        res.message += f"; note: {v}"
