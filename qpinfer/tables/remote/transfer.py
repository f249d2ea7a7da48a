# Over 400 lines: one transfer (URL, manifest, resumable fetch, retries) whose steps share one set of limits (speed, size, deadline) and one error type.
"""Talking to a table host (:mod:`qpinfer.tables.remote.install`): resolving its URL, reading its
``manifest.json``, and fetching an archive over http(s) or from a ``file://`` URL -- resuming an
interrupted transfer with an HTTP ``Range`` request (a server that ignores it sends the whole
file again) and retrying connection failures with exponential back-off.

HTTP is the standard library's :mod:`urllib` -- chosen over pooch/fsspec to keep qpinfer's
dependencies at numpy, scipy and zarr; it covers http(s) and file URLs, ``Range`` resumes and
retries, which is all a static table host needs.

Every wait is bounded (:mod:`qpinfer.tables.remote.deadline`): a response slower than the
low-speed limit (bytes/s over a window) is abandoned, each connect or read waits at most
``stall_timeout`` seconds of silence, and an optional overall deadline (``timeout``) covers
retries and back-off. Every read is bounded too: the manifest is read up to
:data:`MANIFEST_MAX_BYTES`, an archive up to the size its manifest entry lists (a host that sends
more is refused and the partial file removed). Text the host chooses (its status line) reaches
an error message only through :func:`printable`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qpinfer.tables.remote.deadline import LOW_SPEED_LIMIT as LOW_SPEED_LIMIT
from qpinfer.tables.remote.deadline import LOW_SPEED_TIME as LOW_SPEED_TIME
from qpinfer.tables.remote.deadline import STALL_TIMEOUT as STALL_TIMEOUT
from qpinfer.tables.remote.deadline import (
    Deadline,
    SpeedLimit,
    Watchdog,
    as_deadline,
    read_some,
    watched_opener,
)

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "RETRY_BACKOFF",
    "URL_ENV",
    "Deadline",
    "DownloadError",
    "SpeedLimit",
    "fetch_archive",
    "fetch_manifest",
    "join_url",
    "open_url",
    "printable",
    "resolve_base_url",
    "retrying",
]

#: Environment variable holding the default base URL of a table host.
URL_ENV = "QPINFER_TABLES_URL"
#: File name of the manifest at the base URL.
MANIFEST_NAME = "manifest.json"
#: Version of the manifest format this module reads and ``qptables publish`` writes.
MANIFEST_FORMAT = 1
#: Seconds before the first retry (doubled for each further one).
RETRY_BACKOFF = 0.5
#: Default overall deadline of ``qpinfer download``: none (a large table on a slow link takes
#: as long as it takes; the low-speed limit and the socket timeout end a stalled transfer).
DEFAULT_TIMEOUT: float | None = None
#: Default overall deadline (seconds) of reading a manifest, when the download has none.
MANIFEST_TIMEOUT = 60.0
#: Largest ``manifest.json`` read (bytes); a longer one is refused (a manifest of thousands of
#: tables is a few hundred KiB).
MANIFEST_MAX_BYTES = 4 << 20
#: Longest piece of host-chosen text (a status line's reason, a table name) put in a message.
HOST_TEXT_MAX = 200
_BLOCK = 1 << 20


class DownloadError(RuntimeError):
    """A table could not be downloaded or installed; nothing usable-looking was left behind."""


def printable(text: object, limit: int = HOST_TEXT_MAX) -> str:
    """``text`` (chosen by a host) safe to print: printable ASCII, anything else as a
    backslash escape (an ANSI escape sequence cannot reach the terminal), at most ``limit``
    characters (then ``...`` and the full length)."""
    text = str(text)
    out = "".join(
        ch if " " <= ch <= "~" else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
    if len(out) > limit:
        out = f"{out[:limit]}... ({len(text)} characters)"
    return out


def resolve_base_url(base_url: str | os.PathLike | None = None) -> str:
    """The table host: ``base_url``, else ``$QPINFER_TABLES_URL``; a local directory path
    becomes a ``file://`` URL. No trailing slash. ``DownloadError`` when neither names a host;
    ``ValueError`` for a URL that is malformed (an unclosed IPv6 bracket, a port outside
    0..65535, no host after ``http://``) or of another scheme than http(s) and file."""
    url = os.fspath(base_url) if base_url is not None else os.environ.get(URL_ENV, "")
    url = url.strip()
    if not url:
        raise DownloadError(
            f"no table host: pass base_url=... (qpinfer download --url URL) or set {URL_ENV} to "
            "the http(s):// or file:// URL of a directory holding manifest.json"
        )
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # a port that is not a number in 0..65535 raises here
    except ValueError as exc:
        raise ValueError(
            f"base URL {printable(repr(url))} is not a valid URL ({printable(str(exc))})"
        ) from None
    scheme = parts.scheme.lower()
    if scheme in ("http", "https") and not parts.hostname:
        raise ValueError(f"base URL {printable(repr(url))} names no host")
    if scheme in ("http", "https", "file"):
        return url.rstrip("/")
    if scheme and len(scheme) > 1:
        raise ValueError(
            f"base URL {printable(repr(url))}: only http(s):// and file:// URLs are supported"
        )
    return Path(url).expanduser().resolve().as_uri()  # a local directory


def join_url(base: str, file: str) -> str:
    return f"{base}/{urllib.parse.quote(file)}"


class _Response:
    """What :func:`open_url` returns: a readable body plus status and lengths."""

    def __init__(
        self,
        body: Any,
        status: int,
        length: int | None,
        total: int | None,
        watchdog: Watchdog | None = None,
    ) -> None:
        self.body = body
        self.watchdog = watchdog
        self.status = status  # 200 whole file, 206 from the requested offset
        self.length = length  # bytes this response will deliver, if known
        self.total = total  # size of the whole remote file, if known

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        with contextlib.suppress(Exception):
            self.body.close()


def open_url(
    url: str,
    offset: int,
    timeout: float,
    deadline: Deadline | None = None,
    header_time: float | None = None,
) -> _Response:
    """GET ``url`` from byte ``offset`` (``file://``: seek; http: a ``Range`` request).

    ``timeout``: the socket timeout (connect, each read); ``header_time``: seconds the response's
    headers may take to arrive (a ``TimeoutError`` saying so after that); ``deadline``: the
    request's sockets are shut down when it passes, until the response is closed
    (:class:`qpinfer.tables.remote.deadline.Watchdog`)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        path = urllib.request.url2pathname(parts.path)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by _Response.close
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise urllib.error.HTTPError(url, 404, "Not Found", None, None) from None  # type: ignore[arg-type]
        size = os.fstat(f.fileno()).st_size
        if offset > size:
            f.close()
            raise urllib.error.HTTPError(url, 416, "Range Not Satisfiable", None, None)  # type: ignore[arg-type]
        f.seek(offset)
        return _Response(f, 206 if offset else 200, size - offset, size)
    from qpinfer.version import __version__

    headers = {"User-Agent": f"qpinfer/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    end = deadline.remaining() if deadline is not None else None
    first = (
        end if header_time is None else min(header_time, end if end is not None else header_time)
    )
    watchdog = Watchdog(first)
    try:
        resp = watched_opener(watchdog).open(request, timeout=timeout)
    except (urllib.error.URLError, http.client.HTTPException, OSError):
        watchdog.cancel()
        if watchdog.fired and not (deadline is not None and deadline.expired()):
            raise TimeoutError(f"no complete response headers within {header_time:g} s") from None
        raise
    except BaseException:
        watchdog.cancel()
        raise
    watchdog.rearm(deadline.remaining() if deadline is not None else None)  # headers are in
    status = resp.status
    length = resp.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    total = None
    if status == 206:
        m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", ""))
        if not m or int(m.group(1)) != offset:
            resp.close()
            watchdog.cancel()
            raise DownloadError(f"{url}: the server answered a resume request with a wrong range")
        total = int(m.group(3)) if m.group(3) != "*" else None
    elif status == 200:
        total = length
    return _Response(resp, status, length, total, watchdog)


def _reason(exc: BaseException) -> str:
    """What went wrong, in words the host may have chosen: :func:`printable`."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {printable(exc.reason)}"
    return printable(getattr(exc, "reason", exc))


def retrying(
    what: str, retries: int, func: Callable[[], Any], deadline: Deadline | None = None
) -> Any:
    """Call ``func``; retry connection-level failures (and HTTP 5xx) ``retries`` times, but not
    past ``deadline`` (the last failure is raised)."""
    attempt = 0
    while True:
        try:
            return func()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt >= retries or (deadline and deadline.expired()):
                raise
            err: BaseException = exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            if attempt >= retries or (deadline and deadline.expired()):
                raise
            err = exc
        attempt += 1
        print(f"qpinfer: {what}: {_reason(err)}; retry {attempt}/{retries}", file=sys.stderr)
        pause = RETRY_BACKOFF * 2 ** (attempt - 1)
        if deadline is None:
            time.sleep(pause)
        else:
            deadline.sleep(pause)


def fetch_manifest(
    base_url: str | os.PathLike | None = None,
    *,
    timeout: float | Deadline = MANIFEST_TIMEOUT,
    retries: int = 3,
    stall_timeout: float = STALL_TIMEOUT,
) -> dict[str, Any]:
    """Read and check ``BASE/manifest.json``; returns ``{"format": 1, "tables": {...}}``.

    ``timeout``: seconds for the whole fetch, retries included (or a
    :class:`~qpinfer.tables.remote.deadline.Deadline` shared with other transfers); each
    connect or read waits at most ``stall_timeout`` seconds. At most :data:`MANIFEST_MAX_BYTES`
    are read.
    """
    base = resolve_base_url(base_url)
    url = join_url(base, MANIFEST_NAME)
    deadline = as_deadline(timeout)
    received = [0]

    def get() -> bytes:
        received[0] = 0
        resp = open_url(url, 0, deadline.wait_limit(stall_timeout), deadline)
        try:
            if resp.length is not None and resp.length > MANIFEST_MAX_BYTES:
                raise _TooLarge(resp.length)
            blocks = []
            while True:
                if deadline.expired():
                    raise TimeoutError("deadline reached")
                block = read_some(resp, min(_BLOCK, MANIFEST_MAX_BYTES + 1 - received[0]))
                if not block:
                    return b"".join(blocks)
                blocks.append(block)
                received[0] += len(block)
                if received[0] > MANIFEST_MAX_BYTES:
                    raise _TooLarge(received[0])
        finally:
            resp.close()

    try:
        raw = retrying(f"fetching {url}", retries, get, deadline)
    except _TooLarge as exc:
        raise DownloadError(
            f"{url}: the manifest is larger than the cap of {MANIFEST_MAX_BYTES} bytes "
            f"({exc.args[0]} bytes {'announced' if received[0] == 0 else 'read'}); not read "
            "further (is this a table host?)"
        ) from None
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"cannot fetch the table manifest {url}: {_reason(exc)}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        if deadline.expired():
            raise DownloadError(
                f"fetching the table manifest {url} timed out after {deadline.elapsed():.1f} s "
                f"(timeout {deadline.seconds:g} s, retries included; {received[0]} bytes "
                "received)"
            ) from None
        raise DownloadError(
            f"cannot reach the table host {base} (fetching {MANIFEST_NAME}): {_reason(exc)}"
        ) from None
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise DownloadError(f"{url} is not valid JSON ({printable(exc)})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("tables"), dict):
        raise DownloadError(f"{url}: not a qpinfer table manifest (no 'tables' mapping)")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise DownloadError(
            f"{url}: manifest format {printable(repr(manifest.get('format')), 40)}, this "
            f"qpinfer reads {MANIFEST_FORMAT} (upgrade qpinfer?)"
        )
    return manifest


def fetch_archive(
    url: str,
    part: Path,
    size: int,
    retries: int,
    timeout: float | Deadline | None,
    progress: Callable[[int, int], None] | None,
    *,
    speed: SpeedLimit | None = None,
    stall_timeout: float = STALL_TIMEOUT,
) -> None:
    """Bring ``part`` to ``size`` bytes of ``url``, resuming; see the module docstring.

    ``speed``: the low-speed limit of each response (default
    :class:`~qpinfer.tables.remote.deadline.SpeedLimit`'s); ``stall_timeout``: the socket
    timeout; ``timeout``: an overall deadline in seconds, retries and back-off included (or a
    :class:`~qpinfer.tables.remote.deadline.Deadline` shared with other transfers; ``None``:
    none). A transfer too slow, silent or past the deadline stops with a :class:`DownloadError`
    naming the URL, why and the bytes received (kept in ``part``, to resume from); one that
    brings more than ``size`` bytes is refused and ``part`` removed -- never more than
    ``size + 1`` bytes are written.
    """
    deadline = as_deadline(timeout)
    speed = speed if speed is not None else SpeedLimit()
    failures = 0
    have = part.stat().st_size if part.exists() else 0

    def timed_out() -> DownloadError:
        return DownloadError(
            f"download of {url} timed out after {deadline.elapsed():.1f} s (timeout "
            f"{deadline.seconds:g} s, retries included) with {have} of {size} bytes received"
            + (f"; they are kept in {part} and resumed next time" if have else "")
        )

    def retry_or_raise(error: str) -> None:
        """Count a failure and back off; raise ``error`` (or the deadline's) if none is left."""
        nonlocal failures
        if deadline.expired():
            raise timed_out() from None
        if failures >= retries:
            raise DownloadError(error) from None
        failures += 1
        deadline.sleep(RETRY_BACKOFF * 2 ** (failures - 1))
        if deadline.expired():
            raise timed_out() from None

    def kept() -> str:
        return f"; {have} of {size} bytes are kept in {part} and resumed next time" if have else ""

    def too_large(what: str) -> DownloadError:
        part.unlink(missing_ok=True)
        return DownloadError(
            f"{url} is larger than the manifest says ({size} bytes; {what}); the download was "
            "discarded (stale manifest, or a host sending more than it lists)"
        )

    while True:
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            part.unlink()
            have = 0
        if have == size:
            return
        if deadline.expired():
            raise timed_out()
        try:
            resp = open_url(url, have, deadline.wait_limit(stall_timeout), deadline, speed.window)
        except urllib.error.HTTPError as exc:
            if exc.code == 416:  # the remote file ends at or before `have`
                part.unlink(missing_ok=True)
                raise DownloadError(
                    f"{url} is shorter than the manifest says ({size} bytes): the host's copy "
                    "is truncated; the download was discarded"
                ) from None
            if exc.code < 500:
                raise DownloadError(f"cannot download {url}: {_reason(exc)}") from None
            retry_or_raise(f"cannot download {url}: {_reason(exc)}")
            continue
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            retry_or_raise(
                f"cannot reach {url} ({_reason(exc)}) after {failures + 1} attempts{kept()}"
            )
            continue
        try:
            if resp.total is not None and resp.total < size:
                part.unlink(missing_ok=True)
                raise DownloadError(
                    f"{url} has {resp.total} bytes but the manifest says {size}: the host's copy "
                    "is truncated (or the manifest is stale); the download was discarded"
                )
            if resp.status == 200:
                have = 0  # whole file (a server that ignores Range): start over
            if resp.total is not None and resp.total > size:
                raise too_large(f"the host announces {resp.total}")
            if resp.length is not None and have + resp.length > size:
                raise too_large(f"the host announces {have + resp.length}")
            speed.restart(have)
            with open(part, "ab" if have else "wb") as f:
                try:
                    while have <= size:
                        if deadline.expired():
                            raise _Interrupted(TimeoutError("the deadline was reached"))
                        try:
                            block = read_some(resp, min(_BLOCK, size + 1 - have))
                        except (http.client.HTTPException, OSError) as exc:
                            raise _Interrupted(exc) from None
                        if not block:
                            break
                        f.write(block)
                        have += len(block)
                        if have <= size and progress is not None:
                            progress(have, size)
                        slow = speed.too_slow(have)
                        if slow is not None and have < size:
                            raise _Interrupted(_TooSlow(slow))
                finally:
                    f.flush()
                    os.fsync(f.fileno())
        except _Interrupted as exc:
            why = exc.args[0]
            if isinstance(why, _TooSlow):
                what = (
                    f"was too slow: {why.args[0]} (low_speed_limit= and low_speed_time= allow "
                    "a slower host)"
                )
            elif isinstance(why, TimeoutError):
                what = f"was interrupted (no data for {deadline.wait_limit(stall_timeout):g} s)"
            else:
                what = f"was interrupted ({_reason(why)})"
            retry_or_raise(f"download of {url} {what} after {failures + 1} attempts{kept()}")
            continue
        finally:
            resp.close()
        if have > size:
            raise too_large("it sent more")
        if have < size:  # the body ended early without an error: resume (counts as a failure)
            retry_or_raise(
                f"download of {url} stopped at {have} of {size} bytes after {failures + 1} "
                f"attempts; kept in {part} and resumed next time"
            )


class _Interrupted(Exception):
    pass


class _TooSlow(Exception):
    pass


class _TooLarge(Exception):
    pass
