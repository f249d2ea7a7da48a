"""Write the intersphinx inventories of the docs (docs/_intersphinx/<project>.inv) offline.

The docs build (docs/conf.py) links to Python's, numpy's, scipy's, scikit-learn's, dask's and
distributed's documentation through ``sphinx.ext.intersphinx``, which reads each site's
``objects.inv``. The machines that build the docs (CI included) reach package registries only,
not those sites, so this script writes the inventories instead: for every outside object the
docs refer to (the names in :data:`TARGETS`, plus every ``:role:`name``` / ``{py:role}`name```
of a known project found in qpinfer/, qptables/, docs/ and examples/), it imports the installed
package to learn what the name is (module, class, exception, function, method or data) and maps
it to the page and anchor of that project's URL scheme, e.g.
``https://scikit-learn.org/stable/modules/generated/sklearn.gaussian_process.GaussianProcessClassifier.html``.
The output is Sphinx's inventory format version 2 (a four-line header, then zlib-compressed
``name domain:role priority uri dispname`` lines).

Run it after referring to a new outside object, and commit the .inv files::

    python scripts/intersphinx_inventories.py          # writes docs/_intersphinx/*.inv
    python scripts/intersphinx_inventories.py --check  # exit 1 if a file would change
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import importlib.metadata
import inspect
import re
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "_intersphinx"

#: project -> (distribution whose version goes in the header, name prefixes it documents)
PROJECTS = {
    "python": (None, ()),
    "numpy": ("numpy", ("numpy",)),
    "scipy": ("scipy", ("scipy",)),
    "sklearn": ("scikit-learn", ("sklearn",)),
    "dask": ("dask", ("dask",)),
    "distributed": ("distributed", ("distributed",)),
}

#: the outside objects the docs refer to by name (numpydoc's type words, the docstrings'
#: "See Also" sections, the gallery's imports); the scan of the sources adds the rest
TARGETS = {
    "python": [
        "None",
        "True",
        "False",
        "NotImplemented",
        "Ellipsis",
        "bool",
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "object",
        "type",
        "range",
        "slice",
        "callable",
        "len",
        "print",
        "repr",
        "isinstance",
        "open",
        "BaseException",
        "Exception",
        "ValueError",
        "TypeError",
        "KeyError",
        "IndexError",
        "RuntimeError",
        "OSError",
        "FileNotFoundError",
        "FileExistsError",
        "PermissionError",
        "TimeoutError",
        "NotImplementedError",
        "AttributeError",
        "ImportError",
        "ModuleNotFoundError",
        "KeyboardInterrupt",
        "Warning",
        "UserWarning",
        "RuntimeWarning",
        "DeprecationWarning",
        "FutureWarning",
        "abc",
        "abc.ABC",
        "argparse",
        "argparse.ArgumentParser",
        "argparse.Namespace",
        "collections.abc",
        "collections.abc.Callable",
        "collections.abc.Iterable",
        "collections.abc.Iterator",
        "collections.abc.Mapping",
        "collections.abc.Sequence",
        "concurrent.futures",
        "concurrent.futures.Future",
        "dataclasses",
        "dataclasses.dataclass",
        "os",
        "os.environ",
        "pathlib",
        "pathlib.Path",
        "typing",
        "typing.Any",
        "urllib",
        "urllib.request",
        "warnings",
        "warnings.warn",
        "warnings.catch_warnings",
        "warnings.simplefilter",
    ],
    "numpy": [
        "numpy",
        "numpy.ndarray",
        "numpy.dtype",
        "numpy.float64",
        "numpy.int64",
        "numpy.random",
        "numpy.random.Generator",
        "numpy.random.RandomState",
        "numpy.random.default_rng",
        "numpy.linalg",
        "numpy.linalg.cholesky",
        "numpy.asarray",
        "numpy.array",
        "numpy.exp",
        "numpy.log",
    ],
    "scipy": [
        "scipy",
        "scipy.optimize",
        "scipy.optimize.minimize",
        "scipy.optimize.fmin_l_bfgs_b",
        "scipy.special",
        "scipy.special.ndtr",
        "scipy.special.log_ndtr",
        "scipy.stats",
        "scipy.stats.norm",
        "scipy.stats.t",
        "scipy.stats.poisson",
        "scipy.linalg",
        "scipy.linalg.cho_solve",
        "scipy.linalg.cholesky",
    ],
    "sklearn": [
        "sklearn",
        "sklearn.base",
        "sklearn.base.BaseEstimator",
        "sklearn.base.clone",
        "sklearn.base.ClassifierMixin",
        "sklearn.base.RegressorMixin",
        "sklearn.gaussian_process",
        "sklearn.gaussian_process.GaussianProcessClassifier",
        "sklearn.gaussian_process.GaussianProcessRegressor",
        "sklearn.gaussian_process.kernels",
        "sklearn.gaussian_process.kernels.Kernel",
        "sklearn.gaussian_process.kernels.RBF",
        "sklearn.gaussian_process.kernels.Matern",
        "sklearn.gaussian_process.kernels.WhiteKernel",
        "sklearn.gaussian_process.kernels.ConstantKernel",
        "sklearn.gaussian_process.kernels.RationalQuadratic",
        "sklearn.gaussian_process.kernels.DotProduct",
        "sklearn.gaussian_process.kernels.ExpSineSquared",
        "sklearn.linear_model.PoissonRegressor",
        "sklearn.linear_model.HuberRegressor",
        "sklearn.datasets",
        "sklearn.datasets.load_breast_cancer",
        "sklearn.datasets.load_iris",
        "sklearn.datasets.load_diabetes",
        "sklearn.datasets.load_digits",
        "sklearn.preprocessing.StandardScaler",
        "sklearn.model_selection.train_test_split",
        "sklearn.model_selection.GridSearchCV",
        "sklearn.model_selection.cross_val_score",
        "sklearn.pipeline.make_pipeline",
        "sklearn.pipeline.Pipeline",
        "sklearn.utils.estimator_checks.check_estimator",
        "sklearn.exceptions.ConvergenceWarning",
        "sklearn.exceptions.NotFittedError",
    ],
    "dask": [
        "dask",
        "dask.array",
        "dask.array.Array",
        "dask.array.from_array",
        "dask.array.map_blocks",
        "dask.compute",
        "dask.delayed",
        "dask.config.set",
    ],
    "distributed": [
        "distributed",
        "distributed.Client",
        "distributed.LocalCluster",
        "distributed.Client.submit",
        "distributed.Client.close",
        "distributed.wait",
        "distributed.as_completed",
        "distributed.get_client",
    ],
}

#: numpy's and python's objects that are not on the default page of their scheme
NUMPY_PAGES = {
    "numpy": "reference/index.html#module-numpy",
    "numpy.random": "reference/random/index.html#module-numpy.random",
    "numpy.linalg": "reference/routines.linalg.html#module-numpy.linalg",
    "numpy.random.Generator": "reference/random/generator.html#numpy.random.Generator",
    "numpy.random.default_rng": "reference/random/generator.html#numpy.random.default_rng",
    "numpy.random.RandomState": "reference/random/legacy.html#numpy.random.RandomState",
    "numpy.float64": "reference/arrays.scalars.html#numpy.float64",
    "numpy.int64": "reference/arrays.scalars.html#numpy.int64",
}
#: the Python docs' pages of builtins that are not library/functions.html
PYTHON_BUILTIN_PAGES = {
    **dict.fromkeys(("None", "True", "False", "NotImplemented", "Ellipsis"), "constants"),
    **dict.fromkeys(
        ("str", "bytes", "list", "tuple", "dict", "set", "frozenset", "complex"), "stdtypes"
    ),
}
#: the Python docs' submodules with a page of their own (others are on their package's page)
PYTHON_MODULE_PAGES = {
    "collections.abc",
    "concurrent.futures",
    "os.path",
    "urllib.request",
    "urllib.parse",
    "importlib.metadata",
    "importlib.resources",
    "logging.handlers",
}
#: distributed documents its client API on one page
DISTRIBUTED_PAGE = "api.html"

_ROLE_REF = re.compile(
    r"(?::py)?[:{](?:py:)?(?:class|func|meth|mod|exc|data|attr|obj)[:}]`~?(?:[^`<]*<)?"
    r"([A-Za-z_][\w.]*)>?`"
)


def scanned_targets() -> dict[str, set[str]]:
    """Outside names referred to by a role in the sources, by project."""
    prefixes = {p: prefix for p, (_, prefix) in PROJECTS.items() if prefix}
    found: dict[str, set[str]] = {p: set() for p in PROJECTS}
    files = [
        f
        for folder in ("qpinfer", "qptables", "docs", "examples")
        for pattern in ("*.py", "*.md", "*.rst")
        for f in (ROOT / folder).rglob(pattern)
        if "_build" not in f.parts and "auto_examples" not in f.parts
    ]
    for f in files:
        for name in _ROLE_REF.findall(f.read_text(encoding="utf-8", errors="replace")):
            head = name.split(".")[0]
            for project, heads in prefixes.items():
                if head in heads:
                    found[project].add(name)
            if head in {t.split(".")[0] for t in TARGETS["python"] if "." in t}:
                found["python"].add(name)
    return found


def resolve(name: str) -> tuple[object, str, object | None]:
    """``(object, module name, owner class or None)`` of the dotted ``name``: the longest
    importable prefix is the module, the rest attributes."""
    if hasattr(builtins, name):
        return getattr(builtins, name), "builtins", None
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        module, owner = ".".join(parts[:i]), None
        for attr in parts[i:]:
            owner = obj if isinstance(obj, type) else None
            obj = getattr(obj, attr)  # AttributeError: a name that does not exist
        return obj, module, owner
    raise ImportError(f"no module for {name!r}")


def role(name: str, obj: object, module: str, owner: object | None) -> str:
    """The ``py`` role the object's documentation declares it with."""
    if inspect.ismodule(obj) and module == name:
        return "module"
    if isinstance(obj, type):
        return "exception" if issubclass(obj, BaseException) else "class"
    if owner is not None:
        return "method" if callable(obj) else "attribute"
    if callable(obj):
        return "function"
    return "data"


