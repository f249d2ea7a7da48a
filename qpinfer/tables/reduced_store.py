"""The files of a v2 sigma* store: their layout, their integrity record, their arrays.

A v2 store (``qp_schema_version == 2``, written by ``qptables build LIK OUT --grid cells``) is a
zarr v3 group, uncompressed, that ``xarray.open_zarr`` opens. For each box of
:mod:`qpinfer.likelihoods.layout` it holds one array ``rho_<box>`` of dims ``(<box>_y, <box>_<axis0>[,
<box>_<axis1>])`` (:func:`array_names`): ``rho = sigma* / sigma_EP`` at the Chebyshev-Gauss nodes
of the box's cells (:mod:`qpinfer.tables.chebyshev`), one slice per label, with the node positions
as coordinate arrays; each cell's block holds the cell's rounded Chebyshev coefficients where its
nodes are (root attribute ``data_layout`` = :data:`DATA_LAYOUT`,
:func:`~qpinfer.tables.chebyshev.rounded_coefficients`; a store without it holds the node values,
:func:`~qpinfer.tables.chebyshev.node_values` turns one into the other). Where the
likelihood's EP moments have no closed form (``Likelihood._tabulated_moments``), every box also
holds them at the same nodes, one array per quantity (:data:`MOMENT_ARRAYS`), measured against
the box's :meth:`~qpinfer.likelihoods.layout.Box.reference_moments` ``(log Z_ref, mean_ref,
std_ref)`` (the cavity itself, ``(0, mu, sigma)``, unless the box says otherwise):
``ep_log_z_<box>`` = log Z - log Z_ref, ``ep_mean_<box>`` = (mean - mean_ref) / unit (the box's
:meth:`~qpinfer.likelihoods.layout.Box.moment_unit`, sigma unless it says otherwise) and
``ep_log_std_<box>`` = log(std / std_ref) of the tilted distribution (root attribute
``moments``). Root attributes: ``likelihood``, ``boxes`` (each box's kind, axes and
labels), ``grid`` (the same, for tools that read v1's), ``coordinates`` / ``interpolation`` /
``claimed_domain`` (prose), ``arrays`` (every array of the store), ``verification`` (the build's
check against the exact kernel and mpmath), ``integrity`` and ``complete``.

Integrity: a v2 store is small (a few MB), so the reader
(:func:`qpinfer.tables.reduced.open_reduced`) reads every file of it once at open
(:func:`store_files`), hashes it (~2 ms per MB), decodes the arrays from the same bytes
(:func:`read_array`) and compares the hashes with ``attrs["integrity"]`` (:func:`integrity_record`,
written by the build): one sha256 per file and per root attribute (except
:data:`~qpinfer.tables.integrity.UNSIGNED_ATTRS`), and a digest over all of them; any change -- a
flipped byte in a chunk, an edited likelihood or box -- is named by :func:`integrity_changes`. (The
v1 stores' record is :mod:`qpinfer.tables.integrity`.)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from qpinfer.likelihoods.layout import Box, CellAxis
from qpinfer.tables.chebyshev import cell_rows, coefficients
from qpinfer.tables.store import TableError, chunk_key

__all__ = [
    "DATA_LAYOUT",
    "MOMENT_ARRAYS",
    "SCHEMA_VERSION_V2",
    "UNSIGNED_ATTRS",
    "array_names",
    "data_arrays",
    "integrity_changes",
    "integrity_record",
    "read_array",
    "read_cells",
    "store_files",
    "stores_coefficients",
]

SCHEMA_VERSION_V2 = 2
UNSIGNED_ATTRS = ("integrity", "verification", "complete")
#: EP's moments a store holds beside rho (see the module doc), in this order
MOMENT_ARRAYS = ("ep_log_z", "ep_mean", "ep_log_std")
#: the ``data_layout`` of a store whose data arrays hold each cell's rounded Chebyshev
#: coefficients (:func:`~qpinfer.tables.chebyshev.rounded_coefficients`); a store without the
#: attribute holds the node values
DATA_LAYOUT = "chebyshev_coefficients"


def data_arrays(moments: bool) -> tuple[str, ...]:
    """The prefixes of a box's data arrays: ``rho``, and EP's moments if the store holds them."""
    return ("rho", *MOMENT_ARRAYS) if moments else ("rho",)


def array_names(box: Box, moments: bool = False) -> dict[str, tuple[str, ...]]:
    """``{array: dims}`` of one box: its data arrays (:func:`data_arrays`), then its coordinate
    arrays."""
    dims = (f"{box.name}_y", *(f"{box.name}_{ax.name}" for ax in box.axes))
    data = {f"rho_{box.name}": dims}
    coords = list(dims)
    if moments:  # on the box's moment nodes, with their own coordinate arrays if they differ
        m_dims = dims
        if box.moment_nodes:
            m_dims = (dims[0], *(f"{box.name}_moment_{ax.name}" for ax in box.axes))
            coords += m_dims[1:]
        data.update({f"{prefix}_{box.name}": m_dims for prefix in MOMENT_ARRAYS})
    return {**data, **{d: (d,) for d in coords}}


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def store_files(root: Path) -> dict[str, bytes]:
    """Every file of the store but the root ``zarr.json``, read once: ``{relative path: bytes}``."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel != "zarr.json" and path.is_file():
            out[rel] = path.read_bytes()
    return out


def integrity_record(root: str | os.PathLike, attrs: dict) -> dict:
    """The ``integrity`` attribute of the store at ``root`` as it is now (see module doc)."""
    return _record(attrs, store_files(Path(root)))


