"""``attndyn reproduce``: the papers' figures and claims, one command each.

Examples::

    attndyn reproduce fig4                 # --quick (default): CPU-sized
    attndyn reproduce fig2 --seeds 3 --out figs
    attndyn reproduce fig4 --full          # the caption's d, learning rate, batch
    attndyn reproduce all

Each figure writes ``<out>/<name>.png`` (200 dpi) and ``<out>/<name>.pdf`` (``--no-pdf``: none),
``<out>/<name>.json`` (settings, seeds, claims with their verdicts and numbers,
an index of the curves) and one labelled result file per curve,
``<out>/<name>/<curve>.npz`` (``attndyn.load_result`` reads them), then prints
its claims table. Exit status 0 when every claim held, 1 when one did not.

Paper 003's figures come from ``attndyn.numeric.attention.figures``, paper
000's from ``attndyn.numeric.scaling.figures``; this dispatcher is the only
place that imports both (numba-using modules are imported inside :func:`run`).
"""

from __future__ import annotations

import argparse
import os
import time

NAMES = ("fig1", "fig2", "fig3", "fig4", "scaling", "scaling-empirical")
ORDER_ALL = ("fig4", "scaling", "fig2", "fig3", "fig1")  # cheapest first


def add_arguments(command_name, parser) -> None:
    parser.epilog = ("The captions give no horizon and no initial scale: the choices are printed "
                     "in each figure's title and JSON and described in docs/figures.md. Exit "
                     "status 1 when a claim does not hold.")
    parser.add_argument("name", choices=NAMES + ("all",), help="which figure (or all of them)")
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="mode", action="store_const", const="quick",
                   help="CPU-sized settings (default): a smaller d with the caption's eta d/B, "
                        "except Fig. 2 (B = 400 at d = 80, where h3 SGD diverges with the "
                        "caption's eta d/B; docs/figures.md)")
    g.add_argument("--full", dest="mode", action="store_const", const="full",
                   help="the captions' settings (d = 400 or 800; much slower)")
    g.add_argument("--mini", dest="mode", action="store_const", const="mini",
                   help="a seconds-sized smoke run (not the figure: verdicts not meaningful, "
                        "exit status 0 whatever they are)")
    parser.set_defaults(mode="quick")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="independent SGD runs per curve (1..64; default the figure's: 4 in "
                             "--quick (8 for fig3) and --full, 2 in --mini; the claims are in "
                             "seed units)")
    parser.add_argument("--d", type=int, default=None, metavar="D",
                        help="Figs. 1-4: another dimension, keeping the mode's eta d/B (the "
                             "batch and the Monte Carlo dimensions scale with D)")
    j = parser.add_argument_group(
        "distributed, resumable SGD (Figs. 1-4; on by default with --full)",
        "Every (curve, seed) SGD run is a task on the sweep machinery; finished tasks are "
        "stored as they complete, and a rerun of a killed job loads them instead of "
        "recomputing. A plan (tasks, calibrated time per task) is printed first.")
    j.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a dask.distributed scheduler address (tcp://host:port) to run the "
                        "tasks on (default: a local process pool with --full, this process "
                        "otherwise)")
    j.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes of the local pool (default: the cores)")
    j.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="where finished tasks are stored (default <out>/cache with --full, "
                        "--scheduler or --workers; none otherwise)")
    j.add_argument("--backend", choices=("numba", "array-api"), default="numba",
                   help="SGD backend (default numba)")
    j.add_argument("--device", default=None, metavar="DEV",
                   help="array-api device: cpu, cuda or cuda:N")
    parser.add_argument("--out", default="reproduce_out", metavar="DIR",
                        help="output folder (created; default ./reproduce_out)")
    parser.add_argument("--pdf", action=argparse.BooleanOptionalAction, default=True,
                        help="also write a vector PDF per figure (default; --no-pdf to skip)")
    parser.add_argument("--dpi", type=int, default=200, help="PNG resolution (default 200)")
    parser.add_argument("--json", action="store_true",
                        help="print the claims of every figure as one JSON document "
                             "(docs/cli.md)")


def _builder(name):
    if name == "scaling-empirical":  # paper 000 trained in its theorems' regime
        from attndyn.numeric.transformer.regime_scaling import scaling_empirical_figure
        return scaling_empirical_figure
    if name == "scaling":
        from attndyn.numeric.scaling.figures import scaling_figure

        return scaling_figure
    from attndyn.numeric.attention.figures import FIGURES

    return FIGURES[name]


PAPER_003 = ("fig1", "fig2", "fig3", "fig4")


