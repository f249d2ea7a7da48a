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

__all__ = ["Box", "ProbitCore", "ProbitTail", "probit_boxes"]


@dataclass(frozen=True)
class Box:
    """One box of reduced coordinates; subclasses define the maps."""

    name: str
    axes: tuple[CellAxis, ...]
    labels: tuple[float, ...]
    #: what the box stores: ``"sigma_ep"``, rho = sigma* / sigma_EP (looked up after the
    #: closed-form regimes and the rescaling, needs EP's std), or ``"sigma"``, sigma* / sigma
    #: (looked up first, on the canonical cavity as it is: its nodes hold what the kernel gives
    #: in every regime, and a lookup needs no EP moments)
    denominator: str = "sigma_ep"

    def cavity(self, label: float, *coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, sigma)`` of the (canonical) cavity at box coordinates ``coords``."""
        raise NotImplementedError

    def locate(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """``(inside, label_index, coords)`` for canonical cavities: which lie in the box, the
        index of their label on the box's label axis, and their box coordinates."""
        raise NotImplementedError

    def axis_coords(self, mu, sigma, y) -> tuple[np.ndarray, ...] | None:
        """Box coordinates of canonical cavities if the box has one label and holds exactly
        the cavities whose coordinates lie in its axes' ranges (the reader then checks both
        in one pass, :func:`qpinfer.cheb_cells.evaluate_inside`); ``None`` otherwise."""
        return None

    def axis_array(self, mu, sigma, y) -> np.ndarray | None:
        """:meth:`axis_coords` of 1-D arrays of cavities as one ``(n_axes, n)`` array, for
        :class:`qpinfer.sweep_cells.SweepEvaluator`. The cavities need not be checked (a
        non-finite mean or a sigma <= 0 gives coordinates outside the axes); the caller
        silences floating-point warnings."""
        coords = self.axis_coords(mu, sigma, y)
        if coords is None:
            return None
        u = np.empty((len(coords), np.size(mu)))
        for d, x in enumerate(coords):
            u[d] = x
        return u

    def to_attrs(self) -> dict:
        return {
            "name": self.name,
            "kind": type(self).__name__,
            "axes": [ax.to_attrs() for ax in self.axes],
            "labels": list(self.labels),
            "denominator": self.denominator,
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
        coords = self.axis_coords(mu, sigma, y)
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords

    def axis_coords(self, mu, sigma, y):
        return mu / np.hypot(1.0, sigma), np.log10(sigma)  # sigma > 0 (validated)

    def axis_array(self, mu, sigma, y, tau=None):
        """(See :meth:`Box.axis_array`.) ``tau``: the first coordinate if the caller has it (the
        probit likelihood's z, :meth:`qpinfer.likelihoods.Probit.tilted_mean_and_z`: the same
        operations); ``mu`` and ``y`` are then not read."""
        u = np.empty((2, sigma.size))
        if tau is None:
            np.hypot(1.0, sigma, out=u[1])
            np.divide(mu, u[1], out=u[0])
        else:
            u[0] = tau
        np.log10(sigma, out=u[1])  # sigma <= 0: NaN or -inf, outside
        return u


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


def probit_boxes(nodes: int = 12) -> tuple[Box, ...]:
    """The default probit boxes ``core`` and ``tail`` (see the classes)."""
    return (
        ProbitCore(
            "core",
            (
                CellAxis("tau", -_TAU_SPLIT, 0.5, 41, nodes),
                CellAxis("log10_sigma", -2.75, 0.25, 47, nodes),
            ),
            (1.0,),
            "sigma",  # bounded below: sigma*/sigma >= 0.1 for tau >= -8 (docs/tables-v2.md)
        ),
        ProbitTail(
            "tail",
            (CellAxis("u", 0.0, 0.25, 4, nodes), CellAxis("log10_kappa", -8.0, 0.25, 43, nodes)),
            (1.0,),
        ),
    )
