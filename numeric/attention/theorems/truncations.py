"""Check ``trunc``: truncations of the tied hierarchy against the exact finite-d matrix flow.

This is what ``attndyn verify`` ran before it became a theorem suite. The finite-d matrix
flow ``dS_k/dt = -sum_l Gamma_kl(q) (S_l S_k + S_k S_l) - (gamma/2) S_k`` is an exact
solution of the infinite hierarchy (eq. 11) at any ``d`` (its normalised traces); the
truncation at order ``M`` (eq. 13) is held against it. Per order ``M`` two sub-checks:

- converged in the order: orders ``M`` and ``M + 2`` agree within ``conv_tol`` (relative,
  on the moments of length <= 2);
- its distance to the flow is covered by that convergence estimate (``10 x`` the
  ``M`` vs ``M + 2`` difference plus ``1e-9``: where the truncation converges it
  converges geometrically);

and across orders the error to the flow falls with the order (Corollary 2's content).
"""

from __future__ import annotations

import math

import numpy as np

from attndyn.numeric.attention.tied.examples import d3_model
from attndyn.numeric.core.checks import CheckResult, register

__all__ = ["truncation_vs_flow", "check_trunc", "TRUNC_BUDGETS"]

#: orders, d, horizon per budget (the default is the old ``attndyn verify``)
TRUNC_BUDGETS = {"small": ((8, 12), 30, 0.05), "default": ((8, 12, 16), 120, 0.1),
                 "slow": ((8, 12, 16, 20), 200, 0.1)}


def random_psd(K: int, d: int, rng) -> list:
    """``K`` Wishart matrices ``A A^T / d`` (``A`` ``d x d`` standard normal), each scaled so
    that its spectrum lies in ``[0, 1]``."""
    mats = []
    for _ in range(K):
        A = rng.standard_normal((d, d))
        S = A @ A.T / d
        mats.append(S / np.linalg.eigvalsh(S)[-1])
    return mats


def truncation_vs_flow(model, orders, d: int, t_end: float, conv_tol: float, seed,
                       max_terms=None) -> tuple:
    """Run the sub-checks (see the module docstring) from ``K`` random PSD matrices of size
    ``d`` (spectra in ``[0, 1]``, drawn from ``numpy.random.default_rng(seed)``).

    Returns ``(rows, errors)``: one dict per sub-check (``check``, ``paper``, ``verdict``,
    ``measured``, ``bound``, ``note``) and the error to the flow per order.

        >>> from attndyn.numeric.attention.tied.examples import d3_model
        >>> rows, errors = truncation_vs_flow(d3_model(), (6, 8), 10, 0.05, 1e-4, 0)
        >>> [r["verdict"] for r in rows], sorted(errors)
        (['held', 'held', 'held', 'held', 'held'], [6, 8])
    """
    from attndyn.numeric.attention.flow import matrix_flow

    orders = [int(o) for o in orders]
    if not orders or min(orders) < 1:
        raise ValueError("orders must list truncation orders >= 1")
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    if not (t_end > 0 and math.isfinite(t_end)):
        raise ValueError(f"t_end must be a finite number > 0, got {t_end}")
    if not (conv_tol > 0 and math.isfinite(conv_tol)):
        raise ValueError(f"conv_tol must be a finite number > 0, got {conv_tol}")
    rng = np.random.default_rng(seed)
    mats = random_psd(model.K, int(d), rng)
    t_eval = np.linspace(0.0, t_end, 6)
    flow = matrix_flow(model, mats, t_eval, order=2)
    low = list(flow.words)
    rows = []

    def row(name, ref, held, measured, bound, note=""):
        verdict = "not applicable" if held is None else ("held" if held else "not held")
        rows.append({"check": name, "paper": ref, "verdict": verdict, "measured": measured,
                     "bound": bound, "note": note})

    errors = {}
    for M in orders:
        h = model.hierarchy(M, max_terms=max_terms)
        res = h.integrate(mats, t_eval, check=M + 2, conv_tol=conv_tol, method="truncation")
        conv = res.diagnostics.get("truncation_error_low")
        if res.t.size != t_eval.size or conv is None:
            row(f"order {M}: converged in the order", "eq. (13)", False, None, conv_tol,
                res.message)
            row(f"order {M}: error to the flow within the estimate", "eq. (11)", None, None,
                None, "the truncation did not reach the horizon")
            continue
        err = max(float(np.abs(res.moment(w) - flow.moment(w)).max()) for w in low if len(w) <= M)
        errors[M] = err
        row(f"order {M}: converged in the order", "eq. (13)", conv <= conv_tol, conv, conv_tol,
            f"|M - (M+2)| on the moments of length <= 2, status {res.status}")
        # the M vs M+2 difference estimates the truncation error of M (geometric convergence)
        bound = 10 * conv + 1e-9
        row(f"order {M}: error to the flow within the estimate", "eq. (11)", err <= bound, err,
            bound, "max |hierarchy - matrix flow| on t_k and q_kl")
    if len(errors) >= 2:
        seq = [errors[M] for M in sorted(errors)]
        falls = all(b < a or b < 1e-10 for a, b in zip(seq, seq[1:]))
        row("error to the flow falls with the order", "Corollary 2", falls, seq[-1], seq[0],
            "errors " + ", ".join(f"M={M}: {errors[M]:.2e}" for M in sorted(errors)))
    return rows, errors


