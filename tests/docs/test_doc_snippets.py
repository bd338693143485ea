"""Every ```python snippet and every ```toml sweep spec of README.md and docs/*.md runs as
written.

A snippet runs in a fresh interpreter in an empty folder, with one BLAS and one numba thread.
A snippet preceded by the line ``<!-- snippet: slow -->`` runs only with ``-m slow``;
``<!-- snippet: skip -->`` marks a fragment that is not meant to run alone (say why beside it).
A TOML block is a sweep spec: ``attndyn sweep SPEC.toml`` must succeed at every point
(exit status 0), in the same kind of fresh folder.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FENCE = re.compile(r"(?:<!--\s*snippet:\s*(\w+)\s*-->\s*\n)?```(python|toml)\n(.*?)```", re.S)
ENV = dict(os.environ, MPLBACKEND="Agg", NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1")


def _pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(lang: str):
    out = []
    for path in _pages():
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(2) != lang:
                continue
            line = text[:m.start()].count("\n") + 1
            out.append(pytest.param(m.group(3), m.group(1) or "",
                                    id=f"{path.relative_to(ROOT)}:{line}",
                                    marks=[pytest.mark.slow] if m.group(1) == "slow" else []))
    return out


def test_there_are_snippets():
    assert len(_blocks("python")) >= 4
    assert len(_blocks("toml")) >= 1


def test_fence_finds_both_kinds():
    text = "x\n```python\nprint(1)\n```\n<!-- snippet: skip -->\n```toml\na = 1\n```\n"
    found = [(m.group(1), m.group(2), m.group(3)) for m in FENCE.finditer(text)]
    assert found == [(None, "python", "print(1)\n"), ("skip", "toml", "a = 1\n")]


@pytest.mark.parametrize("code, tag", _blocks("python"))
def test_snippet_runs(code, tag, tmp_path):
    if tag == "skip":
        pytest.skip("fragment, not meant to run alone")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"snippet failed:\n{code}\n--- stderr ---\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("spec, tag", _blocks("toml"))
def test_sweep_spec_runs(spec, tag, tmp_path):
    if tag == "skip":
        pytest.skip("fragment, not meant to run alone")
    path = tmp_path / "spec.toml"
    path.write_text(spec, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "attndyn", "sweep", str(path), "--out",
                        str(tmp_path / "out"), "--workers", "1", "--no-progress"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (f"sweep spec failed (exit {r.returncode}):\n{spec}\n"
                               f"--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n"
                               f"{r.stderr[-3000:]}")
