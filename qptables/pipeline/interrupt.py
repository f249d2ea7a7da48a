"""Stopping a build cleanly on SIGTERM (and Ctrl-C): the lock released, the cluster closed,
nothing that looks finished left behind, and one line saying where the finished tiles are kept.

SIGTERM -- what ``kill``, ``docker stop``, Kubernetes and SLURM send -- would otherwise end the
process at once, leaving the lock ``OUT.lock`` (taken over as stale by the next run) and no
message. :func:`stop_on_signals` makes SIGTERM raise
:class:`~qptables.pipeline.errors.BuildInterrupted` in the main thread, so the build unwinds as for
Ctrl-C: ``finally`` blocks release the lock and close the client and cluster, a half-written
``OUT.publishing`` is deleted, ``OUT.partial`` (never marked complete) keeps its finished tiles, and
the next run resumes from them. :func:`deferred_sigterm` holds a SIGTERM back during a step that
must not be cut short (the publishing rename). Only the main thread can handle signals; elsewhere,
or when the program already handles SIGTERM itself, nothing is installed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from qptables.pipeline.errors import BuildInterrupted

__all__ = ["deferred_sigterm", "stop_on_signals"]

# process-wide, as signal handlers are: deferral depth, a signal held back, raised already
_state: dict = {"deferring": 0, "pending": None, "raised": False}


def _on_sigterm(signum: int, _frame: object) -> None:
    if _state["raised"]:  # already unwinding: let the clean-up finish
        return
    if _state["deferring"]:
        _state["pending"] = signum
        return
    _state["raised"] = True
    raise BuildInterrupted(signum)


@contextlib.contextmanager
def deferred_sigterm() -> Iterator[None]:
    """Run the block to its end even if SIGTERM arrives meanwhile; raise it afterwards."""
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        pending = _state["pending"]
        if not _state["deferring"] and pending is not None:
            _state["pending"] = None
            if not _state["raised"]:
                _state["raised"] = True
                raise BuildInterrupted(pending)


def interrupted_message(signame: str, partial: Path) -> str:
    """What an interrupted build says: where its finished tiles are kept, if anywhere."""
    if partial.exists():
        return (
            f"interrupted by {signame}; the lock is released and the finished tiles are kept "
            f"in {partial}: run the same command again to resume"
        )
    return f"interrupted by {signame}; the lock is released, nothing unfinished was kept"


@contextlib.contextmanager
def stop_on_signals(partial: Path) -> Iterator[None]:
    """Within the block SIGTERM raises :class:`~qptables.pipeline.errors.BuildInterrupted` (see the
    module doc); a SIGTERM or Ctrl-C leaving the block is re-raised as one whose message says where
    the finished tiles are kept (:func:`interrupted_message`)."""
    install = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if install else None
    if install:
        _state.update(deferring=0, pending=None, raised=False)
    try:
        yield
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, BuildInterrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        raise BuildInterrupted(signum, interrupted_message(name, partial)) from None
    finally:
        if install:
            signal.signal(signal.SIGTERM, previous)
