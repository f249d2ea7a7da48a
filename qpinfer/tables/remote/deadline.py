"""Time and speed limits of a transfer (:mod:`qpinfer.tables.remote.transfer`).

A transfer is bounded by how *slowly* it goes, not by how long it takes, as curl's
``--speed-limit``/``--speed-time``: a 912 MiB table at 1 MB/s takes a quarter of an hour and
must finish, while a host that trickles a few bytes a second must not hold a download for ever.

* :class:`SpeedLimit`: a response whose body arrives at fewer than ``low_speed_limit`` bytes/s
  (default :data:`LOW_SPEED_LIMIT`) averaged over the last ``low_speed_time`` seconds (default
  :data:`LOW_SPEED_TIME`) is abandoned. Its response headers must also arrive within
  ``low_speed_time`` (a :class:`Watchdog` shuts the socket down otherwise: ``http.client`` reads
  the headers in one call, so a host trickling them never lets a socket timeout fire).
* Each blocking network operation (connect, one read) waits at most ``stall_timeout`` seconds
  (the socket timeout, default :data:`STALL_TIMEOUT`): a silent host ends there.
  :func:`read_some` returns as soon as any bytes arrive, so the caller checks the speed between
  reads.
* An optional overall :class:`Deadline` (``timeout``; none by default) shared by every attempt,
  retries and back-off included; the :class:`Watchdog` shuts a request's sockets down when it
  passes. (Name resolution, ``getaddrinfo``, is the one wait the standard library gives no
  timeout for.)

All three are keyword arguments of :func:`qpinfer.tables.download` (``low_speed_limit=``,
``low_speed_time=``, ``stall_timeout=``, ``timeout=``).
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import math
import socket
import threading
import time
import urllib.request
from typing import Any

__all__ = [
    "LOW_SPEED_LIMIT",
    "LOW_SPEED_TIME",
    "STALL_TIMEOUT",
    "Deadline",
    "SpeedLimit",
    "Watchdog",
    "as_deadline",
    "check_positive",
    "check_timeout",
    "read_some",
    "watched_opener",
]

#: Longest wait (seconds) for one network operation (connect, one read) before it is retried.
STALL_TIMEOUT = 30.0
#: Slowest accepted transfer rate (bytes/s), averaged over :data:`LOW_SPEED_TIME` (10 KiB/s: a
#: 912 MiB table would take a day at that rate).
LOW_SPEED_LIMIT = 10 * 1024
#: Window (seconds) over which the rate is averaged against :data:`LOW_SPEED_LIMIT`.
LOW_SPEED_TIME = 60.0


def check_positive(value: float, name: str, unit: str = "seconds") -> float:
    """``value`` as a float if it is a positive, finite number (else a ``ValueError`` naming
    ``name``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive, finite number of {unit}, got {value!r}")
    return number


def check_timeout(timeout: float, name: str = "timeout") -> float:
    """``timeout`` as a float if it is a positive, finite number of seconds."""
    return check_positive(timeout, name)


class Deadline:
    """The end of an overall time budget of ``seconds`` from now (``time.monotonic``), shared by
    every attempt of a transfer (and by the manifest and the archive of one download);
    ``seconds=None``: no end."""

    def __init__(self, seconds: float | None, name: str = "timeout") -> None:
        self.seconds = None if seconds is None else check_timeout(seconds, name)
        self.start = time.monotonic()
        self.end = math.inf if self.seconds is None else self.start + self.seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def wait_limit(self, stall_timeout: float = STALL_TIMEOUT) -> float:
        """Socket timeout of the next blocking operation: ``stall_timeout``, cut at the end."""
        return max(min(stall_timeout, self.remaining()), 1e-3)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, but not past the end."""
        time.sleep(max(0.0, min(seconds, self.remaining())))


def as_deadline(timeout: float | Deadline | None) -> Deadline:
    return timeout if isinstance(timeout, Deadline) else Deadline(timeout)


class SpeedLimit:
    """Fewer than ``limit`` bytes/s over the last ``window`` seconds of one response's body is
    too slow (curl's ``--speed-limit``/``--speed-time``)."""

    def __init__(self, limit: float = LOW_SPEED_LIMIT, window: float = LOW_SPEED_TIME) -> None:
        self.limit = check_positive(limit, "low_speed_limit", "bytes per second")
        self.window = check_positive(window, "low_speed_time")
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def restart(self, have: int) -> None:
        """A new response starts, with ``have`` bytes received before it."""
        self._samples = collections.deque([(time.monotonic(), have)])

    def too_slow(self, have: int) -> str | None:
        """After a read (``have`` bytes so far): why the response is too slow, else ``None``."""
        now = time.monotonic()
        samples = self._samples
        samples.append((now, have))
        while len(samples) > 2 and samples[1][0] <= now - self.window:
            samples.popleft()  # keep one sample at or before the window's start
        t0, have0 = samples[0]
        if now - t0 < self.window:
            return None
        rate = (have - have0) / (now - t0)
        if rate >= self.limit:
            return None
        return (
            f"{have - have0} bytes in the last {now - t0:.1f} s ({rate:.0f} bytes/s), below the "
            f"low-speed limit of {self.limit:.0f} bytes/s over {self.window:g} s"
        )


def read_some(resp: Any, n: int) -> bytes:
    """At most ``n`` bytes of ``resp``'s body: returns as soon as any arrive (``b""`` at its
    end) -- so the caller can check its limits between reads, however slowly bytes come."""
    read1 = getattr(resp.body, "read1", None)
    return read1(n) if read1 is not None else resp.body.read(n)


class Watchdog:
    """Shuts down the sockets of one request ``seconds`` from now (``None``: never, until
    ``rearm``), waking a read that is blocked in the middle of a response's headers or body
    (a server trickling bytes keeps a socket timeout from ever firing)."""

    def __init__(self, seconds: float | None) -> None:
        self.sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._fired = False
        self._timer: threading.Timer | None = None
        self.rearm(seconds)

    def rearm(self, seconds: float | None) -> None:
        """Fire ``seconds`` from now instead (``None``: never); no effect once fired."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
            if self._fired or seconds is None or math.isinf(seconds):
                return
            self._timer = threading.Timer(max(seconds, 0.0), self._fire)
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

    @property
    def fired(self) -> bool:
        return self._fired

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self.rearm(None)


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
