"""Sparse GP models with a likelihood the user writes: :class:`SparseCustomLikelihoodGP`, M
pseudo-points by EP or QP (Bui, Yan and Turner, 2017; Zhang et al., 2020), O(N M^2) per
sweep. The fit is :class:`qpinfer.estimators.sparse_site_fit.SparseSiteEstimator`'s, the
predictions :class:`qpinfer.CustomLikelihoodGP`'s."""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY
from typing import Any

from qpinfer.checks import check_X
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.custom_likelihood import (
    CustomPredictionsMixin,
    check_custom_likelihood,
    checked_targets,
)
from qpinfer.estimators.joint_predictions import SparseSiteJointLatentMixin
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import log_marginal_likelihood_method
from qpinfer.estimators.sparse_site_fit import SparseSiteEstimator

__all__ = ["SparseCustomLikelihoodGP"]


@estimator
class SparseCustomLikelihoodGP(
    CustomPredictionsMixin, SparseSiteJointLatentMixin, SparseSiteEstimator
):
    """Sparse GP model with a likelihood the user writes (:class:`qpinfer.CustomLikelihood`),
    M pseudo-points by EP or QP.

    Pseudo-point EP (Bui, Yan and Turner, 2017, alpha = 1) or QP with the likelihood's table:
    QP projects the tilted marginal of ``f_n`` at its cavity ``N(mu_c, s_c + h_n)``, the
    one-dimensional tilt the table serves. The kernel hyperparameters and (optionally) the
    inducing inputs maximise sparse EP's energy; QP then runs at them. With ``M = N`` and
    ``Z = X`` this is :class:`qpinfer.CustomLikelihoodGP` (EP).

    Parameters
    ----------
    likelihood : CustomLikelihood
        The likelihood object (or its ``"package.module:ClassName(param=value)"`` name).
    n_inducing : int or None, default None
        Pseudo-points M, by keyword (the likelihood takes the first position); ``None``: as
        :class:`qpinfer.SparseGPClassifier`'s default.
    method : {"qp", "ep"}
        QP (Zhang et al., 2020, eq. (7)) or EP.
    table : None, "exact", path or table object
        The likelihood's table (``qptables build package.module:ClassName OUT --grid cells``),
        serving EP's moments and QP's sigma*; ``None``: an installed one, else exact.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Maximise sparse EP's energy over the kernel hyperparameters (and the inducing inputs),
        or keep them fixed (``None``).
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    %(inducing_points)s
    %(jitter)s

    Attributes
    ----------
    likelihood_, table_, kernel_, inducing_points_, pep_result_, log_marginal_likelihood_ :

    Examples
    --------
    >>> import numpy as np
    >>> from qpinfer import CustomLikelihood, SparseCustomLikelihoodGP
    >>> class Cloglog(CustomLikelihood):
    ...     y_domain = "binary"
    ...     def log_lik(self, f, y, m):
    ...         e = m.exp(f)
    ...         return m.where(y > 0, m.log1mexp(e), -e)
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(200, 1))
    >>> y = np.where(rng.uniform(size=200) < 1 - np.exp(-np.exp(X[:, 0])), 1.0, -1.0)
    >>> gp = SparseCustomLikelihoodGP(Cloglog(), n_inducing=10, method="ep", table="exact",
    ...                               optimizer=None, random_state=0).fit(X, y)
    >>> p = gp.predict_proba(np.array([[-2.0], [2.0]]))[:, 1]
    >>> bool(p[0] < 0.5 < p[1])
    True
    """

    likelihood: Any = dataclasses.field(default=None, kw_only=False)
    n_inducing: int | None = dataclasses.field(default=None, kw_only=True)
    _: KW_ONLY
    method: str = "qp"

    @limits_blas
    def fit(self, X: Any, y: Any) -> SparseCustomLikelihoodGP:
        """Fit sites, kernel hyperparameters and inducing inputs to inputs ``X`` and
        observations ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Observations in the likelihood's domain.

        Returns
        -------
        self
        """
        self._check_sparse_params()
        if self.method not in ("qp", "ep"):
            raise ValueError(f"method must be 'qp' or 'ep', got {self.method!r}")
        likelihood = check_custom_likelihood(self.likelihood)
        X = check_X(X, estimator=type(self).__name__)
        y = checked_targets(likelihood, y, X.shape[0])
        return self._fit_sites(X, y, likelihood)

    @limits_blas
    def predict_latent(self, X: Any):
        """Mean and variance of the latent ``f*`` (Bui et al., 2017, eq. (18)).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
        """
        return self._latent(X)

    log_marginal_likelihood = log_marginal_likelihood_method(
        """Sparse EP's energy at the kernel's log hyperparameters ``theta`` (default: the
        fitted ones), inducing inputs fixed at the fitted ones."""
    )
