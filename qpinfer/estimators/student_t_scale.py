"""The derivative of each method's evidence in ``log(scale)`` of Student-t noise, for
learning the noise scale of :class:`qpinfer.estimators.student_t_regressor.GPStudentTRegressor` by
evidence.

EP (and QP's fixed-site evidence). Eq. (4) depends on the scale only through the tilted
normalisers ``log Z_i = log int p(y_i | f) N(f | mu_i, sigma_i^2) df`` at the cavities; at an EP
fixed point the evidence is stationary in the sites (and the cavities are functions of the
sites and K), so the total derivative is the explicit one at fixed cavities::

    dlog Z_EP / dlog s = sum_i E_qi[d log p(y_i | f) / dlog s]
                       = -sum_i [(m_i - mu_i)(m_i - y_i) + v_i] / sigma_i^2

with ``(m_i, v_i)`` the tilted mean and variance. The second form follows from the scaling
``Z(mu, sigma, y; s) = Z'((mu - y)/s, sigma/s) / s`` (canonical units of
:mod:`qpinfer.likelihoods.student_t`) and the Gaussian identities ``d log Z/d mu = (m -
mu)/sigma^2``, ``d log Z/d sigma^2 = ((m - mu)^2 + v - sigma^2)/(2 sigma^4)``: it needs only the
tilted moments EP already computes exactly (no new quadrature). For QP it is the derivative of eq.
(4) at QP's sites held fixed, as QP's kernel-hyperparameter gradient
(:mod:`qpinfer.inference.evidence`).

Laplace. ``log q = Psi(f^) - log det(I + K W)/2`` with ``W = -d^2 log p`` at the mode ``f^``
(R&W eq. (3.32)). ``Psi`` is stationary at the mode, so it contributes ``sum d log p/dlog s``
at fixed f; the mode moves by ``df^ = Sigma d(grad log p)/dlog s`` (``Sigma = (K^-1 + W)^-1``,
implicit function theorem on ``f^ = K grad log p(f^)``), and ``W`` changes explicitly and through
f^ (``dW/df = -d^3 log p``)::

    dlog q / dlog s = sum_i dlp_i + 1/2 sum_i Sigma_ii [d(d2_i) + d3_i (Sigma d(d1))_i]

(``d(.)`` the derivatives in ``log s`` at fixed f,
:func:`qpinfer.likelihoods.student_t.baselines.scale_derivatives`).

VB. The ELBO depends on the scale only through ``sum_i E_q[log p(y_i | f_i)]``; at the optimal
``q`` its total derivative is the partial one (envelope theorem), ``sum_i E_{N(m_i, v_i)}[d log
p/dlog s]`` by the quadrature of :mod:`qpinfer.likelihoods.student_t.baselines`.

All three are checked against central finite differences of the re-converged evidence in
``tests/estimators/test_student_t_scale.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.inference.laplace import _z_matrix
from qpinfer.likelihoods.student_t.baselines import (
    expected_scale_score,
    scale_derivatives,
)

__all__ = [
    "cavity_scale_gradient",
    "ep_scale_gradient",
    "laplace_scale_gradient",
    "scale_gradient",
    "vb_scale_gradient",
]


def ep_scale_gradient(result: Any, y: np.ndarray, likelihood: Any) -> float:
    """``d log Z_EP / dlog(scale)`` at the sites of an EP/QP ``result`` (fixed cavities)."""
    post = result.posterior
    tau_c = 1.0 / post.var - result.tau
    cav_var = 1.0 / tau_c
    cav_mean = (post.mean / post.var - result.nu) * cav_var
    return cavity_scale_gradient(cav_mean, cav_var, y, likelihood)


def cavity_scale_gradient(
    cav_mean: np.ndarray, cav_var: np.ndarray, y: np.ndarray, likelihood: Any
) -> float:
    """``sum_i d log Z_i / dlog(scale)`` at fixed cavities ``N(cav_mean, cav_var)`` of the
    latent ``f_i`` (the formula above). With pseudo-points the cavities of ``f_n`` are
    ``N(mu_c, s_c + h_n)`` (Bui, Yan and Turner, 2017, eq. (20)), where eq. (110) depends on
    the scale (alpha = 1)."""
    m, sd = likelihood.tilted_moments(cav_mean, np.sqrt(cav_var), y)
    return float(-np.sum(((m - cav_mean) * (m - y) + sd * sd) / cav_var))


def laplace_scale_gradient(K: np.ndarray, result: Any, y: np.ndarray, likelihood: Any) -> float:
    """``d log q_Laplace / dlog(scale)`` (R&W eq. (3.32), the mode re-found), see above."""
    post = result.posterior
    _, _, _, d3 = likelihood.log_lik_derivatives(result.f, y)
    dlp, dd1, dd2 = scale_derivatives(likelihood, result.f, y)
    Z = _z_matrix(post)
    Kv = K @ dd1
    df = Kv - K @ (Z @ Kv)  # Sigma d(d1), Sigma = K - K Z K
    return float(np.sum(dlp) + 0.5 * np.sum(post.var * (dd2 + d3 * df)))


def vb_scale_gradient(result: Any, y: np.ndarray, likelihood: Any) -> float:
    """``dELBO / dlog(scale)`` at the optimal ``q`` of a VB ``result`` (envelope theorem)."""
    post = result.posterior
    return float(np.sum(expected_scale_score(likelihood, post.mean, post.var, y)))


def scale_gradient(method: str, K: np.ndarray, result: Any, y: np.ndarray, likelihood: Any):
    """The derivative of ``method``'s evidence (``"ep"``, ``"qp"``, ``"laplace"``, ``"vb"``) in
    ``log(scale)``."""
    if method == "laplace":
        return laplace_scale_gradient(K, result, y, likelihood)
    if method == "vb":
        return vb_scale_gradient(result, y, likelihood)
    return ep_scale_gradient(result, y, likelihood)
