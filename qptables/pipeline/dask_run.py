"""The dask run of a build: a ``distributed`` client (a new ``LocalCluster`` or an existing
scheduler), its workers, and one pure task per tile
(:class:`~qptables.pipeline.dask_run.TileTask`: the grid's
:func:`qptables.pipeline.tiles.compute_tile`, the cells' :func:`qptables.pipeline.cells.run_tile`),
written in place by the workers; the client only ever holds tiny per-tile reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qptables.pipeline.errors import BuildError, BuildInputError, os_error_text

__all__ = [
    "SINGLE_THREAD_ENV",
    "WORKER_WAIT_SECONDS",
    "TileTask",
    "connect_scheduler",
    "completed",
    "connect_workers",
    "open_client",
    "probe_scheduler",
    "run_tiles",
]

#: Environment for worker processes: single-threaded numerical libraries (one task per core).
SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
}
#: How long a build on an external scheduler waits for its first worker.
WORKER_WAIT_SECONDS = 600


def probe_scheduler(address: str, timeout: float | None = None) -> None:
    """:func:`qpinfer.dask_connect.probe_scheduler`, its error a :class:`~qptables.BuildInputError`
    naming ``--scheduler``."""
    from qpinfer.dask_connect import SchedulerUnreachable
    from qpinfer.dask_connect import probe_scheduler as probe

    try:
        probe(address, timeout)
    except SchedulerUnreachable as exc:
        raise BuildInputError(f"--scheduler: {exc}") from None


def connect_scheduler(address: str) -> Any:
    """A ``distributed.Client`` on the scheduler at ``address`` within dask's connect timeout,
    handshake included (:func:`qpinfer.dask_connect.connect_client`); else
    :class:`~qptables.BuildInputError` naming ``--scheduler``."""
    from qpinfer.dask_connect import SchedulerUnreachable, connect_client

    try:
        return connect_client(address)
    except SchedulerUnreachable as exc:
        raise BuildInputError(f"--scheduler: {exc}") from None


@contextlib.contextmanager
def open_client(scheduler: str | None, workers: int | None) -> Iterator[Any]:
    """A dask.distributed client: on ``scheduler`` or on a new LocalCluster of ``workers``
    (:func:`qpinfer.dask_connect.local_cluster_client`: single-threaded worker processes with
    :data:`SINGLE_THREAD_ENV`, and logs silenced -- task errors reach the user once, summarised by
    the build (:class:`~qptables.BuildError`), not as the workers' and scheduler's logged
    tracebacks)."""
    from qpinfer.dask_connect import local_cluster_client

    if scheduler is not None:
        with connect_scheduler(scheduler) as client:
            yield client
    else:
        with local_cluster_client(
            workers, env=SINGLE_THREAD_ENV, silence_logs=logging.CRITICAL
        ) as client:
            yield client


def dashboard(client: Any) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:  # noqa: BLE001 - no dashboard service is not an error
        return None
    info = client.scheduler_info()
    services = info.get("services", {}) if isinstance(info, dict) else {}
    if "dashboard" not in services or not link:
        return None
    import importlib.util

    if importlib.util.find_spec("bokeh") is None:
        link += " (the status pages need bokeh installed where the scheduler runs)"
    return link


def connect_workers(client: Any, partial: Path, say: Callable[[str], None]) -> int:
    """Wait for the first worker (an external scheduler may have none yet), say what runs
    where, and check every worker sees ``partial``; returns the number of worker threads."""
    nthreads = client.nthreads()
    if not nthreads:
        say(f"  waiting up to {WORKER_WAIT_SECONDS} s for workers to connect ...")
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        except (TimeoutError, OSError) as exc:
            raise BuildError(
                f"--scheduler: no dask worker connected within {WORKER_WAIT_SECONDS} s "
                f"({exc!r}); start workers (dask worker ADDRESS --nthreads 1) and re-run"
            ) from None
        time.sleep(1.0)  # let the other workers of a starting cluster join too
        nthreads = client.nthreads()
    n_workers = max(1, sum(nthreads.values()))
    say(f"  workers: {n_workers} ({'scheduler ' + client.scheduler.address})")
    if any(n > 1 for n in nthreads.values()):
        say(
            "  note: some workers run several threads; one single-threaded worker process "
            "per core (dask worker --nthreads 1, OMP_NUM_THREADS=1) is faster for this kernel"
        )
    link = dashboard(client)
    if link:
        say(f"  dashboard: {link}")
    visible = client.run(os.path.isdir, str(partial))
    if not all(visible.values()):
        bad = [w for w, ok in visible.items() if not ok]
        raise BuildInputError(
            f"--scheduler: workers {bad} cannot see {partial}; OUT must be on a file system "
            f"shared by the client and all workers"
        )
    return n_workers


def _written_array(partial: Path, filename: Any) -> Path:
    """The array directory of ``partial`` the file ``filename`` belongs to (else ``partial``)."""
    try:
        return partial / Path(filename).relative_to(partial).parts[0]
    except (TypeError, ValueError, IndexError):
        return partial


#: How often (seconds) a wait on tiles looks at the cluster while no tile finishes.
_POLL_SECONDS = 5.0


class _ClusterWatch:
    """Raises :class:`~qptables.BuildError` once the cluster has had no worker for
    :data:`WORKER_WAIT_SECONDS`, or its scheduler has not answered for that long."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.last_seen = self.last_poll = time.monotonic()

    def check(self, left_to_do: int) -> None:
        now = time.monotonic()
        if now - self.last_poll < _POLL_SECONDS:
            return
        self.last_poll = now
        left = max(WORKER_WAIT_SECONDS - (now - self.last_seen), 1.0)
        try:
            info = self.client.sync(self.client.scheduler.identity, callback_timeout=left)
        except (TimeoutError, OSError) as exc:
            raise BuildError(
                f"the dask scheduler did not answer for {WORKER_WAIT_SECONDS} s ({exc}); the "
                "finished tiles are kept, re-run to resume"
            ) from None
        if info["workers"]:
            self.last_seen = now
        elif now - self.last_seen >= WORKER_WAIT_SECONDS:
            raise BuildError(
                f"the dask cluster has had no worker for {WORKER_WAIT_SECONDS} s with "
                f"{left_to_do} tiles still to compute; the finished tiles are kept, re-run "
                "(with workers) to resume"
            )


