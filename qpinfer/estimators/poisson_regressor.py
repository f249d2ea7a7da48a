"""GP Poisson regression with the square link (Zhang et al., 2020, Sec. 6.2, App. C.2, App. H) or
the log link.

Counts ``y_i ~ Poisson(f(x_i)^2)`` (or ``Poisson(exp(f(x_i)))``) with a GP prior on ``f``; the posterior over ``f`` is
approximated by EP, QP (the ``poisson_square`` tilted moments and sigma* tables of
:mod:`qpinfer.likelihoods` / :mod:`qpinfer.tables`, exact sigma* outside a table), Gaussian VB or
the Laplace approximation (:mod:`qpinfer.estimators.base`).

Predictions: the count predictions of :mod:`qpinfer.estimators.count_predictions` (``predict``
is the predictive mean; App. H's negative binomial for the square link, the exact
Poisson-lognormal mixture for the log link).
"""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

from qpinfer.estimators.base import GPEstimatorBase
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.count_predictions import (  # re-exported (were defined here)
    LOG_LINK_MAX_COUNT,
    CountPredictionsMixin,
    negative_binomial_log_pmf,
    negative_binomial_mode,
    negative_binomial_parameters,
    poisson_likelihood,
    predictive_count_std,
)
from qpinfer.estimators.joint_predictions import DenseJointLatentMixin
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import RegressorTagsMixin

__all__ = [
    "LOG_LINK_MAX_COUNT",
    "GPPoissonRegressor",
    "negative_binomial_log_pmf",
    "negative_binomial_mode",
    "negative_binomial_parameters",
    "predictive_count_std",
]


@estimator
class GPPoissonRegressor(
    CountPredictionsMixin, DenseJointLatentMixin, RegressorTagsMixin, GPEstimatorBase
):
    """GP Poisson regression, rate ``f(x)^2`` (the square link, Zhang et al., 2020, Sec. 6.2) or
    ``exp(f(x))`` (the log link).

    Predictions (:class:`~qpinfer.estimators.count_predictions.CountPredictionsMixin`):
    ``predict`` returns the predictive mean of the count (float64, as scikit-learn's
    ``PoissonRegressor``; with ``return_std`` also its standard deviation), ``predict_mode`` the
    most probable count (int64), ``predict_quantiles`` and ``predict_interval`` quantiles and an
    equal-tailed interval of the count, ``log_pmf`` / ``log_predictive_density`` its log
    probabilities, ``sample_y`` draws of counts (a joint latent draw, then Poisson); ``score`` is
    D^2 of the Poisson deviance, as ``PoissonRegressor.score``. The count's predictive is App.
    H's negative binomial for the square link, the exact Poisson-lognormal mixture for the log
    link.

    Parameters
    ----------
    method : {"qp", "ep", "vb", "laplace"}
        Quantile propagation (eq. (7)), EP (eq. (5)), Gaussian variational Bayes (Opper &
        Archambeau; the paper's baseline) or the Laplace approximation (around the mode of the
        positive branch ``f > 0``, see :mod:`qpinfer.inference.laplace`).
    table : None, "exact", path or table object
        Where QP gets sigma* from (a ``poisson_square`` table). ``None``: the cell table shipped
        inside qpinfer for the likelihood (:mod:`qpinfer.tables.shipped`), or the installed one
        (:func:`qpinfer.tables.installed_table_path`) if it is at least as good in coverage and
        verified error (:mod:`qpinfer.tables.choice`), else exact computation (warned once); ``"exact"``: always exact; a path: :func:`qpinfer.open_table` of
        it. Points outside a table are computed exactly. Ignored by the other methods.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Fit the hyperparameters (EP/QP: eq. (4); Laplace: R&W eq. (3.32); VB: the ELBO at its
        optimal variational parameters) with L-BFGS-B, or keep them fixed (``None``).
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    %(qp_objective)s
    link : {"square", "log"}
        The rate: ``f^2`` (the paper's square link, App. C.2; counts up to 1e8) or ``exp(f)``
        (:mod:`qpinfer.likelihoods.poisson_log`: log-concave, so every method starts from zero
        sites and the predictive is the exact Poisson-lognormal mixture). The log link fits
        counts up to 1e4 (``LOG_LINK_MAX_COUNT``; a larger one is a ``ValueError`` naming it):
        one count of 1e5 among small ones made a fit of 30 rows take 13-409 s, the site of
        such a count (precision ~1e5) changing by about the loop's absolute ``tol`` from
        sweep to sweep, one of 1e4 takes 1-2 s. Its predictions take counts up to 1e6.

    Attributes
    ----------
    n_features_in_, X_train_, y_train_ (the counts), kernel_ :
        Training inputs, counts and the fitted kernel.
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        EP/QP: eq. (4) at the fitted sites; Laplace: R&W eq. (3.32); VB: the ELBO (the second
        name is scikit-learn's).
    restart_evidence_ : ndarray (n_restarts_optimizer + 1,)
        The evidence at each start's optimum, the initial hyperparameters' first (QP: EP's
        evidence, see ``n_restarts_optimizer``); ``-inf`` where inference failed throughout.
    result_ :
        The inference result (:class:`~qpinfer.inference.ep.EPResult`,
        :class:`~qpinfer.inference.laplace.LaplaceResult` or
        :class:`~qpinfer.inference.vb.VBResult`); for EP/QP also ``ep_result_``.
    n_iter_, n_evaluations_, n_inner_iter_total_, table_, stage_seconds_ :
        Inner iterations of the final fit, evidence evaluations while fitting, inner iterations
        of all of them, QP's table, and the wall seconds of the fit's stages (QP's search:
        ``{"ep": .., "qp": ..}``).

    See Also
    --------
    sklearn.linear_model.PoissonRegressor : scikit-learn's (linear) Poisson regression.
    SparseGPPoissonRegressor : the same model with M pseudo-points, for larger data.

    Examples
    --------
    Counts drawn from a smooth rate:

    >>> import numpy as np
    >>> from qpinfer import GPPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, size=(100, 1))
    >>> y = rng.poisson(4 + 3 * np.sin(X[:, 0] / 1.5))
    >>> reg = GPPoissonRegressor(method="qp").fit(X, y)
    >>> X_new = np.array([[2.0], [7.0]])
    >>> mean = reg.predict(X_new)  # the predictive mean of the count, float64
    >>> bool(mean[0] > mean[1])  # the rate is about 7 at x = 2 and 1.5 at x = 7
    True
    >>> reg.predict_mode(X_new).dtype.kind  # the most probable count: an integer
    'i'
    >>> low, high = reg.predict_interval(X_new, alpha=0.9)  # 90% predictive intervals
    >>> bool(np.all(low <= high))
    True
    >>> reg.log_pmf(X_new, [6, 2]).shape  # log p(count | x) under the predictive
    (2,)
    """

    method: str = "qp"
    _: KW_ONLY
    table: Any = None
    link: str = "square"

    _POSITIVE_TARGETS = True  # counts

    @limits_blas
    def fit(self, X: Any, counts: Any) -> GPPoissonRegressor:
        """Fit the latent posterior (and, with ``optimizer="lbfgs"``, the kernel
        hyperparameters) to inputs ``X`` (n_samples, n_features) and counts (n_samples,).

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
        self._validate_params()
        X = self._check_fit_X(X)
        likelihood, y = poisson_likelihood(self.link, counts, X.shape[0], "GPPoissonRegressor")
        self._fit_latent(X, y, likelihood)
        return self
