"""Where the dask sweep's data partitions come from (:mod:`qpinfer.inference.sparse.dask_sweep`):
the client for a ``scheduler=`` argument, and the partitions' rows placed on the workers.

Two kinds of input:

* **numpy** ``X, y`` (in the client's memory): contiguous row blocks (``n_partitions`` of
  near-equal size, default one per worker, or explicit ``partition_sizes``), each sent once
  (``client.scatter``) to its worker, dealt round-robin;
* **dask arrays** ``X`` (and ``y``, or a numpy ``y``): the row chunks of ``X`` are the partitions,
  and each is *computed on its worker* (``client.compute(..., workers=[w])``) -- e.g. read there
  from a zarr store on shared storage with :func:`dask.array.from_zarr` -- so ``X`` never passes
  through the client: N beyond one machine's memory is a cluster job. Only the site vectors
  (O(N) floats, 6 per point) come back to the client at the end.

``dask`` and ``distributed`` are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from qpinfer.dask_connect import connect_client, local_cluster_client
from qpinfer.inference.sparse.pseudo_points import _check_kernel

__all__ = ["QUIET_LOCAL_CONFIG", "client_for", "local_client", "place_partitions"]

#: dask settings of the ``"local"`` cluster (:func:`local_client`): its processes wake less often
#: (defaults: event-loop tick 20 ms, system monitor 500 ms, memory monitor 100 ms). Two workers on
#: two cores share them with the scheduler, the nannies and the client, and a sweep waits for its
#: slowest partition; per sweep at N = 2e5, M = 100 on 2 cores: 0.164 -> 0.142 s with 2 workers
#: (1 -> 2 worker scaling 1.58x -> 1.79x, ``benchmarks/bench_dask_sweep.py``).
QUIET_LOCAL_CONFIG = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
}


def local_client(n_workers: int | None = None) -> contextlib.AbstractContextManager[Any]:
    """The ``"local"`` cluster of the sweep: :func:`qpinfer.dask_connect.local_cluster_client` of
    ``n_workers`` (default: one per core) single-threaded worker processes with
    :data:`QUIET_LOCAL_CONFIG`, as a context manager that yields the client and closes both."""
    return local_cluster_client(n_workers, config=QUIET_LOCAL_CONFIG)


@contextlib.contextmanager
def client_for(scheduler: Any) -> Iterator[Any]:
    """A ``distributed.Client`` for ``scheduler``: a ``Client`` (used as is), ``"local"``
    (:func:`local_client`: one single-threaded worker process per core, closed afterwards) or a
    scheduler address such as ``"tcp://host:8786"`` (connected within dask's connect timeout,
    handshake included -- :class:`~qpinfer.dask_connect.SchedulerUnreachable` otherwise --
    closed afterwards)."""
    from distributed import Client

    if isinstance(scheduler, Client):
        yield scheduler
    elif isinstance(scheduler, str) and scheduler == "local":
        with local_client() as client:
            yield client
    elif isinstance(scheduler, str) and scheduler:
        # a deadline that covers the dask handshake too (qpinfer.dask_connect)
        with connect_client(scheduler) as client:
            yield client
    else:
        raise ValueError(
            "scheduler must be 'local', a scheduler address (e.g. 'tcp://host:8786') or a "
            f"distributed.Client, got {scheduler!r}"
        )


def is_dask_array(x: Any) -> bool:
    """A dask array (checked without importing dask)."""
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks")


@dataclass
class Partition:
    """One partition: its rows of the data, its worker, and ``X_p``, ``y_p`` as futures (or
    values) held there."""

    rows: slice
    worker: str
    X: Any
    y: Any


def check_data(kernel, X, y, Z) -> tuple[Any, Any, np.ndarray]:
    """``(X, y, Z)`` checked: shapes (a dask ``X`` or ``y`` is checked without computing it;
    its values are checked on the workers, :func:`check_partition`)."""
    _check_kernel(kernel)
    X = X.astype(np.float64) if is_dask_array(X) else np.asarray(X, dtype=np.float64)
    y = y if is_dask_array(y) else np.asarray(y)
    Z = np.asarray(Z, dtype=np.float64)
    if X.ndim != 2 or not X.shape[0] >= 1:  # (a dask array of unknown chunk sizes: NaN rows)
        raise ValueError(
            f"X must be a 2-D array with at least one row (a dask array: with known chunk "
            f"sizes), got shape {X.shape}"
        )
    if y.shape != (X.shape[0],):
        raise ValueError(
            f"y must have shape ({X.shape[0]},) (one label per row of X), got {y.shape}"
        )
    if Z.ndim != 2 or Z.shape[1] != X.shape[1] or Z.shape[0] < 1:
        raise ValueError(f"Z must be a (M, {X.shape[1]}) array with M >= 1, got shape {Z.shape}")
    return X, y, Z


def check_partition(X: Any, rows: slice) -> np.ndarray:
    """``X_p`` as a float64 array, refused unless finite (on the worker, for either input)."""
    X = np.asarray(X, dtype=np.float64)
    if not np.all(np.isfinite(X)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(X), axis=1))[0]) + rows.start
        raise ValueError(f"X must be finite; row {bad} holds a NaN or an infinity")
    return X


def partition_bounds(n: int, n_partitions: Any, partition_sizes: Any, n_workers: int) -> list:
    """The row slices of numpy data: ``n_partitions`` near-equal blocks (default one per
    worker) or explicit ``partition_sizes``."""
    if partition_sizes is not None:
        if n_partitions is not None:
            raise ValueError("give n_partitions or partition_sizes, not both")
        sizes = np.asarray(partition_sizes)
        ok = sizes.ndim == 1 and sizes.size >= 1 and np.issubdtype(sizes.dtype, np.integer)
        if not (ok and np.all(sizes >= 1) and int(sizes.sum()) == n):
            raise ValueError(
                f"partition_sizes must be positive integers summing to the {n} data rows, got "
                f"{partition_sizes!r}"
            )
    else:
        k = n_workers if n_partitions is None else n_partitions
        is_int = isinstance(k, int | np.integer) and not isinstance(k, bool)
        if not (is_int and 1 <= k <= n):
            raise ValueError(
                f"n_partitions must be None (one per worker) or an integer in [1, {n}] (the data "
                f"rows), got {n_partitions!r}"
            )
        sizes = np.full(k, n // k) + (np.arange(k) < n % k)
    ends = np.cumsum(sizes)
    return [slice(int(e - s), int(e)) for s, e in zip(sizes, ends, strict=True)]


def place_partitions(
    client: Any,
    X: Any,
    y: Any,
    n_partitions: Any = None,
    partition_sizes: Any = None,
    timeout: float = 600.0,
) -> list[Partition]:
    """The partitions of checked ``X, y`` (:func:`check_data`) on the workers of ``client``,
    dealt round-robin (module docstring); sending one to its worker may take ``timeout``
    seconds, then a ``TimeoutError`` names the worker."""
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ValueError("the dask cluster has no workers")
    n = X.shape[0]
    if is_dask_array(X):
        if n_partitions is not None or partition_sizes is not None:
            raise ValueError(
                "the row chunks of a dask array X are the partitions: rechunk X instead of "
                f"giving n_partitions={n_partitions!r} or partition_sizes={partition_sizes!r}"
            )
        bounds = partition_bounds(n, None, X.chunks[0], 1)
        X_blocks = X.rechunk({1: -1}).to_delayed()[:, 0]
    else:
        bounds = partition_bounds(n, n_partitions, partition_sizes, len(workers))
        X_blocks = [X[sl] for sl in bounds]
    if is_dask_array(y):
        y_blocks = y.rechunk((tuple(sl.stop - sl.start for sl in bounds),)).to_delayed()
    else:
        y_blocks = [y[sl] for sl in bounds]
    parts = []
    for p, (sl, Xp, yp) in enumerate(zip(bounds, X_blocks, y_blocks, strict=True)):
        where = [workers[p % len(workers)]]
        try:
            Xp, yp = (
                client.compute(b, workers=where)
                if hasattr(b, "dask")
                # Client.scatter's own timeout does not cover the scheduler's wait on the
                # worker (a paused worker holds it forever); the loop's callback_timeout does
                else client.sync(client._scatter, b, workers=where, callback_timeout=timeout)
                for b in (Xp, yp)
            )
        except (TimeoutError, OSError) as err:
            raise TimeoutError(
                f"dask sweep: partition {p} could not be sent to worker {where[0]} within "
                f"{timeout:g} s ({err}); the worker is hung, paused or cut off"
            ) from None
        parts.append(Partition(sl, where[0], Xp, yp))
    return parts
