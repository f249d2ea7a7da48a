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
from pathlib import Path
from typing import Any

from qpinfer.tables import TableError
from qpinfer.tables.reduced import open_reduced
from qptables.pipeline.publish import PublishError, checked_name, pack_into, update_manifest

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
    name = checked_name(store, name)
    try:
        table = open_reduced(store)
    except TableError as exc:
        raise PublishError(
            f"STORE: {store} is not a finished, verified v2 table store, not published ({exc})"
        ) from None
    attrs = table.attrs
    ver = attrs["verification"]
    # v2 stores record no time: the archive's mtimes are 0, reproducible as they are
    packed, store_bytes, manifest = pack_into(store, to, name, manifest, 0)
    boxes = {
        b["name"]: [len(b["labels"]), *(a["n_cells"] * a["nodes_per_cell"] for a in b["axes"])]
        for b in attrs["boxes"]
    }
    entry = {
        **packed,
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
