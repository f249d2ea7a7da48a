"""The boundary of the estimators' public methods: warnings at the user's line, feature names.

:func:`wrap_public_methods` (called for every subclass of
:class:`qpinfer.estimators.protocol.ParamsMixin` as it is defined) wraps ``fit``,
``partial_fit``, the predictions, ``score`` and ``log_marginal_likelihood`` of every estimator
class so that, called from outside qpinfer:

* every warning raised inside (by the site loop, the hyperparameter search, the data checks, a
  kernel, numpy) is re-emitted at the caller's file and line, as ``stacklevel`` would if the
  depth were known (Python 3.11 has no ``skip_file_prefixes``): a warning is caught at the
  boundary with the filters in force, then shown again with ``warnings.warn_explicit`` at the
  first frame outside the qpinfer package, with that module's warning registry -- so the
  user's filters (``module=``, ``"once"``, ``"error"``) apply to the user's line;
* qpinfer's convergence warnings (:class:`~qpinfer.inference.site_loop.ConvergenceWarning` and
  its subclasses) are re-emitted, once scikit-learn is loaded, as their subclass that is also
  scikit-learn's ``ConvergenceWarning``
  (:func:`qpinfer.inference.sklearn_warnings.sklearn_compatible`);
* as scikit-learn's ``validate_data``: ``fit`` (and a first ``partial_fit``) records
  ``feature_names_in_`` when ``X`` has string column names (a pandas ``DataFrame``) and deletes
  it otherwise; the other methods taking ``X`` warn when ``X`` has names and the fit had none or
  the reverse, and raise scikit-learn's ``ValueError`` when the names differ.

Calls from inside qpinfer (a multi-class fit's binary estimators, ``score`` calling
``predict``) and calls from threads other than the main one pass straight through: the
outermost call re-emits (``warnings.catch_warnings`` is process-global state, so only the main
thread uses it).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from typing import Any

import numpy as np

from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sklearn_warnings import sklearn_compatible

__all__ = ["PACKAGE_DIR", "X_METHODS", "caller_frame", "feature_names", "wrap_public_methods"]

#: the qpinfer package's directory: frames in files below it are qpinfer's own
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: the methods that fit (``feature_names_in_`` recorded)
FIT_METHODS = ("fit", "partial_fit")
#: the methods whose first argument is ``X`` of the fitted features
X_METHODS = (
    "predict",
    "predict_proba",
    "predict_log_proba",
    "predict_latent",
    "predict_mean",
    "predict_mode",
    "predict_quantiles",
    "predict_interval",
    "predict_negative_binomial",
    "log_pmf",
    "log_predictive_density",
    "decision_function",
    "score",
    "sample_y",
    "latent_mean_and_variance",
)
_WRAPPED = (*FIT_METHODS, *X_METHODS, "log_marginal_likelihood")


def _inside(frame: Any) -> bool:
    return frame.f_code.co_filename.startswith(PACKAGE_DIR)


def caller_frame(depth: int = 1) -> Any:
    """The first frame, from ``depth`` frames above the caller's on, outside the qpinfer
    package (the user's line)."""
    frame = sys._getframe(depth + 1)
    while frame is not None and _inside(frame):
        frame = frame.f_back
    return frame


def feature_names(X: Any) -> np.ndarray | None:
    """scikit-learn's ``_get_feature_names``: the column names of ``X`` (a pandas
    ``DataFrame``) as an object array when they are all strings, ``None`` when ``X`` has no
    columns or none of them is a string; ``TypeError`` for mixed types, as scikit-learn."""
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(X, "shape"):
        return None
    names = np.asarray(columns, dtype=object)
    is_str = np.array([isinstance(n, str) for n in names], dtype=bool)
    if names.size and is_str.all():
        return names
    if is_str.any():
        kinds = sorted({type(n).__name__ for n in names})
        raise TypeError(
            "Feature names are only supported if all input features have string names, but "
            f"your input has {kinds} as feature name / column name types. If you want feature "
            "names to be stored and validated, you must convert them all to strings, by using "
            "X.columns = X.columns.astype(str) for example. Otherwise you can remove feature / "
            "column names from your input data, or convert them all to a non-string data type."
        )
    return None


def _check_feature_names(est: Any, X: Any) -> None:
    """scikit-learn's ``_check_feature_names`` with ``reset=False``: a ``UserWarning`` when
    only one of the fit and ``X`` had feature names, ``ValueError`` when they differ."""
    fitted = getattr(est, "feature_names_in_", None)
    names = feature_names(X)
    name = type(est).__name__
    if fitted is None and names is None:
        return
    if names is not None and fitted is None:
        message = f"X has feature names, but {name} was fitted without feature names"
        warnings.warn(message, UserWarning, stacklevel=2)  # re-emitted at the user's line
        return
    if names is None:
        warnings.warn(
            f"X does not have valid feature names, but {name} was fitted with feature names",
            UserWarning,
            stacklevel=2,
        )
        return
    if len(fitted) == len(names) and np.all(fitted == names):
        return
    message = "The feature names should match those that were passed during fit.\n"
    unseen = sorted(set(names) - set(fitted))
    missing = sorted(set(fitted) - set(names))
    if unseen:
        message += "Feature names unseen at fit time:\n" + "".join(f"- {n}\n" for n in unseen)
    if missing:
        message += "Feature names seen at fit time, yet now missing:\n"
        message += "".join(f"- {n}\n" for n in missing)
    if not unseen and not missing:
        message += "Feature names must be in the same order as they were in fit.\n"
    raise ValueError(message)


def _reemit(caught: list, frame: Any) -> None:
    """Show the caught warnings again at ``frame``'s file and line.

    No ``module_globals``: with them, ``warn_explicit`` asks the module's loader for its source at
    once, and the loader of a script run by ``python -m package.module`` refuses that for
    ``__main__`` (``ImportError``); the line is shown from the file, as ``warnings.warn`` does."""
    f_globals = frame.f_globals
    registry = f_globals.setdefault("__warningregistry__", {})
    for w in caught:
        message, category = w.message, w.category
        if issubclass(category, ConvergenceWarning):
            compatible = sklearn_compatible(category)
            if compatible is not category:
                category, message = compatible, compatible(*message.args)
        warnings.warn_explicit(
            message,
            category,
            frame.f_code.co_filename,
            frame.f_lineno,
            module=f_globals.get("__name__"),
            registry=registry,
            source=w.source,
        )


def _boundary(name: str, func: Any) -> Any:
    @functools.wraps(func)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if _inside(frame) or threading.current_thread() is not threading.main_thread():
            return func(self, *args, **kwargs)
        X = args[0] if args else kwargs.get("X")
        refit = name == "fit" or (name == "partial_fit" and not self.__sklearn_is_fitted__())
        caught: list = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                names = feature_names(X) if refit else None
                if name in X_METHODS and self.__sklearn_is_fitted__():
                    _check_feature_names(self, X)
                elif name == "partial_fit" and not refit:
                    _check_feature_names(self, X)
                out = func(self, *args, **kwargs)
                if refit:
                    if names is not None:
                        self.feature_names_in_ = names
                    elif "feature_names_in_" in vars(self):
                        del self.feature_names_in_
        finally:
            _reemit(caught, frame)
        return out

    method.__qpinfer_boundary__ = True
    return method


def wrap_public_methods(cls: type) -> None:
    """Wrap ``cls``'s public methods (those of ``_WRAPPED`` it has, its own or inherited)
    in the boundary of the module docstring, each once."""
    for name in _WRAPPED:
        func = getattr(cls, name, None)
        if callable(func) and not getattr(func, "__qpinfer_boundary__", False):
            setattr(cls, name, _boundary(name, func))
