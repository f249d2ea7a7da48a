# Over 400 lines: the count predictions (mean, mode, quantiles, intervals, log probabilities, D^2, draws) of three estimators, half of it their numpydoc sections.
"""What every Poisson-regression estimator (dense, sparse, minibatch) shares: the count checks,
the likelihood of a ``link``, and the count predictions of a Gaussian latent predictive, as
scikit-learn users expect them: ``predict`` is the predictive mean of the count (float64, as
``sklearn.linear_model.PoissonRegressor``'s), ``score`` the D^2 of the Poisson deviance (as
``PoissonRegressor.score``); the mode, quantiles and intervals, log probabilities and draws have
methods of their own (``predict_mode``, ``predict_quantiles``, ``predict_interval``, ``log_pmf``,
``log_predictive_density``, ``sample_y``; quantiles and D^2:
:mod:`qpinfer.estimators.count_summaries`).

The square link's predictive (Zhang et al., 2020, App. H). With the latent predictive ``f* ~
N(mu*, sigma*^2)``, the rate ``g* = f*^2`` is approximated by the gamma distribution with the
same mean ``mu*^2 + sigma*^2`` and variance ``2 sigma*^2 (2 mu*^2 + sigma*^2)``, eq. (119):

    k* = (mu*^2 + sigma*^2)^2 / (2 sigma*^2 (2 mu*^2 + sigma*^2)),
    c* = 2 sigma*^2 (2 mu*^2 + sigma*^2) / (mu*^2 + sigma*^2)                 (shape, scale),

and the count's predictive is its Poisson mixture, the negative binomial of eq. (120)-(122):

    p(y*) = c*^y* (1 + c*)^(-k* - y*) Gamma(k* + y*) / (y*! Gamma(k*)) = NB(y* | k*, c*/(1+c*)),

with mean ``k* c* = mu*^2 + sigma*^2`` and mode ``floor(c* (k* - 1))`` if ``k* > 1`` else 0.
:meth:`CountPredictionsMixin.log_pmf` evaluates it (``exact=True`` instead gives the exact
Poisson mixture over the Gaussian ``f*``, which is the tilted normaliser of App. C.2,
``PoissonSquare.log_z(mu*, sigma*, y*)``; the gamma step is the paper's approximation). The log
link's predictive is the exact Poisson-lognormal mixture
(:func:`qpinfer.likelihoods.poisson_log.predictive_log_pmf`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import gammaln, poch, xlogy

from qpinfer.checks import check_target_vector, check_X
from qpinfer.estimators.count_summaries import (
    check_levels,
    negative_binomial_quantile,
    poisson_d2_score,
    poisson_lognormal_quantiles,
)
from qpinfer.estimators.joint_predictions import SampleYMixin
from qpinfer.likelihoods.poisson_square import PoissonSquare
from qpinfer.likelihoods.poisson_square.moments import MAX_COUNT, MAX_COUNT_TEXT

__all__ = [
    "LOG_LINK_MAX_COUNT",
    "CountPredictionsMixin",
    "check_counts",
    "negative_binomial_log_pmf",
    "negative_binomial_mode",
    "negative_binomial_parameters",
    "poisson_likelihood",
    "predictive_count_std",
]

#: The largest count the log link fits (the ``poisson_log`` likelihood's moments hold to its own
#: ``MAX_COUNT``, 1e6). The site loop stops when the RMS change of the site parameters is below
#: ``tol`` (absolute), and the site of a count y has precision ~y and ``nu~`` ~y log y: at
#: y = 1e5 the sweeps' jitter sits near tol = 1e-6 (EP at the default kernel diverged; at signal
#: variance 50 it took 963 sweeps) and a fit of 30 rows took 13-409 s; at y = 1e6 the change
#: never fell below 7e-6. One count of 1e4 among small ones: 1-2 s.
LOG_LINK_MAX_COUNT = 1e4
LOG_LINK_MAX_COUNT_TEXT = "1e4"

#: Above this shape the negative binomial is evaluated as its Poisson limit (``sigma* -> 0``).
_POISSON_LIMIT_SHAPE = 1e12
_MIN_VAR = 1e-100
#: the largest rate ``sample_y`` draws from (numpy's Poisson sampler refuses rates near 2^63)
_MAX_SAMPLED_RATE = 1e18


def negative_binomial_parameters(
    mean: np.ndarray, var: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Shape ``k*`` and scale ``c*`` of eq. (119) from the latent mean and variance.

    ``var`` is floored at ``1e-100`` (``var -> 0`` is the Poisson limit ``k* -> inf``, rate
    ``mean^2``, which :func:`negative_binomial_log_pmf` evaluates as such for ``k* > 1e12``).
    """
    m2 = np.asarray(mean, dtype=np.float64) ** 2
    v = np.maximum(np.asarray(var, dtype=np.float64), _MIN_VAR)
    second = m2 + v  # E[f^2]
    spread = 2.0 * v * (2.0 * m2 + v)  # Var[f^2]
    return second * second / spread, spread / second


