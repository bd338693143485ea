"""Sphinx configuration of the attndyn documentation.

Build (the one command, see docs/building.md)::

    python -m sphinx -W -b html docs docs/_build/html

The API reference is generated at build time from the public faces of the package
(``__all__`` of ``attndyn``, ``attndyn.numeric``, ``attndyn.numeric.scaling``,
``attndyn.numeric.transformer``, and of every module of ``attndyn.symbolic``,
``attndyn.kernels``, ``attndyn.numeric.core`` and ``attndyn.numeric.attention``), never from a
hard-coded list of files, so moving a module does not break it. The gallery runs the scripts of
``examples/`` that match ``ATTNDYN_GALLERY`` (default: the fast ones); the others are shown
with their code.
"""

from __future__ import annotations

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_tools"))

import api_pages  # noqa: E402  (docs/_tools/api_pages.py)
import gallery_tools  # noqa: E402  (docs/_tools/gallery_tools.py)

import attndyn  # noqa: E402

project = "attndyn"
author = "the attndyn developers"
copyright = "the attndyn developers"
release = attndyn.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_tools", "api/_templates", "gallery/*.ipynb",
                    "gallery/*.py", "gallery/*.zip", "gallery/*.md5",
                    "Thumbs.db", ".DS_Store"]
templates_path = ["api/_templates"]

# --- Markdown pages (MyST) ---------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
# the pages link to files of the repository (source, README); those are not pages
suppress_warnings = ["myst.xref_missing",
                     # pages that open with a level-2 heading keep it as their title
                     "myst.header",
                     # a short name in a docstring (``C``, ``names``) that several documented
                     # classes define: the link goes to the first; not worth a failed build
                     "ref.python"]

# --- API reference ---------------------------------------------------------------------
api_pages.write_api_pages(HERE / "api" / "generated")
autosummary_generate = True
autosummary_ignore_module_all = False
autosummary_imported_members = False
autodoc_default_options = {"show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
# True fails on some signatures ('pop from empty list'): defaults show as their values
autodoc_preserve_defaults = False
autodoc_warningiserror = False
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
napoleon_use_param = False
add_module_names = False

# --- maths: MathJax served from the site itself (no network needed to read it) -----------
mathjax_path = gallery_tools.MATHJAX_PATH

# --- gallery -----------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "gallery",
    # which scripts run during the build; the others are shown, not run
    "filename_pattern": gallery_tools.filename_pattern(),
    "reset_argv": "gallery_tools.reset_argv",
    "image_scrapers": ("gallery_tools.scraper",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "show_memory": False,
    "write_computation_times": False,
    "line_numbers": False,
    "min_reported_time": 1,
    "within_subsection_order": "FileNameSortKey",
    "plot_gallery": "True",
}

# --- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"attndyn {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# the theme logs a console error when no mode is set (a reader's first visit)
html_context = {"default_mode": "auto"}
html_favicon = "_static/favicon.svg"
html_show_sourcelink = False
html_copy_source = False


def setup(app):
    app.connect("builder-inited", api_pages.report_import_errors)
    app.connect("build-finished", gallery_tools.copy_mathjax)
    app.connect("build-finished", gallery_tools.cleanup)
