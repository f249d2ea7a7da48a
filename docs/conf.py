"""Sphinx configuration of the quantile-propagation docs (``bash scripts/docs.sh`` builds them,
warnings as errors; ``tests/project/test_docs_examples.py`` runs every code example in them)."""

import qpinfer

project = "quantile-propagation"
author = "the quantile-propagation developers"
release = qpinfer.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinxarg.ext",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/README.md"]
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()

html_theme = "pydata_sphinx_theme"
html_title = "quantile-propagation"
html_theme_options = {"navigation_depth": 2, "show_toc_level": 2}
templates_path = ["api/_templates"]  # autosummary's class and module pages (docs/api)
# nitpicky (-n): references to other projects' objects (no intersphinx) are not errors
nitpick_ignore_regex = [(r"py:.*", r"(abc|argparse|dask|numpy|urllib|warnings)(\..+)?")]
# sphinx-argparse's domain lacks resolve_any_xref: MyST warns once whenever it looks a link up
suppress_warnings = ["myst.domains"]
# no "--" -> en dash: the command-line pages (sphinx-argparse) show option names like --force as is
smartquotes_action = "qe"
