"""GP Poisson regression with the square link (Zhang et al., 2020, Sec. 6.2, App. C.2, App. H).

Counts ``y_i ~ Poisson(f(x_i)^2)`` with a GP prior on ``f``; the posterior over ``f`` is
approximated by EP, QP (the ``poisson_square`` tilted moments and sigma* tables of
:mod:`qpinfer.likelihoods` / :mod:`qpinfer.tables`, exact sigma* outside a table), Gaussian VB or
the Laplace approximation (:mod:`qpinfer.estimators.base`).

Predictions: the count predictions of :mod:`qpinfer.estimators.count_predictions` (App. H's
negative binomial for the square link, the exact Poisson-lognormal mixture for the log link).
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
class GPPoissonRegressor(CountPredictionsMixin, RegressorTagsMixin, GPEstimatorBase):
    """GP Poisson regression with the square link, rate ``f(x)^2`` (Zhang et al., 2020, Sec. 6.2).

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
    """

    method: str = "qp"
    _: KW_ONLY
    table: Any = None
    link: str = "square"

    _POSITIVE_TARGETS = True  # counts

    @limits_blas
    def fit(self, X: Any, counts: Any) -> GPPoissonRegressor:
        """Fit the latent posterior (and, with ``optimizer="lbfgs"``, the kernel
        hyperparameters) to inputs ``X`` (n_samples, n_features) and counts (n_samples,)."""
        self._validate_params()
        X = self._check_fit_X(X)
        likelihood, y = poisson_likelihood(self.link, counts, X.shape[0], "GPPoissonRegressor")
        self._fit_latent(X, y, likelihood)
        return self
