"""The scikit-learn-style estimators: hyperparameters in the constructor, ``fit`` / ``predict``.

Holds: :mod:`~qpinfer.estimators.protocol` (scikit-learn's parameter protocol),
:mod:`~qpinfer.estimators.params` (the parameters the estimators share, each defined once: default,
check, docstring text; table resolution), :mod:`~qpinfer.estimators.base` (what the dense
estimators share: inference by EP/QP, VB or Laplace, the hyperparameter search), the dense
estimators (:mod:`~qpinfer.estimators.classifier`, :mod:`~qpinfer.estimators.poisson_regressor`,
:mod:`~qpinfer.estimators.student_t_regressor`), the sparse ones
(:mod:`~qpinfer.estimators.sparse_base`, :mod:`~qpinfer.estimators.sparse_classifier`,
:mod:`~qpinfer.estimators.sparse_regressor`) and :mod:`~qpinfer.estimators.predictions`.

May import: everything of qpinfer below it (:mod:`qpinfer.inference`, :mod:`qpinfer.tables`,
:mod:`qpinfer.sigma`, :mod:`qpinfer.likelihoods`, the top-level helpers); never the command
line.
"""
