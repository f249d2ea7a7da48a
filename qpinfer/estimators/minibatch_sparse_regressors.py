# Over 400 lines: two public estimators, whose docstrings (parameters, methods' sections, examples) are nearly half of it; the code is about 230 lines.
"""MiniBatchSparseGPPoissonRegressor and MiniBatchSparseGPStudentTRegressor: sparse GP regression
with Poisson counts or Student-t noise by minibatch EP / QP, for data of millions of rows or more
than memory.

The same fit as :class:`qpinfer.MiniBatchSparseGPClassifier` (stochastic EP with one tied site,
Li, Hernandez-Lobato and Turner, 2015, in the pseudo-point family of Bui, Yan and Turner, 2017;
:mod:`qpinfer.inference.sparse.minibatch`) with a :class:`~qpinfer.inference.sparse.minibatch_targets.ValueTarget` for the targets: QP projects
each ``f_n``'s tilted marginal (sigma* from the likelihood's table), EP takes its moments (from
the moment table shipped for the likelihood). Early stopping watches the held-out rows' negative
log predictive density, ``-mean log int p(y | f) N(f | m*, v*) df`` (the tilted normaliser at the
latent predictive).

The Student-t likelihood is not log-concave: its sites may have negative precisions, which are
kept, and the tied site's average precision may then be indefinite; a step that would make the
posterior precision ``I + N Lam`` indefinite is halved until it does not. ``optimize_scale``
moves ``log(scale)`` by Adam with the kernel, on the minibatch estimate of the energy's
derivative (:mod:`qpinfer.inference.sparse.stochastic`). ``normalize_y`` centres and scales the
targets by their median and MAD (:func:`~qpinfer.estimators.student_t_predictions.robust_center_scale`):
of all of a numpy ``y``, and of a seeded sample of :data:`NORMALIZE_SAMPLE_ROWS` rows of a dask
``y`` (the quantiles of a sample of 1e5 rows are off by about 0.4% of the spread; read from
``y`` alone).
"""

from __future__ import annotations

import math
import re
from dataclasses import KW_ONLY
from functools import partial
from typing import Any

import numpy as np

from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.count_predictions import (
    LOG_LINK_MAX_COUNT,
    LOG_LINK_MAX_COUNT_TEXT,
    CountPredictionsMixin,
    check_counts,
)
from qpinfer.estimators.count_summaries import check_levels
from qpinfer.estimators.joint_predictions import MiniBatchJointLatentMixin
from qpinfer.estimators.minibatch_base import MiniBatchParams, MiniBatchSparseBase
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import RegressorTagsMixin
from qpinfer.estimators.student_t_predictions import (
    StudentTPredictionsMixin,
    check_student_t_options,
    check_targets,
    robust_center_scale,
)
from qpinfer.estimators.tables import resolve_table, with_moment_table
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.sparse.dask_partitions import is_dask_array
from qpinfer.inference.sparse.minibatch import ValueTarget
from qpinfer.likelihoods.student_t import DEFAULT_NU

__all__ = [
    "MiniBatchRegressorBase",
    "MiniBatchSparseGPPoissonRegressor",
    "MiniBatchSparseGPStudentTRegressor",
]

#: rows of a dask ``y`` whose median and MAD ``normalize_y`` takes
NORMALIZE_SAMPLE_ROWS = 100_000


def _projection(method: str, likelihood: Any, table: Any) -> Any:
    """QP's projection, or EP's (Power EP at alpha = 1)."""
    if method == "qp":
        return QuantileMatching(likelihood, table)
    return PowerMomentMatching(likelihood, 1.0)


def _checked_part(check, name: str, values: np.ndarray, start: int) -> np.ndarray:
    """``check(values)``; its ``ValueError`` names the row of ``name`` (counted from the first
    row of the data, the part starting at row ``start``)."""
    try:
        return check(values)
    except ValueError as e:
        bad = _first_refused(check, values)
        where = f"row {start + bad}" if bad is not None else f"the rows from row {start}"
        message = re.sub(r" \(?(first )?at index \d+\)?", "", str(e))
        raise ValueError(f"{message} (in {where} of {name})") from None


def _first_refused(check, values: np.ndarray) -> int | None:
    """The first row ``check`` refuses alone (on the error path only: O(rows) checks)."""
    for i in range(values.shape[0]):
        try:
            check(values[i : i + 1])
        except ValueError:
            return i
    return None


