"""Reduced coordinates of the v2 sigma* tables: where each likelihood's ratio is a smooth function
on a bounded box (design and measurements: ``docs/tables-v2.md``).

A v2 table stores ``rho = sigma* / sigma_EP`` (in (0, 1], Theorem 2) at the Chebyshev-Gauss
nodes of equal cells (:mod:`qpinfer.cheb_cells`) over one or more *boxes* per likelihood. A lookup
follows the exact kernel's own path (:func:`qpinfer.sigma.sigma_qp`):

1. the mirror symmetry (``Likelihood.canonical``);
2. the regimes where sigma* is known to double precision (``Likelihood._sigma_closed_form``);
3. the map to an equivalent cavity where the likelihood has one (``Likelihood._rescale``);
4. the first box that contains the (rescaled) cavity: ``rho`` from its cells, times the
   closed-form EP standard deviation, times the rescaling factor.

A :class:`Box` knows its axes, its labels (the label axis of the stored array: probit has one,
canonical ``y = +1``; Poisson one per count), how to turn a node back into a cavity (the build)
and a cavity into box coordinates (the lookup).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.cheb_cells import CellAxis

__all__ = ["Box", "ProbitCore", "ProbitTail", "boxes_for"]


@dataclass(frozen=True)
class Box:
    """One box of reduced coordinates; subclasses define the maps."""

    name: str
    axes: tuple[CellAxis, ...]
    labels: tuple[float, ...]

    def cavity(self, label: float, *coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, sigma)`` of the (canonical) cavity at box coordinates ``coords``."""
        raise NotImplementedError

    def locate(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """``(inside, label_index, coords)`` for canonical cavities: which lie in the box, the
        index of their label on the box's label axis, and their box coordinates."""
        raise NotImplementedError

    def to_attrs(self) -> dict:
        return {
            "name": self.name,
            "kind": type(self).__name__,
            "axes": [ax.to_attrs() for ax in self.axes],
            "labels": list(self.labels),
        }

    def _inside_axes(self, coords) -> np.ndarray:
        inside = np.ones(np.shape(coords[0]), dtype=bool)
        for ax, x in zip(self.axes, coords, strict=True):
            inside &= (x >= ax.start) & (x <= ax.stop)
        return inside


_TAU_SPLIT = 8.0  # the tail box starts at tau = -8


@dataclass(frozen=True)
class ProbitCore(Box):
    """tau = mu / sqrt(1 + sigma^2) and log10 sigma: see ``docs/tables-v2.md``."""

    def cavity(self, label, tau, log10_sigma):
        s = 10.0**log10_sigma
        return tau * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        tau = mu / np.hypot(1.0, sigma)
        with np.errstate(divide="ignore"):
            coords = (tau, np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


@dataclass(frozen=True)
class ProbitTail(Box):
    """u = -8 / tau in (0, 1] and log10 kappa, kappa = |tau| / sigma: see ``docs/tables-v2.md``."""

    def cavity(self, label, u, log10_kappa):
        tau = -_TAU_SPLIT / u
        s = np.abs(tau) / 10.0**log10_kappa
        return tau * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        tau = mu / np.hypot(1.0, sigma)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (-_TAU_SPLIT / tau, np.log10(np.abs(tau) / sigma))
        inside = (tau < -_TAU_SPLIT) & self._inside_axes(coords)
        return inside, np.zeros(np.shape(mu), dtype=np.intp), coords


def _probit_boxes(nodes: int = 12) -> tuple[Box, ...]:
    return (
        ProbitCore(
            "core",
            (
                CellAxis("tau", -_TAU_SPLIT, 0.5, 41, nodes),
                CellAxis("log10_sigma", -2.75, 0.25, 47, nodes),
            ),
            (1.0,),
        ),
        ProbitTail(
            "tail",
            (CellAxis("u", 0.0, 0.25, 4, nodes), CellAxis("log10_kappa", -8.0, 0.25, 43, nodes)),
            (1.0,),
        ),
    )


_BOXES = {"probit": _probit_boxes}
_KINDS = {"ProbitCore": ProbitCore, "ProbitTail": ProbitTail}


def boxes_for(likelihood: str) -> tuple[Box, ...]:
    """The default v2 boxes of a likelihood name (``ValueError`` if it has none): probit,
    poisson_square (counts 1..1000) and step_noise(eps=...) (one store per eps)."""
    from qpinfer.reduced_boxes import KINDS, poisson_boxes, step_noise_boxes

    _KINDS.update(KINDS)
    if likelihood.startswith("step_noise"):
        from qpinfer.step_noise import parse_name

        return step_noise_boxes(parse_name(likelihood))
    if likelihood == "poisson_square":
        return poisson_boxes()
    if likelihood in ("logit", "poisson_log"):  # issue #15: qpinfer.reduced_logit
        from qpinfer.reduced_logit import logit_boxes, poisson_log_boxes

        return logit_boxes() if likelihood == "logit" else poisson_log_boxes()
    try:
        return _BOXES[likelihood]()
    except KeyError:
        raise ValueError(
            f"no v2 table layout for likelihood {likelihood!r}; available: probit, "
            "poisson_square, step_noise(eps=...), logit, poisson_log"
        ) from None


def box_from_attrs(attrs: dict) -> Box:
    """A box from its stored description (``Box.to_attrs``); ``ValueError`` if unknown."""
    from qpinfer.reduced_boxes import KINDS
    from qpinfer.reduced_logit import KINDS as KINDS_15  # issue #15

    kind = {**_KINDS, **KINDS, **KINDS_15}.get(attrs.get("kind"))
    if kind is None:
        raise ValueError(f"unknown v2 box kind {attrs.get('kind')!r}")
    axes = tuple(CellAxis.from_attrs(a) for a in attrs["axes"])
    return kind(str(attrs["name"]), axes, tuple(float(v) for v in attrs["labels"]))
