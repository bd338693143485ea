"""What every CLI command shares: the model options and :class:`ModelSpec`, the size
limits, the deprecated spellings, and the one ``--json`` envelope.

- **Model options** (``--model``, ``--K``, ``--trainable``, ``--L``, ``--loss``, ``--C``,
  ``--weight-decay``) are declared once by :func:`add_model_options`, read and validated
  once by :func:`model_spec` into a frozen :class:`ModelSpec`, and turned into a model by
  :func:`model_from_spec`, the one builder for the tied, untied and direct-S
  parameterisations.
- **Sizes** (:data:`LIMITS`) are checked by :func:`check_size` before any work; a size out
  of range is one line naming the option and the allowed range.
- **Old spellings** (``--T``, ``--n-seeds``) are accepted through :class:`Renamed`, with a
  one-line deprecation notice on stderr.
- **JSON**: every command that prints JSON prints one object built by :func:`print_json`
  (:data:`JSON_SCHEMA`, documented in ``docs/cli.md``).

``--loss`` text is never evaluated as Python: it goes through
:func:`attndyn.symbolic.losses.loss_from_spec`, whose expressions are built by the
whitelist parser of :mod:`attndyn.symbolic.parse` (``ast`` tree checked node by node,
size limits before any expansion). A bad ``--loss`` is a one-line error, exit code 2.
Nothing here imports numba.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

LOSS_HELP = ("loss: a preset (square = (G1-G2)^2, the D.3 example; linear, h2, h3 = "
             "teacher-student (F(G1)-F(G2))^2/2), a named spec (mse:<act>[,<act>], "
             "softmax[:L=2,beta=1], denoising[:ell=<expr in a>], attention2[:heads=1]), or an "
             "expression in G[i,j,k] (0-based; G1..GK stand for G[0,0,k-1] when L = 1). "
             "Expressions are parsed, never evaluated: numbers, + - * / **, "
             "exp log sqrt tanh erf abs max min relu sigmoid softplus gelu h<k> He<k>; "
             "exponents are numbers with |p| <= 16; at most 2000 characters, 1000 syntax "
             "nodes, depth 40, degree 64, 20000 expanded terms (see docs/potentials.md)")

PRESETS = {
    "square": "(G[0,0,0] - G[0,0,1])**2",
    "linear": "mse:h1,h1",
    "h2": "mse:h2,h2",
    "h3": "mse:h3,h3",
}

#: the parameterisations, as ``--model`` spells them
KINDS = ("tied", "untied", "s")
KIND_NAMES = {"tied": "tied S = W W^T", "untied": "untied S = U V^T", "s": "direct S"}

#: defaults of the model options (the D.3 example of paper 003, appendix D.3)
MODEL_DEFAULTS = {"model": "tied", "K": 2, "trainable": "0", "L": 1, "loss": "square",
                  "C": None, "weight_decay": 0.0}

#: inclusive ranges of every size the CLI accepts (option -> (low, high)); checked before
#: any work. The highs keep one run within minutes and gigabytes on a workstation.
LIMITS = {
    "K": (1, 32),           # Gamma is a K x K symbolic matrix: K = 32 takes 12 s, 64 takes 72 s
    "L": (1, 16),           # the loss sees L x L x K Gaussian entries
    "d": (2, 8192),         # d x d matrices per index (sgd, compare, untied integrate)
    "verify_d": (2, 1000),  # the trunc check's moments cost d^3 per word
    "compare_d": (2, 2048),  # the theory's d x d matrix flow costs K d^3 per evaluation
    "width": (1, 8192),
    "batch": (1, 1_000_000),
    "n_out": (1, 10_000),
    "seeds": (1, 256),
    "order_sgd": (1, 12),   # longest word recorded by SGD (their number grows like K^M / M)
    "orders": (1, 40),      # truncation orders of verify (sizes then checked by memory)
    "n_orders": (1, 8),
    "threads": (1, 1024),
    "workers": (1, 256),
    "max_points": (1, 1_000_000),
    "seed": (0, 2 ** 63 - 1),
}

#: the most bytes the initial weights of sgd/compare/integrate may take
MAX_INIT_BYTES = 4 * 2 ** 30
#: the most multiply-adds one SGD run of the CLI may take (measured 7e9 per second on one
#: core at d = 200, B = 256: about half an hour)
MAX_SGD_MACS = 1e13


class Renamed(argparse.Action):
    """An option under its canonical name that still accepts old spellings, each with a
    one-line notice on stderr (``--T`` for ``--t-end``, ``--n-seeds`` for ``--seeds``)."""

    def __init__(self, option_strings, dest, old=(), **kwargs):
        self.old = tuple(old)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in self.old:
            new = next(s for s in self.option_strings if s not in self.old)
            print(f"{parser.prog}: {option_string} is deprecated, use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def check_size(value, option: str, limit: str | None = None):
    """``value`` if it lies in ``LIMITS[limit or option]``; otherwise a one-line
    ``ValueError`` naming ``--option`` and the range. ``None`` passes through."""
    if value is None:
        return None
    lo, hi = LIMITS[limit or option.replace("-", "_")]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"--{option} must be an integer in [{lo}, {hi}], got {value}")
    return value


def check_number(value, option: str, *, low: float = 0.0, strict: bool = True,
                 high: float = math.inf):
    """A finite number in ``(low, high]`` (``[low, high]`` when not ``strict``)."""
    if value is None:
        return None
    ok = math.isfinite(value) and (value > low if strict else value >= low) and value <= high
    if not ok:
        if high == math.inf:  # "in (0, inf]" read as if inf were allowed
            rng = f"{'>' if strict else '>='} {low:g}"
        else:
            rng = f"in {'(' if strict else '['}{low:g}, {high:g}]"
        raise ValueError(f"--{option} must be a finite number {rng}, got {value:g}")
    return value


def int_list(text: str, name: str) -> list:
    try:
        return [int(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"--{name} must be a comma-separated list of ints, got {text!r}") from None


def float_list(text: str, name: str) -> list:
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"--{name} must be finite numbers, got {text!r}")
    return vals


def per_index(text: str, name: str, K: int) -> list:
    """One number, or one per index (``K`` of them), from a comma-separated option."""
    vals = float_list(text, name)
    if len(vals) == 1:
        return vals * K
    if len(vals) != K:
        raise ValueError(f"--{name} needs 1 or K = {K} values, got {len(vals)}")
    return vals


def loss_from_option(spec: str, K: int, L: int):
    """A loss callable ``G -> sympy expression`` from a ``--loss`` option.

    The CLI declares no parameters: a raw expression may use only ``G``, numbers
    and the whitelisted functions (``attndyn.symbolic.parse``)."""
    from attndyn.symbolic.losses import loss_from_spec

    spec = str(spec).strip()
    if spec in PRESETS:
        if K < 2:
            raise ValueError(f"--loss {spec} needs K >= 2 (student 0, teacher 1), got K = {K}")
        spec = PRESETS[spec]
    loss, _ = loss_from_spec(spec, K, L, params=())
    return loss


# ---------------------------------------------------------------------------
# the model options


def add_model_options(p: argparse.ArgumentParser, kinds=KINDS, *, title: str = "model") -> None:
    """Declare the model options (every default ``None``: :func:`model_spec` fills in
    :data:`MODEL_DEFAULTS`, and :func:`model_options_given` can tell what was typed).
    ``--model`` is offered when more than one parameterisation applies."""
    g = p.add_argument_group(title)
    if len(kinds) > 1:
        g.add_argument("--model", choices=tuple(kinds), default=None,
                       help="parameterisation: " + ", ".join(f"{k} ({KIND_NAMES[k]})"
                                                              for k in kinds)
                       + " (default tied)")
    g.add_argument("--K", type=int, default=None,
                   help=f"number of indices, {LIMITS['K'][0]}..{LIMITS['K'][1]} (default 2)")
    g.add_argument("--trainable", default=None,
                   help="comma-separated trainable indices, 0-based (default 0)")
    g.add_argument("--L", type=int, default=None,
                   help=f"number of tokens, {LIMITS['L'][0]}..{LIMITS['L'][1]} (default 1)")
    g.add_argument("--loss", default=None, help=LOSS_HELP + " (default square: the D.3 example)")
    g.add_argument("--C", default=None,
                   help="token covariance, L x L, rows separated by ';' (e.g. '1,0.3;0.3,1'); "
                        "identity by default")
    g.add_argument("--weight-decay", type=float, default=None, help="gamma >= 0 (default 0)")
    p.set_defaults(_model_kinds=tuple(kinds))


def model_options_given(args) -> list:
    """The model options typed on the command line (those not ``None``)."""
    return [k for k in MODEL_DEFAULTS if getattr(args, k, None) is not None]


@dataclass(frozen=True)
class ModelSpec:
    """The model a command runs, read once from the model options and validated.

    ``kind`` is ``"tied"``, ``"untied"`` or ``"s"``; ``trainable`` 0-based indices; ``C``
    the token covariance as rows (``None``: identity); ``loss`` the text typed and
    ``loss_fn`` the parsed callable ``G -> sympy expression``."""

    kind: str
    K: int
    trainable: tuple
    L: int
    loss: str
    weight_decay: float
    C: tuple | None = None
    loss_fn: Callable | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict:
        """The spec as JSON data (the loss as typed)."""
        return {"kind": self.kind, "K": self.K, "trainable": list(self.trainable), "L": self.L,
                "loss": self.loss, "weight_decay": self.weight_decay,
                "C": None if self.C is None else [list(r) for r in self.C]}

    def C_list(self):
        """``C`` as nested lists, or ``None``."""
        return None if self.C is None else [list(r) for r in self.C]


def _parse_C(text: str, L: int) -> tuple:
    rows = tuple(tuple(float_list(row, "C")) for row in str(text).split(";"))
    if len(rows) != L or any(len(r) != L for r in rows):
        raise ValueError(f"--C must be an L x L matrix (L = {L}) with rows separated by ';', "
                         f"got {len(rows)} row(s) of lengths {', '.join(str(len(r)) for r in rows)}")
    return rows


def model_spec(args) -> ModelSpec:
    """Read and validate the model options of ``args`` (see :func:`add_model_options`)."""
    from attndyn.symbolic.hierarchy import check_K, check_trainable

    v = {k: (getattr(args, k, None) if getattr(args, k, None) is not None else d)
         for k, d in MODEL_DEFAULTS.items()}
    kinds = getattr(args, "_model_kinds", KINDS)
    if v["model"] not in kinds:
        raise ValueError(f"--model must be one of {', '.join(kinds)} here, got {v['model']}")
    K = check_K(check_size(v["K"], "K"), "--K")  # the CLI's range first: 1..32
    L = check_size(v["L"], "L")
    trainable = check_trainable(int_list(v["trainable"], "trainable"), K)
    if not trainable:
        raise ValueError("--trainable must name at least one index in 0..{}".format(K - 1))
    wd = check_number(float(v["weight_decay"]), "weight-decay", strict=False)
    C = None if v["C"] is None else _parse_C(v["C"], L)
    loss_fn = loss_from_option(v["loss"], K, L)
    return ModelSpec(kind=v["model"], K=K, trainable=tuple(trainable), L=L, loss=str(v["loss"]),
                     weight_decay=float(wd), C=C, loss_fn=loss_fn)


def model_from_spec(spec: ModelSpec):
    """The model of ``spec``: :class:`attndyn.TiedModel`, :class:`attndyn.UntiedModel` or
    :class:`attndyn.SModel` (the one place the CLI builds a model)."""
    import attndyn

    cls = {"tied": attndyn.TiedModel, "untied": attndyn.UntiedModel,
           "s": attndyn.SModel}[spec.kind]
    return cls(spec.K, list(spec.trainable), spec.loss_fn, L=spec.L, C=spec.C_list(),
               weight_decay=spec.weight_decay)


def check_init_bytes(K: int, d: int, widths, factors: int, options: str) -> None:
    """Refuse initial weights above :data:`MAX_INIT_BYTES` before they are drawn."""
    need = 8 * d * sum(widths) * factors
    if need > MAX_INIT_BYTES:
        raise ValueError(f"{options}: the initial weights would take {need / 2**30:.3g} GiB "
                         f"(K = {K}, d = {d}), above the CLI's limit of "
                         f"{MAX_INIT_BYTES / 2**30:.3g} GiB")


# ---------------------------------------------------------------------------
# JSON

SCHEMA = "attndyn.cli/1"

#: the keys of ``result`` per command (all required; more may follow in a later version)
RESULT_KEYS = {
    "integrate": ("model", "method", "t", "observables", "params"),
    "sgd": ("model", "t", "observables", "params", "seed"),
    "compare": ("model", "t", "errors", "params", "assumptions", "sgd", "theory"),
    "verify": ("setting", "checks"),
    "sweep": ("function", "out", "n_points", "failed", "points"),
    "reproduce": ("figures", "failed"),
    "scaling": ("fixed", "columns", "rows", "unused"),
    "transformer": ("action", "setup", "seed"),
}

#: the envelope every ``--json`` output is (a JSON Schema, draft 2020-12)
JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA,
    "title": "attndyn command-line JSON output",
    "type": "object",
    "required": ["schema", "command", "attndyn", "status", "ok", "message", "saved", "result"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": SCHEMA},
        "command": {"type": "string"},
        "attndyn": {"type": "string"},
        "status": {"type": "integer"},
        "ok": {"type": "boolean"},
        "message": {"type": "string"},
        "saved": {"type": "array", "items": {"type": "string"}},
        "result": {"type": "object"},
    },
}


def clean_json(obj):
    """``obj`` as JSON data: numpy scalars and arrays as numbers and lists, NaN as ``null``,
    infinities as the strings ``"inf"`` and ``"-inf"``, tuples as lists, keys as strings."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return clean_json(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(obj, np.random.SeedSequence):
        from attndyn.numeric.core.labelled import jsonable
        return jsonable(obj)
    if obj is None or isinstance(obj, (int, str)):
        return obj
    return str(obj)


def json_envelope(command: str, *, status: int, message: str, result: dict,
                  saved=(), ok: bool | None = None) -> dict:
    """The one ``--json`` object (:data:`JSON_SCHEMA`): ``ok`` defaults to ``status == 0``;
    ``saved`` lists the files written."""
    from attndyn import __version__

    return {"schema": SCHEMA, "command": command, "attndyn": __version__, "status": int(status),
            "ok": bool(status == 0 if ok is None else ok), "message": str(message),
            "saved": [str(p) for p in (saved or ()) if p],
            "result": clean_json(result)}


def print_json(command: str, **kwargs) -> None:
    """Print :func:`json_envelope` as one line of strict JSON."""
    import json

    print(json.dumps(json_envelope(command, **kwargs), allow_nan=False))
