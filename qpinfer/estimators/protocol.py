"""scikit-learn's estimator protocol, without a dependency on scikit-learn.

:class:`ParamsMixin` gives every estimator ``get_params``/``set_params``/``__repr__`` (its
parameters are the arguments of its ``__init__``, stored verbatim), the fitted check and the
check of prediction inputs; :func:`log_marginal_likelihood_method` the evidence method with
scikit-learn's signature; :class:`NotFittedError` is raised before ``fit`` (also an instance
of scikit-learn's own when scikit-learn is loaded); :class:`RegressorTagsMixin` gives the
regressors' tags to scikit-learn's tooling. The parameters themselves are defined in
:mod:`qpinfer.estimators.params`.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import numpy as np

from qpinfer.checks import check_X
from qpinfer.estimators.boundary import wrap_public_methods

__all__ = [
    "NotFittedError",
    "ParamsMixin",
    "RegressorTagsMixin",
    "log_marginal_likelihood_method",
    "not_fitted_error",
    "set_kernel_theta",
]


class NotFittedError(ValueError, AttributeError):
    """The estimator is used before ``fit`` (same bases as scikit-learn's)."""


_sklearn_compatible: dict[str, type] = {}


def not_fitted_error(message: str) -> NotFittedError:
    """A :class:`NotFittedError`; if scikit-learn is loaded, also an instance of its own
    ``NotFittedError``, so its tooling recognises it (qpinfer never imports scikit-learn)."""
    sk = sys.modules.get("sklearn.exceptions")
    if sk is None:
        return NotFittedError(message)
    cls = _sklearn_compatible.get("NotFittedError")
    if cls is None:
        cls = type("NotFittedError", (NotFittedError, sk.NotFittedError), {})
        _sklearn_compatible["NotFittedError"] = cls
    return cls(message)


class ParamsMixin:
    """scikit-learn's parameter protocol (``get_params``/``set_params``/``__repr__``, the fitted
    check and the check of prediction inputs). The parameters are the arguments of the class's
    ``__init__`` (read from its signature, as scikit-learn does), which stores them verbatim."""

    #: the attribute whose presence means "fitted"
    _FITTED_ATTR = "result_"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap the public methods of every estimator class in the boundary of
        :mod:`qpinfer.estimators.boundary` (warnings at the user's line, feature names)."""
        super().__init_subclass__(**kwargs)
        wrap_public_methods(cls)

    @classmethod
    def _get_param_names(cls) -> tuple[str, ...]:
        """The names of the ``__init__`` arguments, in order."""
        params = inspect.signature(cls.__init__).parameters
        return tuple(name for name in params if name != "self")

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, self._FITTED_ATTR)

    def _check_is_fitted(self) -> None:
        if not hasattr(self, self._FITTED_ATTR):
            raise not_fitted_error(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator."
            )

    def _vector_input(self) -> bool:
        """Whether the kernel takes feature vectors: ``False`` for a ``kernel`` whose
        ``requires_vector_input`` is false (scikit-learn's attribute: a kernel on strings,
        graphs, ...), whose ``X`` is then any sequence of samples."""
        kernel = getattr(self, "kernel", None)
        return kernel is None or bool(getattr(kernel, "requires_vector_input", True))

    def _check_fit_X(self, X: Any) -> np.ndarray:
        """``fit``'s ``X``: :func:`qpinfer.checks.check_X`, with ``vector`` as the kernel says
        (:meth:`_vector_input`)."""
        return check_X(X, estimator=type(self).__name__, vector=self._vector_input())

    def _check_predict_X(self, X: Any) -> np.ndarray:
        self._check_is_fitted()
        if not self._vector_input():
            return check_X(X, estimator=type(self).__name__, vector=False)
        X = check_X(X, estimator=type(self).__name__)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def _what(self, stage: str | None = None) -> str:
        """Who warns: ``"GPClassifier(method='qp')"``, plus a stage other than the method
        (QP's EP stage); the bare class name for an estimator without ``method``."""
        method = getattr(self, "method", None)
        if method is None:
            return type(self).__name__
        tail = f", stage {stage!r}" if stage and stage != method else ""
        return f"{type(self).__name__}(method={method!r}{tail})"

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments (scikit-learn's ``get_params``); with ``deep``, also the
        parameters of those that have ``get_params`` (a scikit-learn ``kernel``), as
        ``kernel__length_scale`` etc.

        Parameters
        ----------
        deep : bool, default True
            Also return the parameters of parameters that have ``get_params``.

        Returns
        -------
        dict
            Parameter names mapped to their values.
        """
        out: dict[str, Any] = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params: Any):
        """Set constructor arguments (scikit-learn's ``set_params``): ``name=value``, and
        ``name__sub=value`` for a parameter of a parameter (``kernel__length_scale=2.0``, set on
        the ``kernel`` object with its own ``set_params``, after the plain ones).

        Parameters
        ----------
        **params
            Constructor arguments and nested ``name__sub`` parameters.

        Returns
        -------
        self
            The estimator (not refitted).
        """
        names = self._get_param_names()
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, delim, sub = key.partition("__")
            if name not in names:
                raise ValueError(
                    f"Invalid parameter {name!r} for {type(self).__name__}; valid parameters are "
                    f"{sorted(names)}"
                )
            if delim:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub_params in nested.items():
            inner = getattr(self, name)
            if not hasattr(inner, "set_params"):
                raise ValueError(
                    f"Invalid parameter {next(iter(sub_params))!r} of {name!r} for "
                    f"{type(self).__name__}: {name}={inner!r} has no parameters of its own"
                )
            inner.set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        defaults = type(self)().get_params(deep=False)
        changed = []
        for k, v in self.get_params(deep=False).items():
            d = defaults[k]
            same = v is d or (type(v) is type(d) and not isinstance(v, np.ndarray) and bool(v == d))
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


def log_marginal_likelihood_method(doc: str) -> Any:
    """An estimator's ``log_marginal_likelihood`` method, with scikit-learn's signature and the
    docstring ``doc``: after the fitted check it returns the estimator's
    ``_log_marginal_likelihood(theta, eval_gradient, clone_kernel)`` (the evidence, and with
    ``eval_gradient`` also its gradient in ``theta``) as scikit-learn's types: a
    ``numpy.float64``, or the tuple ``(numpy.float64, ndarray)``. As scikit-learn, with a
    ``theta`` and ``clone_kernel=False`` the fitted ``kernel_`` is set to ``theta``
    (:func:`set_kernel_theta`; the posterior, ``result_``, stays the fitted one)."""

    def log_marginal_likelihood(
        self,
        theta: np.ndarray | None = None,
        eval_gradient: bool = False,
        clone_kernel: bool = True,
    ) -> float | tuple[float, np.ndarray]:
        self._check_is_fitted()
        out = self._log_marginal_likelihood(theta, eval_gradient, clone_kernel)
        if theta is not None and not clone_kernel:
            set_kernel_theta(self, theta)
        if eval_gradient:
            value, gradient = out
            return np.float64(value), np.asarray(gradient, dtype=np.float64)
        return np.float64(out)

    log_marginal_likelihood.__doc__ = inspect.cleandoc(doc) + _LML_SECTIONS
    return log_marginal_likelihood


#: the numpydoc sections every ``log_marginal_likelihood`` docstring ends with
_LML_SECTIONS = """

Parameters
----------
theta : array-like or None, default None
    Log hyperparameters (the kernel's ``theta``, then the estimator's own where it fits
    more); ``None``: the fitted ones, and the fitted value is returned.
eval_gradient : bool, default False
    Also return the gradient with respect to ``theta``.
clone_kernel : bool, default True
    scikit-learn's argument: ``False`` sets ``kernel_.theta`` to ``theta`` (the fitted
    posterior is not recomputed); ``True`` evaluates on a copy.

Returns
-------
numpy.float64, or (numpy.float64, ndarray)
    The evidence, and with ``eval_gradient`` its gradient.
"""


def set_kernel_theta(est: Any, theta: Any) -> None:
    """scikit-learn's ``kernel_.theta = theta`` (``log_marginal_likelihood`` with
    ``clone_kernel=False``): ``theta``'s first ``kernel_.theta.size`` entries (the rest are an
    estimator's own, e.g. the noise variance) set on ``kernel_`` in place where it has a
    ``theta`` setter (scikit-learn kernels), else ``kernel_`` replaced by ``with_theta``."""
    kernel = est.kernel_
    n = np.asarray(kernel.theta).size
    theta = np.asarray(theta, dtype=np.float64).ravel()[:n]
    try:
        kernel.theta = theta
    except AttributeError:
        est.kernel_ = kernel.with_theta(theta)


class RegressorTagsMixin:
    """scikit-learn's tags of a regressor (``_POSITIVE_TARGETS``: counts, non-negative)."""

    _POSITIVE_TARGETS = False

    def __sklearn_tags__(self):  # called by scikit-learn only, so its import is fine here
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(
            estimator_type="regressor",
            target_tags=TargetTags(required=True, positive_only=self._POSITIVE_TARGETS),
            regressor_tags=RegressorTags(),
            input_tags=InputTags(),
        )
