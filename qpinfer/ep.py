"""Expectation propagation and quantile propagation for GP models with factorised likelihoods.

One site-update loop serves every method. What differs between methods is the *projection*:
given the cavity ``N(cavity_mean, cavity_std^2)`` of a site and its observation ``y``, return
the mean and standard deviation of the Gaussian that replaces the tilted distribution
``q~(f) ∝ N(f | cavity) p(y | f)^power``:

* :class:`MomentMatching` -- EP, the KL projection, paper 000 eq. (5);
* :class:`QuantileMatching` -- QP, the L2-Wasserstein projection: the same mean (eq. (5)), the
  standard deviation sigma* of eq. (7), looked up in a table (:func:`qpinfer.open_table`) or
  computed exactly with :func:`qpinfer.sigma_qp`.

Anything with the members of :class:`Projection` plugs in (Power EP: ``power != 1``; relaxed EP,
:mod:`qpinfer.rep`: a ``project_with_site(cavity_mean, cavity_std, y, site_tau, site_nu)`` method,
which the loop calls instead of ``project`` when present). The site update itself is eq. (6) in natural parameters
``tau~ = 1 / sigma~^2`` and ``nu~ = mu~ / sigma~^2`` (generalised to fractional sites, as GPy's
``eta``): ``tau~_i <- (1/sigma*^2 - tau_cav) / power``, ``nu~_i <- (mu*/sigma*^2 - nu_cav) / power``.

Schedules (:func:`run_ep`):

* ``"sequential"`` -- Rasmussen & Williams (2006, "R&W") Algorithm 3.5: sites updated one at a
  time, each followed by the rank-one update ``Sigma <- Sigma - c s_i s_i^T`` of the posterior
  covariance. The rank-one updates are *deferred* in blocks and applied as one rank-k update
  (BLAS-3) -- the same arithmetic, in a different order -- and the column ``s_i`` is reconstructed
  from the pending block when site ``i`` is visited. ``Sigma`` and ``mu`` are recomputed from the
  sites after every sweep (R&W Alg. 3.5, line 12), which keeps round-off from accumulating.
* ``"parallel"`` -- every site is updated from the same posterior, vectorised over sites (one call
  to the projection per sweep, so QP makes one batched table lookup), with damping
  ``site <- (1 - damping) site + damping site_new`` in natural parameters.

Guards: for a log-concave likelihood a proposed site precision below :data:`MIN_SITE_PRECISION`
is clipped to it (GPy does the same; such sites are non-negative in exact arithmetic, and QP's are
larger than EP's by Theorem 2, so clipping only catches round-off). A likelihood that declares
``log_concave = False`` (the label-noise step of :mod:`qpinfer.step_noise`) legitimately produces
*negative* site precisions (a site whose tilted variance exceeds its cavity variance); clipping
them changes the fixed point and made every method oscillate on paper 002's Sec. 6.2 data, so for
such likelihoods the loop keeps them (``min_site_precision="auto"`` -> no floor), as paper 002's
and Minka's updates do. Then a site update that would make the posterior improper
(``1 + d_tau Sigma_ii <= 0`` in the sequential schedule), a site whose cavity precision is not
positive, or whose projection is not finite, keeps its old parameters for that sweep (counted in
``EPResult.n_skipped``). The posterior with negative sites is computed from
``Sigma = K - K s M^-1 s K``, ``M = diag(sign tau~) + s K s``, ``s = |tau~|^1/2`` (Woodbury;
``M`` symmetric indefinite, factorised by ``eigh``, whose inertia also certifies that the
posterior is positive definite: exactly as many negative eigenvalues as negative sites).

Stopping rule (paper Sec. 6): the root-mean-square change of the site parameters
``(tau~, nu~)`` over one sweep is below ``tol``. If that does not happen within ``max_iter`` sweeps
a :class:`ConvergenceWarning` is issued and the sites with the smallest change seen are returned.

Evidence: eq. (4), evaluated in the numerically stable form of R&W eq. (3.65)/(3.73) via the
Cholesky factor of ``B = I + S~^1/2 K S~^1/2`` (as in GPML's ``infEP``); for QP it is EP's
expression evaluated at QP's sites (the paper's choice). Its gradient in the kernel
hyperparameters is R&W eq. (5.27), ``1/2 tr((b b^T - S~^1/2 B^-1 S~^1/2) dK/dtheta)`` with
``b = nu~ - S~^1/2 B^-1 S~^1/2 K nu~``: the derivative of eq. (4) with the site parameters (and
the site normalisers Z~_i) held fixed. At an EP fixed point that is also the total derivative of
the EP evidence; for QP, whose sites are not a stationary point of EP's free energy, it is the
derivative of the fixed-site objective, which is what Algorithm 1 (line 15) maximises.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy.linalg import blas, cho_solve, lapack, solve_triangular

__all__ = [
    "MIN_SITE_PRECISION",
    "ConvergenceWarning",
    "EPResult",
    "MomentMatching",
    "Projection",
    "QuantileMatching",
    "fixed_site_log_evidence",
    "log_evidence",
    "log_evidence_gradient",
    "posterior_from_sites",
    "predict_latent",
    "run_ep",
]

#: Smallest site precision the loop keeps (GPy uses the same floor).
MIN_SITE_PRECISION: float = float(np.finfo(np.float64).eps)

_SCHEDULES = ("parallel", "sequential")


class ConvergenceWarning(UserWarning):
    """The site updates did not reach the requested tolerance within ``max_iter`` sweeps."""


# --------------------------------------------------------------------------------------------
# Projections
# --------------------------------------------------------------------------------------------
@runtime_checkable
class Projection(Protocol):
    """The local update of a site (what EP/QP/Power EP/relaxed EP differ in).

    ``power`` is the fraction of the site removed to form the cavity (1 for EP and QP).
    ``project(cavity_mean, cavity_std, y) -> (mean, std)`` is the Gaussian replacing the tilted
    distribution, vectorised over sites. ``log_normalizer(cavity_mean, cavity_std, y)`` is
    ``log Z^_i = log ∫ N(f | cavity) p(y_i | f) df``, needed by the evidence (eq. (4)).
    """

    power: float

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray: ...


class MomentMatching:
    """EP's projection: match the tilted mean and variance (paper 000 eq. (5))."""

    power = 1.0

    def __init__(self, likelihood: Any) -> None:
        self.likelihood = likelihood

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.likelihood.tilted_moments(cavity_mean, cavity_std, y)

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        return self.likelihood.log_z(cavity_mean, cavity_std, y)

    def __repr__(self) -> str:
        return f"MomentMatching({getattr(self.likelihood, 'name', self.likelihood)!r})"


