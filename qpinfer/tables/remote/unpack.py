"""Unpacking a downloaded table archive (:mod:`qpinfer.tables.remote.install`): only what the store
says it holds, each file no larger than the store says, and no more bytes than the manifest says
it has -- deciding from the members' names and header sizes, before reading or writing their data.

A table archive is ``<name>.zarr/`` in a gzip-compressed tar. :func:`unpack_store` reads it in
three passes:

1. *Headers* (no member's data is read): every member's header is checked as it is read -- a
   plain file or directory under ``<name>.zarr/``, no ``..``, no absolute path, no name twice --
   and the running total of file sizes is compared with the manifest's ``store_bytes`` (the
   store's size on disk when it was published; without it, ``max_bytes``, by default
   :data:`MAX_BYTES`): the pass stops at the first member that takes the total past it.
2. *Metadata*: the root ``zarr.json`` is read, then only the metadata files it names -- for a
   v1 (grid) store its arrays' ``zarr.json``, for a v2 store the ``zarr.json`` files of
   ``attrs["integrity"]``. Each is read only if its header size fits what is left of one budget
   of :data:`META_MAX_BYTES` for all of them, and the read itself stops there: stray metadata
   members are never read.
3. *Check, then extract*: the store's own record says which files it has -- for a v1 store its
   metadata, one chunk per key of ``attrs["checksums"]`` and the coordinate chunks its
   coordinate arrays' metadata give; for a v2 store the files of ``attrs["integrity"]`` -- and
   every member must be one of them (or a directory on the way to one), of exactly the size its
   array's metadata gives for a chunk (uncompressed float64, the chunk shape), at most
   :data:`META_MAX_BYTES` for a metadata file, at most :data:`UNSIZED_MAX_BYTES` for any other
   file. Only then are the members extracted (``tarfile``'s ``data`` filter), each writing
   exactly the bytes its checked header says.

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

__all__ = ["MAX_BYTES", "META_MAX_BYTES", "UNSIZED_MAX_BYTES", "expected_files", "unpack_store"]

#: Most bytes of metadata (``zarr.json`` files, all of them together) read from an archive.
META_MAX_BYTES = 16 << 20
#: Largest file of a store whose size its metadata does not give (neither a metadata file nor
#: an uncompressed chunk): such files are coordinate chunks of a few KiB.
UNSIZED_MAX_BYTES = 16 << 20
#: Largest archive and largest unpacked store a download accepts unless told otherwise
#: (``max_bytes``; the paper's grid is a 912 MiB archive).
MAX_BYTES = 64 << 30
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
        or m.sparse is not None
    ):
        raise DownloadError(
            f"archive member {name!r} of {archive} is not a plain file or directory under "
            f"{top}/; refusing to unpack"
        )
    return "/".join(parts[1:])


def _headers(
    reader: _MetaReader, top: str, store_bytes: int | None, max_bytes: int
) -> dict[str, tarfile.TarInfo]:
    """Pass 1: ``{path in the store: member}`` (also ``reader.members``), checked header by
    header; of the data, only the root ``zarr.json`` is read (by ``reader``)."""
    tar, archive, members = reader.tar, reader.archive, reader.members
    limit = store_bytes if store_bytes is not None else max_bytes
    total = 0
    for m in tar:
        rel = _relative(m, top, archive)
        if rel in members:
            raise DownloadError(
                f"archive member {m.name!r} of {archive} appears twice; refusing to unpack"
            )
        members[rel] = m
        if m.isfile():
            total += m.size
            if total > limit:
                bound = (
                    f"the manifest's store_bytes ({store_bytes})"
                    if store_bytes is not None
                    else f"max_bytes ({max_bytes}; the manifest lists no store_bytes)"
                )
                raise DownloadError(
                    f"archive member {m.name!r} of {archive} ({m.size} bytes) takes the unpacked "
                    f"size to {total} bytes, more than {bound}; refusing to unpack"
                )
            if rel == "zarr.json":
                reader.read([rel])
    return members


class _MetaReader:
    """Reads metadata files of the archive, all of them within one budget of
    :data:`META_MAX_BYTES`: a header too large for what is left is refused before reading, and
    each read stops one byte past it."""

    def __init__(self, tar: tarfile.TarFile, archive: str):
        self.tar, self.archive = tar, archive
        self.members: dict[str, tarfile.TarInfo] = {}
        self.left = META_MAX_BYTES
        self.metas: dict[str, bytes] = {}

    def read(self, rels: list[str]) -> None:
        """Read the files ``rels`` that the archive has, in archive order."""
        found = [(self.members[r], r) for r in set(rels) - set(self.metas) if r in self.members]
        for m, rel in sorted(found, key=lambda mr: mr[0].offset):
            if not m.isfile():
                continue
            if m.size > self.left:
                raise DownloadError(
                    f"archive member {m.name!r} of {self.archive} is a metadata file of {m.size} "
                    f"bytes, more than the {self.left} left of the {META_MAX_BYTES} bytes of "
                    "metadata read from an archive; refusing to unpack"
                )
            f = self.tar.extractfile(m)
            # at most the checked header size (a read of n preallocates n bytes)
            data = f.read(m.size + 1) if f is not None else b""
            if len(data) > m.size:  # pragma: no cover - tarfile reads at most m.size
                raise DownloadError(f"archive member {m.name!r} of {self.archive} is too large")
            self.left -= len(data)
            self.metas[rel] = data


def _may_belong(rel: str, metas: dict[str, bytes]) -> bool:
    """Whether a file ``rel`` may be one the store holds, from the root ``zarr.json`` alone."""
    attrs = (_json(metas, "zarr.json") or {}).get("attributes")
    if rel == "zarr.json" or not isinstance(attrs, dict):
        return True  # no root metadata: expected_files says so, naming it
    if attrs.get("qp_schema_version") == 2:
        record = attrs.get("integrity")
        files = record.get("files") if isinstance(record, dict) else None
        return not isinstance(files, dict) or rel in files
    checksums = attrs.get("checksums")
    return (
        not isinstance(checksums, dict)
        or rel in checksums
        or rel in _metadata_names(metas)
        or rel.split("/", 1)[0] in DIMS  # coordinate chunks: their metadata says which
    )


def _stray(m: tarfile.TarInfo, archive: str) -> DownloadError:
    return DownloadError(
        f"archive member {m.name!r} of {archive} is not part of the table store (not its "
        "metadata nor a file its checksums or integrity record list); refusing to unpack"
    )


def _metadata_names(metas: dict[str, bytes]) -> list[str]:
    """The metadata files (other than the root's) the root ``zarr.json`` in ``metas`` names."""
    attrs = (_json(metas, "zarr.json") or {}).get("attributes")
    if not isinstance(attrs, dict):
        return []
    if attrs.get("qp_schema_version") == 2:
        record = attrs.get("integrity")
        files = record.get("files") if isinstance(record, dict) else None
        if not isinstance(files, dict):
            return []
        return [str(rel) for rel in files if PurePosixPath(str(rel)).name == "zarr.json"]
    return [f"{var}/zarr.json" for var in (*DATA_VARS, *DIMS)]


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
        for rel in map(str, files):
            array = rel.split("/", 1)[0]
            chunk = rel != f"{array}/zarr.json" and "/" in rel
            expected[rel] = _data_chunk_bytes(_json(metas, f"{array}/zarr.json")) if chunk else None
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


def unpack_store(
    archive: Path, staging: Path, top: str, store_bytes: int | None, max_bytes: int = MAX_BYTES
) -> Path:
    """Unpack the store ``top`` (``<name>.zarr``) of ``archive`` into ``staging``; returns
    ``staging / top``. ``store_bytes``: the manifest's unpacked size (``None``: not listed;
    ``max_bytes`` bounds the store then). See the module docstring for what is refused (a
    :class:`~qpinfer.tables.remote.transfer.DownloadError` naming the member)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            reader = _MetaReader(tar, archive.name)
            members = _headers(reader, top, store_bytes, max_bytes)
            for rel, m in members.items():  # by name, before any other member is read
                if m.isfile() and not _may_belong(rel, reader.metas):
                    raise _stray(m, archive.name)
            reader.read(_metadata_names(reader.metas))
            expected = expected_files(reader.metas)
            dirs = {""} | {
                "/".join(PurePosixPath(rel).parts[:i])
                for rel in expected
                for i in range(1, len(PurePosixPath(rel).parts))
            }
            for rel, m in members.items():
                if not (rel in dirs if m.isdir() else rel in expected):
                    raise _stray(m, archive.name)
                _check_size(m, rel, expected.get(rel), archive.name)
            infos = list(members.values())
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=infos, filter="data")
            else:  # pragma: no cover - Python < 3.11.4; members were checked above
                tar.extractall(staging, members=infos)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DownloadError(f"cannot unpack {archive.name}: {exc}") from None
    return staging / top


def _check_size(m: tarfile.TarInfo, rel: str, want: int | None, archive: str) -> None:
    """A listed file's header size: exactly ``want`` if known, else within its kind's cap."""
    if not m.isfile():
        return
    if want is not None and m.size != want:
        raise DownloadError(
            f"archive member {m.name!r} of {archive} has {m.size} bytes, its array's metadata "
            f"says {want}; refusing to unpack"
        )
    meta = PurePosixPath(rel).name == "zarr.json"
    cap = META_MAX_BYTES if meta else UNSIZED_MAX_BYTES
    if want is None and m.size > cap:
        what = "a metadata file" if meta else "a file whose size the store's metadata does not give"
        raise DownloadError(
            f"archive member {m.name!r} of {archive} is {what}, of {m.size} bytes; at most "
            f"{cap} are accepted; refusing to unpack"
        )
