"""The build's errors: refused before any work, refused by the lock, or failed while running."""

from __future__ import annotations

__all__ = ["BuildError", "BuildInputError", "LockError"]


class BuildInputError(ValueError):
    """The build was refused before doing anything (bad flag, destination, disk space...)."""


class LockError(BuildInputError):
    """Another build holds the destination's lock."""


class BuildError(RuntimeError):
    """The build failed while running (task error, verification failure...); resumable."""
