"""The leaves stay leaves: symbolic never loads numba, kernels never load sympy."""

import subprocess
import sys

import pytest

CHECK = """
import importlib, pkgutil, sys
import attndyn.{layer} as pkg
for m in pkgutil.iter_modules(pkg.__path__):
    importlib.import_module("attndyn.{layer}." + m.name)
bad = [name for name in ("{banned}",) if name in sys.modules]
assert not bad, "attndyn.{layer} loaded " + repr(bad)
print("ok")
"""


@pytest.mark.parametrize("layer,banned", [("symbolic", "numba"), ("kernels", "sympy")])
def test_leaf_layers(layer, banned):
    out = subprocess.run([sys.executable, "-c", CHECK.format(layer=layer, banned=banned)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


def test_top_level_import_is_lazy():
    code = "import sys, attndyn; assert 'numba' not in sys.modules and 'sympy' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_public_api_names():
    import attndyn
    assert callable(attndyn.TiedModel)
    from attndyn.numeric import matrix_flow  # noqa: F401
    with pytest.raises(AttributeError):
        attndyn.no_such_name


# ---------------------------------------------------------------------------
# static import checks (ast): every import, including lazy ones inside functions and
# importlib.import_module("...") calls, so they cover modules that are not imported here

import import_reader  # noqa: E402
from import_reader import imports_of  # noqa: E402

ROOT = import_reader.ROOT


def _files(folder):
    return import_reader.source_files(folder)


def _violations(folder, banned):
    bad = []
    for p in _files(folder):
        for name in imports_of(p):
            if any(name == b or name.startswith(b + ".") for b in banned):
                bad.append(f"{p.relative_to(ROOT)} imports {name}")
    return sorted(bad)


@pytest.mark.parametrize("folder,banned", [
    ("symbolic", ("attndyn.numeric", "attndyn.kernels", "numba")),
    ("kernels", ("attndyn.numeric", "attndyn.symbolic", "sympy")),
    ("numeric/attention", ("attndyn.numeric.transformer", "attndyn.numeric.scaling")),
    ("numeric/transformer", ("attndyn.numeric.attention",)),
    ("numeric/scaling", ("attndyn.numeric.attention",)),
])
def test_static_import_direction(folder, banned):
    if not (ROOT / folder).is_dir():
        pytest.skip(f"{folder} does not exist yet")
    assert len(_files(folder)) >= 1
    bad = _violations(folder, banned)
    assert not bad, "\n".join(bad)


def test_static_import_checker_sees_lazy_and_relative_imports(tmp_path):
    probe = ROOT / "numeric" / "attention" / "base.py"  # a real module: resolve its package
    names = imports_of(probe)
    assert "attndyn.symbolic.hierarchy" in names
    src = ("def f():\n    from ..scaling import bounds\n    import importlib\n"
           "    importlib.import_module('attndyn.numeric.transformer.model')\n"
           "    from attndyn.kernels import sgd\n"
           "    importlib.import_module('.flow', __name__)\n")
    fake = tmp_path / "numeric" / "attention" / "probe.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(src)
    got = imports_of(fake, root=tmp_path)
    assert {"attndyn.numeric.scaling", "attndyn.numeric.scaling.bounds",
            "attndyn.numeric.transformer.model", "attndyn.kernels.sgd",
            "attndyn.numeric.attention.flow"} <= got
