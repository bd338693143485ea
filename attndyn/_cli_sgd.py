"""``attndyn sgd`` and ``attndyn compare``: finite-d SGD alone, or against theory.

Examples::

    attndyn sgd --model tied --loss square --d 200 --batch 256 --eta 0.02 --T 1 --out run.npz
    attndyn compare --model tied --loss square --d 200 --batch 256 --eta 0.02 --T 1
    attndyn compare --model s --loss h2 --d 150 --batch 150 --eta 0.1 --T 1 --n-seeds 3

Losses: see ``attndyn._cli_common.LOSS_HELP`` (the same ``--loss`` syntax as
``attndyn derive``): presets ``square`` (``(G1 - G2)^2``) and ``linear``, ``h2``,
``h3`` (teacher-student ``(F(G1) - F(G2))^2 / 2``), named specs, or an
expression in ``G[i,j,k]``.
"""

from __future__ import annotations

import json
import math
import sys

__all__ = ["add_arguments", "run", "parse_loss"]

def add_arguments(command_name: str, parser) -> None:
    p = parser
    p.add_argument("--model", choices=("tied", "untied", "s"), default="tied",
                   help="parameterisation: tied W W^T, untied U V^T, or direct S (default tied)")
    from attndyn._cli_common import LOSS_HELP
    p.add_argument("--loss", default="square", help=LOSS_HELP + " (default square)")
    p.add_argument("--K", type=int, default=2, help="number of indices (default 2)")
    p.add_argument("--trainable", default="0",
                   help="comma-separated trainable indices, 0-based (default 0)")
    p.add_argument("--L", type=int, default=1, help="number of tokens (default 1)")
    p.add_argument("--C", default=None, help="token covariance, rows separated by ';' "
                                             "(e.g. '1,0.3;0.3,1'); identity by default")
    p.add_argument("--weight-decay", type=float, default=0.0, help="gamma >= 0 (default 0)")
    p.add_argument("--d", type=int, default=200, help="dimension d (default 200)")
    p.add_argument("--width", default=None,
                   help="student/teacher widths d_k (tied, untied), one value or one per index")
    p.add_argument("--scale", default="0.5",
                   help="initial scale(s), one value or one per index (default 0.5)")
    p.add_argument("--symmetric", action="store_true", help="symmetric initial S (model s)")
    p.add_argument("--eta", type=float, required=True, help="learning rate > 0")
    p.add_argument("--batch", type=int, default=256, help="mini-batch size B >= 1 (default 256)")
    p.add_argument("--t-end", "--T", dest="t_end", type=float, default=1.0,
                   help="horizon in the model's ODE time (tied t = 4 eta n/d, S and untied "
                        "slow tau = eta n/d, untied fast t = eta n; default 1; --T is the old "
                        "name)")
    p.add_argument("--n-out", type=int, default=11, help="number of checkpoints (default 11)")
    p.add_argument("--seed", type=int, default=0, help="SGD seed (default 0)")
    p.add_argument("--init-seed", type=int, default=None,
                   help="seed of the Gaussian initialisation (default: --seed)")
    p.add_argument("--order", type=int, default=None,
                   help="longest word recorded (tied, untied; default 2)")
    p.add_argument("--time", choices=("slow", "fast"), default="slow",
                   help="untied time scale of --t-end and of the output (default slow)")
    p.add_argument("--out", default=None, help="save the result (.npz)")
    p.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--threads", type=int, default=1,
                   help="numba threads for the non-BLAS part of a step (default 1; BLAS "
                        "threads follow OPENBLAS_NUM_THREADS); results do not depend on it")
    if command_name == "compare":
        p.add_argument("--theory", default=None,
                       help="tied: flow (default), hierarchy or limit (d -> infinity from the "
                            "Wishart law of the initial factors); s: ode (default) or flow; "
                            "untied: flow (default, full finite-d flow), slaved or hierarchy")
        p.add_argument("--n-seeds", type=int, default=1,
                       help="independent SGD runs (SeedSequence.spawn), default 1")
        p.add_argument("--plot", default=None, help="save the comparison plot to this file")
        p.add_argument("--correction", default="none",
                       choices=("none", "noise", "noise+finite-d", "finite-d"),
                       help="finite-eta / finite-d correction of the theory with this "
                            "--eta, --batch, --d (default none; which ones a model takes: "
                            "docs/finite-eta.md)")