def uri(project: str, name: str, kind: str, module: str, owner: object | None) -> str:
    """The page and anchor of ``name`` on ``project``'s site (relative to its base URL)."""
    if project == "python":
        if module == "builtins":
            page = PYTHON_BUILTIN_PAGES.get(name)
            if page is None:
                page = "exceptions" if kind == "exception" else "functions"
            return f"library/{page}.html#{name}"
        page = module if module in PYTHON_MODULE_PAGES else module.split(".")[0]
        if module.startswith("collections.abc"):
            page = "collections.abc"
        anchor = f"module-{name}" if kind == "module" else name
        return f"library/{page}.html#{anchor}"
    if project == "numpy":
        if name in NUMPY_PAGES:
            return NUMPY_PAGES[name]
        return f"reference/generated/{name}.html"
    if project == "scipy":
        if kind == "module":
            sub = name.split(".", 1)[1] if "." in name else "index"
            return f"reference/{sub}.html#module-{name}"
        if owner is not None:
            return f"reference/generated/{name.rsplit('.', 1)[0]}.html#{name}"
        return f"reference/generated/{name}.html"
    if project == "sklearn":
        if kind == "module":
            return f"api/{name}.html" if name != "sklearn" else "api/index.html"
        if owner is not None:
            return f"modules/generated/{name.rsplit('.', 1)[0]}.html#{name}"
        return f"modules/generated/{name}.html"
    if project == "dask":
        if kind == "module":
            pages = {
                "dask": "index.html",
                "dask.array": "array.html",
                "dask.delayed": "delayed.html",
            }
            return pages.get(name, f"{name}.html")
        if owner is not None:
            return f"generated/{name.rsplit('.', 1)[0]}.html#{name}"
        return f"generated/{name}.html"
    if project == "distributed":
        if kind == "module":
            return f"{DISTRIBUTED_PAGE}#module-{name}"
        return f"{DISTRIBUTED_PAGE}#{name}"
    raise ValueError(f"unknown project {project!r}")


