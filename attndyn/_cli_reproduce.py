"""``attndyn reproduce``: the papers' figures and claims, one command each.

Examples::

    attndyn reproduce fig4                 # --quick (default): CPU-sized
    attndyn reproduce fig2 --seeds 3 --out figs --pdf
    attndyn reproduce fig4 --full          # the caption's d, learning rate, batch
    attndyn reproduce all

Each figure writes ``<out>/<name>.png`` (and ``.pdf`` with ``--pdf``),
``<out>/<name>.json`` (settings, seeds, claims with their verdicts and numbers,
an index of the curves) and one labelled result file per curve,
``<out>/<name>/<curve>.npz`` (``attndyn.load_result`` reads them), then prints
its claims table. Exit status 0 when every claim held, 1 when one did not.

Paper 003's figures come from ``attndyn.numeric.attention.figures``, paper
000's from ``attndyn.numeric.scaling.figures``; this dispatcher is the only
place that imports both (numba-using modules are imported inside :func:`run`).
"""

from __future__ import annotations

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
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="independent SGD runs per curve (1..64, default 1)")
    parser.add_argument("--out", default="reproduce_out", metavar="DIR",
                        help="output folder (created; default ./reproduce_out)")
    parser.add_argument("--pdf", action="store_true", help="also write a PDF per figure")
    parser.add_argument("--dpi", type=int, default=90, help="PNG resolution (default 90)")
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


def run(command_name, args) -> int:
    from attndyn.cli import CLIError

    if not 1 <= args.seeds <= 64:
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
    names = ORDER_ALL if args.name == "all" else (args.name,)
    failed = []
    report = []
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        fig = _builder(name)(args.mode, seeds=args.seeds)
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
