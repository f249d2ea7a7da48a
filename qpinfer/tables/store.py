"""The on-disk side of a table store, shared by the readers (:mod:`qpinfer.tables`,
:mod:`qpinfer.tables.reduced`) and the installer (:mod:`qpinfer.tables.remote.install`): where
installed tables live, :class:`~qpinfer.TableError`, and reading zarr v3 metadata, chunk files and
coordinates without zarr (uncompressed chunks are raw little-endian arrays).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "TableError",
    "bytes_only",
    "check_array_meta",
    "chunk_key",
    "chunk_path",
    "installed_by_name",
    "installed_table_path",
    "read_coordinate",
    "read_json",
    "sha256_file",
    "tables_dir",
]


class TableError(ValueError):
    """A table store is missing, incomplete, of the wrong schema, or corrupt."""


def tables_dir() -> Path:
    """Where installed tables live: ``$QPINFER_TABLES``, else ``$XDG_CACHE_HOME/qpinfer/tables``
    (default ``~/.cache/qpinfer/tables``)."""
    env = os.environ.get("QPINFER_TABLES")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "qpinfer" / "tables"


def installed_table_path(likelihood: Any) -> Path:
    """Path of the installed table for ``likelihood`` (a name or likelihood object):
    ``tables_dir() / "<name>.zarr"``. It may not exist."""
    name = likelihood if isinstance(likelihood, str) else likelihood.name
    return tables_dir() / f"{name}.zarr"


def installed_by_name(path: str | os.PathLike) -> Path | None:
    """``tables_dir()/<name>.zarr`` if ``path`` is a bare table name (no directory part, not an
    existing path) and such a table is installed."""
    if not isinstance(path, str) or not path or os.sep in path or "/" in path:
        return None
    if path.endswith(".zarr") or path in (".", "..") or os.path.lexists(path):
        return None
    candidate = tables_dir() / f"{path}.zarr"
    return candidate if candidate.is_dir() else None


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise TableError(f"{what}: missing {path}") from None
    except (OSError, ValueError) as exc:
        raise TableError(f"{what}: cannot read {path} ({exc})") from None


def sha256_file(path: Path) -> str:
    """sha256 hex digest of the file at ``path`` (read in blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def chunk_path(root: str, var: str, sep: str, indices: tuple[int, ...], encoding: str) -> str:
    """File path of a chunk under zarr v3's ``default`` or ``v2`` chunk key encoding."""
    parts = [str(i) for i in indices]
    if encoding == "default":
        parts = ["c", *parts]
    return (
        os.path.join(root, var, *parts) if sep == "/" else os.path.join(root, var, sep.join(parts))
    )


def chunk_key(var: str, sep: str, indices: tuple[int, ...], encoding: str) -> str:
    """Store key (relative path with '/') of a chunk, as used in ``attrs["checksums"]``."""
    parts = [str(i) for i in indices]
    if encoding == "default":
        parts = ["c", *parts]
    return var + "/" + sep.join(parts)


def check_array_meta(meta: dict, name: str, what: str) -> tuple[str, str]:
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        raise TableError(f"{what}: {name}/zarr.json is not zarr v3 array metadata")
    cke = meta.get("chunk_key_encoding") or {"name": "default"}
    enc = cke.get("name", "default")
    sep = (cke.get("configuration") or {}).get("separator", "/" if enc == "default" else ".")
    if enc not in ("default", "v2") or sep not in ("/", "."):
        raise TableError(f"{what}: {name} uses an unsupported chunk key encoding {cke!r}")
    if meta.get("storage_transformers"):
        raise TableError(f"{what}: {name} uses storage transformers, which the reader cannot map")
    return enc, sep


def bytes_only(meta: dict) -> bool:
    codecs = meta.get("codecs") or []
    if len(codecs) != 1 or codecs[0].get("name") != "bytes":
        return False
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    return endian == "little"


def read_coordinate(root: Path, name: str, what: str) -> np.ndarray:
    meta = read_json(root / name / "zarr.json", what)
    enc, sep = check_array_meta(meta, name, what)
    if list(meta.get("dimension_names") or []) != [name]:
        raise TableError(
            f"{what}: coordinate {name} must have dimension_names [{name!r}], found "
            f"{meta.get('dimension_names')!r}"
        )
    shape = tuple(meta.get("shape", ()))
    chunks = tuple(
        ((meta.get("chunk_grid") or {}).get("configuration") or {}).get("chunk_shape", ())
    )
    dtype = {"int64": "<i8", "float64": "<f8", "int32": "<i4", "float32": "<f4"}.get(
        meta.get("data_type")
    )
    if len(shape) != 1:
        raise TableError(f"{what}: coordinate {name} must be 1-d, found shape {shape}")
    if dtype is not None and chunks == shape and bytes_only(meta):
        f = chunk_path(str(root), name, sep, (0,), enc)
        try:
            data = np.fromfile(f, dtype=dtype)
        except OSError as exc:
            raise TableError(f"{what}: cannot read coordinate {name} ({exc})") from None
        if data.size != shape[0]:
            raise TableError(
                f"{what}: coordinate {name} chunk {f} holds {data.size} values, expected {shape[0]}"
            )
        return data
    # compressed or multi-chunk coordinates: let zarr decode them (slower, still small)
    import zarr

    try:
        return np.asarray(zarr.open_array(str(root / name), mode="r")[...])
    except Exception as exc:  # noqa: BLE001 - any zarr failure means a broken store
        raise TableError(f"{what}: cannot read coordinate {name} ({exc})") from None
