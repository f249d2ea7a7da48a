"""Pack a finished, verified table store of either layout for distribution (``qptables publish``).

``publish(STORE, DIR)`` writes ``DIR/<name>.tar.gz`` -- the store directory as ``<name>.zarr/``
in a gzip-compressed tar -- and adds or replaces the entry ``name`` in the manifest
(``DIR/manifest.json`` unless another path is given). ``DIR`` is then what a table host serves:
``qpinfer download NAME --url URL-OF-DIR`` (:mod:`qpinfer.tables.remote.install`) reads the
manifest, fetches the archive, checks its size and sha256, unpacks it and validates every chunk.

Only a store the reader accepts is published. A grid store (the App. J layout):
:func:`qpinfer.open_table` with ``verify_checksums=True`` (schema, ``complete``, a passed
verification report, coordinates, chunk sizes, every chunk's sha256), plus at least one
mpmath-checked point in the report. A cells store: :func:`qpinfer.tables.reduced.open_reduced`
(integrity record, ``complete``, a passed verification).

The archive is reproducible: members sorted, owner ``0:0``, modes ``0644``/``0755``, every
mtime the store's ``created`` time (a cells store records no time: 0), gzip header without name
or time -- so publishing the same store twice gives the same sha256. Tar + gzip (stdlib on both
sides) rather than a zarr zip store because the reader memory-maps chunk files, so the table is
installed unpacked anyway.

Manifest (format :data:`qpinfer.tables.remote.transfer.MANIFEST_FORMAT`)::

    {"format": 1, "tables": {NAME: {
        "name", "file", "size", "sha256",            # the archive
        "likelihood", "grid", "shape", "store_bytes", "content_sha256",
        "verification": {"passed", "points", "max_rel_error", "median_rel_error",
                         "tolerance", "reference", "checked"},
        "package_version", "schema_version", "created", "published"}}}

``content_sha256`` is :func:`qpinfer.tables.remote.install.checksums_digest` of the store's chunk
checksums: a download is skipped when the installed table already has it. A cells store's entry
names its boxes with their shapes (``boxes``) instead of one ``shape``, identifies its content by
``integrity_sha256`` (its integrity digest) instead of ``content_sha256``, records no
``created`` time, and its ``verification`` adds the points checked against the exact kernel.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import json
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qpinfer.tables import TableError, open_table, sha256_file
from qpinfer.tables.reduced import open_reduced
from qpinfer.tables.remote.deadline import Deadline
from qpinfer.tables.remote.install import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    checksums_digest,
    validate_name,
)
from qptables.pipeline.layouts import store_layout
from qptables.store import StoreError, read_attrs

__all__ = [
    "PublishError",
    "check_destination",
    "pack_store",
    "publish",
    "read_manifest",
    "update_manifest",
]

#: gzip level of the archives (float64 tables compress ~10-25%; higher levels gain little).
COMPRESSLEVEL = 6
#: Longest wait (seconds) for another publisher holding the manifest's lock file.
MANIFEST_LOCK_SECONDS = 600.0


class PublishError(ValueError):
    """The store cannot be published (incomplete, unverified, corrupt) or the name is invalid."""


def _created_epoch(attrs: dict[str, Any]) -> int:
    try:
        return int(_dt.datetime.fromisoformat(str(attrs.get("created"))).timestamp())
    except ValueError:
        return 0


def pack_store(store: Path, archive: Path, name: str, mtime: int) -> None:
    """Write ``store`` as ``<name>.zarr/`` into the reproducible tar.gz ``archive``."""
    entries: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(store):
        dirnames.sort()
        rel = Path(dirpath).relative_to(store)
        entries.append((str(Path(f"{name}.zarr") / rel), Path(dirpath)))
        for f in sorted(filenames):
            entries.append((str(Path(f"{name}.zarr") / rel / f), Path(dirpath) / f))
    entries.sort(key=lambda e: e[0])
    with (
        open(archive, "wb") as raw,
        gzip.GzipFile(
            filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=COMPRESSLEVEL
        ) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for arcname, path in entries:
            info = tar.gettarinfo(str(path), arcname=arcname)
            if not (info.isfile() or info.isdir()):
                raise PublishError(f"{path}: only regular files and directories can be published")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            info.mode = 0o755 if info.isdir() else 0o644
            info.pax_headers = {}
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    with open(archive, "rb+") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def manifest_lock(path: Path, seconds: float) -> Iterator[None]:
    """Hold the lock file ``path`` (POSIX ``flock``; no lock elsewhere) for one manifest update,
    waiting at most ``seconds`` for another publisher, and delete it when done.

    Deleting a lock file others may be waiting on is safe here because the holder deletes it
    *while still holding it*, and a publisher that gets the lock checks that ``path`` still names
    the file it locked (same device and inode); if not -- the file was deleted, or replaced by a
    newer publisher's -- it starts again on the file now at ``path``. So at most one publisher
    holds the lock on the file at ``path`` at any time, and none is left behind."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    deadline = Deadline(seconds)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline.expired():
                        raise PublishError(
                            f"--manifest: timed out after {deadline.elapsed():.0f} s waiting "
                            f"for another publisher holding {path}"
                        ) from None
                    deadline.sleep(0.05)
            held = os.fstat(fd)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                continue  # deleted by the publisher before us: lock the next file
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                continue  # replaced: lock the file at path now
            try:
                yield
            finally:
                path.unlink(missing_ok=True)  # still held: waiters on this file start again
            return
        finally:
            os.close(fd)  # releases the flock


