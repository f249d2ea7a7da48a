"""Derivatives and Gaussian expectations of log p(y | f), for the Laplace and VB baselines.

EP and QP only need the tilted moments of :mod:`qpinfer.likelihoods`. The two baselines need
other things from the same likelihood objects, provided here (vectorised over sites, dispatched
on the likelihood object's class, whose parameters the math reads from it) so that
:mod:`qpinfer.likelihoods` keeps its small EP/QP interface:

* :func:`log_lik_derivatives` -- ``log p(y|f)`` and its first three f-derivatives (Newton mode
  finding, R&W Alg. 3.1; the third derivative enters the evidence gradient, R&W Alg. 5.1);
* :func:`expected_log_lik` -- ``E[log p(y|f)]`` under ``f ~ N(m, v)`` and its derivatives in ``m``
  and ``v`` (the data term of the ELBO, Opper & Archambeau 2009).

logit and poisson_log are in :mod:`qpinfer.likelihoods.loglik_logit_poisson_log`, Student-t noise
(any ``StudentT(nu, scale)``) in :mod:`qpinfer.likelihoods.loglik_student_t`.

Probit (paper 000 App. C.1), ``log Phi(y f)``: derivatives from ``r = phi(z)/Phi(z)``, ``z = y f``,
in the cancellation-free form of :func:`qpinfer.quadrature.normal_ratios.probit_moment_terms`;
expectations by composite Gauss-Legendre quadrature (3 panels x 40 nodes per site, edges at ``z =
-+6``; relative error ~1e-14 for any variance), with ``dE/dm = E[d log p/df]`` and
``dE/dv = E[d^2 log p/df^2] / 2`` (Bonnet's and Price's theorems).

Poisson with the square link (App. C.2), ``log p = 2 y log|f| - f^2 - log y!``: the derivatives
are ``2y/f - 2f``, ``-2y/f^2 - 2`` (< 0 away from f = 0: log p is strictly concave on each
half-line, singular at 0 for y >= 1) and ``4y/f^3``. The expectation is in closed form,
``E[log p] = y E[log f^2] - (m^2 + v) - log y!`` with, for ``a = m^2 / (2v)``
(``f^2 / v`` is non-central chi-square with one degree of freedom and non-centrality ``2a``),

    E[log f^2] = log(2v) + sum_j Poisson(j; a) psi(j + 1/2)                   (a <= 40)
               = log(m^2) - sum_{n>=1} (2n-1)!! / n * (v/m^2)^n               (a > 40, asymptotic)

    dE[log f^2]/dm = 2 sqrt(2/v) D(m / sqrt(2v)),   dE[log f^2]/dv = (1 - 2 x D(x)) / v,

``D`` Dawson's integral and ``x = |m| / sqrt(2v)`` (from ``d/da sum_j Poisson(j; a) psi(j+1/2) =
sum_j Poisson(j; a) / (j + 1/2) = 2 D(sqrt a) / sqrt a``). The asymptotic series is truncated at
its smallest term, which for ``a > 40`` is below ``1e-17`` relative (the neglected part is
``O(e^-a)``: the mass of N(m, v) near the singularity at 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import dawsn, gammaln, log_ndtr, psi

from qpinfer.likelihoods import loglik_student_t
from qpinfer.likelihoods.logit import Logit
from qpinfer.likelihoods.loglik_logit_poisson_log import (
    logit_derivatives,
    logit_expectation,
    poisson_log_derivatives,
    poisson_log_expectation,
)
from qpinfer.likelihoods.poisson import PoissonSquare
from qpinfer.likelihoods.poisson_log import PoissonLog
from qpinfer.likelihoods.probit import Probit
from qpinfer.likelihoods.student_t import StudentT
from qpinfer.quadrature.normal_ratios import probit_moment_terms

__all__ = ["expected_log_f2", "expected_log_lik", "log_lik_derivatives"]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(40)
_T_MAX = 10.0  # |t| > 10 carries < 1e-22 of the N(0, 1) mass
_Z_BREAK = 6.0  # log Phi(z) changes regime within |z| < 6 (~0 above, ~ -z^2/2 below)


def _gauss_nodes(m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-site nodes f and weights for E[g(f)], f ~ N(m, s^2): composite Gauss-Legendre in
    t = (f - m)/s on [-10, 10], with panel edges where y f = -+6 so that the transition of
    log Phi is resolved for any s (plain Gauss-Hermite loses digits once s > 2: 1e-5 relative
    at s = 5 with 64 nodes)."""
    lo = np.clip((-_Z_BREAK - m) / s, -_T_MAX, _T_MAX)
    hi = np.clip((_Z_BREAK - m) / s, -_T_MAX, _T_MAX)
    edges = np.stack([np.full(m.shape, -_T_MAX), lo, hi, np.full(m.shape, _T_MAX)], axis=-1)
    a, b = edges[..., :-1, None], edges[..., 1:, None]
    t = 0.5 * (a + b) + 0.5 * (b - a) * _GL_X
    w = 0.5 * (b - a) * _GL_W * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)
    shape = m.shape + (-1,)
    return (m[..., None] + s[..., None] * t.reshape(shape)), w.reshape(shape)


