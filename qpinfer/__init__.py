"""qpinfer: Quantile Propagation (L2-Wasserstein projected EP) for Gaussian processes.

Lightweight: depends on numpy, scipy, zarr, threadpoolctl, joblib and tqdm only (joblib imported only
by multi-class fits, tqdm by verbose ones; never dask, distributed or mpmath). The public API is ``qpinfer.__all__``
(what ``dir(qpinfer)`` lists).

The rooms, lowest first (each subpackage's docstring says what it holds and may import; the
arrows are checked by import-linter in CI, contracts in ``.importlinter``, and drawn in
``docs/development/architecture.md``): :mod:`qpinfer.quadrature`, :mod:`qpinfer.likelihoods`,
:mod:`qpinfer.sigma`, :mod:`qpinfer.tables`, :mod:`qpinfer.inference`,
:mod:`qpinfer.estimators`; the front modules :mod:`qpinfer.sparse` and :mod:`qpinfer.cli`.
"""

from qpinfer.estimators.classifier import GPClassifier
from qpinfer.estimators.custom_likelihood import CustomLikelihoodGP
from qpinfer.estimators.poisson_regressor import GPPoissonRegressor
from qpinfer.estimators.sparse_custom_likelihood import SparseCustomLikelihoodGP
from qpinfer.estimators.student_t_regressor import GPStudentTRegressor
from qpinfer.inference.ep import ConvergenceWarning, MomentMatching, QuantileMatching, run_ep
from qpinfer.inference.laplace import LaplaceResult, laplace_mode
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.inference.vb import VBResult, fit_vb
from qpinfer.kernels import ARDSquaredExponential, Kernel
from qpinfer.likelihoods import Likelihood
from qpinfer.likelihoods.custom import CustomLikelihood
from qpinfer.likelihoods.poisson_square import PoissonSquare
from qpinfer.likelihoods.probit import Probit
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.sigma import sigma_qp, tilted_moments
from qpinfer.sparse import (
    MiniBatchSparseGPClassifier,
    MiniBatchSparseGPPoissonRegressor,
    MiniBatchSparseGPStudentTRegressor,
    SparseGPClassifier,
    SparseGPPoissonRegressor,
    SparseGPRegressor,
    SparseGPStudentTRegressor,
)
from qpinfer.tables import SigmaTable, TableError, open_table
from qpinfer.version import __version__

__all__ = [
    "ARDSquaredExponential",
    "ConvergenceWarning",
    "CustomLikelihood",
    "CustomLikelihoodGP",
    "GPClassifier",
    "GPPoissonRegressor",
    "GPStudentTRegressor",
    "Kernel",
    "LaplaceResult",
    "Likelihood",
    "MiniBatchSparseGPClassifier",
    "MiniBatchSparseGPPoissonRegressor",
    "MiniBatchSparseGPStudentTRegressor",
    "MomentMatching",
    "PoissonSquare",
    "PowerMomentMatching",
    "Probit",
    "QuantileMatching",
    "SigmaTable",
    "SparseCustomLikelihoodGP",
    "SparseGPClassifier",
    "SparseGPPoissonRegressor",
    "SparseGPRegressor",
    "SparseGPStudentTRegressor",
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


def __dir__() -> list[str]:
    """The public API (:data:`__all__`) and the module's dunder attributes: not the
    subpackages and modules that importing qpinfer binds as attributes (``qpinfer.tables``,
    ``qpinfer.inference``, ... stay importable and documented on their own)."""
    dunders = (name for name in globals() if name.startswith("__") and name.endswith("__"))
    return sorted(set(__all__).union(dunders))
