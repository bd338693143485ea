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
