"""Likelihoods by name: the registry above every likelihood module (so none of them imports it).

``get_likelihood("probit")``, ``"poisson_square"``, ``"step_noise"`` / ``"step_noise(eps=0.1)"``,
``"student_t"`` / ``"student_t(nu=4, scale=1)"``, ``"logit"``, ``"poisson_log"`` -- the names table
stores record -- or a :class:`~qpinfer.Likelihood` object, returned as it is.
"""

from __future__ import annotations

from qpinfer.likelihoods import step_noise, student_t
from qpinfer.likelihoods.base import Likelihood
from qpinfer.likelihoods.logit import Logit
from qpinfer.likelihoods.poisson import PoissonSquare
from qpinfer.likelihoods.poisson_log import PoissonLog
from qpinfer.likelihoods.probit import Probit

__all__ = ["get_likelihood"]

#: name -> class (constructed with its defaults)
_REGISTRY = {
    "probit": Probit,
    "poisson_square": PoissonSquare,
    "step_noise": step_noise.StepNoise,
    "student_t": student_t.StudentT,
    "logit": Logit,
    "poisson_log": PoissonLog,
}


def get_likelihood(likelihood) -> Likelihood:
    """Return a likelihood object from a name (``"probit"``, ``"poisson_square"``,
    ``"step_noise"`` or ``"step_noise(eps=0.1)"``, ``"student_t"`` or ``"student_t(nu=4,
    scale=1)"``: the forms of the likelihoods' ``name`` that table stores record) or an object."""
    if isinstance(likelihood, Likelihood):
        return likelihood
    if isinstance(likelihood, str) and likelihood in _REGISTRY:
        return _REGISTRY[likelihood]()
    if isinstance(likelihood, str) and likelihood.startswith("step_noise("):
        eps = step_noise.parse_name(likelihood)  # ValueError naming eps if out of range
        if eps is not None:
            return step_noise.StepNoise(eps)
    if isinstance(likelihood, str) and likelihood.startswith("student_t("):
        params = student_t.parse_name(likelihood)  # ValueError naming nu / scale if out of range
        if params is not None:
            return student_t.StudentT(*params)
    raise ValueError(
        f"likelihood must be one of {sorted(_REGISTRY)} or a Likelihood instance; got {likelihood!r}"
    )
