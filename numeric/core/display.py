"""Notebook display of the package's objects: one HTML layout for every ``_repr_html_``.

A model, potential, theory, transformer or result shows a bold title, a table of its
parameters (name, value) and, optionally, a second table (for example its observables).
Every text is HTML-escaped; long tables are cut with a line saying how many rows were left out.

>>> from attndyn.numeric.core.display import html_summary
>>> html = html_summary("TiedModel", {"K": 2, "trainable": [0], "route": "wick"})
>>> html.startswith("<div") and "<td>route</td><td>wick</td>" in html
True
"""

from __future__ import annotations

import html as _html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["html_summary", "format_value"]

#: Rows shown before a table is cut.
MAX_ROWS: int = 20


def format_value(value: Any, *, max_chars: int = 120) -> str:
    """A short text for one value: floats to 6 significant digits, arrays by shape and
    dtype, long texts cut at ``max_chars``.

    >>> format_value(0.1234567891), format_value(np.zeros((3, 4)))
    ('0.123457', 'array (3, 4) float64')
    """
    if isinstance(value, (bool, np.bool_)):
        text = str(bool(value))
    elif isinstance(value, (float, np.floating)):
        text = f"{float(value):.6g}"
    elif isinstance(value, np.ndarray):
        text = f"array {value.shape} {value.dtype}"
    else:
        text = str(value)
    if max_chars < 4:
        raise ValueError(f"max_chars must be at least 4, got {max_chars}")
    return text if len(text) <= max_chars else text[:max_chars - 3] + "..."


def _rows(pairs: Sequence[tuple[Any, Any]] | Mapping[Any, Any]) -> tuple[str, int]:
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    shown = items[:MAX_ROWS]
    body = "".join(f"<tr><td>{_html.escape(str(k))}</td>"
                   f"<td>{_html.escape(format_value(v))}</td></tr>" for k, v in shown)
    return body, len(items) - len(shown)


def html_summary(title: str, fields: Mapping[str, Any], *, subtitle: str = "",
                 table: Sequence[tuple[Any, Any]] | Mapping[Any, Any] | None = None,
                 table_header: tuple[str, str] = ("name", "value")) -> str:
    """The HTML of one object for a notebook: ``title`` in bold, ``subtitle`` beside it,
    ``fields`` as a two-column table (parameter, value), then ``table`` (optional) with
    ``table_header``. At most :data:`MAX_ROWS` rows per table.

    >>> out = html_summary("Trajectory", {"status": 0}, table={"q_11": 0.5},
    ...                    table_header=("observable", "final value"))
    >>> "<th>observable</th>" in out and "<td>q_11</td><td>0.5</td>" in out
    True
    """
    if not isinstance(title, str) or not title:
        raise ValueError(f"title must be a non-empty string, got {title!r}")
    if not isinstance(fields, Mapping):
        raise TypeError(f"fields must be a mapping name -> value, got {type(fields).__name__}")
    head = f"<p><b>{_html.escape(title)}</b>"
    head += f" {_html.escape(subtitle)}</p>" if subtitle else "</p>"
    body, cut = _rows(fields)
    parts = [head, f"<table><tr><th>parameter</th><th>value</th></tr>{body}</table>"]
    if cut:
        parts.append(f"<p>... {cut} more parameters</p>")
    if table is not None:
        a, b = (_html.escape(str(h)) for h in table_header)
        body, cut = _rows(table)
        parts.append(f"<table><tr><th>{a}</th><th>{b}</th></tr>{body}</table>")
        if cut:
            parts.append(f"<p>... {cut} more rows</p>")
    return '<div class="attndyn-summary">' + "".join(parts) + "</div>"
