"""Pack a finished v2 (reduced-coordinate) store for distribution (``qptables publish`` of a v2
store; the paper-grid stores': :mod:`qptables.pipeline.publish`).

The archive and the manifest are those of the paper-grid stores -- a reproducible
``DIR/<name>.tar.gz`` (:func:`qptables.pipeline.publish.pack_store`) and an entry in
``DIR/manifest.json`` (:func:`qptables.pipeline.publish.update_manifest`) that
``qpinfer download NAME --url URL`` reads -- and only a store the reader accepts is published
(:func:`qpinfer.tables.reduced.open_reduced`: integrity record, ``complete``, a passed
verification). What differs is the entry: a v2 store records no creation time (the archive's
mtimes are 0) and no per-chunk checksums; it names its boxes with their shapes instead of one
grid shape, and ``integrity_sha256`` (the store's integrity digest) identifies its content.
"""

from __future__ import annotations

import datetime as _dt
import os
import uuid
from pathlib import Path
from typing import Any

from qpinfer.tables import TableError, sha256_file
from qpinfer.tables.reduced import open_reduced
from qpinfer.tables.remote.install import MANIFEST_NAME, validate_name
from qptables.pipeline.publish import PublishError, pack_store, update_manifest

__all__ = ["publish_v2"]


def publish_v2(
    store: str | os.PathLike,
    to: str | os.PathLike,
    *,
    name: str | None = None,
    manifest: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Pack the finished v2 ``store`` into ``to/<name>.tar.gz`` and record it in the manifest.

    Parameters
    ----------
    store:
        A v2 store that :func:`~qpinfer.tables.reduced.open_reduced` accepts.
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
        The reader refuses the store (incomplete, unverified, its integrity record broken) or
        ``name`` is invalid; nothing is written then.
    """
    store = Path(store)
    if name is None:
        name = store.name.removesuffix(".zarr")
    try:
        validate_name(name)
    except ValueError as exc:
        raise PublishError(f"--name: {exc}".replace("NAME: ", "")) from None
    try:
        table = open_reduced(store)
    except TableError as exc:
        raise PublishError(
            f"STORE: {store} is not a finished, verified v2 table store, not published ({exc})"
        ) from None
    attrs = table.attrs
    ver = attrs["verification"]
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
        pack_store(store, tmp, name, 0)  # v2 stores record no time: reproducible as they are
        os.replace(tmp, archive)
    finally:
        tmp.unlink(missing_ok=True)
    store_bytes = sum((Path(d) / f).stat().st_size for d, _, files in os.walk(store) for f in files)
    boxes = {
        b["name"]: [len(b["labels"]), *(a["n_cells"] * a["nodes_per_cell"] for a in b["axes"])]
        for b in attrs["boxes"]
    }
    entry = {
        "name": name,
        "file": file,
        "size": archive.stat().st_size,
        "sha256": sha256_file(archive),
        "likelihood": attrs["likelihood"],
        "grid": attrs["grid"],
        "boxes": boxes,
        "store_bytes": store_bytes,
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
        "schema_version": attrs["qp_schema_version"],
        "published": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    update_manifest(manifest, entry)
    return entry
