"""Sphinx configuration for jitops' documentation site.

Sphinx with numpydoc, autodoc and MyST-NB: what NumPy, SciPy, pandas, xarray and Numba's
documentation use, so the docstrings' numpydoc sections render as users of those libraries
expect, and the PyData theme they share. Before the build, the notebooks (with the outputs
they were committed with: nothing is executed here) are copied into ``notebooks/`` and the
performance page's tables and plot are generated from ``benchmarks/results/``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

import jitops  # noqa: E402
from jitops.bench import report  # noqa: E402

project = "jitops"
author = "the jitops maintainers"
copyright = "2026, the jitops maintainers"
release = version = jitops.__version__

extensions = ["sphinx.ext.autodoc", "numpydoc", "myst_nb"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the notebooks are executed by the test suite; shown as committed
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_typehints = "none"  # the signature line shows them; numpydoc's sections say the rest
autodoc_default_options = {"members": False}
suppress_warnings = ["mystnb.unknown_mime_type"]

html_theme = "pydata_sphinx_theme"
html_title = "jitops"
html_static_path = ["_static"]
# pages without sub-pages get no (empty) section navigation
html_sidebars = {page: [] for page in ("index", "getting-started", "api", "performance",
                                        "architecture", "changelog")}
html_favicon = "_static/favicon.svg"
html_context = {"default_mode": "light"}  # the theme logs an error where no mode is set
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}


def _notebooks() -> None:
    """The gallery: copies of ../notebooks/*.ipynb (made anew each build)."""
    target = DOCS / "notebooks"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        shutil.copy(nb, target / nb.name)


def _performance() -> None:
    """The performance page's generated parts, from the committed benchmark results."""
    results = ROOT / "benchmarks" / "results"
    target = DOCS / "_generated"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    result = json.loads((results / "latest.json").read_text())
    (target / "summary.md").write_text(report.summary(result) + "\n")
    full = report.markdown(result).split("\n", 2)[2]  # without its own title
    (target / "results.md").write_text(full)
    shutil.copy(results / "latest.png", target / "latest.png")


_notebooks()
_performance()
