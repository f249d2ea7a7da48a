"""Locking and resuming a build, of every table layout (the App. J grid and the reduced-coordinate
cells, :mod:`qptables.pipeline.build`): the siblings of ``OUT``, the lock ``OUT.lock``
(:func:`~qptables.pipeline.resume.locked`), the resume record (:func:`build_record`), the one
decision whether an unfinished ``OUT.partial`` can be resumed (:func:`resumable`) and its atomic
creation (:func:`create_partial`).

Resuming requires the store's record to match the build's (:func:`resume_refusal`) -- grid: the
same likelihood, grid, tiling and kernel output (a fingerprint of a probe tile,
:func:`qptables.pipeline.tiles.probe`), kept in ``attrs["build"]``; cells: the same likelihood and
boxes, kept in the root attributes. Anything else is an error unless ``force`` (which starts
afresh). The finished tiles of a resumable store are its chunk files of the exact size
(:func:`qptables.store.finished_chunks`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.tables.replace import remove_store
from qptables.grid import GridSpec
from qptables.pipeline.errors import BuildInputError, LockError, writing
from qptables.pipeline.interrupt import deferred_sigterm, stop_on_signals
from qptables.store import StoreError, read_attrs

__all__ = [
    "BuildLock",
    "build_record",
    "create_partial",
    "lock_path",
    "locked",
    "partial_path",
    "publishing_path",
    "resumable",
    "resume_refusal",
]


def partial_path(out: str | os.PathLike) -> Path:
    """Temporary sibling the store is built in: ``OUT.partial``."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def publishing_path(out: str | os.PathLike) -> Path:
    """Sibling the published copy is written to before it is renamed to ``OUT``."""
    out = Path(out)
    return out.with_name(out.name + ".publishing")


def lock_path(out: str | os.PathLike) -> Path:
    """Lock file next to ``OUT``: ``OUT.lock``."""
    out = Path(out)
    return out.with_name(out.name + ".lock")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


#: Tokens of the locks this process holds (a lock with our pid but another token is stale).
_HELD_TOKENS: set[str] = set()


class BuildLock:
    """Exclusive lock file ``OUT.lock`` created with ``O_CREAT | O_EXCL``.

    Holds ``{"pid", "host", "started"}``. A lock whose pid is dead on this host -- or is this
    process's own pid (a re-run container with a pinned hostname, as in ``cluster/``) -- is
    stale and taken over with a warning; any other existing lock refuses the build
    (:class:`~qptables.LockError`).
    """

    def __init__(self, out: str | os.PathLike) -> None:
        self.path = lock_path(out)
        self.info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "token": uuid.uuid4().hex,
        }
        self.held = False

    def _read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text() or "null")
        except (OSError, ValueError):
            return None

    def acquire(self) -> None:
        """Take the lock or raise :class:`~qptables.LockError`."""
        for _attempt in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = self._read()
                if other is None:
                    # being written right now, or garbage: stale only if old
                    with contextlib.suppress(OSError):
                        if time.time() - self.path.stat().st_mtime > 30:
                            warnings.warn(
                                f"removing unreadable stale lock {self.path}", stacklevel=2
                            )
                            self.path.unlink(missing_ok=True)
                            continue
                    raise LockError(
                        f"another build holds the lock {self.path} (unreadable); if no build is "
                        f"running, delete that file"
                    ) from None
                host, pid = other.get("host"), int(other.get("pid", -1))
                # dead on this host -- or "alive" only because it is our own pid but not a
                # lock this process holds: a container re-run with the same hostname (cluster/
                # pins it) reuses pid 1, and no other process on this host has our pid
                ours = pid == os.getpid() and other.get("token") not in _HELD_TOKENS
                if host == self.info["host"] and (ours or not pid_alive(pid)):
                    warnings.warn(
                        f"taking over stale lock {self.path} of dead process {pid} on {host}",
                        stacklevel=2,
                    )
                    self.path.unlink(missing_ok=True)
                    continue
                raise LockError(
                    f"another build into {self.path.name[: -len('.lock')]} is running: pid {pid} "
                    f"on host {host} since {other.get('started')} (lock file {self.path}); if no "
                    f"build is running there, delete the lock file"
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self.info))
            self.held = True
            _HELD_TOKENS.add(self.info["token"])
            return
        raise LockError(f"could not take the lock {self.path}")

    def release(self) -> None:
        """Remove the lock file if it is still ours."""
        if self.held:
            other = self._read()
            if other is not None and other.get("token") == self.info["token"]:
                self.path.unlink(missing_ok=True)
            self.held = False
            _HELD_TOKENS.discard(self.info["token"])

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def locked(out: Path) -> Iterator[BuildLock]:
    """A build's hold on ``OUT``: SIGTERM unwinds the block as Ctrl-C does
    (:func:`qptables.pipeline.interrupt.stop_on_signals`) and the lock ``OUT.lock`` is held
    for it, released at its end even if a SIGTERM arrives meanwhile."""
    with stop_on_signals(partial_path(out)):
        lock = BuildLock(out)
        lock.acquire()
        try:
            yield lock
        finally:
            with deferred_sigterm():
                lock.release()


