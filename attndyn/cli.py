"""Command-line interface: ``attndyn <command> [options]``.

This module only assembles the parser and dispatches. Each command (action) lives in its
own module ``attndyn._cli_<command>`` that defines ``add_arguments(command, parser)`` and
``run(command, args) -> int``; what commands share (the model options and
:class:`~attndyn._cli_common.ModelSpec`, the size limits, the ``--json`` envelope) is in
:mod:`attndyn._cli_common`. Heavy modules are imported only inside ``run``, so
``attndyn derive`` never loads numba. Options and JSON output: ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module, one-line help)
COMMANDS = {
    "derive": ("attndyn._cli_derive", "print a moment hierarchy (text or LaTeX)"),
    "integrate": ("attndyn._cli_integrate",
                  "integrate a truncated hierarchy and save a labelled result"),
    "verify": ("attndyn._cli_verify",
               "paper 003's theorems as numerical checks (thm1, cor1, cor2, trunc, ...)"),
    "scaling": ("attndyn._cli_scaling", "evaluate the scaling-law bounds of paper 000 (Lambert W)"),
    "sgd": ("attndyn._cli_sgd", "run finite-d online SGD and save the observables"),
    "compare": ("attndyn._cli_compare",
                "run SGD and theory from one initial condition and compare"),
    "sweep": ("attndyn._cli_sweep", "run a parameter sweep from a spec file (resumable)"),
    "transformer": ("attndyn._cli_transformer",
                    "paper 000's transformer: train, layer kernels, lemmas measured"),
    "reproduce": ("attndyn._cli_reproduce",
                  "reproduce a paper figure (fig1-fig4, scaling, all) with its claims checked"),
}


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attndyn",
        description="Learning dynamics of attention-indexed models (symbolic + numeric).",
    )
    from attndyn import __version__
    parser.add_argument("--version", action="version", version=f"attndyn {__version__}")
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


# options that name a file (or, for ``sweep``, a folder) the command writes
OUTPUT_OPTIONS = ("out", "plot", "netcdf")

BUG_NOTE = ("this is a bug in attndyn, not in your input: please report it with the command "
            "line and the traceback above")


def check_output_path(path, option: str) -> None:
    """Refuse, before any work, an output path whose folder is missing or not
    writable (``ValueError`` naming the option); an existing folder is fine."""
    import os

    path = os.path.expanduser(str(path))
    if os.path.isdir(path):
        folder = path
    else:
        folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"--{option} {path}: cannot write there: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CLIError(f"--{option} {path}: cannot write there: folder {folder} is not writable")


def _package_dirs() -> tuple:
    import os

    dirs = []
    for name in ("attndyn", "attndyn.symbolic", "attndyn.numeric", "attndyn.kernels"):
        mod = sys.modules.get(name)
        for d in getattr(mod, "__path__", None) or ():
            dirs.append(os.path.abspath(d) + os.sep)
    return tuple(dirs)


def is_input_error(exc: BaseException) -> bool:
    """Whether ``exc`` reports bad input rather than a bug.

    Input errors are :class:`CLIError`, the library's ``IntegrationError``
    (a run that failed: blow-up, step limit, no convergence) and the
    ``ValueError``/``TypeError`` that the library's validation raises with an
    explicit ``raise`` statement in attndyn's own code. A ``ValueError`` or
    ``TypeError`` thrown from inside numpy, sympy, numba, ... or by Python
    itself in the middle of our code (``None + 1``) is a bug.
    """
    if isinstance(exc, CLIError):
        return True
    results = sys.modules.get("attndyn.numeric.core.results")
    if results is not None and isinstance(exc, results.IntegrationError):
        return True
    if not isinstance(exc, (ValueError, TypeError)):
        return False
    import linecache
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    import os

    if not os.path.abspath(last.filename).startswith(_package_dirs()):
        return False
    line = (last.line or linecache.getline(last.filename, last.lineno)).strip()
    return line.startswith("raise")


def one_line(command: str, exc: BaseException) -> None:
    msg = " ".join(str(exc).split())  # always one line
    print(f"attndyn {command}: error: {msg}", file=sys.stderr)


def main(argv=None) -> int:
    """Run one command. Exit codes: 0 success, 1 a run that finished without
    success (status in its output) or a bug (traceback and a request to report
    it), 2 bad input or an unwritable output path (one line on stderr)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        for opt in OUTPUT_OPTIONS:
            if getattr(args, opt, None):
                check_output_path(getattr(args, opt), opt.replace("_", "-"))
        mod = importlib.import_module(args._module)
        return int(mod.run(args.command, args) or 0)
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"attndyn {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file that cannot be read or written: the message names it
        one_line(args.command, exc)
        return 2
    except Exception as exc:
        if is_input_error(exc):
            one_line(args.command, exc)
            return 2
        import traceback

        traceback.print_exc()
        print(f"attndyn {args.command}: internal error ({type(exc).__name__}); {BUG_NOTE}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
