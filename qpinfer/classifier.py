"""Binary GP classification with EP or QP, in scikit-learn style (without depending on it).

:class:`GPClassifier` follows scikit-learn's conventions (``fit``/``predict``/``predict_proba``/
``score``; constructor arguments stored verbatim; learned state in attributes ending in ``_``;
validation at the boundary with messages naming the argument) but needs only numpy and scipy;
``sklearn.base.clone`` and the estimator checks work on it. The layout mirrors
``sklearn/gaussian_process/_gpc.py``, with EP/QP (paper 000, Algorithm 1) instead of Laplace.

Hyperparameters (paper Sec. 6): L-BFGS-B (at most 1000 iterations, relative function tolerance
1e-9) maximises eq. (4) over the log kernel hyperparameters. Every evaluation runs the site
updates to convergence (warm-started from the previous evaluation) and returns eq. (4) with the
gradient of R&W eq. (5.27) -- the exact total derivative for EP at convergence. For QP the
objective is EP's evidence expression evaluated at QP's sites (the paper's choice) and the
gradient is its derivative with the sites held fixed, which is not the total derivative (QP's
sites are not a stationary point of EP's free energy); the differences are small (sigma* is within
a few percent of sigma_EP) and the fit keeps the best evidence seen. Nesting the inner loop in
every evaluation, rather than alternating whole L-BFGS-B runs at fixed sites as in Algorithm 1,
converges in far fewer site sweeps (alternating creeps along flat directions of eq. (4)).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import ndtr

from qpinfer.ep import (
    ConvergenceWarning,
    EPResult,
    MomentMatching,
    QuantileMatching,
    log_evidence_gradient,
    predict_latent,
    run_ep,
)
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods import Probit
from qpinfer.power_ep import PowerMomentMatching, check_power
from qpinfer.tables import TableError, installed_table_path, open_table

__all__ = ["DataConversionWarning", "GPClassifier", "NotFittedError"]

_LBFGS_OPTIONS = {"maxiter": 1000, "ftol": 1e-9}  # paper Sec. 6
_warned_exact = False


class NotFittedError(ValueError, AttributeError):
    """The estimator is used before ``fit`` (same bases as scikit-learn's)."""


_sklearn_compatible: dict[str, type] = {}


def _not_fitted_error(message: str) -> NotFittedError:
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


class DataConversionWarning(UserWarning):
    """Input data was converted (same name and message as scikit-learn's)."""


def _warn_exact_once(reason: str) -> None:
    global _warned_exact
    if not _warned_exact:
        _warned_exact = True
        warnings.warn(
            f"{reason}; QP computes sigma* exactly with qpinfer.sigma_qp (slower than a table "
            "lookup). Install a table (qptables) or pass table=... . Warned once per process.",
            RuntimeWarning,
            stacklevel=4,
        )


def _check_X(X: Any, name: str = "X") -> np.ndarray:
    if X is None:
        raise ValueError(f"{name} is None; expected a 2-d array of shape (n_samples, n_features)")
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise TypeError(
            f"{name}: sparse input is not supported by GPClassifier; convert it with "
            f"{name}.toarray()"
        )
    arr = np.asarray(X)
    if np.iscomplexobj(arr):
        raise ValueError("Complex data not supported")
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"Expected 2D array for {name}, got {arr.ndim}D array of shape {arr.shape} instead. "
            "Reshape your data with array.reshape(-1, 1) for a single feature or "
            "array.reshape(1, -1) for a single sample."
        )
    if arr.shape[0] < 1:
        raise ValueError(
            f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required "
            f"({name})."
        )
    if arr.shape[1] < 1:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required "
            f"({name})."
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"Input {name} contains NaN or infinity.")
    return arr


