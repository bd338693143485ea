"""``attndyn scaling``: evaluate the scaling-law bounds of paper 000.

Examples::

    attndyn scaling --C 1e6:1e30:5 --xi 1 --L 128 --d 64 --c-stat 1
    attndyn scaling critical_N stage2_paper --C 1e20 --xi 0.5,1,2 --L 8 --d 4 --c-stat 1
    attndyn scaling two_stage stage --C 1e10:1e40:7 --N 1e5 --xi 1 --L 8 --d 4 \\
        --alpha 1 --prefactor 1 --loss0 1 --c-stat 1 --json
    attndyn scaling --list

Numba-using modules are imported inside :func:`run` only, and the compiled kernels
load only when a quantity is evaluated: ``--list`` and every input check run
before (and without) any compilation.
"""

from __future__ import annotations

import math

INPUTS = {
    "C": "total compute",
    "N": "data-set size",
    "M": "model size (trainable parameters)",
    "T": "training time",
    "xi": "noise level (std of the label noise)",
    "L": "sequence length",
    "d": "embedding width",
    "eps": "output scaling coefficient of eq. (1)",
    "zeta": "model-law exponent, in (0, 1/3)",
    "target": "target excess risk (for compute_for_target)",
}
CONSTANTS = {
    "alpha": "rate constant Theta(lambda) (Theorems 5.5, 7.1)",
    "prefactor": "stage-I constant poly(L, d, 1/lambda, 1/omega) (Theorem 7.1)",
    "loss0": "initial loss L(0, D)",
    "c_stat": "constant of O(xi^2/N) (stage II, data and time laws)",
}
MAX_ROWS = 1_000_000

SPEC_HELP = ("a value 'x', a list 'a,b,c', a geometric range 'a:b:n' (n points from a to b), "
             "or a linear range 'a:b:n:lin'")


def add_arguments(command_name, parser) -> None:
    parser.epilog = (
        "Every input takes " + SPEC_HELP + ". Ranges of several inputs form their outer "
        "product. The paper's hidden constants have no defaults: quantities that need one "
        "are skipped (or, when named, fail) until it is given. Bad input exits with status 2."
    )
    parser.add_argument("quantities", nargs="*", metavar="quantity",
                        help="what to evaluate (see --list); default: everything the given "
                             "inputs and constants allow")
    for name, meaning in INPUTS.items():
        parser.add_argument(f"--{name}", metavar="SPEC", default=None, help=meaning)
    for name, meaning in CONSTANTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar="SPEC",
                            default=None, help=meaning)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--list", action="store_true",
                        help="list the quantities, their inputs and constants, and exit")
    parser.add_argument("--latex", action="store_true",
                        help="print the SymPy statements of the bounds in LaTeX and exit")


def _value(option: str, text: str) -> float:
    """One listed value. NaN, and a number too large for a float (1e400 reads as inf), are
    refused; an infinity spelled out ('inf', the C -> inf limit) is kept."""
    v = float(text)
    if math.isnan(v) or (math.isinf(v) and text.strip().lstrip("+-").lower()
                         not in ("inf", "infinity")):
        raise ValueError(f"--{option}: values must be numbers ('inf' spelled out for the "
                         f"limit), got '{text.strip()}', which reads as {v} in a float")
    return v


def parse_spec(option: str, text: str):
    """Parse one input SPEC into a list of floats (ValueError names the option)."""
    text = text.strip()
    try:
        if ":" in text:
            parts = text.split(":")
            lin = len(parts) == 4 and parts[3].strip().lower() == "lin"
            if len(parts) not in (3, 4) or (len(parts) == 4 and not lin):
                raise ValueError
            a, b = float(parts[0]), float(parts[1])
            n = int(parts[2])
            if n < 1 or not (math.isfinite(a) and math.isfinite(b)):
                raise ValueError
            if n > MAX_ROWS:  # refused before any list is built
                raise ValueError(f"--{option}: {n} points, above the limit of {MAX_ROWS} "
                                 f"rows; got '{text}'")
            if n == 1:
                return [a]
            if lin:
                return [a + (b - a) * i / (n - 1) for i in range(n)]
            if a <= 0 or b <= 0:
                raise ValueError(f"--{option}: a geometric range needs a, b > 0; got '{text}'")
            la, lb = math.log10(a), math.log10(b)
            vals = [10.0 ** (la + (lb - la) * i / (n - 1)) for i in range(n)]
            vals[0], vals[-1] = a, b
            return vals
        if text.count(",") >= MAX_ROWS:
            raise ValueError(f"--{option}: more than {MAX_ROWS} values")
        return [_value(option, v) for v in text.split(",")]
    except ValueError as exc:
        if str(exc).startswith("--"):
            raise
        raise ValueError(f"--{option}: cannot read '{text}'; expected {SPEC_HELP}") from None


