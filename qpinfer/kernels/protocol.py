"""The kernel protocol: what inference needs from a covariance function (log-space theta).

Inference (:mod:`qpinfer.inference.ep`) only needs what :class:`Kernel` lists, so other covariance
functions plug in by implementing the same few members:

* ``theta`` -- the hyperparameters as a 1-d array **in log space** (what L-BFGS-B sees);
* ``bounds`` -- ``(n_params, 2)`` array of log-space bounds;
* ``hyperparameter_names`` -- one name per entry of ``theta``;
* ``with_theta(theta)`` -- a new kernel of the same kind with those hyperparameters;
* ``__call__(X, Z=None)`` -- the covariance matrix ``K(X, Z)``;
* ``diag(X)`` -- ``diag(K(X, X))`` without forming ``K``;
* ``gradient_contract(X, W)`` -- the vector ``g_j = sum_ab W_ab dK_ab/dtheta_j`` for a symmetric
  ``W``. This is all the evidence gradient (R&W eq. 5.27, ``1/2 tr(R dK/dtheta_j)``) needs, and
  it avoids materialising ``n_params`` matrices of size N x N.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Kernel"]


@runtime_checkable
class Kernel(Protocol):
    """What EP/QP inference needs from a covariance function (the kernel protocol)."""

    @property
    def theta(self) -> np.ndarray: ...

    @property
    def bounds(self) -> np.ndarray: ...

    @property
    def hyperparameter_names(self) -> list[str]: ...

    def with_theta(self, theta: np.ndarray) -> Kernel:
        """A copy with the hyperparameters ``exp(theta)``.

        Parameters
        ----------
        theta : ndarray
            Log hyperparameters, in the order of ``hyperparameter_names``.

        Returns
        -------
        Kernel
        """

    def __call__(self, X: np.ndarray, Z: np.ndarray | None = None) -> np.ndarray:
        """The covariance matrix ``K(X, Z)`` (``Z=None``: ``K(X, X)``).

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_features)
        Z : ndarray of shape (m_samples, n_features) or None, default None

        Returns
        -------
        ndarray of shape (n_samples, m_samples)
        """

    def diag(self, X: np.ndarray) -> np.ndarray:
        """The diagonal of ``K(X, X)``, without forming the matrix.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """

    def gradient_contract(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``g_j = sum_ab W_ab dK_ab / dtheta_j`` for symmetric ``W`` (theta in log space).

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_features)
        W : ndarray of shape (n_samples, n_samples)
            Symmetric weights.

        Returns
        -------
        ndarray of shape (n_hyperparameters,)
        """
