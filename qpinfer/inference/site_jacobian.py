"""The derivatives of a QP site update in its cavity, for QP's total hyperparameter gradient.

QP's site update (Zhang et al., 2020, eq. (6)) maps a cavity ``N(m, v)`` to the Gaussian with EP's tilted
mean ``m^`` (eq. (5)) and QP's variance ``V* = sigma*^2`` (eq. (7)). The implicit differentiation
of QP's fixed point (:mod:`qpinfer.inference.total_gradient`) needs, at every site, the
derivatives of ``log Z^``, ``m^`` and ``V*`` in ``(m, v)``. With ``Z(m, v) = int p(y | f) N(f | m,
v) df``, ``g = dlog Z/dm`` and ``h = d^2 log Z/dm^2`` (so ``m^ = m + v g``, ``s^2 = v + v^2 h``) and
the heat equation ``dZ/dv = Z_mm / 2``::

    dlog Z/dv = (h + g^2) / 2
    dm^/dm    = s^2 / v
    dm^/dv    = g + v (h_m / 2 + g h),     h_m = d(s^2)/dm / v^2 = kappa_3 / v^3

``kappa_3`` the tilted third central moment. The derivatives of sigma* come from the sigma*
source's own: a table's lookup (:meth:`qpinfer.tables.SigmaTableReader.sigma_qp_gradient`) or
the exact kernel's quadrature (:func:`qpinfer.sigma.derivatives.sigma_qp_gradient`, which also
gives ``kappa_3``). Where no source has them -- ``d(s^2)/dm`` under a table, a projection's
table without derivatives -- a five-point central difference (relative step :data:`FD_STEP` of
the cavity std; truncation ``O(FD_STEP^4)``, rounding ``~1e-16 / FD_STEP``, so ~1e-12
relative, far below what an L-BFGS search or a 1e-6 gradient check can see).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from qpinfer.inference.projections import MomentMatching
from qpinfer.sigma import sigma_qp_gradient
from qpinfer.sigma.derivatives import central_difference

__all__ = [
    "FD_STEP",
    "CavityDerivatives",
    "SiteMaps",
    "cavity_derivatives",
    "scale_derivatives",
]

#: relative step (in units of the cavity std) of the five-point differences
FD_STEP: float = 1e-3


@dataclass
class CavityDerivatives:
    """``log Z^``, EP's tilted mean ``mean`` and QP's variance ``var`` at cavities ``N(m, v)``,
    each with its partial derivatives in ``m`` and ``v`` (arrays over sites)."""

    log_z: np.ndarray
    log_z_m: np.ndarray
    log_z_v: np.ndarray
    mean: np.ndarray
    mean_m: np.ndarray
    mean_v: np.ndarray
    var: np.ndarray
    var_m: np.ndarray
    var_v: np.ndarray


def _sigma_star_gradient(projection: Any, m: np.ndarray, sd: np.ndarray, y: np.ndarray, ep_sd):
    """``(sigma*, dsigma*/dm, dsigma*/dsd, d(s^2)/dm)``, the last the derivative of EP's tilted
    variance ``s^2`` (std ``ep_sd``) where the source gives it (NaN elsewhere, or ``None``): from
    the projection's table (:meth:`~qpinfer.tables.SigmaTableReader.sigma_qp_gradient`, the
    lookup's derivatives, and those of the EP std its cells store), else from the exact kernel's
    quadrature (:func:`qpinfer.sigma.sigma_qp_gradient`, whose panels also give the tilted third
    cumulant ``kappa_3 = v d(s^2)/dm``), else five-point differences of ``project`` (EP's
    projection, :class:`~qpinfer.MomentMatching`: its std in sigma*'s place, whose difference
    in ``m`` is then also the last)."""
    table = getattr(projection, "table", None)
    if table is not None and hasattr(table, "sigma_qp_gradient"):
        s, s_m, s_sd, std_m = table.sigma_qp_gradient(m, sd, y, ep_std_slope=True)
        return s, s_m, s_sd, 2.0 * ep_sd * np.asarray(std_m, np.float64)
    ep = isinstance(projection, MomentMatching)
    if table is None and not ep:
        s, s_m, s_sd, kappa3 = sigma_qp_gradient(
            projection.likelihood, m, sd, y, third_cumulant=True
        )
        return s, s_m, s_sd, np.asarray(kappa3, np.float64) / (sd * sd)
    _, s = projection.project(m, sd, y)
    h = 2.0 * FD_STEP * sd  # the five-point stencil of step FD_STEP sd
    ds_dm = central_difference(lambda x: projection.project(x, sd, y)[1], m, h)
    ds_dsd = central_difference(lambda x: projection.project(m, x, y)[1], sd, h)
    return s, ds_dm, ds_dsd, 2.0 * ep_sd * ds_dm if ep else None


def cavity_derivatives(projection: Any, m: np.ndarray, v: np.ndarray, y: np.ndarray):
    """:class:`CavityDerivatives` of QP's site update (``projection`` a
    :class:`~qpinfer.inference.projections.QuantileMatching`) at cavity means ``m`` and
    variances ``v``."""
    lik = projection.likelihood
    sd = np.sqrt(v)
    y = np.broadcast_to(y, np.shape(m))
    log_z, mean, ep_sd = lik.ep_moments(m, sd, y)
    mean, ep_sd = np.asarray(mean, np.float64), np.asarray(ep_sd, np.float64)
    ep_var = ep_sd**2
    g = (mean - m) / v
    h = (ep_var - v) / (v * v)
    s, s_m, s_sd, ep_var_m = _sigma_star_gradient(projection, m, sd, y, ep_sd)
    if ep_var_m is None:
        ep_var_m = np.full(np.shape(m), np.nan)
    todo = ~np.isfinite(ep_var_m)
    if todo.any():  # d(s^2)/dm = kappa_3 / v, where no source gave it: differences of EP's
        ep_var_m[todo] = central_difference(
            lambda x: np.asarray(lik.tilted_moments(x, sd[todo], y[todo])[1]) ** 2,
            m[todo],
            2.0 * FD_STEP * sd[todo],
        )
    s = np.asarray(s, np.float64)
    return CavityDerivatives(
        log_z=np.asarray(log_z, np.float64),
        log_z_m=g,
        log_z_v=0.5 * (h + g * g),
        mean=mean,
        mean_m=ep_var / v,
        mean_v=g + v * (0.5 * ep_var_m / (v * v) + g * h),
        var=s * s,
        var_m=2.0 * s * np.asarray(s_m, np.float64),
        var_v=s * np.asarray(s_sd, np.float64) / sd,
    )


def scale_derivatives(d: CavityDerivatives, m: np.ndarray, v: np.ndarray, y: np.ndarray):
    """``(dlog Z^, dm^, dV*)`` in ``log(scale)`` of a location-scale likelihood
    ``p(y | f) = t((y - f) / s) / s`` (Student-t noise) at fixed cavities.

    ``m^ - y`` and ``sqrt(V*)`` are homogeneous of degree one in ``(m - y, sqrt(v), s)`` and
    ``Z`` of degree -1, so Euler's identity turns the cavity derivatives into the scale's:
    ``s dm^/ds = (m^ - y) - (m - y) m^_m - 2 v m^_v`` and likewise for the others.
    """
    r = m - y
    return (
        -1.0 - r * d.log_z_m - 2.0 * v * d.log_z_v,
        (d.mean - y) - r * d.mean_m - 2.0 * v * d.mean_v,
        2.0 * d.var - r * d.var_m - 2.0 * v * d.var_v,
    )


class SiteMaps:
    """Per-site coefficients of QP's new sites ``G`` (eq. (6)) and of a local objective ``h``
    in the four differentials ``(da, db, dtau~, dnu~)`` (rows) at posterior marginals ``N(b, a)``
    and sites ``(tau~, nu~)``, plus the explicit derivatives in a likelihood parameter
    (``extra``: Student-t's log scale). ``objective``: ``"evidence"`` adds eq. (4)'s site terms
    to ``h = dlog Z^``; ``fixed`` marks sites held at the precision ``floor`` (``None``: those
    whose eq. (6) precision is below it)."""

    def __init__(self, projection, a, b, tau, nu, y, objective: str, fixed, floor) -> None:
        tau_c = 1.0 / a - tau
        nu_c = b / a - nu
        v = 1.0 / tau_c
        m = nu_c * v
        d = cavity_derivatives(projection, m, v, y)
        if fixed is None:  # eq. (6)'s precision below the floor, from the same sigma*
            fixed = np.zeros(a.shape, bool) if floor is None else (1.0 / d.var - tau_c < floor)
        self.derivatives, self.cavity = d, (m, v)
        zero = np.zeros_like(a)
        one = np.ones_like(a)
        d_tau_c = np.stack([-1.0 / (a * a), zero, -one, zero])
        d_nu_c = np.stack([-b / (a * a), 1.0 / a, zero, -one])
        d_v = -v * v * d_tau_c
        d_m = v * d_nu_c - m * v * d_tau_c
        d_var = d.var_m * d_m + d.var_v * d_v
        d_mean = d.mean_m * d_m + d.mean_v * d_v
        inv = 1.0 / d.var
        self.G_tau = -inv * inv * d_var - d_tau_c
        self.G_nu = inv * d_mean - d.mean * inv * inv * d_var - d_nu_c
        self.G_tau[:, fixed] = 0.0  # held at the floor; nu~ still follows eq. (6)
        h = d.log_z_m * d_m + d.log_z_v * d_v
        if objective == "evidence":
            h = h + (nu_c / tau_c) * d_nu_c - (nu_c * nu_c / (2 * tau_c**2) + 0.5 / tau_c) * d_tau_c
            h[1] -= b / a
            h[0] += b * b / (2 * a * a) - 0.5 / a
        self.h = h
        self.fixed = fixed

    def extra(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(dG_tau, dG_nu, dh)`` in log(scale) of a location-scale likelihood."""
        d, (m, v) = self.derivatives, self.cavity
        d_log_z, d_mean, d_var = scale_derivatives(d, m, v, y)
        inv = 1.0 / d.var
        g_tau = np.where(self.fixed, 0.0, -inv * inv * d_var)
        g_nu = inv * d_mean - d.mean * inv * inv * d_var
        return g_tau, g_nu, d_log_z
