"""``attndyn derive`` and ``attndyn integrate`` (tied attention); ``attndyn verify`` is in
``attndyn._cli_verify`` and reuses the model options here.

With no options each command runs the exactly solvable example of paper 003,
appendix D.3: K = 2, loss (G_1 - G_2)^2, index 0 (the student) trainable,
no weight decay. This module imports numba only inside ``run``.
"""

from __future__ import annotations

import argparse
import math

def _int_list(text: str, name: str) -> list:
    from attndyn._cli_common import int_list
    return int_list(text, name)


def _model_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--K", type=int, default=2, help="number of indices (default 2)")
    g.add_argument("--trainable", default="0",
                   help="comma-separated trainable indices, 0-based (default 0)")
    g.add_argument("--L", type=int, default=1, help="number of tokens (default 1)")
    from attndyn._cli_common import LOSS_HELP
    g.add_argument("--loss", default="square", help=LOSS_HELP + " (default square: the D.3 example)")
    g.add_argument("--weight-decay", type=float, default=0.0, help="gamma >= 0 (default 0)")


DEFAULT_OUT = "attndyn-result.npz"


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    _model_arguments(p)
    if command in ("derive", "integrate"):
        from attndyn._cli_untied import add_untied_arguments
        add_untied_arguments(command, p)  # --model tied|untied and the untied initial state
    if command in ("derive", "integrate"):
        p.add_argument("--max-terms", type=int, default=None,
                       help="refuse hierarchies with more terms (default: what fits in the "
                            "available memory); raise it to build a larger one")
    if command == "derive":
        p.add_argument("--order", type=int, default=3, help="truncation order M (default 3)")
        p.add_argument("--latex", action="store_true", help="print LaTeX instead of text")
        p.add_argument("--closed-form", action="store_true",
                       help="write Gamma_kl out as functions of q")
        p.add_argument("--potential", action="store_true",
                       help="also print Phi(q) and Gamma(q)")
        p.add_argument("--noise", action="store_true",
                       help="also print the mini-batch noise rows of SGD, of order eta*d/B, "
                            "and their coefficients Lambda_kl(q) (L = 1; text only)")
        p.add_argument("--finite-d", action="store_true",
                       help="also print the finite-width terms of the potential, of order "
                            "d^-1/2 and 1/d (polynomial losses of degree <= 4, L = 1)")
    elif command == "integrate":
        p.add_argument("--order", type=int, default=12, help="truncation order M (default 12)")
        p.add_argument("--t-end", type=float, default=0.2, help="final ODE time (default 0.2)")
        p.add_argument("--n-out", type=int, default=11, help="number of output times (default 11)")
        p.add_argument("--init", default="wishart(0.5,0.5),scalar(1)",
                       help="one initialisation per index: wishart(sigma,aspect) or scalar(c) "
                            "(large-d limit moments; default 'wishart(0.5,0.5),scalar(1)')")
        p.add_argument("--rtol", type=float, default=1e-10,
                       help="relative tolerance of the integrator (default 1e-10)")
        p.add_argument("--atol", type=float, default=1e-12,
                       help="absolute tolerance of the integrator (default 1e-12)")
        p.add_argument("--conv-tol", type=float, default=1e-6,
                       help="tolerance of the convergence check (order M vs M-2; M+2 below "
                            "order 4)")
        p.add_argument("--method", choices=("auto", "truncation", "limit"), default="auto",
                       help="auto (default): the truncation while it has converged, the "
                            "d -> infinity limit of --init beyond; truncation: eq. (13) only; "
                            "limit: the d -> infinity solver only")
        p.add_argument("--correction", choices=("none", "noise"), default="none",
                       help="noise: add the mini-batch noise rows of SGD with --eta, --batch "
                            "and width --d (default 100; first order in eta*d/B; the "
                            "truncation only)")
        p.add_argument("--eta", type=float, default=None, help="SGD learning rate (--correction)")
        p.add_argument("--batch", type=int, default=None, help="SGD batch size (--correction)")
        p.add_argument("--out", default=None,
                       help="result file (.npz); without it the result goes to "
                            "attndyn-result.npz, and only when the run succeeds")
        p.add_argument("--json", action="store_true", help="print the result as JSON")


