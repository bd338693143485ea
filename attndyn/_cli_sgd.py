"""``attndyn sgd``: finite-d online SGD of one model, saved as a labelled result.

Examples::

    attndyn sgd --model tied --loss square --d 200 --batch 256 --eta 0.02 --t-end 1 --out run.npz
    attndyn sgd --model s --loss h2 --d 150 --batch 150 --eta 0.1 --t-end 1 --json

The run options (initial weights, learning rate, batch, horizon, checkpoints) are declared
here once and shared with ``attndyn compare`` (:func:`add_run_options`, :func:`prepare`).
Losses: see ``attndyn._cli_common.LOSS_HELP``.
"""

from __future__ import annotations

import math

from attndyn._cli_common import (LIMITS, MAX_SGD_MACS, Renamed, add_model_options,
                                 check_init_bytes, check_number, check_size, float_list,
                                 model_from_spec, model_spec, print_json)

__all__ = ["add_arguments", "add_run_options", "prepare", "run"]

#: ODE time per SGD step as (factor, power of d): tied t = 4 eta n/d, direct-S and untied
#: slow tau = eta n/d, untied fast t = eta n
_TIME_STEP = {("tied", "slow"): (4.0, 1), ("s", "slow"): (1.0, 1), ("untied", "slow"): (1.0, 1),
              ("untied", "fast"): (1.0, 0)}


def add_run_options(p, command: str) -> None:
    """The model options and the SGD run options of ``sgd`` and ``compare``."""
    add_model_options(p)
    g = p.add_argument_group("SGD run")
    lo, hi = LIMITS["compare_d" if command == "compare" else "d"]
    g.add_argument("--d", type=int, default=200, help=f"dimension d, {lo}..{hi} (default 200)")
    g.add_argument("--width", default=None,
                   help="student/teacher widths d_k (tied, untied), one value or one per index, "
                        f"{LIMITS['width'][0]}..{LIMITS['width'][1]} (default d)")
    g.add_argument("--scale", default="0.5",
                   help="initial scale(s), one value or one per index (default 0.5)")
    g.add_argument("--symmetric", action="store_true", help="symmetric initial S (model s)")
    g.add_argument("--eta", type=float, required=True, help="learning rate > 0")
    g.add_argument("--batch", type=int, default=256,
                   help=f"mini-batch size B, 1..{LIMITS['batch'][1]} (default 256)")
    g.add_argument("--t-end", "--T", dest="t_end", type=float, default=1.0, action=Renamed,
                   old=("--T",),
                   help="horizon in the model's ODE time (tied t = 4 eta n/d, S and untied "
                        "slow tau = eta n/d, untied fast t = eta n; default 1; --T is the "
                        "deprecated old name)")
    g.add_argument("--n-out", type=int, default=11,
                   help=f"number of checkpoints, 1..{LIMITS['n_out'][1]} (default 11)")
    g.add_argument("--seed", type=int, default=0, help="SGD seed (default 0)")
    g.add_argument("--init-seed", type=int, default=None,
                   help="seed of the Gaussian initialisation (default: --seed)")
    g.add_argument("--order", type=int, default=None,
                   help="moment order M: the words of length <= M are recorded (tied, untied; "
                        f"1..{LIMITS['order_sgd'][1]}; default 2)")
    g.add_argument("--threads", type=int, default=1,
                   help="numba threads for the non-BLAS part of a step (default 1; BLAS "
                        "threads follow OPENBLAS_NUM_THREADS); results do not depend on it")
    g.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    p.add_argument("--out", default=None, help="save the result (.npz)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (docs/cli.md)")


def add_arguments(command: str, p) -> None:
    add_run_options(p, command)
    p.add_argument("--time", choices=("slow", "fast"), default="slow",
                   help="untied time scale of --t-end and of the output (default slow)")


def _widths(args, K):
    if args.width is None:
        return None
    if args.model_kind == "s":
        raise ValueError("--width does not apply to --model s (S_k is d x d)")
    w = float_list(args.width, "width")
    if not all(v == int(v) for v in w):
        raise ValueError(f"--width must be integers, got {args.width!r}")
    w = [check_size(int(v), "width") for v in w]
    if len(w) not in (1, K):
        raise ValueError(f"--width needs 1 or K = {K} values, got {len(w)}")
    return w


