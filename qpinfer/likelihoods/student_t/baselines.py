"""log p(y | f) of Student-t noise, its f-derivatives, its Gaussian expectations and its
derivatives in log(scale): what the Laplace and VB baselines (``StudentT.log_lik_derivatives`` and
``StudentT.expected_log_lik``) and the noise-scale gradient
(:mod:`qpinfer.estimators.student_t_scale`) need.

With ``r = y - f`` and ``A = nu s^2`` (``s`` the scale)::

    log p   = log C_nu - log s - (nu + 1)/2 log(1 + r^2 / A)
    d/df    = (nu + 1) r / (A + r^2)
    d2/df2  = -(nu + 1) (A - r^2) / (A + r^2)^2          (> 0 for |r| > sqrt(A): not log-concave)
    d3/df3  = -2 (nu + 1) r (3 A - r^2) / (A + r^2)^3

and in ``log s`` at fixed f (``dA/dlog s = 2 A``)::

    d log p / dlog s  = -1 + (nu + 1) r^2 / (A + r^2)
    d (d/df) / dlog s = -2 (nu + 1) A r / (A + r^2)^2
    d (d2/df2) / dlog s = -2 (nu + 1) A (3 r^2 - A) / (A + r^2)^3.

Expectations under ``f ~ N(m, v)``: composite Gauss-Legendre (32 nodes per panel) in
``t = (f - m) / sqrt(v)`` on [-10, 10] (the Gaussian beyond carries < 1e-22 of the mass) with
panel edges at ``t = 0, +-2.5, +-5`` and where ``r = 0, +-sqrt(A) 4^k`` (k = 0..15): every panel
of the t factor's log is then at most 4x longer than its distance from the poles of
``log(1 + r^2/A)`` at ``r = +-i sqrt(A)``, so each panel converges geometrically, for any ratio
``sqrt(v) / s`` up to ~1e9 (checked against mpmath in ``tests/likelihoods/test_student_t_laplace_vb.py``).
``dE/dm = E[d log p/df]`` and ``dE/dv = E[d^2 log p/df^2] / 2`` (Bonnet's and Price's theorems).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.quadrature.expectation import T_MAX as _T_MAX
from qpinfer.quadrature.expectation import panel_nodes

__all__ = [
    "expected_log_lik",
    "expected_scale_score",
    "log_lik_derivatives",
    "scale_derivatives",
]

_R_EDGES = np.concatenate([-(4.0 ** np.arange(15, -1, -1)), [0.0], 4.0 ** np.arange(16)])


def log_lik_derivatives(likelihood: Any, f: np.ndarray, y: np.ndarray):
    """``(log p(y|f), d/df, d^2/df^2, d^3/df^3)``, elementwise."""
    nu, s = likelihood.nu, likelihood.scale
    r = np.asarray(y, dtype=np.float64) - np.asarray(f, dtype=np.float64)
    A = nu * s * s
    den = A + r * r
    lp = likelihood.log_pdf(f, y)
    d1 = (nu + 1.0) * r / den
    d2 = -(nu + 1.0) * (A - r * r) / (den * den)
    d3 = -2.0 * (nu + 1.0) * r * (3.0 * A - r * r) / (den * den * den)
    return lp, d1, d2, d3


def scale_derivatives(likelihood: Any, f: np.ndarray, y: np.ndarray):
    """Derivatives in ``log(scale)`` at fixed f of ``(log p, d/df log p, d^2/df^2 log p)``."""
    nu, s = likelihood.nu, likelihood.scale
    r = np.asarray(y, dtype=np.float64) - np.asarray(f, dtype=np.float64)
    A = nu * s * s
    den = A + r * r
    r2 = r * r
    return (
        -A / den + nu * r2 / den,  # = -1 + (nu + 1) r^2 / den, without cancellation at r = 0
        -2.0 * (nu + 1.0) * A * r / (den * den),
        -2.0 * (nu + 1.0) * A * (3.0 * r2 - A) / (den * den * den),
    )


def _nodes(likelihood: Any, m: np.ndarray, sd: np.ndarray, y: np.ndarray):
    """Nodes f and weights of E[g(f)], f ~ N(m, sd^2) (see the module docstring)."""
    root_a = np.sqrt(likelihood.nu) * likelihood.scale
    # r = y - f = r_edge  <=>  t = (y - r_edge - m) / sd
    inner = np.clip(
        (y[..., None] - root_a * _R_EDGES - m[..., None]) / sd[..., None], -_T_MAX, _T_MAX
    )
    return panel_nodes(m, sd, inner)


def expected_log_lik(likelihood: Any, m, v, y):
    """``E[log p(y|f)]`` for ``f ~ N(m, v)`` and its derivatives in ``m`` and ``v``."""
    m, v, y = np.broadcast_arrays(
        np.asarray(m, dtype=np.float64), np.asarray(v, dtype=np.float64), np.asarray(y, float)
    )
    f, w = _nodes(likelihood, m, np.sqrt(v), y)
    lp, d1, d2, _ = likelihood.log_lik_derivatives(f, y[..., None])
    return np.sum(w * lp, -1), np.sum(w * d1, -1), 0.5 * np.sum(w * d2, -1)


def expected_scale_score(likelihood: Any, m, v, y) -> np.ndarray:
    """``E[d log p(y|f) / dlog(scale)]`` for ``f ~ N(m, v)`` (VB's scale gradient)."""
    m, v, y = np.broadcast_arrays(
        np.asarray(m, dtype=np.float64), np.asarray(v, dtype=np.float64), np.asarray(y, float)
    )
    f, w = _nodes(likelihood, m, np.sqrt(v), y)
    return np.sum(w * scale_derivatives(likelihood, f, y[..., None])[0], -1)
