"""The ``"cells"`` layout's tiles and store: sigma* in reduced coordinates, as Chebyshev cells.

The boxes of :func:`qpinfer.likelihoods.registry.boxes_for` are cut into *tiles* --
``tile_cells`` cells of a box's first axis for one label, i.e. one zarr chunk -- and every tile
is one pure task (:func:`run_tile`): the exact kernel at the tile's Chebyshev-Gauss nodes,
``rho = sigma* / sigma_EP`` (or ``sigma* / sigma``, per box; and EP's moments where they have no
closed form), stored as each cell's rounded Chebyshev coefficients
(:func:`qpinfer.tables.chebyshev.rounded_coefficients`) and written by the worker into its chunk
of ``OUT.partial`` (the client never gathers the table). Results are bit-reproducible however the
tiles are scheduled (the kernel's result for a point never depends on its batch).

Every tile is written as one chunk by :func:`qptables.store.write_chunk` and done when its chunk
file exists with its full size (:func:`qptables.store.finished_chunks`), as the grid's tiles are.
The store's schema is :mod:`qpinfer.tables.reduced` (:func:`create_cells_store`); the build's
steps are :mod:`qptables.pipeline.cells_layout`, its check :mod:`qptables.pipeline.cells_check`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

import qpinfer
from qpinfer.likelihoods.layout import Box
from qpinfer.likelihoods.registry import box_from_attrs
from qpinfer.tables.chebyshev import COEFFICIENT_BITS, rounded_coefficients
from qpinfer.tables.reduced_store import (
    DATA_LAYOUT,
    MOMENT_ARRAYS,
    SCHEMA_VERSION_V2,
    array_names,
    data_arrays,
)
from qptables.store import write_chunk

__all__ = [
    "TILE_CELLS",
    "TILE_LABELS",
    "cell_tiles",
    "chunk_shape",
    "chunk_sizes",
    "create_cells_store",
    "run_tile",
    "tile_arrays",
    "tile_done",
]


TILE_CELLS = 4  # 2-D boxes: cells of the first axis per tile, one label (one zarr chunk)
TILE_LABELS = 100  # 1-D boxes: labels per tile, the whole axis (one zarr chunk)


def tile_layout(box: Box) -> tuple[int, int]:
    """``(labels, cells of the first axis)`` per tile (= zarr chunk) of a box."""
    if len(box.axes) == 1:
        return min(TILE_LABELS, len(box.labels)), box.axes[0].n_cells
    return 1, TILE_CELLS


def chunk_shape(box: Box, prefix: str = "rho") -> tuple[int, ...]:
    """The chunk (= one tile's values) of the box's array ``prefix``: rho on the box's axes,
    EP's moments on :meth:`~qpinfer.likelihoods.layout.Box.moment_axes`."""
    labels, cells = tile_layout(box)
    axes = _array_axes(box, prefix)
    return (labels, cells * axes[0].n, *(ax.n_cells * ax.n for ax in axes[1:]))


def _array_axes(box: Box, prefix: str) -> tuple:
    """The axes of the box's data array ``prefix``: rho on the box's own, EP's moments on its
    moment axes."""
    return box.axes if prefix == "rho" else box.moment_axes()


def cell_tiles(boxes: tuple[Box, ...]) -> list[tuple[int, int, int]]:
    """``(box index, first label, first cell)`` of every tile."""
    out = []
    for k, box in enumerate(boxes):
        labels, cells = tile_layout(box)
        for first_label in range(0, len(box.labels), labels):
            for first_cell in range(0, box.axes[0].n_cells, cells):
                out.append((k, first_label, first_cell))
    return out


def tile_arrays(likelihood: str, box: Box, first_label: int, first_cell: int) -> dict:
    """Every data array of the box (:func:`qpinfer.tables.reduced_store.data_arrays`) of one
    tile as the store holds it, each of shape ``(labels, rows, nodes of the other axes...)``:
    the ratio (sigma* over sigma_EP or over sigma, ``box.denominator``) and, where the
    likelihood's EP moments have no closed form, those moments
    (:data:`qpinfer.tables.reduced_store.MOMENT_ARRAYS`,
    :meth:`~qpinfer.likelihoods.layout.Box.stored_moments`), computed again on the box's moment
    nodes (:meth:`~qpinfer.likelihoods.layout.Box.moment_axes`); each cell as its rounded
    Chebyshev coefficients (:data:`ROUNDING_FLOOR`)."""
    lik = qpinfer.get_likelihood(likelihood)
    mu, sigma, y, shape = _tile_nodes(box, box.axes, first_label, first_cell)
    q = qpinfer.sigma_qp(likelihood, mu, sigma, y)
    rho = q / (sigma if box.denominator == "sigma" else lik.tilted_moments(mu, sigma, y)[1])
    out = {"rho": _as_stored(rho, shape, box.axes, ROUNDING_FLOOR["rho"])}
    if lik._tabulated_moments:  # reduced_store.MOMENT_ARRAYS, on the box's moment nodes
        axes = box.moment_axes()
        mu, sigma, y, shape = _tile_nodes(box, axes, first_label, first_cell)
        stored = box.stored_moments(lik, mu, sigma, y, lik.ep_moments(mu, sigma, y))
        floor = ROUNDING_FLOOR["moments"]
        arrays = zip(MOMENT_ARRAYS, stored, strict=True)
        out.update({k: _as_stored(v, shape, axes, floor) for k, v in arrays})
    return out


#: the smallest scale (a power of two) a cell's coefficients are rounded against
#: (:func:`~qpinfer.tables.chebyshev.rounded_coefficients`): rho is needed relative to its
#: values (>= 3e-5 in every shipped store), EP's moments to an absolute 1e-12, so a cell of
#: moments near zero keeps no digits below 2^-50 (where its values are noise of the kernel's)
ROUNDING_FLOOR = {"rho": -30, "moments": 0}


def _as_stored(values: np.ndarray, shape: tuple[int, ...], axes, floor: int) -> np.ndarray:
    """A tile's node values (flat) as the store holds them: each cell's rounded Chebyshev
    coefficients in the tile's layout (:func:`~qpinfer.tables.chebyshev.rounded_coefficients`;
    the tile holds ``shape[1] / n`` whole cells of the first axis)."""
    tile_axes = (dataclasses.replace(axes[0], n_cells=shape[1] // axes[0].n), *axes[1:])
    return rounded_coefficients(values.reshape(shape), tile_axes, floor)


def _tile_nodes(box: Box, axes, first_label: int, first_cell: int):
    """``(mu, sigma, y, shape)``: the canonical cavities at one tile's nodes on ``axes`` (the
    box's, or its moment axes), flat, and the tile's array shape."""
    n_labels, n_cells = tile_layout(box)
    ax0 = axes[0]
    cells = min(n_cells, ax0.n_cells - first_cell)
    x0 = ax0.nodes()[first_cell * ax0.n : (first_cell + cells) * ax0.n]
    labels = np.asarray(box.labels[first_label : first_label + n_labels], dtype=np.float64)
    grids = np.meshgrid(labels, x0, *(ax.nodes() for ax in axes[1:]), indexing="ij")
    y = grids[0].ravel()
    mu, sigma = box.cavity(y, *(g.ravel() for g in grids[1:]))
    return mu, sigma, y, grids[0].shape


def run_tile(
    path: str, likelihood: str, box_attrs: dict, first_label: int, first_cell: int
) -> dict[str, int]:
    """Compute one tile and write it as its chunk of each data array (runs on a worker; rho
    last, so a tile whose rho chunk exists is finished in every array); returns the kernel
    points computed (``points_computed``; ``rows_mirrored``: 0, the cells have no mirror)."""
    box = box_from_attrs(box_attrs)
    arrays = tile_arrays(likelihood, box, first_label, first_cell)
    for prefix in sorted(arrays, key=lambda k: k == "rho"):
        values = arrays[prefix]
        r0 = first_cell * _array_axes(box, prefix)[0].n
        labels, rows = values.shape[:2]
        region = (slice(first_label, first_label + labels), slice(r0, r0 + rows))
        write_chunk(path, f"{prefix}_{box.name}", region, values)
    return {"points_computed": int(arrays["rho"].size), "rows_mirrored": 0}


def _chunk_key(box: Box, first_label: int, first_cell: int, prefix: str = "rho") -> str:
    """Store-relative key (= relative file path) of a tile's chunk of array ``prefix``."""
    labels, cells = tile_layout(box)
    parts = [str(first_label // labels), str(first_cell // cells)] + ["0"] * (len(box.axes) - 1)
    return "/".join([f"{prefix}_{box.name}", "c", *parts])


def _chunk_file(path: Path, box: Box, first_label: int, first_cell: int, prefix="rho") -> Path:
    """The chunk file of a tile's array ``prefix`` in the store at ``path``."""
    return path / _chunk_key(box, first_label, first_cell, prefix)


def chunk_sizes(boxes: tuple[Box, ...], moments: bool = False) -> dict[str, int]:
    """Every tile's chunk key (of every data array,
    :func:`~qpinfer.tables.reduced_store.data_arrays`) -> the size of its (uncompressed,
    full-size) file."""
    return {
        _chunk_key(boxes[k], label, cell, prefix): 8 * int(np.prod(chunk_shape(boxes[k], prefix)))
        for k, label, cell in cell_tiles(boxes)
        for prefix in data_arrays(moments)
    }


def tile_done(boxes, tile, done: set, moments: bool) -> bool:
    """Every chunk of the tile is finished."""
    return all(_chunk_key(boxes[tile[0]], *tile[1:], p) in done for p in data_arrays(moments))


def create_cells_store(path: Path, likelihood: str, boxes: tuple[Box, ...]) -> None:
    """Create the empty cells store (``complete=False``) at ``path``: its attributes are the
    shipped stores' (the finished build adds ``build``, ``integrity``, ``verification`` and
    sets ``complete``)."""
    import zarr

    group = zarr.open_group(str(path), mode="w")
    arrays: list[str] = []
    moments = qpinfer.get_likelihood(likelihood)._tabulated_moments
    for box in boxes:
        names = array_names(box, moments)
        for prefix in data_arrays(moments):
            axes = _array_axes(box, prefix)
            dims = names[f"{prefix}_{box.name}"]
            group.create_array(
                f"{prefix}_{box.name}",
                shape=(len(box.labels), *(ax.n_cells * ax.n for ax in axes)),
                chunks=chunk_shape(box, prefix),
                dtype="<f8",
                dimension_names=dims,
                compressors=None,
                fill_value=np.nan,
            )
        for name, dims in names.items():
            if dims == (name,):  # a coordinate array
                group.create_array(
                    name, data=_coordinate(box, name), dimension_names=dims, compressors=None
                )
        arrays += list(names)
    group.attrs.update(
        {
            "qp_schema_version": SCHEMA_VERSION_V2,
            "likelihood": likelihood,
            "boxes": [b.to_attrs() for b in boxes],
            "grid": {"kind": "chebyshev-cells", "boxes": [b.name for b in boxes]},
            "arrays": arrays,
            # the 0.1 module names, kept verbatim: `qptables ship` re-creates the shipped stores
            # bit for bit (now qpinfer.likelihoods.layout and qpinfer.tables.chebyshev; the page is docs/development/)
            "coordinates": (
                "reduced coordinates per box (qpinfer.reduced, docs/tables-v2.md); rho_<box> = "
                "sigma*/sigma_EP, or sigma*/sigma where the box's denominator is 'sigma', at "
                "Chebyshev-Gauss nodes of equal cells"
            ),
            "interpolation": "piecewise Chebyshev (qpinfer.cheb_cells), tensor product per cell",
            "data_layout": DATA_LAYOUT,
            "data_encoding": (
                "every data array holds, in each cell's block of nodes, the cell's Chebyshev "
                "coefficients of the quantity at those nodes (coefficient (a, b) of cell (i, j) "
                "at node (a, b) of it), each rounded to a multiple of "
                f"2^-{COEFFICIENT_BITS} of the power of two at or above the cell's largest one "
                f"and at least 2^{ROUNDING_FLOOR['rho']} (rho) or 1 (EP's moments) "
                "(qpinfer.tables.chebyshev.rounded_coefficients)"
            ),
            "claimed_domain": (
                "every finite mu, sigma > 0 and label the likelihood accepts: closed-form "
                "regimes, then the boxes; cavities in no box use the exact kernel (counted)"
            ),
            "tile_cells": TILE_CELLS,
            "complete": False,
        }
    )
    if moments:
        group.attrs["moments"] = {
            "arrays": [f"{p}_<box>" for p in MOMENT_ARRAYS],
            "quantities": (
                "EP's tilted moments at each node's canonical cavity (mu, sigma): ep_log_z = "
                "log Z - log Z_ref, ep_mean = (mean - mean_ref) / unit, ep_log_std = log(std / "
                "std_ref), against the box's reference_moments (the cavity itself, (0, mu, "
                "sigma), unless the box says otherwise) and moment_unit (sigma, unless the box "
                "says otherwise)"
            ),
        }


def _coordinate(box: Box, name: str) -> np.ndarray:
    """The values of a box's coordinate array ``name`` (:func:`array_names`): its labels, its
    axes' nodes, or its moment axes' nodes."""
    if name == f"{box.name}_y":
        return np.asarray(box.labels, dtype=np.float64)
    for ax, m_ax in zip(box.axes, box.moment_axes(), strict=True):
        if name == f"{box.name}_{ax.name}":
            return ax.nodes()
        if name == f"{box.name}_moment_{ax.name}":
            return m_ax.nodes()
    raise KeyError(name)
