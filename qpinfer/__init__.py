"""qpinfer: Quantile Propagation (L2-Wasserstein projected EP) for Gaussian processes.

Lightweight: depends on numpy, scipy and zarr only (never dask, distributed or mpmath).
"""

from qpinfer.classifier import GPClassifier
from qpinfer.ep import ConvergenceWarning, MomentMatching, QuantileMatching, run_ep
from qpinfer.kernels import ARDSquaredExponential, Kernel
from qpinfer.laplace import LaplaceResult, laplace_mode
from qpinfer.likelihoods import Likelihood, PoissonSquare, Probit
from qpinfer.power_ep import PowerMomentMatching
from qpinfer.registry import get_likelihood
from qpinfer.regression import GPPoissonRegressor
from qpinfer.sigma import sigma_qp, tilted_moments
from qpinfer.sparse import SparseGPClassifier, SparseGPRegressor
from qpinfer.tables import SigmaTable, TableError, open_table
from qpinfer.vb import VBResult, fit_vb
from qpinfer.version import __version__

__all__ = [
    "ARDSquaredExponential",
    "ConvergenceWarning",
    "GPClassifier",
    "GPPoissonRegressor",
    "Kernel",
    "LaplaceResult",
    "Likelihood",
    "MomentMatching",
    "PoissonSquare",
    "PowerMomentMatching",
    "Probit",
    "QuantileMatching",
    "SigmaTable",
    "SparseGPClassifier",
    "SparseGPRegressor",
    "TableError",
    "VBResult",
    "__version__",
    "fit_vb",
    "get_likelihood",
    "laplace_mode",
    "open_table",
    "run_ep",
    "sigma_qp",
    "tilted_moments",
]