def fmt(v: float) -> str:
    if v != v:
        return "nan"
    if v in (math.inf, -math.inf):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.6g}"


def _json_value(v: float):
    if v != v:
        return None
    if v in (math.inf, -math.inf):
        return "inf" if v > 0 else "-inf"
    return v


def run(command_name, args) -> int:
    """The ``scaling`` command: LaTeX, the list of quantities, or a table of them."""
    if args.latex:
        _print_latex()
        return 0

    import numpy as np

    from attndyn.numeric.scaling import QUANTITIES, evaluate_grid

    if args.list:
        _print_list(QUANTITIES)
        return 0

    values = _input_values(args)
    names = _quantity_names(args, QUANTITIES, values)
    used = set()
    for q in names:
        _, ins, consts, _ = QUANTITIES[q]
        used.update(ins + consts)
    unused = sorted(k for k in values if k not in used)
    values = {k: v for k, v in values.items() if k in used}
    n_rows = 1
    for v in values.values():
        n_rows *= np.size(v)
    if n_rows > MAX_ROWS:
        raise ValueError(f"the grid has {n_rows} rows; at most {MAX_ROWS} are printed")

    axes, res = evaluate_grid(names, **values)
    fixed = {k: float(v) for k, v in values.items() if k not in axes}
    grids = np.meshgrid(*axes.values(), indexing="ij") if axes else []
    cols = list(axes) + names
    data = [g.ravel() for g in grids] + [np.asarray(res[q], dtype=float).ravel() for q in names]
    rows = [[float(c[i]) for c in data] for i in range(n_rows)] if data else []

    if args.json:
        from attndyn._cli_common import print_json

        out = {
            "fixed": {k: _json_value(v) for k, v in fixed.items()},
            "columns": cols,
            "rows": [{c: _json_value(v) for c, v in zip(cols, r)} for r in rows],
            "unused": unused,
        }
        print_json(command_name, status=0, result=out,
                   message=f"{len(rows)} rows of {', '.join(names)}")
        return 0

    _print_table(fixed, unused, cols, rows)
    return 0


def _print_latex() -> None:
    """Print the LaTeX of every scaling quantity, with its source."""
    from attndyn.symbolic.scaling import bounds, latex_all

    src = bounds()
    for name, tex in latex_all().items():
        print(f"% {name} ({src[name][1]})\n{tex}")


def _print_list(QUANTITIES) -> None:
    """Print the quantities with what each needs."""
    for name, (_, ins, consts, desc) in QUANTITIES.items():
        need = ", ".join(ins) + (f"; constants {', '.join(consts)}" if consts else "")
        print(f"{name:20s} {desc}\n{'':20s}   needs {need}")


def _input_values(args) -> dict:
    """The inputs and constants given on the command line: a number or an array each."""
    import numpy as np

    values = {}
    for name in list(INPUTS) + list(CONSTANTS):
        spec = getattr(args, name)
        if spec is None:
            continue
        vals = parse_spec(name.replace("_", "-"), spec)
        values[name] = vals[0] if len(vals) == 1 else np.array(vals)
    return values


def _quantity_names(args, QUANTITIES, values) -> list:
    """The quantities asked for (checked), or all those the given inputs determine."""
    names = [q.replace("-", "_") for q in args.quantities]
    for q in names:
        if q not in QUANTITIES:
            raise ValueError(f"unknown quantity '{q}'; choose from {', '.join(QUANTITIES)}")
    if not names:
        names = [q for q, (_, ins, consts, _) in QUANTITIES.items()
                 if all(k in values for k in ins + consts)]
        if not names:
            raise ValueError("nothing to evaluate: give inputs, e.g. --C 1e6:1e30:5 --xi 1 "
                             "--L 128 --d 64 (see --list)")
    else:
        for q in names:
            _, ins, consts, _ = QUANTITIES[q]
            missing = [k for k in ins + consts if k not in values]
            if missing:
                opts = ", ".join("--" + k.replace("_", "-") for k in missing)
                raise ValueError(f"quantity '{q}' needs {opts}")
    return names


def _print_table(fixed, unused, cols, rows) -> None:
    """Print the table: the fixed inputs, the unused ones, then right-aligned columns."""
    if fixed:
        print("# " + ", ".join(f"{k} = {fmt(v)}" for k, v in fixed.items()))
    if unused:
        print("# not used by these quantities: " + ", ".join(unused))
    cells = [[fmt(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in cells:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