_SERIES_MAX_A = 40.0
_SERIES_TERMS = int(_SERIES_MAX_A + 12.0 * np.sqrt(_SERIES_MAX_A) + 60.0)
_PSI_HALF = psi(np.arange(_SERIES_TERMS) + 0.5)
_LOG_FACT = gammaln(np.arange(_SERIES_TERMS) + 1.0)
# (2n-1)!!/n for the asymptotic series, n = 1..60
_N = np.arange(1, 61)
_DFACT_OVER_N = np.exp(np.cumsum(np.log(2.0 * _N - 1.0)) - np.log(_N))


def _probit_derivatives(likelihood: Any, f: np.ndarray, y: np.ndarray):
    """Probit's ``log Phi(y f)`` and its derivatives (module docstring)."""
    z = y * f
    r, z_plus_r, var_factor = probit_moment_terms(np.atleast_1d(z).astype(np.float64))
    r, z_plus_r, var_factor = (a.reshape(np.shape(z)) for a in (r, z_plus_r, var_factor))
    lp = log_ndtr(z)
    d1 = y * r
    d2 = var_factor - 1.0  # -r (z + r)
    d3 = y * r * (z_plus_r * z_plus_r - var_factor)  # y r ((z+r)(z+2r) - 1)
    return lp, d1, d2, d3


