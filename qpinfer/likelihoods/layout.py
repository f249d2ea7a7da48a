"""A likelihood's table layout: the boxes of reduced coordinates, each cut into equal cells,
over which a cell table stores sigma* (design and measurements: ``docs/development/tables-v2.md``).

A cell table stores ``rho = sigma* / sigma_EP`` (in (0, 1], Theorem 2 of Zhang et al., 2020) at
the Chebyshev-Gauss nodes of equal cells (:class:`CellAxis`; the polynomials:
:mod:`qpinfer.tables.chebyshev`) over one or more *boxes* per likelihood. A lookup follows the
exact kernel's own path (:func:`qpinfer.sigma_qp`):

1. the mirror symmetry (``Likelihood.canonical``);
2. the regimes where sigma* is known to double precision (``Likelihood._sigma_closed_form``);
3. the map to an equivalent cavity where the likelihood has one (``Likelihood._rescale``);
4. the first box that contains the (rescaled) cavity: ``rho`` from its cells, times the
   closed-form EP standard deviation, times the rescaling factor.

A :class:`Box` knows its axes, its labels (the label axis of the stored array: probit has one,
canonical ``y = +1``; Poisson one per count), how to turn a node back into a cavity (the build)
and a cavity into box coordinates (the lookup). A likelihood names its boxes
(``Likelihood.table_boxes``) and their kinds (``Likelihood.box_kinds``) in its own subpackage.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

__all__ = ["Box", "CellAxis", "chebyshev_nodes"]


@functools.cache
def chebyshev_nodes(n: int) -> np.ndarray:
    """Chebyshev-Gauss nodes on [-1, 1], ascending (read-only)."""
    x = -np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x.flags.writeable = False
    return x


@dataclass(frozen=True)
class CellAxis:
    """One axis of a table: ``n_cells`` cells of ``width`` from ``start``, ``n`` nodes each."""

    name: str
    start: float
    width: float
    n_cells: int
    n: int

    def __post_init__(self) -> None:
        if not (np.isfinite(self.start) and np.isfinite(self.width) and self.width > 0):
            raise ValueError(f"axis {self.name!r}: start and width must be finite, width > 0")
        if self.n_cells < 1 or self.n < 2:
            raise ValueError(f"axis {self.name!r}: need n_cells >= 1 and n >= 2 nodes per cell")

    @property
    def stop(self) -> float:
        return self.start + self.n_cells * self.width

    def nodes(self) -> np.ndarray:
        """All node positions, cell by cell, ascending: shape ``(n_cells * n,)``."""
        left = self.start + self.width * np.arange(self.n_cells)
        return (left[:, None] + 0.5 * self.width * (chebyshev_nodes(self.n)[None, :] + 1.0)).ravel()

    def to_attrs(self) -> dict:
        return {
            "name": self.name,
            "start": self.start,
            "width": self.width,
            "n_cells": self.n_cells,
            "nodes_per_cell": self.n,
        }

    @classmethod
    def from_attrs(cls, attrs: dict) -> CellAxis:
        return cls(
            str(attrs["name"]),
            float(attrs["start"]),
            float(attrs["width"]),
            int(attrs["n_cells"]),
            int(attrs["nodes_per_cell"]),
        )


@functools.cache
def _with_nodes(axes: tuple[CellAxis, ...], n: int) -> tuple[CellAxis, ...]:
    """``axes`` with ``n`` nodes per cell (built once: lookups ask on every sweep)."""
    return tuple(CellAxis(ax.name, ax.start, ax.width, ax.n_cells, n) for ax in axes)


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
    #: Chebyshev-Gauss nodes per cell and axis of the box's EP-moment arrays, if the store
    #: holds them (:data:`qpinfer.tables.reduced_store.MOMENT_ARRAYS`); 0: the axes' own. The
    #: same cells: EP's moments are as smooth as rho but vary more across a cell at the regime
    #: changes (the logit's kink and the corners of its boxes: the last coefficients at 12
    #: nodes reach 1e-10 there, at 16 nodes 2e-14)
    moment_nodes: int = 0
    #: the box's first coordinate is what the likelihood's ``tilted_mean_and_z`` computes with
    #: EP's mean, and a sweep's lookups take both in one pass
    fused_mean_z: ClassVar[bool] = False

    def cavity(self, label: float, *coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, sigma)`` of the (canonical) cavity at box coordinates ``coords``."""
        raise NotImplementedError

    def moment_axes(self) -> tuple[CellAxis, ...]:
        """The axes of the box's EP-moment arrays: its own, with :attr:`moment_nodes` nodes per
        cell where that is set."""
        return self.axes if not self.moment_nodes else _with_nodes(self.axes, self.moment_nodes)

    def reference_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` a box's stored EP moments are measured against
        (:data:`qpinfer.tables.reduced_store.MOMENT_ARRAYS`: ``log Z - log Z_ref``, ``(mean -
        mean_ref) / sigma``, ``log(std / std_ref)``), for canonical cavities in the box (the
        queries of :meth:`locate`, or a node's :meth:`cavity`): reference plus stored value are
        the moments ``Likelihood._from_box_moments`` takes (a box of folded cavities:
        the folded one's). A smooth function of the box's coordinates close to the moments, so
        that what is stored is O(1) and smooth, and the mean keeps an absolute accuracy of a
        small fraction of sigma (the mean is stored in units of :meth:`moment_unit`). Default:
        the cavity, ``(0, mu, sigma)``."""
        mu = np.asarray(mu, dtype=np.float64)
        return np.zeros(mu.shape), mu, np.asarray(sigma, dtype=np.float64)

    def moment_unit(self, sigma, ref) -> np.ndarray:
        """The unit of the stored mean, ``(mean - mean_ref) / unit``, at cavities of std
        ``sigma`` whose :meth:`reference_moments` are ``ref``: the cavity's std by default; a
        box whose moments scale with another width names it (from ``ref``, not computed
        again)."""
        return np.asarray(sigma, dtype=np.float64)

    def stored_moments(self, likelihood, mu, sigma, y, moments) -> tuple[np.ndarray, ...]:
        """What the box stores of EP's ``moments = (log Z, mean, std)`` at its nodes' cavities
        (:data:`~qpinfer.tables.reduced_store.MOMENT_ARRAYS`): :meth:`stored_log_z`, the mean
        in :meth:`moment_unit` from the reference's and the log of the std over the
        reference's. A box whose likelihood computes these differences directly overrides it."""
        log_z, mean, std = moments
        ref = self.reference_moments(mu, sigma, y)
        return (
            self.stored_log_z(likelihood, mu, sigma, y, log_z),
            (mean - ref[1]) / self.moment_unit(sigma, ref),
            np.log(std / ref[2]),
        )

    def locate_moments(self, mu, sigma, y):
        """:meth:`locate` for the box's EP moments: the same cavities, unless the box answers
        rho beyond its axes by a limit (clipping the coordinate) that the moments do not
        share."""
        return self.locate(mu, sigma, y)

    def stored_log_z(self, likelihood, mu, sigma, y, log_z) -> np.ndarray:
        """What the box stores of log Z at its nodes' cavities: ``log_z`` minus the reference's
        (:meth:`reference_moments`). A box whose reference shares large terms with log Z
        computes the difference without forming them."""
        return log_z - self.reference_moments(mu, sigma, y)[0]

    def locate(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """``(inside, label_index, coords)`` for canonical cavities: which lie in the box, the
        index of their label on the box's label axis, and their box coordinates. Here for a box
        with :meth:`~qpinfer.likelihoods.layout.Box.axis_coords` (one label, the cavities inside
        its axes' ranges); others override it."""
        coords = self.axis_coords(mu, sigma, y)
        if coords is None:
            raise NotImplementedError
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords

    def axis_coords(self, mu, sigma, y) -> tuple[np.ndarray, ...] | None:
        """Box coordinates of canonical cavities if the box has one label and holds exactly
        the cavities whose coordinates lie in its axes' ranges (the reader then checks both
        in one pass, :func:`qpinfer.tables.chebyshev.evaluate_inside`); ``None`` otherwise."""
        return None

    def axis_array(self, mu, sigma, y) -> np.ndarray | None:
        """:meth:`axis_coords` of 1-D arrays of cavities as one ``(n_axes, n)`` array, for
        :class:`qpinfer.tables.sweep_evaluator.SweepEvaluator`. The cavities need not be checked (a
        non-finite mean or a sigma <= 0 gives coordinates outside the axes); the caller
        silences floating-point warnings."""
        coords = self.axis_coords(mu, sigma, y)
        if coords is None:
            return None
        u = np.empty((len(coords), np.size(mu)))
        for d, x in enumerate(coords):
            u[d] = x
        return u

    def coord_jacobian(self, mu, sigma, y):
        """Derivatives of :meth:`axis_coords` in the canonical cavity, one ``(d/dmu, d/dsigma)``
        per axis, or ``None`` if the box does not give them (its lookups are then differentiated
        numerically, :mod:`qpinfer.tables.gradient`)."""
        return None

    def to_attrs(self) -> dict:
        return {
            "name": self.name,
            "kind": type(self).__name__,
            "axes": [ax.to_attrs() for ax in self.axes],
            "labels": list(self.labels),
            "denominator": self.denominator,
            # (absent where unset: the stores built before it keep their attributes)
            **({"moment_nodes": self.moment_nodes} if self.moment_nodes else {}),
            **{f.name: getattr(self, f.name) for f in _own_fields(type(self))},
        }

    @classmethod
    def extra_from_attrs(cls, attrs: dict) -> dict:
        """Keyword arguments of the box's own (float) fields beyond
        :class:`~qpinfer.likelihoods.layout.Box`'s, from its stored description
        (:meth:`~qpinfer.likelihoods.layout.Box.to_attrs`); a field's default where a store
        written before it lacks it."""
        return {f.name: float(attrs.get(f.name, f.default)) for f in _own_fields(cls)}

    def _inside_axes(self, coords) -> np.ndarray:
        inside = np.ones(np.shape(coords[0]), dtype=bool)
        for ax, x in zip(self.axes, coords, strict=True):
            inside &= (x >= ax.start) & (x <= ax.stop)
        return inside


def _own_fields(cls: type) -> tuple[dataclasses.Field, ...]:
    """The dataclass fields of a box class beyond :class:`Box`'s."""
    base = {f.name for f in dataclasses.fields(Box)}
    return tuple(f for f in dataclasses.fields(cls) if f.name not in base)