class MiniBatchRegressorBase(RegressorTagsMixin, MiniBatchSparseBase):
    """Lazy predictions on a dask ``X`` (the mixins' numpy code mapped over its row blocks)."""

    _METHODS = ("qp", "ep")

    def _maybe_lazy(self, numpy_predict, X: Any, return_std: bool) -> Any:
        """``numpy_predict(X, return_std)``, mapped over the row blocks of a dask ``X``."""
        if not is_dask_array(X):
            return numpy_predict(X, return_std)
        if return_std:
            return self._lazy_pair(lambda b: numpy_predict(b, True), X)
        return self._blockwise(numpy_predict, X, None)

    def _fit_values(self, X, y, s, likelihood, table, check, **target) -> Any:
        """Fit with settings ``s``, the likelihood (its moment table added) and QP's
        ``table``."""
        likelihood = with_moment_table(self, likelihood, table)
        projection = _projection(self.method, likelihood, table)
        value_target = ValueTarget(likelihood, check, **target)
        if value_target.projection_at is not None:
            value_target.projection_at = value_target.projection_at.with_moments(likelihood)
        res = self._fit_minibatch(X, y, value_target, projection, s)
        self.likelihood_ = likelihood
        self.table_ = table
        return res


@estimator
class MiniBatchSparseGPPoissonRegressor(
    CountPredictionsMixin, MiniBatchJointLatentMixin, MiniBatchRegressorBase, MiniBatchParams
):
    """Sparse GP Poisson regression (counts) with M pseudo-points by minibatch EP or QP.

    Rate ``f^2`` (``link="square"``, Zhang et al., 2020) or ``exp(f)`` (``link="log"``).
    Predictions as :class:`qpinfer.GPPoissonRegressor`'s
    (:class:`~qpinfer.estimators.count_predictions.CountPredictionsMixin`): ``predict`` returns
    the predictive mean of the count (float64), ``predict_mode`` the most probable count
    (int64), ``predict_quantiles`` / ``predict_interval`` its quantiles, ``score`` D^2 of the
    Poisson deviance; ``predict``, ``predict_mean``, ``predict_mode``, ``predict_quantiles``
    (and ``predict_latent``) lazy on a dask ``X``; ``sample_y`` takes a numpy ``X`` of at most
    10,000 rows.

    Parameters
    ----------
    n_inducing, kernel, variance, length_scale, ard, optimizer, optimize_inducing,
    inducing_points, batch_size, batch_parts, max_epochs, learning_rate, validation_fraction,
    n_iter_no_change, tol, jitter, random_state, scheduler, verbose, blas_threads :
        As :class:`qpinfer.MiniBatchSparseGPClassifier`'s (``tol``, early stopping: of the
        held-out negative log predictive density per row).
    method : {"qp", "ep"}, default "qp"
        QP (sigma* of ``f_n``'s tilted marginal from ``table``) or EP.
    table : None, "exact", path or table object
        As :class:`qpinfer.GPPoissonRegressor`'s.
    link : {"square", "log"}, default "square"

    Attributes
    ----------
    likelihood_, table_, n_features_in_, kernel_, inducing_points_, n_epochs_, best_epoch_,
    energy_, validation_ntll_, n_train_ :
        As the classifier's; ``validation_ntll_`` is the held-out negative log predictive
        density per row.

    Examples
    --------
    >>> import numpy as np
    >>> from qpinfer import MiniBatchSparseGPPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, size=(1000, 1))
    >>> y = rng.poisson(4 + 3 * np.sin(X[:, 0] / 1.5))
    >>> reg = MiniBatchSparseGPPoissonRegressor(
    ...     15, batch_size=200, max_epochs=5, random_state=0
    ... ).fit(X, y)
    >>> mean = reg.predict_mean(np.array([[2.0], [7.0]]))
    >>> bool(mean[0] > mean[1])  # the rate is about 7 at x = 2 and 1.5 at x = 7
    True
    """

    _: KW_ONLY
    method: str = "qp"
    table: Any = None
    link: str = "square"

    _POSITIVE_TARGETS = True

    @limits_blas
    def fit(self, X: Any, y: Any) -> MiniBatchSparseGPPoissonRegressor:
        """Fit by minibatch EP/QP to inputs ``X`` and counts ``y`` (numpy or dask arrays).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.
        y : array-like or dask array of shape (n_samples,)
            Non-negative integer counts.

        Returns
        -------
        self
            The fitted estimator.
        """
        if not (isinstance(self.link, str) and self.link in ("square", "log")):
            raise ValueError(f"link must be 'square' or 'log', got {self.link!r}")
        s = self._settings()
        X, y = self._checked_data(X, y)
        name = type(self).__name__
        if self.link == "log":
            from qpinfer.likelihoods.poisson_log import PoissonLog

            likelihood = PoissonLog()
            why = "the largest count fits with link='log', the poisson_log likelihood, take"
            check = partial(
                check_counts,
                n_samples=None,
                name="y",
                limit=(LOG_LINK_MAX_COUNT, LOG_LINK_MAX_COUNT_TEXT, why),
                estimator=name,
            )
        else:
            from qpinfer.likelihoods.poisson_square import PoissonSquare

            likelihood = PoissonSquare()
            check = partial(check_counts, n_samples=None, name="y", estimator=name)
        check_part = partial(_checked_part, check, "y")
        self._fit_values(X, y, s, likelihood, resolve_table(self, likelihood), check_part)
        return self

    def predict(self, X: Any, return_std: bool = False) -> Any:
        """The predictive mean of the count (and its standard deviation), as
        :class:`qpinfer.GPPoissonRegressor`'s; lazy for a dask ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).
        return_std : bool, default False
            Also return the count's predictive standard deviation.

        Returns
        -------
        mean : ndarray or dask array of shape (n_samples,)
        std : ndarray or dask array of shape (n_samples,)
            Only with ``return_std``.
        """
        return self._maybe_lazy(super().predict, X, return_std)

    def predict_mean(self, X: Any) -> Any:
        """The predictive mean of the count (:meth:`predict`); lazy for a dask ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
        """
        if is_dask_array(X):
            return self._blockwise(super().predict_mean, X, None)
        return super().predict_mean(X)

    def predict_mode(self, X: Any) -> Any:
        """The most probable count, as :class:`qpinfer.GPPoissonRegressor`'s; lazy for a dask
        ``X``."""
        if is_dask_array(X):
            return self._blockwise(super().predict_mode, X, None, dtype=np.int64)
        return super().predict_mode(X)

    def predict_quantiles(self, X: Any, q: Any) -> Any:
        """Quantiles of the predictive count, as :class:`qpinfer.GPPoissonRegressor`'s; lazy
        for a dask ``X`` (``predict_interval`` too, through this)."""
        if is_dask_array(X):
            n_levels = check_levels(q).size
            self._check_is_fitted()
            method = partial(CountPredictionsMixin.predict_quantiles, self, q=q)
            return self._blockwise(method, X, n_levels, dtype=np.int64)
        return super().predict_quantiles(X, q)


