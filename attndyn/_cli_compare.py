"""``attndyn compare``: SGD and theory from one initial condition, compared.

Examples::

    attndyn compare --model tied --loss square --d 200 --batch 256 --eta 0.02 --t-end 1
    attndyn compare --model s --loss h2 --d 150 --batch 150 --eta 0.1 --t-end 1 --seeds 3

The model and run options are those of ``attndyn sgd`` (:mod:`attndyn._cli_sgd`).
"""

from __future__ import annotations

import sys

from attndyn._cli_common import LIMITS, Renamed, check_size, print_json
from attndyn._cli_sgd import add_run_options, prepare

__all__ = ["add_arguments", "run"]


def add_arguments(command: str, p) -> None:
    add_run_options(p, command)
    p.add_argument("--time", choices=("slow", "fast"), default="slow",
                   help="time scale of --t-end and of the output: compare runs on the slow "
                        "time (tau = eta n / d; default slow)")
    p.add_argument("--theory", default=None,
                   help="tied: flow (default), hierarchy or limit (d -> infinity from the "
                        "Wishart law of the initial factors); s: ode (default) or flow; "
                        "untied: flow (default, full finite-d flow), slaved or hierarchy")
    p.add_argument("--seeds", "--n-seeds", dest="seeds", type=int, default=1, action=Renamed,
                   old=("--n-seeds",),
                   help=f"independent SGD runs (SeedSequence.spawn), 1..{LIMITS['seeds'][1]}, "
                        "default 1 (--n-seeds is the deprecated old name)")
    p.add_argument("--plot", default=None, help="save the comparison plot to this file")
    p.add_argument("--correction", default="none",
                   choices=("none", "noise", "noise+finite-d", "finite-d"),
                   help="finite-eta / finite-d correction of the theory with this "
                        "--eta, --batch, --d (default none; which ones a model takes: "
                        "docs/finite-eta.md)")


def run(command: str, args) -> int:
    from attndyn.numeric import compare

    check_size(args.seeds, "seeds")
    check_size(args.d, "d", "compare_d")
    if args.time != "slow":
        raise ValueError("compare runs on the slow time (tau = eta n / d); drop --time fast")
    spec, model, init, t_eval = prepare(args, n_runs=args.seeds)
    cmp = compare(model, init, eta=args.eta, batch=args.batch, t_eval=t_eval, seed=args.seed,
                  theory=args.theory, order=args.order, n_seeds=args.seeds,
                  progress=False if args.no_progress else None, threads=args.threads,
                  correction=args.correction)
    p = cmp.params
    saved = []
    if args.out:  # two labelled trajectories, both readable by attndyn.load_result
        sgd_path = cmp.sgd.save(args.out)
        saved = [sgd_path, cmp.theory.save(sgd_path[:-4] + "_theory.npz")]
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        ax = cmp.plot(names=[n for n in cmp.names if n != "loss"][:6])
        ax.figure.savefig(args.plot, dpi=120)
    if args.json:
        print_json(command, status=cmp.status, message=cmp.message,
                   saved=saved + ([args.plot] if args.plot else []),
                   result={"model": spec.as_dict(), "t": cmp.t, "errors": cmp.errors,
                           "params": p, "assumptions": p.get("assumptions", []),
                           "sgd": {n: cmp.sgd.y[i] for i, n in enumerate(cmp.sgd.names)},
                           "theory": {n: cmp.theory.y[i]
                                      for i, n in enumerate(cmp.theory.names)}})
    else:
        print(f"{p['model']} d={p['d']} B={p['batch']} eta={p['eta']:g} (eta*d/B = "
              f"{p['eta'] * p['d'] / p['batch']:.3g}), theory={p['theory']}, "
              f"correction={p.get('correction', 'none')}, seeds={p['n_seeds']}, "
              f"time: {p['time']}")
        print(cmp.table())
        name, val = cmp.worst()
        print(f"worst: {name} {val:.3e}; {cmp.message}")
        if saved:
            print(f"saved SGD {saved[0]}; theory {saved[1]}")
        if args.plot:
            print(f"saved plot {args.plot}")
    sys.stdout.flush()
    return 0 if cmp.success else 1
