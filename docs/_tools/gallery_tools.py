"""Gallery and maths support for the documentation build (imported by docs/conf.py).

- :func:`filename_pattern`: which scripts of ``examples/`` run during the build
  (``ATTNDYN_GALLERY``: ``fast``, the default, runs the scripts that take seconds; ``all``
  runs every one, about half an hour on 2 cores; ``none`` runs none; anything else is a
  regular expression matched against the script's path). The others are shown, not run.
- :func:`reset_argv`: the command line each script gets, so that it draws its figure into a
  temporary file (the scripts keep their own command-line interface).
- :func:`scraper`: the open matplotlib figures of a script, or else the PNG files it wrote.
- :func:`copy_mathjax`: MathJax 3 from the ``django-static-mathjax`` package (in the ``docs``
  extra) into the built site, so that the maths renders without a network.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import tempfile
import time

MATHJAX_PATH = "mathjax/tex-chtml.js"

# scripts that run in seconds (measured, 2 cores, warm caches): tied_d3 8 s, scaling_laws 26 s
FAST = r"(tied_d3|scaling_laws)\.py$"

# how each script is told to draw its figure into a file
_FIGURE_ARGS = {
    "tied_d3.py": lambda out: [out],
    "scaling_laws.py": lambda out: [out],
    "sgd_vs_theory.py": lambda out: ["--plot", out],
    "finite_eta_flow.py": lambda out: ["--png", out],
    "transformer_lemmas.py": lambda out: ["--quick", "--plot", out],
}

_OUT = pathlib.Path(tempfile.mkdtemp(prefix="attndyn-gallery-"))
_RUNS: dict[str, tuple[float, pathlib.Path]] = {}


def filename_pattern(env: dict | None = None) -> str:
    """The regular expression of the scripts that run during the build."""
    choice = (os.environ if env is None else env).get("ATTNDYN_GALLERY", "fast").strip()
    if choice in ("", "fast"):
        return "/" + FAST
    if choice == "all":
        return r"\.py$"
    if choice == "none":
        return r"^$"
    try:
        re.compile(choice)
    except re.error as exc:
        raise ValueError(f"ATTNDYN_GALLERY must be fast, all, none or a regular expression, "
                         f"got {choice!r} ({exc})") from None
    return choice


def reset_argv(gallery_conf, script_vars) -> list[str]:
    """``sys.argv[1:]`` for a script: where to draw its figure, if it takes one."""
    src = pathlib.Path(script_vars["src_file"])
    out = _OUT / (src.stem + ".png")
    _RUNS[str(src)] = (time.time(), out)
    make = _FIGURE_ARGS.get(src.name)
    return make(str(out)) if make else []


def scraper(block, block_vars, gallery_conf) -> str:
    """The figures of one code block: the open matplotlib figures, or else the PNG files
    the script wrote (to the path it was given, or next to itself) since it started."""
    from sphinx_gallery.scrapers import figure_rst, matplotlib_scraper

    rst = matplotlib_scraper(block, block_vars, gallery_conf)
    if rst.strip():
        return rst
    src = pathlib.Path(block_vars["src_file"])
    started, out = _RUNS.get(str(src), (time.time(), None))
    found = []
    if out is not None and out.exists():
        found.append(out)
    found += sorted(p for p in src.parent.rglob("*.png") if p.stat().st_mtime >= started)
    paths = []
    for p in found:
        target = pathlib.Path(block_vars["image_path_iterator"].next())
        shutil.move(str(p), target) if p.parent == _OUT else shutil.copyfile(p, target)
        paths.append(str(target))
    return figure_rst(paths, gallery_conf["src_dir"]) if paths else ""


def cleanup(app, exc) -> None:
    """Sphinx ``build-finished`` hook: remove the temporary folder of the figures."""
    shutil.rmtree(_OUT, ignore_errors=True)


def mathjax_source() -> pathlib.Path | None:
    """The ``es5`` folder of MathJax 3 shipped by ``django-static-mathjax``, if installed."""
    try:
        import mathjax  # the django-static-mathjax package
    except ImportError:
        return None
    es5 = pathlib.Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return es5 if (es5 / "tex-chtml.js").is_file() else None


def copy_mathjax(app, exc) -> None:
    """Copy MathJax (the TeX input, the CommonHTML output and its fonts, the menu and
    accessibility components it loads on demand) into ``_static/mathjax`` of the site."""
    if exc is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    src = mathjax_source()
    if src is None:
        logging.getLogger(__name__).warning(
            "MathJax not found: install the docs extra (pip install -e '.[docs]'); the pages "
            "load it from _static/mathjax and show raw TeX without it")
        return
    dst = pathlib.Path(app.outdir) / "_static" / "mathjax"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "tex-chtml.js", dst / "tex-chtml.js")
    for sub in ("input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y", "adaptors"):
        if (src / sub).is_dir():
            shutil.copytree(src / sub, dst / sub, dirs_exist_ok=True)
    lic = src.parent / "LICENSE"
    if lic.is_file():
        shutil.copyfile(lic, dst / "LICENSE")
