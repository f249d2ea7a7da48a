"""Unpacking a downloaded table archive (:mod:`qpinfer.tables.remote.install`): only what the store
says it holds, and no more bytes than the manifest says it has.

A table archive is ``<name>.zarr/`` in a gzip-compressed tar. :func:`unpack_store` reads it in two
passes:

1. *Scan* (nothing is written): every member's header is checked as it is read -- a plain file
   or directory under ``<name>.zarr/``, no ``..``, no absolute path, no name twice -- and the
   running total of file sizes is compared with the manifest's ``store_bytes`` (the store's size
   on disk when it was published): the scan stops at the first member that takes the total past
   it, before that member's data is even decompressed. The store's metadata files
   (``zarr.json``, at most :data:`META_MAX_BYTES` each) are read into memory.
2. *Check, then extract*: the store's own record says which files it has -- for a v1 (grid)
   store its metadata (root and array ``zarr.json``), one chunk per key of
   ``attrs["checksums"]`` (each exactly the size its array's chunk shape gives, uncompressed
   float64) and the coordinate chunks its coordinate arrays' metadata give; for a v2 store the
   files of ``attrs["integrity"]`` -- and every member must be one of them (or a directory on
   the way to one), of that size where the size is known. Only then are the members extracted
   (``tarfile``'s ``data`` filter), each writing exactly the bytes its checked header says.

Anything else -- a stray chunk such as ``sigma_qp/c/9``, an extra directory, a chunk larger
than its array's chunk shape -- is refused with a
:class:`~qpinfer.tables.remote.transfer.DownloadError` naming the member; nothing is left in the
staging directory (the caller removes it).
"""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from qpinfer.tables.remote.transfer import DownloadError
from qpinfer.tables.schema import DATA_VARS, DIMS
from qpinfer.tables.store import TableError, bytes_only, check_array_meta, chunk_key

__all__ = ["META_MAX_BYTES", "expected_files", "unpack_store"]

#: Largest metadata file (``zarr.json``) read from an archive (bytes).
META_MAX_BYTES = 16 << 20
_ITEMSIZE = {"float64": 8, "int64": 8, "float32": 4, "int32": 4}


def _relative(m: tarfile.TarInfo, top: str, archive: str) -> str:
    """The member's path inside the store (``""`` for ``<top>`` itself), after the safety checks."""
    name = m.name
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if (
        name.startswith(("/", "\\"))
        or ".." in parts
        or not parts
        or parts[0] != top
        or not (m.isfile() or m.isdir())
    ):
        raise DownloadError(
            f"archive member {name!r} of {archive} is not a plain file or directory under "
            f"{top}/; refusing to unpack"
        )
    return "/".join(parts[1:])


def _scan(
    tar: tarfile.TarFile, top: str, store_bytes: int | None, archive: str
) -> tuple[list[tuple[tarfile.TarInfo, str]], dict[str, bytes]]:
    """Pass 1: the members (checked header by header) and the metadata files' contents."""
    members: list[tuple[tarfile.TarInfo, str]] = []
    metas: dict[str, bytes] = {}
    seen: set[str] = set()
    total = 0
    for m in tar:
        rel = _relative(m, top, archive)
        if rel in seen:
            raise DownloadError(
                f"archive member {m.name!r} of {archive} appears twice; refusing to unpack"
            )
        seen.add(rel)
        if m.isfile():
            total += m.size
            if store_bytes is not None and total > store_bytes:
                raise DownloadError(
                    f"archive member {m.name!r} of {archive} ({m.size} bytes) takes the unpacked "
                    f"size to {total} bytes, more than the manifest's store_bytes "
                    f"({store_bytes}); refusing to unpack"
                )
            if PurePosixPath(rel).name == "zarr.json":
                if m.size > META_MAX_BYTES:
                    raise DownloadError(
                        f"archive member {m.name!r} of {archive} is a metadata file of {m.size} "
                        f"bytes (at most {META_MAX_BYTES} are read); refusing to unpack"
                    )
                f = tar.extractfile(m)
                metas[rel] = f.read() if f is not None else b""
        members.append((m, rel))
    return members, metas


