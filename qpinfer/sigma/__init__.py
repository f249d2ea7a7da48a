"""The exact QP standard deviation sigma* of Zhang et al. (2020) eq. (7): the kernel every table is built
from and every lookup falls back to.

Holds: :mod:`~qpinfer.sigma.exact` (validation, the mirror symmetry, closed-form regimes,
batching into the panel quadrature, the Theorem-2 clamp) and :mod:`~qpinfer.sigma.derivatives`
(sigma*'s exact derivatives in the cavity, the tilted third cumulant). The words "kernel" and
"kernels" stay with the GP's covariance functions (:mod:`qpinfer.kernels`).

May import: :mod:`qpinfer.likelihoods`, :mod:`qpinfer.quadrature`, :mod:`qpinfer.checks`.
"""

from qpinfer.sigma.derivatives import sigma_qp_gradient, tilted_third_cumulant
from qpinfer.sigma.exact import broadcast_query, sigma_qp, tilted_moments

__all__ = [
    "broadcast_query",
    "sigma_qp",
    "sigma_qp_gradient",
    "tilted_moments",
    "tilted_third_cumulant",
]
