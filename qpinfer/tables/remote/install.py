# Over 400 lines: one download (check, lock, fetch, verify, unpack, place) and the docstring of its
# limits, which users read.
"""Download prebuilt sigma* tables by name (``qpinfer download NAME``); no dask needed.

A *table host* is any directory served over http(s) -- or a local directory / ``file://`` URL --
holding ``manifest.json`` and the archives ``qptables publish`` wrote next to it. The base URL
is the ``base_url`` argument, else the environment variable
:data:`~qpinfer.tables.remote.transfer.URL_ENV` (``QPINFER_TABLES_URL``).

:func:`download` (also ``qpinfer.tables.download``):

1. reads ``BASE/manifest.json`` and finds the entry ``name`` (archive file, size, sha256,
   likelihood, grid, verification summary, ``content_sha256`` of the store's chunk checksums);
2. refuses (before any transfer) if ``tables_dir()/<name>.zarr`` holds something that is not a
   table store (or a symlink to one) -- :func:`qpinfer.tables.replace.check_replaceable`; if the
   installed table already holds that content -- every chunk hashed and its metadata digest
   checked, so a corrupted installed table is fetched again -- stops there (``force``
   re-downloads);
3. fetches the archive into ``tables_dir()/.downloads/<name>-<sha256[:16]>.tar.gz.part``,
   resuming an interrupted download with an HTTP ``Range`` request (a server that ignores it
   sends the whole file again) and retrying connection failures ``retries`` times with
   exponential back-off; the part file keeps its progress between calls. Before any transfer
   the manifest's sizes are checked against the free disk space and ``max_bytes``. A transfer
   slower than ``low_speed_limit`` bytes/s over ``low_speed_time`` seconds (default 10 KiB/s
   over 60 s) is abandoned, and every connect or read gives up after ``stall_timeout`` (30 s) of
   silence (:mod:`qpinfer.tables.remote.deadline`); there is no total time limit unless
   ``timeout`` is given. Never more than the archive's listed size is written;
4. checks the size and the sha256 -- a mismatch, or a server file shorter or longer than the
   manifest says, deletes the part file and raises
   :class:`~qpinfer.tables.remote.transfer.DownloadError`;
5. unpacks into a hidden staging directory only what the store's own record lists, each file no
   larger than the store's metadata gives for it and the total bounded by the manifest's
   ``store_bytes`` (:mod:`qpinfer.tables.remote.unpack`: a stray or oversized member is refused,
   naming it, before anything is read or written), opens the result with
   :func:`qpinfer.open_table` hashing *every* chunk (``verify_checksums=True``) and checks it
   is the manifest's likelihood and grid;
6. puts it atomically at ``tables_dir()/<name>.zarr`` with
   :func:`qpinfer.tables.replace.replace_store` (an older copy is deleted after), and points
   ``tables_dir()/<likelihood>.zarr`` -- the installed default, where ``open_table(likelihood)``
   looks -- at it with a relative symlink, unless a real (not symlinked) table directory, or a
   symlink to something that is not a table store, is there. The estimators' ``table=None``
   uses the installed default only where it is at least as good as the table shipped inside
   qpinfer in coverage and verified error (:mod:`qpinfer.tables.choice`): a downloaded table
   never silently replaces a better one.

Nothing that looks like a table (a ``*.zarr`` directory in the cache) ever exists before step 6
succeeds: interrupted or failed downloads leave at most the ``.part`` file under ``.downloads/``.
Concurrent downloads of the same name are serialised with a lock file (``fcntl``, POSIX).

The transfer itself (steps 1 and 3: manifest, ``Range`` resumes, retries) is
:mod:`qpinfer.tables.remote.transfer`; this module is the install side (cache, lock, unpack,
validate, place).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import operator
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qpinfer.tables.open import open_table
from qpinfer.tables.remote.deadline import check_positive
from qpinfer.tables.remote.transfer import (
    DEFAULT_TIMEOUT,
    LOW_SPEED_LIMIT,
    LOW_SPEED_TIME,
    MANIFEST_TIMEOUT,
    STALL_TIMEOUT,
    Deadline,
    DownloadError,
    SpeedLimit,
    fetch_archive,
    fetch_manifest,
    join_url,
    printable,
    resolve_base_url,
)
from qpinfer.tables.remote.transfer import MANIFEST_FORMAT as MANIFEST_FORMAT
from qpinfer.tables.remote.transfer import MANIFEST_NAME as MANIFEST_NAME
from qpinfer.tables.remote.transfer import RETRY_BACKOFF as RETRY_BACKOFF
from qpinfer.tables.remote.transfer import URL_ENV as URL_ENV
from qpinfer.tables.remote.unpack import MAX_BYTES, unpack_store
from qpinfer.tables.replace import ReplaceRefusedError, check_replaceable, replace_store
from qpinfer.tables.store import TableError, sha256_file, tables_dir

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "URL_ENV",
    "DownloadError",
    "InstallRefusedError",
    "UnknownTableError",
    "checksums_digest",
    "download",
    "fetch_manifest",
    "resolve_base_url",
    "validate_name",
]

#: Table names listed in an "unknown table" error (the rest are counted).
_LISTED_NAMES = 30

#: Valid table names (also the archive's top-level ``<name>.zarr`` directory).
#: the most ``retries`` a download takes (the back-off doubles: the tenth retry waits 256 s)
MAX_RETRIES = 10
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class UnknownTableError(DownloadError):
    """The host's manifest has no table of that name."""


