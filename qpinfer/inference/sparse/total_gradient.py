"""QP's own objectives for pseudo-point QP (probit) with total gradients in theta and ``Z``.

The sparse counterpart of :mod:`qpinfer.inference.total_gradient`. Pseudo-point QP
(:func:`qpinfer.inference.sparse.sites.run_sparse_pep` with a
:class:`~qpinfer.inference.projections.QuantileMatching` projection) puts a site ``(tau_n, nu_n)``
on ``a_n = w_n^T u``; given ``u``, ``f_n ~ N(a_n, h_n)``. In whitened coordinates the site
variables have the prior ``N(0, Qff)``, ``Qff = A^T A`` (``A = Lu^-1 Kuf``), so the posterior
``Sigma = A^T B^-1 A`` (``B = I + A S A^T``) is a dense GP's with ``K = Qff`` and rank M. The site
update at a cavity ``N(m, v)`` of ``a_n`` is the probit's QP update at the rescaled cavity
``N(m / c, v / c^2)``, ``c = sqrt(1 + h_n)`` (``_qp_ratio()`` of the sites module): mean ``c m^'``,
variance ``c^2 sigma*'^2``, normaliser ``Z^'`` -- so
:func:`qpinfer.inference.site_jacobian.cavity_derivatives` at the rescaled cavity, chained through
``(m, v, h)``, gives every local derivative, ``h_n`` included.

Objectives: ``"evidence"``, eq. (110) at QP's sites (alpha = 1; the result's
``log_marginal_likelihood``), and ``"loo"``, ``sum_n log Z^_n`` at QP's cavities of ``f_n``
(``N(mu_c, s_c + h_n)``). Their total derivative follows the dense module: one adjoint
``(I - dG/ds)^T lam = dL/ds`` by GMRES (:class:`~qpinfer.inference.site_chord.SiteJacobian`), the products with ``Sigma`` (``V^T V x``, ``V = L_B^-1 A``)
and ``Sigma o Sigma`` (row-wise quadratic forms ``v_i^T (V diag(x) V^T) v_i``) both O(N M^2),
never an N x N array. With ``omega = dL/d(a, b, h) + lam^T dG/d(a, b, h)`` the prior enters
through ``tr(W dQff) + omega_h^T d diag(Kff)``, ``W = T diag(omega_a) T^T + sym(beta (T
omega_b)^T) - diag(omega_h)`` (+ ``(beta beta^T - C)/2`` for the evidence), ``T = I - S Sigma``,
``beta = nu - tau mu``, ``C = (S^-1 + Qff)^-1``; only ``W A^T`` (N x M) is formed, by
``T^T A^T = A^T B^-1`` and Woodbury, and contracted by
``qpinfer.inference.sparse.pseudo_points._contract_prior_gradient()`` as sparse EP's gradient is.
Clipped site precisions are constants of the fixed point (their ``G_tau`` row is zero).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.site_jacobian import cavity_derivatives
from qpinfer.inference.sparse.pseudo_points import (
    PseudoPointPrior,
    _check_kernel,
    _contract_prior_gradient,
    _tri_inv,
)
from qpinfer.inference.sparse.sites import (
    SparsePEPResult,
    _ConditionalProjection,
    _sparse_site_proposal,
)
from qpinfer.inference.total_gradient import adjoint

__all__ = ["OBJECTIVES", "sparse_qp_objective_gradient"]

#: QP's own hyperparameter objectives
OBJECTIVES: tuple[str, ...] = ("evidence", "loo")


class _SparseLocalMaps:
    """Per-site coefficients of the new sites ``G`` and of the local objective in the five
    differentials ``(da, db, dtau, dnu, dh)`` (rows), ``h`` the conditional variance."""

    def __init__(self, projection, a, b, tau, nu, h, y, objective: str, fixed) -> None:
        tau_c = 1.0 / a - tau
        nu_c = b / a - nu
        v = 1.0 / tau_c
        m = nu_c * v
        c2 = 1.0 + h
        c = np.sqrt(c2)
        d = cavity_derivatives(projection, m / c, v / c2, y)
        dm_h = -(m / c) / (2.0 * c2)  # d(m/c)/dh
        dv_h = -(v / c2) / c2  # d(v/c^2)/dh
        self.log_z = d.log_z
        mean = c * d.mean
        mean_m, mean_v = d.mean_m, d.mean_v / c
        mean_h = d.mean / (2.0 * c) + c * (d.mean_m * dm_h + d.mean_v * dv_h)
        var = c2 * d.var
        var_m, var_v = c * d.var_m, d.var_v
        var_h = d.var + c2 * (d.var_m * dm_h + d.var_v * dv_h)
        lz_m, lz_v = d.log_z_m / c, d.log_z_v / c2
        lz_h = d.log_z_m * dm_h + d.log_z_v * dv_h
        zero, one = np.zeros_like(a), np.ones_like(a)
        d_tau_c = np.stack([-1.0 / (a * a), zero, -one, zero])
        d_nu_c = np.stack([-b / (a * a), 1.0 / a, zero, -one])
        d_v = -v * v * d_tau_c
        d_m = v * d_nu_c - m * v * d_tau_c
        inv = 1.0 / var
        d_var = np.vstack([var_m * d_m + var_v * d_v, var_h])
        d_mean = np.vstack([mean_m * d_m + mean_v * d_v, mean_h])
        d_tau_c, d_nu_c = np.vstack([d_tau_c, zero]), np.vstack([d_nu_c, zero])
        self.G_tau = -inv * inv * d_var - d_tau_c
        self.G_nu = inv * d_mean - mean * inv * inv * d_var - d_nu_c
        self.G_tau[:, fixed] = 0.0  # held at the floor; nu still follows the update
        loc = np.vstack([lz_m * d_m + lz_v * d_v, lz_h])
        if objective == "evidence":  # - A(1/a, b/a) + A(tau_c, nu_c) of eq. (110)'s bracket
            loc += (nu_c / tau_c) * d_nu_c - (nu_c * nu_c / (2 * tau_c**2) + 0.5 / tau_c) * d_tau_c
            loc[1] -= b / a
            loc[0] += b * b / (2 * a * a) - 0.5 / a
        self.loc = loc


class _LowRankSigma:
    """Products with ``Sigma = V^T V`` and ``Sigma o Sigma`` (``V = L_B^-1 A``, M x N)."""

    def __init__(self, V: np.ndarray) -> None:
        self.V = V

    def dot(self, x: np.ndarray) -> np.ndarray:
        return self.V.T @ (self.V @ x)

    def hadamard_dot(self, x: np.ndarray) -> np.ndarray:
        V = self.V
        R = (V * x) @ V.T  # V diag(x) V^T, M x M
        return np.einsum("mn,mn->n", V, R @ V)


def sparse_qp_objective_gradient(
    kernel: Any,
    X: np.ndarray,
    Z: np.ndarray,
    prior: PseudoPointPrior,
    result: SparsePEPResult,
    y: np.ndarray,
    projection: Any,
    objective: str = "evidence",
) -> tuple[float, np.ndarray, np.ndarray]:
    """QP's ``objective`` (``"evidence"``: eq. (110); ``"loo"``: ``sum_n log Z^_n``) at the
    converged pseudo-point QP sites ``result`` and its total gradient.

    Parameters
    ----------
    kernel, X, Z, prior:
        The kernel, training inputs, inducing inputs and
        :func:`~qpinfer.inference.sparse.pseudo_points.pseudo_point_prior` of the three.
    result:
        :func:`~qpinfer.inference.sparse.sites.run_sparse_pep` with ``projection`` on ``prior``,
        converged (the gradient assumes the fixed point).
    y:
        Labels in {-1, +1}.
    projection:
        The :class:`~qpinfer.inference.projections.QuantileMatching` projection (probit).
    objective:
        ``"evidence"`` or ``"loo"``.

    Returns
    -------
    value : float
        The objective.
    grad_theta : ndarray
        Its total derivative in ``kernel.theta``.
    grad_Z : ndarray
        Its total derivative in ``Z`` (the shape of ``Z``).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}; got {objective!r}")
    if not isinstance(projection, QuantileMatching):
        raise ValueError(
            "projection must be QP's QuantileMatching (pseudo-point QP); got "
            f"{type(projection).__name__}"
        )
    if projection.likelihood.smoothed_scale(0.0) is None:
        raise ValueError(
            "QP's own objectives with pseudo-points (qp_objective='evidence' or 'loo') need a "
            "likelihood whose Gaussian smoothing is a rescaling of itself (the probit); got "
            f"{projection.likelihood.name!r}: use qp_objective='ep' (sparse EP's "
            "hyperparameters, then QP at them)"
        )
    _check_kernel(kernel)
    post = result.posterior
    tau, nu = np.asarray(result.tau, np.float64), np.asarray(result.nu, np.float64)
    a, b, h = post.var, post.mean, prior.h
    proj = _ConditionalProjection(projection, h)  # checks: probit only
    clipped = _sparse_site_proposal(proj, b, a, tau.copy(), nu, y)[3]
    maps = _SparseLocalMaps(projection, a, b, tau, nu, h, y, objective, clipped)
    A = prior.A
    Linv = post.Linv if post.Linv is not None else _tri_inv(post.L, "B")
    V = Linv @ A
    sig = _LowRankSigma(V)
    om = adjoint(sig, a, b, maps.loc, maps.G_tau, maps.G_nu, objective, rtol=1e-11)[3]
    om_a, om_b, om_h = om[0], om[1], om[4]
    # Y = W A^T (N x M): T X = X - S A^T B^-1 A X; T^T A^T = A^T B^-1 = E
    Binv = Linv.T @ Linv
    E = V.T @ Linv

    def t_apply(Xm: np.ndarray) -> np.ndarray:
        return Xm - tau.reshape((-1,) + (1,) * (Xm.ndim - 1)) * (A.T @ (Binv @ (A @ Xm)))

    beta = nu - tau * b
    t_om_b = t_apply(om_b)
    Y = t_apply(om_a[:, None] * E)
    Y += 0.5 * (np.outer(beta, A @ t_om_b) + np.outer(t_om_b, A @ beta))
    Y -= om_h[:, None] * A.T
    if objective == "evidence":
        Y += 0.5 * np.outer(beta, A @ beta) - 0.5 * tau[:, None] * E
        value = float(result.log_marginal_likelihood)
    else:
        value = float(np.sum(maps.log_z))
    # tr(W dQff) through Qff = Kfu Kuu^-1 Kuf: weights 2 W Kfu Kuu^-1 and -1/2 sym(P G_fu)
    Luinv = _tri_inv(prior.Lu, "Kuu + jitter I")
    G_fu = 2.0 * (Y @ Luinv)
    G_uu = -0.5 * ((A.T @ Luinv).T @ G_fu)
    G_uu = 0.5 * (G_uu + G_uu.T)
    g_theta, g_Z = _contract_prior_gradient(kernel, X, Z, prior, G_fu, G_uu, om_h)
    return value, np.asarray(g_theta, np.float64), np.asarray(g_Z, np.float64)