class QuantileMatching:
    """QP's projection: EP's mean (eq. (5)) and the L2-Wasserstein standard deviation (eq. (7)).

    With a ``table`` (from :func:`qpinfer.open_table`), sigma* is
    ``table.sigma_ratio(mu, sigma, y) * sigma_EP`` -- one batched interpolation per parallel sweep,
    with the table's own exact fallback outside its domain. Without one, sigma* is computed
    exactly by :func:`qpinfer.sigma_qp` (slower).
    """

    power = 1.0

    def __init__(self, likelihood: Any, table: Any | None = None) -> None:
        if table is not None:
            table_lik = getattr(table, "likelihood", None)
            if table_lik != likelihood.name:
                raise ValueError(
                    f"table is for likelihood {table_lik!r} but inference uses {likelihood.name!r}"
                )
        self.likelihood = likelihood
        self.table = table

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        mean, std_ep = self.likelihood.tilted_moments(cavity_mean, cavity_std, y)
        if self.table is not None:
            if getattr(self.table, "accepts_moments", False):  # v2: no second EP computation
                ratio = self.table.sigma_ratio(cavity_mean, cavity_std, y, moments=(mean, std_ep))
            else:
                ratio = self.table.sigma_ratio(cavity_mean, cavity_std, y)
            std = ratio * std_ep
        else:
            from qpinfer.sigma import sigma_qp  # the exact kernel, imported when first needed

            std = sigma_qp(self.likelihood, cavity_mean, cavity_std, y)
        return mean, std

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        return self.likelihood.log_z(cavity_mean, cavity_std, y)

    def __repr__(self) -> str:
        src = "exact" if self.table is None else "table"
        return f"QuantileMatching({getattr(self.likelihood, 'name', self.likelihood)!r}, {src})"


