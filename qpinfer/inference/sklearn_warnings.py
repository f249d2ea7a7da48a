"""qpinfer's convergence warnings as scikit-learn's, once scikit-learn is loaded.

:func:`sklearn_compatible` gives, for a warning class of qpinfer's
(:class:`~qpinfer.inference.site_loop.ConvergenceWarning` and its subclasses
:class:`~qpinfer.inference.search_result.OptimizerWarning`,
:class:`~qpinfer.inference.search_result.BoundWarning`), its subclass that is also
``sklearn.exceptions.ConvergenceWarning`` when scikit-learn is loaded, so that code filtering
scikit-learn's warnings (written for its Gaussian process estimators) sees qpinfer's too; qpinfer
never imports scikit-learn for it. The subclasses are attributes of this module (pickle finds a
warning sent back from a worker process); a process that has not made one yet makes it on first
access (the module's ``__getattr__``), from the classes :func:`register` named. This module
imports no other of qpinfer's, so that the site loop and the search may both use it.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["PREFIX", "register", "sklearn_compatible"]

#: the subclasses' names: this prefix and the qpinfer class's name
PREFIX = "SklearnCompatible"
_subclasses: dict[type, type] = {}
_bases: dict[str, type] = {}


def register(category: type[Warning]) -> type[Warning]:
    """Name ``category`` for unpickling its scikit-learn-compatible subclass (a class
    decorator: returns ``category``)."""
    _bases[category.__name__] = category
    return category


def sklearn_compatible(category: type[Warning]) -> type[Warning]:
    """``category``, or, once scikit-learn is loaded, its subclass that is also scikit-learn's
    ``ConvergenceWarning`` (``category`` itself if it already is one)."""
    sk = sys.modules.get("sklearn.exceptions")
    if sk is None or issubclass(category, sk.ConvergenceWarning):
        return category
    sub = _subclasses.get(category)
    if sub is None:
        register(category)
        name = f"{PREFIX}{category.__name__}"
        namespace = {"__module__": __name__, "__qualname__": name, "__doc__": category.__doc__}
        sub = type(name, (category, sk.ConvergenceWarning), namespace)
        _subclasses[category] = sub
        globals()[name] = sub
    return sub


def __getattr__(name: str) -> Any:
    """The scikit-learn-compatible warning classes of :func:`sklearn_compatible`, made on first
    access (unpickling one in a process that has not raised it yet imports scikit-learn)."""
    base = _bases.get(name.removeprefix(PREFIX)) if name.startswith(PREFIX) else None
    if base is not None:
        import sklearn.exceptions  # noqa: F401  -- such a warning exists only where it was loaded

        return sklearn_compatible(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
