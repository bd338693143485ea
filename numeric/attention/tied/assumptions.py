"""The premises of Theorem 2 (tied attention) at given initial weights: Assumption 2.2
(rank of the initial matrices), 2.4 (``gamma > gamma*``, the weight decay behind Corollary
2's bound) and 3 (the overlaps of student and teacher), with Assumption 2.1 of
:mod:`attndyn.numeric.attention.assumptions`; :func:`tied_diagnostics` is what
``TiedTheory.assumptions`` runs."""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.attention.assumptions import (Verdict, assumption_2_1, spectral_norm,
                                                   tied_factors_or_matrices)
from attndyn.numeric.attention.tied.bounds import measured_constants, proof_constants

__all__ = ["assumption_2_2", "assumption_2_4", "assumption_2", "assumption_3", "tied_diagnostics"]


def assumption_2_2(model, init, min_rank_fraction: float = 0.05) -> Verdict:
    """``||W_k(0)||_F = Theta(sqrt d)`` and ``||W_k(0)||_op <= C_0`` (every index, teachers
    included). At one ``d`` this reads: every ``S_k`` is non-zero with stable rank
    ``||W_k||_F^2 / ||W_k||_op^2 >= min_rank_fraction * d`` (extensive rank); ``C_0`` is
    reported (it enters ``gamma*``)."""
    mats, C0 = tied_factors_or_matrices(model, init)
    d = mats[0].shape[0]
    fro = [float(np.trace(S)) / d for S in mats]           # ||W||_F^2 / d
    ops = [spectral_norm(S) for S in mats]                          # ||W||_op^2
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


def tied_diagnostics(model, init, quick=False):
    """Theorem 2 (tied): Assumptions 2.1, 2.2, 2.4 and, for one student and one teacher, 3."""
    out = [assumption_2_1(model), assumption_2_2(model, init), assumption_2_4(model, init)]
    if model.K == 2 and len(model.trainable) == 1:
        s = model.trainable[0]
        out.append(assumption_3(model, init, student=s, teacher=1 - s))
    return out