# --------------------------------------------------------------------------------------------
# Posterior from sites (eq. (3)) and the evidence (eq. (4))
# --------------------------------------------------------------------------------------------
@dataclass
class Posterior:
    """Gaussian posterior ``N(mean, Sigma)`` of eq. (3) for given sites, in R&W's B-form.

    ``L`` is the lower Cholesky factor of ``B = I + S~^1/2 K S~^1/2``; ``sqrt_tau = diag(S~^1/2)``;
    ``b = (K + S~^-1)^-1 mu~`` are the weights of the predictive mean (R&W eq. (3.60)).
    With negative site precisions (non-log-concave likelihoods) ``L`` is ``None``,
    ``sqrt_tau = |tau~|^1/2`` and ``eig = (lam, Q)`` is the eigendecomposition of the indefinite
    ``M = diag(sign tau~) + S^1/2 K S^1/2`` that takes ``B``'s place.
    """

    mean: np.ndarray
    var: np.ndarray
    L: np.ndarray | None
    sqrt_tau: np.ndarray
    b: np.ndarray
    Sigma: np.ndarray | None = None
    eig: tuple[np.ndarray, np.ndarray] | None = None

    def solve_B(self, A: np.ndarray) -> np.ndarray:
        """``B^-1 A`` (``M^-1 A`` with negative sites)."""
        if self.L is not None:
            return cho_solve((self.L, True), A, check_finite=False)
        lam, Q = self.eig
        QA = Q.T @ A
        return Q @ (QA / (lam[:, None] if QA.ndim == 2 else lam))

    def half_logdet_B(self) -> float:
        """``log det(I + K S~) / 2`` (= ``sum log L_ii``)."""
        if self.L is not None:
            return float(np.sum(np.log(np.diag(self.L))))
        return float(0.5 * np.sum(np.log(np.abs(self.eig[0]))))


def _chol_B(K: np.ndarray, sqrt_tau: np.ndarray) -> np.ndarray:
    B = (sqrt_tau[:, None] * K) * sqrt_tau[None, :]
    B[np.diag_indices_from(B)] += 1.0
    L, info = lapack.dpotrf(B, lower=1, clean=1, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"B = I + S^1/2 K S^1/2 is not positive definite (info={info})")
    return L


def posterior_from_sites(
    K: np.ndarray, tau: np.ndarray, nu: np.ndarray, full_cov: bool = False
) -> Posterior:
    """Posterior moments of eq. (3): ``Sigma = K - K S^1/2 B^-1 S^1/2 K``, ``mean = Sigma nu~``.

    Negative site precisions are allowed (see the module docstring); ``LinAlgError`` if the
    posterior they imply is not positive definite.
    """
    if np.any(tau < 0):
        return _posterior_indefinite(K, tau, nu, full_cov)
    s = np.sqrt(tau)
    L = _chol_B(K, s)
    V = solve_triangular(L, s[:, None] * K, lower=True, check_finite=False, overwrite_b=True)
    Knu = K @ nu
    mean = Knu - V.T @ (V @ nu)
    var = np.diag(K) - np.einsum("ij,ij->j", V, V)
    var = np.maximum(var, np.finfo(np.float64).tiny)
    b = nu - s * cho_solve((L, True), s * Knu, check_finite=False)
    Sigma = None
    if full_cov:
        Sigma = np.asfortranarray(K.copy())
        Sigma = blas.dsyrk(-1.0, V, beta=1.0, c=Sigma, trans=1, lower=1, overwrite_c=1)
        iu = np.triu_indices_from(Sigma, 1)
        Sigma[iu] = Sigma.T[iu]
    return Posterior(mean=mean, var=var, L=L, sqrt_tau=s, b=b, Sigma=Sigma)


