"""The public API's docstring examples (numpydoc "Examples" sections) run and print what they show.

Each name of ``qpinfer.__all__`` is collected by :class:`doctest.DocTestFinder` (its docstring
and, for a class, its own methods' docstrings) and run with :class:`doctest.DocTestRunner`; the
estimators and the main functions must have at least one example. Marker ``examples`` (real fits
on small data, ~20 s on one core): not in the default run, ``.ci/run`` runs it with the docs'
examples (``-m examples``).
"""

from __future__ import annotations

import doctest
import io
import warnings

import pytest

import qpinfer

#: the names whose docstring must show an example
MUST_HAVE_EXAMPLES = [
    "GPClassifier",
    "GPPoissonRegressor",
    "GPStudentTRegressor",
    "SparseGPClassifier",
    "SparseGPRegressor",
    "SparseGPPoissonRegressor",
    "SparseGPStudentTRegressor",
    "MiniBatchSparseGPClassifier",
    "MiniBatchSparseGPPoissonRegressor",
    "MiniBatchSparseGPStudentTRegressor",
    "open_table",
    "sigma_qp",
    "tilted_moments",
]
PUBLIC = sorted(name for name in qpinfer.__all__ if not name.startswith("__"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def doctests(name: str) -> list[doctest.DocTest]:
    """The doctests of ``qpinfer.<name>`` that hold at least one example."""
    obj = getattr(qpinfer, name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    return [t for t in finder.find(obj, f"qpinfer.{name}", module=False, globs={}) if t.examples]


def test_every_listed_name_is_public() -> None:
    assert set(MUST_HAVE_EXAMPLES) <= set(PUBLIC)


@pytest.mark.parametrize("name", MUST_HAVE_EXAMPLES)
def test_has_an_example(name: str) -> None:
    assert sum(len(t.examples) for t in doctests(name)) >= 1, f"qpinfer.{name} shows no example"


@pytest.mark.examples
@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_examples_run(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = io.StringIO()
    with warnings.catch_warnings():
        # an example that warns (a fit that did not converge ...) shows users a warning: an error
        warnings.simplefilter("error")
        for test in doctests(name):
            runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()