class InstallRefusedError(DownloadError):
    """``tables_dir()/<name>.zarr`` holds something that is not a table store this package
    installed (a plain file, a foreign directory, a symlink to one); it was left untouched."""


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid table name (letters, digits, ``.``, ``_``, ``-``)."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or ".." in name:
        raise ValueError(
            f"NAME: table names are letters, digits, '.', '_' and '-' (starting with a letter or "
            f"digit, at most 100 characters), got {name!r}"
        )
    if name.endswith(".zarr"):
        raise ValueError(f"NAME: give the table name without '.zarr', got {name!r}")
    return name


def checksums_digest(checksums: dict[str, str]) -> str:
    """sha256 identifying a store's content: of its ``attrs["checksums"]`` as sorted JSON."""
    text = json.dumps(checksums, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _entry(manifest: dict[str, Any], name: str, base: str) -> dict[str, Any]:
    tables = manifest["tables"]
    if name not in tables:
        names = sorted(str(t) for t in tables)
        known = ", ".join(printable(t, 60) for t in names[:_LISTED_NAMES]) or "none"
        if len(names) > _LISTED_NAMES:
            known += f" and {len(names) - _LISTED_NAMES} more"
        raise UnknownTableError(f"no table named {name!r} at {base} (available: {known})")
    e = tables[name]
    try:
        file, size, sha = str(e["file"]), int(e["size"]), str(e["sha256"]).lower()
        if "likelihood" not in e or "grid" not in e:
            raise KeyError("likelihood" if "likelihood" not in e else "grid")
    except (KeyError, TypeError, ValueError) as exc:
        raise DownloadError(
            f"manifest entry {name!r} is malformed ({printable(repr(exc))})"
        ) from None
    if "/" in file or "\\" in file or file in ("", ".", "..") or not file.endswith(".tar.gz"):
        raise DownloadError(
            f"manifest entry {name!r}: bad archive file name {printable(repr(file))}"
        )
    if size <= 0 or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise DownloadError(f"manifest entry {name!r}: bad size or sha256")
    store_bytes = e.get("store_bytes")  # absent from older manifests
    if store_bytes is not None and (
        isinstance(store_bytes, bool) or not isinstance(store_bytes, int) or store_bytes <= 0
    ):
        raise DownloadError(
            f"manifest entry {name!r}: bad store_bytes {printable(repr(store_bytes))}"
        )
    return {**e, "file": file, "size": size, "sha256": sha, "store_bytes": store_bytes}


@contextlib.contextmanager
def file_lock(path: Path, deadline: Deadline):
    """Exclusive advisory lock (POSIX ``flock``; no-op elsewhere) for one table name; waiting
    for another process's lock ends at ``deadline``
    (:class:`~qpinfer.tables.remote.transfer.DownloadError`)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline.expired():
                    raise DownloadError(
                        f"timed out after {deadline.elapsed():.1f} s (timeout "
                        f"{deadline.seconds:g} s) waiting for another process holding {path}"
                    ) from None
                deadline.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _check_room(entry: dict[str, Any], name: str, part: Path, max_bytes: int) -> None:
    """Refuse (before any transfer) a table whose archive and unpacked store, as the manifest
    lists them, need more than the free disk space of ``part``'s folder or than
    ``max_bytes`` each."""
    size, store_bytes = entry["size"], entry.get("store_bytes")
    have = part.stat().st_size if part.is_file() else 0
    need = max(size - have, 0) + (store_bytes or 0)
    free = shutil.disk_usage(part.parent).free
    if need > free:
        raise DownloadError(
            f"not enough disk space for {name!r}: the manifest lists {size} bytes for its "
            + (f"archive and {store_bytes} bytes unpacked" if store_bytes else "archive")
            + f"; {need} bytes are still to be written but only {free} bytes are free in "
            f"{part.parent} (free some space, or set QPINFER_TABLES to a folder on another disk)"
        )
    for what, value in (("its archive", size), ("its unpacked store", store_bytes)):
        if value is not None and value > max_bytes:
            raise DownloadError(
                f"the manifest lists {value} bytes for {what} of {name!r}, more than "
                f"max_bytes={max_bytes}; not downloaded (pass a larger max_bytes to allow it)"
            )


def _install(
    archive: Path, entry: dict[str, Any], name: str, root: Path, max_bytes: int = MAX_BYTES
) -> Path:
    """Unpack ``archive`` into a hidden staging directory, validate, rename into place."""
    top = f"{name}.zarr"
    target = root / top
    staging = root / f".install-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir()
        store = unpack_store(archive, staging, top, entry.get("store_bytes"), max_bytes)
        try:
            table = open_table(store, verify_checksums=True)
        except TableError as exc:
            raise DownloadError(
                f"the downloaded table {name!r} is not valid: {printable(exc, 2000)}"
            ) from None
        attrs = table.attrs
        if attrs["likelihood"] != entry["likelihood"] or attrs["grid"] != entry["grid"]:
            raise DownloadError(
                f"the downloaded table {name!r} is for {printable(repr(attrs['likelihood']))} "
                f"on {printable(repr(attrs['grid']))}, the manifest says "
                f"{printable(repr(entry['likelihood']))} on {printable(repr(entry['grid']))}"
            )
        want = entry.get("content_sha256")
        if want and checksums_digest(attrs["checksums"]) != want:
            raise DownloadError(
                f"the downloaded table {name!r} holds other data than the manifest describes"
            )
        table.close()
        try:
            replace_store(store, target, what=f"the installed table {name!r}", links=True)
        except ReplaceRefusedError as exc:
            raise InstallRefusedError(f"not installed: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _link_default(root: Path, name: str, likelihood: str) -> Path | None:
    """Point ``<likelihood>.zarr`` at ``<name>.zarr`` (atomic symlink swap); ``None`` if a real
    table directory is installed there (left alone)."""
    link = root / f"{likelihood}.zarr"
    if name == likelihood:
        return link
    if link.exists() and not link.is_symlink():
        return None
    tmp = root / f".link-{likelihood}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        os.symlink(f"{name}.zarr", tmp, target_is_directory=True)
        replace_store(tmp, link, what=f"the default {likelihood} table", links=True)
    except (OSError, ReplaceRefusedError):  # e.g. a link to something else: left alone
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return link


def _clean_stale(root: Path) -> None:
    """Remove staging/aside directories of killed installs (their pid is gone)."""
    for p in list(root.glob(".install-*")) + list(root.glob(".old-*")):
        m = re.search(r"-(\d+)-[0-9a-f]{8}$", p.name)
        if m is None:
            continue
        pid = int(m.group(1))
        alive = pid == os.getpid()
        if not alive:
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            except PermissionError:
                alive = True
        if not alive:
            shutil.rmtree(p, ignore_errors=True)


def download(
    name: str,
    base_url: str | os.PathLike | None = None,
    *,
    force: bool = False,
    make_default: bool = True,
    retries: int = 3,
    timeout: float | None = DEFAULT_TIMEOUT,
    low_speed_limit: float = LOW_SPEED_LIMIT,
    low_speed_time: float = LOW_SPEED_TIME,
    stall_timeout: float = STALL_TIMEOUT,
    max_bytes: int = MAX_BYTES,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Download the table ``name`` from a table host and install it; returns its path.

    Parameters
    ----------
    name:
        The table's name in the host's ``manifest.json`` (e.g. ``"probit-paper"``).
    base_url:
        ``http(s)://`` or ``file://`` URL (or local directory) of the host; default
        ``$QPINFER_TABLES_URL``.
    force:
        Download and reinstall even if the installed table already holds this content.
    make_default:
        Also make it the installed default of its likelihood, what ``open_table(likelihood)``
        finds (``tables_dir()/<likelihood>.zarr``, a symlink) unless a real directory is there;
        ``table=None`` then uses it where it is at least as good as the shipped table
        (:func:`qpinfer.tables.choice.choose_default`).
    retries:
        Extra attempts after a connection failure or interrupted transfer (each resumes), at
        most :data:`MAX_RETRIES` (10: the pause before an attempt doubles each time, from
        0.5 s, so the tenth already waits over four minutes).
    timeout:
        Seconds the whole download may take -- manifest, waiting for a concurrent download of
        the same name, archive, retries and back-off included; default ``None``, no total limit
        (a large table on a slow but steady link takes as long as it takes; the manifest alone
        then has :data:`~qpinfer.tables.remote.transfer.MANIFEST_TIMEOUT`, 60 s, and waiting for
        a concurrent download of the same name lasts as long as that download, which the speed
        limits below bound). Past it a
        :class:`~qpinfer.tables.remote.transfer.DownloadError` names the URL, the time and the
        bytes received (kept in the ``.part`` file, to resume from).
    low_speed_limit, low_speed_time:
        A response whose body arrives at fewer than ``low_speed_limit`` bytes/s (default
        :data:`~qpinfer.tables.remote.deadline.LOW_SPEED_LIMIT`, 10 KiB/s) averaged over the
        last ``low_speed_time`` seconds (default
        :data:`~qpinfer.tables.remote.deadline.LOW_SPEED_TIME`, 60 s), or whose headers take
        longer than ``low_speed_time``, is abandoned (curl's ``--speed-limit`` and
        ``--speed-time``) and retried; the error names the rate and the limit.
    stall_timeout:
        Seconds each connect or read waits for data before it is abandoned and retried
        (default :data:`~qpinfer.tables.remote.deadline.STALL_TIMEOUT`, 30 s).
    max_bytes:
        Largest archive, and largest unpacked store, accepted (bytes; default
        :data:`~qpinfer.tables.remote.unpack.MAX_BYTES`, 64 GiB). A manifest listing more, or
        more than the free disk space of the table cache, is refused before any transfer; the
        unpacked store is bounded by the manifest's ``store_bytes``, else by ``max_bytes``.
    progress:
        Called as ``progress(bytes_done, bytes_total)`` while downloading.

    Returns
    -------
    Path
        ``tables_dir() / f"{name}.zarr"``, a validated table (open it with
        ``qpinfer.open_table(name)``).

    Raises
    ------
    DownloadError
        The host is unreachable, the name unknown, the transfer failed, the archive is truncated
        or does not match its sha256, the unpacked table fails validation, or
        ``tables_dir()/<name>.zarr`` holds something that is not a table store
        (:class:`InstallRefusedError`, raised before any transfer). No ``*.zarr`` is created or
        changed in that case; an interrupted transfer keeps its ``.part`` file under
        ``tables_dir()/.downloads`` to resume from.
    ValueError
        ``name`` is not a valid table name, or a limit (``retries``, ``timeout``,
        ``low_speed_limit``, ``low_speed_time``, ``stall_timeout``, ``max_bytes``) is not a
        positive number (``retries``: an integer in ``[0, MAX_RETRIES]``); checked before anything is fetched.
    """
    validate_name(name)
    try:
        attempts = operator.index(retries)
    except TypeError:
        attempts = -1
    if not 0 <= attempts <= MAX_RETRIES:
        raise ValueError(
            f"retries must be an integer in [0, {MAX_RETRIES}] (the pause before a retry "
            f"doubles each time), got {retries!r}"
        )
    retries = attempts
    deadline = Deadline(timeout)  # ValueError unless None or a positive, finite number
    speed = SpeedLimit(low_speed_limit, low_speed_time)  # ValueError naming the bad one
    stall_timeout = check_positive(stall_timeout, "stall_timeout")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive integer (bytes), got {max_bytes!r}")
    base = resolve_base_url(base_url)
    manifest = fetch_manifest(
        base,
        timeout=deadline if timeout is not None else MANIFEST_TIMEOUT,
        retries=retries,
        stall_timeout=stall_timeout,
    )
    entry = _entry(manifest, name, base)
    root = tables_dir()
    downloads = root / ".downloads"
    try:
        downloads.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadError(f"cannot create the table cache {root} ({exc})") from None
    target = root / f"{name}.zarr"
    with file_lock(downloads / f"{name}.lock", deadline):
        _clean_stale(root)
        try:  # before any transfer: never replace what this package did not install
            check_replaceable(target, what=f"the installed table {name!r}", links=True)
        except ReplaceRefusedError as exc:
            raise InstallRefusedError(f"not downloaded: {exc}") from None
        if not force and target.is_dir() and entry.get("content_sha256"):
            try:  # every chunk hashed: a corrupted installed table is fetched again
                installed = open_table(target, verify_checksums=True)
            except TableError:
                installed = None
            if installed is not None and (
                checksums_digest(installed.attrs["checksums"]) == entry["content_sha256"]
            ):
                if make_default:
                    _link_default(root, name, entry["likelihood"])
                return target
        part = downloads / f"{name}-{entry['sha256'][:16]}.tar.gz.part"
        for old in downloads.glob(f"{name}-*.tar.gz.part"):  # parts of other versions
            if old != part:
                old.unlink(missing_ok=True)
        _check_room(entry, name, part, max_bytes)
        url = join_url(base, entry["file"])
        fetch_archive(
            url,
            part,
            entry["size"],
            retries,
            deadline,
            progress,
            speed=speed,
            stall_timeout=stall_timeout,
        )
        got = sha256_file(part)
        if got != entry["sha256"]:
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"{url}: sha256 {got} does not match the manifest's {entry['sha256']}; the "
                "download was discarded (corrupt transfer, or the host's file and manifest "
                "disagree)"
            )
        try:
            path = _install(part, entry, name, root, max_bytes)
        except DownloadError:
            part.unlink(missing_ok=True)
            raise
        part.unlink(missing_ok=True)
        if make_default:
            _link_default(root, name, entry["likelihood"])
    return path