def _square_derivatives(likelihood: Any, f: np.ndarray, y: np.ndarray):
    """The square link's ``2 y log|f| - f^2 - log y!`` and its derivatives (module docstring)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pos = y > 0
        lp = np.where(pos, y * np.log(f * f), 0.0) - f * f - gammaln(y + 1.0)
        d1 = np.where(pos, 2.0 * y / f, 0.0) - 2.0 * f
        d2 = np.where(pos, -2.0 * y / (f * f), 0.0) - 2.0
        d3 = np.where(pos, 4.0 * y / (f * f * f), 0.0)
    return lp, d1, d2, d3


def log_lik_derivatives(
    likelihood: Any, f: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(log p(y|f), d/df, d^2/df^2, d^3/df^3)``, elementwise.

    For ``poisson_square`` at ``f = 0`` with ``y >= 1`` the log-likelihood is ``-inf`` and the
    derivatives are infinite (the Laplace mode never sits there, see
    :mod:`qpinfer.inference.laplace`).
    """
    f = np.asarray(f, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return _baseline(likelihood)[0](likelihood, f, y)


def expected_log_f2(m: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``E[log f^2]`` for ``f ~ N(m, v)`` and its derivatives in ``m`` and ``v`` (closed form)."""
    m, v = np.broadcast_arrays(np.asarray(m, dtype=np.float64), np.asarray(v, dtype=np.float64))
    m = np.atleast_1d(m)
    v = np.atleast_1d(v)
    a = m * m / (2.0 * v)
    value = np.empty(m.shape)
    small = a <= _SERIES_MAX_A
    if small.any():
        a_s = a[small][:, None]
        j = np.arange(_SERIES_TERMS)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_w = j * np.log(a_s) - a_s - _LOG_FACT
        log_w[:, 0] = -a_s[:, 0]  # 0 * log(0) = 0
        value[small] = np.log(2.0 * v[small]) + np.exp(log_w) @ _PSI_HALF
    big = ~small
    if big.any():
        s2 = v[big] / (m[big] * m[big])
        terms = _DFACT_OVER_N[None, :] * s2[:, None] ** _N[None, :]
        # truncate each row at its smallest term (optimal truncation of an asymptotic series)
        stop = np.argmin(terms, axis=1)
        keep = _N[None, :] - 1 <= stop[:, None]
        value[big] = np.log(m[big] * m[big]) - np.sum(np.where(keep, terms, 0.0), axis=1)
    x = m / np.sqrt(2.0 * v)
    d_m = 2.0 * np.sqrt(2.0 / v) * dawsn(x)
    d_v = (1.0 - 2.0 * x * dawsn(x)) / v  # x D(x) is even in x
    return value, d_m, d_v


def _probit_expectation(likelihood: Any, m: np.ndarray, v: np.ndarray, y: np.ndarray):
    """Probit's ``E[log Phi(y f)]`` and its derivatives, by the panels of :func:`_gauss_nodes`."""
    m, v, y = np.broadcast_arrays(m, v, y)
    # nodes placed in z = y f (log Phi(z)); E over f ~ N(m, v) is E over z ~ N(y m, v)
    z, w = _gauss_nodes(y * m, np.sqrt(v))
    lp, d1, d2, _ = _probit_derivatives(likelihood, z, np.ones_like(z))
    ys = y[..., None]
    return np.sum(w * lp, -1), np.sum(w * ys * d1, -1), 0.5 * np.sum(w * d2, -1)


def _square_expectation(likelihood: Any, m: np.ndarray, v: np.ndarray, y: np.ndarray):
    """The square link's expectation in closed form (:func:`expected_log_f2`)."""
    e, e_m, e_v = expected_log_f2(m, v)
    e, e_m, e_v = (a.reshape(np.broadcast(m, v).shape) for a in (e, e_m, e_v))
    value = np.where(y > 0, y * e, 0.0) - (m * m + v) - gammaln(y + 1.0)
    return value, y * e_m - 2.0 * m, y * e_v - 1.0


def expected_log_lik(
    likelihood: Any, m: np.ndarray, v: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``E[log p(y|f)]`` for ``f ~ N(m, v)`` and its derivatives in ``m`` and ``v``, elementwise."""
    m = np.asarray(m, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return _baseline(likelihood)[1](likelihood, m, v, y)


#: likelihood class -> (its log p derivatives, its Gaussian expectation); each takes the
#: likelihood object first (Student-t's read nu and scale from it)
_BASELINES: dict[type, tuple[Callable, Callable]] = {
    Probit: (_probit_derivatives, _probit_expectation),
    PoissonSquare: (_square_derivatives, _square_expectation),
    Logit: (logit_derivatives, logit_expectation),
    PoissonLog: (poisson_log_derivatives, poisson_log_expectation),
    StudentT: (loglik_student_t.log_lik_derivatives, loglik_student_t.expected_log_lik),
}


def _baseline(likelihood: Any) -> tuple[Callable, Callable]:
    """The baselines' math of the likelihood object's class (or of its nearest base class)."""
    for cls in type(likelihood).__mro__:
        if cls in _BASELINES:
            return _BASELINES[cls]
    raise ValueError(
        "Laplace and VB support the probit, poisson_square, logit, poisson_log and student_t "
        f"likelihoods (Probit, PoissonSquare, Logit, PoissonLog, StudentT); got {likelihood!r}"
    )
