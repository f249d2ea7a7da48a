"""The build's errors: refused before any work, refused by the lock, failed while running, or
stopped by a signal; and :func:`~qptables.pipeline.errors.writing`, which names the phase and path
of a failed write."""

from __future__ import annotations

import contextlib
import errno
import signal
from collections.abc import Iterator
from pathlib import Path

__all__ = ["BuildError", "BuildInputError", "BuildInterrupted", "LockError", "writing"]


class BuildInputError(ValueError):
    """The build was refused before doing anything (bad flag, destination, disk space...)."""


class LockError(BuildInputError):
    """Another build holds the destination's lock."""


class BuildError(RuntimeError):
    """The build failed while running (task error, verification failure...); resumable."""


class BuildInterrupted(KeyboardInterrupt):
    """The build was stopped by a signal (SIGINT, SIGTERM) and cleaned up: the lock released,
    nothing that looks finished left, the finished tiles kept for resuming. ``signum`` is the
    signal's number (a command exits with ``128 + signum``)."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)


def os_error_text(exc: OSError, under: Path | None = None) -> str:
    """``exc`` as ``"No space left on device (ENOSPC)"``, plus the file it names when that is
    not inside ``under`` (the path the message already names)."""
    text = exc.strerror or str(exc)
    if exc.errno in errno.errorcode:
        text += f" ({errno.errorcode[exc.errno]})"
    name = exc.filename
    if name is not None and (under is None or not str(name).startswith(str(under))):
        text += f" on {name}"
    return text


@contextlib.contextmanager
def writing(phase: str, path: Path, then: str = "") -> Iterator[None]:
    """Raise an ``OSError`` of the block as a :class:`BuildError` naming the ``phase`` and the
    ``path`` written, e.g. ``"creating the build store /d/t.zarr.partial: No space left on
    device (ENOSPC)"``, followed by ``then`` (what is kept, what to do)."""
    try:
        yield
    except OSError as exc:
        raise BuildError(f"{phase} {path}: {os_error_text(exc, path)}{then}") from exc
