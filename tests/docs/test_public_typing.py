"""mypy passes on the public API modules with the ``[tool.mypy]`` settings of pyproject.toml
(mypy comes with the ``typing`` extra). The public modules are derived from
``attndyn.__all__`` (every module that defines one of its names, and ``attndyn`` itself for
``__version__``) plus the modules of ``attndyn.symbolic``, so a new public module is checked
without being listed anywhere; docs/_tools/typecheck.py's CHECKED list is checked with them.
The settings hold every checked module to ``disallow_untyped_defs``,
``disallow_incomplete_defs``, ``check_untyped_defs`` and ``warn_return_any``; the only
relaxations are the overrides of pyproject.toml (third-party packages and the compiled
kernels), and none may relax a public module: neither a strict flag set to false nor
``ignore_errors``."""

from __future__ import annotations

import fnmatch
import importlib
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import attndyn

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "docs" / "_tools" / "typecheck.py"
STRICT = ("disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
          "warn_return_any")


def public_modules() -> list[str]:
    """Every module that defines a name of ``attndyn.__all__``, ``attndyn`` itself and the
    public modules of ``attndyn.symbolic``."""
    mods = {"attndyn"}
    for name in attndyn.__all__:
        obj = getattr(attndyn, name)
        mod = getattr(obj, "__module__", None)
        if isinstance(mod, str) and mod.startswith("attndyn"):
            mods.add(mod)
    symbolic = importlib.import_module("attndyn.symbolic")
    mods |= {f"attndyn.symbolic.{m.name}" for m in pkgutil.iter_modules(symbolic.__path__)
             if not m.name.startswith("_")}
    return sorted(mods)


def _checked() -> list[str]:
    sys.path.insert(0, str(TOOL.parent))
    try:
        from typecheck import CHECKED
    finally:
        sys.path.remove(str(TOOL.parent))
    return list(CHECKED)


def _mypy_config() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_public_modules_are_derived_from_all():
    mods = public_modules()
    # the modules of a few public names, and none twice
    for mod in ("attndyn", "attndyn._sweep", "attndyn.numeric.attention.untied.fastslow",
                "attndyn.numeric.attention.tied.hierarchy", "attndyn.numeric.core.results",
                "attndyn.symbolic.potential", "attndyn.symbolic.words"):
        assert mod in mods
    assert len(mods) == len(set(mods)) >= 35
    assert attndyn.untied_flow.__module__ in mods


def test_settings_are_strict_and_relaxations_named():
    cfg = _mypy_config()
    for flag in STRICT:
        assert cfg.get(flag) is True, f"[tool.mypy] must set {flag} = true"
    public = set(public_modules())
    for ov in cfg.get("overrides", []):
        if not any(ov.get(flag) is False for flag in STRICT) and not ov.get("ignore_errors"):
            continue
        patterns = ov["module"] if isinstance(ov["module"], list) else [ov["module"]]
        relaxed = {m for m in public if any(fnmatch.fnmatchcase(m, p) for p in patterns)}
        assert not relaxed, f"public modules relaxed: {sorted(relaxed)}"


def test_public_api_type_checks():
    """One mypy run over the public modules and CHECKED; any error fails."""
    pytest.importorskip("mypy", reason="mypy not installed (pip install -e '.[typing]')")
    mods = sorted(set(public_modules()) | set(_checked()))
    r = subprocess.run([sys.executable, str(TOOL), *mods], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert f"Success: no issues found in {len(mods)} source files" in r.stdout


def _probe(tmp_path, source):
    """mypy with the project's settings on a one-file probe holding ``source``."""
    bad = tmp_path / "typing_probe.py"
    bad.write_text(source)
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                           str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                           str(bad)], capture_output=True, text=True, timeout=600)


def test_typecheck_catches_an_error(tmp_path):
    """The runner reports a type error (so a pass means something)."""
    pytest.importorskip("mypy", reason="mypy not installed (pip install -e '.[typing]')")
    r = _probe(tmp_path, "def f(n: int) -> str:\n    return n\n")
    assert r.returncode == 1 and "Incompatible return value type" in r.stdout


def test_typecheck_catches_a_missing_annotation(tmp_path):
    """The settings refuse an unannotated function (the completeness flags are on)."""
    pytest.importorskip("mypy", reason="mypy not installed (pip install -e '.[typing]')")
    r = _probe(tmp_path, "def f(n):\n    return n\n")
    assert r.returncode == 1 and "[no-untyped-def]" in r.stdout
