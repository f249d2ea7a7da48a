"""The squared-exponential covariance with automatic relevance determination (ARD), Zhang et al. (2020)
Sec. 3.1:

    k(x, x') = gamma * exp(-sum_d (x_d - x'_d)^2 / (2 alpha_d^2)),   theta = log{gamma, alpha_1..D}.

It implements :class:`qpinfer.kernels.protocol.Kernel` with the contraction of its gradient
written out (O(N^2 D), no N x N x P array); the sparse estimators also use its derivatives in
the inducing inputs (:mod:`qpinfer.inference.sparse.pseudo_points`).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

__all__ = ["ARDSquaredExponential"]


class ARDSquaredExponential:
    """ARD squared-exponential kernel (Zhang et al. (2020), Section 3.1).

    ``k(x, x') = variance * exp(-0.5 * sum_d ((x_d - x'_d) / length_scale_d)^2)``

    Parameters
    ----------
    variance
        The signal variance ``gamma`` (> 0).
    length_scale
        The length scales ``alpha_d`` (> 0): a scalar (isotropic kernel, one hyperparameter) or
        one per input dimension (ARD).
    bounds
        ``(low, high)`` bounds applied to every hyperparameter, in the original (not log) scale.

    ``theta = log([variance, *length_scale])``.
    """

    def __init__(
        self,
        variance: float = 1.0,
        length_scale: float | np.ndarray = 1.0,
        bounds: tuple[float, float] = (1e-5, 1e5),
    ) -> None:
        variance = float(variance)
        length_scale = np.atleast_1d(np.asarray(length_scale, dtype=np.float64)).copy()
        if not np.isfinite(variance) or variance <= 0:
            raise ValueError(f"variance must be a positive finite number, got {variance!r}")
        if length_scale.ndim != 1 or length_scale.size == 0:
            raise ValueError(
                f"length_scale must be a scalar or a 1-d array, got shape {length_scale.shape}"
            )
        if not np.all(np.isfinite(length_scale)) or np.any(length_scale <= 0):
            raise ValueError(f"length_scale must be positive and finite, got {length_scale!r}")
        low, high = bounds
        if not (0 < low < high):
            raise ValueError(f"bounds must satisfy 0 < low < high, got {bounds!r}")
        self.variance = variance
        self.length_scale = length_scale
        self._bounds = (float(low), float(high))

    # -- protocol ---------------------------------------------------------------------------
    @property
    def theta(self) -> np.ndarray:
        return np.log(np.concatenate(([self.variance], self.length_scale)))

    @property
    def bounds(self) -> np.ndarray:
        return np.log(np.tile(np.array(self._bounds), (1 + self.length_scale.size, 1)))

    @property
    def hyperparameter_names(self) -> list[str]:
        if self.length_scale.size == 1:
            return ["variance", "length_scale"]
        return ["variance"] + [f"length_scale_{d}" for d in range(self.length_scale.size)]

    def with_theta(self, theta: np.ndarray) -> ARDSquaredExponential:
        """A copy with the hyperparameters ``exp(theta)``.

        Parameters
        ----------
        theta : ndarray
            Log hyperparameters, in the order of ``hyperparameter_names``.

        Returns
        -------
        Kernel
        """
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (1 + self.length_scale.size,):
            raise ValueError(
                f"theta must have shape ({1 + self.length_scale.size},), got {theta.shape}"
            )
        p = np.exp(theta)
        return ARDSquaredExponential(p[0], p[1:], bounds=self._bounds)

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d, got shape {X.shape}")
        if self.length_scale.size not in (1, X.shape[1]):
            raise ValueError(
                f"kernel has {self.length_scale.size} length scales but X has {X.shape[1]} features"
            )
        return X / self.length_scale

    def __call__(self, X: np.ndarray, Z: np.ndarray | None = None) -> np.ndarray:
        Xs = self._scaled(X)
        Zs = Xs if Z is None else self._scaled(Z)
        K = cdist(Xs, Zs, metric="sqeuclidean")
        K *= -0.5
        np.exp(K, out=K)  # in place: one N x M array (sparse GPs at N = 1e5)
        K *= self.variance
        return K

    def diag(self, X: np.ndarray) -> np.ndarray:
        """The diagonal of ``K(X, X)``, without forming the matrix.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return np.full(np.asarray(X).shape[0], self.variance)

    def gradient_contract(
        self, X: np.ndarray, W: np.ndarray, K: np.ndarray | None = None
    ) -> np.ndarray:
        """``g_j = sum_ab W_ab dK_ab / dtheta_j`` for symmetric ``W`` (theta in log space).

        ``dK/dlog(variance) = K`` and ``dK/dlog(alpha_d) = K * (x_d - x'_d)^2 / alpha_d^2``; with
        ``M = W * K`` the second contraction is
        ``2 * sum_a rowsum(M)_a xs_ad^2 - 2 * xs_d^T M xs_d`` (``xs = x / alpha``), O(N^2 D).
        Pass ``K = self(X)`` if it is already available.
        """
        Xs = self._scaled(X)
        if K is None:
            K = self(X)
        M = W * K
        g_var = M.sum()
        rs = M.sum(axis=1)
        MX = M @ Xs
        per_dim = 2.0 * (rs @ (Xs * Xs)) - 2.0 * np.einsum("ad,ad->d", Xs, MX)
        if self.length_scale.size == 1:
            per_dim = np.array([per_dim.sum()])
        return np.concatenate(([g_var], per_dim))

    def __repr__(self) -> str:
        ls = self.length_scale
        ls_repr = f"{ls[0]:.4g}" if ls.size == 1 else np.array2string(ls, precision=4)
        return f"ARDSquaredExponential(variance={self.variance:.4g}, length_scale={ls_repr})"
