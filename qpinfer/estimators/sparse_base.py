"""What the full-batch sparse (pseudo-point) estimators share: the number of pseudo-points, the
kernel check and the initial inducing inputs (their parameters, shared with the dense
estimators, are :class:`qpinfer.estimators.params.PseudoPointParams`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.estimators.params import PseudoPointParams
from qpinfer.inference.dense_posterior import check_kernel_matrix
from qpinfer.inference.sparse.pseudo_points import _check_kernel as check_sparse_kernel
from qpinfer.inference.sparse.pseudo_points import kmeans_inducing_points

__all__ = [
    "DEFAULT_N_INDUCING",
    "SchedulerCloneMixin",
    "SparseEstimatorBase",
    "checked_inducing_points",
]

#: pseudo-points used by default (``n_inducing=None``): ``min(DEFAULT_N_INDUCING, n_samples)``
DEFAULT_N_INDUCING = 50


class SparseEstimatorBase(PseudoPointParams):
    """The pseudo-points of the two sparse estimators: how many, where they start, and the
    kernels they take (those with derivatives in the inducing inputs: the ARD SE kernel and the
    scikit-learn kernels of :mod:`qpinfer.kernels.cross`)."""

    _FITTED_ATTR = "inducing_points_"

    #: ``ValueError`` (one line, listing the kernels taken) for any other kernel, e.g.
    #: ``WhiteKernel``
    _check_kernel = staticmethod(check_sparse_kernel)

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

    def _initial_inducing(self, X: np.ndarray) -> np.ndarray:
        if self.inducing_points is not None:  # checked before its rows are counted
            return checked_inducing_points(self.inducing_points, X.shape[1])
        return kmeans_inducing_points(X, self._n_inducing_for(X.shape[0]), self.random_state)


def check_inducing_kernel(kernel: Any, Z: np.ndarray) -> None:
    """``ValueError`` naming ``kernel`` unless ``kernel(Z)`` on the inducing inputs ``Z`` is a
    covariance matrix (finite, symmetric, positive semi-definite up to round-off: the dense
    estimators' check, :func:`qpinfer.inference.dense_posterior.check_kernel_matrix`), before
    any sweep: a kernel that is no covariance otherwise fails deep inside as "Kuu + jitter I is
    not positive definite"."""
    check_kernel_matrix(kernel(Z), kernel, on="the inducing inputs")


def checked_inducing_points(inducing_points: Any, n_features: int) -> np.ndarray:
    """A copy of ``inducing_points`` as a finite float64 (M, n_features) array with M >= 1, or
    ``ValueError`` naming the parameter and what is wrong."""
    try:
        Z = np.asarray(inducing_points, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"inducing_points must be an array of numbers of shape (M, {n_features}), got "
            f"{type(inducing_points).__name__} that is not"
        ) from None
    if Z.ndim != 2 or Z.shape[1] != n_features:
        raise ValueError(
            f"inducing_points must be an array of shape (M, {n_features}) (one column per "
            f"feature of X), got shape {Z.shape}"
        )
    if Z.shape[0] == 0:
        raise ValueError(
            f"inducing_points must have at least one row (M >= 1), got shape {Z.shape}"
        )
    bad = ~np.isfinite(Z).all(axis=1)
    if bad.any():
        raise ValueError(
            f"inducing_points must be finite: row {int(np.flatnonzero(bad)[0])} holds NaN or "
            "infinity"
        )
    return Z.copy()


class SchedulerCloneMixin:
    """scikit-learn's ``clone`` (``GridSearchCV``, ``cross_val_score``) for an estimator with a
    ``scheduler`` parameter: the parameters deep-copied as usual, except a
    ``distributed.Client`` passed as ``scheduler``, which is shared (a live connection cannot be
    copied)."""

    def __sklearn_clone__(self):
        from sklearn.base import clone

        params = self.get_params(deep=False)
        scheduler = params.pop("scheduler")  # None, a string, or a Client: shared as it is
        copied = {k: clone(v, safe=False) for k, v in params.items()}
        return type(self)(**copied, scheduler=scheduler)