def rows_table(rows) -> str:
    """The sub-checks as the text table the pre-suite ``attndyn verify`` printed."""
    lines = [f"{'check':52}{'paper':>13}{'measured':>11}{'bound':>11}  verdict"]
    for c in rows:
        m = "-" if c["measured"] is None else f"{c['measured']:.2e}"
        b = "-" if c["bound"] is None else f"{c['bound']:.2e}"
        lines.append(f"{c['check']:52}{c['paper']:>13}{m:>11}{b:>11}  {c['verdict']}")
    failed = [c["check"] for c in rows if c["verdict"] == "not held"]
    lines.append(f"# trunc: {len(rows) - len(failed)} of {len(rows)} sub-checks held"
                 + (f"; NOT HELD: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


@register("trunc", "eqs. (11), (13)", "truncated tied hierarchy vs the exact finite-d matrix flow")
def check_trunc(budget, seed, *, model=None, orders=None, d=None, t_end=None,
                conv_tol: float = 1e-4, max_terms=None, matrix_seed=None) -> CheckResult:
    """The sub-checks of :func:`truncation_vs_flow` as one check: it holds when every
    sub-check holds. ``worst`` is the largest ratio measured / bound over the sub-checks
    (the convergence difference against ``conv_tol``, the error to the flow against its
    estimate; <= 1 where they hold). Defaults: the D.3 example, the budget's orders, ``d``
    and horizon; ``matrix_seed`` (an int) fixes the random matrices, otherwise they come
    from ``seed``.

        >>> r = check_trunc("small", 0, orders=(6, 8), d=10)
        >>> r.key, r.verdict
        ('trunc', 'held')
    """
    b_orders, b_d, b_t = TRUNC_BUDGETS["default" if budget not in TRUNC_BUDGETS else budget]
    model = d3_model() if model is None else model
    orders = b_orders if orders is None else orders
    d = b_d if d is None else d
    t_end = b_t if t_end is None else t_end
    mseed = matrix_seed if matrix_seed is not None else seed
    rows, errors = truncation_vs_flow(model, orders, d, t_end, conv_tol, mseed, max_terms)
    ratios = [c["measured"] / c["bound"] for c in rows
              if c["measured"] is not None and c["bound"] and c["check"].startswith("order")]
    bad = [c for c in rows if c["verdict"] == "not held"]
    worst = max(ratios) if ratios else float("nan")
    detail = "; ".join(f"{c['check']}: {c['note'] or c['verdict']}" for c in bad)
    top = max(errors) if errors else None
    measured = ("max over sub-checks of measured / bound"
                + (f"; error to the flow at order {top}: {errors[top]:.2e}" if top else ""))
    return CheckResult(
        "trunc", "eqs. (11), (13)", "not held" if bad else "held", len(orders), worst, measured,
        bound=1.0,
        expectation=(f"{repr(model)}, d = {d}, t in [0, {t_end:g}]: every order converged "
                     f"(M vs M+2 within {conv_tol:g}), its error to the flow within 10x that, "
                     "and falling with M"),
        detail=detail, data={"rows": rows, "errors": {str(k): v for k, v in errors.items()},
                             "d": int(d), "t_end": float(t_end), "orders": list(map(int, orders))})
