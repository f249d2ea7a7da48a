"""Reaching a dask scheduler within a deadline, handshake included.

``distributed.Client(address, timeout=...)`` bounds only the TCP connect: against a server that
accepts and never answers the dask handshake (a web server, a dashboard port) it waits forever,
and one that answers other bytes can make it allocate a bogus frame length (``MemoryError``).
:func:`probe_scheduler` asks the server what it is (connect, handshake, one ``identity`` call)
under one overall deadline, in its own thread, and :func:`connect_client` makes the ``Client``
only after it answered as a scheduler. Used by the dask sweep (:mod:`qpinfer.inference.sparse.dask_partitions`)
and by ``qptables`` (builds, ``verify --scheduler``). ``distributed`` is imported inside the
functions: ``import qpinfer`` never imports it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SchedulerUnreachable", "connect_client", "connect_seconds", "probe_scheduler"]


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
