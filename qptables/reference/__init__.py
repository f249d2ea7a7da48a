"""The independent mpmath reference for sigma* and the tilted moments, and verification of a
store against it.

Holds: one module per likelihood (``probit``, ``poisson_square``, ``logit``, ``poisson_log``,
``step_noise``, ``student_t``; they import none of each other), :mod:`~qptables.reference.sigma`
(the dispatch over them, :data:`~qptables.reference.sigma.REFERENCES`, and the closed forms), the likelihood-independent panel engine they share
(:mod:`~qptables.reference.tilted`) with its multiprecision panel rule
(:mod:`~qptables.reference.mp_panels`), and
:mod:`~qptables.reference.verify` (``qptables verify``) with its fan-out over a cluster
(:mod:`~qptables.reference.fanout`).

May import: mpmath, the top-level ``grid`` and ``store``, and qpinfer; never
:mod:`qptables.pipeline` or :mod:`qptables.cli`.
"""

from qptables.reference.sigma import (
    ReferencePoint,
    reference_point,
    sigma_qp_reference,
    tilted_moments_reference,
)

__all__ = [
    "ReferencePoint",
    "reference_point",
    "sigma_qp_reference",
    "tilted_moments_reference",
]
