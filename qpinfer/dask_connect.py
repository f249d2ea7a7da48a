"""Reaching a dask scheduler within a deadline, handshake included.

``distributed.Client(address, timeout=...)`` bounds only the TCP connect: against a server that
accepts and never answers the dask handshake (a web server, a dashboard port) it waits forever,
and one that answers other bytes can make it allocate a bogus frame length (``MemoryError``).
:func:`probe_scheduler` asks the server what it is (connect, handshake, one ``identity`` call)
under one overall deadline, in its own thread, and :func:`connect_client` makes the ``Client``
only after it answered as a scheduler. :func:`local_cluster_client` starts the other kind of
cluster, a new ``LocalCluster`` on this machine. Used by the dask sweep
(:mod:`qpinfer.inference.sparse.dask_partitions`) and by ``qptables`` (builds, ``verify
--scheduler``). ``dask`` and ``distributed`` are imported inside the functions: ``import
qpinfer`` never imports them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "SchedulerUnreachable",
    "connect_client",
    "connect_seconds",
    "local_cluster_client",
    "probe_scheduler",
]


class SchedulerUnreachable(ConnectionError):
    """No dask scheduler answered at the address within the deadline (the message says why)."""


def connect_seconds() -> float:
    """The deadline for reaching a scheduler, handshake included: dask's
    ``distributed.comm.timeouts.connect`` (default 30 s; e.g. the environment variable
    ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s``)."""
    import dask
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s"))


async def _identity(address: str, timeout: float) -> Any:
    """The ``identity`` of the dask server at ``address``: TCP connect (retried, as dask does,
    while nothing accepts -- a scheduler may still be starting), the dask handshake, one call."""
    from distributed.comm import connect
    from distributed.security import Security

    args = Security().get_connection_args("client")
    comm = await connect(address, timeout=timeout, **args)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def probe_scheduler(address: str, timeout: float | None = None) -> None:
    """Check that a dask scheduler answers at ``address``, within ``timeout`` seconds in all
    (default :func:`connect_seconds`) -- TCP connect, handshake and an ``identity`` call.

    ``distributed.Client`` bounds only the TCP connect: against a server that accepts and never
    answers the dask handshake (a web server, a dashboard port) it waits forever, and one that
    answers other bytes can make it allocate a bogus frame length (``MemoryError``). Raises
    :class:`SchedulerUnreachable` naming the address: not reachable, or not speaking the dask
    protocol (with what happened), or a dask server that is not a scheduler.
    """
    import asyncio
    import threading

    timeout = connect_seconds() if timeout is None else float(timeout)
    outcome: dict[str, Any] = {}

    def run() -> None:  # own thread and event loop: the caller may be inside one
        try:
            # the connect retries for 80 % of the deadline; the rest is for the handshake
            ask = asyncio.wait_for(_identity(address, 0.8 * timeout), timeout)
            outcome["identity"] = asyncio.run(ask)
        except BaseException as exc:  # noqa: BLE001 - reported below, whatever it was
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="qpinfer-probe-scheduler", daemon=True)
    thread.start()
    thread.join(timeout + 5.0)
    hint = "is it the address of a dask scheduler (tcp://HOST:8786; not its dashboard port)?"
    if "identity" in outcome:
        identity = outcome["identity"]
        kind = identity.get("type") if isinstance(identity, dict) else None
        if kind == "Scheduler":
            return
        if isinstance(kind, str):
            raise SchedulerUnreachable(f"{address} is a dask {kind}, not a scheduler; {hint}")
        raise SchedulerUnreachable(
            f"{address} does not speak the dask protocol (answered {identity!r:.80}); {hint}"
        )
    exc = outcome.get("error")
    if type(exc) is OSError and str(exc).startswith("Timed out trying to connect"):
        cause = exc
        while cause.__cause__ is not None:  # the socket's own error, not dask's wrappers
            cause = cause.__cause__
        why = f"{type(cause).__name__}: {cause}" if cause is not exc else str(exc)
        raise SchedulerUnreachable(
            f"cannot connect to {address} within {timeout:g} s ({why}); is the "
            f"scheduler running and reachable from here?"
        )
    from distributed.comm import CommClosedError

    if exc is None or isinstance(exc, TimeoutError):
        what = f"no answer to the dask handshake within {timeout:g} s"
    elif isinstance(exc, CommClosedError):
        what = "it closed the connection during the dask handshake"
    else:  # e.g. a MemoryError: another protocol's bytes read as a huge dask frame length
        what = f"its answer is no dask message: {type(exc).__name__}: {exc}"
        what = " ".join(what.split())[:240]
    raise SchedulerUnreachable(f"{address} does not speak the dask protocol ({what}); {hint}")


def connect_client(address: str, timeout: float | None = None) -> Any:
    """A ``distributed.Client`` on the scheduler at ``address``, once :func:`probe_scheduler`
    found one there (both within ``timeout``, default :func:`connect_seconds`)."""
    from distributed import Client

    timeout = connect_seconds() if timeout is None else float(timeout)
    probe_scheduler(address, timeout)
    try:
        return Client(address, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - the scheduler went away since the probe
        raise SchedulerUnreachable(
            f"cannot connect to {address} ({type(exc).__name__}: {exc})"
        ) from None


@contextlib.contextmanager
def local_cluster_client(
    n_workers: int | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    silence_logs: int | bool = logging.WARNING,
) -> Iterator[Any]:
    """A ``distributed.Client`` on a new ``LocalCluster`` of ``n_workers`` (default: one per
    core) single-threaded worker processes (one task at a time per process: the numerical
    kernels run one per core), dashboard on a free port; client and cluster closed afterwards.

    What the callers legitimately differ in:

    * ``config`` -- dask settings in force while the cluster starts (its worker processes
      inherit them) and runs. The dask sweep
      (:func:`qpinfer.inference.sparse.dask_partitions.local_client`) passes
      :data:`~qpinfer.inference.sparse.dask_partitions.QUIET_LOCAL_CONFIG`: processes that wake less
      often, because a sweep is a short round trip that waits for its slowest partition. A
      ``qptables`` build passes none: its tasks are tiles of seconds or more, beside which dask's
      default intervals cost nothing.
    * ``env`` -- environment variables of the worker processes. A build
      (:func:`qptables.pipeline.dask_run.open_client`) passes ``SINGLE_THREAD_ENV`` (every
      threaded numerical library held to one thread, numexpr and Accelerate included: one tile
      per core); the sweep passes none (its workers get this process's environment and the
      nanny's ``distributed.nanny.pre-spawn-environ``, single-threaded OpenMP/MKL/OpenBLAS).
    * ``silence_logs`` -- the level below which the cluster's own logging is silenced (dask's
      default ``logging.WARNING``, which the sweep keeps). A build passes ``logging.CRITICAL``:
      a failed tile reaches the user once, summarised by the build's error, not as the
      workers' and scheduler's logged tracebacks.
    """
    import dask
    from distributed import Client, LocalCluster

    n = n_workers or os.cpu_count() or 1
    with (
        dask.config.set(dict(config or {})),
        LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            silence_logs=silence_logs,
            env=None if env is None else dict(env),
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