def _floats(text: str, name: str) -> list:
    try:
        return [float(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated numbers, got {text!r}") from None


def parse_loss(spec: str, K: int, L: int):
    """A loss callable ``G -> sympy expression`` (shared with ``attndyn derive``)."""
    from attndyn._cli_common import loss_from_option
    return loss_from_option(spec, K, L)


def _model(args):
    import attndyn
    if args.K < 1:
        raise ValueError(f"--K must be >= 1, got {args.K}")
    if args.L < 1:
        raise ValueError(f"--L must be >= 1, got {args.L}")
    try:
        trainable = [int(x) for x in str(args.trainable).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"--trainable must be comma-separated ints, got {args.trainable!r}") from None
    C = None
    if args.C is not None:
        C = [_floats(row, "C") for row in str(args.C).split(";")]
    loss = parse_loss(args.loss, args.K, args.L)
    cls = {"tied": attndyn.TiedModel, "untied": attndyn.UntiedModel, "s": attndyn.SModel}[args.model]
    return cls(args.K, trainable, loss, L=args.L, C=C, weight_decay=args.weight_decay)


def _init(model, args):
    from attndyn.numeric.attention.training import gaussian_init
    scale = _floats(args.scale, "scale")
    scale = scale[0] if len(scale) == 1 else scale
    kw = {"scale": scale, "seed": args.seed if args.init_seed is None else args.init_seed}
    if args.width is not None:
        if args.model == "s":
            raise ValueError("--width does not apply to --model s (S_k is d x d)")
        w = [int(x) for x in _floats(args.width, "width")]
        kw["width"] = w[0] if len(w) == 1 else w
    if args.symmetric:
        if args.model != "s":
            raise ValueError("--symmetric applies to --model s only")
        kw["symmetric"] = True
    if args.d < 2:
        raise ValueError(f"--d must be >= 2, got {args.d}")
    return gaussian_init(model, args.d, **kw)


def run(command_name: str, args) -> int:
    import numpy as np

    from attndyn.numeric.core.labelled import jsonable

    if args.n_out < 1:
        raise ValueError(f"--n-out must be >= 1, got {args.n_out}")
    if not (args.t_end >= 0 and math.isfinite(args.t_end)):
        raise ValueError(f"--t-end must be a finite number >= 0, got {args.t_end}")
    model = _model(args)
    init = _init(model, args)
    t_eval = np.linspace(0.0, args.t_end, args.n_out)
    progress = False if args.no_progress else None
    if command_name == "sgd":
        from attndyn.numeric.attention.training import sgd
        kw = {"time": args.time} if args.model == "untied" else {}
        res = sgd(model, init, eta=args.eta, batch=args.batch, t_eval=t_eval, seed=args.seed,
                  order=args.order, progress=progress, threads=args.threads, **kw)
        saved = res.save(args.out) if args.out else None
        if args.json:
            print(json.dumps({"status": res.status, "message": res.message, "t": res.t.tolist(),
                              "observables": {n: res.y[i].tolist() for i, n in enumerate(res.names)},
                              "params": jsonable(res.params), "seed": jsonable(res.seed),
                              "saved": saved}))
            return 0 if res.success else 1
        print(res.message)
        print(f"time: {res.params['time']}; {res.params['n_steps']} steps; "
              f"wall {res.diagnostics['wall_s']:.2f} s")
        named = [n for n in res.names if not n.startswith("mu_")]
        words = [n for n in res.names if n.startswith("mu_")]
        show = (words[:8] + named)[:24] if args.model == "tied" else (named + words[:4])[:24]
        print(f"{'observable':<14}{'start':>14}{'end':>14}")
        for n in show:
            y = res.y[res.names.index(n)]
            if y.size:
                print(f"{n:<14}{y[0]:>14.6g}{y[-1]:>14.6g}")
        if saved:
            print(f"saved {saved}")
        return 0 if res.success else 1
    from attndyn.numeric.attention.compare import compare
    if args.time != "slow":
        raise ValueError("compare runs on the slow time (tau = eta n / d); drop --time fast")
    cmp = compare(model, init, eta=args.eta, batch=args.batch, t_eval=t_eval, seed=args.seed,
                  theory=args.theory, order=args.order, n_seeds=args.n_seeds, progress=progress,
                  threads=args.threads, correction=args.correction)
    p = cmp.params
    saved = None
    if args.out:  # two labelled trajectories, both readable by attndyn.load_result
        sgd_path = cmp.sgd.save(args.out)
        saved = [sgd_path, cmp.theory.save(sgd_path[:-4] + "_theory.npz")]
    if args.json:
        print(json.dumps({"status": cmp.status, "message": cmp.message, "t": cmp.t.tolist(),
                          "errors": jsonable(cmp.errors), "params": jsonable(p),
                          "assumptions": cmp.params.get("assumptions", []),
                          "sgd": {n: cmp.sgd.y[i].tolist() for i, n in enumerate(cmp.sgd.names)},
                          "theory": {n: cmp.theory.y[i].tolist()
                                     for i, n in enumerate(cmp.theory.names)},
                          "saved": saved}))
    else:
        _print_comparison(cmp, p, saved)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        ax = cmp.plot(names=[n for n in cmp.names if n != "loss"][:6])
        ax.figure.savefig(args.plot, dpi=120)
        if not args.json:
            print(f"saved plot {args.plot}")
    sys.stdout.flush()
    return 0 if cmp.success else 1


def _print_comparison(cmp, p, saved):
    print(f"{p['model']} d={p['d']} B={p['batch']} eta={p['eta']:g} (eta*d/B = "
          f"{p['eta'] * p['d'] / p['batch']:.3g}), theory={p['theory']}, "
          f"correction={p.get('correction', 'none')}, seeds={p['n_seeds']}, time: {p['time']}")
    print(cmp.table())
    name, val = cmp.worst()
    print(f"worst: {name} {val:.3e}; {cmp.message}")
    if saved:
        print(f"saved SGD {saved[0]}; theory {saved[1]}")
