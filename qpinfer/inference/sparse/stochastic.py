"""Minibatch pseudo-point EP and QP: stochastic EP with one tied site, O(B M^2) a step.

Stochastic EP (Li, Hernandez-Lobato and Turner, NeurIPS 2015) in the pseudo-point Power EP family
of Bui et al. (2017): the N rank-one sites of :mod:`qpinfer.inference.sparse.sites` are tied into one
*average site* ``tbar(v) = exp(-1/2 v^T Lam v + eta^T v)`` of the whitened pseudo-points
(``u = Lu v``, prior ``v ~ N(0, I)``), so the posterior is ``q(v) ∝ N(v | 0, I) tbar(v)^N`` and
what is kept is O(M^2), whatever N. Every data point has the same cavity ``q / tbar^alpha``
(precision ``I + (N - alpha) Lam``, shift ``(N - alpha) eta``: :func:`cavity_of`); a minibatch
of B points takes the marginal of ``a_n = A[:, n]^T v`` under it, projects the fractional tilted
distribution of ``f_n | a_n ~ N(a_n, h_n)`` as the full-batch sweep does
(``qpinfer.inference.sparse.sites._ConditionalProjection``: EP, Power EP, or QP's
Wasserstein variance from the sigma* tables), forms each point's new rank-one site
``tau_n a_n a_n^T, nu_n a_n`` (eqs. (106)-(107)) and moves the average site toward the batch's
mean site: ``Lam <- (1 - rho) Lam + rho mean_B(tau a a^T)`` (:func:`average_site_step`). With
``rho = B / N`` this is SEP's update of every point in the batch.

Hyperparameters and inducing inputs: with ``tbar`` held in whitened coordinates, the prior,
posterior and cavity of ``v`` do not depend on them, and the Power EP energy of the tied sites
(eq. (110) with every site equal) depends on them only through its data term,
``F = const + (1/alpha) sum_n log Z~_n``, ``Z~_n = ∫ N(f | mu_n, s_n + h_n) p(y_n | f)^alpha df``
with ``mu_n = A_n^T m_c``, ``s_n = A_n^T S_c A_n``, ``h_n = k_nn - |A_n|^2``. A sum over data
points: ``N/B`` times a minibatch's sum is an unbiased estimate of its gradient (SVGP's whitened
ELBO is its ``alpha -> 0`` limit). Its gradient (:func:`batch_statistics`): with ``d1, d2`` the
first two derivatives of ``log Z~_n`` in ``mu_n`` (EP's also for QP: the objective is the energy
at QP's sites, as ``qp_objective="evidence"``) and ``e_n = d2 + d1^2``,
``dF = (1/alpha) sum_n [d1 m_c + e_n (S_c - I) A_n]^T dA_n + e_n/2 dk_nn``;
``A = Lu^-1 Kuf`` gives the weights ``G_fu = G_A^T Lu^-1`` on ``dKfu`` and
``G_uu = -sym(Lu^-T Phi(G_A A^T) Lu^-1)`` on ``dKuu`` (``Phi``: the lower triangle with half its
diagonal, the derivative of the Cholesky factor), contracted by the kernel as the full-batch
gradient is (``qpinfer.inference.sparse.pseudo_points._contract_prior_gradient``).

Every likelihood: the site precisions are floored at ``MIN_SITE_PRECISION`` for a log-concave
likelihood and kept as they are (negative ones too) for one that is not (Student-t), as the
full-batch sweeps do; then the average site precision ``Lam`` may be indefinite, and the caller
keeps the posterior precision ``I + N Lam`` positive definite (:func:`proper_site_step`
halves the step where it would not be). A location-scale likelihood ``p(y | f) = p0((y - f)/s)/s``
(Student-t) also gives the energy's derivative in ``log s`` (``scale_gradient``): at fixed
cavities, ``d log Z~_n / d log s = -((m - mu)(m - y) + v) / sigma^2`` with ``(m, v)`` the tilted
mean and variance of ``f_n`` at its cavity ``N(mu, sigma^2)``
(:mod:`qpinfer.estimators.student_t_scale`), alpha = 1.

A batch's statistics are sums over its rows, so a batch may be cut into parts computed anywhere
(another process, a dask worker) and added in a fixed order: the same numbers whichever way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_solve

from qpinfer.inference.site_update import resolve_floor
from qpinfer.inference.sparse.pseudo_points import (
    PseudoPointPrior,
    _chol,
    _contract_prior_gradient,
    _tri_inv,
    inducing_factor,
    site_sums,
    whitened_cross,
)
from qpinfer.inference.sparse.sites import _ConditionalProjection

__all__ = [
    "BatchStats",
    "Cavity",
    "TiedSite",
    "average_site_step",
    "batch_statistics",
    "cavity_of",
    "posterior_of",
    "proper_site_step",
    "tied_energy",
]


@dataclass
class TiedSite:
    """The average site of one data point in whitened coordinates: precision ``prec`` (M x M)
    and shift ``shift`` (M)."""

    prec: np.ndarray
    shift: np.ndarray

    @classmethod
    def zero(cls, m: int) -> TiedSite:
        """No information yet: the posterior is the prior."""
        return cls(np.zeros((m, m)), np.zeros(m))


@dataclass
class Cavity:
    """A Gaussian of ``v`` with precision ``P = L L^T``: ``Linv = L^-1``, mean ``P^-1 shift``."""

    L: np.ndarray
    Linv: np.ndarray
    mean: np.ndarray

    def half_logdet(self) -> float:
        """``log det P / 2``."""
        return float(np.sum(np.log(np.diag(self.L))))


def _gaussian(weight: float, site: TiedSite) -> Cavity:
    """``N(0, I) tbar^weight`` as a :class:`Cavity`."""
    P = weight * site.prec
    P[np.diag_indices_from(P)] += 1.0
    L = _chol(P, "I + N Lam (the tied site's posterior precision)")
    mean = cho_solve((L, True), weight * site.shift, check_finite=False)
    return Cavity(L=L, Linv=_tri_inv(L, "I + N Lam"), mean=mean)


def cavity_of(site: TiedSite, n: int, power: float) -> Cavity:
    """The cavity ``q / tbar^alpha`` every data point shares: ``N(0, I) tbar^(N - alpha)``."""
    return _gaussian(n - power, site)


def posterior_of(site: TiedSite, n: int) -> Cavity:
    """The posterior ``q(v) = N(0, I) tbar^N``."""
    return _gaussian(float(n), site)


@dataclass
class BatchStats:
    """Sums over the rows of a batch (or of a part of it: they add)."""

    rows: int
    prec_sum: np.ndarray  # sum_n tau_n a_n a_n^T
    shift_sum: np.ndarray  # sum_n nu_n a_n
    log_z_sum: float  # sum_n log Z~_n / alpha
    grad_theta: np.ndarray | None
    grad_Z: np.ndarray | None
    skipped: int  # rows whose site update failed (no finite, proper site): left out of the sums
    grad_log_scale: float | None = None  # a location-scale likelihood's d/dlog(scale)

    def __add__(self, other: BatchStats) -> BatchStats:
        def add(a, b):
            return None if a is None else a + b

        return BatchStats(
            self.rows + other.rows,
            self.prec_sum + other.prec_sum,
            self.shift_sum + other.shift_sum,
            self.log_z_sum + other.log_z_sum,
            add(self.grad_theta, other.grad_theta),
            add(self.grad_Z, other.grad_Z),
            self.skipped + other.skipped,
            add(self.grad_log_scale, other.grad_log_scale),
        )


def batch_statistics(
    kernel: Any,
    Z: np.ndarray,
    jitter: float,
    cavity: Cavity,
    projection: Any,
    X: np.ndarray,
    y: np.ndarray,
    gradient: bool = True,
    scale_gradient: bool = False,
) -> BatchStats:
    """The new sites of the rows ``(X, y)`` at ``cavity`` and the energy's gradient there.

    ``projection`` is the local update of ``f_n`` (as
    :func:`~qpinfer.inference.sparse.sites.run_sparse_pep`'s); the gradient is in the kernel's
    log hyperparameters and ``Z``, summed over the rows (unscaled; the module docstring). A row
    whose site update fails (no finite, proper site) is left out of the site sums and of the
    gradient, and counted in ``skipped``. ``scale_gradient``: also the derivative in the log
    noise scale of a location-scale likelihood (alpha = 1; the module docstring). O(B M^2 + B M
    D)."""
    Kuu, Lu, jit = inducing_factor(kernel, Z, jitter)
    Kuf = kernel(Z, X)
    kdiag = kernel.diag(X)
    A, h = whitened_cross(Lu, Kuf, kdiag)
    V = cavity.Linv @ A
    s_c = np.maximum(np.einsum("mn,mn->n", V, V), np.finfo(np.float64).tiny)
    mu_c = cavity.mean @ A
    proj = _ConditionalProjection(projection, h)
    power = proj.power
    e1, e2 = proj.log_z_derivatives(mu_c, np.sqrt(s_c), y)  # the energy's (EP's, also for QP)
    d1, d2 = proj.derivatives(mu_c, np.sqrt(s_c), y, log_z=(e1, e2))[:2]  # the site's
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        denom = 1.0 + s_c * d2
        tau = -d2 / denom / power
        nu = (d1 - mu_c * d2) / denom / power
    ok = np.isfinite(tau) & np.isfinite(nu) & (denom > 0)
    floor = resolve_floor("auto", projection)  # None: not log-concave, negative sites kept
    tau = np.where(ok, tau if floor is None else np.maximum(tau, floor), 0.0)
    nu = np.where(ok, nu, 0.0)
    prec_sum, shift_sum = site_sums(A, tau, nu)
    log_z = proj.log_normalizer(mu_c, np.sqrt(s_c), y) / power
    grad_theta = grad_Z = grad_log_scale = None
    if scale_gradient:  # tilted moments of f_n: m = mu + var_f e1, v = var_f + var_f^2 e2
        var_f = s_c + h
        m = mu_c + var_f * e1
        d_log_s = -((m - mu_c) * (m - y) + var_f + var_f * var_f * e2) / var_f
        grad_log_scale = float(np.sum(d_log_s[ok]))
    if gradient:
        e = np.where(ok, (e2 + e1 * e1) / power, 0.0)
        e1 = np.where(ok, e1, 0.0)
        ScA = cavity.Linv.T @ V  # S_c A
        G_A = np.outer(cavity.mean, e1 / power) + (ScA - A) * e
        Luinv = _tri_inv(Lu, "Kuu + jitter I")
        G_fu = G_A.T @ Luinv
        C = np.tril(G_A @ A.T)
        C[np.diag_indices_from(C)] *= 0.5
        G_uu = -(Luinv.T @ C @ Luinv)
        G_uu = 0.5 * (G_uu + G_uu.T)
        prior = PseudoPointPrior(Kuu=Kuu, Kuf=Kuf, Lu=Lu, A=A, kdiag=kdiag, h=h, jitter=jit)
        grad_theta, grad_Z = _contract_prior_gradient(kernel, X, Z, prior, G_fu, G_uu, e / 2.0)
    return BatchStats(
        rows=int(X.shape[0]),
        prec_sum=prec_sum,
        shift_sum=shift_sum,
        log_z_sum=float(np.sum(log_z[ok])),
        grad_theta=grad_theta,
        grad_Z=grad_Z,
        skipped=int(np.count_nonzero(~ok)),
        grad_log_scale=grad_log_scale,
    )


def average_site_step(site: TiedSite, stats: BatchStats, rho: float) -> TiedSite:
    """``tbar <- tbar^(1 - rho) * (the batch's mean site)^rho`` in natural parameters."""
    used = stats.rows - stats.skipped
    if used == 0:
        return site
    return TiedSite(
        (1.0 - rho) * site.prec + (rho / used) * stats.prec_sum,
        (1.0 - rho) * site.shift + (rho / used) * stats.shift_sum,
    )


def proper_site_step(site: TiedSite, stats: BatchStats, rho: float, n: int) -> TiedSite:
    """:func:`average_site_step`, its ``rho`` halved (up to 50 times) while the posterior
    precision ``I + N Lam`` is not positive definite -- only possible when negative site
    precisions are kept (a likelihood that is not log-concave), where the average site
    precision ``Lam`` may be indefinite; ``ValueError`` if no step keeps it so."""
    new = average_site_step(site, stats, rho)
    for _ in range(50):
        try:
            posterior_of(new, n)
            return new
        except np.linalg.LinAlgError:
            rho *= 0.5
            new = average_site_step(site, stats, rho)
    raise ValueError(
        f"no step toward the batch's mean site (of {stats.rows} rows) keeps the posterior "
        "precision I + N Lam positive definite (negative site precisions of a likelihood that "
        "is not log-concave); try a larger batch_size"
    )


def tied_energy(site: TiedSite, n: int, power: float, cav: Cavity, stats: BatchStats) -> float:
    """The tied-site Power EP energy (eq. (110) with every site ``tbar``), its data term
    estimated from a batch: ``phi(q) - phi(p) + (N/alpha)(phi(cav) - phi(q)) + (N/B) sum_B log
    Z~_n / alpha``, ``phi`` the log normaliser of a Gaussian in natural parameters; ``cav`` is
    :func:`cavity_of` ``(site, n, power)``, which the batch's statistics were taken at."""
    q = posterior_of(site, n)

    def phi(g: Cavity, weight: float) -> float:  # without the M/2 log 2 pi both sides share
        return 0.5 * float(g.mean @ (weight * site.shift)) - g.half_logdet()

    phi_q, phi_c = phi(q, float(n)), phi(cav, n - power)
    return phi_q + (n / power) * (phi_c - phi_q) + (n / stats.rows) * stats.log_z_sum
