"""Pseudo-point (sparse) GP approximations by Power EP, from VFE to FITC (paper 004), O(N M^2).

M pseudo-points ``u = f(Z)`` summarise the N training function values. Power EP approximates
each likelihood by a factor of ``u`` that is rank one, ``t_n(u) = N~(w_n^T u; g_n, v_n)`` with
``w_n = Kuu^-1 k_u(x_n)`` (paper 004 eqs. (64)-(77)), so every step costs O(M^2) per site and the
posterior over ``u`` is

    V^-1 = Kuu^-1 + sum_n w_n tau_n w_n^T,   V^-1 m = sum_n w_n nu_n        (eqs. (119)-(120))

with site natural parameters ``tau_n = 1/v_n``, ``nu_n = g_n/v_n``. Everything is computed in
whitened coordinates ``u = Lu v`` (``Kuu + jitter I = Lu Lu^T``, ``A = Lu^-1 Kuf``): the posterior
of ``v`` has precision ``B = I + A diag(tau) A^T`` (eigenvalues >= 1, a safe Cholesky) and the
marginal of ``a_n = w_n^T u = a_n^T v`` is ``N(mu_n, s_n)`` with ``mu = A^T B^-1 A nu`` and
``s_n = ||L_B^-1 A[:, n]||^2``. Given ``u``, ``f_n ~ N(a_n, h_n)``, ``h = diag(Kff - Qff)``.

Regression (Gaussian noise ``sigma_y^2``): the Power EP fixed point is analytic (``g_n = y_n``,
``v_n = d_n = alpha h_n + sigma_y^2``) and the collapsed energy is eq. (128)::

    F = -N/2 log 2pi - 1/2 log|D + Qff| - 1/2 y^T (D + Qff)^-1 y
        - (1 - alpha)/(2 alpha) sum_n log(d_n / sigma_y^2)

``alpha = 1`` is FITC's log marginal likelihood (eq. (129)); ``alpha -> 0`` is Titsias' VFE bound
(eqs. (130)-(131)). The last term is written as ``(1 - alpha)/2 * (h_n/sigma_y^2) * L(alpha h_n /
sigma_y^2)`` with ``L(x) = log(1 + x)/x`` (series near 0), so it is continuous at ``alpha = 0``
where it equals the VFE trace term ``sum h_n / (2 sigma_y^2)``: the limit is evaluated, 0 is never
divided by. Its gradient in the log kernel hyperparameters, ``log sigma_y^2`` and the inducing
inputs ``Z`` is analytic (see :func:`sparse_regression_energy`).

Classification (probit): the iterative Power EP of eqs. (20), (106)-(109) (:func:`run_sparse_pep`):
the fractional cavity of ``a_n`` (``tau_c = 1/s_n - alpha tau_n``), the projection of the
fractional tilted distribution of ``f_n`` under ``N(f_n | mu_c, s_c + h_n)`` -- eq. (20)'s
``d1 = dlog Z~/dmu``, ``d2 = d^2 log Z~/dmu^2`` -- mapped back to ``a_n`` (``mu_c + s_c d1``,
``s_c + s_c^2 d2``), and the site update of eqs. (106)-(107) at full power,
``tau_new = -d2/(1 + s_c d2)/alpha`` (the same as :mod:`qpinfer.ep`'s
``(1/s_new - tau_c)/alpha`` but free of cancellation when ``s_c ~ 0``, an input far from every
inducing input); damping ``alpha`` gives eqs. (108)-(109), same fixed points. Schedules: ``"parallel"`` (all sites from one posterior,
damped) and ``"sequential"`` (rank-one updates of ``B^-1``, O(M^2) per site). The energy is
eq. (110) (:func:`qpinfer.power_ep.power_ep_log_evidence` with the marginals of ``a_n``). With
``M = N`` and ``Z = X`` (``h = 0``) both reduce to the full GP (EP / Power EP / exact regression).

Gradients (both cases) share one form. At a Power EP fixed point the total derivative of the energy
is ``dF = 1/2 tr(W dQff) + eps^T d diag(Kff)`` with ``W = b b^T - (S^-1 + Qff)^-1 - 2 diag(eps)``,
``S = diag(tau)``, ``b = nu - tau * mu``; classification has ``eps_n = (d2 + d1^2)/(2 alpha)``
(``dF/dh_n``: the bracket of eq. (110) is stationary in the marginal moments at a fixed point),
regression ``eps_n = (alpha R_nn - (1 - alpha)/d_n)/2`` with ``R_nn = b_n^2 - [(D + Qff)^-1]_nn``.
Through ``Qff = Kfu Kuu^-1 Kuf`` the weights on ``dKfu`` and ``dKuu`` are ``W Kfu Kuu^-1`` and
``-1/2 Kuu^-1 Kuf W Kfu Kuu^-1``, formed in O(N M^2) via Woodbury
(``(S^-1 + Qff)^-1 A^T = S A^T B^-1``); the kernel contracts them (:func:`_se_cross_contract`).

Inducing inputs are initialised by k-means (:func:`kmeans_inducing_points`). The estimators
:class:`SparseGPRegressor` and :class:`SparseGPClassifier` follow :class:`qpinfer.GPClassifier`'s
conventions.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.linalg import cho_solve, lapack, solve_triangular
from scipy.optimize import minimize

from qpinfer.classifier import (
    ProbitPredictionsMixin,
    _check_X,
    _check_y,
    binary_labels,
)
from qpinfer.ep import MIN_SITE_PRECISION, ConvergenceWarning, MomentMatching, QuantileMatching
from qpinfer.estimator import (
    DataConversionWarning,
    GPEstimatorBase,
    ParamsMixin,
    warn_exact_once,
)
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods import Probit
from qpinfer.power_ep import PowerMomentMatching, check_power, power_ep_log_evidence

__all__ = [
    "LowRankPosterior",
    "SparseGPClassifier",
    "SparseGPRegressor",
    "SparsePEPResult",
    "kmeans_inducing_points",
    "low_rank_posterior",
    "run_sparse_pep",
    "sparse_pep_gradient",
    "sparse_regression_energy",
]

_LOG_2PI = np.log(2.0 * np.pi)
_LBFGS_FTOL = 1e-9  # paper 000 Sec. 6 (as GPClassifier)
#: parallel schedule: halve the damping (down to ``_MIN_DAMPING``) after this many sweeps without
#: a new smallest RMS change (an oscillation; iris at damping 0.5 kept RMS ~2e-3 for 1000 sweeps)
_STALL_SWEEPS = 20
_MIN_DAMPING = 1.0 / 64.0
_SCHEDULES = ("parallel", "sequential")
#: pseudo-points used by default (``n_inducing=None``): ``min(DEFAULT_N_INDUCING, n_samples)``
DEFAULT_N_INDUCING = 50


# --------------------------------------------------------------------------------------------
# The pseudo-point prior: Kuu, Kuf, A = Lu^-1 Kuf, h = diag(Kff - Qff), and kernel derivatives
# --------------------------------------------------------------------------------------------
def _check_kernel(kernel: Any) -> None:
    if not isinstance(
        kernel, ARDSquaredExponential
    ):  # scikit-learn style: bad params -> ValueError
        raise ValueError(  # noqa: TRY004
            "sparse approximations need the derivatives of K(X, Z) in Z, implemented for "
            f"qpinfer.kernels.ARDSquaredExponential; got {type(kernel).__name__}"
        )


def _chol(A: np.ndarray, what: str) -> np.ndarray:
    L, info = lapack.dpotrf(A, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"{what} is not positive definite (info={info})")
    return L


@dataclass
class PseudoPointPrior:
    """The prior quantities for one kernel and one set of inducing inputs ``Z``."""

    Kuu: np.ndarray  # K(Z, Z) without jitter
    Kuf: np.ndarray  # K(Z, X)
    Lu: np.ndarray  # chol(Kuu + jitter I)
    A: np.ndarray  # Lu^-1 Kuf, (M, N)
    kdiag: np.ndarray  # diag K(X, X)
    h: np.ndarray  # diag(Kff - Qff) >= 0
    jitter: float  # absolute jitter added to Kuu


def pseudo_point_prior(
    kernel: Any, X: np.ndarray, Z: np.ndarray, jitter: float = 1e-6
) -> PseudoPointPrior:
    """``Kuu``, ``Kuf``, ``A = Lu^-1 Kuf`` and ``h = diag(Kff - Qff)``; jitter relative to the
    kernel's variance (``Kuu + jitter * variance * I``)."""
    Kuu = kernel(Z)
    Kuf = kernel(Z, X)
    kdiag = kernel.diag(X)
    jit = float(jitter) * float(np.mean(np.diag(Kuu)))
    Kj = Kuu.copy()
    Kj[np.diag_indices_from(Kj)] += jit
    Lu = _chol(Kj, "Kuu + jitter I")
    A = solve_triangular(Lu, Kuf, lower=True, check_finite=False)
    h = np.maximum(kdiag - np.einsum("mn,mn->n", A, A), 0.0)
    return PseudoPointPrior(Kuu=Kuu, Kuf=Kuf, Lu=Lu, A=A, kdiag=kdiag, h=h, jitter=jit)