def _check_y(y: Any, n_samples: int) -> np.ndarray:
    if y is None:
        raise ValueError("GPClassifier requires y to be passed, but the target y is None")
    arr = np.asarray(y)
    if np.iscomplexobj(arr):
        raise ValueError("Complex data not supported")
    if arr.ndim == 2 and arr.shape[1] == 1:
        warnings.warn(
            "A column-vector y was passed when a 1d array was expected. Please change the shape "
            "of y to (n_samples, ), for example using ravel().",
            DataConversionWarning,
            stacklevel=3,
        )
        arr = arr.ravel()
    if arr.ndim != 1:
        raise ValueError(f"y should be a 1d array, got an array of shape {arr.shape} instead.")
    if arr.shape[0] != n_samples:
        raise ValueError(
            f"X and y have inconsistent numbers of samples: X has {n_samples}, y has {arr.shape[0]}"
        )
    if arr.dtype.kind in "fc" or arr.dtype == object:
        try:
            as_float = arr.astype(np.float64)
        except (TypeError, ValueError):
            as_float = None
        if as_float is not None:
            if not np.isfinite(as_float).all():
                raise ValueError("Input y contains NaN or infinity.")
            if arr.dtype.kind == "f" and np.any(as_float != np.round(as_float)):
                raise ValueError("Unknown label type: continuous. y must hold class labels.")
    if arr.dtype == object:
        kinds = {type(v) for v in arr}
        if len(kinds) > 1:
            raise ValueError(f"Unknown label type: mixed types {sorted(k.__name__ for k in kinds)}")
    return arr