def _loss(spec: str, K: int, L: int):
    from attndyn._cli_common import loss_from_option
    return loss_from_option(spec, K, L)


def _parse_init(text: str, K: int):
    from fractions import Fraction

    from attndyn.symbolic.initial import FreeInit, scalar, wishart

    specs = []
    depth = 0
    cur = ""
    parts = []
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for part in parts:
        part = part.strip()
        name, _, rest = part.partition("(")
        args = [a for a in rest.rstrip(")").split(",") if a.strip()]
        try:
            vals = [Fraction(a.strip()) for a in args]
        except ValueError:
            raise ValueError(f"--init: cannot read numbers in {part!r}") from None
        if name == "wishart" and len(vals) in (1, 2):
            specs.append(wishart(*vals))
        elif name == "scalar" and len(vals) == 1:
            specs.append(scalar(vals[0]))
        else:
            raise ValueError(f"--init entries must be wishart(sigma[,aspect]) or scalar(c), "
                             f"got {part!r}")
    if len(specs) != K:
        raise ValueError(f"--init needs one entry per index (K = {K}), got {len(specs)}")
    return FreeInit(specs)


def _build_model(args):
    import attndyn
    from attndyn.symbolic.hierarchy import check_K

    check_K(args.K, "--K")
    if args.L < 1:
        raise ValueError(f"--L must be >= 1, got {args.L}")
    trainable = _int_list(args.trainable, "trainable")
    loss = _loss(args.loss, args.K, args.L)
    return attndyn.TiedModel(args.K, trainable, loss, L=args.L, weight_decay=args.weight_decay)


def _build_symbolic(args):
    """Structure and potential without numba (``derive`` stays light)."""
    from attndyn.symbolic.hierarchy import check_order, check_trainable, tied_structure
    from attndyn.symbolic.hierarchy import check_K, check_tied_size
    from attndyn.symbolic.potential import tied_potential

    check_K(args.K, "--K")
    if args.L < 1:
        raise ValueError(f"--L must be >= 1, got {args.L}")
    tr = check_trainable(_int_list(args.trainable, "trainable"), args.K)
    order = check_order(args.order, "--order")
    # the size is refused before the potential or any word is built
    check_tied_size(args.K, tr, order, args.max_terms)
    from attndyn.symbolic.potential import RouteError

    # exact routes only: derive prints closed forms and must not load numba
    try:
        pot = tied_potential(_loss(args.loss, args.K, args.L), args.K, args.L, route="exact")
    except RouteError as exc:
        if args.closed_form or args.potential:
            raise ValueError(f"this loss has no closed-form potential ({exc}); print the "
                             "hierarchy without --closed-form/--potential, or integrate it "
                             "(the numeric route)") from None
        pot = None
    return tied_structure(args.K, tr, order, max_terms=args.max_terms), pot


def run(command: str, args) -> int:
    if getattr(args, "model", "tied") == "untied":
        from attndyn._cli_untied import run_untied
        return run_untied(command, args)
    if command == "derive":
        return _derive(args)
    if command == "integrate":
        return _integrate(args)
    raise ValueError(f"unknown command {command!r}")


