"""``attndyn verify``: paper 003's theorems as numerical checks (issue 18).

Runs the checks registered in :mod:`attndyn.numeric.core.checks` (the suite of
``attndyn.numeric.attention.theorems``), all or ``--only`` a subset, and prints
one table: check, paper reference, instances, worst measured quantity, bound,
verdict. Exit status 0 when every check that applies holds, 1 when one does
not, 2 on bad input (options out of range included: they are refused before
any check runs).

The ``trunc`` check (truncations against the exact matrix flow) is what
``verify`` ran before; its options (``--orders``, ``--d``, ``--t-end``,
``--conv-tol``, ``--max-terms`` and the model options) configure it, and given
without ``--only`` they run it alone, as before. This module imports numba only
inside ``run``.
"""

from __future__ import annotations

import argparse
import math
import sys

from attndyn._cli_common import (LIMITS, add_model_options, check_number, check_size, int_list,
                                 model_from_spec, model_options_given, model_spec, print_json)

TRUNC_OPTIONS = ("orders", "d", "t_end", "conv_tol", "max_terms")
#: the longest horizon of the trunc check (the truncation diverges long before)
MAX_T_END = 100.0

CONVERGENCE_HELP = ("tolerance of the convergence check: the truncation at order M is "
                    "compared with order M + 2 on the moments of length <= 2; above this "
                    "relative difference the order has not converged (default 1e-4)")


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", default=None,
                   help="comma-separated check keys to run (default: all; see --list), "
                        "e.g. thm1,cor1,cor2")
    p.add_argument("--list", action="store_true", help="print the registered checks and exit")
    p.add_argument("--budget", choices=("small", "default", "slow"), default="default",
                   help="instance sizes: small (seconds, what the test suite runs), default "
                        "(the whole suite in minutes on two cores), slow (large instances)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds: checks not started once this is spent are reported 'not "
                        "applicable' (not run); default no limit")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of every random instance (each check gets its own child seed; "
                        "with the trunc options: the seed of its random PSD matrices)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (docs/cli.md)")
    add_model_options(p, kinds=("tied",),
                      title="model of the trunc check (given without --only, it runs alone)")
    g = p.add_argument_group("trunc check (truncation vs matrix flow; given without --only, "
                             "they run that check alone)")
    lo, hi = LIMITS["orders"]
    g.add_argument("--orders", default=None,
                   help=f"comma-separated truncation orders, each {lo}..{hi}, at most "
                        f"{LIMITS['n_orders'][1]} (default 8,12,16)")
    g.add_argument("--t-end", type=float, default=None,
                   help=f"final ODE time, in (0, {MAX_T_END:g}] (default 0.1)")
    g.add_argument("--d", type=int, default=None,
                   help=f"matrix dimension d, {LIMITS['verify_d'][0]}..{LIMITS['verify_d'][1]} "
                        "(default 120)")
    g.add_argument("--conv-tol", type=float, default=None, help=CONVERGENCE_HELP)
    g.add_argument("--max-terms", type=int, default=None,
                   help="refuse hierarchies with more terms (default: what fits in the "
                        "available memory)")


def _trunc_options(args) -> dict | None:
    """The trunc check's options from the command line (``None``: none given), every one
    validated and every hierarchy's size checked here, before any check runs: an input
    error is exit status 2, never a check that has "not held"."""
    given = [k for k in TRUNC_OPTIONS if getattr(args, k) is not None] + model_options_given(args)
    if not given:
        return None
    spec = model_spec(args)
    opts = {}
    if args.max_terms is not None:
        if args.max_terms < 1:
            raise ValueError(f"--max-terms must be an integer >= 1, got {args.max_terms}")
        opts["max_terms"] = args.max_terms
    if args.orders is not None:
        orders = int_list(args.orders, "orders")
        lo, hi = LIMITS["orders"]
        if not orders or len(orders) > LIMITS["n_orders"][1] or not all(lo <= o <= hi
                                                                        for o in orders):
            raise ValueError(f"--orders must list 1 to {LIMITS['n_orders'][1]} integers in "
                             f"[{lo}, {hi}], got {args.orders}")
        if len(set(orders)) < len(orders):  # the same check twice, not a second one
            raise ValueError(f"--orders must list distinct orders, got {args.orders}")
        opts["orders"] = orders
    if args.d is not None:
        opts["d"] = check_size(args.d, "d", "verify_d")
    if args.t_end is not None:
        opts["t_end"] = check_number(args.t_end, "t-end", high=MAX_T_END)
    if args.conv_tol is not None:
        opts["conv_tol"] = check_number(args.conv_tol, "conv-tol")
    # every order is integrated with order M + 2 as its convergence check: both must fit
    from attndyn.symbolic.hierarchy import check_tied_size

    for M in opts.get("orders", (8, 12, 16)):
        try:
            check_tied_size(spec.K, spec.trainable, M + 2, args.max_terms)
        except ValueError as exc:
            raise ValueError(f"--orders {M} (checked against order {M + 2}): {exc}") from None
    opts["model"] = model_from_spec(spec)
    return opts