def _se_cross_contract(
    kernel: ARDSquaredExponential, X: np.ndarray, Z: np.ndarray, W: np.ndarray, K: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``sum_ab W_ab dK(X, Z)_ab`` with respect to the log hyperparameters and to ``Z``.

    ``dk/dlog(variance) = k``, ``dk/dlog(l_d) = k (x_d - z_d)^2 / l_d^2``,
    ``dk/dz_d = k (x_d - z_d) / l_d^2``; with ``P = W * K``: O(N M D).
    """
    ls = kernel.length_scale
    P = W * K
    rs = P.sum(axis=1)
    cs = P.sum(axis=0)
    Xs = X / ls
    Zs = Z / ls
    per_dim = rs @ (Xs * Xs) + cs @ (Zs * Zs) - 2.0 * np.einsum("ad,ad->d", Xs, P @ Zs)
    if ls.size == 1:
        per_dim = np.array([per_dim.sum()])
    g_theta = np.concatenate(([P.sum()], per_dim))
    g_Z = (P.T @ X - cs[:, None] * Z) / (ls * ls)
    return g_theta, g_Z


def _contract_prior_gradient(
    kernel: ARDSquaredExponential,
    X: np.ndarray,
    Z: np.ndarray,
    prior: PseudoPointPrior,
    G_fu: np.ndarray,
    G_uu: np.ndarray,
    g_kdiag: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``dF = sum G_fu * dKfu + sum G_uu * dKuu + g_kdiag . d diag(Kff)`` in (theta, Z)."""
    g1, gz1 = _se_cross_contract(kernel, X, Z, G_fu, prior.Kuf.T)
    g2, gz2 = _se_cross_contract(kernel, Z, Z, G_uu, prior.Kuu)  # G_uu symmetric: Z twice
    g_theta = g1 + g2
    # jitter * variance and diag(Kff) = variance both scale with the variance
    g_theta[0] += prior.jitter * np.trace(G_uu) + g_kdiag @ prior.kdiag
    return g_theta, gz1 + 2.0 * gz2


@dataclass
class LowRankPosterior:
    """Posterior of the whitened pseudo-points ``v = Lu^-1 u``: ``N(mean_v, B^-1)``.

    ``L`` is the Cholesky factor of ``B = I + A diag(tau) A^T``; ``mean``/``var`` are the
    marginals of ``a_n = A[:, n]^T v`` (the sites' variables), ``mean = A^T mean_v``.
    """

    L: np.ndarray
    mean_v: np.ndarray
    mean: np.ndarray
    var: np.ndarray

    def half_logdet_B(self) -> float:
        """``log det B / 2`` (``sum log L_ii``; the energy eq. (110) needs it)."""
        return float(np.sum(np.log(np.diag(self.L))))


def low_rank_posterior(A: np.ndarray, tau: np.ndarray, nu: np.ndarray) -> LowRankPosterior:
    """Eqs. (119)-(120) in whitened form, O(N M^2)."""
    B = (A * tau) @ A.T
    B[np.diag_indices_from(B)] += 1.0
    L = _chol(B, "B = I + A S A^T")
    mean_v = cho_solve((L, True), A @ nu, check_finite=False)
    V = solve_triangular(L, A, lower=True, check_finite=False)
    var = np.maximum(np.einsum("mn,mn->n", V, V), np.finfo(np.float64).tiny)
    return LowRankPosterior(L=L, mean_v=mean_v, mean=A.T @ mean_v, var=var)


def _q_weights(
    prior: PseudoPointPrior, post: LowRankPosterior, tau: np.ndarray, b: np.ndarray, eps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weights ``(G_fu, G_uu)`` on ``dKfu`` and ``dKuu`` of ``1/2 tr(W dQff)``, with
    ``W = b b^T - (S^-1 + Qff)^-1 - 2 diag(eps)`` (module docstring), O(N M^2)."""
    A = prior.A
    Ab = A @ b
    BinvA = cho_solve((post.L, True), A, check_finite=False)
    H = np.outer(Ab, b) - BinvA * tau - 2.0 * A * eps  # (M, N): A W, with W Pt = H^T Lu^-1
    G_fu = solve_triangular(prior.Lu, H, lower=True, trans=1, check_finite=False).T
    P = solve_triangular(prior.Lu, A, lower=True, trans=1, check_finite=False)  # Kuu^-1 Kuf
    G_uu = -0.5 * (P @ G_fu)
    return G_fu, 0.5 * (G_uu + G_uu.T)


def _log1p_over_x(x: np.ndarray) -> np.ndarray:
    """``log(1 + x) / x`` for ``x >= 0``, equal to 1 at 0 (the alpha -> 0 limit of eq. (130))."""
    x = np.asarray(x, dtype=np.float64)
    small = x < 1e-4
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log1p(x) / x
    series = 1.0 - x / 2.0 + x * x / 3.0 - x**3 / 4.0
    return np.where(small, series, direct)


# --------------------------------------------------------------------------------------------
# Regression: the collapsed Power EP energy, eq. (128)
# --------------------------------------------------------------------------------------------
def sparse_regression_energy(
    kernel: Any,
    X: np.ndarray,
    y: np.ndarray,
    Z: np.ndarray,
    noise_variance: float,
    alpha: float,
    *,
    jitter: float = 1e-6,
    eval_gradient: bool = True,
) -> tuple[float, np.ndarray | None, float | None, np.ndarray | None]:
    """Power EP energy for sparse GP regression, paper 004 eq. (128), and its gradient.

    ``alpha`` in [0, 1]: 1 is FITC (eq. (129)); 0 evaluates the ``alpha -> 0`` limit, Titsias'
    VFE bound (eq. (131)), through ``log(1 + x)/x -> 1`` (never dividing by ``alpha``).

    Returns ``(F, dF/dtheta, dF/dlog(noise_variance), dF/dZ)`` (theta: the kernel's log
    hyperparameters); the gradients are ``None`` unless ``eval_gradient``. O(N M^2).
    """
    _check_kernel(kernel)
    alpha = float(alpha)
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1] (0: the VFE limit), got {alpha!r}")
    s2 = float(noise_variance)
    prior = pseudo_point_prior(kernel, X, Z, jitter)
    h = prior.h
    n = y.shape[0]
    d = alpha * h + s2
    tau = 1.0 / d
    nu = y * tau
    post = low_rank_posterior(prior.A, tau, nu)
    x = alpha * h / s2
    power_term = 0.5 * (1.0 - alpha) * np.sum((h / s2) * _log1p_over_x(x))
    value = (
        -0.5 * n * _LOG_2PI
        - 0.5 * np.sum(np.log(d))
        - np.sum(np.log(np.diag(post.L)))
        - 0.5 * (y @ nu - nu @ post.mean)
        - power_term
    )
    if not eval_gradient:
        return float(value), None, None, None
    b = nu - tau * post.mean  # (D + Qff)^-1 y
    xi_diag = tau - tau * tau * post.var  # diag (D + Qff)^-1
    r_diag = b * b - xi_diag
    eps = 0.5 * (alpha * r_diag - (1.0 - alpha) * tau)
    G_fu, G_uu = _q_weights(prior, post, tau, b, eps)
    g_theta, g_Z = _contract_prior_gradient(kernel, X, Z, prior, G_fu, G_uu, eps)
    g_noise = 0.5 * s2 * np.sum(r_diag) + 0.5 * (1.0 - alpha) * np.sum(h * tau)
    return float(value), g_theta, float(g_noise), g_Z


# --------------------------------------------------------------------------------------------
# Classification: iterative pseudo-point Power EP, eqs. (20), (106)-(110)
# --------------------------------------------------------------------------------------------
class _ConditionalProjection:
    """The projection for the site variable ``a_n = w_n^T u`` when the likelihood sees
    ``f_n | a_n ~ N(a_n, h_n)`` (eq. (20)).

    The fractional tilted distribution of ``f_n`` has cavity ``N(mu_c, s_c + h_n)``; with
    ``d1, d2`` the derivatives of its log normaliser in ``mu_c``, the new marginal of ``a_n`` is
    ``N(mu_c + s_c d1, s_c + s_c^2 d2)`` (eq. (20) projected on ``w_n``).
    """

    def __init__(self, inner: Any, h: np.ndarray) -> None:
        self.inner = inner
        self.h = h
        self.power = float(getattr(inner, "power", 1.0))
        self.wasserstein = isinstance(inner, QuantileMatching)
        if self.wasserstein and not isinstance(inner.likelihood, Probit):
            raise ValueError(
                "QP with pseudo-points is implemented for the probit likelihood (its marginal "
                "likelihood of a_n is again a probit); got "
                f"{getattr(inner.likelihood, 'name', inner.likelihood)!r}"
            )

    def derivatives(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(d1, d2, var_f)`` at the cavity (eq. (20)); for QP ``d2`` is replaced by the value
        that makes the new variance of ``a_n`` equal to sigma*^2 (see :func:`_qp_ratio`)."""
        var_f = cavity_std * cavity_std + self.h
        if self.wasserstein:
            m, s = self.inner.likelihood.tilted_moments(cavity_mean, np.sqrt(var_f), y)
        else:
            m, s = self.inner.project(cavity_mean, np.sqrt(var_f), y)
        d1 = (m - cavity_mean) / var_f
        d2 = (s * s - var_f) / (var_f * var_f)
        if self.wasserstein:
            r = _qp_ratio(self.inner, cavity_mean, cavity_std, self.h, y)
            s_c = cavity_std * cavity_std
            with np.errstate(divide="ignore", invalid="ignore"):
                d2 = np.where(s_c > 0, r * r * d2 + (r - 1.0) * (r + 1.0) / s_c, d2)
        return d1, d2, var_f

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
    scale = np.sqrt(1.0 + h)
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fractional cavity of ``a_n``, projection eq. (20), new site (eqs. (106)-(107) / alpha).

    The new site is written without cancellation, ``tau_new = -d2 / (1 + s_c d2) / alpha``,
    ``nu_new = (d1 - mu_c d2) / (1 + s_c d2) / alpha`` (eq. (107): ``1/v_new = -d2/(1 + s_c
    d2)``): an input far from every inducing input has ``s_c ~ ||w_n||^2 ~ 0`` and
    ``1/s_new - 1/s_c`` (qpinfer.ep's generic form) would lose every digit. Returns
    ``(tau_new, nu_new, ok, clipped)`` as :func:`qpinfer.ep._site_proposal`.
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
    clipped = ok & (tau_new < MIN_SITE_PRECISION)
    tau_new = np.where(clipped, MIN_SITE_PRECISION, tau_new)
    return tau_new, nu_new, ok, clipped


@dataclass
class SparsePEPResult:
    """Converged (or best) sites of pseudo-point Power EP and the posterior they imply."""

    tau: np.ndarray
    nu: np.ndarray
    posterior: LowRankPosterior
    log_marginal_likelihood: float
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    n_iter: int
    converged: bool
    rms_change: float
    n_clipped: int = 0
    n_skipped: int = 0
    history: list[float] = field(default_factory=list)


def _parallel_sweep(A, h, y, tau, nu, projection, damping):
    post = low_rank_posterior(A, tau, nu)
    proj = _ConditionalProjection(projection, h)
    tau_p, nu_p, ok, clipped = _sparse_site_proposal(proj, post.mean, post.var, tau, nu, y)
    tau_new = np.where(ok, (1.0 - damping) * tau + damping * tau_p, tau)
    nu_new = np.where(ok, (1.0 - damping) * nu + damping * nu_p, nu)
    tau_new = np.maximum(tau_new, MIN_SITE_PRECISION)
    return tau_new, nu_new, int(np.count_nonzero(clipped)), int(np.count_nonzero(~ok))


def _sequential_sweep(A, h, y, tau, nu, projection, damping):
    """Sites one at a time with rank-one updates of ``B^-1`` and ``mean_v``: O(M^2) per site."""
    tau = tau.copy()
    nu = nu.copy()
    post = low_rank_posterior(A, tau, nu)
    m = A.shape[0]
    Sigma = cho_solve((post.L, True), np.eye(m), check_finite=False)
    mv = post.mean_v.copy()
    n_clipped = n_skipped = 0
    for i in range(A.shape[1]):
        a = A[:, i]
        Sa = Sigma @ a
        s = float(a @ Sa)
        mu = float(a @ mv)
        proj = _ConditionalProjection(projection, h[i : i + 1])
        tau_p, nu_p, ok, clipped = _sparse_site_proposal(
            proj, np.array([mu]), np.array([s]), tau[i : i + 1], nu[i : i + 1], y[i : i + 1]
        )
        if not ok[0]:
            n_skipped += 1
            continue
        n_clipped += int(clipped[0])
        tau_i = max((1.0 - damping) * tau[i] + damping * tau_p[0], MIN_SITE_PRECISION)
        nu_i = (1.0 - damping) * nu[i] + damping * nu_p[0]
        d_tau = tau_i - tau[i]
        d_nu = nu_i - nu[i]
        tau[i] = tau_i
        nu[i] = nu_i
        denom = 1.0 + d_tau * s
        mv += Sa * ((d_nu - d_tau * mu) / denom)
        Sigma -= (d_tau / denom) * np.outer(Sa, Sa)
    return tau, nu, n_clipped, n_skipped


def run_sparse_pep(
    A: np.ndarray,
    h: np.ndarray,
    y: np.ndarray,
    projection: Any,
    *,
    schedule: str = "parallel",
    damping: float | None = None,
    max_iter: int = 1000,
    tol: float = 1e-6,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    compute_evidence: bool = True,
) -> SparsePEPResult:
    """Pseudo-point Power EP (eqs. (20), (106)-(109)) to convergence; energy eq. (110).

    Parameters
    ----------
    A, h:
        ``Lu^-1 Kuf`` (M x N) and ``diag(Kff - Qff)`` (:func:`pseudo_point_prior`).
    y:
        Observations (probit: -1/+1).
    projection:
        The local update of ``f_n``: :class:`qpinfer.power_ep.PowerMomentMatching` (``power`` is
        alpha), :class:`qpinfer.ep.MomentMatching` (alpha = 1), or
        :class:`qpinfer.ep.QuantileMatching` (QP with pseudo-points, probit: the variance of
        ``a_n`` is the Wasserstein sigma* of its tilted marginal, :func:`_qp_ratio`).
    schedule, damping, max_iter, tol, init:
        As :func:`qpinfer.ep.run_ep`: ``"parallel"`` (damping default 0.5) or ``"sequential"``
        (default 1.0); stop when the RMS change of ``(tau, nu)`` over a sweep is below ``tol``,
        else a :class:`~qpinfer.ep.ConvergenceWarning` and the sites with the smallest change.
        The parallel schedule halves its damping (down to 1/64) whenever 20 sweeps pass without
        a new smallest change: damping does not move the fixed points, and undamped-enough
        parallel updates oscillate on separable data.
    """
    A = np.asarray(A, dtype=np.float64)
    n = A.shape[1]
    h = np.asarray(h, dtype=np.float64)
    y = np.asarray(y)
    if h.shape != (n,) or y.shape != (n,):
        raise ValueError(f"h and y must have shape ({n},), got {h.shape} and {y.shape}")
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
    if init is None:
        tau, nu = np.zeros(n), np.zeros(n)
    else:
        tau = np.maximum(np.asarray(init[0], dtype=np.float64).copy(), 0.0)
        nu = np.asarray(init[1], dtype=np.float64).copy()
        if tau.shape != (n,) or nu.shape != (n,):
            raise ValueError(f"init sites must have shape ({n},)")
        if not (np.all(np.isfinite(tau)) and np.all(np.isfinite(nu))):
            tau, nu = np.zeros(n), np.zeros(n)
    sweep = _parallel_sweep if schedule == "parallel" else _sequential_sweep
    best = (np.inf, tau, nu)
    history: list[float] = []
    converged = False
    n_clipped = n_skipped = stalled = 0
    it = 0
    for it in range(1, int(max_iter) + 1):
        try:
            tau_new, nu_new, nc, ns = sweep(A, h, y, tau, nu, projection, damping)
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
            best, stalled = (rms, tau, nu), 0
        else:
            stalled += 1
        if rms < tol:
            converged = True
            break
        if schedule == "parallel" and stalled >= _STALL_SWEEPS and damping > _MIN_DAMPING:
            damping, stalled = damping / 2.0, 0  # oscillation: damping keeps the fixed points
    rms, tau, nu = best
    if not converged:
        warnings.warn(
            f"sparse Power EP did not converge within max_iter={max_iter} sweeps (best RMS "
            f"change of site parameters {rms:.3g}, tol={tol:.3g}); returning the sites with the "
            "smallest change",
            ConvergenceWarning,
            stacklevel=2,
        )
        if not np.isfinite(rms):
            tau, nu = np.zeros(n), np.zeros(n)
    post = low_rank_posterior(A, tau, nu)
    log_z = np.nan
    cav_mean = cav_var = np.full(n, np.nan)
    if compute_evidence:
        proj = _ConditionalProjection(projection, h)
        log_z, cav_mean, cav_var = power_ep_log_evidence(post, tau, nu, y, proj)
    return SparsePEPResult(
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


# --------------------------------------------------------------------------------------------
# Inducing inputs and prediction
# --------------------------------------------------------------------------------------------
def kmeans_inducing_points(X: np.ndarray, n_inducing: int, random_state: Any = None) -> np.ndarray:
    """``n_inducing`` k-means centroids of the rows of ``X`` (k-means++ start, 25 Lloyd steps);
    ``X`` itself (a copy) when ``n_inducing`` equals the number of rows."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    if n_inducing == n:
        return X.copy()
    rng = np.random.default_rng(random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an empty cluster keeps its k-means++ seed (a data row)
        Z, _ = kmeans2(X, int(n_inducing), iter=25, minit="++", rng=rng)
    return np.asarray(Z, dtype=np.float64)


def _predict_latent(
    kernel: Any, Z: np.ndarray, prior_Lu: np.ndarray, post: LowRankPosterior, Xs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``f* | y``: mean ``a*^T mean_v``, variance ``k** - ||a*||^2 + ||L_B^-1 a*||^2``,
    ``a* = Lu^-1 Ku*`` (eq. (18))."""
    a_star = solve_triangular(prior_Lu, kernel(Z, Xs), lower=True, check_finite=False)
    mean = a_star.T @ post.mean_v
    c = solve_triangular(post.L, a_star, lower=True, check_finite=False)
    var = kernel.diag(Xs) - np.einsum("mn,mn->n", a_star, a_star) + np.einsum("mn,mn->n", c, c)
    return mean, np.maximum(var, 0.0)


# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------
class _SparseBase(ParamsMixin):
    """Parameter handling shared by the two estimators (scikit-learn protocol via
    :class:`qpinfer.estimator.ParamsMixin`)."""

    _FITTED_ATTR = "inducing_points_"

    def _validate_common(self) -> None:
        if self.optimizer not in ("lbfgs", None):
            raise ValueError(f"optimizer must be 'lbfgs' or None, got {self.optimizer!r}")
        mi = self.max_optimizer_iter
        if isinstance(mi, bool) or not (isinstance(mi, int | np.integer) and mi >= 1):
            raise ValueError(f"max_optimizer_iter must be a positive integer, got {mi!r}")
        if not (isinstance(self.jitter, int | float) and self.jitter >= 0):
            raise ValueError(f"jitter must be a non-negative number, got {self.jitter!r}")

    def _n_inducing_for(self, n_samples: int) -> int:
        """The number of pseudo-points M for ``n_samples`` training rows, resolved at fit time:
        ``inducing_points``' rows if given, else ``n_inducing``, whose default ``None`` means
        ``min(DEFAULT_N_INDUCING, n_samples)`` (so the default fits any data set). An explicit
        ``n_inducing`` above ``n_samples`` is refused (at most one pseudo-point per training
        point; not clipped, so the M a user asked for is never silently changed)."""
        if self.inducing_points is not None:
            return int(np.asarray(self.inducing_points).shape[0])
        m = self.n_inducing
        if m is None:
            return min(DEFAULT_N_INDUCING, n_samples)
        is_int = isinstance(m, int | np.integer) and not isinstance(m, bool)
        if not (is_int and 1 <= m <= n_samples):
            raise ValueError(
                f"n_inducing must be None (the default, min({DEFAULT_N_INDUCING}, n_samples)) or "
                f"an integer in [1, n_samples={n_samples}] (at most one pseudo-point per training "
                f"point), got {m!r}"
            )
        return int(m)

    def _initial_kernel(self, n_features: int) -> ARDSquaredExponential:
        if self.kernel is not None:
            _check_kernel(self.kernel)
            return self.kernel.with_theta(self.kernel.theta)
        ls = np.asarray(self.length_scale, dtype=np.float64)
        if ls.ndim == 0 and self.ard:
            ls = np.full(n_features, float(ls))
        elif ls.ndim == 1 and ls.size not in (1, n_features):
            raise ValueError(f"length_scale has {ls.size} entries but X has {n_features} features")
        return ARDSquaredExponential(self.variance, ls)

    def _initial_inducing(self, X: np.ndarray) -> np.ndarray:
        m = self._n_inducing_for(X.shape[0])
        if self.inducing_points is not None:
            Z = np.asarray(self.inducing_points, dtype=np.float64)
            if Z.ndim != 2 or Z.shape[1] != X.shape[1] or not np.all(np.isfinite(Z)):
                raise ValueError(
                    f"inducing_points must be a finite (M, {X.shape[1]}) array, got shape {Z.shape}"
                )
            return Z.copy()
        return kmeans_inducing_points(X, m, self.random_state)


class SparseGPRegressor(_SparseBase):
    """Sparse GP regression with M pseudo-points by Power EP, from VFE to FITC (paper 004).

    Fits the kernel hyperparameters, the noise variance and (optionally) the inducing inputs by
    maximising the collapsed Power EP energy eq. (128) with L-BFGS-B and its analytic gradient
    (:func:`sparse_regression_energy`). O(N M^2) per evaluation.

    Parameters
    ----------
    n_inducing : int or None, default None
        Number of pseudo-points M, in [1, n_samples]; ``None`` means ``min(50, n_samples)``,
        resolved at fit time (the stored parameter stays ``None``), so the default fits any data
        set. An explicit value above n_samples is refused with a ``ValueError``. Ignored when
        ``inducing_points`` is given; the M used is ``inducing_points_.shape[0]``.
    alpha : float in (0, 1] or "vfe"
        Power EP power: 1 is FITC, 0.5 the paper's recommended middle, ``"vfe"`` the
        ``alpha -> 0`` limit (Titsias' variational bound, evaluated as a limit).
    kernel, variance, length_scale, ard :
        Initial ARD SE kernel (as :class:`qpinfer.GPClassifier`).
    noise_variance : float
        Initial Gaussian noise variance (in units of the normalised targets if ``normalize_y``).
    normalize_y : bool
        Fit to ``(y - mean) / std`` and undo it in predictions (the prior mean is zero).
    inducing_points : array (M, n_features) or None
        Initial inducing inputs; ``None``: k-means centroids of X (:func:`kmeans_inducing_points`).
    optimizer : {"lbfgs", None}
        Maximise eq. (128) or keep everything fixed.
    optimize_inducing : bool
        Whether L-BFGS-B also moves the inducing inputs.
    max_optimizer_iter : int
        L-BFGS-B iterations at most (relative function tolerance 1e-9).
    jitter : float
        Added to ``Kuu``'s diagonal, relative to the kernel variance.
    random_state : int, Generator or None
        Seeds k-means.

    Attributes
    ----------
    kernel_, noise_variance_, inducing_points_ :
        Fitted kernel, noise variance (normalised units) and inducing inputs.
    log_marginal_likelihood_ : float
        Eq. (128) at the fitted values, for the original (un-normalised) targets.
    n_features_in_, n_evaluations_ : int
    """

    def __sklearn_tags__(self):  # called by scikit-learn only, so its import is fine here
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(
            estimator_type="regressor",
            target_tags=TargetTags(required=True),
            regressor_tags=RegressorTags(),
            input_tags=InputTags(),
        )

    def __init__(
        self,
        n_inducing: int | None = None,
        alpha: float | str = 0.5,
        *,
        kernel: Any = None,
        variance: float = 1.0,
        length_scale: float | np.ndarray = 1.0,
        ard: bool = True,
        noise_variance: float = 0.1,
        normalize_y: bool = True,
        inducing_points: Any = None,
        optimizer: str | None = "lbfgs",
        optimize_inducing: bool = True,
        max_optimizer_iter: int = 1000,
        jitter: float = 1e-6,
        random_state: Any = None,
    ) -> None:
        self.n_inducing = n_inducing
        self.alpha = alpha
        self.kernel = kernel
        self.variance = variance
        self.length_scale = length_scale
        self.ard = ard
        self.noise_variance = noise_variance
        self.normalize_y = normalize_y
        self.inducing_points = inducing_points
        self.optimizer = optimizer
        self.optimize_inducing = optimize_inducing
        self.max_optimizer_iter = max_optimizer_iter
        self.jitter = jitter
        self.random_state = random_state

    def _alpha_value(self) -> float:
        if isinstance(self.alpha, str):
            if self.alpha == "vfe":
                return 0.0
            raise ValueError(f"alpha must be in (0, 1] or 'vfe', got {self.alpha!r}")
        try:
            return check_power(self.alpha)
        except ValueError:
            raise ValueError(
                f"alpha must be in (0, 1] or 'vfe' (the alpha -> 0 limit), got {self.alpha!r}"
            ) from None

    def _energy(self, params, X, y, kernel, Z_fixed, alpha, eval_gradient=True):
        n_theta = kernel.theta.size
        kern = kernel.with_theta(params[:n_theta])
        log_s2 = params[n_theta]
        Z = Z_fixed if Z_fixed is not None else params[n_theta + 1 :].reshape(-1, X.shape[1])
        value, g_theta, g_s2, g_Z = sparse_regression_energy(
            kern, X, y, Z, np.exp(log_s2), alpha, jitter=self.jitter, eval_gradient=eval_gradient
        )
        if not eval_gradient:
            return value, None
        grad = [g_theta, [g_s2]]
        if Z_fixed is None:
            grad.append(g_Z.ravel())
        return value, np.concatenate(grad)

    def fit(self, X: Any, y: Any) -> SparseGPRegressor:
        """Fit hyperparameters, noise and inducing inputs by maximising eq. (128)."""
        self._validate_common()
        alpha = self._alpha_value()
        if not (isinstance(self.noise_variance, int | float) and self.noise_variance > 0):
            raise ValueError(f"noise_variance must be positive, got {self.noise_variance!r}")
        X = _check_X(X, estimator=type(self).__name__)
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change the "
                "shape of y to (n_samples, ), for example using ravel().",
                DataConversionWarning,
                stacklevel=2,
            )
            y = y.ravel()
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("Input y contains NaN or infinity.")
        if self.normalize_y:
            y_mean = float(y.mean())
            y_std = float(y.std()) or 1.0
        else:
            y_mean, y_std = 0.0, 1.0
        yn = (y - y_mean) / y_std
        kernel = self._initial_kernel(X.shape[1])
        Z = self._initial_inducing(X)
        log_s2 = np.log(float(self.noise_variance))
        Z_fixed = None if self.optimize_inducing else Z
        params = np.concatenate([kernel.theta, [log_s2]] + ([Z.ravel()] if Z_fixed is None else []))
        n_evals = 1
        if self.optimizer == "lbfgs":
            bounds = np.vstack([kernel.bounds, [[np.log(1e-6), np.log(1e4)]]])
            bounds = list(map(tuple, bounds)) + [(None, None)] * (params.size - bounds.shape[0])
            state = {"n": 0}

            def objective(p):
                state["n"] += 1
                try:
                    value, grad = self._energy(p, X, yn, kernel, Z_fixed, alpha)
                except np.linalg.LinAlgError:
                    return np.inf, np.zeros_like(p)
                if not (np.isfinite(value) and np.all(np.isfinite(grad))):
                    return np.inf, np.zeros_like(p)
                return -value, -grad

            res = minimize(
                objective,
                params,
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": int(self.max_optimizer_iter), "ftol": _LBFGS_FTOL},
            )
            params = res.x
            n_evals = state["n"]
        n_theta = kernel.theta.size
        self.kernel_ = kernel.with_theta(params[:n_theta])
        self.noise_variance_ = float(np.exp(params[n_theta]))
        Zf = Z if Z_fixed is not None else params[n_theta + 1 :].reshape(-1, X.shape[1])
        value, _ = self._energy(params, X, yn, kernel, Z_fixed, alpha, eval_gradient=False)
        prior = pseudo_point_prior(self.kernel_, X, Zf, self.jitter)
        d = alpha * prior.h + self.noise_variance_
        self.posterior_ = low_rank_posterior(prior.A, 1.0 / d, yn / d)
        self._Lu = prior.Lu
        self.alpha_ = alpha
        self.inducing_points_ = Zf
        self.n_features_in_ = X.shape[1]
        self.X_train_ = X
        self.y_train_ = y
        self._y_mean, self._y_std = y_mean, y_std
        self.log_marginal_likelihood_ = float(value - X.shape[0] * np.log(y_std))
        self.n_evaluations_ = n_evals
        return self

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (original units)."""
        X = self._check_predict_X(X)
        mean, var = _predict_latent(
            self.kernel_, self.inducing_points_, self._Lu, self.posterior_, X
        )
        return mean * self._y_std + self._y_mean, var * self._y_std**2

    def predict(self, X: Any, return_std: bool = False) -> Any:
        """Predictive mean; with ``return_std`` also the standard deviation of a new observation
        ``y*`` (latent variance plus the noise variance)."""
        mean, var = self.predict_latent(X)
        if not return_std:
            return mean
        return mean, np.sqrt(var + self.noise_variance_ * self._y_std**2)

    def log_predictive_density(self, X: Any, y: Any) -> np.ndarray:
        """``log N(y | mean*, var* + noise)`` per test point (original units)."""
        mean, std = self.predict(X, return_std=True)
        y = np.asarray(y, dtype=np.float64).ravel()
        if y.shape != mean.shape:
            raise ValueError(f"y has shape {y.shape}, expected {mean.shape}")
        z = (y - mean) / std
        return -0.5 * z * z - np.log(std) - 0.5 * _LOG_2PI

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Coefficient of determination R^2 of :meth:`predict` (scikit-learn's regressor score)."""
        pred = self.predict(X)
        y = np.asarray(y, dtype=np.float64).ravel()
        w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, float)
        ybar = np.sum(w * y) / np.sum(w)
        return float(1.0 - np.sum(w * (y - pred) ** 2) / np.sum(w * (y - ybar) ** 2))

    def log_marginal_likelihood(
        self, theta: np.ndarray | None = None, eval_gradient: bool = False
    ) -> float | tuple[float, np.ndarray]:
        """Eq. (128) for the normalised targets at ``theta = [kernel log hyperparameters,
        log noise_variance]`` (default: the fitted ones), inducing inputs fixed at the fitted
        ones; with ``eval_gradient`` also its gradient in ``theta``."""
        self._check_is_fitted()
        if theta is None:
            theta = np.concatenate([self.kernel_.theta, [np.log(self.noise_variance_)]])
        yn = (self.y_train_ - self._y_mean) / self._y_std
        value, grad = self._energy(
            np.asarray(theta, dtype=np.float64),
            self.X_train_,
            yn,
            self.kernel_,
            self.inducing_points_,
            self.alpha_,
            eval_gradient=eval_gradient,
        )
        return (value, grad) if eval_gradient else value


class SparseGPClassifier(ProbitPredictionsMixin, _SparseBase):
    """Sparse GP classification (probit) with M pseudo-points by Power EP (paper 004).

    Iterative pseudo-point Power EP (:func:`run_sparse_pep`, eqs. (20), (106)-(109)), energy
    eq. (110); L-BFGS-B maximises the energy over the kernel hyperparameters and (optionally)
    the inducing inputs, running Power EP to convergence at every evaluation (warm-started) with
    the analytic gradient of :func:`sparse_pep_gradient`. O(N M^2) per sweep.

    QP with pseudo-points (``method="qp"``): the alpha = 1 moment projection of every site is
    replaced by the L2-Wasserstein projection of paper 000 eq. (7). A site is a factor of ``u``
    through ``a_n = w_n^T u`` only, so its tilted distribution differs from the cavity only in
    the marginal of ``a_n``, ``N(a | mu_c, s_c) Phi(y a / sqrt(1 + h_n))`` (``f_n | u`` has
    variance ``h_n``): QP keeps EP's mean and sets the variance of ``a_n`` to that marginal's
    sigma*, which is the probit's at the rescaled cavity (:func:`_qp_ratio`; a table lookup, or
    exact sigma*). With ``M = N``, ``Z = X`` (``h = 0``) this is exactly full QP
    (:class:`qpinfer.GPClassifier` ``method="qp"``), and sigma* <= sigma_EP (Theorem 2) gives
    sites at least as precise as sparse EP's. Hyperparameters and inducing inputs
    (``optimizer="lbfgs"``) are those of sparse EP (alpha = 1; its energy eq. (110) has the exact
    gradient at its fixed point, QP's does not -- as for the full GPClassifier), after which QP
    runs at them warm-started from EP's sites; ``log_marginal_likelihood_`` is eq. (110) at QP's
    sites. Cost: one sigma* per site update on top of EP's O(M^2) (``docs/rep.md`` has timings).

    Parameters
    ----------
    n_inducing : int or None, default None
        Number of pseudo-points M, in [1, n_samples]; ``None`` means ``min(50, n_samples)``,
        resolved at fit time (the stored parameter stays ``None``), so the default fits any data
        set. An explicit value above n_samples is refused with a ``ValueError``. Ignored when
        ``inducing_points`` is given; the M used is ``inducing_points_.shape[0]``.
    alpha : float in (0, 1]
        Power EP power: 1 is EP (FITC-EP), smaller values move toward the variational solution.
        Ignored by ``method="qp"`` (which replaces the alpha = 1 projection).
    method : {"pep", "qp"}
        Power EP with ``alpha`` (moment projection of the fractional tilted distribution), or
        QP (Wasserstein projection, alpha = 1).
    table : None, "exact", path or table object
        Where QP gets sigma* from, as :class:`qpinfer.GPClassifier`'s ``table``.
    kernel, variance, length_scale, ard, optimizer, schedule, max_iter, tol, damping :
        As :class:`qpinfer.GPClassifier`.
    inducing_points, optimize_inducing, max_optimizer_iter, jitter, random_state :
        As :class:`SparseGPRegressor`.

    Attributes
    ----------
    classes_, n_features_in_, kernel_, inducing_points_ :
    log_marginal_likelihood_ : float
        Eq. (110) at the fitted values.
    pep_result_ : SparsePEPResult
    n_iter_, n_evaluations_ : int
    """

    def __init__(
        self,
        n_inducing: int | None = None,
        alpha: float = 0.5,
        *,
        kernel: Any = None,
        variance: float = 1.0,
        length_scale: float | np.ndarray = 1.0,
        ard: bool = True,
        inducing_points: Any = None,
        optimizer: str | None = "lbfgs",
        optimize_inducing: bool = True,
        max_optimizer_iter: int = 1000,
        schedule: str = "parallel",
        max_iter: int = 1000,
        tol: float = 1e-6,
        damping: float | None = None,
        jitter: float = 1e-6,
        random_state: Any = None,
        method: str = "pep",
        table: Any = None,
    ) -> None:
        self.n_inducing = n_inducing
        self.alpha = alpha
        self.method = method
        self.table = table
        self.kernel = kernel
        self.variance = variance
        self.length_scale = length_scale
        self.ard = ard
        self.inducing_points = inducing_points
        self.optimizer = optimizer
        self.optimize_inducing = optimize_inducing
        self.max_optimizer_iter = max_optimizer_iter
        self.schedule = schedule
        self.max_iter = max_iter
        self.tol = tol
        self.damping = damping
        self.jitter = jitter
        self.random_state = random_state

    def _validate(self) -> float:
        self._validate_common()
        if self.method not in ("pep", "qp"):
            raise ValueError(f"method must be 'pep' or 'qp', got {self.method!r}")
        alpha = check_power(self.alpha)
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be 'parallel' or 'sequential', got {self.schedule!r}")
        mi = self.max_iter
        if isinstance(mi, bool) or not (isinstance(mi, int | np.integer) and mi >= 1):
            raise ValueError(f"max_iter must be a positive integer, got {mi!r}")
        if not (isinstance(self.tol, int | float) and self.tol > 0):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")
        if self.damping is not None and not (0 < self.damping <= 1):
            raise ValueError(f"damping must be None or in (0, 1], got {self.damping!r}")
        return alpha

    def _run(self, prior, y, projection, init=None) -> SparsePEPResult:
        return run_sparse_pep(
            prior.A,
            prior.h,
            y,
            projection,
            schedule=self.schedule,
            damping=self.damping,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            init=init,
        )

    def fit(self, X: Any, y: Any) -> SparseGPClassifier:
        """Fit sites, kernel hyperparameters and inducing inputs (eq. (110))."""
        alpha = self._validate()
        X = _check_X(X, estimator=type(self).__name__)
        y = _check_y(y, X.shape[0], type(self).__name__)
        classes, y_pm = binary_labels(y, type(self).__name__)
        if self.method == "qp":
            lik = Probit()
            table = GPEstimatorBase._resolve_table(self, lik)  # same rules as GPClassifier
            final = QuantileMatching(lik, table)
            projection = MomentMatching(lik)  # hyperparameters/inducing inputs: sparse EP's
        else:
            table = None
            projection = final = PowerMomentMatching(Probit(), alpha)
        kernel = self._initial_kernel(X.shape[1])
        Z = self._initial_inducing(X)
        d = X.shape[1]
        n_theta = kernel.theta.size
        n_evals = 1
        if self.optimizer == "lbfgs":
            state: dict[str, Any] = {"init": None, "best": None, "n": 0}
            opt_Z = bool(self.optimize_inducing)

            def objective(p):
                state["n"] += 1
                kern = kernel.with_theta(p[:n_theta])
                Zp = p[n_theta:].reshape(-1, d) if opt_Z else Z
                try:
                    prior = pseudo_point_prior(kern, X, Zp, self.jitter)
                    res = self._run(prior, y_pm, projection, state["init"])
                    g_theta, g_Z = sparse_pep_gradient(kern, X, Zp, prior, res, y_pm, projection)
                except np.linalg.LinAlgError:
                    return np.inf, np.zeros_like(p)
                grad = np.concatenate([g_theta, g_Z.ravel()]) if opt_Z else g_theta
                value = res.log_marginal_likelihood
                if not (np.isfinite(value) and np.all(np.isfinite(grad))):
                    return np.inf, np.zeros_like(p)
                state["init"] = (res.tau, res.nu)
                best = state["best"]
                if best is None or value > best[3].log_marginal_likelihood:
                    state["best"] = (kern, Zp.copy(), prior, res)
                return -value, -grad

            p0 = np.concatenate([kernel.theta] + ([Z.ravel()] if opt_Z else []))
            bounds = list(map(tuple, kernel.bounds)) + [(None, None)] * (p0.size - n_theta)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", RuntimeWarning)
                minimize(
                    objective,
                    p0,
                    jac=True,
                    method="L-BFGS-B",
                    bounds=bounds,
                    options={"maxiter": int(self.max_optimizer_iter), "ftol": _LBFGS_FTOL},
                )
            if state["best"] is None:
                raise ValueError("sparse Power EP failed at every hyperparameter value tried")
            kernel, Z, prior, result = state["best"]
            n_evals = state["n"]
            if not result.converged:
                warnings.warn(
                    f"sparse Power EP did not converge within max_iter={self.max_iter} sweeps at "
                    f"the fitted hyperparameters (RMS change {result.rms_change:.3g})",
                    ConvergenceWarning,
                    stacklevel=2,
                )
        else:
            prior = pseudo_point_prior(kernel, X, Z, self.jitter)
            result = None if final is not projection else self._run(prior, y_pm, projection)
        if final is not projection:  # QP at the (fitted or given) values, from EP's sites
            init = None if result is None else (result.tau, result.nu)
            result = self._run(prior, y_pm, final, init)
        self.table_ = table
        self.classes_ = classes
        self.n_features_in_ = d
        self.X_train_ = X
        self.y_train_ = y_pm
        self.kernel_ = kernel
        self.inducing_points_ = Z
        self.projection_ = final
        self.pep_result_ = result
        self._Lu = prior.Lu
        self.log_marginal_likelihood_ = result.log_marginal_likelihood
        self.n_iter_ = result.n_iter
        self.n_evaluations_ = n_evals
        return self

    def _warn_exact(self, reason: str) -> None:  # used by GPEstimatorBase._resolve_table
        warn_exact_once(reason, type(self).__name__)

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (eq. (18))."""
        X = self._check_predict_X(X)
        return _predict_latent(
            self.kernel_, self.inducing_points_, self._Lu, self.pep_result_.posterior, X
        )
