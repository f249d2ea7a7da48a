"""Replace a table store atomically -- and only a table store this package made.

Every place that puts a table where something may already be (``qptables build --force``
publishing ``OUT``, a build discarding an incompatible ``OUT.partial``, ``qpinfer download``
installing ``NAME.zarr``, the default-table link ``<likelihood>.zarr``) goes through
:func:`replace_store`, and every deletion of an old store through :func:`remove_store`.

What may be replaced (:func:`store_kind`): a *table store* -- a real directory (not a symlink)
whose ``zarr.json`` is a zarr v3 group with the attributes ``qp_schema_version`` (an integer),
``likelihood`` (a string) and ``grid`` (a mapping), and which holds nothing but the store's own
entries (``zarr.json``, the arrays of :mod:`qpinfer.tables.schema` and zarr's temporary files). Both
a complete store and an unfinished one (``complete`` false, e.g. ``OUT.partial``) qualify: they are
recognised by their metadata, not by their contents. With ``links=True`` (the table cache, where
the package itself makes ``<likelihood>.zarr`` symlinks) a symlink to such a store, or a dangling
one, may be replaced too -- the link only, never what it points at.

Anything else -- a plain file, a directory that is not a store (including an empty one), a store
directory with foreign files in it, a symlink where links are not allowed, or a symlink to
something that is not a store -- is refused with :class:`ReplaceRefusedError` (a ``ValueError``)
naming the path and what was found, and nothing is touched. Callers check with
:func:`check_replaceable` before any work starts, and :func:`replace_store` checks again.

Atomicity: on Linux the new store and the old one are swapped with one
``renameat2(RENAME_EXCHANGE)`` call, so the destination always holds either the old or the new
store; the old one (now at the new one's former path) is re-checked and deleted. Where that call
is unavailable, the old store is renamed aside, the new one renamed in (the old one is renamed
back if that fails) and the old one deleted -- a window of two renames without a destination.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import uuid
from pathlib import Path

from qpinfer.tables.schema import DATA_VARS, DIMS

__all__ = [
    "ReplaceRefusedError",
    "check_replaceable",
    "remove_store",
    "replace_store",
    "store_kind",
]

#: Top-level entries a table store may hold: its metadata, its arrays, zarr's temporary files.
_STORE_ENTRIES = frozenset(("zarr.json", *DATA_VARS, *DIMS))
_ZARR_TEMP = re.compile(r"^zarr\.[0-9a-f]{32}\.partial$")


class ReplaceRefusedError(ValueError):
    """The path holds something this package did not make; it was left untouched."""


def _store_problem(path: Path) -> str | None:
    """``None`` if the real directory ``path`` is a table store (see the module docstring),
    else what it is instead."""
    meta_path = path / "zarr.json"
    try:
        meta = json.loads(meta_path.read_bytes())
    except FileNotFoundError:
        return "a directory that is not a table store (no zarr.json)"
    except (OSError, ValueError) as exc:
        return f"a directory whose zarr.json is unreadable ({type(exc).__name__}: {exc})"
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    if not (
        isinstance(meta, dict)
        and meta.get("zarr_format") == 3
        and meta.get("node_type") == "group"
        and isinstance(attrs, dict)
        and isinstance(attrs.get("qp_schema_version"), int)
        and isinstance(attrs.get("likelihood"), str)
        and isinstance(attrs.get("grid"), dict)
    ):
        return (
            "a directory that is not a table store (its zarr.json is not a zarr v3 group with "
            "the qp_schema_version, likelihood and grid attributes)"
        )
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        return f"a directory that cannot be listed ({exc.strerror})"
    allowed = _STORE_ENTRIES
    if isinstance(
        attrs.get("arrays"), list
    ):  # a v2 store lists its arrays (qpinfer.tables.reduced)
        allowed = allowed | {a for a in attrs["arrays"] if isinstance(a, str)}
    foreign = [n for n in names if n not in allowed and not _ZARR_TEMP.match(n)]
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        return f"a table store with foreign entries in it ({shown})"
    return None


def store_kind(path: str | os.PathLike) -> str:
    """What is at ``path``: ``"absent"``, ``"complete"`` or ``"unfinished"`` (a table store of
    this package), ``"link"`` (a symlink), ``"file"`` or ``"foreign"`` (anything else)."""
    path = Path(path)
    if path.is_symlink():
        return "link"
    if not path.exists():
        return "absent"
    if not path.is_dir():
        return "file"
    if _store_problem(path) is not None:
        return "foreign"
    try:
        complete = json.loads((path / "zarr.json").read_bytes())["attributes"].get("complete")
    except (OSError, ValueError, KeyError, AttributeError):
        return "foreign"
    return "complete" if complete is True else "unfinished"


def check_replaceable(path: str | os.PathLike, *, what: str = "OUT", links: bool = False) -> str:
    """Return :func:`store_kind` of ``path`` if it may be replaced (absent, a table store, or
    with ``links`` a symlink to one or a dangling symlink); else raise
    :class:`ReplaceRefusedError` naming ``what`` (the argument, e.g. ``"OUT"``) and ``path``."""
    path = Path(path)
    kind = store_kind(path)
    if kind in ("absent", "complete", "unfinished"):
        return kind
    keep = "it was left untouched; move or delete it yourself, or choose another path"
    if kind == "link":
        target = os.readlink(path)
        if not links:
            raise ReplaceRefusedError(
                f"{what}: {path} is a symlink (to {target}); only a table store directory "
                f"made by this package is replaced, never a symlink -- {keep}"
            )
        if not path.exists():
            return kind  # dangling: removing the link loses nothing
        if not path.is_dir():
            raise ReplaceRefusedError(
                f"{what}: {path} is a symlink to {target}, which is not a table store "
                f"directory -- {keep}"
            )
        problem = _store_problem(path.resolve())
        if problem is not None:
            raise ReplaceRefusedError(
                f"{what}: {path} is a symlink to {target}, {problem} -- {keep}"
            )
        return kind
    found = "a plain file" if kind == "file" else _store_problem(path)
    raise ReplaceRefusedError(
        f"{what}: {path} is {found}; only a table store made by this package (complete or "
        f"unfinished, recognised by its zarr.json) is replaced -- {keep}"
    )


def _delete(path: Path) -> None:
    """Delete a replaced store (or symlink) at ``path``; errors are ignored (it is garbage)."""
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(OSError):
            path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def remove_store(path: str | os.PathLike, *, what: str = "OUT", links: bool = False) -> bool:
    """Delete the table store (or, with ``links``, the symlink) at ``path`` after
    :func:`check_replaceable`; returns whether something was deleted."""
    path = Path(path)
    if check_replaceable(path, what=what, links=links) == "absent":
        return False
    aside = path.with_name(f"{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.replace(path, aside)  # one rename: the name is free at once, the deletion may be slow
    _delete(aside)
    return True


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directory entries ``a`` and ``b`` atomically (Linux ``renameat2``); ``False``
    if the system or file system cannot."""
    try:
        func = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def _sync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # make the renames durable
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_store(
    new: str | os.PathLike, dst: str | os.PathLike, *, what: str = "OUT", links: bool = False
) -> None:
    """Put the finished store (or symlink) ``new`` at ``dst`` atomically; an old store at
    ``dst`` is deleted once ``new`` is in place.

    ``dst`` must pass :func:`check_replaceable` (``what`` and ``links`` as there); otherwise
    :class:`ReplaceRefusedError` is raised and neither path is touched. ``new`` must be on the
    same file system as ``dst`` (a sibling). On failure ``dst`` holds what it held before.
    """
    new, dst = Path(new), Path(dst)
    kind = check_replaceable(dst, what=what, links=links)
    if kind == "absent":
        os.rename(new, dst)  # fails (ENOTEMPTY/EEXIST/ENOTDIR) if something appeared meanwhile
        _sync_dir(dst.parent)
        return
    if kind == "link" and (new.is_symlink() or not new.is_dir()):
        os.replace(new, dst)  # a symlink over a symlink: one atomic rename
        _sync_dir(dst.parent)
        return
    if _exchange(new, dst):
        old = new  # the old store now sits where the new one was
        if store_kind(old) not in ("complete", "unfinished", "link"):
            _exchange(new, dst)  # something else was put at dst meanwhile: put it back
            raise ReplaceRefusedError(f"{what}: {dst} changed while it was being replaced")
        _sync_dir(dst.parent)
        _delete(old)
        return
    aside = dst.with_name(f"{dst.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.replace(dst, aside)
    try:
        os.rename(new, dst)
    except OSError:
        os.replace(aside, dst)
        raise
    _sync_dir(dst.parent)
    _delete(aside)
