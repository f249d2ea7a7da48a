"""The default SE kernel presented as the equivalent scikit-learn kernel, computing as qpinfer's.

A fit with the default kernel (``kernel=None``) searches with qpinfer's
:class:`~qpinfer.kernels.se.ARDSquaredExponential`; its fitted ``kernel_`` is, when scikit-learn
is installed, :func:`sklearn_face` of it: a :class:`SklearnFacedSE` whose ``wrapped`` is the
scikit-learn kernel ``ConstantKernel(variance) * RBF(length_scale)`` with the same bounds (an
ARD ``length_scale`` vector when ``ard=True``) -- the same function, with the same ``theta``
(``log [variance, length scales]``, scikit-learn's order for that product).

Why not search with scikit-learn's kernel itself: its derivatives come as an ``N x N x P``
array where the SE kernel's contraction is written out in O(N^2 D). Measured on Ionosphere
(351 rows, 33 features, EP, ARD, one core): 15.0 s with ``C * RBF`` through
:class:`~qpinfer.kernels.sklearn_kernel.SklearnKernel`, 6.8 s with the own kernel (0.13 s and
0.05 s an evaluation); on the isotropic kernel and on Crabs (200 x 6) the two were within 0.9x-1.35x,
with the same fitted hyperparameters (up to L-BFGS-B's tolerance; ARD length scales along flat
directions of the evidence differed, the evidence by 6e-5).

So the object keeps the own kernel's arithmetic (it is an ``ARDSquaredExponential``, and the
sparse estimators' inducing-input derivatives recognise it) while reading its hyperparameters
from the wrapped scikit-learn kernel: everything else -- ``k1``, ``k2``, ``get_params``,
``hyperparameters``, ``clone_with_theta``, ``repr``, ``==``, ``+``, ``*`` -- is scikit-learn's, as
for a scikit-learn kernel a user passed (:mod:`qpinfer.kernels.sklearn_kernel`); setting
``theta`` (or a parameter of ``wrapped``) changes both. scikit-learn is imported here at fit
time only, never by ``import qpinfer``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from qpinfer.kernels.se import ARDSquaredExponential
from qpinfer.kernels.sklearn_kernel import SklearnFace, SklearnKernel

__all__ = ["SklearnFacedSE", "sklearn_face"]


class SklearnFacedSE(SklearnFace, ARDSquaredExponential):
    """:class:`~qpinfer.kernels.se.ARDSquaredExponential` whose hyperparameters are those of
    ``wrapped``, the scikit-learn ``ConstantKernel * RBF`` it presents (module docstring)."""

    def __init__(self, wrapped: Any, bounds: tuple[float, float]) -> None:  # noqa: D107
        object.__setattr__(self, "wrapped", wrapped)
        object.__setattr__(self, "_bounds", (float(bounds[0]), float(bounds[1])))

    # the hyperparameters, read from (and written to) the scikit-learn kernel
    @property
    def variance(self) -> float:  # type: ignore[override]
        return float(self.wrapped.k1.constant_value)

    @property
    def length_scale(self) -> np.ndarray:  # type: ignore[override]
        return np.atleast_1d(np.asarray(self.wrapped.k2.length_scale, dtype=np.float64))

    @property
    def theta(self) -> np.ndarray:
        return np.asarray(self.wrapped.theta, dtype=np.float64)

    @theta.setter
    def theta(self, theta: np.ndarray) -> None:
        self.wrapped.theta = np.asarray(theta, dtype=np.float64)

    @property
    def bounds(self) -> np.ndarray:
        return np.asarray(self.wrapped.bounds, dtype=np.float64)

    def with_theta(self, theta: np.ndarray) -> SklearnFacedSE:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != self.theta.shape:
            raise ValueError(f"theta must have shape {self.theta.shape}, got {theta.shape}")
        return SklearnFacedSE(self.wrapped.clone_with_theta(theta), self._bounds)

    def __reduce__(self) -> Any:
        return (SklearnFacedSE, (self.wrapped, self._bounds))


def sklearn_face(kernel: Any) -> Any:
    """``kernel`` as the fitted ``kernel_`` of a default-kernel fit: for qpinfer's own SE kernel
    (exactly that class), when scikit-learn is installed, the :class:`SklearnFacedSE` of the
    same hyperparameters and bounds; anything else (a user's kernel, an already faced one, no
    scikit-learn) as it is."""
    if type(kernel) is not ARDSquaredExponential or isinstance(kernel, SklearnKernel):
        return kernel
    if importlib.util.find_spec("sklearn") is None:
        return kernel
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    ls = kernel.length_scale
    bounds = kernel._bounds
    rbf = RBF(ls.copy() if ls.size > 1 else float(ls[0]), length_scale_bounds=bounds)
    return SklearnFacedSE(
        ConstantKernel(kernel.variance, constant_value_bounds=bounds) * rbf, bounds
    )
