"""Time limits of a transfer (:mod:`qpinfer.tables.remote.transfer`): an overall
:class:`~qpinfer.tables.remote.deadline.Deadline` shared by every attempt, retries and back-off
included, and reads whose every wait is cut at it.

Each blocking network operation (connect, one read) waits at most :data:`STALL_TIMEOUT` seconds
(the socket timeout, set at connect to no more than what is left); :func:`read_some` returns as
soon as any bytes arrive, so the caller checks the deadline between reads; and a
:class:`Watchdog` shuts a request's sockets down when the deadline passes, so a server that sends
one byte every few seconds -- of its body or of its headers, which ``http.client`` reads in one
call -- cannot hold a transfer past it. (Name resolution, ``getaddrinfo``, is the one wait the
standard library gives no timeout for.)
"""

from __future__ import annotations

import contextlib
import http.client
import math
import socket
import threading
import time
import urllib.request
from typing import Any

__all__ = [
    "STALL_TIMEOUT",
    "Deadline",
    "Watchdog",
    "as_deadline",
    "check_timeout",
    "read_some",
    "watched_opener",
]

#: Longest wait (seconds) for one network operation (connect, one read) before it is retried.
STALL_TIMEOUT = 30.0


def check_timeout(timeout: float, name: str = "timeout") -> float:
    """``timeout`` as a float if it is a positive, finite number of seconds."""
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(timeout, bool) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {timeout!r}")
    return value


class Deadline:
    """The end of an overall time budget of ``seconds`` from now (``time.monotonic``), shared by
    every attempt of a transfer (and by the manifest and the archive of one download)."""

    def __init__(self, seconds: float, name: str = "timeout") -> None:
        self.seconds = check_timeout(seconds, name)
        self.start = time.monotonic()
        self.end = self.start + self.seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def wait_limit(self) -> float:
        """Socket timeout of the next blocking operation: :data:`STALL_TIMEOUT`, cut at the end."""
        return max(min(STALL_TIMEOUT, self.remaining()), 1e-3)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, but not past the end."""
        time.sleep(max(0.0, min(seconds, self.remaining())))


def as_deadline(timeout: float | Deadline) -> Deadline:
    return timeout if isinstance(timeout, Deadline) else Deadline(timeout)


def read_some(resp: Any, n: int) -> bytes:
    """At most ``n`` bytes of ``resp``'s body: returns as soon as any arrive (``b""`` at its
    end) -- so the caller can check its deadline between reads, however slowly bytes come."""
    read1 = getattr(resp.body, "read1", None)
    return read1(n) if read1 is not None else resp.body.read(n)


class Watchdog:
    """Shuts down the sockets of one request when its deadline passes, waking a read that is
    blocked in the middle of a response's headers or body (a server trickling bytes keeps a
    socket timeout from ever firing)."""

    def __init__(self, deadline: Deadline) -> None:
        self.sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._fired = False
        self._timer = threading.Timer(max(deadline.remaining(), 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self.sockets.append(sock)
            fired = self._fired
        if fired:
            self._shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            socks = list(self.sockets)
        for sock in socks:
            self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def watched_opener(watchdog: Watchdog) -> urllib.request.OpenerDirector:
    """A ``urllib`` opener (proxies, redirects and https as ``urlopen``'s) whose connections
    register their sockets with ``watchdog``."""

    def tracked(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        class Tracked(base):  # type: ignore[valid-type, misc]
            def connect(self) -> None:
                super().connect()
                watchdog.add(self.sock)

        return Tracked

    http_conn = tracked(http.client.HTTPConnection)
    https_conn = tracked(http.client.HTTPSConnection)

    class HTTP(urllib.request.HTTPHandler):
        def do_open(self, http_class, req, **kwargs):  # noqa: ARG002 - replaced by ours
            return super().do_open(http_conn, req, **kwargs)

    class HTTPS(urllib.request.HTTPSHandler):
        def do_open(self, http_class, req, **kwargs):  # noqa: ARG002 - replaced by ours
            return super().do_open(https_conn, req, **kwargs)

    return urllib.request.build_opener(HTTP(), HTTPS())
