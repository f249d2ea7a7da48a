"""One digest over what a table store's numbers mean (its metadata) and its chunk checksums.

The chunk checksums (``attrs["checksums"]``) protect the numbers; they do not protect what the
numbers *mean*. A store whose ``likelihood`` attribute was edited from ``probit`` to
``step_noise(eps=0.2)``, whose grid or coordinates were changed, or whose array metadata now
says another byte order, would still pass them and answer -- wrongly. So a store also records,
in ``attrs["integrity"]`` (written by ``qptables`` when it publishes a build, just before
``complete = True``)::

    {"version": 1, "algorithm": "sha256", "digest": D, "fields": {FIELD: sha256, ...}}

with one sha256 per metadata *field*, each over canonical JSON (sorted keys, no whitespace) or
raw bytes:

* ``attribute:<name>`` -- every root attribute except :data:`UNSIGNED_ATTRS` (the likelihood
  and, in ``build.likelihood_params``, its parameters; the schema version; the grid -- which
  holds the labels ``y`` --; ``tile_mu``; the chunk ``checksums``; the build record and layout;
  package version and creation time);
* ``array:<name>`` -- each array's own ``zarr.json`` (shape, data type, chunking, codecs, fill
  value, dimension names) for ``sigma_qp``, ``sigma_ratio``, ``y``, ``mu``, ``log10_sigma``;
* ``coordinate:<name>`` -- the bytes of every chunk file of the coordinate arrays.

and ``D`` = sha256 of the canonical JSON of ``fields``: one digest covering meaning and chunk
checksums together. The per-field hashes only serve to *name* what changed.

Not covered (:data:`UNSIGNED_ATTRS`): ``verification`` (``qptables verify`` rewrites its report),
``complete`` (written last) and the record itself; and zarr's consolidated-metadata copy in the
root ``zarr.json``, which qpinfer never reads.

Stores written before this record existed have no ``integrity`` attribute
(:func:`metadata_changes` returns ``None`` for them). The reader refuses them, as it refuses a
v2 store without its record: without it nothing ties the likelihood to the numbers,
so a store whose likelihood was edited would be served as the new likelihood. Rebuild such a
store (``qptables build``) or re-download it to get the digest; every build writes it, and the
tables shipped inside qpinfer are v2 stores that all carry theirs. ``qptables verify`` and
``qptables info`` still read unsigned stores (and say so). The digest guards against accidents and
careless edits, not against an adversary, who can recompute sha256 as easily as we can.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from qpinfer.tables.schema import DATA_VARS, DIMS

__all__ = [
    "INTEGRITY_ATTR",
    "INTEGRITY_VERSION",
    "UNSIGNED_ATTRS",
    "integrity_record",
    "metadata_changes",
    "metadata_fields",
]

#: Root attribute holding the record.
INTEGRITY_ATTR = "integrity"
#: Version of the record's format.
INTEGRITY_VERSION = 1
#: Root attributes outside the digest (see the module docstring).
UNSIGNED_ATTRS = ("verification", "complete", INTEGRITY_ATTR)
#: Arrays whose ``zarr.json`` is covered; the coordinate arrays' chunk bytes are covered too.
ARRAYS = (*DATA_VARS, *DIMS)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_field(path: Path, parse_json: bool) -> str:
    """sha256 of a file's canonical JSON (or bytes); a marker string if it cannot be read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if not parse_json:
        return _sha(raw)
    try:
        return _sha(_canonical(json.loads(raw)))
    except ValueError:
        return "not valid JSON"


def metadata_fields(root: str | os.PathLike, attrs: dict[str, Any]) -> dict[str, str]:
    """The per-field hashes of the store at ``root`` whose root attributes are ``attrs``."""
    root = Path(root)
    fields = {
        f"attribute:{name}": _sha(_canonical(value))
        for name, value in attrs.items()
        if name not in UNSIGNED_ATTRS
    }
    for name in ARRAYS:
        fields[f"array:{name}"] = _file_field(root / name / "zarr.json", parse_json=True)
    for name in DIMS:
        base = root / name
        chunks = (
            sorted(p for p in base.rglob("*") if p.name != "zarr.json" and not p.is_dir())
            if base.is_dir()
            else []
        )
        h = hashlib.sha256()
        for p in chunks:
            h.update(str(p.relative_to(base)).encode() + b"\0")
            h.update(_file_field(p, parse_json=False).encode())
        fields[f"coordinate:{name}"] = h.hexdigest() if chunks else "missing"
    return fields


def integrity_record(root: str | os.PathLike, attrs: dict[str, Any]) -> dict[str, Any]:
    """The ``attrs["integrity"]`` record for the store at ``root`` with root attributes
    ``attrs`` (as read back from its ``zarr.json``)."""
    fields = metadata_fields(root, attrs)
    return {
        "version": INTEGRITY_VERSION,
        "algorithm": "sha256",
        "digest": _sha(_canonical(fields)),
        "fields": fields,
    }


def _describe(field: str, how: str) -> str:
    kind, _, name = field.partition(":")
    noun = {"attribute": "attribute", "array": "metadata of array", "coordinate": "coordinate"}
    return f"{noun.get(kind, kind)} {name!r} {how}"


def metadata_changes(root: str | os.PathLike, attrs: dict[str, Any]) -> list[str] | None:
    """What changed in the store's metadata since its integrity record was written.

    Returns ``None`` if the store has no record (written before records existed: the reader
    refuses it, ``qptables verify`` checks it as before), ``[]`` if everything matches, else one
    description per change, e.g. ``"attribute 'likelihood' changed"``.
    """
    record = attrs.get(INTEGRITY_ATTR)
    if record is None:
        return None
    fields = record.get("fields") if isinstance(record, dict) else None
    if (
        not isinstance(fields, dict)
        or record.get("version") != INTEGRITY_VERSION
        or record.get("algorithm") != "sha256"
        or not all(isinstance(v, str) for v in fields.values())
    ):
        return [f"the {INTEGRITY_ATTR!r} record is malformed or of an unknown version"]
    if _sha(_canonical(fields)) != record.get("digest"):
        return [f"the {INTEGRITY_ATTR!r} record itself was altered (its digest does not match)"]
    now = metadata_fields(root, attrs)
    changes = [_describe(f, "changed") for f in fields if f in now and now[f] != fields[f]]
    changes += [_describe(f, "is missing") for f in fields if f not in now]
    changes += [_describe(f, "was added") for f in now if f not in fields]
    return changes