def _posterior_indefinite(
    K: np.ndarray, tau: np.ndarray, nu: np.ndarray, full_cov: bool
) -> Posterior:
    s = np.sqrt(np.abs(tau))
    sign = np.where(tau < 0, -1.0, 1.0)
    sK = s[:, None] * K
    M = sK * s[None, :]
    M[np.diag_indices_from(M)] += sign
    lam, Q = np.linalg.eigh(M)
    if np.count_nonzero(lam < 0) != np.count_nonzero(tau < 0) or np.any(lam == 0):
        raise np.linalg.LinAlgError(
            "the sites imply an improper posterior: K^-1 + S~ is not positive definite"
        )
    V = (Q.T @ sK) / np.sqrt(np.abs(lam))[:, None]  # Sigma = K - V^T diag(sign lam) V
    sg = np.sign(lam)
    Knu = K @ nu
    mean = Knu - V.T @ (sg * (V @ nu))
    var = np.diag(K) - np.einsum("ij,ij->j", V, sg[:, None] * V)
    if np.any(var <= 0):
        raise np.linalg.LinAlgError("the sites imply a non-positive posterior variance")
    post = Posterior(mean=mean, var=var, L=None, sqrt_tau=s, b=nu, eig=(lam, Q))
    post.b = nu - s * post.solve_B(s * Knu)
    if full_cov:
        Sigma = K - V.T @ (sg[:, None] * V)
        Sigma = 0.5 * (Sigma + Sigma.T)
        post.Sigma = np.asfortranarray(Sigma)
    return post


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
    if getattr(projection, "power", 1.0) != 1.0:  # Power EP: paper 004 eq. (110)
        from qpinfer.power_ep import power_ep_log_evidence  # late: power_ep builds on this module

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


class PosteriorMoments:
    """``mean`` and ``var`` of a result's ``posterior`` (EP, Laplace and VB results)."""

    @property
    def mean(self) -> np.ndarray:
        return self.posterior.mean

    @property
    def var(self) -> np.ndarray:
        return self.posterior.var


# --------------------------------------------------------------------------------------------
# The site-update loop
# --------------------------------------------------------------------------------------------
@dataclass
class EPResult(PosteriorMoments):
    """Converged (or best) sites and the posterior they imply."""

    tau: np.ndarray
    nu: np.ndarray
    posterior: Posterior
    log_marginal_likelihood: float
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    n_iter: int
    converged: bool
    rms_change: float
    n_clipped: int = 0
    n_skipped: int = 0
    history: list[float] = field(default_factory=list)


