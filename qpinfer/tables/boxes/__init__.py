"""The v2 tables' reduced coordinates: one module of boxes per likelihood.

Holds: :mod:`~qpinfer.tables.boxes.base` (the :class:`~qpinfer.tables.boxes.base.Box` interface:
cavity <-> box coordinates), one module per likelihood (``probit``, ``poisson``, ``step_noise``,
``logit``, ``poisson_log`` for the log link, ``student_t``) and
:mod:`~qpinfer.tables.boxes.registry` (a likelihood's default boxes; boxes back from a store's
attributes).

May import: :mod:`qpinfer.tables.chebyshev`, :mod:`qpinfer.likelihoods` (a box's map is the
likelihood's own geometry) and :mod:`qpinfer.checks`; not the readers above it.
"""
