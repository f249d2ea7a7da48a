"""Covariance functions for the GP prior, with hyperparameters in log space.

Holds: :mod:`~qpinfer.kernels.protocol` (:class:`~qpinfer.kernels.protocol.Kernel`, what
inference needs from a covariance function), :mod:`~qpinfer.kernels.se` (the paper's ARD
squared exponential, the default) and :mod:`~qpinfer.kernels.sklearn_kernel`
(:class:`~qpinfer.kernels.sklearn_kernel.SklearnKernel`, any scikit-learn kernel behind the
protocol, and :func:`~qpinfer.kernels.sklearn_kernel.as_kernel`, how estimators read their
``kernel``; scikit-learn is never imported here).

May import: numpy and scipy; nothing else of qpinfer (the kernels are the lowest room).
"""

from qpinfer.kernels.protocol import Kernel
from qpinfer.kernels.se import ARDSquaredExponential
from qpinfer.kernels.sklearn_kernel import SklearnKernel, as_kernel

__all__ = ["ARDSquaredExponential", "Kernel", "SklearnKernel", "as_kernel"]
