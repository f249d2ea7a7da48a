"""Likelihoods: one object per likelihood, vectorized over sites (GPML's ``likErf.m`` in spirit).

Given cavity parameters ``(mu, sigma)`` (mean and *standard deviation*) and observations ``y``, a
likelihood returns what a site update needs: ``log_z``, ``tilted_moments`` (EP's projection,
paper 000 App. C), and for the exact sigma* kernel its unnormalized log tilted density and lobes.

Holds: :mod:`~qpinfer.likelihoods.base` (the :class:`~qpinfer.Likelihood` interface), one module per
likelihood (``probit`` with ``probit_limits``; ``poisson`` with ``poisson_moments``; ``logit``;
``poisson_log``; ``step_noise``; ``student_t`` with ``student_t_canonical``), the baselines'
log p(y | f) derivatives (``loglik``, dispatching on the likelihood's class, and its
per-likelihood modules) and :mod:`~qpinfer.likelihoods.registry` (by name).

May import: :mod:`qpinfer.quadrature` and :mod:`qpinfer.checks`; never the sigma* kernel,
tables, inference or estimators.
"""

from qpinfer.likelihoods.base import Likelihood, check_cavity
from qpinfer.likelihoods.poisson import PoissonSquare
from qpinfer.likelihoods.probit import Probit

__all__ = ["Likelihood", "PoissonSquare", "Probit", "check_cavity"]
