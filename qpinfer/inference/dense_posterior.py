"""The Gaussian posterior of a full GP prior and its sites (Zhang et al., 2020, eq. (3)), in R&W's B-form.

:func:`posterior_from_sites` computes ``Sigma = K - K S~^1/2 B^-1 S~^1/2 K``, ``mean = Sigma nu~``
with ``B = I + S~^1/2 K S~^1/2`` (Cholesky), or, with negative site precisions (non-log-concave
likelihoods, see :mod:`qpinfer.inference.ep`), from ``Sigma = K - K s M^-1 s K``, ``M = diag(sign
tau~) + s K s``, ``s = |tau~|^1/2`` (Woodbury; ``M`` symmetric indefinite, factorised by ``eigh``,
whose inertia certifies that the posterior is positive definite: exactly as many negative
eigenvalues as negative sites). :func:`predict_latent` gives R&W eqs. (3.60)-(3.61).

:class:`DenseSiteRepresentation` is this posterior as the site loop
(:func:`qpinfer.inference.site_loop.run_sites`) sees it: ``refresh`` (eq. (3) from the sites), and
for the sequential schedule (R&W Algorithm 3.5) the marginal of one site and the rank-one update
``Sigma <- Sigma - c s_i s_i^T`` after its change. The rank-one updates are *deferred* in blocks
and applied as one rank-k update (BLAS-3) -- the same arithmetic, in a different order -- and the
column ``s_i`` is reconstructed from the pending block when site ``i`` is visited.

:func:`check_kernel_matrix` refuses a prior matrix ``K`` that is no covariance (not symmetric, or
indefinite beyond round-off) before any of this runs on it; :func:`degenerate_kernel_matrix` tells
whether ``K`` is as good as the identity or a constant for a hyperparameter search (features on a
scale far from the length scales).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import blas, cho_solve, eigvalsh, lapack, solve_triangular

__all__ = [
    "DEGENERATE_CORRELATION",
    "KERNEL_PSD_RTOL",
    "DenseSiteRepresentation",
    "Posterior",
    "PosteriorMoments",
    "check_kernel_matrix",
    "degenerate_kernel_matrix",
    "posterior_from_sites",
    "predict_latent",
    "scaled_B_inverse",
]


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
    #: ``L^-1 S~^1/2 K`` (``Sigma = K - V^T V``) if :func:`posterior_from_sites` was asked to
    #: keep it
    V: np.ndarray | None = None

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


def scaled_B_inverse(L: np.ndarray, sqrt_tau: np.ndarray) -> np.ndarray:
    """``S~^1/2 B^-1 S~^1/2 = (K + S~^-1)^-1`` from the lower Cholesky factor ``L`` of ``B``
    (LAPACK ``dpotri``): the matrix of the evidence gradients, R&W eq. (5.27) and Alg. 5.1."""
    Binv, info = lapack.dpotri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed (info={info})")
    Binv = np.tril(Binv)
    Binv += np.tril(Binv, -1).T
    return (sqrt_tau[:, None] * Binv) * sqrt_tau[None, :]


def posterior_from_sites(
    K: np.ndarray, tau: np.ndarray, nu: np.ndarray, full_cov: bool = False, keep_v: bool = False
) -> Posterior:
    """Posterior moments of eq. (3): ``Sigma = K - K S^1/2 B^-1 S^1/2 K``, ``mean = Sigma nu~``.

    Negative site precisions are allowed (see the module docstring); ``LinAlgError`` if the
    posterior they imply is not positive definite. ``keep_v``: keep ``V = L^-1 S~^1/2 K`` in
    :attr:`Posterior.V` (positive sites), from which ``Sigma = K - V^T V`` costs one product.
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
    return Posterior(mean=mean, var=var, L=L, sqrt_tau=s, b=b, Sigma=Sigma, V=V if keep_v else None)


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


class PosteriorMoments:
    """``mean`` and ``var`` of a result's ``posterior`` (EP, Laplace and VB results)."""

    @property
    def mean(self) -> np.ndarray:
        return self.posterior.mean

    @property
    def var(self) -> np.ndarray:
        return self.posterior.var


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


