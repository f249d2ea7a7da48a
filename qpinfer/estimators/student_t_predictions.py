"""What every Student-t regression estimator (dense, sparse, minibatch) shares: the target
checks, the check of the scale options, the robust normalisation of ``normalize_y``, and the
predictions of a Gaussian latent predictive under Student-t noise (``predict`` with scikit-learn's
``return_std``/``return_cov``, ``sample_y``: :mod:`qpinfer.estimators.joint_predictions`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from qpinfer.checks import check_target_vector, check_X
from qpinfer.checks import finite_array as _finite
from qpinfer.estimators.count_summaries import r2_score
from qpinfer.estimators.joint_predictions import ReturnBothError, SampleYMixin

__all__ = [
    "MAD_TO_STD",
    "TRUST",
    "StudentTPredictionsMixin",
    "check_scale_options",
    "check_student_t_options",
    "check_targets",
    "robust_center_scale",
]

#: the median absolute deviation of a normal sample times this estimates its standard deviation
MAD_TO_STD = 1.4826
#: half-width (log units) of the box trust region of a search over the scale and the kernel
TRUST = 2.0


def check_student_t_options(est: Any, lml_remark: bool = True) -> tuple[float, float]:
    """The Student-t regressors' own parameters checked at ``fit``: ``(nu, scale)`` as floats;
    ``ValueError`` naming the parameter for a bad ``nu``, ``scale``, ``optimize_scale``,
    ``scale_bounds`` or ``normalize_y``, and a ``UserWarning`` when ``optimize_scale=True`` can
    have no effect (``optimizer=None``; ``lml_remark``: the estimator has a
    ``log_marginal_likelihood`` whose last argument is log(scale))."""
    from qpinfer.likelihoods.student_t import check_nu_scale, check_nu_supported

    nu, scale = check_nu_scale(est.nu, est.scale)
    check_nu_supported(nu)
    check_scale_options(est.optimize_scale, est.scale_bounds, scale)
    if not isinstance(est.normalize_y, bool | np.bool_):
        raise ValueError(f"normalize_y must be True or False, got {est.normalize_y!r}")
    if est.optimize_scale and est.optimizer is None:
        remark = " (log_marginal_likelihood still takes log(scale) last)" if lml_remark else ""
        warnings.warn(
            "optimize_scale=True has no effect with optimizer=None: the scale stays at "
            f"scale={scale!r}{remark}",
            UserWarning,
            stacklevel=3,
        )
    return nu, scale


def check_scale_options(optimize_scale: Any, scale_bounds: Any, scale: float) -> None:
    """``ValueError`` naming the parameter unless ``optimize_scale`` is a bool and
    ``scale_bounds`` is ``(low, high)`` with ``0 < low <= high < inf`` holding ``scale`` (when
    the scale is fitted)."""
    if not isinstance(optimize_scale, bool | np.bool_):
        raise ValueError(f"optimize_scale must be True or False, got {optimize_scale!r}")
    try:
        low, high = (float(b) for b in scale_bounds)
    except (TypeError, ValueError):
        low = high = np.nan
    if not (0 < low <= high < np.inf):
        raise ValueError(
            f"scale_bounds must be (low, high) with 0 < low <= high < inf, got {scale_bounds!r}"
        )
    if optimize_scale and not low <= scale <= high:
        raise ValueError(f"scale={scale!r} is outside scale_bounds={scale_bounds!r}")


def robust_center_scale(y: np.ndarray) -> tuple[float, float]:
    """``(median(y), MAD(y) * 1.4826)``: the robust centre and spread ``normalize_y`` uses; the
    spread falls back to the standard deviation where the MAD is 0 (more than half the targets
    equal), and to 1 where that is 0 too (constant targets)."""
    y = np.asarray(y, dtype=np.float64)
    center = float(np.median(y))
    spread = float(np.median(np.abs(y - center))) * MAD_TO_STD
    if not spread > 0:
        spread = float(np.std(y))
    if not (spread > 0 and np.isfinite(spread)):
        spread = 1.0
    return center, spread


def check_targets(
    y: Any, n_samples: int | None, estimator: str = "GPStudentTRegressor"
) -> np.ndarray:
    """Real, finite targets (``ValueError`` naming ``y``)."""
    return _finite("y", check_target_vector(y, n_samples, estimator, "y"))


class StudentTPredictionsMixin(SampleYMixin):
    """The predictions of a fitted Student-t regressor: its latent predictive
    (``super().predict_latent`` and ``super()._latent_mean_cov``, in normalised units), its
    likelihood (``likelihood_``) and the normalisation (``y_center_``, ``y_scale_``);
    ``sample_y`` draws the latent jointly, then the Student-t noise."""

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent f at ``X`` (R&W eqs. (3.60)-(3.61)), in the units
        of ``y`` (``normalize_y`` undone).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        mean, var = super().predict_latent(X)
        return self.y_center_ + self.y_scale_ * mean, self.y_scale_**2 * var

    def _latent_mean_cov(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the latent f at the rows of ``X``, in the units of ``y``."""
        mean, cov = super()._latent_mean_cov(X)
        return self.y_center_ + self.y_scale_ * mean, self.y_scale_**2 * cov

    def _noise_variance(self) -> float:
        """Variance of the Student-t noise in the units of ``y``: ``scale^2 nu / (nu - 2)``
        (``scale`` times ``y_scale_``), ``inf`` for ``nu <= 2``."""
        nu, scale = self.likelihood_.nu, self.likelihood_.scale * self.y_scale_
        return scale * scale * nu / (nu - 2.0) if nu > 2 else np.inf

    def predict(self, X: Any, return_std: bool = False, return_cov: bool = False):
        """Predictive mean of y, with scikit-learn's ``GaussianProcessRegressor`` signature.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
        return_std : bool, default False
            Also return the standard deviation of a new observation ``y* = f* + e``:
            ``sqrt(v* + scale^2 nu / (nu - 2))`` (latent variance plus the Student-t noise's;
            ``scale`` times ``y_scale_`` with ``normalize_y``), ``inf`` for ``nu <= 2``
            (infinite noise variance).
        return_cov : bool, default False
            Also return the covariance of the new observations ``y*`` at the rows of ``X``
            jointly: the latent ``f*``'s covariance plus the noise variance on the diagonal (the
            noise is independent across rows), so its diagonal is ``return_std``'s square.
            An ``(n_rows, n_rows)`` matrix (the minibatch estimator takes at most 10,000 rows,
            in memory). ``RuntimeError`` (a ``ValueError`` too) if both are requested, as
            scikit-learn's.

        Returns
        -------
        mean : ndarray of shape (n_rows,)
            The latent mean (the noise is symmetric).
        std : ndarray of shape (n_rows,), with ``return_std``
        cov : ndarray of shape (n_rows, n_rows), with ``return_cov``

        The latent's moments alone: ``predict_latent``.
        """
        if return_std and return_cov:
            raise ReturnBothError
        if return_cov:
            mean, cov = self._latent_mean_cov(X)
            cov[np.diag_indices_from(cov)] += self._noise_variance()
            return mean, cov
        mean, var = self.predict_latent(X)
        if not return_std:
            return mean
        return mean, np.sqrt(var + self._noise_variance())

    def _observe(self, f: np.ndarray, rng: Any) -> np.ndarray:
        """``sample_y``'s noise: ``f + scale * t_nu`` per entry (``scale`` in ``y``'s units)."""
        scale = self.likelihood_.scale * self.y_scale_
        return f + scale * rng.standard_t(self.likelihood_.nu, size=f.shape)

    def log_predictive_density(self, X: Any, y: Any) -> np.ndarray:
        """log p(y* | data) = log of int t(y* - f) N(f | m*, v*) df, per point (a density of
        ``y`` in its own units).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.
        y : array-like of shape (n_samples,)
            Observed targets.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        self._check_is_fitted()
        X = check_X(X, estimator=type(self).__name__)
        y = check_targets(y, X.shape[0], type(self).__name__)
        mean, var = super().predict_latent(X)
        yn = (y - self.y_center_) / self.y_scale_
        return self.likelihood_.log_z(mean, np.sqrt(var), yn) - np.log(self.y_scale_)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R^2 of the predictive mean (scikit-learn's regressor score).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test inputs.
        y : array-like of shape (n_samples,)
            True targets.
        sample_weight : array-like of shape (n_samples,) or None, default None
            Weights of the rows.

        Returns
        -------
        float
        """
        self._check_is_fitted()
        X = check_X(X, estimator=type(self).__name__)
        y = check_targets(y, X.shape[0], type(self).__name__)
        return r2_score(y, self.predict(X), sample_weight)
