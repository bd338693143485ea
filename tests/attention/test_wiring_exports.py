"""The public names of the limit laws, the spectral density and the array-API SGD backend
are exported lazily from attndyn and attndyn.numeric (one table)."""

import importlib
import subprocess
import sys

import pytest

NAMES = {"UntiedLaw": "attndyn.numeric.attention.untied.limit",
         "gaussian_pair": "attndyn.numeric.attention.untied.limit",
         "DiagonalLaw": "attndyn.numeric.attention.untied.limit",
         "spectral_density": "attndyn.numeric.attention.tied.spectral",
         "SpectralDensity": "attndyn.numeric.attention.limitcore",  # tied and untied share it
         "xp_sgd": "attndyn.numeric.attention.xp_sgd",
         "xp_sgd_runs": "attndyn.numeric.attention.xp_sgd"}


@pytest.mark.parametrize("pkg", ["attndyn", "attndyn.numeric"])
def test_exported_and_identical(pkg):
    mod = importlib.import_module(pkg)
    for name, src in NAMES.items():
        assert name in mod.__all__ and name in dir(mod)
        assert getattr(mod, name) is getattr(importlib.import_module(src), name)


def test_exports_stay_lazy():
    # importing attndyn does not import the modules behind the new names
    code = ("import sys, attndyn; "
            "print(any(m in sys.modules for m in ('attndyn.numeric.attention.tied.spectral', "
            "'attndyn.numeric.attention.limitcore', "
            "'attndyn.numeric.attention.xp_sgd', 'attndyn.numeric.attention.untied.limit')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