#: the kernel check's tolerance on negative eigenvalues, in units of ``n eps max|diag K|``: a
#: positive semi-definite kernel's matrix, computed in floating point, has eigenvalues down to
#: about ``-n eps max|diag K|`` (each entry carries a few ulps of the diagonal's scale, a
#: perturbation of 2-norm up to ``n`` times that); measured on scikit-learn's RBF, Matern,
#: RationalQuadratic and DotProduct and the SE kernel, n = 50 ... 800, length scales 1e-3 ... 1e5,
#: features offset by up to 1e6: at most 3 units. 100 leaves a margin of 30.
KERNEL_PSD_RTOL = 100.0
#: off-diagonal correlations all below this (or all above ``1 -`` this): the kernel matrix is
#: as good as the identity (or a constant) for a hyperparameter search
#: (:func:`degenerate_kernel_matrix`). Measured on standardised breast-cancer rows (30 features)
#: and two-blob data scaled by 1e-4 ... 1e3, SE kernel started at length scale 1: EP and Laplace
#: searches stayed at the start (or went to the variance's bound) from largest correlations of
#: 9.4e-7 and below and moved away from 6.8e-3 and above; at the other end they stayed from
#: smallest correlations 1 - 7e-5 and moved from 0.97 (the same data at scale 1e-4 moved too).
DEGENERATE_CORRELATION = 1e-3


def _kernel_repr(kernel: Any) -> str:
    with np.errstate(invalid="ignore"):  # scikit-learn's repr takes the root of a constant
        return repr(kernel)


def check_kernel_matrix(K: np.ndarray, kernel: Any, name: str = "kernel", on: str = "X") -> None:
    """``ValueError`` naming ``name`` and ``repr(kernel)`` unless the matrix ``K = kernel(X)``
    is finite, symmetric and positive semi-definite up to round-off: no entry of ``K - K^T``
    and no eigenvalue below ``-tol``, ``tol = KERNEL_PSD_RTOL * n * eps * max|diag K|``
    (:data:`KERNEL_PSD_RTOL`). One Cholesky factorisation of ``K + tol I`` decides (it exists
    only if every eigenvalue of ``K`` exceeds ``-tol``); the smallest eigenvalue, which the
    message quotes, is computed only when it fails. A matrix that is no covariance (a
    ``ConstantKernel`` with a negative value, a sum with a negative term, a user's kernel with a
    bug) makes every EP cavity improper: the site updates are skipped and the "fit" is the
    prior; Laplace and VB fail to factorise. ``on`` is what the message calls ``X`` (the
    sparse estimators check ``kernel(Z)`` on their inducing inputs)."""
    K = np.asarray(K)
    who = f"{name} {_kernel_repr(kernel)}"
    if not np.all(np.isfinite(K)):
        raise ValueError(
            f"{who} gave a kernel matrix with non-finite entries on {on} (nan or inf): check the "
            "kernel's hyperparameters (a negative constant_value has no log) and X's scale"
        )
    n = K.shape[0]
    if n == 0:
        return
    scale = float(np.max(np.abs(np.diagonal(K))))
    tol = KERNEL_PSD_RTOL * n * np.finfo(np.float64).eps * scale
    asym = float(np.max(np.abs(K - K.T)))
    if asym > tol:
        raise ValueError(
            f"{who} is not symmetric on {on}: its matrix K has |K - K^T| up to {asym:.3g} "
            f"(round-off allows {tol:.3g}); a covariance function must give k(x, z) = k(z, x)"
        )
    shifted = K + tol * np.eye(n)
    _, info = lapack.dpotrf(shifted, lower=1, clean=0, overwrite_a=1)
    if info == 0:
        return
    smallest = float(eigvalsh(K, subset_by_index=[0, 0], check_finite=False)[0])
    if smallest >= -tol:
        return
    low, high = np.min(np.diagonal(K)), np.max(np.diagonal(K))
    raise ValueError(
        f"{who} is not positive semi-definite on {on}: its matrix K has smallest eigenvalue "
        f"{smallest:.4g} (variances, its diagonal, from {low:.4g} to {high:.4g}; round-off "
        f"allows {-tol:.3g}). A covariance function must give a positive semi-definite matrix: "
        "a ConstantKernel with a negative constant_value, or a sum with a negative term, does not"
    )


