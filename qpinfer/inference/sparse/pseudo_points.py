# Over 400 lines: the prior, its low-rank posterior and the gradient weights that the regression energy here and sites.py share.
"""The pseudo-point prior of sparse GP approximations (Bui et al., 2017) and the collapsed regression
energy.

M pseudo-points ``u = f(Z)`` summarise the N training function values. Everything is computed in
whitened coordinates ``u = Lu v`` (``Kuu + jitter I = Lu Lu^T``, ``A = Lu^-1 Kuf``): with rank-one
sites ``t_n(u) = N~(w_n^T u; g_n, v_n)``, ``w_n = Kuu^-1 k_u(x_n)`` (Bui et al., 2017, eqs. (64)-(77)),
the posterior of ``v`` has precision ``B = I + A diag(tau) A^T`` (eigenvalues >= 1, a safe
Cholesky; eqs. (119)-(120), :func:`low_rank_posterior`) and the marginal of ``a_n = w_n^T u =
A[:, n]^T v`` is ``N(mu_n, s_n)`` with ``mu = A^T B^-1 A nu`` and ``s_n = ||L_B^-1 A[:, n]||^2``.
Given ``u``, ``f_n ~ N(a_n, h_n)``, ``h = diag(Kff - Qff)`` (:func:`pseudo_point_prior`).

Regression (Gaussian noise ``sigma_y^2``): the Power EP fixed point is analytic (``g_n = y_n``,
``v_n = d_n = alpha h_n + sigma_y^2``) and the collapsed energy is eq. (128)::

    F = -N/2 log 2pi - 1/2 log|D + Qff| - 1/2 y^T (D + Qff)^-1 y
        - (1 - alpha)/(2 alpha) sum_n log(d_n / sigma_y^2)

``alpha = 1`` is FITC's log marginal likelihood (eq. (129)); ``alpha -> 0`` is Titsias' VFE bound
(eqs. (130)-(131)). The last term is written as ``(1 - alpha)/2 * (h_n/sigma_y^2) * L(alpha h_n /
sigma_y^2)`` with ``L(x) = log(1 + x)/x`` (series near 0), so it is continuous at ``alpha = 0``
where it equals the VFE trace term ``sum h_n / (2 sigma_y^2)``: the limit is evaluated, 0 is never
divided by.

Gradients (regression here, classification in :mod:`qpinfer.inference.sparse.sites`) share one form.
At a Power EP fixed point the total derivative of the energy is ``dF = 1/2 tr(W dQff) + eps^T d
diag(Kff)`` with ``W = b b^T - (S^-1 + Qff)^-1 - 2 diag(eps)``, ``S = diag(tau)``,
``b = nu - tau * mu``; regression has ``eps_n = (alpha R_nn - (1 - alpha)/d_n)/2`` with
``R_nn = b_n^2 - [(D + Qff)^-1]_nn``. Through ``Qff = Kfu Kuu^-1 Kuf`` the weights on ``dKfu``
and ``dKuu`` are ``W Kfu Kuu^-1`` and ``-1/2 Kuu^-1 Kuf W Kfu Kuu^-1``, formed in O(N M^2) via
Woodbury (``(S^-1 + Qff)^-1 A^T = S A^T B^-1``, ``_q_weights()``); the kernel contracts them
(``_se_cross_contract()``; a scikit-learn kernel: :mod:`qpinfer.kernels.cross`).

Inducing inputs are initialised by k-means (:func:`kmeans_inducing_points`); predictions of the
latent function are eq. (18) (:func:`predict_latent_low_rank`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.linalg import blas, cho_solve, lapack, solve_triangular

from qpinfer.kernels import ARDSquaredExponential
from qpinfer.kernels.cross import check_cross_kernel, cross_contract, diag_contract

__all__ = [
    "LowRankPosterior",
    "PseudoPointPrior",
    "kmeans_inducing_points",
    "low_rank_posterior",
    "predict_latent_low_rank",
    "pseudo_point_prior",
    "site_sums",
    "sparse_regression_energy",
]

_LOG_2PI = np.log(2.0 * np.pi)


def _sklearn_kernel(kernel: Any) -> Any:
    """The scikit-learn kernel behind ``kernel``: the one a
    ``qpinfer.kernels.sklearn_kernel.SklearnKernel`` wraps (``.wrapped``), or ``kernel``."""
    return getattr(kernel, "wrapped", kernel)


def _check_kernel(kernel: Any) -> None:
    """``ValueError`` (one line) unless the derivatives of ``K(X, Z)`` in ``Z`` are available:
    the ARD SE kernel, or a scikit-learn kernel (wrapped or not) of those
    :func:`qpinfer.kernels.cross.check_cross_kernel` takes; a kernel on non-vector inputs
    (scikit-learn's ``requires_vector_input = False``) is refused first, naming why."""
    if not getattr(_sklearn_kernel(kernel), "requires_vector_input", True):
        raise ValueError(
            f"kernel {_sklearn_kernel(kernel)!r} takes non-vector inputs "
            "(requires_vector_input=False), but the pseudo-point estimators need feature "
            "vectors: their inducing points are points of the input space, placed by k-means "
            "and moved along the kernel's derivatives in them; use the dense estimators "
            "(qpinfer.GPClassifier, GPPoissonRegressor, GPStudentTRegressor) for such a kernel"
        )
    if not isinstance(kernel, ARDSquaredExponential):
        check_cross_kernel(_sklearn_kernel(kernel))


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
    Kuu, Lu, jit = inducing_factor(kernel, Z, jitter)
    Kuf = kernel(Z, X)
    kdiag = kernel.diag(X)
    A, h = whitened_cross(Lu, Kuf, kdiag)
    return PseudoPointPrior(Kuu=Kuu, Kuf=Kuf, Lu=Lu, A=A, kdiag=kdiag, h=h, jitter=jit)


def inducing_factor(
    kernel: Any, Z: np.ndarray, jitter: float = 1e-6
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(Kuu, Lu, jit)``: ``K(Z, Z)``, ``chol(Kuu + jit I)`` with ``jit = jitter * mean diag
    Kuu`` (the jitter relative to the kernel's variance, as :func:`pseudo_point_prior`)."""
    Kuu = kernel(Z)
    jit = float(jitter) * float(np.mean(np.diag(Kuu)))
    Kj = Kuu.copy()
    Kj[np.diag_indices_from(Kj)] += jit
    return Kuu, _chol(Kj, "Kuu + jitter I"), jit


def whitened_cross(
    Lu: np.ndarray, Kuf: np.ndarray, kdiag: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``A = Lu^-1 Kuf`` and ``h = diag(Kff - Qff) >= 0`` for the columns of ``Kuf`` (any subset
    of the data: column ``n`` depends on ``x_n`` only, so data partitions compute their own)."""
    A = solve_triangular(Lu, Kuf, lower=True, check_finite=False)
    h = np.maximum(kdiag - np.einsum("mn,mn->n", A, A), 0.0)
    return A, h


def _se_cross_contract(
    kernel: ARDSquaredExponential,
    X: np.ndarray,
    Z: np.ndarray,
    W: np.ndarray,
    K: np.ndarray,
    overwrite_W: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``sum_ab W_ab dK(X, Z)_ab`` with respect to the log hyperparameters and to ``Z``.

    ``dk/dlog(variance) = k``, ``dk/dlog(l_d) = k (x_d - z_d)^2 / l_d^2``,
    ``dk/dz_d = k (x_d - z_d) / l_d^2``; with ``P = W * K`` (formed in ``W`` if
    ``overwrite_W``: no second N x M array): O(N M D).
    """
    ls = kernel.length_scale
    P = np.multiply(W, K, out=W) if overwrite_W else W * K
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
    kernel: Any,
    X: np.ndarray,
    Z: np.ndarray,
    prior: PseudoPointPrior,
    G_fu: np.ndarray,
    G_uu: np.ndarray,
    g_kdiag: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``dF = sum G_fu * dKfu + sum G_uu * dKuu + g_kdiag . d diag(Kff)`` in (theta, Z);
    ``G_fu`` (N x M, a temporary of the callers) may be overwritten.

    The SE kernel's contraction is written out (``_se_cross_contract()``); a scikit-learn
    kernel's (theta: its ``theta``) is :func:`qpinfer.kernels.cross.cross_contract` and
    :func:`~qpinfer.kernels.cross.diag_contract`. There the jitter ``jit = jitter * mean diag
    Kuu`` moves with the kernel's diagonal: ``d jit = jit * d(sum_m k(z_m, z_m)) / sum_m k(z_m,
    z_m)``, weighted by ``tr(G_uu)``, in theta and (``DotProduct``: ``k(z, z) = sigma_0^2 +
    |z|^2``) in ``Z``."""
    if isinstance(kernel, ARDSquaredExponential):
        g1, gz1 = _se_cross_contract(kernel, X, Z, G_fu, prior.Kuf.T, overwrite_W=True)
        g2, gz2 = _se_cross_contract(kernel, Z, Z, G_uu, prior.Kuu)  # G_uu symmetric: Z twice
        g_theta = g1 + g2
        # jitter * variance and diag(Kff) = variance both scale with the variance
        g_theta[0] += prior.jitter * np.trace(G_uu) + g_kdiag @ prior.kdiag
        return g_theta, gz1 + 2.0 * gz2
    sk = _sklearn_kernel(kernel)
    g1, gz1 = cross_contract(sk, X, Z, G_fu, prior.Kuf.T)
    g2, gz2 = cross_contract(sk, Z, Z, G_uu, prior.Kuu)  # G_uu symmetric: Z twice
    total = float(np.sum(np.diag(prior.Kuu)))
    w_jit = prior.jitter * float(np.trace(G_uu)) / total if total > 0 else 0.0
    g3, gz3 = diag_contract(sk, Z, np.full(Z.shape[0], w_jit), eval_input_gradient=True)
    g4 = diag_contract(sk, X, g_kdiag)
    return g1 + g2 + g3 + g4, gz1 + 2.0 * gz2 + gz3


@dataclass
class LowRankPosterior:
    """Posterior of the whitened pseudo-points ``v = Lu^-1 u``: ``N(mean_v, B^-1)``.

    ``L`` is the Cholesky factor of ``B = I + A diag(tau) A^T`` and ``Linv = L^-1`` (M x M);
    ``mean``/``var`` are the marginals of ``a_n = A[:, n]^T v`` (the sites' variables),
    ``mean = A^T mean_v``, ``var_n = ||Linv A[:, n]||^2``.
    """

    L: np.ndarray
    mean_v: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    Linv: np.ndarray | None = None

    def half_logdet_B(self) -> float:
        """``log det B / 2`` (``sum log L_ii``; the energy eq. (110) needs it)."""
        return float(np.sum(np.log(np.diag(self.L))))


#: most columns of ``A`` that :func:`low_rank_posterior` and ``_q_weights()`` handle at a time:
#: their temporaries are at most M x COLUMN_CHUNK, never another M x N array
COLUMN_CHUNK = 8192

#: bytes of an M x k column block of ``A`` in :func:`site_sums` and :func:`low_rank_marginals`:
#: small enough to stay in a core's L2 cache between the block's two or three BLAS calls, so each
#: sweep reads ``A`` from memory twice (once per function). With M x 8192 blocks (6.5 MB at
#: M = 100) the temporaries went through memory too; two processes sharing the memory bus (the
#: dask sweep's workers) then ran ~30% slower each.
CACHE_BLOCK_BYTES = 1 << 19


def column_blocks(n: int, chunk: int | None = None) -> list[slice]:
    """``range(n)`` as consecutive slices of at most ``chunk`` (default :data:`COLUMN_CHUNK`,
    read at call time) columns."""
    chunk = COLUMN_CHUNK if chunk is None else int(chunk)
    return [slice(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def _cache_blocks(m: int, n: int) -> tuple[list[slice], np.ndarray]:
    """Column blocks of an M x N ``A`` of about :data:`CACHE_BLOCK_BYTES` (at most
    :data:`COLUMN_CHUNK` columns) and one C-order M x block buffer for their temporaries."""
    chunk = min(COLUMN_CHUNK, max(16, CACHE_BLOCK_BYTES // (8 * max(m, 1))))
    return column_blocks(n, chunk), np.empty((m, min(chunk, n)))


def site_sums(A: np.ndarray, tau: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The site terms of the posterior precision and shift, ``(A diag(tau) A^T, A nu)``.

    A sum over sites (columns), so over any partition of them (the map step of a map-reduce
    sweep; :func:`low_rank_posterior` is the reduce). With ``tau >= 0`` (every sparse site: the
    loop floors precisions) the M x M term is one symmetric rank-k update (BLAS ``dsyrk``) of
    ``A diag(sqrt(tau))`` per column block: half the flops of the general product, which is used
    for negative ``tau``. O(N M^2); one read of ``A`` in cache-sized blocks (``_cache_blocks()``).
    """
    m, n = A.shape
    S = np.zeros((m, m), order="F")
    b = np.zeros(m)
    nonneg = bool(np.all(tau >= 0))
    scale = np.sqrt(tau) if nonneg else tau
    blocks, buf = _cache_blocks(m, n)
    for c in blocks:
        Ac = A[:, c]
        As = np.multiply(Ac, scale[c], out=buf[:, : Ac.shape[1]])  # C order: As.T is Fortran
        if nonneg:
            S = blas.dsyrk(1.0, As.T, beta=1.0, c=S, trans=1, lower=1, overwrite_c=1)
        else:
            S += As @ Ac.T
        b += Ac @ nu[c]  # while the block is in cache
    if nonneg:  # dsyrk fills the lower triangle
        S = np.tril(S) + np.tril(S, -1).T
    return np.ascontiguousarray(S), b


def low_rank_posterior(A: np.ndarray, tau: np.ndarray, nu: np.ndarray) -> LowRankPosterior:
    """Eqs. (119)-(120) in whitened form, O(N M^2): a function of ``(A, tau, nu)`` only.

    ``B = I + A diag(tau) A^T`` and ``A nu`` are sums over sites (:func:`site_sums`, the map
    step of a map-reduce over data partitions), :func:`low_rank_factor` the M x M reduce, and
    :func:`low_rank_marginals` the per-site marginals (a map over column blocks): the three
    pieces :mod:`qpinfer.inference.sparse.dask_sweep` runs over partitions. After the M x M Cholesky
    ``B = L L^T`` the marginal variances ``||L^-1 a_n||^2`` are formed with the explicit triangular
    inverse ``L^-1`` (M^3/3, once): a triangular matrix product ``L^-1 A`` per column block in place
    of a triangular solve with N right-hand sides (the solve ran at about half the GEMM's flop rate
    and was 50% of a sweep on KEEL ``magic``), still a sum of squares (never negative). ``B``'s
    eigenvalues are >= 1, so ``||L^-1|| <= 1``. Memory: the M x N input and O(N) outputs only.
    """
    L, mean_v = low_rank_factor(*site_sums(A, tau, nu))
    Linv = _tri_inv(L, "B = I + A S A^T")
    mean, var = low_rank_marginals(A, L, mean_v, Linv)
    return LowRankPosterior(L=L, mean_v=mean_v, mean=mean, var=var, Linv=Linv)


def low_rank_factor(AtauAt: np.ndarray, Anu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``L = chol(I + A S A^T)`` and ``mean_v = B^-1 A nu`` from ``A S A^T`` (overwritten) and
    ``A nu`` (sums over the sites, :func:`site_sums`)."""
    B = AtauAt
    B[np.diag_indices_from(B)] += 1.0
    L = _chol(B, "B = I + A S A^T")
    return L, cho_solve((L, True), Anu, check_finite=False)


def low_rank_marginals(
    A: np.ndarray, L: np.ndarray, mean_v: np.ndarray, Linv: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Means ``A^T mean_v`` and variances ``||L^-1 A[:, n]||^2`` of the site variables (any
    subset of the columns of ``A``); ``Linv = L^-1`` if the caller has it. One read of ``A``, in
    cache-sized column blocks (``_cache_blocks()``), each multiplied in place by the triangular
    ``L^-1`` (BLAS ``dtrmm``: M^2 flops a column, 40% less time than the M x M GEMM)."""
    if Linv is None:
        Linv = _tri_inv(L, "B = I + A S A^T")
    m, n = A.shape
    Linv = np.asfortranarray(Linv)  # what dtrmm takes without a copy
    mean, var = np.empty(n), np.empty(n)
    blocks, buf = _cache_blocks(m, n)
    buf = np.asfortranarray(buf)
    for c in blocks:
        Ac = A[:, c]
        V = buf[:, : Ac.shape[1]]
        V[...] = Ac
        V = blas.dtrmm(1.0, Linv, V, lower=1, overwrite_b=1)  # L^-1 A[:, c] in place
        var[c] = np.einsum("mn,mn->n", V, V)
        mean[c] = mean_v @ Ac  # while the block is in cache
    return mean, np.maximum(var, np.finfo(np.float64).tiny)


def _tri_inv(L: np.ndarray, what: str) -> np.ndarray:
    """``L^-1`` of a lower-triangular Cholesky factor (LAPACK ``dtrtri``)."""
    Linv, info = lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"{what}: singular Cholesky factor (info={info})")
    return np.tril(Linv)


def _q_weights(
    prior: PseudoPointPrior, post: LowRankPosterior, tau: np.ndarray, b: np.ndarray, eps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weights ``(G_fu, G_uu)`` on ``dKfu`` and ``dKuu`` of ``1/2 tr(W dQff)``, with
    ``W = b b^T - (S^-1 + Qff)^-1 - 2 diag(eps)`` (module docstring), O(N M^2).

    ``G_fu^T = Lu^-T A W = (Lu^-T A b) b^T - (Lu^-T B^-1) A diag(tau) - 2 (Lu^-T A) diag(eps)``
    and ``G_uu = -1/2 sym(P G_fu)`` with ``P = Lu^-T A = Kuu^-1 Kuf``: with the M x M matrices
    ``Lu^-T`` and ``Lu^-T B^-1`` formed once, three GEMMs per column block (in place of four
    triangular solves with N right-hand sides); temporaries M x COLUMN_CHUNK, output N x M."""
    A = prior.A
    m, n = A.shape
    Luinv = _tri_inv(prior.Lu, "Kuu + jitter I")
    Linv = post.Linv if post.Linv is not None else _tri_inv(post.L, "B")
    Ct = (Linv.T @ Linv) @ Luinv  # (Lu^-T B^-1)^T
    r = (A @ b) @ Luinv  # (Lu^-T A b)^T
    G_fu = np.empty((n, m))
    G_uu = np.zeros((m, m))
    for c in column_blocks(n):
        At = A[:, c].T  # a Fortran-order view: the GEMMs read it in place
        Pt = At @ Luinv  # rows of (Kuu^-1 Kuf)^T
        G = np.outer(b[c], r)
        G -= (At @ Ct) * tau[c, None]
        G -= Pt * (2.0 * eps[c, None])
        G_fu[c] = G
        G_uu -= 0.5 * (Pt.T @ G)
    return G_fu, 0.5 * (G_uu + G_uu.T)


def _log1p_over_x(x: np.ndarray) -> np.ndarray:
    """``log(1 + x) / x`` for ``x >= 0``, equal to 1 at 0 (the alpha -> 0 limit of eq. (130))."""
    x = np.asarray(x, dtype=np.float64)
    small = x < 1e-4
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log1p(x) / x
    series = 1.0 - x / 2.0 + x * x / 3.0 - x**3 / 4.0
    return np.where(small, series, direct)


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
    """Power EP energy for sparse GP regression, Bui et al. (2017) eq. (128), and its gradient.

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


def predict_latent_low_rank(
    kernel: Any, Z: np.ndarray, prior_Lu: np.ndarray, post: LowRankPosterior, Xs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``f* | y``: mean ``a*^T mean_v``, variance ``k** - ||a*||^2 + ||L_B^-1 a*||^2``,
    ``a* = Lu^-1 Ku*`` (eq. (18))."""
    a_star = solve_triangular(prior_Lu, kernel(Z, Xs), lower=True, check_finite=False)
    mean = a_star.T @ post.mean_v
    c = solve_triangular(post.L, a_star, lower=True, check_finite=False)
    var = kernel.diag(Xs) - np.einsum("mn,mn->n", a_star, a_star) + np.einsum("mn,mn->n", c, c)
    return mean, np.maximum(var, 0.0)
