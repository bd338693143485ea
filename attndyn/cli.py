"""Command-line interface: ``attndyn <command> [options]``.

Each command lives in its own module ``attndyn._cli_<name>`` that defines
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only
when their command runs, so ``attndyn derive`` never loads numba.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module, one-line help)
COMMANDS = {
    "derive": ("attndyn._cli_tied", "print a moment hierarchy (text or LaTeX)"),
    "integrate": ("attndyn._cli_tied", "integrate a truncated hierarchy and save a labelled result"),
    "verify": ("attndyn._cli_tied", "check a truncation against the exact finite-d matrix flow"),
    "scaling": ("attndyn._cli_scaling", "evaluate the scaling-law bounds of paper 000 (Lambert W)"),
    "sgd": ("attndyn._cli_sgd", "run finite-d online SGD and save the observables"),
    "compare": ("attndyn._cli_sgd", "run SGD and theory from one initial condition and compare"),
}


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attndyn",
        description="Learning dynamics of attention-indexed models (symbolic + numeric).",
    )
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (module, helptext) in COMMANDS.items():
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.set_defaults(_module=module)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a command whose module is not installed
            if exc.name != module:
                raise
            sub._name_parser_map.pop(name, None)
            continue
        mod.add_arguments(name, p)
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    mod = importlib.import_module(args._module)
    try:
        return int(mod.run(args.command, args) or 0)
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except (CLIError, ValueError, TypeError) as exc:
        msg = " ".join(str(exc).split())  # always one line
        print(f"attndyn {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
