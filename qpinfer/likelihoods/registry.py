"""Likelihoods by name, and their table layouts: the registry above every likelihood's
subpackage (so none of them imports it).

``get_likelihood("probit")``, ``"poisson_square"``, ``"step_noise"`` / ``"step_noise(eps=0.1)"``,
``"student_t"`` / ``"student_t(nu=4, scale=1)"``, ``"logit"``, ``"poisson_log"`` -- the names table
stores record --, a user likelihood's ``"package.module:ClassName(param=value)"``
(:class:`~qpinfer.CustomLikelihood`, imported) or a :class:`~qpinfer.Likelihood` object, returned
as it is. :func:`boxes_for`
gives the boxes of a likelihood's cell table and :func:`box_from_attrs` reads one back from a
store. Adding a likelihood adds one line to ``_REGISTRY`` (and, for one with parameters, to
``_PARAMETRIZED``).
"""

from __future__ import annotations

from qpinfer.likelihoods import step_noise, student_t
from qpinfer.likelihoods.base import Likelihood
from qpinfer.likelihoods.custom import CustomLikelihood, import_likelihood
from qpinfer.likelihoods.layout import Box, CellAxis
from qpinfer.likelihoods.logit import Logit
from qpinfer.likelihoods.poisson_log import PoissonLog
from qpinfer.likelihoods.poisson_square import PoissonSquare
from qpinfer.likelihoods.probit import Probit

__all__ = ["box_from_attrs", "boxes_for", "get_likelihood", "registered"]

#: name -> class (constructed with its defaults)
_REGISTRY: dict[str, type[Likelihood]] = {
    "probit": Probit,
    "poisson_square": PoissonSquare,
    "step_noise": step_noise.StepNoise,
    "student_t": student_t.StudentT,
    "logit": Logit,
    "poisson_log": PoissonLog,
}
#: name prefix -> (parser of a parametrized name into the class's arguments or None, class)
_PARAMETRIZED = {
    "step_noise(": (lambda name: _as_args(step_noise.parse_name(name)), step_noise.StepNoise),
    "student_t(": (student_t.parse_name, student_t.StudentT),
}


def _as_args(value):
    return None if value is None else (value,)


def registered() -> dict[str, type[Likelihood]]:
    """Every registered likelihood: name -> class."""
    return dict(_REGISTRY)


def get_likelihood(likelihood) -> Likelihood:
    """Return a likelihood object from a name (``"probit"``, ``"poisson_square"``,
    ``"step_noise"`` or ``"step_noise(eps=0.1)"``, ``"student_t"`` or ``"student_t(nu=4,
    scale=1)"``: the forms of the likelihoods' ``name`` that table stores record) or an object."""
    if isinstance(likelihood, Likelihood):
        return likelihood
    if isinstance(likelihood, str) and likelihood in _REGISTRY:
        return _REGISTRY[likelihood]()
    if isinstance(likelihood, str) and ":" in likelihood.partition("(")[0]:
        return import_likelihood(likelihood)  # a user's "package.module:ClassName(...)"
    for prefix, (parse, cls) in _PARAMETRIZED.items():
        if isinstance(likelihood, str) and likelihood.startswith(prefix):
            args = parse(likelihood)  # ValueError naming the parameter if out of range
            if args is not None:
                return cls(*args)
    raise ValueError(
        f"likelihood must be one of {sorted(_REGISTRY)}, a user likelihood's "
        f"'package.module:ClassName' or a Likelihood instance; got {likelihood!r}"
    )


def boxes_for(likelihood) -> tuple[Box, ...]:
    """The boxes of a likelihood's cell table (a name or an object; ``ValueError`` if it has
    none): probit, poisson_square (counts 1..1000), step_noise(eps=...) (one store per eps),
    logit, poisson_log (no count axis), student_t(nu=..., scale=1.0) (one store per nu, serving
    every scale)."""
    return get_likelihood(likelihood).table_boxes()


def box_from_attrs(attrs: dict) -> Box:
    """A box from its stored description (``Box.to_attrs``); ``ValueError`` if unknown."""
    classes = (*_REGISTRY.values(), CustomLikelihood)
    kinds = {k: v for cls in classes for k, v in cls.box_kinds().items()}
    kind = kinds.get(attrs.get("kind"))
    if kind is None:
        raise ValueError(f"unknown table box kind {attrs.get('kind')!r}")
    axes = tuple(CellAxis.from_attrs(a) for a in attrs["axes"])
    denominator = str(attrs.get("denominator", "sigma_ep"))
    if denominator not in ("sigma_ep", "sigma"):
        raise ValueError(f"unknown table box denominator {denominator!r}")
    labels = tuple(float(v) for v in attrs["labels"])
    moment_nodes = int(attrs.get("moment_nodes", 0))
    return kind(
        str(attrs["name"]), axes, labels, denominator, moment_nodes, **kind.extra_from_attrs(attrs)
    )
