"""The joint latent predictive of the regressors at several inputs, and draws from it.

scikit-learn's ``GaussianProcessRegressor`` has
``predict(X, return_cov=True)`` and ``sample_y(X, n_samples, random_state)``; both need the
covariance of the latent ``f*`` at all rows of ``X`` at once, not its marginal variances. Every
fitted Gaussian posterior gives it in closed form:

* full GP (EP, QP, Laplace, VB; Rasmussen and Williams, 2006, eq. (3.61) with ``X*`` in place of
  ``x*``): ``cov = K** - K*^T S~^1/2 B^-1 S~^1/2 K*``, ``B = I + S~^1/2 K S~^1/2`` (``M`` in
  place of ``B`` with negative site precisions, :mod:`qpinfer.inference.dense_posterior`);
* M pseudo-points (Bui, Yan and Turner, 2017, eq. (18)): ``cov = K** - a*^T a* + c*^T c*``,
  ``a* = Lu^-1 Ku*``, ``c* = L_B^-1 a*``.

The mixins here supply ``_latent_mean_cov(X)`` (in the estimator's own latent units: the
Student-t mixin rescales it by ``normalize_y``'s spread) to the predictions of
:mod:`qpinfer.estimators.student_t_predictions` and
:mod:`qpinfer.estimators.count_predictions`; :class:`SampleYMixin` turns it into
``sample_y``: a joint draw of ``f*``, then the likelihood's noise (``_observe``) per draw.
Memory: the covariance is an ``(n, n)`` float64 matrix, ``8 n^2`` bytes (10,000 rows: 0.8 GB,
and the products hold two or three such); the minibatch estimators, made for data of millions
of rows, refuse more than :data:`JOINT_MAX_ROWS` rows and a dask ``X`` (the joint of a subset
of rows is the subset of the joint, so a slice of ``X`` is what to pass).
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular

from qpinfer.checks import check_X
from qpinfer.estimators.blas import limits_blas
from qpinfer.inference.restarts import check_random_state
from qpinfer.inference.sparse.dask_partitions import is_dask_array

__all__ = [
    "JOINT_MAX_ROWS",
    "RETURN_BOTH_MESSAGE",
    "ReturnBothError",
    "DenseJointLatentMixin",
    "MiniBatchJointLatentMixin",
    "SampleYMixin",
    "SparseSiteJointLatentMixin",
    "draw_gaussian",
    "low_rank_mean_cov",
]

#: the most rows of ``X`` the minibatch estimators' ``predict(return_cov=True)`` and
#: ``sample_y`` take: an ``(n, n)`` float64 covariance is 0.8 GB at 10,000 rows
JOINT_MAX_ROWS = 10_000
#: scikit-learn's ``GaussianProcessRegressor.predict`` message, raised as it does
RETURN_BOTH_MESSAGE = "At most one of return_std or return_cov can be requested."


class ReturnBothError(RuntimeError, ValueError):
    """``predict(X, return_std=True, return_cov=True)``: scikit-learn's
    ``GaussianProcessRegressor`` raises a ``RuntimeError`` with :data:`RETURN_BOTH_MESSAGE`;
    this is one (and a ``ValueError``, as qpinfer's other refused arguments)."""

    def __init__(self) -> None:
        super().__init__(RETURN_BOTH_MESSAGE)


def _symmetric(C: np.ndarray) -> np.ndarray:
    return 0.5 * (C + C.T)


def low_rank_mean_cov(
    kernel: Any, Z: np.ndarray, Lu: np.ndarray, L_B: np.ndarray, mean_v: np.ndarray, Xs: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Joint latent predictive of a pseudo-point posterior (Bui et al., 2017, eq. (18)): mean
    ``a*^T mean_v`` and covariance ``K** - a*^T a* + c*^T c*``, ``a* = Lu^-1 Ku*``,
    ``c* = L_B^-1 a*`` (the marginal variances are
    :func:`~qpinfer.inference.sparse.pseudo_points.predict_latent_low_rank`'s)."""
    a = solve_triangular(Lu, kernel(Z, Xs), lower=True, check_finite=False)
    c = solve_triangular(L_B, a, lower=True, check_finite=False)
    return a.T @ mean_v, _symmetric(kernel(Xs) - a.T @ a + c.T @ c)


def draw_gaussian(mean: np.ndarray, cov: np.ndarray, n_samples: int, rng: Any) -> np.ndarray:
    """``n_samples`` draws of ``N(mean, cov)`` as the columns of an ``(n, n_samples)`` array:
    ``mean + Q diag(sqrt(lam)) z`` from the eigendecomposition ``cov = Q diag(lam) Q^T``
    (eigenvalues below zero by round-off are taken as zero; a positive semi-definite ``cov``
    of rank below ``n``, e.g. rows of ``X`` repeated, is fine). ``rng`` is a numpy
    ``Generator`` or ``RandomState``."""
    lam, Q = np.linalg.eigh(cov)
    z = rng.standard_normal((mean.shape[0], n_samples))
    return mean[:, None] + Q @ (np.sqrt(np.maximum(lam, 0.0))[:, None] * z)


class DenseJointLatentMixin:
    """``_latent_mean_cov`` of a full-GP posterior (``result_.posterior``, ``X_train_``)."""

    @limits_blas
    def _latent_mean_cov(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the latent ``f*`` at the rows of ``X`` (R&W eqs.
        (3.60)-(3.61), the covariance of all rows at once)."""
        X = self._check_predict_X(X)
        post = self.result_.posterior
        K_star = self.kernel_(self.X_train_, X)
        mean = K_star.T @ post.b
        a = post.sqrt_tau[:, None] * K_star
        if post.L is None:  # negative sites: M^-1 in place of B^-1
            reduction = a.T @ post.solve_B(a)
        else:
            v = solve_triangular(post.L, a, lower=True, check_finite=False)
            reduction = v.T @ v
        return mean, _symmetric(self.kernel_(X) - reduction)


class SparseSiteJointLatentMixin:
    """``_latent_mean_cov`` of a pseudo-point site fit (``pep_result_``, ``_Lu``)."""

    @limits_blas
    def _latent_mean_cov(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the latent ``f*`` (Bui et al., 2017, eq. (18))."""
        X = self._check_predict_X(X)
        post = self.pep_result_.posterior
        return low_rank_mean_cov(
            self.kernel_, self.inducing_points_, self._Lu, post.L, post.mean_v, X
        )


class MiniBatchJointLatentMixin:
    """``_latent_mean_cov`` of a minibatch fit (``result_``): numpy ``X`` of at most
    :data:`JOINT_MAX_ROWS` rows."""

    @limits_blas
    def _latent_mean_cov(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the latent ``f*`` (Bui et al., 2017, eq. (18))."""
        self._check_is_fitted()
        name = type(self).__name__
        if is_dask_array(X):
            raise ValueError(
                f"{name}: return_cov and sample_y need X in memory (a numpy array of at most "
                f"{JOINT_MAX_ROWS} rows: the joint covariance of n rows is an (n, n) matrix); "
                "got a dask array: pass X[rows].compute() for the rows wanted"
            )
        X = check_X(X, "X", name)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features_in_}")
        if X.shape[0] > JOINT_MAX_ROWS:
            raise ValueError(
                f"{name}: return_cov and sample_y take X of at most {JOINT_MAX_ROWS} rows (the "
                f"joint covariance of n rows is an (n, n) float64 matrix, {8 * JOINT_MAX_ROWS**2 / 1e9:.1f} "
                f"GB at {JOINT_MAX_ROWS}); got {X.shape[0]}: pass a slice of X (the joint of a "
                "subset of rows is that subset of the joint)"
            )
        post = self.result_.posterior
        return low_rank_mean_cov(
            self.kernel_, self.inducing_points_, self.result_.Lu, post.L, post.mean, X
        )


def check_n_samples(n_samples: Any) -> int:
    """``n_samples`` as an int; ``ValueError`` unless it is an integer >= 1."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, Integral) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    return int(n_samples)


class SampleYMixin:
    """``sample_y``: draws of new observations at the rows of ``X`` from the joint predictive
    (``_latent_mean_cov`` in the units of ``y``, then ``_observe``: the likelihood's noise)."""

    def sample_y(self, X: Any, n_samples: int = 1, random_state: Any = 0) -> np.ndarray:
        """Draw new observations ``y*`` at the rows of ``X`` from the posterior predictive.

        Each draw takes the latent ``f*`` at all rows jointly from its Gaussian predictive
        (mean and covariance of ``predict`` with ``return_cov``; for the Poisson regressors
        of the latent, ``predict_latent``), then the observation noise of each row
        independently given it, as the model has it.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Where to draw (at most 10,000 rows for the minibatch estimators; numpy only).
        n_samples : int, default 1
            Draws per row.
        random_state : int, None, numpy Generator or RandomState, default 0
            An integer seeds a fresh :func:`numpy.random.default_rng` (the same draws on every
            call, as scikit-learn's default ``0`` does); ``None`` draws fresh entropy.

        Returns
        -------
        ndarray of shape (n_rows, n_samples)
            One draw per column (float64; int64 counts for the Poisson regressors).
        """
        n_samples = check_n_samples(n_samples)
        rng = check_random_state(random_state)
        mean, cov = self._latent_mean_cov(X)
        return self._observe(draw_gaussian(mean, cov, n_samples, rng), rng)
