"""mypy passes on the public API modules listed in docs/_tools/typecheck.py (the
``[tool.mypy]`` settings of pyproject.toml; mypy comes with the ``typing`` extra)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "docs" / "_tools" / "typecheck.py"


def test_public_api_type_checks():
    pytest.importorskip("mypy", reason="mypy not installed (pip install -e '.[typing]')")
    r = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    sys.path.insert(0, str(TOOL.parent))
    try:
        from typecheck import CHECKED
    finally:
        sys.path.remove(str(TOOL.parent))
    assert f"Success: no issues found in {len(CHECKED)} source files" in r.stdout


def test_typecheck_catches_an_error(tmp_path):
    """The runner reports a type error (so a pass means something)."""
    pytest.importorskip("mypy", reason="mypy not installed (pip install -e '.[typing]')")
    bad = tmp_path / "bad_typing_probe.py"
    bad.write_text("def f(n: int) -> str:\n    return n\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), str(bad)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "Incompatible return value type" in r.stdout
