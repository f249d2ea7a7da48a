"""EP's approximate log marginal likelihood (Zhang et al., 2020, eq. (4)) and its hyperparameter gradient.

Eq. (4) is evaluated in the numerically stable form of R&W eq. (3.65)/(3.73) via the Cholesky
factor of ``B = I + S~^1/2 K S~^1/2`` (as in GPML's ``infEP``); for QP it is EP's expression
evaluated at QP's sites (the paper's choice); Power EP's is eq. (110) of Bui et al. (2017)
(:func:`qpinfer.inference.power_ep.power_ep_log_evidence`). The gradient in the kernel
hyperparameters is R&W eq. (5.27), ``1/2 tr((b b^T - S~^1/2 B^-1 S~^1/2) dK/dtheta)`` with
``b = nu~ - S~^1/2 B^-1 S~^1/2 K nu~``: the derivative of eq. (4) with the site parameters (and
the site normalisers Z~_i) held fixed. At an EP fixed point that is also the total derivative of
the EP evidence; for QP, whose sites are not a stationary point of EP's free energy, it is the
derivative of the fixed-site objective, which is what Algorithm 1 (line 15) maximises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.linalg import solve_triangular

from qpinfer.inference.dense_posterior import Posterior, _chol_B, scaled_B_inverse
from qpinfer.inference.projections import Projection

__all__ = ["fixed_site_log_evidence", "log_evidence", "log_evidence_gradient", "site_constant"]


def log_evidence(
    post: Posterior,
    tau: np.ndarray,
    nu: np.ndarray,
    y: np.ndarray,
    projection: Projection,
) -> tuple[float, np.ndarray, np.ndarray]:
    """EP's approximate log marginal likelihood, eq. (4), for the sites ``(tau, nu)``.

    Written as in R&W eq. (3.65)/(3.73) and GPML's ``infEP`` so that no term diverges as a site
    precision goes to zero::

        log Z = sum log Z^_i - sum log L_ii + nu~^T Sigma nu~ / 2
                + sum [ log(1 + tau~/tau_c) - nu~^2/(tau_c + tau~)
                        + nu_c (tau~/tau_c nu_c - 2 nu~)/(tau_c + tau~) ] / 2

    with cavity natural parameters ``tau_c = 1/Sigma_ii - tau~``, ``nu_c = mean_i/Sigma_ii - nu~``
    and ``log Z^_i`` the tilted normaliser at the cavity. Returns ``(log Z, cavity_mean,
    cavity_var)``.
    """
    if getattr(projection, "power", 1.0) != 1.0:  # Power EP: Bui et al. (2017) eq. (110)
        from qpinfer.inference.power_ep import power_ep_log_evidence  # late: only Power EP needs it

        return power_ep_log_evidence(post, tau, nu, y, projection)
    tau_c = 1.0 / post.var - tau
    nu_c = post.mean / post.var - nu
    cav_var = 1.0 / tau_c
    cav_mean = nu_c * cav_var
    log_zhat = projection.log_normalizer(cav_mean, np.sqrt(cav_var), y)
    log_z = (
        np.sum(log_zhat)
        - post.half_logdet_B()
        + 0.5 * nu @ post.mean
        + 0.5 * np.sum(np.log1p(tau / tau_c))
        - 0.5 * np.sum(nu * nu / (tau_c + tau))
        + 0.5 * np.sum(nu_c * ((tau / tau_c) * nu_c - 2.0 * nu) / (tau_c + tau))
    )
    return float(log_z), cav_mean, cav_var


def fixed_site_log_evidence(
    kernel: Any,
    X: np.ndarray,
    theta: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    constant: float = 0.0,
    eval_gradient: bool = True,
) -> tuple[float, np.ndarray | None]:
    """Eq. (4) as a function of the kernel hyperparameters with the sites held fixed.

    With ``(Z~_i, tau~_i, nu~_i)`` fixed, eq. (4) is ``constant - sum log L_ii + nu~^T Sigma
    nu~ / 2`` where ``constant`` collects the site terms (pass
    ``result.log_marginal_likelihood - (-sum log L_ii + nu~^T mean / 2)`` at the sites' own
    hyperparameters, see :func:`site_constant`). The gradient is R&W eq. (5.27),
    ``1/2 tr((b b^T - S^1/2 B^-1 S^1/2) dK/dtheta_j)``; the kernel contracts it
    (``gradient_contract``) without forming dK/dtheta.
    """
    if np.any(tau < 0):
        raise ValueError(
            "fixed_site_log_evidence needs non-negative site precisions (tau); got negative ones"
        )
    kern = kernel.with_theta(theta)
    K = kern(X)
    s = np.sqrt(tau)
    L = _chol_B(K, s)
    Knu = K @ nu
    w = solve_triangular(L, s * Knu, lower=True, check_finite=False)
    value = constant - np.sum(np.log(np.diag(L))) + 0.5 * (nu @ Knu - w @ w)
    if not eval_gradient:
        return float(value), None
    b = nu - s * solve_triangular(L, w, lower=True, trans=1, check_finite=False)
    R = np.outer(b, b)
    R -= scaled_B_inverse(L, s)
    grad = 0.5 * kern.gradient_contract(X, R, K)
    return float(value), np.asarray(grad, dtype=np.float64)


def log_evidence_gradient(
    kernel: Any, X: np.ndarray, result: Any, K: np.ndarray | None = None
) -> np.ndarray:
    """Gradient of eq. (4) in the log kernel hyperparameters at the sites of ``result``.

    R&W eq. (5.27), ``1/2 tr((b b^T - S^1/2 B^-1 S^1/2) dK/dtheta)``, reusing the Cholesky factor
    and ``b`` of ``result.posterior`` (which must belong to ``kernel`` and ``X``).
    """
    post = result.posterior
    if post.L is None:
        raise ValueError(
            "the evidence gradient (R&W eq. (5.27)) needs non-negative site precisions; these "
            "sites (a non-log-concave likelihood) have negative ones"
        )
    R = np.outer(post.b, post.b)
    R -= scaled_B_inverse(post.L, post.sqrt_tau)
    return 0.5 * np.asarray(kernel.gradient_contract(X, R, K), dtype=np.float64)


def site_constant(result: Any) -> float:
    """The theta-independent part of eq. (4) for the sites in ``result`` (see above)."""
    post = result.posterior
    return float(
        result.log_marginal_likelihood + post.half_logdet_B() - 0.5 * result.nu @ post.mean
    )