def _overrides(name, args):
    """``--d``: the mode's settings at another dimension, same eta d/B."""
    from attndyn.numeric.attention.figures.common import SETTINGS

    if args.d is None or name not in PAPER_003:
        return {}
    base = SETTINGS[name][args.mode]
    r = args.d / base["d"]
    out = {"d": args.d, "batch": max(1, int(round(base["batch"] * r)))}
    for k in ("mc_d", "scan_d"):
        if k in base:
            out[k] = tuple(sorted({max(8, int(round(x * r))) for x in base[k]}))
    return out


def _runner(name, args, out):
    """The task runner of a paper-003 figure (None: in this process, no cache)."""
    from attndyn.cli import CLIError

    if name not in PAPER_003:
        return None
    distributed = (args.mode == "full" or args.scheduler is not None
                   or args.workers is not None or args.cache_dir is not None)
    if not distributed and args.backend == "numba" and args.device is None:
        return None
    from attndyn.numeric.attention.figures.common import TaskRunner

    executor = "serial"
    if args.scheduler is not None:
        try:
            from dask.distributed import Client
        except ImportError:
            raise CLIError("--scheduler needs dask.distributed (pip install "
                           "'dask[distributed]')") from None
        try:
            executor = Client(args.scheduler, timeout=30)
        except (OSError, ValueError, TimeoutError) as exc:
            raise CLIError(f"--scheduler {args.scheduler}: cannot connect: {exc}") from None
    elif distributed:
        executor = None
    cache = args.cache_dir
    if cache is None and distributed:
        cache = os.path.join(out, "cache")
    import sys

    # with --json stdout is one JSON document: the plan goes to stderr
    say = (lambda text: print(text, file=sys.stderr)) if args.json else print
    return TaskRunner(executor, cache_dir=cache, workers=args.workers, backend=args.backend,
                      device=args.device, plan=distributed, progress=None if distributed else False,
                      out=say)


def run(command_name, args) -> int:
    from attndyn.cli import CLIError

    if args.seeds is not None and not 1 <= args.seeds <= 64:
        raise CLIError(f"--seeds must be in [1, 64], got {args.seeds}")
    if not 20 <= args.dpi <= 600:
        raise CLIError(f"--dpi must be in [20, 600], got {args.dpi}")
    out = os.path.expanduser(args.out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"--out {out}: cannot create the folder: {exc.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise CLIError(f"--out {out}: folder is not writable")
    if args.d is not None and not 8 <= args.d <= 4096:
        raise CLIError(f"--d must be in [8, 4096], got {args.d}")
    if args.workers is not None and not 1 <= args.workers <= 256:
        raise CLIError(f"--workers must be in [1, 256], got {args.workers}")
    names = ORDER_ALL if args.name == "all" else (args.name,)
    failed = []
    report = []
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        kw = {} if args.seeds is None else {"seeds": args.seeds}
        runner = _runner(name, args, out)
        if runner is not None:
            kw["runner"] = runner
        fig = _builder(name)(args.mode, **kw, **_overrides(name, args))
        if runner is not None and runner.last_folder and not args.json:
            print(f"  SGD tasks stored in {runner.last_folder} (tasks.log lists them)")
        paths = fig.save(out, pdf=args.pdf, dpi=args.dpi)
        wall = time.perf_counter() - t0
        if not fig.all_held:
            failed.append(name)
        if args.json:
            report.append({"figure": name, "mode": args.mode, "wall_s": wall,
                           "all_held": fig.all_held, "claims": [c.as_dict() for c in fig.claims],
                           "png": paths.get("png"), "json": paths["json"]})
            continue
        print(fig.table())
        print(f"  wrote {paths.get('png', '')}, {paths['json']} and {len(paths['curves'])} "
              f"curve files in {os.path.join(out, name)}  [{args.mode}, {wall:.1f} s]")
        print(flush=True)
    if args.json:
        from attndyn._cli_common import print_json
        print_json(command_name, status=1 if failed else 0, ok=args.mode == "mini" or not failed,
                   message=(f"claims not held in {', '.join(failed)}" if failed
                            else "every claim held"),
                   saved=[f["json"] for f in report] + [f["png"] for f in report if f["png"]],
                   result={"figures": report, "failed": failed})
    elif len(names) > 1:
        print(f"all: {len(names)} figures in {time.perf_counter() - t_all:.1f} s; "
              + (f"claims not held in {', '.join(failed)}" if failed else "every claim held"))
    if args.mode == "mini":
        return 0
    return 1 if failed else 0