def _site_proposal(
    projection: Projection,
    post_mean: np.ndarray,
    post_var: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    y: np.ndarray,
    floor: float | None = MIN_SITE_PRECISION,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cavity -> projection -> new site natural parameters (eq. (6)), vectorised over sites.

    Returns ``(tau_new, nu_new, ok, clipped)``: ``ok`` marks sites whose cavity was proper and
    projection finite (others must keep their old parameters), ``clipped`` the sites whose new
    precision was raised to ``floor`` (``None``: no floor, negative precisions are kept).
    """
    power = float(getattr(projection, "power", 1.0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tau_c = 1.0 / post_var - power * tau
        nu_c = post_mean / post_var - power * nu
        ok = np.isfinite(tau_c) & np.isfinite(nu_c) & (tau_c > 0)
        tau_c_safe = np.where(ok, tau_c, 1.0)
        cav_var = 1.0 / tau_c_safe
        cav_mean = np.where(ok, nu_c, 0.0) * cav_var
        project_with_site = getattr(projection, "project_with_site", None)
        if project_with_site is not None:  # relaxed EP: the relaxation factor uses the old site
            m, s = project_with_site(cav_mean, np.sqrt(cav_var), y, tau, nu)
        else:
            m, s = projection.project(cav_mean, np.sqrt(cav_var), y)
        m = np.asarray(m, dtype=np.float64)
        s = np.asarray(s, dtype=np.float64)
        prec = 1.0 / (s * s)
        tau_new = (prec - tau_c_safe) / power
        nu_new = (m * prec - nu_c) / power
    ok &= np.isfinite(tau_new) & np.isfinite(nu_new) & (s > 0)
    if floor is None:
        return tau_new, nu_new, ok, np.zeros_like(ok)
    clipped = ok & (tau_new < floor)
    tau_new = np.where(clipped, floor, tau_new)
    return tau_new, nu_new, ok, clipped


def _parallel_sweep(
    K: np.ndarray,
    y: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    projection: Projection,
    damping: float,
    floor: float | None = MIN_SITE_PRECISION,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    post = posterior_from_sites(K, tau, nu)
    tau_p, nu_p, ok, clipped = _site_proposal(projection, post.mean, post.var, tau, nu, y, floor)
    tau_new = np.where(ok, (1.0 - damping) * tau + damping * tau_p, tau)
    nu_new = np.where(ok, (1.0 - damping) * nu + damping * nu_p, nu)
    if floor is not None:
        tau_new = np.maximum(tau_new, floor)
    return tau_new, nu_new, int(np.count_nonzero(clipped)), int(np.count_nonzero(~ok))


def _sequential_sweep(
    K: np.ndarray,
    y: np.ndarray,
    tau: np.ndarray,
    nu: np.ndarray,
    projection: Projection,
    damping: float,
    block_size: int,
    floor: float | None = MIN_SITE_PRECISION,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """One sweep of R&W Alg. 3.5 with rank-one updates deferred into rank-``block_size`` ones.

    Invariant: the current posterior covariance is ``Sigma - U[:, :k] diag(c[:k]) U[:, :k]^T``.
    """
    n = K.shape[0]
    tau = tau.copy()
    nu = nu.copy()
    post = posterior_from_sites(K, tau, nu, full_cov=True)
    Sigma = post.Sigma  # Fortran order: columns are contiguous
    mu = post.mean.copy()
    block_size = max(1, min(block_size, n))
    U = np.empty((n, block_size), order="F")
    c = np.empty(block_size)
    k = 0
    n_clipped = 0
    n_skipped = 0
    for i in range(n):
        col = Sigma[:, i].copy()
        if k:
            col -= U[:, :k] @ (c[:k] * U[i, :k])
        sii = col[i]
        tau_p, nu_p, ok, clipped = _site_proposal(
            projection,
            mu[i : i + 1],
            col[i : i + 1],
            tau[i : i + 1],
            nu[i : i + 1],
            y[i : i + 1],
            floor,
        )
        if not ok[0]:
            n_skipped += 1
            continue
        tau_i = (1.0 - damping) * tau[i] + damping * tau_p[0]
        if floor is not None:
            tau_i = max(tau_i, floor)
        nu_i = (1.0 - damping) * nu[i] + damping * nu_p[0]
        d_tau = tau_i - tau[i]
        if not (1.0 + d_tau * sii > 0):  # negative sites only: the posterior would be improper
            n_skipped += 1
            continue
        n_clipped += int(clipped[0])
        d_nu = nu_i - nu[i]
        tau[i] = tau_i
        nu[i] = nu_i
        ci = d_tau / (1.0 + d_tau * sii)
        # mean update: mu <- Sigma_new nu_new, written as a rank-one correction (as GPy does)
        mu -= (ci * (mu[i] + sii * d_nu) - d_nu) * col
        U[:, k] = col
        c[k] = ci
        k += 1
        if k == block_size:
            Sigma = blas.dgemm(-1.0, U * c, U, beta=1.0, c=Sigma, trans_b=1, overwrite_c=1)
            k = 0
    return tau, nu, n_clipped, n_skipped


def _resolve_floor(min_site_precision: Any, projection: Any) -> float | None:
    if isinstance(min_site_precision, str):
        if min_site_precision != "auto":
            raise ValueError(
                f"min_site_precision must be 'auto', None or a number >= 0, got {min_site_precision!r}"
            )
        lik = getattr(projection, "likelihood", None)
        return None if getattr(lik, "log_concave", True) is False else MIN_SITE_PRECISION
    if min_site_precision is None:
        return None
    v = float(min_site_precision)
    if not (np.isfinite(v) and v >= 0):
        raise ValueError(
            f"min_site_precision must be 'auto', None or a number >= 0, got {min_site_precision!r}"
        )
    return v


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
) -> EPResult:
    """Run the site updates of Algorithm 1 (inner loop) to convergence.

    Parameters
    ----------
    K:
        Prior covariance ``K(X, X)`` (N x N).
    y:
        Observations, in the form the likelihood expects (probit: -1/+1).
    projection:
        The local update, e.g. :class:`MomentMatching` (EP) or :class:`QuantileMatching` (QP).
    schedule:
        ``"parallel"`` (damped, vectorised over sites) or ``"sequential"`` (R&W Alg. 3.5).
    damping:
        Step in natural parameters, in (0, 1]; ``None`` means 1.0 for ``"sequential"`` and 0.5
        for ``"parallel"``.
    max_iter, tol:
        Stop when the RMS change of ``(tau~, nu~)`` over a sweep is below ``tol`` (Sec. 6) or after
        ``max_iter`` sweeps (then :class:`ConvergenceWarning`, and the best sites are returned).
    init:
        Starting sites ``(tau~, nu~)`` (warm start); default all zero (posterior = prior).
    block_size:
        How many rank-one updates the sequential schedule defers into one rank-k update.
    min_site_precision:
        Floor for site precisions. ``"auto"``: :data:`MIN_SITE_PRECISION`, or no floor (``None``)
        if the projection's likelihood declares ``log_concave = False`` (negative sites are then
        legitimate; see the module docstring).
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y)
    n = K.shape[0]
    if K.shape != (n, n):
        raise ValueError(f"K must be square, got shape {K.shape}")
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    if schedule not in _SCHEDULES:
        raise ValueError(f"schedule must be one of {_SCHEDULES}, got {schedule!r}")
    if damping is None:
        damping = 1.0 if schedule == "sequential" else 0.5
    if not (0.0 < damping <= 1.0):
        raise ValueError(f"damping must be in (0, 1], got {damping!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    if not (tol > 0):
        raise ValueError(f"tol must be positive, got {tol!r}")
    floor = _resolve_floor(min_site_precision, projection)

    if init is None:
        tau = np.zeros(n)
        nu = np.zeros(n)
    else:
        tau = np.asarray(init[0], dtype=np.float64).copy()
        if floor is not None:
            tau = np.maximum(tau, 0.0)
        nu = np.asarray(init[1], dtype=np.float64).copy()
        if tau.shape != (n,) or nu.shape != (n,):
            raise ValueError(f"init sites must have shape ({n},)")
        if not (np.all(np.isfinite(tau)) and np.all(np.isfinite(nu))):
            tau, nu = np.zeros(n), np.zeros(n)

    best = (np.inf, tau, nu)
    history: list[float] = []
    converged = False
    n_clipped = n_skipped = 0
    it = 0
    for it in range(1, int(max_iter) + 1):
        try:
            if schedule == "parallel":
                tau_new, nu_new, nc, ns = _parallel_sweep(K, y, tau, nu, projection, damping, floor)
            else:
                tau_new, nu_new, nc, ns = _sequential_sweep(
                    K, y, tau, nu, projection, damping, block_size, floor
                )
        except np.linalg.LinAlgError:
            break
        if not (np.all(np.isfinite(tau_new)) and np.all(np.isfinite(nu_new))):
            break
        n_clipped, n_skipped = nc, ns
        diff = np.concatenate((tau_new - tau, nu_new - nu))
        rms = float(np.sqrt(np.mean(diff * diff)))
        history.append(rms)
        tau, nu = tau_new, nu_new
        if rms < best[0]:
            best = (rms, tau, nu)
        if rms < tol:
            converged = True
            break

    rms, tau, nu = best
    if not converged:
        warnings.warn(
            f"EP/QP site updates did not converge within max_iter={max_iter} sweeps "
            f"(best RMS change of site parameters {rms:.3g}, tol={tol:.3g}); "
            "returning the sites with the smallest change",
            ConvergenceWarning,
            stacklevel=2,
        )
        if not np.isfinite(rms):  # not even one sweep succeeded: the prior
            tau, nu = np.zeros(n), np.zeros(n)
    post = posterior_from_sites(K, tau, nu)
    log_z = np.nan
    cav_mean = cav_var = np.full(n, np.nan)
    if compute_evidence:
        log_z, cav_mean, cav_var = log_evidence(post, tau, nu, y, projection)
    return EPResult(
        tau=tau,
        nu=nu,
        posterior=post,
        log_marginal_likelihood=log_z,
        cavity_mean=cav_mean,
        cavity_var=cav_var,
        n_iter=it,
        converged=converged,
        rms_change=rms,
        n_clipped=n_clipped,
        n_skipped=n_skipped,
        history=history,
    )


# --------------------------------------------------------------------------------------------
# Hyperparameters: eq. (4) with the sites held fixed, and its gradient (R&W eq. (5.27))
# --------------------------------------------------------------------------------------------
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
    Binv, info = lapack.dpotri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed (info={info})")
    Binv = np.tril(Binv)
    Binv += np.tril(Binv, -1).T
    R = np.outer(b, b)
    R -= (s[:, None] * Binv) * s[None, :]
    grad = 0.5 * kern.gradient_contract(X, R, K)
    return float(value), np.asarray(grad, dtype=np.float64)


def log_evidence_gradient(
    kernel: Any, X: np.ndarray, result: EPResult, K: np.ndarray | None = None
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
    s = post.sqrt_tau
    Binv, info = lapack.dpotri(post.L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed (info={info})")
    Binv = np.tril(Binv)
    Binv += np.tril(Binv, -1).T
    R = np.outer(post.b, post.b)
    R -= (s[:, None] * Binv) * s[None, :]
    return 0.5 * np.asarray(kernel.gradient_contract(X, R, K), dtype=np.float64)


def site_constant(result: EPResult) -> float:
    """The theta-independent part of eq. (4) for the sites in ``result`` (see above)."""
    post = result.posterior
    return float(
        result.log_marginal_likelihood + post.half_logdet_B() - 0.5 * result.nu @ post.mean
    )


def predict_latent(
    post: Posterior, K_star: np.ndarray, k_star_diag: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Latent predictive mean and variance (R&W eqs. (3.60)-(3.61), Alg. 3.6).

    ``mean = K_*^T b``, ``var = k_** - ||L^-1 S^1/2 K_*||^2``; ``K_star`` is ``K(X_train, X_test)``.
    """
    mean = K_star.T @ post.b
    if post.L is None:  # negative sites: M^-1 in place of B^-1
        a = post.sqrt_tau[:, None] * K_star
        var = k_star_diag - np.einsum("ij,ij->j", a, post.solve_B(a))
        return mean, np.maximum(var, 0.0)
    v = solve_triangular(post.L, post.sqrt_tau[:, None] * K_star, lower=True, check_finite=False)
    var = k_star_diag - np.einsum("ij,ij->j", v, v)
    return mean, np.maximum(var, 0.0)