class _StudentTAt:
    """The site projection of Student-t noise at a scale (picklable: the tables travel as
    their paths): ``nu``, the method, the scale-1 table of ``nu`` QP reads and the moment table."""

    def __init__(self, nu: float, method: str, table: Any, moments: Any = None) -> None:
        self.nu, self.method, self.table, self.moments = nu, method, table, moments

    def with_moments(self, likelihood: Any) -> _StudentTAt:
        return _StudentTAt(self.nu, self.method, self.table, likelihood._moment_table)

    def __call__(self, scale: float) -> Any:
        from qpinfer.likelihoods.student_t import StudentT
        from qpinfer.tables.scaled import for_likelihood

        likelihood = StudentT(self.nu, scale).with_moment_table(self.moments)
        return _projection(self.method, likelihood, for_likelihood(self.table, likelihood))


@estimator
class MiniBatchSparseGPStudentTRegressor(
    StudentTPredictionsMixin, MiniBatchJointLatentMixin, MiniBatchRegressorBase, MiniBatchParams
):
    """Sparse GP regression with Student-t noise ``t_nu(0, scale)`` and M pseudo-points by
    minibatch EP or QP.

    How it handles negative sites, ``optimize_scale`` and ``normalize_y`` on a dask ``y``: the
    docstring of its module, ``qpinfer.estimators.minibatch_sparse_regressors``.

    Predictions as :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s
    (:class:`~qpinfer.estimators.student_t_predictions.StudentTPredictionsMixin`); ``predict``
    and ``predict_latent`` lazy on a dask ``X``.

    Parameters
    ----------
    n_inducing, kernel, variance, length_scale, ard, optimizer, optimize_inducing,
    inducing_points, batch_size, batch_parts, max_epochs, learning_rate, validation_fraction,
    n_iter_no_change, tol, jitter, random_state, scheduler, verbose, blas_threads :
        As :class:`qpinfer.MiniBatchSparseGPClassifier`'s (``tol``, early stopping: of the
        held-out negative log predictive density per row, in the units of ``y``).
    method : {"qp", "ep"}, default "qp"
    table : None, "exact", path or table object
        As :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s (a scale-1 table of ``nu`` serves every
        scale).
    nu, scale, optimize_scale, scale_bounds, normalize_y :
        As :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s; ``optimize_scale`` needs
        ``optimizer="adam"`` (Adam moves ``log(scale)`` with the kernel, clipped to
        ``scale_bounds``).

    Attributes
    ----------
    likelihood_, scale_, y_center_, y_scale_ :
        The fitted likelihood and its scale (normalised units), the normalisation.
    table_, n_features_in_, kernel_, inducing_points_, n_epochs_, best_epoch_, energy_,
    validation_ntll_, n_train_ :
        As :class:`MiniBatchSparseGPPoissonRegressor`'s.

    Examples
    --------
    >>> import numpy as np
    >>> from qpinfer import MiniBatchSparseGPStudentTRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 6, size=(1000, 1))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(1000)
    >>> y[::50] += 4.0  # twenty outliers
    >>> reg = MiniBatchSparseGPStudentTRegressor(
    ...     15, batch_size=200, max_epochs=5, random_state=0
    ... ).fit(X, y)
    >>> mean = reg.predict(X)
    >>> bool(np.abs(mean - np.sin(X[:, 0])).max() < 0.3)  # the fit ignores the outliers
    True
    """

    _: KW_ONLY
    method: str = "qp"
    table: Any = None
    nu: float = DEFAULT_NU
    scale: float = 1.0
    optimize_scale: bool = False
    scale_bounds: tuple[float, float] = (1e-4, 1e4)
    normalize_y: bool = True

    @limits_blas
    def fit(self, X: Any, y: Any) -> MiniBatchSparseGPStudentTRegressor:
        """Fit by minibatch EP/QP to inputs ``X`` and real targets ``y`` (numpy or dask).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.
        y : array-like or dask array of shape (n_samples,)
            Real targets.

        Returns
        -------
        self
            The fitted estimator.
        """
        from qpinfer.likelihoods.student_t import StudentT
        from qpinfer.tables.scaled import for_likelihood

        nu, scale = check_student_t_options(self, lml_remark=False)
        s = self._settings()
        X, y = self._checked_data(X, y)
        name = type(self).__name__
        check = partial(_checked_part, partial(check_targets, n_samples=None, estimator=name), "y")
        center, spread = 0.0, 1.0
        if self.normalize_y:
            center, spread = robust_center_scale(_normalize_sample(y, s.seed, check))
        likelihood = StudentT(nu, scale)
        base_table = resolve_table(self, likelihood)
        target = {"center": center, "spread": spread}
        if self.optimize_scale and self.optimizer is not None:
            low, high = (math.log(float(b)) for b in self.scale_bounds)
            at = _StudentTAt(nu, self.method, base_table)
            target.update(scale=scale, log_bounds=(low, high), projection_at=at)
        table = for_likelihood(base_table, likelihood)
        res = self._fit_values(X, y, s, likelihood, table, check, **target)
        self.y_center_, self.y_scale_ = center, spread
        if res.scale is not None:
            self.likelihood_ = res_lik = StudentT(nu, res.scale).with_moment_table(
                self.likelihood_._moment_table
            )
            self.table_ = for_likelihood(base_table, res_lik)
        self.scale_ = self.likelihood_.scale
        return self

    def predict(self, X: Any, return_std: bool = False, return_cov: bool = False) -> Any:
        """The predictive mean (and the standard deviation, or the covariance, of new
        observations), as :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s;
        lazy for a dask ``X`` (``return_cov`` takes a numpy ``X`` of at most 10,000 rows,
        :data:`~qpinfer.estimators.joint_predictions.JOINT_MAX_ROWS`).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).
        return_std : bool, default False
            Also return the predictive standard deviation of a new observation.
        return_cov : bool, default False
            Also return the covariance of the new observations (numpy ``X`` only).

        Returns
        -------
        mean : ndarray or dask array of shape (n_samples,)
        std : ndarray or dask array of shape (n_samples,)
            Only with ``return_std``.
        cov : ndarray of shape (n_samples, n_samples)
            Only with ``return_cov``.
        """
        if return_cov:
            return super().predict(X, return_std=return_std, return_cov=True)
        return self._maybe_lazy(super().predict, X, return_std)


def _normalize_sample(y: Any, seed: int, check) -> np.ndarray:
    """All of a numpy ``y``, checked (``check``); a sample of :data:`NORMALIZE_SAMPLE_ROWS`
    rows of a dask ``y``, drawn with ``seed``."""
    if not is_dask_array(y) or y.shape[0] <= NORMALIZE_SAMPLE_ROWS:
        return check(np.asarray(y), 0)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(y.shape[0], NORMALIZE_SAMPLE_ROWS, replace=False))
    sample = np.asarray(y[rows].compute())
    try:
        return check(sample, 0)
    except ValueError as e:
        raise ValueError(f"{e}; the row counts in the sample of y that normalize_y reads") from None