def _record(attrs: dict, files: dict[str, bytes]) -> dict:
    """The integrity record of a store's attributes and file contents (:func:`store_files`)."""
    hashes = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    attributes = {
        k: hashlib.sha256(_canonical(v)).hexdigest()
        for k, v in sorted(attrs.items())
        if k not in UNSIGNED_ATTRS
    }
    fields = {"files": hashes, "attributes": attributes}
    return {
        "algorithm": "sha256",
        "digest": hashlib.sha256(_canonical(fields)).hexdigest(),
        **fields,
    }


def integrity_changes(attrs: dict, files: dict[str, bytes]) -> list[str]:
    """What changed since the store's integrity record was written (``files``:
    :func:`store_files`): one description per file or attribute, ``[]`` if nothing did."""
    want = attrs.get("integrity")
    if not isinstance(want, dict) or "digest" not in want:
        return ["the integrity record is missing"]
    have = _record(attrs, files)
    if have["digest"] == want["digest"]:
        return []
    out = []
    for kind in ("files", "attributes"):
        a, b = want.get(kind) or {}, have[kind]
        label = "file" if kind == "files" else "attribute"
        out += [f"{label} {k!r} changed" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
        out += [f"{label} {k!r} missing" for k in sorted(set(a) - set(b))]
        out += [f"{label} {k!r} added" for k in sorted(set(b) - set(a))]
    return out or ["the digest itself was changed"]


def _check_shape(
    root: Path, files: dict[str, bytes], name: str, shape: tuple, chunks: tuple, what: str
) -> None:
    """Refuse an array whose ``shape`` or ``chunk_shape`` (from its ``zarr.json``) are not
    positive integers of the same rank, or claim more chunks than the store has files for the
    array -- before anything of that size is allocated: the data read is then bounded by the
    bytes on disk, whatever the metadata says."""
    where = f"{what}: array {name!r} ({str(root / name / 'zarr.json')!r})"
    for field, dims in (("shape", shape), ("chunk_shape", chunks)):
        if not dims or not all(type(d) is int and d >= 1 for d in dims):
            raise TableError(f"{where}: {field} must be positive integers, found {list(dims)}")
    if len(shape) != len(chunks):
        raise TableError(
            f"{where}: shape {list(shape)} and chunk_shape {list(chunks)} differ in rank"
        )
    n_chunks = math.prod(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    n_files = sum(1 for rel in files if rel.startswith(f"{name}/") and not rel.endswith(".json"))
    if n_chunks > n_files:
        raise TableError(
            f"{where}: shape {list(shape)} in chunks {list(chunks)} needs {n_chunks} chunk "
            f"files, the store has {n_files}"
        )


def read_array(root: Path, files: dict[str, bytes], name: str, what: str) -> np.ndarray:
    """A float64 array of the store from its files' bytes (``files``: :func:`store_files`)."""
    try:
        meta = json.loads(files[f"{name}/zarr.json"])
        shape = tuple(meta["shape"])
        chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        enc = meta["chunk_key_encoding"]
        sep = enc.get("configuration", {}).get("separator", "/")
        codecs = meta["codecs"]
    except KeyError as exc:
        raise TableError(f"{what}: array {name!r} or its metadata is missing ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise TableError(f"{what}: malformed metadata of array {name!r} ({exc})") from None
    if meta.get("data_type") != "float64" or [c.get("name") for c in codecs] != ["bytes"]:
        raise TableError(f"{what}: array {name!r} must be uncompressed float64")
    _check_shape(root, files, name, shape, chunks, what)
    out = np.empty(shape)
    grid = [range(0, n, c) for n, c in zip(shape, chunks, strict=True)]
    for idx in np.ndindex(*[len(g) for g in grid]):
        lo = [g[i] for g, i in zip(grid, idx, strict=True)]
        rel = chunk_key(name, sep, idx, enc.get("name", "default"))
        data = files.get(rel)
        if data is None:
            raise TableError(f"{what}: chunk {str(root / rel)!r} is missing")
        if len(data) != 8 * int(np.prod(chunks)):
            raise TableError(
                f"{what}: chunk {str(root / rel)!r} has {len(data)} bytes, expected "
                f"{int(np.prod(chunks)) * 8}"
            )
        block = np.frombuffer(data, dtype="<f8").reshape(chunks)
        sl = tuple(slice(a, min(a + c, n)) for a, c, n in zip(lo, chunks, shape, strict=True))
        out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def stores_coefficients(attrs: dict, what: str) -> bool:
    """Whether the store's data arrays hold each cell's coefficients (``data_layout`` =
    :data:`DATA_LAYOUT`) or, written before that layout, its node values."""
    layout = attrs.get("data_layout", "node_values")
    if layout not in (DATA_LAYOUT, "node_values"):
        raise TableError(f"{what}: unknown data_layout {layout!r}")
    return layout == DATA_LAYOUT


def read_cells(
    root: Path,
    files: dict[str, bytes],
    name: str,
    axes: tuple[CellAxis, ...],
    n_labels: int,
    stored: bool,
    what: str,
) -> np.ndarray:
    """The per-cell Chebyshev coefficients of data array ``name`` (rows as
    :func:`~qpinfer.tables.chebyshev.coefficients`', one slice per label): the stored ones
    (``stored``, :func:`stores_coefficients`) or those of its node values;
    :class:`~qpinfer.TableError` naming an array that is missing, of another shape or not
    finite."""
    values = read_array(root, files, name, what)
    want = (n_labels, *(ax.n_cells * ax.n for ax in axes))
    if values.shape != want:
        raise TableError(
            f"{what}: array {name} has shape {values.shape}, but its box in attrs['boxes'] "
            f"declares {want} (labels, then n_cells x nodes_per_cell of each axis)"
        )
    if not np.all(np.isfinite(values)):
        raise TableError(f"{what}: array {name} is not {want} finite values")
    return cell_rows(values, axes) if stored else coefficients(values, axes)
