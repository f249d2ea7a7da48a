"""QP's objectives with their total hyperparameter gradients, by implicit differentiation.

QP's sites ``s = (tau~, nu~)`` are a fixed point ``s = G(s, theta)`` of the site update (paper
000 eq. (6) with sigma* of eq. (7)), not a stationary point of EP's energy, so the derivative of an
objective ``L(s, theta)`` with the sites held fixed (R&W eq. (5.27),
:mod:`qpinfer.inference.evidence`) is not its total derivative. The implicit function theorem
gives it with one adjoint solve::

    (I - dG/ds)^T lam = dL/ds,      dL/dtheta = dL/dtheta|_s + lam^T dG/dtheta|_s

Two objectives (``objective``):

* ``"evidence"`` -- eq. (4) at QP's sites, ``Phi(s) + sum_i h_i`` with ``Phi = log int N(f | 0, K)
  prod exp(-tau~ f^2/2 + nu~ f) df`` and ``h_i = log Z^_i - A(1/Sigma_ii, mu_i/Sigma_ii) +
  A(tau_c, nu_c)`` (``A(tau, nu) = nu^2/(2 tau) - log(tau)/2``), the same value as
  :func:`qpinfer.inference.evidence.log_evidence`;
* ``"loo"`` -- QP's leave-one-out predictive ``sum_i log p(y_i | cavity_i) = sum_i log Z^_i``
  (the cavity is QP's approximation to ``p(f_i | y_-i)``; GPML's ``infLOO``, Sundararajan and
  Keerthi 2001), consistent with any projection.

Both depend on the sites through the posterior marginals ``a = diag Sigma``, ``b = mu`` (global:
``da = -(Sigma o Sigma) dtau~``, ``db = Sigma (dnu~ - mu o dtau~)``) and through each site's own
cavity (local); so does ``G``. The local parts are per-site coefficients
(:mod:`qpinfer.inference.site_jacobian`), the global ones products with ``Sigma`` and ``Sigma o
Sigma``; the adjoint system (2N unknowns) is solved by GMRES with these O(N^2) products (a dense
LU if GMRES stalls; :class:`~qpinfer.inference.site_chord.SiteJacobian`). The kernel hyperparameters enter through ``a`` and ``b`` only:
``d Sigma = A^T dK A``, ``d mu = A^T dK alpha`` (``A = K^-1 Sigma = I - (K + S~^-1)^-1 K``,
``alpha = K^-1 mu``), so with ``omega = dL/d(a, b) + lam^T dG/d(a, b)`` the gradient is one
contraction ``tr(dK W)``, ``W = [R&W 5.27's matrix] + A diag(omega_a) A^T + sym(alpha (A
omega_b)^T)`` -- three O(N^3) matrix products beyond EP's gradient.

A site precision that the loop clipped to the floor is a constant of the fixed point (its row of
``dG`` is zero); its ``nu~`` still follows eq. (6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.inference.site_chord import DenseCovariance, SiteJacobian, covariances
from qpinfer.inference.site_jacobian import SiteMaps
from qpinfer.inference.site_update import resolve_floor

__all__ = ["OBJECTIVES", "adjoint", "qp_objective_gradient"]

#: QP's own hyperparameter objectives
OBJECTIVES: tuple[str, ...] = ("evidence", "loo")


def adjoint(
    cov: Any,
    a: np.ndarray,
    b: np.ndarray,
    local: np.ndarray,
    G_tau: np.ndarray,
    G_nu: np.ndarray,
    objective: str,
    rtol: float = 1e-10,
) -> tuple[SiteJacobian, np.ndarray, np.ndarray, np.ndarray]:
    """The adjoint solve ``(I - dG/ds)^T lam = dL/ds`` at QP's fixed point, dense or low rank.

    ``cov`` has the products with ``Sigma`` and ``Sigma o Sigma`` (``dot``, ``hadamard_dot``);
    ``a``, ``b`` are the posterior marginals; ``local`` (rows ``a, b, tau, nu`` and any more
    differentials) holds the objective's local derivatives and ``G_tau``, ``G_nu`` (rows alike)
    the new sites'. ``dL/ds`` is the total one (through ``a``, ``b`` and locally) plus, for
    ``objective="evidence"``, Phi's own. Returns the site update's
    :class:`~qpinfer.inference.site_chord.SiteJacobian`, ``lam`` split into its ``tau`` and
    ``nu`` halves, and ``omega = local + G_tau lam_tau + G_nu lam_nu`` (``dL/d(a, b, ...)`` in
    total, row by row); GMRES solves to ``rtol``."""
    hb_sigma = cov.dot(local[1])
    rhs_t = local[2] - cov.hadamard_dot(local[0]) - b * hb_sigma
    rhs_n = local[3] + hb_sigma
    if objective == "evidence":
        rhs_t = rhs_t - 0.5 * (a + b * b)
        rhs_n = rhs_n + b
    jacobian = SiteJacobian(cov, b, G_tau, G_nu)
    lam = jacobian.solve(np.concatenate([rhs_t, rhs_n]), transpose=True, rtol=rtol)
    n = b.size
    lt, ln = lam[:n], lam[n:]
    return jacobian, lt, ln, local + G_tau * lt + G_nu * ln


def qp_objective_gradient(
    kernel: Any,
    X: np.ndarray,
    K: np.ndarray,
    y: np.ndarray,
    result: Any,
    projection: Any,
    objective: str = "evidence",
    clipped: np.ndarray | None = None,
    scale_parameter: bool = False,
    return_jacobian: bool = False,
) -> tuple[float, np.ndarray] | tuple[float, np.ndarray, SiteJacobian]:
    """QP's ``objective`` (``"evidence"`` or ``"loo"``, see above) at the converged sites of
    ``result`` (from :func:`qpinfer.inference.ep.run_ep` with ``projection`` on ``K = kernel(X)``)
    and its total gradient in ``kernel.theta`` -- with ``scale_parameter`` followed by the
    derivative in ``log(scale)`` of a location-scale likelihood (Student-t noise).

    ``clipped`` marks sites held at the precision floor (default: those whose update eq. (6)
    would take below :data:`~qpinfer.inference.site_update.MIN_SITE_PRECISION`, for a
    log-concave likelihood; decided from the same sigma* as the derivatives, the value
    :func:`~qpinfer.inference.site_update.site_proposal` clips with). ``return_jacobian``
    appends the site update's :class:`~qpinfer.inference.site_chord.SiteJacobian` (the
    adjoint's), for :func:`~qpinfer.inference.site_chord.chord_start` at the next
    hyperparameters.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}; got {objective!r}")
    post = result.posterior
    tau, nu = np.asarray(result.tau, np.float64), np.asarray(result.nu, np.float64)
    a, b = post.var, post.mean
    floor = resolve_floor("auto", projection)
    if clipped is not None:
        clipped = np.asarray(clipped, bool)
    maps = SiteMaps(projection, a, b, tau, nu, y, objective, clipped, floor)
    C, A, Sigma = covariances(post, K)
    cov = DenseCovariance(Sigma)  # Sigma o Sigma once, for the right-hand side and the adjoint
    jacobian, lt, ln, omega = adjoint(cov, a, b, maps.h, maps.G_tau, maps.G_nu, objective)
    omega_a, omega_b = omega[0], omega[1]
    alpha = post.b  # K^-1 mu
    W = (A * omega_a[None, :]) @ A.T
    u = A @ omega_b
    W += 0.5 * (np.outer(alpha, u) + np.outer(u, alpha))
    if objective == "evidence":
        W += 0.5 * (np.outer(alpha, alpha) - C)
        value = float(result.log_marginal_likelihood)  # eq. (4), run_ep's own
    else:
        value = float(np.sum(maps.derivatives.log_z))
    grad = np.asarray(kernel.gradient_contract(X, W, K), dtype=np.float64)
    if scale_parameter:
        g_tau, g_nu, d_log_z = maps.extra(y)
        grad = np.append(grad, np.sum(d_log_z) + lt @ g_tau + ln @ g_nu)
    return (value, grad, jacobian) if return_jacobian else (value, grad)
