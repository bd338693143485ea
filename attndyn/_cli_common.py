"""Options and parsing shared by every CLI command (model, loss).

``--loss`` text is never evaluated as Python: it goes through
:func:`attndyn.symbolic.losses.loss_from_spec`, whose expressions are built by
the whitelist parser of :mod:`attndyn.symbolic.parse` (``ast`` tree checked
node by node, size limits before any expansion). A bad ``--loss`` is a
one-line error, exit code 2.
"""

from __future__ import annotations

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


def int_list(text: str, name: str) -> list:
    try:
        return [int(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ValueError(f"--{name} must be a comma-separated list of ints, got {text!r}") from None


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
