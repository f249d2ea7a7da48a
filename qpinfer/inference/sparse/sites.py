"""Pseudo-point Power EP and QP for classification (Bui et al., 2017, eqs. (20), (106)-(110)), O(N M^2).

Power EP approximates each likelihood by a factor of ``u`` that is rank one, ``t_n(u) = N~(w_n^T
u; g_n, v_n)`` (:mod:`qpinfer.inference.sparse.pseudo_points`), so every step costs O(M^2) per site.
The site update (``_sparse_site_proposal()``): the fractional cavity of ``a_n = w_n^T u`` (``tau_c
= 1/s_n - alpha tau_n``), the projection of the fractional tilted distribution of ``f_n`` under
``N(f_n | mu_c, s_c + h_n)`` -- eq. (20)'s ``d1 = dlog Z~/dmu``, ``d2 = d^2 log Z~/dmu^2`` --
mapped back to ``a_n`` (``mu_c + s_c d1``, ``s_c + s_c^2 d2``), and the site update of eqs.
(106)-(107) at full power, ``tau_new = -d2/(1 + s_c d2)/alpha`` (the same as
:func:`qpinfer.inference.site_update.site_proposal`'s ``(1/s_new - tau_c)/alpha`` but free of
cancellation when ``s_c ~ 0``, an input far from every inducing input); damping gives eqs.
(108)-(109), same fixed points. The sweeps are :func:`qpinfer.inference.site_loop.run_sites` with
the low-rank posterior of eqs. (119)-(120) (:class:`LowRankSiteRepresentation`: sequential sweeps
update ``B^-1`` by rank one, O(M^2) per site). The energy is eq. (110)
(:func:`qpinfer.inference.power_ep.power_ep_log_evidence` with the marginals of ``a_n``). With ``M =
N`` and ``Z = X`` (``h = 0``) this reduces to the full GP (EP / Power EP).

Gradient (:func:`sparse_pep_gradient`): the form of :mod:`qpinfer.inference.sparse.pseudo_points`
with ``eps_n = (d2 + d1^2)/(2 alpha)`` (``dF/dh_n``: the bracket of eq. (110) is stationary in the
marginal moments at a fixed point).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_solve

from qpinfer.inference.power_ep import power_ep_log_evidence
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.site_loop import SiteResult, SweepSettings, run_sites
from qpinfer.inference.site_update import MIN_SITE_PRECISION, clip_precision, resolve_floor
from qpinfer.inference.sparse.pseudo_points import (
    LowRankPosterior,
    PseudoPointPrior,
    _check_kernel,
    _contract_prior_gradient,
    _q_weights,
    low_rank_posterior,
)

__all__ = [
    "LowRankSiteRepresentation",
    "SparsePEPResult",
    "positive_branch_sites",
    "run_sparse_pep",
    "sparse_pep_gradient",
]


class _ConditionalProjection:
    """The projection for the site variable ``a_n = w_n^T u`` when the likelihood sees
    ``f_n | a_n ~ N(a_n, h_n)`` (eq. (20)).

    The fractional tilted distribution of ``f_n`` has cavity ``N(mu_c, s_c + h_n)``; with
    ``d1, d2`` the derivatives of its log normaliser in ``mu_c``, the new marginal of ``a_n`` is
    ``N(mu_c + s_c d1, s_c + s_c^2 d2)`` (eq. (20) projected on ``w_n``).

    QP (a :class:`~qpinfer.inference.projections.QuantileMatching` projection) takes one of two
    forms. Where the likelihood's Gaussian smoothing is a rescaling of itself
    (:meth:`qpinfer.Likelihood.smoothed_scale`, the probit) the tilted marginal of ``a_n`` is
    again that likelihood's tilt and its Wasserstein variance is exact (``_qp_ratio()``). For
    every other likelihood the marginal of ``a_n`` is no tilt a table holds, so QP projects the
    tilted marginal of ``f_n`` -- the one-dimensional tilt at the cavity ``N(mu_c, s_c + h_n)``,
    whose EP mean and sigma* the tables serve -- and carries the Gaussian conditional of ``a_n``
    given ``f_n``: ``d2 = (sigma*^2 - (s_c + h_n)) / (s_c + h_n)^2``. The two agree at
    ``h_n = 0`` (``M = N``, ``Z = X``: full QP).
    """

    def __init__(self, inner: Any, h: np.ndarray) -> None:
        self.inner = inner
        self.h = h
        self.power = float(getattr(inner, "power", 1.0))
        qp = isinstance(inner, QuantileMatching)
        #: QP on the marginal of ``a_n`` (the likelihood smooths into a rescaling of itself)
        self.wasserstein = qp and inner.likelihood.smoothed_scale(0.0) is not None
        #: QP on the marginal of ``f_n`` (every other likelihood)
        self.marginal_qp = qp and not self.wasserstein

    def derivatives(
        self,
        cavity_mean: np.ndarray,
        cavity_std: np.ndarray,
        y: np.ndarray,
        log_z: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(d1, d2, var_f)`` at the cavity (eq. (20)); for QP ``d2`` is replaced by the value
        that makes the new variance of ``a_n`` (``_qp_ratio()``), or of ``f_n``, sigma*^2.
        ``log_z``: :meth:`log_z_derivatives` at the same cavity, if the caller has them."""
        var_f = cavity_std * cavity_std + self.h
        if self.marginal_qp:  # EP's mean and sigma* of f_n's tilt, one lookup
            m, s = self.inner.project(cavity_mean, np.sqrt(var_f), y)
            return (m - cavity_mean) / var_f, (s * s - var_f) / (var_f * var_f), var_f
        d1, d2 = self.log_z_derivatives(cavity_mean, cavity_std, y) if log_z is None else log_z
        if self.wasserstein:
            r = _qp_ratio(self.inner, cavity_mean, cavity_std, self.h, y)
            s_c = cavity_std * cavity_std
            with np.errstate(divide="ignore", invalid="ignore"):
                d2 = np.where(s_c > 0, r * r * d2 + (r - 1.0) * (r + 1.0) / s_c, d2)
        return d1, d2, var_f

    def log_z_derivatives(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(d1, d2)``: the first two derivatives in ``mu_c`` of :meth:`log_normalizer` (the
        moments of the fractional tilted distribution of ``f_n``; QP's too: its site replaces
        ``d2`` afterwards, :meth:`derivatives`)."""
        var_f = cavity_std * cavity_std + self.h
        if self.wasserstein or self.marginal_qp:
            m, s = self.inner.likelihood.tilted_moments(cavity_mean, np.sqrt(var_f), y)
        else:
            m, s = self.inner.project(cavity_mean, np.sqrt(var_f), y)
        return (m - cavity_mean) / var_f, (s * s - var_f) / (var_f * var_f)

    def at(self, sites: slice) -> _ConditionalProjection:
        """The same projection for the sites ``sites`` only (their ``h``)."""
        if sites == slice(None):
            return self
        part = copy.copy(self)
        part.h = self.h[sites]
        return part

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        """``log ∫ N(f | mu_c, s_c + h) p(y | f)^alpha df`` (eqs. (116)-(118))."""
        return self.inner.log_normalizer(cavity_mean, np.sqrt(cavity_std * cavity_std + self.h), y)


def _qp_ratio(
    qp: QuantileMatching, cavity_mean: np.ndarray, cavity_std: np.ndarray, h: np.ndarray, y: Any
) -> np.ndarray:
    """``sigma*_a / sigma_EP,a`` for the site variable ``a_n`` (QP with pseudo-points).

    The tilted distribution of ``a_n`` is ``N(a | mu_c, s_c) p_h(y | a)`` with
    ``p_h(y | a) = ∫ N(f | a, h) Phi(y f) df = Phi(y a / sqrt(1 + h))``: a probit in the rescaled
    ``a' = a / sqrt(1 + h)``, whose cavity is ``N(mu_c / sqrt(1 + h), s_c / (1 + h))``. The
    Wasserstein projection (eq. (7)) scales with the variable, so the ratio sigma*/sigma_EP of
    ``a`` is the probit's ratio at the rescaled cavity: one table lookup (or exact sigma*).
    """
    scale = qp.likelihood.smoothed_scale(h)
    mu_r = cavity_mean / scale
    sd_r = cavity_std / scale
    _, s_qp = qp.project(mu_r, sd_r, y)
    _, s_ep = qp.likelihood.tilted_moments(mu_r, sd_r, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(s_ep > 0, s_qp / s_ep, 1.0)
    return np.minimum(r, 1.0)  # Theorem 2: sigma* <= sigma_EP (clamps interpolation round-off)


def _sparse_site_proposal(
    proj: _ConditionalProjection,
    post_mean: np.ndarray,
    post_var: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    y: np.ndarray,
    floor: float | None = MIN_SITE_PRECISION,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fractional cavity of ``a_n``, projection eq. (20), new site (eqs. (106)-(107) / alpha).

    The new site is written without cancellation, ``tau_new = -d2 / (1 + s_c d2) / alpha``,
    ``nu_new = (d1 - mu_c d2) / (1 + s_c d2) / alpha`` (eq. (107): ``1/v_new = -d2/(1 + s_c
    d2)``): an input far from every inducing input has ``s_c ~ ||w_n||^2 ~ 0`` and
    ``1/s_new - 1/s_c`` (qpinfer.inference.ep's generic form) would lose every digit. Returns
    ``(tau_new, nu_new, ok, clipped)`` as :func:`qpinfer.inference.site_update.site_proposal`
    (``floor``: its precision floor, ``None`` to keep negative precisions).
    """
    power = proj.power
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tau_c = 1.0 / post_var - power * tau
        nu_c = post_mean / post_var - power * nu
        ok = np.isfinite(tau_c) & np.isfinite(nu_c) & (tau_c > 0)
        s_c = 1.0 / np.where(ok, tau_c, 1.0)
        mu_c = np.where(ok, nu_c, 0.0) * s_c
        d1, d2, _ = proj.derivatives(mu_c, np.sqrt(s_c), y)
        denom = 1.0 + s_c * d2
        tau_new = -d2 / denom / power
        nu_new = (d1 - mu_c * d2) / denom / power
    ok &= np.isfinite(tau_new) & np.isfinite(nu_new) & (denom > 0)
    return tau_new, nu_new, *clip_precision(tau_new, ok, floor)


@dataclass
class SparsePEPResult(SiteResult):
    """Converged (or best) sites of pseudo-point Power EP and the posterior
    (:class:`~qpinfer.inference.sparse.pseudo_points.LowRankPosterior`) they imply."""


class LowRankSiteRepresentation:
    """The pseudo-point posterior (eqs. (119)-(120)) as the site loop's representation:
    ``refresh`` is :func:`~qpinfer.inference.sparse.pseudo_points.low_rank_posterior`, a function of
    ``(A, tau, nu)`` only -- site sums (:func:`~qpinfer.inference.sparse.pseudo_points.site_sums`, a
    reduce over any partition of the sites), an M x M Cholesky, then per-site marginals (a map) --
    so a distributed sweep can mirror it partition by partition; a sequential sweep keeps ``B^-1``
    and ``mean_v`` and updates them by rank one per site, O(M^2)."""

    def __init__(self, A: np.ndarray) -> None:
        self.A = A
        self.n_sites = A.shape[1]

    def refresh(self, tau: np.ndarray, nu: np.ndarray) -> LowRankPosterior:
        return low_rank_posterior(self.A, tau, nu)

    def sequential(self, tau: np.ndarray, nu: np.ndarray) -> _RankOneLowRankUpdates:
        return _RankOneLowRankUpdates(self.A, tau, nu)


class _RankOneLowRankUpdates:
    """``Sigma_v = B^-1`` and ``mean_v`` during a sequential sweep (recomputed at its start)."""

    def __init__(self, A: np.ndarray, tau: np.ndarray, nu: np.ndarray) -> None:
        post = low_rank_posterior(A, tau, nu)
        self.A = A
        self.Sigma = cho_solve((post.L, True), np.eye(A.shape[0]), check_finite=False)
        self.mv = post.mean_v.copy()

    def marginal(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``a_i`` (1-element arrays)."""
        a = self.A[:, i]
        self.Sa = self.Sigma @ a
        self.s = float(a @ self.Sa)
        self.mu = float(a @ self.mv)
        return np.array([self.mu]), np.array([self.s])

    def apply(self, i: int, d_tau: float, d_nu: float) -> bool:
        """Rank-one change of site ``i`` (Sherman-Morrison); refused (``False``, the site keeps
        its old value) where it would make ``B`` indefinite (a negative site precision of a
        likelihood that is not log-concave), else applied."""
        Sa = self.Sa
        denom = 1.0 + d_tau * self.s
        if not denom > 0:
            return False
        self.mv += Sa * ((d_nu - d_tau * self.mu) / denom)
        self.Sigma -= (d_tau / denom) * np.outer(Sa, Sa)
        return True


class _PseudoPointSites:
    """The site update of :func:`run_sparse_pep` (``_sparse_site_proposal()``) and its energy
    eq. (110)."""

    def __init__(self, projection: Any, h: np.ndarray, y: np.ndarray) -> None:
        self.conditional = _ConditionalProjection(projection, h)
        self.y = y
        self.floor = resolve_floor("auto", projection)  # None: not log-concave, negatives kept

    def propose(self, sites: slice, mean, var, tau, nu):
        proj = self.conditional.at(sites)
        return _sparse_site_proposal(proj, mean, var, tau, nu, self.y[sites], self.floor)

    def log_evidence(self, post: LowRankPosterior, tau: np.ndarray, nu: np.ndarray):
        return power_ep_log_evidence(post, tau, nu, self.y, self.conditional)


def positive_branch_sites(
    A: np.ndarray, y: np.ndarray, likelihood: Any
) -> tuple[np.ndarray, np.ndarray] | None:
    """The sites ``(tau, nu)`` to start a likelihood with two branches (the square link) on its
    positive one, ``None`` (zero sites) for every other likelihood.

    The rule of the dense :func:`qpinfer.inference.laplace.positive_branch_start` on the site
    variables ``a_n``: each term at its own positive mode ``sqrt(y)`` with precision 4 (``y >=
    1``) or 2 (``y = 0``), shifted by the smallest ``c`` in ``0, 1/2, 1, 2, ...`` that makes the
    low-rank posterior mean of ``a_n`` positive wherever ``y_n >= 1``. With ``M = N``, ``Z = X``
    the dense start's sites exactly."""
    if not likelihood.two_branches:
        return None
    tau = np.where(y > 0, 4.0, 2.0)
    for c in [0.0] + [0.5 * 2.0**k for k in range(12)]:
        nu = tau * (np.sqrt(y) + c)
        mean = low_rank_posterior(A, tau, nu).mean
        if np.all(np.isfinite(mean)) and np.all(mean[y > 0] > 0):
            return tau, nu
    raise ValueError(
        "could not find a starting point with f > 0 at every site with y >= 1 (are the "
        "inducing inputs far from the data?)"
    )


def run_sparse_pep(
    A: np.ndarray,
    h: np.ndarray,
    y: np.ndarray,
    projection: Any,
    *,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    schedule: str = "parallel",
    damping: float | None = None,
    max_iter: int = 1000,
    tol: float = 1e-6,
    compute_evidence: bool = True,
) -> SparsePEPResult:
    """Pseudo-point Power EP (eqs. (20), (106)-(109)) to convergence; energy eq. (110).

    Parameters
    ----------
    A, h:
        ``Lu^-1 Kuf`` (M x N) and ``diag(Kff - Qff)``
        (:func:`~qpinfer.inference.sparse.pseudo_points.pseudo_point_prior`).
    y:
        Observations (probit: -1/+1).
    projection:
        The local update of ``f_n``: :class:`qpinfer.inference.power_ep.PowerMomentMatching`
        (``power`` is alpha), :class:`qpinfer.MomentMatching` (alpha = 1), or
        :class:`qpinfer.QuantileMatching` (QP with pseudo-points, probit: the variance
        of ``a_n`` is the Wasserstein sigma* of its tilted marginal, ``_qp_ratio()``).
    init, schedule, damping, max_iter, tol:
        As :func:`qpinfer.inference.ep.run_ep`: ``"parallel"`` (damping default 0.5) or
        ``"sequential"`` (default 1.0); stop when the RMS change of ``(tau, nu)`` over a sweep is
        below ``tol``, else a :class:`~qpinfer.ConvergenceWarning` and the sites with
        the smallest change. The parallel schedule halves its damping (down to 1/64) whenever 20
        sweeps pass without a new smallest change: damping does not move the fixed points, and
        undamped-enough parallel updates oscillate on separable data.
    """
    A = np.asarray(A, dtype=np.float64)
    n = A.shape[1]
    h = np.asarray(h, dtype=np.float64)
    y = np.asarray(y)
    if h.shape != (n,) or y.shape != (n,):
        raise ValueError(f"h and y must have shape ({n},), got {h.shape} and {y.shape}")
    floor = resolve_floor("auto", projection)  # none (negative sites kept): not log-concave
    settings = SweepSettings.checked(schedule, damping, max_iter, tol, floor, True)
    sites = _PseudoPointSites(projection, h, y)
    result_type, what = SparsePEPResult, "sparse Power EP"
    return run_sites(
        LowRankSiteRepresentation(A), sites, init, settings, compute_evidence, result_type, what
    )


def sparse_pep_gradient(
    kernel: Any,
    X: np.ndarray,
    Z: np.ndarray,
    prior: PseudoPointPrior,
    result: SparsePEPResult,
    y: np.ndarray,
    projection: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of eq. (110) in the log kernel hyperparameters and ``Z`` at a fixed point.

    ``dF = 1/2 tr(W dQff) + eps^T d diag(Kff)`` with ``eps_n = (d2 + d1^2)/(2 alpha)`` (the
    derivative of the bracket of eq. (110) in the conditional variance ``h_n``; the sites and
    the marginal moments contribute nothing at a fixed point), see the module docstring.
    """
    _check_kernel(kernel)
    alpha = float(getattr(projection, "power", 1.0))
    post = result.posterior
    tau, nu = result.tau, result.nu
    proj = _ConditionalProjection(projection, prior.h)
    cav_var_a = result.cavity_var
    d1, d2, _ = proj.derivatives(result.cavity_mean, np.sqrt(cav_var_a), y)
    eps = (d2 + d1 * d1) / (2.0 * alpha)
    b = nu - tau * post.mean
    G_fu, G_uu = _q_weights(prior, post, tau, b, eps)
    return _contract_prior_gradient(kernel, X, Z, prior, G_fu, G_uu, eps)
