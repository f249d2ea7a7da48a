"""Validation of a v1 (grid) table store: everything :func:`qpinfer.open_table` checks before
it maps a chunk (see :mod:`qpinfer.tables` for the list), returning where the chunks are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from qpinfer.tables.integrity import metadata_changes
from qpinfer.tables.schema import DATA_VARS, DIMS, REQUIRED_ATTRS, SCHEMA_VERSION, grid_axis
from qpinfer.tables.store import (
    TableError,
    bytes_only,
    check_array_meta,
    chunk_key,
    chunk_path,
    read_coordinate,
    read_json,
)

__all__ = ["GridAxis", "GridStore", "check_grid_store"]

#: grid coordinates must match ``grid_axis`` to this absolute tolerance
_COORD_ATOL = 1e-9


class GridAxis:
    """A uniform grid axis (values from :func:`qpinfer.tables.schema.grid_axis`)."""

    __slots__ = ("inv_step", "n", "start", "step", "stop")

    def __init__(self, start: float, stop: float, step: float) -> None:
        self.start = float(start)
        self.step = float(step)
        if not (np.isfinite(self.start) and np.isfinite(float(stop)) and self.step > 0):
            raise ValueError(
                f"[start, stop, step] must be finite with step > 0, got {[start, stop, step]}"
            )
        self.n = round((stop - start) / step) + 1
        self.stop = self.start + self.step * (self.n - 1)
        self.inv_step = 1.0 / self.step


class GridStore(NamedTuple):
    """What a validated v1 store holds and where: its axes and one ``(file, checksum key)`` per
    chunk of each data variable (``sigma_ratio`` first)."""

    y: np.ndarray
    mu_axis: GridAxis
    ls_axis: GridAxis
    tile_mu: int
    chunk_files: dict[str, list[tuple[str, str]]]
    likelihood: Any


def check_likelihood_params(attrs: dict, what: str) -> None:
    """A store of a likelihood built per parameter value (``Likelihood.table_params``: the
    label-noise step's eps) must spell its parameters in its name, and those recorded in
    ``attrs["build"]["likelihood_params"]`` (if any) must be the name's."""
    from qpinfer.likelihoods.registry import get_likelihood, registered

    name = attrs["likelihood"]
    if not (isinstance(name, str) and name.split("(")[0] in registered()):
        return
    try:
        own = get_likelihood(name).table_params()
    except ValueError as exc:
        raise TableError(f"{what}: likelihood {name!r}: {exc}") from None
    if own and "(" not in name:
        spelled = ", ".join(f"{k}=..." for k in own)
        raise TableError(
            f"{what}: likelihood {name!r} does not say its {', '.join(own)} (expected "
            f"'{name}({spelled})')"
        )
    build = attrs.get("build")
    params = build.get("likelihood_params") if isinstance(build, dict) else None
    for key, value in params.items() if isinstance(params, dict) else ():
        if key in own and value != own[key]:
            raise TableError(
                f"{what}: likelihood {name!r} has {key}={own[key]!r} but its build record "
                f"says {key}={value!r}"
            )


def store_likelihood(name: Any, y: np.ndarray, what: str):
    """The store's likelihood object; its labels ``y`` must be valid for it."""
    from qpinfer.likelihoods.registry import get_likelihood

    try:
        lik = get_likelihood(name)
        lik.check_y(y)
    except (TypeError, ValueError) as exc:
        raise TableError(f"{what}: likelihood {name!r} with labels {y.tolist()}: {exc}") from None
    return lik


def check_grid_store(root: Path, attrs: dict[str, Any], what: str) -> GridStore:
    """Validate the v1 store at ``root`` (root attributes ``attrs``); :class:`~qpinfer.TableError`
    names what was expected and what was found."""
    missing = [a for a in REQUIRED_ATTRS if a not in attrs]
    if missing:
        raise TableError(f"{what}: missing root attributes {missing}")
    if attrs["qp_schema_version"] != SCHEMA_VERSION:
        raise TableError(
            f"{what}: schema version {attrs['qp_schema_version']!r}, this reader expects "
            f"{SCHEMA_VERSION}"
        )
    check_likelihood_params(attrs, what)  # first: the more specific message
    changes = metadata_changes(root, attrs)
    if changes:
        raise TableError(
            f"{what}: its metadata no longer matches the integrity digest written when it was "
            f"built ({'; '.join(changes)}), so its numbers may not mean what it says; rebuild "
            "or re-download it"
        )
    if attrs["complete"] is not True:
        raise TableError(f"{what}: incomplete (attrs['complete'] is {attrs['complete']!r})")
    # as for v2 stores, nothing would tie the likelihood to the numbers (checked after
    # 'complete': an unfinished build has no record yet, and 'incomplete' says why)
    if changes is None:
        raise TableError(
            f"{what}: has no integrity record (attrs['integrity']), so an edited likelihood, "
            "grid or coordinate could not be detected; every published build writes one -- "
            "rebuild it with `qptables build` (or re-download it)"
        )
    ver = attrs["verification"]
    if not isinstance(ver, dict) or ver.get("passed") is not True:
        raise TableError(f"{what}: verification did not pass (attrs['verification'] = {ver!r})")
    grid = attrs["grid"]
    try:
        mu_axis = GridAxis(*grid["mu"])
        ls_axis = GridAxis(*grid["log10_sigma"])
        y_grid = np.asarray(grid["y"], dtype=np.int64)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise TableError(f"{what}: malformed grid attribute {grid!r} ({exc})") from None
    lik = store_likelihood(attrs["likelihood"], y_grid, what)
    if mu_axis.n < 2 or ls_axis.n < 2 or y_grid.size < 1:
        raise TableError(f"{what}: grid needs >= 2 points per axis and >= 1 label, got {grid!r}")
    tile_mu = attrs["tile_mu"]
    if not isinstance(tile_mu, int) or tile_mu < 1:
        raise TableError(f"{what}: tile_mu must be a positive integer, found {tile_mu!r}")

    # coordinates against the grid specification
    y = read_coordinate(root, "y", what).astype(np.int64)
    if not np.array_equal(y, y_grid) or np.any(np.diff(y) <= 0):
        raise TableError(f"{what}: y coordinate {y.tolist()} != grid y {y_grid.tolist()} (sorted)")
    for name, axis, spec in (
        ("mu", mu_axis, grid["mu"]),
        ("log10_sigma", ls_axis, grid["log10_sigma"]),
    ):
        coord = read_coordinate(root, name, what)
        if coord.shape != (axis.n,):  # before grid_axis allocates what the attribute claims
            raise TableError(
                f"{what}: grid[{name!r}] = {spec} claims {axis.n} points, but coordinate "
                f"{name!r} holds {coord.size}"
            )
        expected = grid_axis(*spec)
        if coord.shape != expected.shape or not np.allclose(
            coord, expected, rtol=0, atol=_COORD_ATOL
        ):
            raise TableError(
                f"{what}: coordinate {name} (n={coord.size}) does not match grid {spec} "
                f"(n={expected.size})"
            )
    shape = (y.size, mu_axis.n, ls_axis.n)
    n_chunks = -(-mu_axis.n // tile_mu)
    chunk_bytes = tile_mu * ls_axis.n * 8
    checksums = attrs["checksums"]
    if not isinstance(checksums, dict):
        raise TableError(f"{what}: attrs['checksums'] must be a mapping, found {type(checksums)}")

    chunk_files: dict[str, list[tuple[str, str]]] = {}
    sroot = str(root)
    for var in ("sigma_ratio",) + tuple(v for v in DATA_VARS if v != "sigma_ratio"):
        ameta = read_json(root / var / "zarr.json", what)
        enc, sep = check_array_meta(ameta, var, what)
        dims = tuple(ameta.get("dimension_names") or ())
        if dims != DIMS:
            raise TableError(f"{what}: {var} has dims {dims}, expected {DIMS}")
        if tuple(ameta.get("shape", ())) != shape:
            raise TableError(
                f"{what}: {var} has shape {tuple(ameta.get('shape', ()))}, expected {shape}"
            )
        if ameta.get("data_type") != "float64":
            raise TableError(
                f"{what}: {var} has data type {ameta.get('data_type')!r}, expected float64"
            )
        cgrid = ameta.get("chunk_grid") or {}
        cshape = tuple((cgrid.get("configuration") or {}).get("chunk_shape", ()))
        if cgrid.get("name") != "regular" or cshape != (1, tile_mu, ls_axis.n):
            raise TableError(
                f"{what}: {var} chunks {cshape}, expected (1, {tile_mu}, {ls_axis.n}) (regular)"
            )
        if not bytes_only(ameta):
            raise TableError(
                f"{what}: {var} must be stored uncompressed (bytes codec, little endian), found "
                f"codecs {ameta.get('codecs')!r}"
            )
        files = []
        fast = enc == "default" and sep == "/" and os.sep == "/"
        for iy in range(y.size):
            for k in range(n_chunks):
                if fast:  # the contract's layout: plain string building (open-time budget)
                    key = f"{var}/c/{iy}/{k}/0"
                    f = f"{sroot}/{key}"
                else:
                    key = chunk_key(var, sep, (iy, k, 0), enc)
                    f = chunk_path(sroot, var, sep, (iy, k, 0), enc)
                try:
                    size = os.stat(f).st_size
                except FileNotFoundError:
                    raise TableError(
                        f"{what}: chunk file {f} is missing (incomplete store)"
                    ) from None
                if size != chunk_bytes:
                    raise TableError(
                        f"{what}: chunk file {f} has {size} bytes, expected {chunk_bytes} "
                        "(truncated or foreign)"
                    )
                if key not in checksums:
                    raise TableError(f"{what}: no checksum recorded for chunk {key}")
                files.append((f, key))
        chunk_files[var] = files
    return GridStore(y, mu_axis, ls_axis, tile_mu, chunk_files, lik)
