"""Every ```python snippet of README.md and docs/*.md runs as written.

A snippet runs in a fresh interpreter in an empty folder, with one BLAS and one numba thread.
A snippet preceded by the line ``<!-- snippet: slow -->`` runs only with ``-m slow``;
``<!-- snippet: skip -->`` marks a fragment that is not meant to run alone (say why beside it).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(?:<!--\s*snippet:\s*(\w+)\s*-->\s*\n)?```python\n(.*?)```", re.S)


def _snippets():
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for n, m in enumerate(FENCE.finditer(text)):
            line = text[:m.start()].count("\n") + 1
            out.append(pytest.param(m.group(2), m.group(1) or "",
                                    id=f"{path.relative_to(ROOT)}:{line}",
                                    marks=[pytest.mark.slow] if m.group(1) == "slow" else []))
    return out


def test_there_are_snippets():
    assert len(_snippets()) >= 4


@pytest.mark.parametrize("code, tag", _snippets())
def test_snippet_runs(code, tag, tmp_path):
    if tag == "skip":
        pytest.skip("fragment, not meant to run alone")
    env = dict(os.environ, MPLBACKEND="Agg", NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"snippet failed:\n{code}\n--- stderr ---\n{r.stderr[-3000:]}"