def update_manifest(manifest: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Add or replace ``entry`` (by ``entry["name"]``) in ``manifest`` (created if missing),
    atomically (temporary file + rename, under the lock file ``manifest.json.lock`` of
    :func:`manifest_lock`, waited for at most :data:`MANIFEST_LOCK_SECONDS` and deleted
    afterwards)."""
    manifest.parent.mkdir(parents=True, exist_ok=True)
    with manifest_lock(manifest.with_name(manifest.name + ".lock"), MANIFEST_LOCK_SECONDS):
        data = read_manifest(manifest)
        data.setdefault(
            "description",
            "sigma* lookup tables for Quantile Propagation, written by `qptables publish`; "
            "download with `qpinfer download NAME --url URL-OF-THIS-DIRECTORY`",
        )
        data["tables"][entry["name"]] = entry
        data["tables"] = dict(sorted(data["tables"].items()))
        tmp = manifest.with_name(f".{manifest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        try:
            tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
            os.replace(tmp, manifest)
        finally:
            tmp.unlink(missing_ok=True)
    return data


def read_manifest(manifest: Path) -> dict[str, Any]:
    """The table manifest at ``manifest`` (an empty one if there is no file);
    :class:`PublishError` naming ``--manifest`` if it is a directory or not a table manifest."""
    if manifest.is_dir():
        raise PublishError(f"--manifest: {manifest} is a directory; expected a manifest file")
    if not manifest.exists():
        return {"format": MANIFEST_FORMAT, "tables": {}}
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        raise PublishError(f"--manifest: {manifest} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
        raise PublishError(f"--manifest: {manifest} is not a table manifest")
    if data.get("format") != MANIFEST_FORMAT:
        raise PublishError(
            f"--manifest: {manifest} has format {data.get('format')!r}, expected {MANIFEST_FORMAT}"
        )
    return data


def check_destination(to: Path, manifest: Path) -> None:
    """Before anything is packed: ``to`` is a directory (or can be made one where a writable
    directory is) and ``manifest`` a table manifest or absent, in a directory that is or can be
    made; :class:`PublishError` naming ``--to`` or ``--manifest``."""
    for flag, folder in (("--to", to), ("--manifest", manifest.parent)):
        existing = folder
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            but = "" if existing == folder else f", so {folder} cannot be one"
            raise PublishError(f"{flag}: {existing} is not a directory{but}")
        if not os.access(existing, os.W_OK):
            raise PublishError(f"{flag}: {existing} is not writable")
    read_manifest(manifest)


def checked_name(store: Path, name: str | None) -> str:
    """The table name to publish ``store`` under: ``name``, by default the store's folder name
    without ``.zarr``; :class:`PublishError` naming ``--name`` if it is not a valid one."""
    if name is None:
        name = store.name.removesuffix(".zarr")
    try:
        validate_name(name)
    except ValueError as exc:
        raise PublishError(f"--name: {exc}".replace("NAME: ", "")) from None
    return name


def pack_into(
    store: Path, to: str | os.PathLike, name: str, manifest: str | os.PathLike | None, epoch: int
) -> tuple[dict[str, Any], int, Path]:
    """Write ``to/<name>.tar.gz`` (:func:`pack_store`, mtimes ``epoch``) atomically, creating
    ``to``; return the manifest entry's archive fields (``name``, ``file``, ``size``,
    ``sha256``), the store's size in bytes and the manifest's path (default
    ``to/manifest.json``)."""
    to = Path(to)
    try:
        to.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PublishError(f"--to: cannot create {to} ({exc.strerror})") from None
    manifest = Path(manifest) if manifest is not None else to / MANIFEST_NAME
    file = f"{name}.tar.gz"
    archive = to / file
    tmp = to / f".{file}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        pack_store(store, tmp, name, epoch)
        os.replace(tmp, archive)
    finally:
        tmp.unlink(missing_ok=True)
    store_bytes = sum((Path(d) / f).stat().st_size for d, _, files in os.walk(store) for f in files)
    packed = {"name": name, "file": file, "size": archive.stat().st_size}
    return {**packed, "sha256": sha256_file(archive)}, store_bytes, manifest


def publish(
    store: str | os.PathLike,
    to: str | os.PathLike,
    *,
    name: str | None = None,
    manifest: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Pack the verified ``store`` (either layout) into ``to/<name>.tar.gz`` and record it in the
    manifest.

    Parameters
    ----------
    store:
        A finished, verified table store the reader accepts.
    to:
        Directory of the table host (created if missing).
    name:
        Table name (default: the store directory's name without ``.zarr``).
    manifest:
        Manifest to update (default ``to/manifest.json``).

    Returns
    -------
    dict
        The manifest entry.

    Raises
    ------
    PublishError
        The reader refuses the store (incomplete, unverified, failing checksums or its integrity
        record) or ``name`` is invalid; nothing is written then.
    """
    store = Path(store)
    name = checked_name(store, name)
    check_destination(
        Path(to), Path(manifest) if manifest is not None else Path(to) / MANIFEST_NAME
    )
    try:
        layout = store_layout(read_attrs(store))
    except StoreError as exc:
        raise PublishError(f"STORE: {exc}") from None
    attrs, epoch, fields = (_cells_fields if layout == "cells" else _grid_fields)(store)
    packed, store_bytes, manifest = pack_into(store, to, name, manifest, epoch)
    entry = {
        **packed,
        "likelihood": attrs["likelihood"],
        "grid": attrs["grid"],
        **fields.pop("shape"),
        "store_bytes": store_bytes,
        **fields,
        "schema_version": attrs["qp_schema_version"],
        **({"created": attrs["created"]} if layout == "grid" else {}),
        "published": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    update_manifest(manifest, entry)
    return entry


def _refused(store: Path, what: str, exc: Exception) -> PublishError:
    return PublishError(
        f"STORE: {store} is not a finished, verified {what}table store, not published ({exc})"
    )


def _grid_fields(store: Path) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """A grid store's attributes, archive mtime and manifest fields, once the reader accepts it
    with every checksum and it has mpmath-checked points."""
    try:
        table = open_table(store, verify_checksums=True)
    except TableError as exc:
        raise _refused(store, "", exc) from None
    attrs = table.attrs
    table.close()
    ver = attrs["verification"]
    if not isinstance(ver.get("points"), int) or ver["points"] < 1:
        raise PublishError(
            f"STORE: {store} has no mpmath-checked points in its verification report; run "
            f"`qptables verify {store}` first"
        )
    keep = ("passed", "points", "max_rel_error", "median_rel_error", "tolerance", "reference")
    fields = {
        "shape": {"shape": [len(attrs["grid"]["y"]), int(table.shape[1]), int(table.shape[2])]},
        "content_sha256": checksums_digest(attrs["checksums"]),
        "verification": {k: ver[k] for k in (*keep, "checked") if k in ver},
        "package_version": attrs["package_version"],
    }
    return attrs, _created_epoch(attrs), fields


def _cells_fields(store: Path) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """A cells store's attributes, archive mtime (0: it records no time) and manifest fields,
    once the reader accepts it."""
    try:
        attrs = open_reduced(store).attrs
    except TableError as exc:
        raise _refused(store, "cells ", exc) from None
    ver = attrs["verification"]
    boxes = {
        b["name"]: [len(b["labels"]), *(a["n_cells"] * a["nodes_per_cell"] for a in b["axes"])]
        for b in attrs["boxes"]
    }
    fields = {
        "shape": {"boxes": boxes},
        "integrity_sha256": attrs["integrity"]["digest"],
        "verification": {
            "passed": ver["passed"],
            "points": ver["mpmath_points"],
            "max_rel_error": max(ver["mpmath_max_rel_err"], ver["kernel_max_rel_err"]),
            "tolerance": ver["tolerance"],
            "reference": "mpmath and the exact kernel",
            "kernel_points": ver["kernel_points"],
        },
        "package_version": (attrs.get("build") or {}).get("package_version"),
    }
    return attrs, 0, fields
