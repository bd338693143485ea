"""The premises of Theorem 3 (untied attention) at given pairs: Assumption 4.2 (extensive,
spectrally bounded factors), 4.4 (balanced
initialisation), 5 (a positive-definite ``m``-Hessian at the critical mean ``m*``, eq. 29) and
6 (the weak-recovery condition of section 4.2), with 4.1 (Assumption 2.1 of
:mod:`attndyn.numeric.attention.assumptions`); :func:`untied_diagnostics` is what
``UntiedTheory.assumptions`` runs."""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.attention.assumptions import assumption_2_1, Verdict
from attndyn.numeric.attention.untied.coefficients import coefficients
from attndyn.numeric.attention.untied.fastslow import critical_mean

__all__ = ["assumption_4_2", "assumption_4_4", "assumption_5", "assumption_6", "untied_diagnostics"]


def _n(name: str, k: int) -> str:
    """``M^T`` of index 1 -> ``M1^T``."""
    base, _, rest = name.partition("^")
    return f"{base}{k}" + (f"^{rest}" if rest else "")


def _pairs(model, init):
    return model.check_factors(init)


def _op_norm(X) -> float:
    """``||X||_op``: the square root of the largest eigenvalue of the smaller Gram matrix."""
    G = X.T @ X if X.shape[1] <= X.shape[0] else X @ X.T
    return math.sqrt(max(float(np.linalg.eigvalsh(G)[-1]), 0.0))


def assumption_4_2(model, init, min_rank_fraction: float = 0.05,
                   C0: float | None = None) -> Verdict:
    """Assumption 4.2: ``||U_k||_F + ||V_k||_F = Theta(sqrt d)`` and
    ``max_k {||U_k||_op, ||V_k||_op} <= C_0`` (every index, teachers included).

    At one ``d`` a ``Theta`` cannot be observed; as for the tied Assumption 2.2 it reads:
    every factor is non-zero and of extensive stable rank,
    ``||X||_F^2 / (d ||X||_op^2) >= min_rank_fraction`` for ``X`` in ``{U_k, V_k}``, so that
    ``||X||_F = Theta(sqrt d)`` with ``||X||_op = O(1)`` (a factor of rank ``o(d)`` with
    ``||X||_F = Theta(sqrt d)`` has ``||X||_op`` growing with ``d``). ``C_0 = max ||X||_op``
    is reported; given ``C0``, it must not exceed it. Gaussian pairs (:func:`gaussian_init`)
    satisfy the operator bound with high probability, not almost surely as the paper asks:
    ``||U_k||_op -> scale (1 + aspect^-1/2)`` with Gaussian tails above it."""
    pairs = _pairs(model, init)
    d = pairs[0][0].shape[0]
    frac = float(min_rank_fraction)
    if not (math.isfinite(frac) and 0 < frac <= 1):
        raise ValueError(f"min_rank_fraction must be in (0, 1], got {min_rank_fraction!r}")
    if C0 is not None and not (math.isfinite(float(C0)) and float(C0) > 0):
        raise ValueError(f"C0 must be a finite number > 0, got {C0!r}")
    rows = []
    for k, (U, V) in enumerate(pairs):
        for nm, X in (("U", U), ("V", V)):
            fro2 = float(np.sum(X * X))
            op = _op_norm(X)
            rows.append({"k": k, "factor": f"{nm}{k + 1}", "fro_over_sqrt_d": math.sqrt(fro2 / d),
                         "op": op, "rank_fraction": fro2 / (d * op * op) if op > 0 else 0.0})
    c0 = max(r["op"] for r in rows)
    worst = min(rows, key=lambda r: r["rank_fraction"])
    ok_rank = worst["rank_fraction"] >= frac
    ok_c0 = C0 is None or c0 <= float(C0)
    ok = bool(ok_rank and ok_c0)
    why = []
    if not ok_rank:
        why.append(f"{worst['factor']} is not of extensive rank at d = {d} (its operator norm "
                   "grows with d at fixed ||.||_F / sqrt d)")
    if not ok_c0:
        why.append(f"C_0 = {c0:.4g} > {float(C0):.4g}")
    msg = (f"C_0 = max ||U_k||_op, ||V_k||_op = {c0:.4g}; smallest stable-rank fraction "
           f"||X||_F^2/(d ||X||_op^2) = {worst['rank_fraction']:.3g} ({worst['factor']}) "
           f"{'>=' if ok_rank else '<'} {frac:g}" + ("" if ok else ": " + "; ".join(why)))
    return Verdict("4.2", ok, msg, {"C0": c0, "factors": rows, "d": d,
                                    "min_rank_fraction": frac})


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
    that the fast flow reaches (:func:`~attndyn.numeric.attention.untied.fastslow.critical_mean`)
    -- the finite check of items 1-3 of Assumption 5 along the path the fast phase takes."""

    pairs = _pairs(model, init)
    op = model.order_parameters(pairs)
    th = coefficients(model)
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


def untied_diagnostics(model, init, quick=False):
    """Theorem 3 (untied): Assumptions 4.1, 4.2, 4.4, 5 and, for one student and one teacher,
    6. Assumption 4.5 (``gamma > gamma*``) is not checked: the paper gives ``gamma*`` only
    through the unnamed constants of Lemma 16 and eq. (703)."""
    out = [assumption_2_1(model, derivatives=6, label="4.1"), assumption_4_2(model, init),
           assumption_4_4(model, init),
           assumption_5(model, init)]
    if model.K == 2 and len(model.trainable) == 1:
        s = model.trainable[0]
        out.append(assumption_6(model, init, student=s, teacher=1 - s, quick=quick))
    return out
