"""Summaries of the Poisson regressors' count predictive: its quantiles, and the D^2 score.

Quantiles. The ``q``-quantile of a count ``Y`` is the smallest ``y`` with ``P(Y <= y) >= q``;
so the equal-tailed interval ``[Q((1 - alpha)/2), Q((1 + alpha)/2)]`` holds at least ``alpha``
of the mass and leaves at most ``(1 - alpha)/2`` in each tail (``P(Y < lower) < (1 - alpha)/2``,
``P(Y > upper) <= (1 - alpha)/2``). The square link's predictive is App. H's negative binomial
(Zhang et al., 2020, eq. (120)-(122)) with the closed-form distribution function
``P(Y <= y) = 1 - I_{c/(1+c)}(y + 1, k)`` (regularised incomplete beta); the log link's is the
exact Poisson-lognormal mixture, whose probabilities are summed from zero.

D^2. scikit-learn's ``PoissonRegressor.score`` and ``sklearn.metrics.d2_tweedie_score(power=1)``:
the fraction of the Poisson deviance ``D(y, mu) = 2 sum w (y log(y / mu) - y + mu)`` that the
predicted means ``mu`` explain over the constant weighted mean ``ybar``:
``1 - D(y, mu) / D(y, ybar)``. The real-valued regressors' ``score``, scikit-learn's R^2, is the
same fraction for the squared-error deviance (:func:`r2_score`), so both share :func:`d2_score`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import betaincc, xlogy

__all__ = [
    "check_levels",
    "d2_score",
    "negative_binomial_cdf",
    "negative_binomial_quantile",
    "poisson_d2_score",
    "poisson_lognormal_quantiles",
    "r2_score",
]

#: Above this shape the negative binomial is its Poisson limit (as ``negative_binomial_log_pmf``)
_POISSON_LIMIT_SHAPE = 1e12
#: the fix-up steps after scipy's quantile (it was exact on 3000 random cases; a step moves by 1)
_FIXUP_STEPS = 64


def check_levels(q: Any) -> np.ndarray:
    """``q`` as a 1-d float64 array of levels in (0, 1); ``ValueError`` naming ``q`` otherwise."""
    try:
        levels = np.atleast_1d(np.asarray(q, dtype=np.float64))
    except (TypeError, ValueError):
        levels = np.array([np.nan])
    if levels.ndim != 1 or levels.size == 0 or not np.all((levels > 0) & (levels < 1)):
        raise ValueError(f"q must be a float or a 1-d array of floats in (0, 1), got {q!r}")
    return levels


def negative_binomial_cdf(y: np.ndarray, k: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``P(Y <= y)`` for ``Y ~ NB(k, c/(1+c))`` of eq. (122) (mean ``k c``), elementwise:
    ``1 - I_{c/(1+c)}(y + 1, k)``, which keeps its accuracy for small ``c`` (the form in
    ``p = 1/(1+c)`` rounds ``p`` to 1); the Poisson limit for ``k > 1e12``."""
    from scipy.stats import poisson

    y, k, c = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (y, k, c)))
    limit = k > _POISSON_LIMIT_SHAPE
    k_safe = np.where(limit, 1.0, k)
    nb = betaincc(np.maximum(y, 0.0) + 1.0, k_safe, c / (1.0 + c))
    out = np.where(limit, poisson.cdf(y, k * c), nb)
    return np.where(y < 0, 0.0, out)


