"""``attndyn derive --model untied`` and ``attndyn integrate --model untied``.

The untied slow hierarchy (paper 003, eqs. 31-32) shares the tied commands'
option names (``--K``, ``--trainable``, ``--L``, ``--loss``, ``--weight-decay``,
``--order``, ``--latex``, ``--potential``, ``--t-end``, ``--n-out``, ``--rtol``,
``--atol``, ``--conv-tol``, ``--out``). Its initial state is a pair of finite-d
Gaussian factors per index (``--d``, ``--seed``, ``--scale``): the untied
theory needs the means ``m_k(0)``, which select the critical root, and the
exact moments of the pairs. ``derive`` stays symbolic (no numba).
"""

from __future__ import annotations

import argparse
import math


def add_untied_arguments(command: str, p: argparse.ArgumentParser) -> None:
    """``--model`` for derive/integrate, and the untied initial state for integrate."""
    p.add_argument("--model", choices=("tied", "untied"), default="tied",
                   help="tied S = W W^T (default) or untied S = U V^T (paper 003, section 4)")
    if command == "integrate":
        g = p.add_argument_group("untied initial state (--model untied)")
        g.add_argument("--d", type=int, default=100,
                       help="dimension d: of the Gaussian pairs (U_k, V_k) with --model "
                            "untied; of eta*d/B with --correction noise (default 100)")
        g.add_argument("--seed", type=int, default=0, help="seed of the pairs (default 0)")
        g.add_argument("--scale", default="1",
                       help="entry scale per index, comma-separated (default 1: tA ~ tB ~ 1)")


def _loss(spec, K, L):
    from attndyn._cli_common import loss_from_option
    return loss_from_option(spec, K, L)


def _trainable(text, K):
    from attndyn._cli_common import int_list
    from attndyn.symbolic.hierarchy import check_trainable
    return check_trainable(int_list(text, "trainable"), K)


def _check_common(args):
    from attndyn.symbolic.hierarchy import check_K
    check_K(args.K, "--K")
    if args.L < 1:
        raise ValueError(f"--L must be >= 1, got {args.L}")


def run_untied(command: str, args) -> int:
    if getattr(args, "closed_form", False):
        raise ValueError("--closed-form applies to --model tied only (the untied coefficients "
                         "depend on the state through m*(q); print them with --potential)")
    if command == "derive":
        return _derive(args)
    if command == "integrate":
        if getattr(args, "method", "auto") not in ("auto", "truncation"):
            raise ValueError("--method limit applies to --model tied only")
        return _integrate(args)
    raise ValueError(f"--model untied applies to derive, integrate and compare, not {command}")


def _derive(args) -> int:
    from attndyn.symbolic import untied as su
    from attndyn.symbolic.potential import RouteError, potential_text, untied_potential

    _check_common(args)
    tr = _trainable(args.trainable, args.K)
    order = su.check_untied_order(args.order, "--order")
    loss = _loss(args.loss, args.K, args.L)
    if args.potential:
        try:
            pot = untied_potential(loss, args.K, args.L, route="exact")
        except RouteError as exc:
            raise ValueError(f"this loss has no closed-form potential ({exc}); print the "
                             "hierarchy without --potential") from None
        print(potential_text(pot, latex=args.latex))
        print()
    s = su.untied_structure(args.K, tr, order)
    eqs = su.untied_equations(s)
    header = (f"# untied slow hierarchy (paper 003, eqs. 31-32) truncated at order {order} "
              f"(eq. 892): K={args.K}, trainable={list(tr)}, {s.n_moments} moments, "
              f"{s.n_terms} terms; beta_k = -psi_k/(tA_k + tB_k) (eqs. 27, 30), "
              "a<r>_kl = dPhi/dq<r>_kl at m = m*(q) (eq. 29)")
    print("% " + header[2:] if args.latex else header)
    print(su.untied_latex(eqs, s) if args.latex else su.untied_text(eqs))
    return 0


def _integrate(args) -> int:
    import numpy as np

    import attndyn

    _check_common(args)
    if not (args.t_end > 0 and math.isfinite(args.t_end)):
        raise ValueError(f"--t-end must be a finite number > 0, got {args.t_end}")
    if args.n_out < 1:
        raise ValueError(f"--n-out must be >= 1, got {args.n_out}")
    if args.d < 2:
        raise ValueError(f"--d must be >= 2, got {args.d}")
    try:
        scales = [float(x) for x in str(args.scale).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--scale must be comma-separated numbers, got {args.scale!r}") from None
    if len(scales) == 1:
        scales = scales * args.K
    if len(scales) != args.K or any(not (s >= 0 and math.isfinite(s)) for s in scales):
        raise ValueError(f"--scale needs 1 or K = {args.K} finite numbers >= 0")
    model = attndyn.UntiedModel(args.K, list(_trainable(args.trainable, args.K)),
                                _loss(args.loss, args.K, args.L), L=args.L,
                                weight_decay=args.weight_decay)
    pairs = model.gaussian_init(args.d, seed=args.seed, scale=scales)
    h = model.hierarchy(args.order)
    t_eval = np.linspace(0.0, args.t_end, args.n_out)
    res = h.integrate(pairs, t_eval, rtol=args.rtol, atol=args.atol, conv_tol=args.conv_tol)
    shown = [n for n in res.names if n.startswith(("m_", "tA_", "tB_", "q1_", "q2_"))]
    path = res.save(args.out or "attndyn-result.npz") if (args.out or res.success) else None
    if getattr(args, "json", False):
        import json

        from attndyn.numeric.core.labelled import jsonable
        print(json.dumps({"status": res.status, "message": res.message, "t": res.t.tolist(),
                          "observables": {n: res.observable(n).tolist() for n in shown},
                          "params": jsonable(res.params), "saved": path}))
        return 0 if res.success else 1
    print(f"# {model!r}, order {args.order}: {h.n_moments} moments, {h.n_terms} terms; "
          f"Gaussian pairs d = {args.d}, seed {args.seed}; slow time tau = eta n / d")
    print(f"# root: {res.diagnostics.get('root')}, boundary layer t = "
          f"{res.diagnostics.get('t_boundary_layer')}")
    print(f"# status {res.status}: {res.message}")
    print(f"{'observable':<14}{'tau=0':>14}{f'tau={res.t[-1]:.4g}' if res.t.size else '':>14}")
    for n in shown:
        y = res.observable(n)
        if y.size:
            print(f"{n:<14}{y[0]:>14.6g}{y[-1]:>14.6g}")
    print(f"saved {path}" if path else "not saved (the run did not succeed; give --out to save "
          "it anyway)")
    return 0 if res.success else 1
