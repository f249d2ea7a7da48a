"""Sparse GP Poisson regression with M pseudo-points by EP or QP (Bui, Yan and Turner, 2017;
Zhang et al., 2020): :class:`qpinfer.GPPoissonRegressor`'s model and predictions, O(N M^2) per
sweep. The fit is :class:`qpinfer.estimators.sparse_site_fit.SparseSiteEstimator`'s."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

from qpinfer.checks import check_X
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.count_predictions import CountPredictionsMixin, poisson_likelihood
from qpinfer.estimators.joint_predictions import SparseSiteJointLatentMixin
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import RegressorTagsMixin, log_marginal_likelihood_method
from qpinfer.estimators.sparse_site_fit import SparseSiteEstimator

__all__ = ["SparseGPPoissonRegressor"]


@estimator
class SparseGPPoissonRegressor(
    CountPredictionsMixin, SparseSiteJointLatentMixin, RegressorTagsMixin, SparseSiteEstimator
):
    """Sparse GP Poisson regression, rate ``f(x)^2`` or ``exp(f(x))``, with M pseudo-points.

    Pseudo-point EP (Bui, Yan and Turner, 2017, eqs. (20), (106)-(110), alpha = 1) or QP: the
    site updates of :class:`qpinfer.SparseGPClassifier` with the Poisson likelihood of
    :class:`qpinfer.GPPoissonRegressor` (EP's moments and QP's sigma* from the shipped tables).
    QP projects the tilted marginal of ``f_n`` at its cavity ``N(mu_c, s_c + h_n)`` (the smoothed
    likelihood is no Poisson likelihood;
    ``_ConditionalProjection`` of :mod:`qpinfer.inference.sparse.sites`). The kernel
    hyperparameters and (optionally) the inducing inputs maximise sparse EP's energy eq. (110)
    (L-BFGS-B with its analytic gradient, the sites converged at every evaluation); QP then runs
    at them. With ``M = N``, ``Z = X`` and no jitter this is :class:`qpinfer.GPPoissonRegressor`
    (EP, or QP with ``qp_objective="ep"``) exactly. The square link's sites start on the
    positive branch at every evaluation (never from another evaluation's sites), as the dense
    estimator's.

    Predictions as :class:`qpinfer.GPPoissonRegressor`'s: ``predict`` returns the predictive
    mean of the count (float64; ``return_std``: its standard deviation), ``predict_mode`` the most
    probable count (int64), ``predict_quantiles`` / ``predict_interval`` its quantiles,
    ``sample_y`` draws of counts; ``score`` is D^2 of the Poisson deviance.

    Parameters
    ----------
    %(n_inducing)s
    method : {"qp", "ep"}
        QP (Zhang et al., 2020, eq. (7)) or EP.
    link : {"square", "log"}
        As :class:`qpinfer.GPPoissonRegressor`'s (the log link fits counts up to 1e4).
    table : None, "exact", path or table object
        Where QP gets sigma* from, as :class:`qpinfer.GPPoissonRegressor`'s ``table``.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Maximise eq. (110) over the kernel hyperparameters (and the inducing inputs), or keep
        them fixed (``None``), as :class:`qpinfer.SparseGPClassifier`'s.
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    qp_objective : {"ep"}, default "ep"
        QP's hyperparameters and inducing inputs are sparse EP's (QP then runs at them); QP's
        own objectives (``"evidence"``, ``"loo"``) have total gradients for the probit only
        and are a ``ValueError`` here.
    %(inducing_points)s
    %(jitter)s
    optimizer_rtol, search_tol : float or None
        The search's stopping rule and site tolerance, as :class:`qpinfer.SparseGPClassifier`'s.
    scheduler : None, "local", address or distributed.Client, default None
        Where the site sweeps run, as :class:`qpinfer.SparseGPClassifier`'s (needs
        ``optimizer=None`` and ``schedule="parallel"``).

    Attributes
    ----------
    n_features_in_, X_train_, y_train_ (the counts), kernel_, inducing_points_ :
    likelihood_, table_, projection_ :
        The likelihood (with the table serving EP's moments), QP's sigma* table (``None`` for
        EP) and the site update.
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        Eq. (110) at the fitted values.
    restart_evidence_, pep_result_, n_iter_, n_evaluations_ :
        As :class:`qpinfer.SparseGPClassifier`'s.

    Examples
    --------
    >>> import numpy as np
    >>> from qpinfer import SparseGPPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, size=(300, 1))
    >>> y = rng.poisson(4 + 3 * np.sin(X[:, 0] / 1.5))
    >>> reg = SparseGPPoissonRegressor(15, random_state=0).fit(X, y)
    >>> mean = reg.predict_mean(np.array([[2.0], [7.0]]))
    >>> bool(mean[0] > mean[1])  # the rate is about 7 at x = 2 and 1.5 at x = 7
    True
    """

    _: KW_ONLY
    method: str = "qp"
    link: str = "square"

    _POSITIVE_TARGETS = True  # counts

    @limits_blas
    def fit(self, X: Any, counts: Any) -> SparseGPPoissonRegressor:
        """Fit sites, kernel hyperparameters and inducing inputs (eq. (110)) to inputs ``X``
        (n_samples, n_features) and counts (n_samples,).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        counts : array-like of shape (n_samples,)
            Non-negative integer counts.

        Returns
        -------
        self
            The fitted estimator.
        """
        self._check_sparse_params()
        if self.method not in ("qp", "ep"):
            raise ValueError(f"method must be 'qp' or 'ep', got {self.method!r}")
        name = type(self).__name__
        X = check_X(X, estimator=name)
        likelihood, y = poisson_likelihood(self.link, counts, X.shape[0], name)
        return self._fit_sites(X, y, likelihood)

    @limits_blas
    def predict_latent(self, X: Any):
        """Mean and variance of the latent ``f*`` (Bui et al., 2017, eq. (18)).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        return self._latent(X)

    log_marginal_likelihood = log_marginal_likelihood_method(
        """Eq. (110) at the kernel's log hyperparameters ``theta`` (default: the fitted ones),
        inducing inputs fixed at the fitted ones, as
        :meth:`qpinfer.SparseGPClassifier.log_marginal_likelihood`."""
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        return self._sparse_log_marginal_likelihood(theta, eval_gradient, clone_kernel)