def completed(client: Any, futures: list) -> Iterator[tuple[Any, Any]]:
    """``(future, result)`` of the tile futures as they finish (``result`` None for a failed
    task: ``future.status == "error"``). A build may run for hours, but never waits on nothing:
    :class:`~qptables.BuildError` once the cluster has had no worker for :data:`WORKER_WAIT_SECONDS`
    (every worker died or was removed: dask would wait for one forever; a finished tile's result
    held by a dead worker is lost and recomputed too) or its scheduler stops answering."""
    from distributed import as_completed

    watch = _ClusterWatch(client)
    pending = as_completed(futures, loop=client.loop)  # not the default client's: ours
    while not pending.is_empty():
        batch = pending.next_batch(block=False)
        if not batch:
            time.sleep(0.05)
            watch.check(pending.count())
            continue
        for fut in batch:
            while fut.status != "error":
                try:
                    value = fut.result(timeout=_POLL_SECONDS)
                    break
                except TimeoutError:
                    watch.check(pending.count() + 1)
            else:
                value = None
            yield fut, value


@dataclass(frozen=True)
class TileTask:
    """One tile's task: ``func(*args, *futures of the tiles in after)`` on a worker, which writes
    the tile into the build store and returns a small report. ``name`` is how an error names the
    tile (e.g. ``"tile 3/10 of y=1"``); ``after``: tiles of the same run whose tasks must finish
    first (the probit mirror's sources); ``priority``: dask's (higher first)."""

    tile: Hashable
    name: str
    func: Callable[..., Any]
    args: tuple
    after: tuple = ()
    priority: int = 1


def run_tiles(
    client: Any, partial: Path, tasks: list[TileTask], progress: bool
) -> list[dict[str, Any]]:
    """Submit one task per tile (``tasks`` in order: a task's ``after`` tiles come earlier) and
    wait with a progress bar (:func:`completed`); returns the tasks' reports. A failed task is a
    :class:`~qptables.BuildError` naming its tile (and for a failed write the array and the
    reason, e.g. a full disk); the finished tiles stay in ``partial`` for the next run."""
    token = uuid.uuid4().hex[:8]
    futures: dict[Hashable, Any] = {}
    named: dict[str, TileTask] = {}
    for i, task in enumerate(tasks):
        key = f"qptile-{token}-{i}"
        named[key] = task
        deps = [futures[t] for t in task.after if t in futures]
        futures[task.tile] = client.submit(
            task.func, *task.args, *deps, key=key, pure=False, retries=2, priority=task.priority
        )
    if not futures:
        return []
    reports = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(futures), unit="tile", desc="tiles", file=sys.stderr)
    try:
        for fut, report in completed(client, list(futures.values())):
            if fut.status == "error":
                exc = fut.exception()
                tile = named[str(fut.key)].name
                keep = "; the other tiles are kept, re-run to resume"
                if isinstance(exc, OSError):  # a full disk...: the phase and the path
                    where = _written_array(partial, exc.filename)
                    raise BuildError(
                        f"writing {tile} to {where}: {os_error_text(exc, where)}{keep}"
                    ) from exc
                raise BuildError(
                    f"the task of {tile} failed: {type(exc).__name__}: {exc}{keep}"
                ) from exc
            reports.append(report)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        for fut in futures.values():
            fut.cancel()
    return reports
