"""Which v2 boxes a likelihood's table has, and boxes back from a store's attributes: the
registry above the box modules (:mod:`qpinfer.tables.boxes.base` for the ``Box`` interface, one
module per likelihood: ``probit``, ``poisson``, ``step_noise``, ``logit``, ``poisson_log`` (the
log-link Poisson's), ``student_t``)."""

from __future__ import annotations

from qpinfer.likelihoods.step_noise import parse_name
from qpinfer.likelihoods.student_t import parse_name as parse_student_t
from qpinfer.tables.boxes.base import Box
from qpinfer.tables.boxes.logit import KINDS as LOGIT_KINDS
from qpinfer.tables.boxes.logit import logit_boxes
from qpinfer.tables.boxes.poisson import KINDS as POISSON_KINDS
from qpinfer.tables.boxes.poisson import poisson_boxes
from qpinfer.tables.boxes.poisson_log import KINDS as POISSON_LOG_KINDS
from qpinfer.tables.boxes.poisson_log import poisson_log_boxes
from qpinfer.tables.boxes.probit import ProbitCore, ProbitTail, probit_boxes
from qpinfer.tables.boxes.step_noise import KINDS as STEP_NOISE_KINDS
from qpinfer.tables.boxes.step_noise import step_noise_boxes
from qpinfer.tables.boxes.student_t import KINDS as STUDENT_T_KINDS
from qpinfer.tables.boxes.student_t import student_t_boxes
from qpinfer.tables.chebyshev import CellAxis

__all__ = ["box_from_attrs", "boxes_for"]

_KINDS = {
    "ProbitCore": ProbitCore,
    "ProbitTail": ProbitTail,
    **POISSON_KINDS,
    **STEP_NOISE_KINDS,
    **LOGIT_KINDS,
    **POISSON_LOG_KINDS,
    **STUDENT_T_KINDS,
}
_LAYOUTS = {
    "probit": probit_boxes,
    "poisson_square": poisson_boxes,
    "logit": logit_boxes,
    "poisson_log": poisson_log_boxes,
}


def boxes_for(likelihood: str) -> tuple[Box, ...]:
    """The default v2 boxes of a likelihood name (``ValueError`` if it has none): probit,
    poisson_square (counts 1..1000), step_noise(eps=...) (one store per eps), logit
    (:mod:`qpinfer.tables.boxes.logit`), poisson_log (no count axis,
    :mod:`qpinfer.tables.boxes.poisson_log`), student_t(nu=..., scale=1.0)
    (one store per nu, serving every scale: :mod:`qpinfer.tables.boxes.student_t`)."""
    if likelihood.startswith("step_noise"):
        return step_noise_boxes(parse_name(likelihood))
    student_t = parse_student_t(likelihood)
    if student_t is not None:
        if student_t[1] != 1.0:
            raise ValueError(
                f"a Student-t v2 table is built for scale 1.0 and serves every scale; got "
                f"{likelihood!r} (build 'student_t(nu={student_t[0]!r}, scale=1.0)')"
            )
        return student_t_boxes(student_t[0])
    if likelihood in _LAYOUTS:
        return _LAYOUTS[likelihood]()
    raise ValueError(
        f"no v2 table layout for likelihood {likelihood!r}; available: probit, "
        "poisson_square, step_noise(eps=...), logit, poisson_log, student_t(nu=..., scale=1.0)"
    )


def box_from_attrs(attrs: dict) -> Box:
    """A box from its stored description (``Box.to_attrs``); ``ValueError`` if unknown."""
    kind = _KINDS.get(attrs.get("kind"))
    if kind is None:
        raise ValueError(f"unknown v2 box kind {attrs.get('kind')!r}")
    axes = tuple(CellAxis.from_attrs(a) for a in attrs["axes"])
    denominator = str(attrs.get("denominator", "sigma_ep"))
    if denominator not in ("sigma_ep", "sigma"):
        raise ValueError(f"unknown v2 box denominator {denominator!r}")
    labels = tuple(float(v) for v in attrs["labels"])
    moment_nodes = int(attrs.get("moment_nodes", 0))
    return kind(
        str(attrs["name"]), axes, labels, denominator, moment_nodes, **kind.extra_from_attrs(attrs)
    )