def _derive(args) -> int:
    import sympy as sp

    from attndyn.symbolic.printing import closed_form_gamma, hierarchy_latex, hierarchy_text

    structure, pot = _build_symbolic(args)
    has_closed = pot is not None and hasattr(pot, "gamma")
    if args.closed_form and not has_closed:
        raise ValueError("--closed-form needs a loss with a closed-form potential")
    gamma = (closed_form_gamma(structure, pot.gamma, pot.q, latex=args.latex)
             if args.closed_form else None)
    K = structure.K
    if args.potential and has_closed:
        if args.latex:
            print(rf"\Phi(q) = {sp.latex(pot.phi)}")
            print(rf"\Gamma(q) = {sp.latex(pot.gamma)}")
        else:
            print(f"Phi(q) = {sp.sstr(pot.phi)}")
            for k in range(K):
                for l in range(k, K):
                    print(f"Gamma_{k + 1}{l + 1} = {sp.sstr(pot.gamma[k, l])}")
        print()
    header = (f"# tied hierarchy (paper 003, eq. 11) truncated at order {structure.order} (eq. 13): "
              f"K={K}, trainable={[k for k in structure.trainable]}, "
              f"{structure.n_moments} moments, {structure.n_terms} terms")
    if (args.noise or args.finite_d) and args.latex:
        raise ValueError("--noise and --finite-d print text; drop --latex")
    tail = []  # built first: a refusal comes before any output
    if args.noise:
        from attndyn.numeric.attention.noise import noise_potential, noise_text
        model = _build_model(args)
        tail += ["# mini-batch noise of SGD (issue 16), first order in eta*d/B, leading order "
                 "in 1/d:", noise_text(model, structure.order), noise_potential(model).text()]
    if args.finite_d:
        from attndyn.numeric.attention.finite_width import finite_width_text
        tail += ["# finite width (issue 16): Phi_d(S) - Phi(q), exact for degree <= 4:",
                 finite_width_text(_build_model(args))]
    print("% " + header[2:] if args.latex else header)
    # streamed: the first lines of a large hierarchy appear at once
    for line in (hierarchy_latex if args.latex else hierarchy_text)(structure, gamma):
        print(line)
    for line in tail:
        print(line)
    return 0


def _integrate(args) -> int:
    import numpy as np

    if not (args.t_end > 0 and math.isfinite(args.t_end)):
        raise ValueError(f"--t-end must be a finite number > 0, got {args.t_end}")
    if args.n_out < 1:
        raise ValueError(f"--n-out must be >= 1, got {args.n_out}")
    model = _build_model(args)
    init = _parse_init(args.init, model.K)
    h = model.hierarchy(args.order, max_terms=args.max_terms)
    t_eval = np.linspace(0.0, args.t_end, args.n_out)
    extra = {}
    if args.correction == "noise":
        missing = [n for n in ("eta", "batch") if getattr(args, n) is None]
        if missing:
            raise ValueError("--correction noise needs " + ", ".join(f"--{n}" for n in missing))
        if args.method == "limit":
            raise ValueError("--correction noise runs the truncation; drop --method limit")
        extra = {"correction": "noise", "eta": args.eta, "batch": args.batch, "d": args.d,
                 "method": "truncation"}
    elif any(getattr(args, n) is not None for n in ("eta", "batch")):
        raise ValueError("--eta and --batch go with --correction noise")
    res = h.integrate(init, t_eval, rtol=args.rtol, atol=args.atol, check="auto",
                      conv_tol=args.conv_tol, **({"method": args.method} if not extra
                                                  else extra))
    res.params["init"] = args.init
    # a failed run overwrites nothing unless the user named the file
    path = res.save(args.out or DEFAULT_OUT) if (args.out or res.success) else None
    if args.json:
        import json

        from attndyn.numeric.core.labelled import jsonable
        print(json.dumps({"status": res.status, "message": res.message, "t": res.t.tolist(),
                          "moments": {n: res.y[i].tolist() for i, n in enumerate(res.names)
                                      if len(res.words[i]) <= 2},
                          "n_moments": h.n_moments, "n_terms": h.n_terms,
                          "params": jsonable(res.params), "saved": path}))
        return 0 if res.success else 1
    shown = [w for w in h.words if len(w) <= 2][:6]
    names = [h.names[h.index(w)] for w in shown]
    print(f"# {model!r}, order {args.order}: {h.n_moments} moments, {h.n_terms} terms")
    print("t".rjust(10) + "".join(n.rjust(14) for n in names))
    for j, t in enumerate(res.t):
        print(f"{t:10.4g}" + "".join(f"{res.moment(w)[j]:14.8g}" for w in shown))
    print(f"# status {res.status}: {res.message}")
    print(f"# saved {path}" if path else "# not saved (the run did not succeed; give --out to "
          "save it anyway)")
    return 0 if res.success else 1
