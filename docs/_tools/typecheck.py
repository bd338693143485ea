"""Run mypy with the ``[tool.mypy]`` settings of pyproject.toml on the modules named, by
default :data:`CHECKED`; tests/docs/test_public_typing.py runs it on every public module
(derived from ``attndyn.__all__``) plus :data:`CHECKED`, with no module exempted.

    python docs/_tools/typecheck.py [MODULE ...]

The import package ``attndyn`` is assembled from several folders (``package-dir`` in
pyproject.toml: ``symbolic/`` installs as ``attndyn.symbolic``, ...), which mypy cannot map
from the source tree. So this script links the folders into a temporary tree with the
installed layout and points ``MYPYPATH`` at it. Exit status: mypy's.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
# checked by default; tests/docs/test_public_typing.py adds every public module to these
CHECKED = [
    "attndyn", "attndyn.numeric", "attndyn.symbolic", "attndyn.kernels",
    "attndyn.numeric.core", "attndyn.numeric.attention", "attndyn.numeric.scaling",
    "attndyn.numeric.transformer",
    "attndyn.numeric.core.results", "attndyn.numeric.core.plots", "attndyn.numeric.core.display",
    "attndyn.numeric.scaling.lambertw", "attndyn.numeric.scaling.bounds",
    "attndyn.kernels.lambertw", "attndyn.kernels.integrate",
    "attndyn.numeric.core.types", "attndyn._sweep", "attndyn.numeric.transformer.model",
    "attndyn.numeric.attention.base", "attndyn.numeric.attention.compare",
    "attndyn.numeric.attention.flow", "attndyn.numeric.attention.tied.model",
    "attndyn.numeric.attention.tied.spectral", "attndyn.numeric.attention.untied.model",
    "attndyn.numeric.attention.direct.model", "attndyn.numeric.attention.tied.hierarchy",
    "attndyn.numeric.attention.untied.hierarchy", "attndyn.numeric.attention.tied.limit",
    "attndyn.numeric.attention.untied.limit", "attndyn.numeric.attention.training",
    "attndyn.numeric.attention.xp_sgd", "attndyn.symbolic.initial", "attndyn.numeric.core.claims",
    "attndyn.numeric.attention.untied.fastslow",
    "attndyn.numeric.attention.untied.noise_flow", "attndyn.numeric.attention.tied.finite_width",
    "attndyn.numeric.attention.corrections", "attndyn.kernels._layoutcache",
    "attndyn.numeric.attention.potentials.quadrature",
    "attndyn.numeric.attention.figures", "attndyn.numeric.attention.figures.common",
    "attndyn.numeric.attention.figures.fig1", "attndyn.numeric.attention.figures.fig2",
    "attndyn.numeric.attention.figures.fig3", "attndyn.numeric.attention.figures.fig4",
    "attndyn.__main__", "attndyn.numeric.attention.theorems",
    # the compiled kernels pass under their relaxation (pyproject.toml's override)
    "attndyn.kernels.extfloat", "attndyn.kernels.hermite", "attndyn.kernels.moments",
    "attndyn.kernels.quadrature", "attndyn.kernels.rhs", "attndyn.kernels.sgd",
    "attndyn.kernels.subordination", "attndyn.kernels.taylor",
]
# import name -> source folder (pyproject.toml's package-dir, top level)
LAYOUT = {"attndyn/symbolic": "symbolic", "attndyn/kernels": "kernels",
          "attndyn/numeric": "numeric"}


def link_tree(dest: pathlib.Path) -> pathlib.Path:
    """``dest/attndyn`` with the installed layout, made of symbolic links into the source."""
    pkg = dest / "attndyn"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "attndyn").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in LAYOUT.items():
        (dest / name).symlink_to(ROOT / folder, target_is_directory=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    modules = list(sys.argv[1:] if argv is None else argv) or CHECKED
    with tempfile.TemporaryDirectory(prefix="attndyn-mypy-") as tmp:
        tree = link_tree(pathlib.Path(tmp))
        env = dict(os.environ, MYPYPATH=str(tree))
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", os.path.join(tmp, ".mypy_cache")]
        for m in modules:
            cmd += ["-m", m]
        return subprocess.run(cmd, cwd=tree, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