def _log_rising(k: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log Gamma(k + y) / Gamma(k) (Pochhammer), without cancellation for large k."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        out = np.log(poch(k, y))
    bad = ~np.isfinite(out)
    if np.any(bad):
        kb, yb = np.broadcast_arrays(k, y)
        out = np.where(bad, gammaln(kb + yb) - gammaln(kb), out)
    return out


def negative_binomial_log_pmf(y: np.ndarray, k: np.ndarray, c: np.ndarray) -> np.ndarray:
    """log NB(y | k, c/(1+c)) of eq. (122), elementwise (broadcasting); Poisson limit for
    ``k > 1e12`` (rate ``k c``)."""
    y = np.asarray(y, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    poisson = k > _POISSON_LIMIT_SHAPE
    k_safe = np.where(poisson, 1.0, k)
    c_safe = np.where(poisson, 1.0, c)
    nb = (
        xlogy(y, c_safe)
        - (k_safe + y) * np.log1p(c_safe)
        + _log_rising(k_safe, y)
        - gammaln(y + 1.0)
    )
    rate = np.where(poisson, k * c, 0.0)
    pois = xlogy(y, rate) - rate - gammaln(y + 1.0)
    return np.where(poisson, pois, nb)


def negative_binomial_mode(k: np.ndarray, c: np.ndarray) -> np.ndarray:
    """App. H: ``floor(c (k - 1))`` if ``k > 1`` else 0, as int64."""
    k = np.asarray(k, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    return np.where(k > 1.0, np.floor(c * (k - 1.0)), 0.0).astype(np.int64)


def predictive_count_std(mean: np.ndarray, var: np.ndarray, link: str = "square") -> np.ndarray:
    """Standard deviation of a count ``y* ~ Poisson(g*)`` whose rate ``g*`` is ``f*^2`` (square
    link) or ``exp(f*)`` (log link) with ``f* ~ N(mean, var)``: by the law of total variance
    ``Var[y*] = E[g*] + Var[g*]``, with, in closed form,

    * square: ``E[g*] = m^2 + v``, ``Var[g*] = 2 v (2 m^2 + v)`` (the negative binomial of
      eq. (120)-(122) has the same variance, ``k* c* (1 + c*)``);
    * log: ``E[g*] = exp(m + v/2)``, ``Var[g*] = (exp(v) - 1) exp(2 m + v)`` (lognormal).
    """
    m = np.asarray(mean, dtype=np.float64)
    v = np.maximum(np.asarray(var, dtype=np.float64), 0.0)
    if link == "log":
        rate = np.exp(m + 0.5 * v)
        return np.sqrt(rate + np.expm1(v) * rate * rate)
    if link != "square":
        raise ValueError(f"link must be 'square' or 'log', got {link!r}")
    m2 = m * m
    return np.sqrt(m2 + v + 2.0 * v * (2.0 * m2 + v))


def check_counts(
    counts: Any,
    n_samples: int | None,
    name: str = "counts",
    limit: tuple[float, str, str] = (
        MAX_COUNT,
        MAX_COUNT_TEXT,
        "the largest count the poisson_square likelihood supports",
    ),
    estimator: str = "GPPoissonRegressor",
) -> np.ndarray:
    """Counts as float64: finite, non-negative integers up to ``limit`` (``(largest count, as
    printed, why)``; default the square link's ``MAX_COUNT``, 1e8, see
    :mod:`qpinfer.likelihoods.poisson_square.moments`); ``ValueError`` naming the problem."""
    try:
        values = check_target_vector(counts, n_samples, estimator, name)
    except ValueError as exc:
        if "must be numeric" in str(exc):
            raise ValueError(f"{exc} (non-negative integer counts)") from None
        raise
    flat = values.ravel()
    bad = ~np.isfinite(flat)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} contains NaN or infinity (first at index {i}: {flat[i]!r})")
    bad = flat < 0
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must be non-negative; got {flat[i]!r} at index {i}")
    bad = flat != np.floor(flat)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must be integers (counts); got {flat[i]!r} at index {i}")
    top, top_text, why = limit
    bad = flat > top
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must be at most {top_text} ({why}); got {flat[i]!r} at index {i}")
    return values


def poisson_likelihood(link: Any, counts: Any, n_samples: int, estimator: str) -> tuple:
    """``(likelihood, counts)``: the Poisson likelihood of ``link`` (``"square"``:
    :class:`~qpinfer.PoissonSquare`; ``"log"``:
    :class:`~qpinfer.likelihoods.poisson_log.PoissonLog`) and the training counts checked for it
    (the log link takes counts up to :data:`LOG_LINK_MAX_COUNT`); ``ValueError`` naming
    ``link`` or ``counts``."""
    if not (isinstance(link, str) and link in ("square", "log")):
        raise ValueError(f"link must be 'square' or 'log', got {link!r}")
    if link == "log":  # rate exp(f), qpinfer.likelihoods.poisson_log
        from qpinfer.likelihoods.poisson_log import PoissonLog

        why = (
            "the largest count fits with link='log', the poisson_log likelihood, take: its "
            "site loop stalls on larger ones"
        )
        limit = (LOG_LINK_MAX_COUNT, LOG_LINK_MAX_COUNT_TEXT, why)
        return PoissonLog(), check_counts(counts, n_samples, limit=limit, estimator=estimator)
    return PoissonSquare(), check_counts(counts, n_samples, estimator=estimator)


class CountPredictionsMixin(SampleYMixin):
    """The count predictions of a fitted Poisson regressor from its latent predictive
    (``predict_latent``; jointly, ``_latent_mean_cov``) and its likelihood (``likelihood_``):
    ``predict`` (the mean), ``predict_mode``, ``predict_quantiles``, ``predict_interval``,
    ``log_pmf``, ``sample_y`` and ``score`` (D^2 of the Poisson deviance)."""

    def _log_link(self) -> bool:
        return getattr(self.likelihood_, "name", "") == "poisson_log"

    def _count_limit(self) -> tuple[float, str, str]:
        """The counts predictions take: up to the fitted likelihood's largest count."""
        if getattr(self, "likelihood_", None) is not None and self._log_link():
            from qpinfer.likelihoods.poisson_log import MAX_COUNT as LOG_MAX

            text = f"{LOG_MAX:.0e}".replace("e+0", "e")
            return LOG_MAX, text, "the largest count the poisson_log likelihood supports"
        return MAX_COUNT, MAX_COUNT_TEXT, "the largest count the poisson_square likelihood supports"

    # -- predictions (App. H) ----------------------------------------------------------------
    def predict_negative_binomial(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Shape ``k*`` and scale ``c*`` of the predictive rate's gamma (eq. (119)); square link
        only.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        shape, scale : ndarray of shape (n_samples,)
        """
        mean, var = self.predict_latent(X)
        if self._log_link():
            raise ValueError("predict_negative_binomial is for link='square' (App. H) only")
        return negative_binomial_parameters(mean, var)

    def predict(self, X: Any, return_std: bool = False) -> Any:
        """The predictive mean of the count, float64 (as scikit-learn's ``PoissonRegressor``):
        ``E[f*^2] = mu*^2 + sigma*^2`` (= ``k* c*``, the negative binomial's mean too) for the
        square link, ``E[exp(f*)] = exp(mu* + sigma*^2 / 2)`` for the log link.

        With ``return_std``, also the count's predictive standard deviation about that mean,
        :func:`~qpinfer.estimators.count_predictions.predictive_count_std`: the exact one of
        the Poisson mixture over the Gaussian latent predictive (the square link's negative
        binomial has the same, its gamma matching the rate's first two moments). The most
        probable count: :meth:`predict_mode`; the latent's moments: ``predict_latent``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.
        return_std : bool, default False
            Also return the count's predictive standard deviation.

        Returns
        -------
        mean : ndarray of float64, shape (n_samples,)
        std : ndarray of shape (n_samples,)
            Only with ``return_std``.
        """
        self._check_is_fitted()
        mean, var = self.predict_latent(X)
        rate = self._rate_mean(mean, var)
        if not return_std:
            return rate
        return rate, predictive_count_std(mean, var, "log" if self._log_link() else "square")

    def _rate_mean(self, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
        if self._log_link():
            return np.exp(mean + 0.5 * var)
        return mean * mean + var

    def predict_mean(self, X: Any) -> np.ndarray:
        """The predictive mean of the count: :meth:`predict`'s.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        ndarray of float64, shape (n_samples,)
        """
        return self.predict(X)

    def predict_mode(self, X: Any) -> np.ndarray:
        """The most probable count, int64 (App. H): ``floor(c* (k* - 1))`` if ``k* > 1`` else 0
        for the square link's negative binomial; with ``link="log"`` the mode of the exact
        Poisson-lognormal predictive (searched over the counts, a few ms a row).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        ndarray of int64, shape (n_samples,)
        """
        self._check_is_fitted()
        mean, var = self.predict_latent(X)
        if self._log_link():
            from qpinfer.likelihoods.poisson_log import predictive_mode

            return predictive_mode(mean, var).astype(np.int64)
        return negative_binomial_mode(*negative_binomial_parameters(mean, var))

    def predict_quantiles(self, X: Any, q: Any) -> np.ndarray:
        """Quantiles of the predictive count: for each ``q_j``, the smallest count ``y`` with
        ``P(y* <= y) >= q_j``, an int64 array of shape ``(n_rows, len(q))``.

        The predictive is the one :meth:`log_pmf` evaluates: App. H's negative binomial for the
        square link (its distribution function in closed form), the exact Poisson-lognormal
        mixture for the log link (probabilities summed from 0, a few ms a row).

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input points.
        q : float or array-like of floats in (0, 1)
            The levels.

        Returns
        -------
        ndarray of int64, shape (n_rows, len(q))
        """
        levels = check_levels(q)
        self._check_is_fitted()
        mean, var = self.predict_latent(X)
        if self._log_link():
            return poisson_lognormal_quantiles(mean, var, levels)
        k, c = negative_binomial_parameters(mean, var)
        return negative_binomial_quantile(levels[None, :], k[:, None], c[:, None])

    def predict_interval(self, X: Any, alpha: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Equal-tailed predictive interval of the count: ``(lower, upper)``, int64, the
        ``(1 - alpha)/2`` and ``(1 + alpha)/2`` quantiles (:meth:`predict_quantiles`). It holds
        at least ``alpha`` of the predictive mass, and each tail beyond it at most
        ``(1 - alpha)/2`` (counts are discrete, so usually more than ``alpha``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.
        alpha : float in (0, 1), default 0.9
            The interval's probability.

        Returns
        -------
        lower, upper : ndarray of int64, shape (n_samples,)
        """
        if not (isinstance(alpha, int | float | np.floating) and 0 < alpha < 1):
            raise ValueError(f"alpha must be a float in (0, 1), got {alpha!r}")
        bounds = self.predict_quantiles(X, [(1.0 - alpha) / 2.0, (1.0 + alpha) / 2.0])
        return bounds[:, 0], bounds[:, 1]

    def _observe(self, f: np.ndarray, rng: Any) -> np.ndarray:
        """``sample_y``'s counts: ``Poisson(f^2)`` or ``Poisson(exp(f))`` per latent draw."""
        with np.errstate(over="ignore"):
            rate = np.exp(f) if self._log_link() else f * f
        top = np.max(rate) if rate.size else 0.0
        if not top <= _MAX_SAMPLED_RATE:
            raise ValueError(
                f"sample_y: a latent draw gives the Poisson rate {top:.3g}, beyond the largest "
                f"numpy's Poisson sampler takes ({_MAX_SAMPLED_RATE:.0e})"
            )
        return rng.poisson(rate).astype(np.int64)

    def log_pmf(self, X: Any, counts: Any, *, exact: bool = False) -> np.ndarray:
        """log p(counts | X): the negative binomial predictive of eq. (120)-(122).

        ``counts`` has shape ``(n_samples,)`` (one count per row of ``X``) or
        ``(n_samples, m)`` (m counts per row, e.g. a grid ``0..M`` to tabulate the pmf).
        ``exact=True`` gives the exact Poisson mixture over the Gaussian latent predictive,
        ``log E[Poisson(y | f*^2)]``, ``f* ~ N(mu*, sigma*^2)`` (App. C.2's normaliser) instead of
        the paper's gamma approximation of ``f*^2``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.
        counts : array-like of shape (n_samples,) or (n_samples, m)
            Non-negative integer counts.
        exact : bool, default False
            The exact Poisson mixture instead of the negative binomial.

        Returns
        -------
        ndarray of the shape of ``counts``
        """
        mean, var = self.predict_latent(X)
        n = mean.shape[0]
        y = check_counts(counts, None, limit=self._count_limit(), estimator=type(self).__name__)
        if y.ndim not in (1, 2) or y.shape[0] != n:
            raise ValueError(
                f"counts must have shape ({n},) or ({n}, m) for X with {n} samples; got {y.shape}"
            )
        if y.ndim == 2:
            mean, var = mean[:, None], var[:, None]
        if self._log_link():  # the exact mixture: there is no gamma step for the log link
            from qpinfer.likelihoods.poisson_log import predictive_log_pmf

            return predictive_log_pmf(mean, var, y)
        if exact:
            sd = np.sqrt(np.maximum(var, np.finfo(np.float64).tiny))
            return PoissonSquare().log_z(*np.broadcast_arrays(mean, sd, y))
        k, c = negative_binomial_parameters(mean, var)
        return negative_binomial_log_pmf(y, k, c)

    def log_predictive_density(self, X: Any, counts: Any) -> np.ndarray:
        """log p(y* | data) of one count per row of ``X``: :meth:`log_pmf` (the paper's NTLL is
        minus its mean; earlier versions' ``score`` returned the mean, ``score`` is now
        scikit-learn's D^2).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.
        counts : array-like of shape (n_samples,)
            Observed counts (non-negative integers).

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        self._check_is_fitted()
        X = check_X(X, estimator=type(self).__name__)
        y = check_counts(
            counts, X.shape[0], limit=self._count_limit(), estimator=type(self).__name__
        )
        return self.log_pmf(X, y)

    def score(self, X: Any, counts: Any, sample_weight: Any = None) -> float:
        """D^2, the fraction of Poisson deviance explained by :meth:`predict` (the predictive
        mean), as scikit-learn's ``PoissonRegressor.score`` (and
        ``sklearn.metrics.d2_tweedie_score(power=1)``): ``1 - D(y, mu) / D(y, ybar)``,
        ``D(y, mu) = 2 sum w (y log(y / mu) - y + mu)``, ``ybar`` the (weighted) mean count.
        1 is a perfect prediction, 0 the constant mean's; the mean log predictive probability
        is ``log_predictive_density(X, counts).mean()``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.
        counts : array-like of shape (n_samples,)
            Observed counts (non-negative integers).
        sample_weight : array-like of shape (n_samples,) or None, default None
            Weights of the rows in the deviances.

        Returns
        -------
        float
        """
        self._check_is_fitted()
        X = check_X(X, estimator=type(self).__name__)
        y = check_counts(
            counts, X.shape[0], limit=self._count_limit(), estimator=type(self).__name__
        )
        return poisson_d2_score(y, self.predict(X), sample_weight)