#: Per layout, the keys of the resume record a resumed build must match.
RESUME_KEYS = {
    "grid": ("likelihood", "grid", "tile_mu", "kernel_fingerprint"),
    "cells": ("likelihood", "boxes"),
}


def build_record(
    layout: str,
    likelihood: str,
    *,
    grid: GridSpec | None = None,
    fingerprint: str | None = None,
    mirror: bool = False,
    boxes: tuple | None = None,
) -> dict:
    """The resume record of a build of ``likelihood`` in ``layout`` (``"grid"`` or ``"cells"``):
    what an unfinished build must match to be resumed (:func:`resume_refusal`, the keys of
    :data:`RESUME_KEYS`).

    ``"grid"``: the store's ``attrs["build"]`` -- the likelihood (and a step-noise eps), the
    ``grid`` and its tiling, the kernel's ``fingerprint`` and whether the probit ``mirror`` is
    used. ``"cells"``: the store's own root attributes ``likelihood`` and ``boxes`` (each box's
    :meth:`~qpinfer.likelihoods.layout.Box.to_attrs`).
    """
    if layout == "cells":
        if boxes is None:
            raise ValueError("boxes: required for a cells build record")
        return {"likelihood": likelihood, "boxes": [b.to_attrs() for b in boxes]}
    if layout != "grid":
        raise ValueError(f"layout: expected 'grid' or 'cells', got {layout!r}")
    if grid is None or fingerprint is None:
        raise ValueError("grid, fingerprint: required for a grid build record")
    # one store per parameter value (a step-noise eps): recorded beside the name, checked by
    # open_table
    params = get_likelihood(likelihood).table_params()
    return {
        "likelihood": likelihood,
        "likelihood_params": params,
        "grid": grid.to_attrs(),
        "tile_mu": int(grid.tile_mu),
        "kernel_fingerprint": fingerprint,
        "kernel_call_unit": "one mu row (all log10_sigma) per qpinfer.sigma_qp call",
        "probit_mirror": bool(mirror),
        "tool": "qptables build",
    }


def resume_refusal(layout: str, attrs: dict, record: dict) -> str | None:
    """None if the unfinished build whose root attributes are ``attrs`` can be resumed by the
    build of ``record`` (:func:`build_record`): the stored record (grid: ``attrs["build"]``;
    cells: ``attrs`` itself) agrees with it on the layout's :data:`RESUME_KEYS`; else the first
    difference."""
    old = attrs.get("build", {}) if layout == "grid" else attrs
    if not old:
        return "it has no build record"
    for key in RESUME_KEYS[layout]:
        if old.get(key) != record.get(key):
            return f"its {key} is {_short(old.get(key))}, this build's is {_short(record.get(key))}"
    return None


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resumable(
    partial: Path,
    layout: str,
    record: dict,
    force: bool,
    dry_run: bool,
    say: Callable[[str], None],
) -> bool:
    """Whether the unfinished build ``partial`` exists and can be resumed by the build of
    ``record`` in ``layout`` (:func:`resume_refusal`). An incompatible (or unreadable) one is
    refused
    (:class:`~qptables.BuildInputError`) or, with ``force``, deleted (a dry run only says it would
    be)."""
    if not partial.exists():
        return False
    try:
        reason = resume_refusal(layout, read_attrs(partial), record)
    except StoreError as exc:
        reason = str(exc)
    if reason is None:
        return True
    if not force:
        raise BuildInputError(
            f"{partial} holds an unfinished build that cannot be resumed by this one "
            f"({reason}); re-run with the original options, or pass --force to discard it"
        )
    if dry_run:
        say(f"  (a real run would discard the incompatible {partial}: {reason})")
    else:
        say(f"discarding incompatible unfinished build {partial} ({reason})")
        remove_store(partial, what="OUT (its unfinished build)")
    return False


def create_partial(partial: Path, create: Callable[[Path], None]) -> bool:
    """Create the empty build store ``partial`` with ``create(path)`` unless it exists (to be
    resumed); returns whether it was created. Written in a staging sibling renamed into place, so
    ``partial`` is a complete store or absent; a failed write (a full disk) removes the staging
    copy and is a :class:`~qptables.pipeline.errors.BuildError` naming the phase and path."""
    if partial.exists():
        return False
    staging = partial.with_name(partial.name + f".new-{os.getpid()}")
    try:
        with writing("creating the build store", partial):
            create(staging)
            os.replace(staging, partial)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True
