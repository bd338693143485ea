"""``attndyn verify``: paper 003's theorems as numerical checks (issue 18).

Runs the checks registered in :mod:`attndyn.numeric.core.checks` (the suite of
``attndyn.numeric.attention.theorems``), all or ``--only`` a subset, and prints
one table: check, paper reference, instances, worst measured quantity, bound,
verdict. Exit status 0 when every check that applies holds, 1 when one does
not, 2 on bad input.

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

TRUNC_OPTIONS = ("orders", "d", "t_end", "conv_tol", "max_terms", "K", "trainable", "L",
                 "loss", "weight_decay")
_MODEL_DEFAULTS = {"K": 2, "trainable": "0", "L": 1, "loss": "square", "weight_decay": 0.0}


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
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    from attndyn._cli_tied import _model_arguments
    _model_arguments(p)
    g = p.add_argument_group("trunc check (truncation vs matrix flow; given without --only, "
                             "they run that check alone)")
    g.add_argument("--orders", default=None,
                   help="comma-separated truncation orders (default 8,12,16)")
    g.add_argument("--t-end", type=float, default=None, help="final ODE time (default 0.1)")
    g.add_argument("--d", type=int, default=None, help="matrix dimension (default 120)")
    g.add_argument("--conv-tol", type=float, default=None,
                   help="a truncation has converged when orders M and M+2 agree to this "
                        "(relative, on the moments of length <= 2; default 1e-4)")
    g.add_argument("--max-terms", type=int, default=None,
                   help="refuse hierarchies with more terms (default: what fits in the "
                        "available memory)")
    # None marks "not given": the model options then configure nothing
    p.set_defaults(**{k: None for k in _MODEL_DEFAULTS})


def _trunc_options(args) -> dict | None:
    """The trunc check's options from the command line (``None``: none given)."""
    given = [k for k in TRUNC_OPTIONS if getattr(args, k) is not None]
    if not given:
        return None
    from attndyn._cli_common import int_list
    from attndyn._cli_tied import _build_model

    ns = argparse.Namespace(**{k: (getattr(args, k) if getattr(args, k) is not None else v)
                               for k, v in _MODEL_DEFAULTS.items()})
    opts = {"model": _build_model(ns)}
    if args.orders is not None:
        orders = int_list(args.orders, "orders")
        if not orders or min(orders) < 1:
            raise ValueError("--orders must list orders >= 1")
        opts["orders"] = orders
    if args.d is not None:
        if args.d < 2:
            raise ValueError(f"--d must be >= 2, got {args.d}")
        opts["d"] = args.d
    if args.t_end is not None:
        if not (args.t_end > 0 and math.isfinite(args.t_end)):
            raise ValueError(f"--t-end must be a finite number > 0, got {args.t_end}")
        opts["t_end"] = args.t_end
    if args.conv_tol is not None:
        if not (args.conv_tol > 0 and math.isfinite(args.conv_tol)):
            raise ValueError(f"--conv-tol must be a finite number > 0, got {args.conv_tol}")
        opts["conv_tol"] = args.conv_tol
    if args.max_terms is not None:
        if args.max_terms < 1:
            raise ValueError(f"--max-terms must be >= 1, got {args.max_terms}")
        opts["max_terms"] = args.max_terms
    return opts


def run(command: str, args) -> int:
    import json

    from attndyn.numeric.core.checks import checks_table, registered, run_checks

    if args.seed < 0:
        raise ValueError(f"--seed must be an int >= 0, got {args.seed}")
    if args.time_budget is not None and not (args.time_budget > 0
                                             and math.isfinite(args.time_budget)):
        raise ValueError(f"--time-budget must be a finite number of seconds > 0, "
                         f"got {args.time_budget}")
    known = registered()
    if args.list:
        if args.json:
            print(json.dumps({k: {"paper": r, "title": t} for k, (r, t) in known.items()}))
        else:
            for k, (ref, title) in known.items():
                print(f"{k:10}{ref:24}{title}")
        return 0
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
    if args.json:
        print(json.dumps({"setting": {"budget": args.budget, "seed": args.seed, "only": only,
                                      "time_budget_s": args.time_budget},
                          "checks": [r.as_dict() for r in results], "ok": not failed}))
    else:
        from attndyn.numeric.attention.theorems.trunc import rows_table
        for r in results:
            if r.key == "trunc" and r.data.get("rows"):
                print(f"# trunc: {r.expectation.split(':')[0]}; random PSD matrices, spectra "
                      "in [0, 1]")
                print(rows_table(r.data["rows"]))
                print()
        print(f"# attndyn verify: budget {args.budget}, seed {args.seed}; total "
              f"{sum(r.wall_s for r in results if math.isfinite(r.wall_s)):.1f} s")
        print(checks_table(results))
    return 1 if failed else 0
