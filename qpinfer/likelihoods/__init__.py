"""Likelihoods: one object per likelihood, vectorized over sites (GPML's ``likErf.m`` in spirit).

Given cavity parameters ``(mu, sigma)`` (mean and *standard deviation*) and observations ``y``, a
likelihood gives everything inference asks of it, through the one protocol
:class:`~qpinfer.Likelihood` declares with its defaults (:mod:`~qpinfer.likelihoods.base`):
``log_z`` and ``tilted_moments`` (EP's projection, Zhang et al., 2020, App. C), the unnormalized
log tilted density, lobes, closed forms and limits of the exact sigma* kernel, the Laplace and VB
baselines' derivatives and expectations, the class predictions of a binary likelihood, and the
boxes of its cell table (:mod:`~qpinfer.likelihoods.layout`).

Holds: :mod:`~qpinfer.likelihoods.base` (the protocol), :mod:`~qpinfer.likelihoods.layout` (the
boxes of a cell table), one subpackage per likelihood -- ``probit``, ``logit``,
``poisson_square``, ``poisson_log``, ``step_noise``, ``student_t``, each with the likelihood in
its ``__init__`` and its table boxes in ``boxes`` --, ``custom`` (the base of likelihoods users
write, :class:`~qpinfer.CustomLikelihood`, and what is found numerically from their ``log p(y |
f)``) and :mod:`~qpinfer.likelihoods.registry`
(by name, and the table layouts by name). No module outside a likelihood's subpackage names it,
but the registry.

May import: :mod:`qpinfer.quadrature` and :mod:`qpinfer.checks`; never the sigma* kernel,
tables, inference or estimators.
"""

from qpinfer.likelihoods.base import Likelihood, check_cavity

__all__ = ["Likelihood", "check_cavity"]
