"""Covariance functions for the GP prior, with hyperparameters in log space.

Holds: :mod:`~qpinfer.kernels.protocol` (:class:`~qpinfer.kernels.protocol.Kernel`, what
inference needs from a covariance function) and :mod:`~qpinfer.kernels.se` (the paper's ARD
squared exponential, the default).

May import: numpy and scipy; nothing else of qpinfer (the kernels are the lowest room).
"""

from qpinfer.kernels.protocol import Kernel
from qpinfer.kernels.se import ARDSquaredExponential

__all__ = ["ARDSquaredExponential", "Kernel"]
