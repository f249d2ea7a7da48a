"""The small math namespace a user's log-likelihood is written over, in numpy.

A :class:`~qpinfer.CustomLikelihood` writes ``log p(y | f)`` once, as ``log_lik(f, y, m)``
over the functions of ``m``; the package evaluates it with :data:`NUMPY` (vectorised, float64)
and the table builder's reference with the same names in mpmath
(:mod:`qptables.reference.custom`), so one expression serves both. Every function here is
elementwise and stable where the naive formula is not (``softplus``, ``log1mexp``,
``log_ndtr``).

Holds: :class:`MathNamespace` and :data:`NUMPY`. May import: numpy, scipy.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from scipy.special import expit, gammaln, log_ndtr, ndtr

__all__ = ["NAMES", "NUMPY", "MathNamespace"]

_LOG2 = float(np.log(2.0))


def _log1mexp(x):
    """``log(1 - exp(-x))`` for ``x > 0`` without cancellation (Maechler, 2012)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x < _LOG2, np.log(-np.expm1(-x)), np.log1p(-np.exp(-x)))


def _where(cond, a, b):
    return np.where(cond, a, b)


#: the names every namespace defines (the mpmath one too)
NAMES = (
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "abs",
    "lgamma",
    "ndtr",
    "log_ndtr",
    "expit",
    "softplus",
    "log1mexp",
    "where",
    "pi",
)


class MathNamespace(SimpleNamespace):
    """Functions of one backend under the names of :data:`NAMES`: ``exp``, ``log``,
    ``log1p``, ``expm1``, ``sqrt``, ``abs``, ``lgamma`` (log of the gamma function), ``ndtr`` and
    ``log_ndtr`` (the standard normal CDF and its log), ``expit`` (the logistic function),
    ``softplus`` (``log(1 + e^x)``), ``log1mexp`` (``log(1 - e^-x)``, ``x > 0``),
    ``where(cond, a, b)`` and the constant ``pi``."""


#: numpy's (float64, elementwise)
NUMPY = MathNamespace(
    exp=np.exp,
    log=np.log,
    log1p=np.log1p,
    expm1=np.expm1,
    sqrt=np.sqrt,
    abs=np.abs,
    lgamma=gammaln,
    ndtr=ndtr,
    log_ndtr=log_ndtr,
    expit=expit,
    softplus=lambda x: np.logaddexp(0.0, x),
    log1mexp=_log1mexp,
    where=_where,
    pi=np.pi,
)
