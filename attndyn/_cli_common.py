"""Options and parsing shared by every CLI command (model, loss)."""

from __future__ import annotations

import re

LOSS_HELP = ("loss: a preset (square = (G1-G2)^2, the D.3 example; linear, h2, h3 = "
             "teacher-student (F(G1)-F(G2))^2/2), a named spec (mse:<act>[,<act>], "
             "softmax[:L=2], denoising, attention2), or an expression in G[i,j,k] (0-based; "
             "G1..GK stand for G[0,0,k-1] when L = 1)")

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
    """A loss callable ``G -> sympy expression`` from a ``--loss`` option."""
    from attndyn.symbolic.losses import loss_from_spec

    spec = str(spec).strip()
    if spec in PRESETS:
        if K < 2:
            raise ValueError(f"--loss {spec} needs K >= 2 (student 0, teacher 1), got K = {K}")
        spec = PRESETS[spec]
    elif L == 1:
        spec = re.sub(r"\bG(\d+)\b", lambda m: f"G[0,0,{int(m.group(1)) - 1}]", spec)
    out = loss_from_spec(spec, K, L)
    return out[0] if isinstance(out, tuple) else out
