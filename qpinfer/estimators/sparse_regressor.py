"""Sparse GP regression with M pseudo-points by Power EP, from VFE to FITC (Bui et al., 2017, eq. (128))."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.checks import check_target_vector
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.classifier import _check_X
from qpinfer.estimators.count_summaries import r2_score
from qpinfer.estimators.joint_predictions import (
    ReturnBothError,
    SampleYMixin,
    low_rank_mean_cov,
)
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import RegressorTagsMixin, log_marginal_likelihood_method
from qpinfer.estimators.sparse_base import SparseEstimatorBase, check_inducing_kernel
from qpinfer.inference.optimize import search_evidence
from qpinfer.inference.power_ep import check_power
from qpinfer.inference.search_space import free_block, kernel_block, scalar_block, search_space
from qpinfer.inference.sparse.pseudo_points import (
    low_rank_posterior,
    predict_latent_low_rank,
    pseudo_point_prior,
    sparse_regression_energy,
)
from qpinfer.kernels.sklearn_se import sklearn_face

__all__ = ["SparseGPRegressor"]

_LOG_2PI = np.log(2.0 * np.pi)
#: the search's box for ``log(noise_variance)``
NOISE_BOUNDS = (np.log(1e-6), np.log(1e4))


@estimator
class SparseGPRegressor(SampleYMixin, RegressorTagsMixin, SparseEstimatorBase):
    """Sparse GP regression with M pseudo-points by Power EP, from VFE to FITC (Bui et al., 2017).

    Fits the kernel hyperparameters, the noise variance and (optionally) the inducing inputs by
    maximising the collapsed Power EP energy eq. (128) with L-BFGS-B and its analytic gradient
    (:func:`~qpinfer.inference.sparse.pseudo_points.sparse_regression_energy`). O(N M^2) per
    evaluation.

    Parameters
    ----------
    %(n_inducing)s
    alpha : float in (0, 1] or "vfe"
        Power EP power: 1 is FITC, 0.5 the paper's recommended middle, ``"vfe"`` the
        ``alpha -> 0`` limit (Titsias' variational bound, evaluated as a limit).
    %(kernel)s
    %(variance)s
    noise_variance : float
        Initial Gaussian noise variance (in units of the normalised targets if ``normalize_y``).
    normalize_y : bool
        Fit to ``(y - mean) / std`` and undo it in predictions (the prior mean is zero).
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Maximise eq. (128) or keep everything fixed (``None``). The search runs over the kernel's
        log hyperparameters, ``log(noise_variance)`` and (``optimize_inducing``) the inducing
        inputs, in that order; restarts draw the first two.
        %(optimizer_callable)s
    %(search_settings)s
    %(inducing_points)s
    %(jitter)s

    Attributes
    ----------
    kernel_, noise_variance_, inducing_points_ :
        Fitted kernel, noise variance (normalised units) and inducing inputs.
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        Eq. (128) at the fitted values, for the original (un-normalised) targets (the second
        name is scikit-learn's).
    restart_evidence_ : ndarray (n_restarts_optimizer + 1,)
        Eq. (128) at each start's optimum (original targets, as ``log_marginal_likelihood_``),
        the initial values' first; ``-inf`` where it failed throughout.
    n_features_in_, n_evaluations_ : int

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessRegressor : exact (dense) GP regression.

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from qpinfer import SparseGPRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = SparseGPRegressor(20, optimize_inducing=False, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:5], return_std=True)
    >>> mean.shape, std.shape
    ((5,), (5,))
    >>> bool(reg.score(X, y) > 0.4)  # R^2 on the training data
    True
    """

    _: KW_ONLY
    alpha: float | str = 0.5
    noise_variance: float = 0.1
    normalize_y: bool = True

    def _alpha_value(self) -> float:
        if isinstance(self.alpha, str):
            if self.alpha == "vfe":
                return 0.0
            raise ValueError(f"alpha must be in (0, 1] or 'vfe', got {self.alpha!r}")
        try:
            return check_power(self.alpha)
        except ValueError:
            raise ValueError(
                f"alpha must be in (0, 1] or 'vfe' (the alpha -> 0 limit), got {self.alpha!r}"
            ) from None

    def _energy(self, params, X, y, kernel, Z_fixed, alpha, eval_gradient=True):
        n_theta = kernel.theta.size
        kern = kernel.with_theta(params[:n_theta])
        log_s2 = params[n_theta]
        Z = Z_fixed if Z_fixed is not None else params[n_theta + 1 :].reshape(-1, X.shape[1])
        value, g_theta, g_s2, g_Z = sparse_regression_energy(
            kern, X, y, Z, np.exp(log_s2), alpha, jitter=self.jitter, eval_gradient=eval_gradient
        )
        if not eval_gradient:
            return value, None
        grad = [g_theta, [g_s2]]
        if Z_fixed is None:
            grad.append(g_Z.ravel())
        return value, np.concatenate(grad)

    @limits_blas
    def fit(self, X: Any, y: Any) -> SparseGPRegressor:
        """Fit hyperparameters, noise and inducing inputs by maximising eq. (128).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        y : array-like of shape (n_samples,)
            Real targets.

        Returns
        -------
        self
            The fitted estimator.
        """
        self._check_pseudo_point_params()
        alpha = self._alpha_value()
        if not (isinstance(self.noise_variance, int | float) and self.noise_variance > 0):
            raise ValueError(f"noise_variance must be positive, got {self.noise_variance!r}")
        X = _check_X(X, estimator=type(self).__name__)
        y = check_target_vector(y, X.shape[0], type(self).__name__, "y")
        if not np.all(np.isfinite(y)):
            raise ValueError("Input y contains NaN or infinity.")
        if self.normalize_y:
            y_mean = float(y.mean())
            y_std = float(y.std()) or 1.0
        else:
            y_mean, y_std = 0.0, 1.0
        yn = (y - y_mean) / y_std
        kernel = self._initial_kernel(X.shape[1])
        Z = self._initial_inducing(X)
        check_inducing_kernel(kernel, Z)
        log_s2 = np.log(float(self.noise_variance))
        Z_fixed = None if self.optimize_inducing else Z
        blocks = [kernel_block(kernel), scalar_block(log_s2, NOISE_BOUNDS, "log noise_variance")]
        space = search_space(*blocks, *([free_block(Z, "Z")] if Z_fixed is None else []))
        params, n_evals, starts = space.x0, 1, []
        if self.optimizer is not None:

            def objective(p):
                value, grad = self._energy(p, X, yn, kernel, Z_fixed, alpha)
                return -value, -grad

            search = search_evidence(
                objective,
                space,
                self._what(),
                maxiter=int(self.optimizer_maxiter),
                quiet=(),
                **self._search_options(n_drawn=kernel.theta.size + 1),  # kernel, noise
            )
            params, n_evals, starts = search.x, search.n_evaluations, search.start_values
        n_theta = kernel.theta.size
        self.kernel_ = sklearn_face(kernel.with_theta(params[:n_theta]))
        self.noise_variance_ = float(np.exp(params[n_theta]))
        Zf = Z if Z_fixed is not None else params[n_theta + 1 :].reshape(-1, X.shape[1])
        value, _ = self._energy(params, X, yn, kernel, Z_fixed, alpha, eval_gradient=False)
        prior = pseudo_point_prior(self.kernel_, X, Zf, self.jitter)
        d = alpha * prior.h + self.noise_variance_
        self.posterior_ = low_rank_posterior(prior.A, 1.0 / d, yn / d)
        self._Lu = prior.Lu
        self.alpha_ = alpha
        self.inducing_points_ = Zf
        self.n_features_in_ = X.shape[1]
        self.X_train_ = X
        self.y_train_ = y
        self._y_mean, self._y_std = y_mean, y_std
        self.log_marginal_likelihood_ = float(value - X.shape[0] * np.log(y_std))
        self.log_marginal_likelihood_value_ = self.log_marginal_likelihood_  # scikit-learn's
        values = -np.asarray(starts or [-value], dtype=np.float64)
        self.restart_evidence_ = values - X.shape[0] * np.log(y_std)
        self.n_evaluations_ = n_evals
        return self

    @limits_blas
    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (original units).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        X = self._check_predict_X(X)
        mean, var = predict_latent_low_rank(
            self.kernel_, self.inducing_points_, self._Lu, self.posterior_, X
        )
        return mean * self._y_std + self._y_mean, var * self._y_std**2

    @limits_blas
    def _latent_mean_cov(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the latent ``f*`` at the rows of ``X`` (original units)."""
        X = self._check_predict_X(X)
        post = self.posterior_
        mean, cov = low_rank_mean_cov(
            self.kernel_, self.inducing_points_, self._Lu, post.L, post.mean_v, X
        )
        return mean * self._y_std + self._y_mean, cov * self._y_std**2

    def predict(self, X: Any, return_std: bool = False, return_cov: bool = False) -> Any:
        """Predictive mean of y, with scikit-learn's ``GaussianProcessRegressor`` signature.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
        return_std : bool, default False
            Also return the standard deviation of a new observation ``y* = f* + e`` (the latent
            variance plus the noise variance; the latent's alone: :meth:`predict_latent`).
        return_cov : bool, default False
            Also return the covariance of the new observations ``y*`` at the rows of ``X``
            jointly: the latent covariance (Bui et al., 2017, eq. (18)) plus the noise variance
            on the diagonal, so its diagonal is ``return_std``'s square. ``RuntimeError`` (a
            ``ValueError`` too) if both are requested, as scikit-learn's.

        Returns
        -------
        mean : ndarray of shape (n_rows,)
        std : ndarray of shape (n_rows,), with ``return_std``
        cov : ndarray of shape (n_rows, n_rows), with ``return_cov``
        """
        if return_std and return_cov:
            raise ReturnBothError
        noise = self.noise_variance_ * self._y_std**2 if (return_std or return_cov) else 0.0
        if return_cov:
            mean, cov = self._latent_mean_cov(X)
            cov[np.diag_indices_from(cov)] += noise
            return mean, cov
        mean, var = self.predict_latent(X)
        if not return_std:
            return mean
        return mean, np.sqrt(var + noise)

    def _observe(self, f: np.ndarray, rng: Any) -> np.ndarray:
        """``sample_y``'s noise: ``f`` plus Gaussian noise of variance ``noise_variance_``
        (in ``y``'s units)."""
        return f + np.sqrt(self.noise_variance_) * self._y_std * rng.standard_normal(f.shape)

    def log_predictive_density(self, X: Any, y: Any) -> np.ndarray:
        """``log N(y | mean*, var* + noise)`` per test point (original units).

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
        mean, std = self.predict(X, return_std=True)
        y = np.asarray(y, dtype=np.float64).ravel()
        if y.shape != mean.shape:
            raise ValueError(f"y has shape {y.shape}, expected {mean.shape}")
        z = (y - mean) / std
        return -0.5 * z * z - np.log(std) - 0.5 * _LOG_2PI

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Coefficient of determination R^2 of :meth:`predict` (scikit-learn's regressor score).

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
        pred = self.predict(X)
        return r2_score(np.asarray(y, dtype=np.float64).ravel(), pred, sample_weight)

    log_marginal_likelihood = log_marginal_likelihood_method(
        """Eq. (128) for the normalised targets at ``theta = [kernel log hyperparameters,
        log noise_variance]`` (default: the fitted ones), inducing inputs fixed at the fitted
        ones; with ``eval_gradient`` also its gradient in ``theta``. scikit-learn's signature.
        As scikit-learn, ``clone_kernel=False`` sets ``kernel_.theta`` to
        ``theta``'s kernel entries (the fitted posterior is kept)."""
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        if theta is None:
            theta = np.concatenate([self.kernel_.theta, [np.log(self.noise_variance_)]])
        theta = self._checked_theta(theta, clone_kernel, ("log noise_variance",))
        yn = (self.y_train_ - self._y_mean) / self._y_std
        value, grad = self._energy(
            theta,
            self.X_train_,
            yn,
            self.kernel_,
            self.inducing_points_,
            self.alpha_,
            eval_gradient=eval_gradient,
        )
        return (value, grad) if eval_gradient else value
