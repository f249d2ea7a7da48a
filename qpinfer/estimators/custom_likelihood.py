"""GP models with a likelihood the user writes (:class:`qpinfer.CustomLikelihood`): dense
(:class:`CustomLikelihoodGP`) by EP, QP, Laplace or VB.

The likelihood gives ``log p(y | f)`` and nothing else; EP's moments and QP's sigma* come from
a table built for it with ``qptables build package.module:ClassName`` (``table=``; the exact
kernel without one, warned once), the Laplace and VB baselines' derivatives from differences
(:mod:`qpinfer.likelihoods.custom`). Predictions: the latent predictive, ``log p(y* | x*)``
(the tilted normaliser at the predictive, ``log_predictive_density``) and its mean as ``score``;
for a binary likelihood class probabilities and labels.
"""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.estimators.base import GPEstimatorBase
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.joint_predictions import DenseJointLatentMixin
from qpinfer.estimators.params import estimator
from qpinfer.likelihoods.custom import CustomLikelihood

__all__ = ["CustomLikelihoodGP", "CustomPredictionsMixin", "check_custom_likelihood"]


def check_custom_likelihood(likelihood: Any) -> CustomLikelihood:
    """``likelihood`` if it is a :class:`qpinfer.CustomLikelihood` instance (or a name
    :func:`qpinfer.get_likelihood` imports as one), else ``ValueError`` naming it."""
    if isinstance(likelihood, str):
        from qpinfer.likelihoods.registry import get_likelihood

        likelihood = get_likelihood(likelihood)
    if not isinstance(likelihood, CustomLikelihood):
        raise ValueError(
            "likelihood must be a qpinfer.CustomLikelihood instance (a subclass defining "
            f"log_lik) or its 'package.module:ClassName' name; got {likelihood!r}"
        )
    return likelihood


def checked_targets(likelihood: CustomLikelihood, y: Any, n_rows: int) -> np.ndarray:
    """``y`` checked by the likelihood (its domain), one per row of ``X``."""
    y = likelihood.check_y(y)
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise ValueError(f"y must have shape ({n_rows},), one value per row of X; got {y.shape}")
    return y


class CustomPredictionsMixin:
    """The predictions of a model with a user likelihood, from ``predict_latent``."""

    def log_predictive_density(self, X: Any, y: Any) -> np.ndarray:
        """``log p(y* | x*) = log E[p(y* | f*)]`` under the latent predictive, per row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Observations in the likelihood's domain.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        mean, var = self.predict_latent(X)
        y = checked_targets(self.likelihood_, y, mean.shape[0])
        sd = np.sqrt(np.maximum(var, np.finfo(np.float64).tiny))
        return self.likelihood_.log_z(mean, sd, y)

    def score(self, X: Any, y: Any) -> float:
        """The mean log predictive density of ``y`` at ``X`` (higher is better; minus the
        held-out negative log likelihood per point)."""
        return float(np.mean(self.log_predictive_density(X, y)))

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[P(y* = -1), P(y* = +1)]`` per row (a binary likelihood only)."""
        self._need_binary("predict_proba")
        mean, var = self.predict_latent(X)
        return self.likelihood_.class_probabilities(mean, var)

    def predict(self, X: Any) -> np.ndarray:
        """A binary likelihood's most probable label (-1 or +1) per row; for the others the
        latent predictive mean (``predict_latent`` gives its variance too)."""
        if self.likelihood_.y_domain == "binary":
            p = self.predict_proba(X)
            return np.where(p[:, 1] > p[:, 0], 1.0, -1.0)
        return self.predict_latent(X)[0]

    def _need_binary(self, what: str) -> None:
        if self.likelihood_.y_domain != "binary":
            raise ValueError(f"{what} needs a binary likelihood; got {self.likelihood_!r}")


@estimator
class CustomLikelihoodGP(CustomPredictionsMixin, DenseJointLatentMixin, GPEstimatorBase):
    """Gaussian process model with a likelihood the user writes
    (:class:`qpinfer.CustomLikelihood`), by QP, EP, VB or the Laplace approximation.

    Parameters
    ----------
    likelihood : CustomLikelihood
        The likelihood object (or its ``"package.module:ClassName(param=value)"`` name).
    method : {"qp", "ep", "vb", "laplace"}
        Quantile propagation (Zhang et al., 2020), EP, Gaussian VB (Opper and Archambeau, 2009)
        or the Laplace approximation (the last two with derivatives by differences).
    table : None, "exact", path or table object
        The likelihood's table (``qptables build package.module:ClassName OUT --grid cells``):
        EP's moments and QP's sigma* come from it, cavities outside it from the exact kernel.
        ``None``: an installed table of the likelihood, else exact (warned once);
        ``"exact"``: always the exact kernel.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Fit the kernel hyperparameters (EP, QP: EP's evidence; Laplace and VB their own) or
        keep them fixed (``None``).
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    qp_objective : {"ep", "evidence", "loo"}, default "ep"
        QP's hyperparameters: EP's evidence searched first, then QP's own evidence polished
        from there (``"ep"``), or QP's own objectives from the start.

    Attributes
    ----------
    likelihood_, table_, kernel_, X_train_, y_train_, result_ :
        The likelihood (with its table serving EP's moments), QP's table, the fitted kernel,
        training data and the inference result.
    log_marginal_likelihood_ : float
    n_iter_, n_evaluations_ :

    Examples
    --------
    A Bernoulli likelihood with the complementary log-log link, on labels drawn from it:

    >>> import numpy as np
    >>> from qpinfer import CustomLikelihood, CustomLikelihoodGP
    >>> class Cloglog(CustomLikelihood):
    ...     y_domain = "binary"
    ...     def log_lik(self, f, y, m):
    ...         e = m.exp(f)
    ...         return m.where(y > 0, m.log1mexp(e), -e)
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(120, 1))
    >>> p = 1 - np.exp(-np.exp(np.sin(2 * X[:, 0])))
    >>> y = np.where(rng.uniform(size=120) < p, 1.0, -1.0)
    >>> gp = CustomLikelihoodGP(Cloglog(), method="qp", table="exact").fit(X, y)
    >>> proba = gp.predict_proba(np.array([[-0.8], [0.8]]))[:, 1]  # P(+1 | x)
    >>> bool(proba[0] < 0.5 < proba[1])
    True
    """

    likelihood: Any = None
    _: KW_ONLY
    method: str = "qp"
    table: Any = None
    qp_objective: str = "ep"

    @limits_blas
    def fit(self, X: Any, y: Any) -> CustomLikelihoodGP:
        """Fit the latent posterior (and, with ``optimizer="lbfgs"``, the kernel
        hyperparameters) to inputs ``X`` and observations ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Observations in the likelihood's domain (labels -1/+1, counts or reals).

        Returns
        -------
        self
        """
        self._validate_params()
        likelihood = check_custom_likelihood(self.likelihood)
        X = self._check_fit_X(X)
        y = checked_targets(likelihood, y, X.shape[0])
        self._fit_latent(X, y, likelihood)
        return self
