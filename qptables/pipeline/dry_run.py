"""``qptables build --dry-run``: the checks, the plan and the time estimate of a build, with
nothing written -- no ``OUT``, no ``OUT.partial``, no lock, not even a probe file.

The destination is checked with ``access(2)`` instead of the probe file a real build writes,
and the lock ``OUT.lock`` is read, never taken (:func:`check_unlocked_readonly`): a live build
holding it refuses the dry run as it would refuse the build. The dry run of every layout is
:func:`qptables.pipeline.build.build` with ``dry_run=True``, which uses the checks here.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.resume import lock_path, pid_alive

__all__ = ["check_lock_readonly", "check_unlocked_readonly"]


def check_unlocked_readonly(directory: Path, out: Path) -> None:
    """Refuse (:class:`~qptables.BuildInputError`, as the build would) an ``OUT`` whose parent ``directory``
    is missing, not a directory or not writable -- asked of ``access(2)``, nothing created -- or
    whose lock a live build holds (:func:`check_lock_readonly`)."""
    if not directory.exists():
        raise BuildInputError(f"OUT: directory {directory} of {out} does not exist")
    if not directory.is_dir():
        raise BuildInputError(f"OUT: {directory} (parent of {out}) is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BuildInputError(f"OUT: destination {directory} is not writable")
    check_lock_readonly(out)


def check_lock_readonly(out: Path) -> None:
    """Refuse (:class:`~qptables.BuildInputError`) when a live build holds ``OUT.lock``; a stale lock (its
    process is dead on this host) is left for the real build to take over. Nothing is written."""
    path = lock_path(out)
    if not path.exists():
        return
    try:
        other = json.loads(path.read_text() or "null") or {}
        host, pid = other.get("host"), int(other.get("pid", -1))
    except (OSError, ValueError, TypeError, AttributeError):
        raise BuildInputError(
            f"another build may hold the lock {path} (unreadable); if no build is running, "
            f"delete that file"
        ) from None
    if host == socket.gethostname() and not pid_alive(pid):
        return
    raise BuildInputError(
        f"another build into {out.name} is running: pid {pid} on host {host} since "
        f"{other.get('started')} (lock file {path}); if no build is running there, delete the "
        f"lock file"
    )
