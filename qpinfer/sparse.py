"""Pseudo-point (sparse) GP approximations by Power EP, from VFE to FITC (Bui et al., 2017), O(N M^2).

M pseudo-points ``u = f(Z)`` summarise the N training function values; Power EP approximates
each likelihood by a rank-one factor of ``u`` (Bui et al., 2017, eqs. (64)-(77)). This module gathers the
public names of these modules, one idea each:

* :mod:`qpinfer.inference.sparse.pseudo_points` -- the pseudo-point prior (``Kuu``, ``A = Lu^-1
  Kuf``, ``h = diag(Kff - Qff)``), the low-rank posterior (eqs. (119)-(120)), the collapsed
  regression energy eq. (128) with its gradient, k-means inducing inputs and the latent predictions
  (eq. (18));
* :mod:`qpinfer.inference.sparse.sites` -- classification: iterative pseudo-point Power EP / QP
  (eqs. (20), (106)-(110)) on the shared site loop :func:`qpinfer.inference.site_loop.run_sites`;
* :mod:`qpinfer.estimators.sparse_regressor`, :mod:`qpinfer.estimators.sparse_classifier`,
  :mod:`qpinfer.estimators.sparse_poisson_regressor`,
  :mod:`qpinfer.estimators.sparse_student_t_regressor` -- the estimators
  :class:`~qpinfer.SparseGPRegressor`, :class:`~qpinfer.SparseGPClassifier` (probit, logit),
  :class:`~qpinfer.SparseGPPoissonRegressor` and :class:`~qpinfer.SparseGPStudentTRegressor`
  (following the dense estimators' conventions; shared parameters in
  :mod:`qpinfer.estimators.sparse_base`, the site-update fit the last three share in
  :mod:`qpinfer.estimators.sparse_site_fit`);
* :mod:`qpinfer.inference.sparse.stochastic`, :mod:`qpinfer.inference.sparse.minibatch` and
  :mod:`qpinfer.estimators.minibatch_sparse_classifier` -- minibatch EP / QP with one tied site
  (stochastic EP) for millions of rows or data larger than memory,
  :class:`~qpinfer.MiniBatchSparseGPClassifier` (and :mod:`qpinfer.estimators.minibatch_sparse_regressors`:
  :class:`~qpinfer.MiniBatchSparseGPPoissonRegressor`, :class:`~qpinfer.MiniBatchSparseGPStudentTRegressor`).

With ``M = N`` and ``Z = X`` (``h = 0``) both reduce to the full GP (EP / Power EP / exact
regression).
"""

from __future__ import annotations

from qpinfer.estimators.minibatch_sparse_classifier import MiniBatchSparseGPClassifier
from qpinfer.estimators.minibatch_sparse_regressors import (
    MiniBatchSparseGPPoissonRegressor,
    MiniBatchSparseGPStudentTRegressor,
)
from qpinfer.estimators.sparse_base import DEFAULT_N_INDUCING  # noqa: F401 (re-exported)
from qpinfer.estimators.sparse_classifier import SparseGPClassifier
from qpinfer.estimators.sparse_poisson_regressor import SparseGPPoissonRegressor
from qpinfer.estimators.sparse_regressor import SparseGPRegressor
from qpinfer.estimators.sparse_student_t_regressor import SparseGPStudentTRegressor
from qpinfer.inference.sparse.pseudo_points import (  # noqa: F401 (re-exported)
    LowRankPosterior,
    PseudoPointPrior,
    kmeans_inducing_points,
    low_rank_posterior,
    pseudo_point_prior,
    site_sums,
    sparse_regression_energy,
)
from qpinfer.inference.sparse.sites import (
    SparsePEPResult,
    _qp_ratio,  # noqa: F401 (re-exported)
    run_sparse_pep,
    sparse_pep_gradient,
)

__all__ = [
    "LowRankPosterior",
    "MiniBatchSparseGPClassifier",
    "MiniBatchSparseGPPoissonRegressor",
    "MiniBatchSparseGPStudentTRegressor",
    "SparseGPClassifier",
    "SparseGPPoissonRegressor",
    "SparseGPRegressor",
    "SparseGPStudentTRegressor",
    "SparsePEPResult",
    "kmeans_inducing_points",
    "low_rank_posterior",
    "run_sparse_pep",
    "site_sums",
    "sparse_pep_gradient",
    "sparse_regression_energy",
]
