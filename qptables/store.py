# Over 400 lines: the whole writer side of the store contract (create, tiles, checksums, publish copy) in one place.
"""Writer side of the table store (the contract is :mod:`qpinfer.tables.schema`).

A store is a zarr v3 directory (``zarr.storage.LocalStore``) with data variables
``sigma_qp`` and ``sigma_ratio`` of dims ``(y, mu, log10_sigma)``, chunked
``(1, tile_mu, n_log10_sigma)`` and *uncompressed* (bytes codec only), coordinate arrays
``y``/``mu``/``log10_sigma`` and the root attributes of
:data:`qpinfer.tables.schema.REQUIRED_ATTRS`.

Chunk integrity (every build, the cells of :mod:`qptables.pipeline.cells` too). Builds write
uncompressed chunks with :func:`write_chunk`, so every chunk file has a known size (here
``tile_mu * n_log10_sigma * 8`` bytes; edge chunks are stored full size and padded with the NaN
fill value). A chunk counts as *done* only when its file exists with exactly that size
(:func:`finished_chunks`). This is safe because (1) zarr's ``LocalStore`` writes each chunk to a
temporary sibling (``0.<uuid>.partial``) and ``os.replace``-s it into place, so a killed writer
never leaves a half-written chunk under the real name, and (2) even without (1), a chunk file is
written sequentially by one ``write`` so a torn write is always *short*, which the size check
rejects. Left-over temporary files are deleted by :func:`finished_chunks`. Once every chunk is
written, :func:`chunk_checksums` records a sha256 per chunk file in ``attrs["checksums"]`` so
readers can detect later corruption.

Beyond :data:`qpinfer.tables.schema.REQUIRED_ATTRS` the writer records ``attrs["build"]``
(likelihood, grid, tiling, a sha256 *kernel fingerprint* of a probe tile, whether the probit mirror
was used -- what a resumed build must match) and ``attrs["data_vars"]`` (a description per
variable). Extra attributes are allowed by the contract and ignored by the reader, so
:mod:`qpinfer.tables.schema` is unchanged.

Published layout. Builds write small tiles (many chunks per ``y`` slice: parallelism, resuming);
the reader is fastest with few chunk files (each touched chunk costs a Python iteration per
lookup batch). So publishing (:func:`consolidate_store`) *copies* a finished build into a
sibling store with ONE chunk per ``(variable, y)`` -- chunks ``(1, n_mu, n_log10_sigma)``,
``attrs["tile_mu"] == n_mu``, still uncompressed -- one task per ``(variable, y)`` that reads
the slice's tile files (checking each against the build's sha256), writes the single chunk
through zarr and hashes the file it wrote. The copy is bit-identical value for value.

Published stores also carry the metadata digest ``attrs["integrity"]`` (one sha256 over the
metadata that says what the numbers mean and the chunk checksums; :mod:`qpinfer.tables.integrity`),
checked by the reader and by ``qptables verify``, and zarr consolidated metadata (so
``xarray.open_zarr`` opens them without warnings); :func:`update_attrs` re-consolidates after
every attribute change so the consolidated copy is never stale.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import zarr
from zarr.storage import LocalStore

from qpinfer.tables import sha256_file
from qpinfer.tables.integrity import INTEGRITY_ATTR, integrity_record
from qpinfer.tables.replace import remove_store
from qpinfer.tables.schema import DATA_VARS, DIMS, SCHEMA_VERSION
from qptables.grid import GridSpec

__all__ = [
    "StoreError",
    "StoreHeader",
    "chunk_checksums",
    "chunk_key",
    "consolidate_slice",
    "consolidate_store",
    "create_store",
    "finished_chunks",
    "published_grid",
    "read_attrs",
    "read_header",
    "read_rows",
    "scan_tiles",
    "update_attrs",
    "write_chunk",
    "write_tile",
]

VAR_DESCRIPTIONS = {
    # (the stored text of every grid store built so far: kept, so that a rebuild equals them)
    "sigma_qp": "QP standard deviation sigma* (paper 000 eq. 7) of the tilted distribution",
    "sigma_ratio": (
        "sigma_qp / sigma_ep (EP's tilted standard deviation); in (0, 1] by Theorem 2 and "
        "smoother than sigma_qp -- interpolate this and multiply by the exact sigma_ep"
    ),
}


class StoreError(RuntimeError):
    """A store on disk does not match what was expected."""


def _group(path: str | os.PathLike, mode: str = "r") -> zarr.Group:
    return zarr.open_group(LocalStore(str(path), read_only=(mode == "r")), mode=mode)


def chunk_key(var: str, iy: int, k: int) -> str:
    """Store-relative key (= relative file path) of the chunk of ``var`` for tile ``(iy, k)``."""
    return f"{var}/c/{iy}/{k}/0"


def create_store(
    path: str | os.PathLike,
    likelihood: str,
    grid: GridSpec,
    *,
    package_version: str,
    build_info: dict[str, Any],
) -> None:
    """Create an empty (``complete=False``) table store at ``path`` (must not exist).

    Writes the coordinate arrays and all root attributes; data chunks are written later,
    one per tile, by :func:`write_tile`.
    """
    g = zarr.open_group(LocalStore(str(path)), mode="w-", zarr_format=3)
    shape = grid.shape
    for var in DATA_VARS:
        arr = g.create_array(
            var,
            shape=shape,
            chunks=grid.chunk_shape,
            dtype="<f8",
            compressors=None,
            filters=None,
            fill_value=np.nan,
            dimension_names=DIMS,
            config={"write_empty_chunks": True},
        )
        arr.attrs["description"] = VAR_DESCRIPTIONS[var]
    coords = {
        "y": np.asarray(grid.y, dtype="<i8"),
        "mu": grid.mu_values().astype("<f8"),
        "log10_sigma": grid.log10_sigma_values().astype("<f8"),
    }
    for name, values in coords.items():
        c = g.create_array(
            name,
            shape=values.shape,
            chunks=values.shape,
            dtype=values.dtype,
            compressors=None,
            filters=None,
            dimension_names=(name,),
        )
        c[...] = values
    g.attrs.update(
        {
            "qp_schema_version": SCHEMA_VERSION,
            "likelihood": likelihood,
            "grid": grid.to_attrs(),
            "tile_mu": int(grid.tile_mu),
            "package_version": package_version,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "complete": False,
            "checksums": {},
            "verification": {},
            "data_vars": dict(VAR_DESCRIPTIONS),
            "build": build_info,
        }
    )


def read_attrs(path: str | os.PathLike) -> dict[str, Any]:
    """Root attributes of the store at ``path`` (read from the group's own ``zarr.json``)."""
    try:
        g = zarr.open_group(LocalStore(str(path), read_only=True), mode="r", use_consolidated=False)
    except Exception as exc:
        raise StoreError(f"{path}: not a readable zarr v3 table store ({exc})") from exc
    return dict(g.attrs)


def update_attrs(path: str | os.PathLike, consolidate: bool = True, **attrs: Any) -> dict[str, Any]:
    """Update root attributes of the store at ``path`` and refresh consolidated metadata;
    returns all its root attributes as updated."""
    g = zarr.open_group(LocalStore(str(path)), mode="r+", use_consolidated=False)
    g.attrs.update(attrs)
    if consolidate:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "consolidated metadata is not in the v3 spec"
            zarr.consolidate_metadata(LocalStore(str(path)))
    return dict(g.attrs)


class StoreHeader(NamedTuple):
    """A tiled store's root attributes and the grid they describe: read once
    (:func:`read_header`) and handed down to every step of a build or a check that needs them."""

    attrs: dict[str, Any]
    grid: GridSpec

    @classmethod
    def of(cls, attrs: dict[str, Any]) -> StoreHeader:
        """The header of a store with root attributes ``attrs``."""
        return cls(attrs, GridSpec.from_attrs(attrs["grid"], attrs["tile_mu"]))


def read_header(path: str | os.PathLike) -> StoreHeader:
    """The :class:`StoreHeader` of the store at ``path``."""
    return StoreHeader.of(read_attrs(path))


def write_tile(
    path: str | os.PathLike, iy: int, rows: tuple[int, int], values: dict[str, np.ndarray]
) -> None:
    """Write one tile (exactly one chunk per data variable) into the store at ``path``.

    ``rows = (a, b)`` are the tile's ``mu`` rows; ``values[var]`` has shape
    ``(b - a, n_log10_sigma)``. Each zarr region write covers exactly one chunk.
    """
    a, b = rows
    for var in DATA_VARS:
        write_chunk(
            path, var, (slice(iy, iy + 1), slice(a, b), slice(None)), values[var][np.newaxis]
        )


def write_chunk(
    path: str | os.PathLike, array: str, region: tuple[slice, ...], values: np.ndarray
) -> None:
    """Write ``values`` into the ``region`` of ``array`` of the store at ``path``: the one tile
    writer of every build. ``region`` covers exactly one chunk (its start aligned, its end the
    chunk's or the array's), so one zarr region write replaces one whole chunk file atomically
    (module docstring); it is written even if it holds only the fill value."""
    arr = zarr.open_array(
        LocalStore(str(path)), path=array, mode="r+", config={"write_empty_chunks": True}
    )
    arr[region] = values


def read_rows(path: str | os.PathLike, var: str, iy: int, rows: tuple[int, int]) -> np.ndarray:
    """Read ``var[iy, a:b, :]`` from the store at ``path``."""
    a, b = rows
    arr = zarr.open_array(LocalStore(str(path), read_only=True), path=var, mode="r")
    return np.asarray(arr[iy, a:b, :])


def finished_chunks(
    path: str | os.PathLike, sizes: Mapping[str, int], *, clean: bool = True
) -> set[str]:
    """The chunk keys of ``sizes`` (key -> the exact size of its uncompressed file) whose files
    are present with that size: the tiles a build has finished (module docstring).

    With ``clean=True`` deletes what cannot be trusted under the arrays' chunk directories
    (``<array>/c``): left-over temporary files of killed writers, chunk files of the wrong size
    (truncated) and any other file that is not one of ``sizes``' chunks.
    """
    root = Path(path)
    done = set()
    for base in sorted({root / key.split("/c/", 1)[0] / "c" for key in sizes}):
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                fpath = Path(dirpath) / name
                key = fpath.relative_to(root).as_posix()
                if key in sizes and fpath.stat().st_size == sizes[key]:
                    done.add(key)
                elif clean:
                    fpath.unlink(missing_ok=True)
    return done


def scan_tiles(
    path: str | os.PathLike, grid: GridSpec, *, clean: bool = True
) -> set[tuple[int, int]]:
    """Tiles ``(iy, k)`` whose chunk files are all present with the exact expected size
    (:func:`finished_chunks`, which ``clean`` is passed to)."""
    size = grid.chunk_nbytes()
    sizes = {chunk_key(var, iy, k): size for var in DATA_VARS for iy, k in grid.tiles()}
    done = finished_chunks(path, sizes, clean=clean)
    return {t for t in grid.tiles() if all(chunk_key(var, *t) in done for var in DATA_VARS)}


def chunk_checksum(root: str | os.PathLike, key: str) -> str:
    """sha256 hex digest of one chunk file (``key`` relative to the store root)."""
    return sha256_file(Path(root) / key)


def chunk_keys(grid: GridSpec) -> list[str]:
    """Every data chunk key of a complete store, in a stable order."""
    return [chunk_key(var, iy, k) for var in DATA_VARS for (iy, k) in grid.tiles()]


def chunk_checksums(
    root: str | os.PathLike, keys: Iterable[str], client: Any | None = None
) -> dict[str, str]:
    """sha256 of each chunk file, computed on the dask ``client``'s workers if one is given."""
    keys = list(keys)
    if client is not None:
        futs = client.map(chunk_checksum, [str(root)] * len(keys), keys, pure=False)
        digests = client.gather(futs)
    else:
        digests = [chunk_checksum(root, k) for k in keys]
    return dict(zip(keys, digests, strict=True))


# ----------------------------------------------------------------------------- published layout


def published_grid(grid: GridSpec) -> GridSpec:
    """``grid`` with the published tiling: one chunk per ``y`` slice (``tile_mu = n_mu``)."""
    return GridSpec(grid.mu, grid.log10_sigma, grid.y, tile_mu=grid.mu.n)


def consolidate_slice(
    src: str,
    dst: str,
    var: str,
    iy: int,
    grid_attrs: dict,
    tile_mu: int,
    tile_checksums: dict[str, str],
) -> tuple[str, str]:
    """Copy ``var[iy]`` from the tiled store ``src`` into the one-chunk store ``dst``.

    Reads the slice's tile files raw (they are uncompressed zarr chunks) and checks each
    against ``tile_checksums`` (so nothing corrupted after verification is published), writes
    the whole slice as ONE chunk through zarr, then hashes the written file and checks it holds
    exactly the slice's bytes (little-endian float64, C order). Runs on a dask worker (one task
    per ``(variable, y)``); memory ~2-3x one slice (paper grid: 320 MB per slice). Returns
    ``(chunk key, sha256)`` of the new chunk.
    """
    grid = GridSpec.from_attrs(grid_attrs, tile_mu)
    n_mu, n_ls = grid.mu.n, grid.log10_sigma.n
    block = np.empty((n_mu, n_ls), dtype="<f8")
    for k in range(grid.tiles_per_y):
        key = chunk_key(var, iy, k)
        data = (Path(src) / key).read_bytes()
        got = hashlib.sha256(data).hexdigest()
        if got != tile_checksums.get(key):
            raise StoreError(
                f"{src}: tile {key} changed since it was checksummed (sha256 {got}, recorded "
                f"{tile_checksums.get(key)}); not publishing"
            )
        a, b = grid.tile_rows(k)
        block[a:b] = np.frombuffer(data, dtype="<f8").reshape(tile_mu, n_ls)[: b - a]
        del data
    want = hashlib.sha256(memoryview(block).cast("B")).hexdigest()
    arr = zarr.open_array(
        LocalStore(str(dst)), path=var, mode="r+", config={"write_empty_chunks": True}
    )
    if arr.chunks != (1, n_mu, n_ls):
        raise StoreError(f"{dst}: {var} chunks {arr.chunks}, expected (1, {n_mu}, {n_ls})")
    arr[iy : iy + 1, :, :] = block[np.newaxis]
    del block
    new_key = chunk_key(var, iy, 0)
    got = chunk_checksum(dst, new_key)
    if got != want:
        raise StoreError(
            f"{dst}: chunk {new_key} does not hold the slice's bytes (sha256 {got}, expected "
            f"{want}); is the array uncompressed?"
        )
    return new_key, got


def _task_result(future: Any, var: str, y: int) -> tuple[str, str]:
    """The result of the publishing task for ``(var, y)``; its failure as one summarised
    :class:`StoreError` naming the task and the error (not the worker's traceback)."""
    try:
        return future.result()
    except Exception as exc:
        raise StoreError(
            f"the publishing task for {var} at y={y} failed: {type(exc).__name__}: {exc}"
        ) from exc


def consolidate_store(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    client: Any | None = None,
    header: StoreHeader | None = None,
) -> dict[str, Any]:
    """Write the published copy of the finished, checksummed build ``src`` into ``dst``.

    ``dst`` (deleted first if it exists: a stale copy of an interrupted publish -- only if it is
    a table store, :func:`qpinfer.tables.replace.remove_store`) is created in a staging sibling and
    renamed into place, and gets the same coordinates and attributes as ``src`` with one chunk
    per ``(variable, y)`` (:func:`published_grid`), fresh ``checksums`` for the new chunk keys,
    ``tile_mu = n_mu``, ``attrs["layout"]`` (the build's tiling), the metadata digest
    ``attrs["integrity"]`` (:mod:`qpinfer.tables.integrity`) and consolidated metadata. ``complete``
    is set to ``True`` as the very last write, so an interrupted copy never looks complete. The
    tasks run on the dask ``client``'s workers if given (one per ``(variable, y)``), else
    inline; a failed task is raised as one :class:`StoreError` naming it. ``header``: ``src``'s
    (read here if not given). Returns the new root attributes.
    """
    import shutil

    src, dst = Path(src), Path(dst)
    attrs, grid = header if header is not None else read_header(src)
    tile_sums = attrs.get("checksums") or {}
    expected = set(chunk_keys(grid))
    if set(tile_sums) != expected:
        raise StoreError(f"{src}: checksums missing for {len(expected - set(tile_sums))} tiles")
    pub = published_grid(grid)
    remove_store(dst, what="the publishing copy")  # a stale copy: refused if not a store
    staging = dst.with_name(f"{dst.name}.new-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    create_store(
        staging,
        attrs["likelihood"],
        pub,
        package_version=attrs["package_version"],
        build_info=attrs.get("build") or {},
    )
    os.replace(staging, dst)  # dst always has complete metadata (recognisable as a store)
    jobs = [(var, iy) for var in DATA_VARS for iy in range(len(grid.y))]
    args = [
        (
            str(src),
            str(dst),
            var,
            iy,
            grid.to_attrs(),
            int(grid.tile_mu),
            {
                chunk_key(var, iy, k): tile_sums[chunk_key(var, iy, k)]
                for k in range(grid.tiles_per_y)
            },
        )
        for var, iy in jobs
    ]
    if client is not None:
        import uuid

        token = uuid.uuid4().hex[:8]
        futs = [
            client.submit(
                consolidate_slice,
                *a,
                key=f"qpconsolidate-{token}-{var}-{iy}",
                pure=False,
                retries=1,
            )
            for a, (var, iy) in zip(args, jobs, strict=True)
        ]
        try:
            results = [_task_result(f, var, grid.y[iy]) for f, (var, iy) in zip(futs, jobs)]
        finally:
            for f in futs:
                f.cancel()
    else:
        results = [consolidate_slice(*a) for a in args]
    checksums = dict(results)
    if set(checksums) != set(chunk_keys(pub)):
        raise StoreError(f"{dst}: consolidated chunks {sorted(checksums)} are incomplete")
    size = pub.chunk_nbytes()
    for key in checksums:
        if (dst / key).stat().st_size != size:
            raise StoreError(f"{dst}: chunk {key} has the wrong size")
    new = {k: v for k, v in attrs.items() if k not in ("complete", "checksums", "tile_mu")}
    new["tile_mu"] = int(pub.tile_mu)
    new["checksums"] = checksums
    new["layout"] = {
        "chunks": "one per (variable, y): (1, n_mu, n_log10_sigma), uncompressed",
        "build_tile_mu": int(grid.tile_mu),
        "build_chunks_per_y": int(grid.tiles_per_y),
    }
    # the digest covers the metadata as stored: JSON values, which update_attrs returns as such
    written = update_attrs(dst, consolidate=False, **new)
    record = integrity_record(dst, written)
    update_attrs(dst, consolidate=False, **{INTEGRITY_ATTR: record})
    update_attrs(dst, complete=True)  # last: only now does the copy look complete
    return {**written, INTEGRITY_ATTR: record, "complete": True}
