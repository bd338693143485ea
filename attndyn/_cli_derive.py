"""``attndyn derive``: print a truncated moment hierarchy, text or LaTeX.

Tied (paper 003, eq. 11 truncated by eq. 13) or untied (the slow hierarchy, eqs. 31-32,
``--model untied``). With no options: the exactly solvable example of appendix D.3
(K = 2, loss (G_1 - G_2)^2, index 0 trainable, no weight decay) at order 3. This command
stays symbolic: numba loads only for ``--noise`` and ``--finite-d``, which need the model.
"""

from __future__ import annotations

import argparse

from attndyn._cli_common import add_model_options, model_spec


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    add_model_options(p, kinds=("tied", "untied"))
    p.add_argument("--order", type=int, default=3,
                   help="truncation order M: words of length <= M (default 3)")
    p.add_argument("--max-terms", type=int, default=None,
                   help="refuse hierarchies with more terms (default: what fits in the "
                        "available memory); raise it to build a larger one")
    p.add_argument("--latex", action="store_true", help="print LaTeX instead of text")
    p.add_argument("--closed-form", action="store_true",
                   help="write Gamma_kl out as functions of q (tied)")
    p.add_argument("--potential", action="store_true", help="also print Phi(q) and Gamma(q)")
    p.add_argument("--noise", action="store_true",
                   help="also print the mini-batch noise rows of SGD, of order eta*d/B, "
                        "and their coefficients Lambda_kl(q) (tied, L = 1; text only)")
    p.add_argument("--finite-d", action="store_true",
                   help="also print the finite-width terms of the potential, of order "
                        "d^-1/2 and 1/d (tied, polynomial losses of degree <= 4, L = 1)")


def run(command: str, args) -> int:
    spec = model_spec(args)
    if args.max_terms is not None and args.max_terms < 1:
        raise ValueError(f"--max-terms must be an integer >= 1, got {args.max_terms}")
    if spec.kind == "untied":
        return _untied(spec, args)
    return _tied(spec, args)


def _tied_symbolic(spec, args):
    """Structure and potential without numba (``derive`` stays light)."""
    from attndyn.symbolic.hierarchy import check_order, check_tied_size, tied_structure
    from attndyn.symbolic.potential import RouteError, tied_potential

    order = check_order(args.order, "--order")
    # the size is refused before the potential or any word is built
    check_tied_size(spec.K, spec.trainable, order, args.max_terms)
    # exact routes only: derive prints closed forms and must not load numba
    try:
        pot = tied_potential(spec.loss_fn, spec.K, spec.L, C=spec.C_list(), route="exact")
    except RouteError as exc:
        if args.closed_form or args.potential:
            raise ValueError(f"this loss has no closed-form potential ({exc}); print the "
                             "hierarchy without --closed-form/--potential, or integrate it "
                             "(the numeric route)") from None
        pot = None
    return tied_structure(spec.K, spec.trainable, order, max_terms=args.max_terms), pot


def _tied(spec, args) -> int:
    import sympy as sp

    from attndyn.symbolic.printing import closed_form_gamma, hierarchy_latex, hierarchy_text

    if (args.noise or args.finite_d) and args.latex:
        raise ValueError("--noise and --finite-d print text; drop --latex")
    structure, pot = _tied_symbolic(spec, args)
    has_closed = pot is not None and hasattr(pot, "gamma")
    if args.closed_form and not has_closed:
        raise ValueError("--closed-form needs a loss with a closed-form potential")
    gamma = (closed_form_gamma(structure, pot.gamma, pot.q, latex=args.latex)
             if args.closed_form else None)
    K = structure.K
    tail = []  # built first: a refusal comes before any output
    if args.noise or args.finite_d:
        from attndyn._cli_common import model_from_spec
        model = model_from_spec(spec)
        if args.noise:
            from attndyn.numeric.attention.tied.noise import noise_potential, noise_text
            tail += ["# mini-batch noise of SGD (issue 16), first order in eta*d/B, leading "
                     "order in 1/d:", noise_text(model, structure.order),
                     noise_potential(model).text()]
        if args.finite_d:
            from attndyn.numeric.attention.tied.finite_width import finite_width_text
            tail += ["# finite width (issue 16): Phi_d(S) - Phi(q), exact for degree <= 4:",
                     finite_width_text(model)]
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
    header = (f"# tied hierarchy (paper 003, eq. 11) truncated at order {structure.order} "
              f"(eq. 13): K={K}, trainable={','.join(map(str, structure.trainable))}, "
              f"{structure.n_moments} moments, {structure.n_terms} terms")
    print("% " + header[2:] if args.latex else header)
    # streamed: the first lines of a large hierarchy appear at once
    for line in (hierarchy_latex if args.latex else hierarchy_text)(structure, gamma):
        print(line)
    for line in tail:
        print(line)
    return 0


def _untied(spec, args) -> int:
    from attndyn.symbolic import untied as su
    from attndyn.symbolic.potential import RouteError, potential_text, untied_potential

    for flag in ("closed_form", "noise", "finite_d"):
        if getattr(args, flag):
            raise ValueError(f"--{flag.replace('_', '-')} applies to --model tied only"
                             + (" (the untied coefficients depend on the state through "
                                "m*(q); print them with --potential)"
                                if flag == "closed_form" else ""))
    order = su.check_untied_order(args.order, "--order")
    if args.potential:
        try:
            pot = untied_potential(spec.loss_fn, spec.K, spec.L, C=spec.C_list(), route="exact")
        except RouteError as exc:
            raise ValueError(f"this loss has no closed-form potential ({exc}); print the "
                             "hierarchy without --potential") from None
        print(potential_text(pot, latex=args.latex))
        print()
    s = su.untied_structure(spec.K, spec.trainable, order)
    eqs = su.untied_equations(s)
    header = (f"# untied slow hierarchy (paper 003, eqs. 31-32) truncated at order {order} "
              f"(eq. 892): K={spec.K}, trainable={','.join(map(str, spec.trainable))}, {s.n_moments} "
              f"moments, {s.n_terms} terms; beta_k = -psi_k/(tA_k + tB_k) (eqs. 27, 30), "
              "a<r>_kl = dPhi/dq<r>_kl at m = m*(q) (eq. 29)")
    print("% " + header[2:] if args.latex else header)
    print(su.untied_latex(eqs, s) if args.latex else su.untied_text(eqs))
    return 0