def _list(args, known) -> int:
    rows = [(k, ref, title) for k, (ref, title) in known.items()]
    if args.json:
        print_json("verify", status=0, message=f"{len(rows)} registered checks",
                   result={"setting": {"list": True},
                           "checks": [{"check": k, "paper": r, "title": t} for k, r, t in rows]})
        return 0
    w0 = max([len("check")] + [len(k) for k, _, _ in rows]) + 2
    w1 = max([len("paper")] + [len(r) for _, r, _ in rows]) + 2
    print(f"{'check':{w0}}{'paper':{w1}}title")
    for k, ref, title in rows:
        print(f"{k:{w0}}{ref:{w1}}{title}")
    return 0


def run(command: str, args) -> int:
    from attndyn.numeric.core.checks import checks_table, registered, run_checks

    check_size(args.seed, "seed")
    check_number(args.time_budget, "time-budget")
    known = registered()
    if args.list:
        return _list(args, known)
    only = None
    if args.only is not None:
        only = [k.strip() for k in args.only.split(",") if k.strip()]
        if not only:
            raise ValueError("--only must name at least one check (see --list)")
        unknown = [k for k in only if k not in known]
        if unknown:
            raise ValueError(f"--only: unknown check(s) {', '.join(unknown)}; known: "
                             f"{', '.join(known)}")
    trunc = _trunc_options(args)
    options = {}
    if trunc is not None:
        if only is None:
            only = ["trunc"]  # the pre-suite `attndyn verify --orders ...`: that check alone
        elif "trunc" not in only:
            raise ValueError("--orders, --d, --t-end, --conv-tol, --max-terms and the model "
                             "options configure the trunc check: add trunc to --only")
        trunc["matrix_seed"] = args.seed
        options["trunc"] = trunc

    def progress(r):
        if sys.stderr.isatty():
            print(f"[verify] {r.key}: {r.verdict} ({r.wall_s:.1f} s)", file=sys.stderr)

    results = run_checks(only, budget=args.budget, seed=args.seed,
                         time_budget_s=args.time_budget, progress=progress, options=options)
    failed = [r.key for r in results if r.verdict == "not held"]
    total = sum(r.wall_s for r in results if math.isfinite(r.wall_s))
    if args.json:
        held = sum(r.verdict == "held" for r in results)
        print_json(command, status=1 if failed else 0,
                   message=(f"{held} held, {len(failed)} not held"
                            + (f": {', '.join(failed)}" if failed else "")),
                   result={"setting": {"budget": args.budget, "seed": args.seed, "only": only,
                                       "time_budget_s": args.time_budget},
                           "checks": [r.as_dict() for r in results], "wall_s": total})
    else:
        from attndyn.numeric.attention.theorems.truncations import rows_table
        for r in results:
            if r.key == "trunc" and r.data.get("rows"):
                print(f"# trunc: {r.expectation.split(':')[0]}; random PSD matrices, spectra "
                      "in [0, 1]")
                print(rows_table(r.data["rows"]))
                print()
        print(f"# attndyn verify: budget {args.budget}, seed {args.seed}; total {total:.1f} s")
        print(checks_table(results))
    return 1 if failed else 0
