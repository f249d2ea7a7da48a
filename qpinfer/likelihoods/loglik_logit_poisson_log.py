"""log p(y | f), its f-derivatives and its Gaussian expectations for the ``logit`` and
``poisson_log`` likelihoods: what the Laplace (R&W Alg. 3.1, 5.1) and VB (Opper &
Archambeau) baselines of :mod:`qpinfer.likelihoods.loglik` need.

* logit, ``log sigma(y f)``: derivatives ``y sigma(-y f)``, ``-p (1 - p)`` and
  ``-p (1 - p) (1 - 2 p)`` with ``p = sigma(f)`` (log-concave); the expectation under N(m, v) by
  composite Gauss-Legendre in ``t = (f - m)/sqrt(v)`` on [-10, 10] with edges where
  ``y f = -+40, -+8, 0`` (the logistic's transition) and at ``t = 0, +-2.5, +-5`` (~1e-15
  relative for any v, tests), with
  ``dE/dm = E[d log p/df]`` and ``dE/dv = E[d^2 log p/df^2] / 2`` (Bonnet's and Price's theorems).
* poisson_log, ``y f - e^f - log y!``: derivatives ``y - e^f``, ``-e^f``, ``-e^f``; the
  expectation in closed form, ``y m - exp(m + v/2) - log y!``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import expit, gammaln

__all__ = [
    "logit_derivatives",
    "logit_expectation",
    "panel_nodes",
    "poisson_log_derivatives",
    "poisson_log_expectation",
]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(32)
_T_MAX = 10.0
_BREAKS = (-40.0, -8.0, 0.0, 8.0, 40.0)
_T_EDGES = (-_T_MAX, -5.0, -2.5, 0.0, 2.5, 5.0, _T_MAX)  # the Gaussian's own panels


def _softplus(x):
    return np.logaddexp(0.0, x)


def logit_derivatives(likelihood: Any, f: np.ndarray, y: np.ndarray):
    """``(log p(y|f), d/df, d^2/df^2, d^3/df^3)`` of the logit, elementwise (``likelihood``, a
    :class:`~qpinfer.likelihoods.logit.Logit`, has no parameters)."""
    p = expit(f)
    return (
        -_softplus(-y * f),
        y * expit(-y * f),
        -p * (1.0 - p),
        -p * (1.0 - p) * (1.0 - 2.0 * p),
    )


def poisson_log_derivatives(likelihood: Any, f: np.ndarray, y: np.ndarray):
    """``(log p(y|f), d/df, d^2/df^2, d^3/df^3)`` of the log link, elementwise (``likelihood``,
    a :class:`~qpinfer.likelihoods.poisson_log.PoissonLog`, has no parameters)."""
    ef = np.exp(f)
    return y * f - ef - gammaln(y + 1.0), y - ef, -ef, -ef


def panel_nodes(m: np.ndarray, s: np.ndarray, inner: np.ndarray):
    """Nodes f and weights of E[g(f)], f ~ N(m, s^2): 32-point Gauss-Legendre panels in
    t = (f - m) / s with edges at 0, +-2.5, +-5, +-10 and at ``inner`` (shape ``m.shape + (k,)``,
    the caller's breaks of g mapped to t and clipped to [-10, 10], so empty panels have zero
    weight). Shared with :mod:`qpinfer.likelihoods.loglik_student_t`."""
    fixed = np.broadcast_to(np.asarray(_T_EDGES), m.shape + (len(_T_EDGES),))
    edges = np.sort(np.concatenate([fixed, inner], axis=-1), axis=-1)
    a, b = edges[..., :-1, None], edges[..., 1:, None]
    t = 0.5 * (a + b) + 0.5 * (b - a) * _GL_X
    w = 0.5 * (b - a) * _GL_W * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)
    shape = m.shape + (-1,)
    return m[..., None] + s[..., None] * t.reshape(shape), w.reshape(shape)


def _nodes(m: np.ndarray, s: np.ndarray):
    """:func:`panel_nodes` with this module's breaks (logit's and the log link's)."""
    inner = np.stack([np.clip((b - m) / s, -_T_MAX, _T_MAX) for b in _BREAKS], axis=-1)
    return panel_nodes(m, s, inner)


def _broadcast(m, v, y):
    return np.broadcast_arrays(np.asarray(m, dtype=np.float64), np.asarray(v, dtype=np.float64), y)


def logit_expectation(likelihood: Any, m, v, y):
    """``E[log p(y|f)]`` of the logit for ``f ~ N(m, v)`` and its derivatives in ``m`` and
    ``v``, by the panels of :func:`panel_nodes`."""
    m, v, y = _broadcast(m, v, y)
    z, w = _nodes(y * m, np.sqrt(v))  # in z = y f, z ~ N(y m, v)
    lp = -_softplus(-z)
    d1 = expit(-z)
    p = expit(z)
    d2 = -p * (1.0 - p)
    return np.sum(w * lp, -1), y * np.sum(w * d1, -1), 0.5 * np.sum(w * d2, -1)


def poisson_log_expectation(likelihood: Any, m, v, y):
    """``E[log p(y|f)]`` of the log link for ``f ~ N(m, v)`` and its derivatives in ``m`` and
    ``v``, in closed form."""
    m, v, y = _broadcast(m, v, y)
    e = np.exp(m + 0.5 * v)
    return y * m - e - gammaln(y + 1.0), y - e, -0.5 * e
