"""Expectation propagation and quantile propagation for GP models with factorised likelihoods.

One site-update loop (:func:`qpinfer.inference.site_loop.run_sites`) serves every method. What
differs between methods is the *projection* (:mod:`qpinfer.inference.projections`): given the cavity
``N(cavity_mean, cavity_std^2)`` of a site and its observation ``y``, return the mean and
standard deviation of the Gaussian that replaces the tilted distribution
``q~(f) ∝ N(f | cavity) p(y | f)^power``:

* :class:`~qpinfer.MomentMatching` -- EP, the KL projection, Zhang et al. (2020) eq. (5);
* :class:`~qpinfer.QuantileMatching` -- QP, the L2-Wasserstein projection: the same mean (eq. (5)),
  the standard deviation sigma* of eq. (7), looked up in a table (:func:`qpinfer.open_table`) or
  computed exactly with :func:`qpinfer.sigma_qp`.

Anything with the members of :class:`~qpinfer.inference.projections.Projection` plugs in (Power EP:
``power != 1``; relaxed EP, :mod:`qpinfer.inference.relaxed_ep`: a
``project_with_site(cavity_mean, cavity_std, y, site_tau, site_nu)`` method, which the loop calls
instead of ``project`` when present). The site update itself is eq. (6) in natural parameters
``tau~ = 1 / sigma~^2`` and ``nu~ = mu~ / sigma~^2`` (generalised to fractional sites, as GPy's
``eta``): ``tau~_i <- (1/sigma*^2 - tau_cav) / power``, ``nu~_i <- (mu*/sigma*^2 - nu_cav) / power``
(:func:`qpinfer.inference.site_update.site_proposal`).

This module is the dense (full-GP) front end, :func:`run_ep`: the posterior of eq. (3) in R&W's
B-form (:mod:`qpinfer.inference.dense_posterior`), the evidence eq. (4) and its gradient
(:mod:`qpinfer.inference.evidence`). Schedules (:mod:`qpinfer.inference.site_loop`):

* ``"sequential"`` -- Rasmussen & Williams (2006, "R&W") Algorithm 3.5: sites updated one at a
  time, each followed by the rank-one update ``Sigma <- Sigma - c s_i s_i^T`` of the posterior
  covariance, deferred in blocks into rank-k updates (BLAS-3). ``Sigma`` and ``mu`` are
  recomputed from the sites after every sweep (R&W Alg. 3.5, line 12).
* ``"parallel"`` -- every site is updated from the same posterior, vectorised over sites (one call
  to the projection per sweep, so QP makes one batched table lookup), with damping
  ``site <- (1 - damping) site + damping site_new`` in natural parameters.

Guards: for a log-concave likelihood a proposed site precision below
:data:`~qpinfer.inference.site_update.MIN_SITE_PRECISION` is clipped to it (GPy does the same; such
sites are non-negative in exact arithmetic, and QP's are larger than EP's by Theorem 2, so clipping
only catches round-off). A likelihood that declares ``log_concave = False`` (the label-noise step of
:mod:`qpinfer.likelihoods.step_noise`) legitimately produces *negative* site precisions (a site
whose tilted variance exceeds its cavity variance); clipping them changes the fixed point and made
every method oscillate on Qi and Guo's (2012) Sec. 6.2 data, so for such likelihoods the loop keeps them
(``min_site_precision="auto"`` -> no floor), as Qi and Guo's (2012) and Minka's updates do. Then a site
update that would make the posterior improper (``1 + d_tau Sigma_ii <= 0`` in the sequential
schedule), a site whose cavity precision is not positive, or whose projection is not finite, keeps
its old parameters for that sweep (counted in ``EPResult.n_skipped``). The posterior with negative
sites is computed in Woodbury form with an indefinite ``M``
(:func:`~qpinfer.inference.dense_posterior.posterior_from_sites`).

Stopping rule (paper Sec. 6): the root-mean-square change of the site parameters
``(tau~, nu~)`` over one sweep is below ``tol``. If that does not happen within ``max_iter`` sweeps
a :class:`~qpinfer.ConvergenceWarning` is issued and the sites with the smallest change seen are
returned.

Evidence: eq. (4), evaluated in the numerically stable form of R&W eq. (3.65)/(3.73)
(:func:`~qpinfer.inference.evidence.log_evidence`); its gradient in the kernel hyperparameters is
R&W eq. (5.27) (:func:`~qpinfer.inference.evidence.log_evidence_gradient`, see
:mod:`qpinfer.inference.evidence` for what it is for QP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.inference.dense_posterior import (
    DenseSiteRepresentation,
    Posterior,
    PosteriorMoments,
    posterior_from_sites,
    predict_latent,
)
from qpinfer.inference.evidence import (
    fixed_site_log_evidence,
    log_evidence,
    log_evidence_gradient,
    site_constant,
)
from qpinfer.inference.projections import MomentMatching, Projection, QuantileMatching
from qpinfer.inference.site_loop import ConvergenceWarning, SiteResult, SweepSettings, run_sites
from qpinfer.inference.site_update import MIN_SITE_PRECISION, resolve_floor, site_proposal

__all__ = [
    "MIN_SITE_PRECISION",
    "ConvergenceWarning",
    "EPResult",
    "MomentMatching",
    "Posterior",
    "PosteriorMoments",
    "Projection",
    "QuantileMatching",
    "fixed_site_log_evidence",
    "log_evidence",
    "log_evidence_gradient",
    "posterior_from_sites",
    "predict_latent",
    "run_ep",
    "site_constant",
]


_WHAT = "EP/QP site updates"  # the method, as the convergence warning names it


@dataclass
class EPResult(SiteResult):
    """Converged (or best) sites and the posterior
    (:class:`~qpinfer.inference.dense_posterior.Posterior`) they imply."""


class _ProjectedSites:
    """The site update of :func:`run_ep`: eq. (6) from ``projection`` (:func:`site_proposal`),
    the evidence eq. (4) (eq. (110) for Power EP,
    :func:`~qpinfer.inference.evidence.log_evidence`)."""

    def __init__(self, projection: Projection, y: np.ndarray, floor: float | None) -> None:
        self.projection = projection
        self.y = y
        self.floor = floor

    def propose(self, sites: slice, mean, var, tau, nu):
        return site_proposal(self.projection, mean, var, tau, nu, self.y[sites], self.floor)

    def log_evidence(self, post: Posterior, tau: np.ndarray, nu: np.ndarray):
        return log_evidence(post, tau, nu, self.y, self.projection)


def run_ep(
    K: np.ndarray,
    y: np.ndarray,
    projection: Projection,
    *,
    schedule: str = "parallel",
    damping: float | None = None,
    max_iter: int = 1000,
    tol: float = 1e-6,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    block_size: int = 128,
    compute_evidence: bool = True,
    min_site_precision: float | str | None = "auto",
    adaptive_damping: bool = False,
    acceleration: bool = False,
    keep_v: bool = False,
) -> EPResult:
    """Run the site updates of Algorithm 1 (inner loop) to convergence.

    Parameters
    ----------
    K
        Prior covariance ``K(X, X)`` (N x N).
    y
        Observations, in the form the likelihood expects (probit: -1/+1).
    projection
        The local update, e.g. :class:`~qpinfer.MomentMatching` (EP) or
        :class:`~qpinfer.QuantileMatching` (QP).
    schedule
        ``"parallel"`` (damped, vectorised over sites) or ``"sequential"`` (R&W Alg. 3.5).
    damping
        Step in natural parameters, in (0, 1]; ``None`` means 1.0 for ``"sequential"`` and 0.5
        for ``"parallel"``.
    max_iter, tol
        Stop when the RMS change of ``(tau~, nu~)`` over a sweep is below ``tol`` (Sec. 6) or after
        ``max_iter`` sweeps (then :class:`~qpinfer.ConvergenceWarning`, and the best sites are
        returned).
    init
        Starting sites ``(tau~, nu~)`` (warm start); default all zero (posterior = prior).
    block_size
        How many rank-one updates the sequential schedule defers into one rank-k update.
    min_site_precision
        Floor for site precisions. ``"auto"``:
        :data:`~qpinfer.inference.site_update.MIN_SITE_PRECISION`, or no floor (``None``) if the
        projection's likelihood declares ``log_concave = False`` (negative sites are then
        legitimate; see the module docstring).
    adaptive_damping
        Parallel schedule: halve the damping (down to 1/64) whenever 20 sweeps pass without a new
        smallest RMS change, as :func:`qpinfer.inference.sparse.sites.run_sparse_pep` always does.
        Off by default here, so that existing fits keep their exact sweep sequence.
    acceleration
        Parallel schedule: Anderson acceleration of the sweeps (:mod:`qpinfer.inference.anderson`;
        the same fixed points and stopping rule, fewer sweeps). Off by default here; the
        estimators turn it on.
    keep_v
        Keep the result's posterior's ``V``
        (:func:`~qpinfer.inference.dense_posterior.posterior_from_sites`), from which a
        site-update Jacobian (:func:`qpinfer.inference.site_chord.site_update_jacobian`) forms
        the posterior covariance in one product.
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y)
    n = K.shape[0]
    if K.shape != (n, n):
        raise ValueError(f"K must be square, got shape {K.shape}")
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    floor = resolve_floor(min_site_precision, projection)
    settings = SweepSettings.checked(
        schedule, damping, max_iter, tol, floor, adaptive_damping, acceleration
    )
    representation = DenseSiteRepresentation(K, block_size, keep_v)
    update = _ProjectedSites(projection, y, floor)
    return run_sites(representation, update, init, settings, compute_evidence, EPResult, _WHAT)