def negative_binomial_quantile(q: np.ndarray, k: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The smallest count ``y`` with ``P(Y <= y) >= q`` (:func:`negative_binomial_cdf`),
    elementwise, as int64: scipy's quantile, then moved by single steps until that holds of
    this distribution function and fails at ``y - 1``."""
    from scipy.stats import nbinom, poisson

    q, k, c = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (q, k, c)))
    limit = k > _POISSON_LIMIT_SHAPE
    with np.errstate(invalid="ignore"):
        guess = np.where(
            limit,
            poisson.ppf(q, k * c),
            nbinom.ppf(q, np.where(limit, 1.0, k), 1.0 / (1.0 + c)),
        )
    y = np.maximum(np.nan_to_num(guess, nan=0.0, posinf=0.0), 0.0)
    for _ in range(_FIXUP_STEPS):
        low = negative_binomial_cdf(y, k, c) < q
        high = (y > 0) & (negative_binomial_cdf(y - 1.0, k, c) >= q)
        if not (low.any() or high.any()):
            break
        y = y + low - high
    return y.astype(np.int64)


def poisson_lognormal_quantiles(mean: np.ndarray, var: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quantiles ``q`` (1-d) of ``Y ~ Poisson(exp(f))``, ``f ~ N(mean, var)`` (1-d), as an int64
    array of shape ``(len(mean), len(q))``: the exact mixture's probabilities
    (:func:`qpinfer.likelihoods.poisson_log.predictive_log_pmf`) summed over ``0..K`` per row,
    ``K`` from 8 standard deviations of the count past its mean, doubled until the sum reaches
    ``max(q)``, capped at the log link's largest count (1e6), where a quantile beyond is
    returned as 1e6."""
    from qpinfer.likelihoods.poisson_log import MAX_COUNT, predictive_log_pmf

    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        m1 = np.exp(mean + 0.5 * var)
        sd = np.sqrt(m1 + m1 * m1 * np.expm1(var))
    first = np.minimum(np.nan_to_num(np.ceil(m1 + 8.0 * sd + 10.0), nan=MAX_COUNT), MAX_COUNT)
    out = np.empty((mean.shape[0], q.shape[0]), dtype=np.int64)
    for i in range(mean.shape[0]):
        top = int(first[i])
        while True:
            counts = np.arange(top + 1, dtype=np.float64)
            cdf = np.cumsum(np.exp(predictive_log_pmf(mean[i], var[i], counts)))
            if cdf[-1] >= q.max() or top >= MAX_COUNT:
                break
            top = int(min(2 * top, MAX_COUNT))
        out[i] = np.minimum(np.searchsorted(cdf, q, side="left"), top)
    return out


def d2_score(y: Any, pred: Any, sample_weight: Any, unit_deviance: Any) -> float:
    """``1 - D(y, pred) / D(y, ybar)``, ``D(y, m) = sum w unit_deviance(y, m)``, ``ybar`` the
    (weighted) mean of ``y``. Where the targets are constant (``D(y, ybar) = 0``), 1.0 for a
    perfect prediction and 0.0 otherwise (scikit-learn's ``r2_score`` convention; its D^2
    divides by zero there). ``ValueError`` for weights of the wrong shape, negative, not finite
    or all zero."""
    y = np.asarray(y, dtype=np.float64)
    pred = np.asarray(pred, dtype=np.float64)
    if sample_weight is None:
        w = np.ones_like(y)
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != y.shape:
            raise ValueError(
                f"sample_weight must have shape {y.shape} (one weight per row of X); got {w.shape}"
            )
        if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
            raise ValueError("sample_weight must be finite, non-negative and not all zero")
    ybar = np.sum(w * y) / np.sum(w)
    dev = float(np.sum(w * unit_deviance(y, pred)))
    dev_null = float(np.sum(w * unit_deviance(y, ybar)))
    if dev_null == 0:
        return 1.0 if dev == 0 else 0.0
    return 1.0 - dev / dev_null


def _poisson_unit_deviance(y: np.ndarray, mu: Any) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 2.0 * (xlogy(y, y) - xlogy(y, mu) - y + mu)


def poisson_d2_score(y: Any, mu: Any, sample_weight: Any = None) -> float:
    """D^2 of the Poisson deviance (the module docstring), as scikit-learn's
    ``PoissonRegressor.score``: :func:`d2_score` with ``2 (y log(y / mu) - y + mu)``."""
    return d2_score(y, mu, sample_weight, _poisson_unit_deviance)


def r2_score(y: Any, pred: Any, sample_weight: Any = None) -> float:
    """scikit-learn's coefficient of determination R^2: :func:`d2_score` with the squared
    error."""
    return d2_score(y, pred, sample_weight, lambda t, m: (t - m) ** 2)
