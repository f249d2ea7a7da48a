"""Sphinx configuration of the quantile-propagation docs (``bash scripts/docs.sh`` builds them,
warnings as errors; ``tests/project/test_docs_examples.py`` runs every code example in them).

The API reference (docs/api) documents the public API only: ``qpinfer.__all__``,
``qptables.__all__`` and the two command lines. A docstring's link to an internal module or
object (``qpinfer.inference.power_ep``, ``qpinfer.estimators.base.GPEstimatorBase`` ...) renders
as code without a link (:func:`_internal_reference`), or as a link to the public name when the
object is public under another name; a link to a name that does not exist stays an error.
Links to scikit-learn, numpy, scipy, dask and Python resolve through the inventories in
docs/_intersphinx (``scripts/intersphinx_inventories.py`` writes them; no network needed).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from typing import Any

import qpinfer
import qptables

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

project = "quantile-propagation"
author = "the quantile-propagation developers"
release = qpinfer.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinxarg.ext",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/README.md", "auto_examples/*.ipynb", "auto_examples/*.py"]
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()

html_theme = "pydata_sphinx_theme"
html_title = "quantile-propagation"
html_theme_options = {"navigation_depth": 2, "show_toc_level": 2}
templates_path = ["api/_templates"]  # autosummary's class and function pages (docs/api)
# no "--" -> en dash: the command-line pages (sphinx-argparse) show option names like --force as is
smartquotes_action = "qe"
# sphinx-argparse's domain lacks resolve_any_xref: MyST warns once whenever it looks a link up
suppress_warnings = ["myst.domains"]

# -- other projects' objects: local inventories (scripts/intersphinx_inventories.py) ----------
intersphinx_mapping = {
    name: (url, f"_intersphinx/{name}.inv")
    for name, url in {
        "python": "https://docs.python.org/3/",
        "numpy": "https://numpy.org/doc/stable/",
        "scipy": "https://docs.scipy.org/doc/scipy/",
        "sklearn": "https://scikit-learn.org/stable/",
        "dask": "https://docs.dask.org/en/stable/",
        "distributed": "https://distributed.dask.org/en/stable/",
    }.items()
}
# numpydoc's "Parameters"/"Returns" type words that link to their project (others stay text)
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
numpydoc_xref_aliases = {
    "ndarray": "numpy.ndarray",
    "array": "numpy.ndarray",
    "Generator": "numpy.random.Generator",
    "RandomState": "numpy.random.RandomState",
    "float": "float",
    "int": "int",
    "bool": "bool",
    "str": "str",
    "dict": "dict",
    "list": "list",
    "tuple": "tuple",
    "callable": "collections.abc.Callable",
    "path": "pathlib.Path",
    "Path": "pathlib.Path",
    "Client": "distributed.Client",
}
nitpick_ignore_regex: list[tuple[str, str]] = []

# -- the example gallery (examples/ -> docs/auto_examples) -------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": "plot_",
    # a module of likelihoods the guide's "Write your own likelihood" imports, not an example
    "ignore_pattern": r"user_likelihoods\.py",
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "reference_url": {"qpinfer": None},
    # "Examples using ..." under each API page (docs/api/_templates: ``minigallery``)
    "doc_module": ("qpinfer",),
    "backreferences_dir": "api/generated/backreferences",
}


# -- links to internal objects -------------------------------------------------------------------
def _lookup(target: str) -> Any:
    """The object a dotted ``qpinfer.``/``qptables.`` name stands for, or raise LookupError."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for k, attr in enumerate(parts[i:]):
            if not hasattr(obj, attr):
                if k == len(parts) - i - 1 and isinstance(obj, type) and _instance_attr(obj, attr):
                    return None  # an attribute its instances set (fields, ``self.x = ...``)
                raise LookupError(target)
            obj = getattr(obj, attr)
        return obj
    raise LookupError(target)


def _instance_attr(cls: type, attr: str) -> bool:
    """Whether instances of ``cls`` have ``attr``: a dataclass field, an annotation, or an
    assignment ``self.attr = `` in the class's source."""
    for klass in cls.__mro__:
        if attr in getattr(klass, "__annotations__", {}):
            return True
        try:
            if f"self.{attr} =" in inspect.getsource(klass):
                return True
        except (OSError, TypeError):
            continue
    return False


def _public_name(obj: Any) -> str | None:
    """``package.Name`` if ``obj`` is in qpinfer's or qptables's ``__all__``."""
    for package in (qpinfer, qptables):
        for name in package.__all__:
            if name.startswith("__"):
                continue
            try:
                if getattr(package, name) is obj:
                    return f"{package.__name__}.{name}"
            except ImportError:
                continue
    return None


def _internal_reference(app, env, node, contnode):
    """Resolve a ``py`` link to a qpinfer/qptables object the reference has no page for: to the
    public name's page when the object is public, else to plain code; unknown names stay
    unresolved (a nitpicky warning, an error)."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if "." not in target and node.get("py:class"):  # a sibling member: ``:attr:`name```
        target = f"{node.get('py:module')}.{node.get('py:class')}.{target}"
    if not target.startswith(("qpinfer.", "qptables.", "qpinfer", "qptables")):
        return None
    try:
        obj = _lookup(target)
    except (LookupError, ImportError):
        return None
    public = _public_name(obj) if obj is not None else None
    if public is not None and public != target:
        domain = env.get_domain("py")
        return domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], public, node, contnode
        )
    return contnode


def _dataclass_fields() -> set[tuple[str, str]]:
    """``(class name, field)`` of the public dataclasses: their fields are the constructor's
    parameters (or the result's attributes), documented in the docstring's sections, not again
    as attribute entries."""
    out = set()
    for package in (qpinfer, qptables):
        for name in package.__all__:
            obj = getattr(package, name, None)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                out.update((name, f.name) for f in dataclasses.fields(obj))
    return out


_FIELDS = {field for _, field in _dataclass_fields()}


def _skip_fields(app, what, name, obj, skip, options):
    if what == "class" and name in _FIELDS and not callable(obj) and not isinstance(obj, property):
        return True
    return None


def setup(app):
    app.connect("missing-reference", _internal_reference)
    app.connect("autodoc-skip-member", _skip_fields)