def _json(metas: dict[str, bytes], rel: str) -> dict[str, Any] | None:
    try:
        value = json.loads(metas[rel])
    except (KeyError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _chunk_shape(meta: dict[str, Any]) -> tuple[int, ...]:
    grid = meta.get("chunk_grid") or {}
    return tuple(int(c) for c in (grid.get("configuration") or {}).get("chunk_shape", ()))


def _data_chunk_bytes(meta: dict[str, Any] | None) -> int | None:
    """Size of one uncompressed chunk of an array, if its metadata says it is uncompressed."""
    try:
        if meta is None or not bytes_only(meta):
            return None
        return math.prod(_chunk_shape(meta)) * _ITEMSIZE[meta.get("data_type")]
    except (KeyError, TypeError, ValueError):
        return None


def _coordinate_chunks(name: str, meta: dict[str, Any] | None) -> dict[str, int | None]:
    """``{key: size}`` of a coordinate array's chunk files, from its metadata."""
    if meta is None:
        return {}
    try:
        enc, sep = check_array_meta(meta, name, "the archive")
        (n,), (c,) = tuple(meta.get("shape", ())), _chunk_shape(meta)
        count = -(-int(n) // int(c)) if c > 0 else 0
    except (TableError, TypeError, ValueError):
        return {}
    size = _data_chunk_bytes(meta)
    return {chunk_key(name, sep, (k,), enc): size for k in range(count)}


def expected_files(metas: dict[str, bytes]) -> dict[str, int | None]:
    """``{path in the store: size in bytes, or None if not known}`` of every file the store's
    metadata (``metas``: ``{path: bytes}`` of its ``zarr.json`` files) says it holds."""
    root = _json(metas, "zarr.json")
    attrs = (root or {}).get("attributes")
    if not isinstance(attrs, dict):
        raise DownloadError("the archive has no table-store metadata (zarr.json with attributes)")
    expected: dict[str, int | None] = {"zarr.json": None}
    if attrs.get("qp_schema_version") == 2:  # v2: the integrity record lists every file
        record = attrs.get("integrity")
        files = record.get("files") if isinstance(record, dict) else None
        if not isinstance(files, dict):
            raise DownloadError("the archive's v2 store has no integrity record listing its files")
        expected.update({str(rel): None for rel in files})
        return expected
    checksums = attrs.get("checksums")
    if not isinstance(checksums, dict):
        raise DownloadError("the archive's store records no chunk checksums (attrs['checksums'])")
    chunk_bytes = {}
    for var in (*DATA_VARS, *DIMS):
        expected[f"{var}/zarr.json"] = None
    for var in DATA_VARS:
        chunk_bytes[var] = _data_chunk_bytes(_json(metas, f"{var}/zarr.json"))
    for key in checksums:
        var = str(key).split("/", 1)[0]
        if var in DATA_VARS:
            expected[str(key)] = chunk_bytes[var]
    for name in DIMS:
        expected.update(_coordinate_chunks(name, _json(metas, f"{name}/zarr.json")))
    return expected


def unpack_store(archive: Path, staging: Path, top: str, store_bytes: int | None) -> Path:
    """Unpack the store ``top`` (``<name>.zarr``) of ``archive`` into ``staging``; returns
    ``staging / top``. See the module docstring for what is refused (a
    :class:`~qpinfer.tables.remote.transfer.DownloadError` naming the member)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members, metas = _scan(tar, top, store_bytes, archive.name)
            expected = expected_files(metas)
            dirs = {""} | {
                "/".join(PurePosixPath(rel).parts[:i])
                for rel in expected
                for i in range(1, len(PurePosixPath(rel).parts))
            }
            for m, rel in members:
                if m.isdir():
                    known = rel in dirs
                else:
                    known = rel in expected
                if not known:
                    raise DownloadError(
                        f"archive member {m.name!r} of {archive.name} is not part of the table "
                        "store (not its metadata nor a file its checksums or integrity record "
                        "list); refusing to unpack"
                    )
                want = expected.get(rel)
                if m.isfile() and want is not None and m.size != want:
                    raise DownloadError(
                        f"archive member {m.name!r} of {archive.name} has {m.size} bytes, its "
                        f"array's metadata says {want}; refusing to unpack"
                    )
            infos = [m for m, _ in members]
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=infos, filter="data")
            else:  # pragma: no cover - Python < 3.11.4; members were checked above
                tar.extractall(staging, members=infos)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DownloadError(f"cannot unpack {archive.name}: {exc}") from None
    return staging / top