def _check_work(spec, args, time: str, n_runs: int) -> None:
    """Refuse, before any work, a run whose steps or multiply-adds exceed the CLI's limits."""
    if (spec.kind, time) not in _TIME_STEP:
        raise ValueError(f"--time {time} applies to --model untied only")
    factor, power = _TIME_STEP[(spec.kind, time)]
    dt = factor * args.eta / args.d ** power
    n_steps = math.ceil(args.t_end / dt)
    widths = args.widths_list or [args.d] * spec.K
    if len(widths) == 1:
        widths = widths * spec.K
    per_sample = args.d * sum(widths) * (2 if spec.kind == "untied" else 1)
    macs = float(n_steps) * args.batch * spec.L * per_sample * n_runs
    if macs > MAX_SGD_MACS:
        raise ValueError(
            f"--t-end {args.t_end:g} with --eta {args.eta:g}, --d {args.d}, --batch {args.batch}"
            + (f", --seeds {n_runs}" if n_runs > 1 else "")
            + f" means {n_steps:.3g} SGD steps of about {macs:.2g} multiply-adds in all, "
            f"above the CLI's limit of {MAX_SGD_MACS:.0e} (about half an hour on one core); "
            "shorten --t-end, raise --eta or lower --d/--batch (the Python API has no such limit)")


def prepare(args, *, time: str = "slow", n_runs: int = 1):
    """``(spec, model, init, t_eval)`` for ``sgd``/``compare``: every option validated and
    every size bounded before the model is built or a weight drawn."""
    import numpy as np

    spec = model_spec(args)
    args.model_kind = spec.kind
    check_size(args.d, "d")
    check_size(args.batch, "batch")
    check_size(args.n_out, "n-out")
    check_size(args.seed, "seed")
    check_size(args.init_seed, "init-seed", "seed")
    check_size(args.threads, "threads")
    check_size(args.order, "order", "order_sgd")
    check_number(args.eta, "eta")
    check_number(args.t_end, "t-end", strict=False)
    scale = float_list(args.scale, "scale")
    if len(scale) not in (1, spec.K):
        raise ValueError(f"--scale needs 1 or K = {spec.K} values, got {len(scale)}")
    args.widths_list = _widths(args, spec.K)
    if args.symmetric and spec.kind != "s":
        raise ValueError("--symmetric applies to --model s only")
    widths = args.widths_list or [args.d]
    widths = widths * spec.K if len(widths) == 1 else widths
    check_init_bytes(spec.K, args.d, widths, 2 if spec.kind == "untied" else 1,
                     "--d, --width")
    _check_work(spec, args, time, n_runs)
    model = model_from_spec(spec)
    from attndyn.numeric import gaussian_init

    kw = {"scale": scale[0] if len(scale) == 1 else scale,
          "seed": args.seed if args.init_seed is None else args.init_seed}
    if args.widths_list is not None:
        kw["width"] = args.widths_list[0] if len(args.widths_list) == 1 else args.widths_list
    if args.symmetric:
        kw["symmetric"] = True
    init = gaussian_init(model, args.d, **kw)
    return spec, model, init, np.linspace(0.0, args.t_end, args.n_out)


def run(command: str, args) -> int:
    from attndyn.numeric import sgd

    spec, model, init, t_eval = prepare(args, time=args.time)
    kw = {"time": args.time} if spec.kind == "untied" else {}
    res = sgd(model, init, eta=args.eta, batch=args.batch, t_eval=t_eval, seed=args.seed,
              order=args.order, progress=False if args.no_progress else None,
              threads=args.threads, **kw)
    saved = res.save(args.out) if args.out else None
    if args.json:
        print_json(command, status=res.status, message=res.message, saved=[saved],
                   result={"model": spec.as_dict(), "t": res.t,
                           "observables": {n: res.y[i] for i, n in enumerate(res.names)},
                           "params": res.params, "seed": res.seed})
        return 0 if res.success else 1
    print(res.message)
    print(f"time: {res.params['time']}; {res.params['n_steps']} steps; "
          f"wall {res.diagnostics['wall_s']:.2f} s")
    named = [n for n in res.names if not n.startswith("mu_")]
    words = [n for n in res.names if n.startswith("mu_")]
    show = (words[:8] + named)[:24] if spec.kind == "tied" else (named + words[:4])[:24]
    print(f"{'observable':<14}{'start':>14}{'end':>14}")
    for n in show:
        y = res.y[res.names.index(n)]
        if y.size:
            print(f"{n:<14}{y[0]:>14.6g}{y[-1]:>14.6g}")
    if saved:
        print(f"saved {saved}")
    return 0 if res.success else 1