class GPClassifier:
    """Gaussian process classifier (probit likelihood) with EP or QP inference.

    Parameters
    ----------
    method : {"qp", "ep", "pep"}
        Quantile propagation (L2-Wasserstein projection, paper 000 eq. (7)), EP (eq. (5)) or
        Power EP with power ``alpha`` (paper 004 Sec. 3.4, :mod:`qpinfer.power_ep`; its evidence
        is eq. (110)).
    table : None, "exact", path or table object
        Where QP gets sigma* from. ``None``: the installed table for the likelihood
        (:func:`qpinfer.tables.installed_table_path`) if there is one, else exact computation
        (with a one-time warning). ``"exact"``: always exact. A path: :func:`qpinfer.open_table`
        of it. A table object (from ``open_table``) is used as is; one for another likelihood is a
        ``ValueError``. Ignored by EP.
    kernel : kernel object or None
        A covariance function implementing :class:`qpinfer.kernels.Kernel`; it is not modified
        (the fitted one is ``kernel_``). ``None``: :class:`~qpinfer.kernels.ARDSquaredExponential`
        built from ``variance``, ``length_scale`` and ``ard``.
    variance, length_scale, ard :
        Initial (or, with ``optimizer=None``, fixed) SE kernel hyperparameters: signal variance,
        length scale(s), and whether a scalar ``length_scale`` becomes one per feature (ARD, the
        paper's Sec. 3.1 kernel).
    optimizer : {"lbfgs", None}
        Fit the hyperparameters by maximising eq. (4) with L-BFGS-B, or keep them fixed.
    schedule : {"parallel", "sequential"}
        Site-update schedule (see :func:`qpinfer.ep.run_ep`).
    max_iter, tol, damping :
        Site updates stop when the RMS change of the site parameters is below ``tol`` (paper
        Sec. 6: 1e-6) or after ``max_iter`` sweeps (:class:`~qpinfer.ep.ConvergenceWarning`).
        ``damping=None``: 1.0 for the sequential, 0.5 for the parallel schedule.
    alpha : float in (0, 1]
        The Power EP power (``method="pep"`` only): ``alpha = 1`` is EP exactly, ``alpha -> 0``
        approaches the variational solution.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two labels; ``classes_[1]`` is the positive class (y = +1 of the probit).
    n_features_in_ : int
    X_train_ : ndarray
    kernel_ : kernel object with the fitted hyperparameters.
    log_marginal_likelihood_ : float
        Eq. (4) at the fitted hyperparameters and sites.
    ep_result_ : qpinfer.ep.EPResult
        Sites, posterior and convergence information of the final inner loop.
    n_iter_ : int
        Sweeps of the final inner loop.
    n_evaluations_ : int
        Inner loops run while fitting (one per L-BFGS-B evaluation).
    table_ : table object or None
        The sigma* table QP used (``None`` for EP or exact QP).
    """

    def __init__(
        self,
        method: str = "qp",
        table: Any = None,
        *,
        kernel: Any = None,
        variance: float = 1.0,
        length_scale: float | np.ndarray = 1.0,
        ard: bool = True,
        optimizer: str | None = "lbfgs",
        schedule: str = "parallel",
        max_iter: int = 1000,
        tol: float = 1e-6,
        damping: float | None = None,
        alpha: float = 0.5,
    ) -> None:
        self.method = method
        self.table = table
        self.kernel = kernel
        self.variance = variance
        self.length_scale = length_scale
        self.ard = ard
        self.optimizer = optimizer
        self.schedule = schedule
        self.max_iter = max_iter
        self.tol = tol
        self.damping = damping
        self.alpha = alpha

    # -- scikit-learn protocol (no dependency on scikit-learn) -------------------------------
    _PARAM_NAMES = (
        "method",
        "table",
        "kernel",
        "variance",
        "length_scale",
        "ard",
        "optimizer",
        "schedule",
        "max_iter",
        "tol",
        "damping",
        "alpha",
    )

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments (scikit-learn's ``get_params``)."""
        return {name: getattr(self, name) for name in self._PARAM_NAMES}

    def set_params(self, **params: Any) -> GPClassifier:
        """Set constructor arguments (scikit-learn's ``set_params``)."""
        for key, value in params.items():
            if key not in self._PARAM_NAMES:
                raise ValueError(
                    f"Invalid parameter {key!r} for GPClassifier; valid parameters are "
                    f"{sorted(self._PARAM_NAMES)}"
                )
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = GPClassifier().get_params()
        changed = []
        for k, v in self.get_params().items():
            d = defaults[k]
            same = v is d or (type(v) is type(d) and not isinstance(v, np.ndarray) and bool(v == d))
            if not same:
                changed.append(f"{k}={v!r}")
        return f"GPClassifier({', '.join(changed)})"

    def __sklearn_tags__(self):  # called by scikit-learn only, so its import is fine here
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(multi_class=False),
            input_tags=InputTags(),
        )

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "ep_result_")

    def _check_is_fitted(self) -> None:
        if not hasattr(self, "ep_result_"):
            raise _not_fitted_error(
                "This GPClassifier instance is not fitted yet. Call 'fit' with appropriate "
                "arguments before using this estimator."
            )

    # -- construction of the pieces -----------------------------------------------------------
    def _validate_params(self) -> None:
        if self.method not in ("qp", "ep", "pep"):
            raise ValueError(f"method must be 'qp', 'ep' or 'pep', got {self.method!r}")
        if self.method == "pep":
            check_power(self.alpha)
        if self.optimizer not in ("lbfgs", None):
            raise ValueError(f"optimizer must be 'lbfgs' or None, got {self.optimizer!r}")
        if self.schedule not in ("parallel", "sequential"):
            raise ValueError(f"schedule must be 'parallel' or 'sequential', got {self.schedule!r}")
        mi = self.max_iter
        if isinstance(mi, bool) or not (isinstance(mi, int | np.integer) and mi >= 1):
            raise ValueError(f"max_iter must be a positive integer, got {mi!r}")
        if not (isinstance(self.tol, int | float) and self.tol > 0):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")
        if self.damping is not None and not (0 < self.damping <= 1):
            raise ValueError(f"damping must be None or in (0, 1], got {self.damping!r}")

    def _initial_kernel(self, n_features: int) -> Any:
        if self.kernel is not None:
            for attr in ("theta", "bounds", "with_theta", "gradient_contract", "diag"):
                if not hasattr(self.kernel, attr):
                    raise ValueError(
                        f"kernel must implement the qpinfer.kernels.Kernel protocol; "
                        f"{type(self.kernel).__name__} lacks {attr!r}"
                    )
            return self.kernel.with_theta(self.kernel.theta)  # a copy; the parameter is kept
        ls = np.asarray(self.length_scale, dtype=np.float64)
        if ls.ndim == 0 and self.ard:
            ls = np.full(n_features, float(ls))
        elif ls.ndim == 1 and ls.size not in (1, n_features):
            raise ValueError(f"length_scale has {ls.size} entries but X has {n_features} features")
        return ARDSquaredExponential(self.variance, ls)

    def _resolve_table(self, likelihood: Probit) -> Any:
        if self.method != "qp":
            return None
        table = self.table
        if isinstance(table, str) and table == "exact":
            return None
        if table is None:
            path = installed_table_path(likelihood)
            if not path.exists():
                _warn_exact_once(f"no installed sigma* table for {likelihood.name!r} at {path}")
                return None
            try:
                return open_table(path)
            except TableError as exc:
                _warn_exact_once(f"the installed table is unusable ({exc})")
                return None
        if isinstance(table, str | os.PathLike):
            return open_table(table)
        if not hasattr(table, "sigma_ratio"):
            raise ValueError(
                f"table must be None, 'exact', a path or a table from qpinfer.open_table; got "
                f"{type(table).__name__}"
            )
        return table

    def _projection(self, likelihood: Probit, table: Any) -> Any:
        if self.method == "ep":
            return MomentMatching(likelihood)
        if self.method == "pep":
            return PowerMomentMatching(likelihood, self.alpha)
        return QuantileMatching(likelihood, table)

    def _run(self, K: np.ndarray, y: np.ndarray, projection: Any, init=None) -> EPResult:
        return run_ep(
            K,
            y,
            projection,
            schedule=self.schedule,
            damping=self.damping,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            init=init,
        )

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> GPClassifier:
        """Fit sites (and, with ``optimizer="lbfgs"``, kernel hyperparameters) to ``(X, y)``."""
        self._validate_params()
        X = _check_X(X)
        y = _check_y(y, X.shape[0])
        classes = np.unique(y)
        if classes.size < 2:
            raise ValueError(
                "GPClassifier needs samples of 2 classes, but the data contains only one class: "
                f"{classes.tolist()}"
            )
        if classes.size > 2:
            raise ValueError(
                "Only binary classification is supported. The type of the target is multiclass "
                f"({classes.size} classes)."
            )
        likelihood = Probit()
        y_pm = np.where(y == classes[1], 1.0, -1.0)
        table = self._resolve_table(likelihood)
        projection = self._projection(likelihood, table)
        kernel = self._initial_kernel(X.shape[1])

        if self.optimizer == "lbfgs":
            kernel, result, n_evals = self._optimize(kernel, X, y_pm, projection)
        else:
            result = self._run(kernel(X), y_pm, projection)
            n_evals = 1

        self.classes_ = classes
        self.n_features_in_ = X.shape[1]
        self.X_train_ = X
        self.y_train_ = y_pm
        self.kernel_ = kernel
        self.table_ = table
        self.projection_ = projection
        self.ep_result_ = result
        self.log_marginal_likelihood_ = result.log_marginal_likelihood
        self.n_iter_ = result.n_iter
        self.n_evaluations_ = n_evals
        return self

    def _optimize(self, kernel, X, y, projection) -> tuple[Any, EPResult, int]:
        """Maximise eq. (4) over the log hyperparameters with L-BFGS-B (paper Sec. 6).

        Each evaluation runs the site updates to convergence, warm-started from the previous
        evaluation's sites, and returns eq. (4) with its gradient R&W eq. (5.27) (exact for EP at
        convergence; for QP the fixed-site derivative, see :mod:`qpinfer.ep`).
        """
        state: dict[str, Any] = {"init": None, "best": None, "n": 0}

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            state["n"] += 1
            kern = kernel.with_theta(theta)
            try:
                K = kern(X)
                res = self._run(K, y, projection, state["init"])
                grad = log_evidence_gradient(kern, X, res, K)
            except np.linalg.LinAlgError:
                return np.inf, np.zeros_like(theta)
            value = res.log_marginal_likelihood
            if not (np.isfinite(value) and np.all(np.isfinite(grad))):
                return np.inf, np.zeros_like(theta)
            state["init"] = (res.tau, res.nu)
            best = state["best"]
            if best is None or value > best[2].log_marginal_likelihood:
                state["best"] = (theta.copy(), kern, res)
            return -value, -grad

        with warnings.catch_warnings():
            # the first evaluations may run EP at extreme hyperparameters; only the result counts
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            minimize(
                objective,
                kernel.theta,
                jac=True,
                method="L-BFGS-B",
                bounds=kernel.bounds,
                options=_LBFGS_OPTIONS,
            )
        if state["best"] is None:
            raise ValueError("EP/QP failed at every hyperparameter value tried")
        _, kern, result = state["best"]
        if not result.converged:
            warnings.warn(
                f"EP/QP site updates did not converge within max_iter={self.max_iter} sweeps at "
                f"the fitted hyperparameters (RMS change {result.rms_change:.3g})",
                ConvergenceWarning,
                stacklevel=3,
            )
        return kern, result, state["n"]

    # -- predictions --------------------------------------------------------------------------
    def _check_predict_X(self, X: Any) -> np.ndarray:
        self._check_is_fitted()
        X = _check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but GPClassifier is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent f at ``X`` (R&W eqs. (3.60)-(3.61))."""
        X = self._check_predict_X(X)
        K_star = self.kernel_(self.X_train_, X)
        return predict_latent(self.ep_result_.posterior, K_star, self.kernel_.diag(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, probit closed form ``Phi(mean / sqrt(1 + var))`` (R&W eq. 3.82).

        Columns follow ``classes_``.
        """
        mean, var = self.predict_latent(X)
        z = mean / np.sqrt(1.0 + var)
        return np.column_stack((ndtr(-z), ndtr(z)))

    def decision_function(self, X: Any) -> np.ndarray:
        """``mean / sqrt(1 + var)``: positive for ``classes_[1]``; ``Phi`` of it is its probability."""
        mean, var = self.predict_latent(X)
        return mean / np.sqrt(1.0 + var)

    def predict(self, X: Any) -> np.ndarray:
        """The more probable class (``classes_[1]`` where the latent mean is positive)."""
        mean, _ = self.predict_latent(X)
        return self.classes_[(mean > 0).astype(np.intp)]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of :meth:`predict` on ``(X, y)``."""
        pred = self.predict(X)
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y.ravel()
        if y.shape != pred.shape:
            raise ValueError(f"y has shape {y.shape}, expected {pred.shape}")
        correct = (pred == y).astype(np.float64)
        if sample_weight is None:
            return float(correct.mean())
        w = np.asarray(sample_weight, dtype=np.float64)
        return float(np.sum(w * correct) / np.sum(w))

    def log_marginal_likelihood(
        self, theta: np.ndarray | None = None, eval_gradient: bool = False
    ) -> float | tuple[float, np.ndarray]:
        """Eq. (4) at log hyperparameters ``theta`` (default: the fitted ones).

        With another ``theta`` the sites are re-fitted (warm-started from the fitted ones). The
        gradient is R&W eq. (5.27) with the sites held fixed: the total derivative for EP at
        convergence; for QP the derivative of the fixed-site objective (see :mod:`qpinfer.ep`).
        """
        self._check_is_fitted()
        if theta is None:
            kernel = self.kernel_
            result = self.ep_result_
        else:
            kernel = self.kernel_.with_theta(np.asarray(theta, dtype=np.float64))
            result = self._run(
                kernel(self.X_train_),
                self.y_train_,
                self.projection_,
                (self.ep_result_.tau, self.ep_result_.nu),
            )
        if not eval_gradient:
            return result.log_marginal_likelihood
        return result.log_marginal_likelihood, log_evidence_gradient(kernel, self.X_train_, result)
