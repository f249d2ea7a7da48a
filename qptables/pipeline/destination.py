"""Publishing a build: the destination ``OUT`` is checked before any work and the finished,
verified store is put there atomically at the end.

``OUT`` must be absent unless ``force``; with ``force`` it, and ``OUT.partial`` and
``OUT.publishing`` always, must be a table store of this package -- a plain file, a directory
that is not a store or a symlink is never replaced (:mod:`qpinfer.tables.replace`). The published
copy (one chunk per ``(variable, y)``, :func:`qptables.store.consolidate_store`) is written to
``OUT.publishing`` and renamed to ``OUT`` with :func:`qpinfer.tables.replace.replace_store`; an
existing ``OUT`` store is deleted only after the new one is in place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qpinfer.tables.replace import (
    ReplaceRefusedError,
    check_replaceable,
    remove_store,
    replace_store,
)
from qptables.pipeline.errors import BuildError, BuildInputError, os_error_text
from qptables.pipeline.interrupt import deferred_sigterm
from qptables.pipeline.resume import partial_path, publishing_path
from qptables.store import StoreError, StoreHeader, consolidate_store

__all__ = [
    "check_destinations",
    "check_writable",
    "clean_stale",
    "discard_publishing",
    "publish_build",
    "publish_store",
]


def check_writable(directory: Path, out: Path) -> None:
    if not directory.exists():
        raise BuildInputError(f"OUT: directory {directory} of {out} does not exist")
    if not directory.is_dir():
        raise BuildInputError(f"OUT: {directory} (parent of {out}) is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".qptables-probe-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise BuildInputError(
            f"OUT: destination {directory} is not writable ({exc.strerror})"
        ) from None


def clean_stale(out: Path, say: Callable[[str], None]) -> None:
    """Delete the staging directories of killed builds and an interrupted publish's
    ``OUT.publishing`` (the caller holds the lock, so none is in use)."""
    partial = partial_path(out)
    for name in (partial.name, publishing_path(out).name):
        for stale in partial.parent.glob(name + ".new-*"):
            shutil.rmtree(stale, ignore_errors=True)
    stale_pub = publishing_path(out)
    if stale_pub.exists() or stale_pub.is_symlink():
        say(f"  deleting {stale_pub.name} left by an interrupted publish")
        remove_store(stale_pub, what="OUT (its publishing copy)")


def discard_publishing(publishing: Path) -> None:
    """Delete an unfinished ``OUT.publishing`` copy and its staging sibling (a failed or
    interrupted publish: nothing that looks finished is left)."""
    shutil.rmtree(publishing, ignore_errors=True)
    for staging in publishing.parent.glob(publishing.name + ".new-*"):
        shutil.rmtree(staging, ignore_errors=True)


def publish_store(partial: Path, out: Path, force: bool) -> None:
    """Put ``partial`` (the finished ``OUT.publishing`` copy) at ``out`` atomically with
    :func:`qpinfer.tables.replace.replace_store`: an existing ``out`` (``force``; a table store
    only) is deleted only after the new store is in place."""
    if (out.exists() or out.is_symlink()) and not force:
        raise BuildError(f"{out} appeared during the build; not replaced (pass --force)")
    try:
        replace_store(partial, out, what="OUT")
    except ReplaceRefusedError as exc:
        raise BuildError(f"not published ({exc}); the new store is kept in {partial}") from None
    except OSError as exc:
        raise BuildError(f"could not publish {partial} as {out}: {exc}") from exc


def publish_build(
    partial: Path, out: Path, force: bool, client: Any, header: StoreHeader | None = None
) -> None:
    """Write the published copy of the verified build ``partial`` (``header``: its
    :class:`~qptables.store.StoreHeader`, read if not given) into ``OUT.publishing``
    (:func:`qptables.store.consolidate_store`, on ``client``'s workers), put it at ``out``
    (:func:`publish_store`) and delete ``partial``. A failed or interrupted copy is deleted
    (nothing that looks finished is left; ``partial`` is kept to re-run from) and a failed
    write is a :class:`~qptables.BuildError` naming the copy's path. Once the copy is complete, a
    SIGTERM waits until it is in place and ``partial`` is deleted
    (:func:`~qptables.pipeline.interrupt.deferred_sigterm`)."""
    publishing = publishing_path(out)
    published = False
    try:
        consolidate_store(partial, publishing, client=client, header=header)
        with deferred_sigterm():
            publish_store(publishing, out, force)
            published = True
            shutil.rmtree(partial, ignore_errors=True)
    except BaseException as exc:
        if published or isinstance(exc, BuildError):  # published, or the copy kept on purpose
            raise
        discard_publishing(publishing)
        if isinstance(exc, StoreError | OSError):
            reason = os_error_text(exc, publishing) if isinstance(exc, OSError) else exc
            raise BuildError(
                f"writing the published copy {publishing}: {reason}; nothing published, "
                f"re-run to resume"
            ) from exc
        raise


def check_destinations(out: Path, force: bool) -> None:
    """Refuse, before any work, a build whose ``OUT`` exists without ``force``, or whose
    ``OUT`` (with ``force``), ``OUT.partial`` or ``OUT.publishing`` holds something that is not
    a table store of this package (:func:`qpinfer.tables.replace.check_replaceable`): such paths are
    never replaced or deleted."""
    try:
        if out.exists() or out.is_symlink():
            if not force:
                raise BuildInputError(f"OUT: {out} already exists; pass --force to replace it")
            check_replaceable(out, what="OUT")
        check_replaceable(partial_path(out), what="OUT (its unfinished build)")
        check_replaceable(publishing_path(out), what="OUT (its publishing copy)")
    except ReplaceRefusedError as exc:
        raise BuildInputError(str(exc)) from None
