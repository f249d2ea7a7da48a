"""Piecewise Chebyshev interpolation on tensor grids of equal cells (the v2 tables' scheme).

An axis ``[start, start + n_cells * width]`` is cut into ``n_cells`` equal cells; each cell holds
``n`` Chebyshev-Gauss nodes ``x_k = cos(pi (k + 1/2) / n)`` (mapped into the cell, ascending),
which never touch a cell's ends, so a function is never evaluated on a boundary where a limit
(tau -> -inf, sigma -> 0) would be needed. A table stores the function's *values* at the tensor
product of the axes' nodes (what the kernel computed, what mpmath verifies, what is checksummed);
the reader turns each cell's ``n x n`` block of values into Chebyshev coefficients once, at open
(``coefficients``), and evaluates a query as ``sum_ij c_ij T_i(x) T_j(y)`` of its cell
(``evaluate``): one contiguous gather of the cell's block per query and ``n^2`` multiply-adds.

The interpolant's error on a cell is bounded by the sum of the discarded Chebyshev coefficients
of the function there; :func:`tail_size` reports the size of the last ones, which the build
uses to check that every cell is resolved.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["CellAxis", "coefficients", "evaluate", "tail_size"]


@functools.cache
def _nodes(n: int) -> np.ndarray:
    """Chebyshev-Gauss nodes on [-1, 1], ascending (read-only)."""
    x = -np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x.flags.writeable = False
    return x


@functools.cache
def _values_to_coefficients(n: int) -> np.ndarray:
    """(n, n) matrix M with c = M @ values (discrete Chebyshev transform at the Gauss nodes)."""
    x = _nodes(n)
    theta = np.arccos(x)
    m = np.cos(np.outer(np.arange(n), theta)) * (2.0 / n)
    m[0] *= 0.5
    m.flags.writeable = False
    return m


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
        return (left[:, None] + 0.5 * self.width * (_nodes(self.n)[None, :] + 1.0)).ravel()

    def locate(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell index and local coordinate in [-1, 1] of points inside ``[start, stop]``."""
        u = (x - self.start) / self.width
        cell = np.clip(np.floor(u), 0, self.n_cells - 1).astype(np.intp)
        return cell, 2.0 * (u - cell) - 1.0

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


def coefficients(values: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """Per-cell Chebyshev coefficients of node ``values`` (shape: the axes' node counts, with
    any number of leading batch axes, e.g. one slice per label).

    Returns an array of shape ``(batch * cells_0 * cells_1 * ..., n_0 * n_1 * ...)``: row
    ``b * n_cells + k`` is cell ``k`` (C order over the axes) of batch item ``b``, its
    coefficients flattened C order.
    """
    v = np.asarray(values, dtype=np.float64)
    lead = v.shape[: v.ndim - len(axes)]
    b = int(np.prod(lead))
    shape = [b]
    for ax in axes:
        shape += [ax.n_cells, ax.n]
    v = v.reshape(shape)
    for d, ax in enumerate(axes):
        v = np.moveaxis(
            np.tensordot(_values_to_coefficients(ax.n), v, axes=(1, 2 * d + 2)), 0, 2 * d + 2
        )
    order = [0] + [2 * d + 1 for d in range(len(axes))] + [2 * d + 2 for d in range(len(axes))]
    n_cells = int(np.prod([ax.n_cells for ax in axes]))
    return np.ascontiguousarray(v.transpose(order).reshape(b * n_cells, -1))


def _chebyshev_basis(x: np.ndarray, n: int) -> np.ndarray:
    """T_0(x) .. T_{n-1}(x) for 1-D x, shape (len(x), n) (a transposed view: rows built
    contiguously)."""
    t = np.empty((n, x.size))
    t[0] = 1.0
    t[1] = x
    x2 = 2.0 * x
    for k in range(2, n):
        np.multiply(x2, t[k - 1], out=t[k])
        t[k] -= t[k - 2]
    return t.T


def evaluate(
    coef: np.ndarray,
    axes: tuple[CellAxis, ...],
    points: tuple[np.ndarray, ...],
    first_row: np.ndarray | int = 0,
) -> np.ndarray:
    """Interpolant at ``points`` (one 1-D array per axis, all inside the axes' ranges).

    ``first_row``: per query, the row of ``coef`` where its batch item's cells start (e.g.
    ``label_index * n_cells`` for one slice per label, see :func:`coefficients`)."""
    flat = np.zeros(points[0].shape, dtype=np.intp)
    bases = []
    for ax, x in zip(axes, points, strict=True):
        cell, local = ax.locate(x)
        flat = flat * ax.n_cells + cell
        bases.append(_chebyshev_basis(local, ax.n))
    block = coef[first_row + flat]  # one contiguous row per query
    if len(axes) == 1:
        return np.einsum("pi,pi->p", block, bases[0])
    a, b = axes
    inner = np.matmul(block.reshape(-1, a.n, b.n), bases[1][:, :, None])[:, :, 0]
    return np.einsum("pi,pi->p", inner, bases[0])


def tail_size(coef: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """Per cell, the largest |coefficient| among the last two degrees of any axis."""
    shape = (coef.shape[0], *[ax.n for ax in axes])
    c = np.abs(coef.reshape(shape))
    out = np.zeros(coef.shape[0])
    for d in range(len(axes)):
        last = np.take(c, [-2, -1], axis=d + 1)
        out = np.maximum(out, last.reshape(coef.shape[0], -1).max(axis=1))
    return out
