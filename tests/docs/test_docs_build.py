"""The documentation site builds with warnings as errors, lists every public name, and loads
in headless Chromium without console errors (docs/building.md).

Slow (the build imports every module and runs the fast gallery scripts: 3 minutes, 48 s of CPU, on 2
cores): ``python -m pytest -m slow tests/docs``. Needs the ``docs`` extra; the browser check
also needs Debian's ``chromium`` and ``chromium-driver``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    for mod in ("sphinx", "pydata_sphinx_theme", "myst_parser", "sphinx_gallery", "mathjax"):
        pytest.importorskip(mod, reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, MPLBACKEND="Agg", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    env.pop("ATTNDYN_GALLERY", None)  # the default: the fast scripts run
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-b", "html", str(ROOT / "docs"),
                        str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, f"sphinx -W failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return out


def test_site_builds_with_warnings_as_errors(site):
    for page in ("index.html", "api/index.html", "gallery/index.html", "building.html",
                 "_static/mathjax/tex-chtml.js"):
        assert (site / page).is_file(), page


def test_api_reference_lists_every_public_name(site):
    import attndyn

    face = (site / "api" / "generated" / "face0-attndyn.html").read_text(encoding="utf-8")
    missing = [n for n in attndyn.__all__ if not n.startswith("__")
               and not (site / "api" / "generated" / f"attndyn.{n}.html").is_file()]
    assert not missing, f"no API page for {missing}"
    assert all(f"attndyn.{n}.html" in face for n in attndyn.__all__ if not n.startswith("__"))


def test_gallery_shows_the_fast_figures(site):
    images = sorted(p.name for p in (site / "_images").glob("sphx_glr_*.png"))
    assert any(n.startswith("sphx_glr_tied_d3_") and "thumb" not in n for n in images), images
    assert any(n.startswith("sphx_glr_scaling_laws_") and "thumb" not in n for n in images), images


def test_site_in_headless_chromium(site, tmp_path):
    pytest.importorskip("selenium", reason="selenium not installed (the docs extra)")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("apt-get install chromium chromium-driver")
    shots = tmp_path / "shots"
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "_tools" / "check_site.py"),
                        str(site), "--screenshots", str(shots)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "3 of 3 pages passed" in r.stdout
    assert sorted(p.name for p in shots.glob("*.png")) == ["api.png", "gallery.png", "index.png"]