def entries(project: str, names: set[str]) -> list[str]:
    """The inventory lines of ``names``; a name the installed package lacks is an error."""
    lines = []
    for name in sorted(names):
        obj, module, owner = resolve(name)
        kind = role(name, obj, module, owner)
        domain = "py"
        if project == "python" and name in ("None", "True", "False", "NotImplemented", "Ellipsis"):
            kind = "data"
        target = uri(project, name, kind, module, owner)
        lines.append(f"{name} {domain}:{kind} 1 {target} -")
    if project == "numpy":  # numpydoc's "array_like" / "array-like" type words
        lines.append("array_like std:term -1 glossary.html#term-array_like -")
    return sorted(lines)


def inventory(project: str, lines: list[str]) -> bytes:
    """Sphinx's inventory format version 2."""
    dist = PROJECTS[project][0]
    if dist is None:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
    else:
        version = importlib.metadata.version(dist)
        version = ".".join(version.split(".")[:2])  # the major.minor the site documents
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    ).encode()
    return header + zlib.compress(("\n".join(lines) + "\n").encode(), 9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file would change")
    args = parser.parse_args(argv)
    scanned = scanned_targets()
    OUT.mkdir(parents=True, exist_ok=True)
    changed = []
    for project in PROJECTS:
        names = set(TARGETS[project]) | scanned[project]
        data = inventory(project, entries(project, names))
        path = OUT / f"{project}.inv"
        if not path.exists() or path.read_bytes() != data:
            changed.append(path)
            if not args.check:
                path.write_bytes(data)
        print(f"{path.relative_to(ROOT)}: {len(names)} objects")
    if args.check and changed:
        print("out of date: " + ", ".join(str(p.relative_to(ROOT)) for p in changed))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