def degenerate_kernel_matrix(K: np.ndarray, block: int = 1024) -> str | None:
    """``"identity"`` if every correlation ``K_ij / sqrt(K_ii K_jj)`` between two rows is below
    :data:`DEGENERATE_CORRELATION` in absolute value (the rows as good as independent: the
    features' scale is far above the length scales), ``"constant"`` if every one is above
    ``1 -`` that (all rows alike: far below them), else ``None`` (also for fewer than two rows
    or a diagonal entry that is not positive). Row blocks of ``block`` bound the memory."""
    n = K.shape[0]
    d = np.diagonal(K)
    if n < 2 or not np.all(d > 0):
        return None
    s = 1.0 / np.sqrt(d)
    low, high = np.inf, -np.inf  # off-diagonal extremes of |corr| and corr
    for start in range(0, n, block):
        C = K[start : start + block] * s[start : start + block, None] * s[None, :]
        rows = np.arange(C.shape[0])
        C[rows, start + rows] = np.nan  # the diagonal
        high = max(high, float(np.nanmax(np.abs(C))))
        low = min(low, float(np.nanmin(C)))
        if high >= DEGENERATE_CORRELATION and low <= 1.0 - DEGENERATE_CORRELATION:
            return None
    if high < DEGENERATE_CORRELATION:
        return "identity"
    return "constant" if low > 1.0 - DEGENERATE_CORRELATION else None


class DenseSiteRepresentation:
    """A full GP prior ``K`` (N x N) as the site loop's posterior representation (eq. (3)).

    ``refresh(tau, nu)`` is :func:`posterior_from_sites` (``keep_v``: each posterior keeps its
    ``V``, for a site-update Jacobian at the loop's result); ``sequential(tau, nu)`` starts one
    sequential sweep (R&W Alg. 3.5) with rank-one updates deferred into rank-``block_size`` ones.
    """

    def __init__(self, K: np.ndarray, block_size: int = 128, keep_v: bool = False) -> None:
        self.K = K
        self.n_sites = K.shape[0]
        self.block_size = block_size
        self.keep_v = keep_v

    def refresh(self, tau: np.ndarray, nu: np.ndarray) -> Posterior:
        return posterior_from_sites(self.K, tau, nu, keep_v=self.keep_v)

    def sequential(self, tau: np.ndarray, nu: np.ndarray) -> _DeferredRankOneUpdates:
        return _DeferredRankOneUpdates(self.K, tau, nu, self.block_size)


class _DeferredRankOneUpdates:
    """The posterior during a sequential sweep (R&W Alg. 3.5), recomputed from the sites at its
    start (line 12 of Alg. 3.5: round-off does not accumulate over sweeps).

    Invariant: the current posterior covariance is ``Sigma - U[:, :k] diag(c[:k]) U[:, :k]^T``.
    """

    def __init__(self, K: np.ndarray, tau: np.ndarray, nu: np.ndarray, block_size: int) -> None:
        n = K.shape[0]
        post = posterior_from_sites(K, tau, nu, full_cov=True)
        self.Sigma = post.Sigma  # Fortran order: columns are contiguous
        self.mu = post.mean.copy()
        self.block_size = max(1, min(block_size, n))
        self.U = np.empty((n, self.block_size), order="F")
        self.c = np.empty(self.block_size)
        self.k = 0
        self.col = np.empty(0)

    def marginal(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``f_i`` (1-element arrays); keeps the column ``s_i``."""
        col = self.Sigma[:, i].copy()
        k = self.k
        if k:
            col -= self.U[:, :k] @ (self.c[:k] * self.U[i, :k])
        self.col = col
        return self.mu[i : i + 1], col[i : i + 1]

    def apply(self, i: int, d_tau: float, d_nu: float) -> bool:
        """Change site ``i`` by ``(d_tau, d_nu)`` (after :meth:`marginal` of ``i``); ``False``
        (nothing changed) if the posterior would become improper, ``1 + d_tau Sigma_ii <= 0``
        (possible with negative sites only)."""
        col = self.col
        sii = col[i]
        if not (1.0 + d_tau * sii > 0):
            return False
        ci = d_tau / (1.0 + d_tau * sii)
        # mean update: mu <- Sigma_new nu_new, written as a rank-one correction (as GPy does)
        self.mu -= (ci * (self.mu[i] + sii * d_nu) - d_nu) * col
        self.U[:, self.k] = col
        self.c[self.k] = ci
        self.k += 1
        if self.k == self.block_size:
            U = self.U
            self.Sigma = blas.dgemm(
                -1.0, U * self.c, U, beta=1.0, c=self.Sigma, trans_b=1, overwrite_c=1
            )
            self.k = 0
        return True
