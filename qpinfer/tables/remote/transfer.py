# Over 400 lines: one transfer (URL, manifest, resumable fetch, retries) whose steps share one deadline and one error type.
"""Talking to a table host (:mod:`qpinfer.tables.remote.install`): resolving its URL, reading its
``manifest.json``, and fetching an archive over http(s) or from a ``file://`` URL -- resuming an
interrupted transfer with an HTTP ``Range`` request (a server that ignores it sends the whole
file again) and retrying connection failures with exponential back-off.

HTTP is the standard library's :mod:`urllib` -- chosen over pooch/fsspec to keep qpinfer's
dependencies at numpy, scipy and zarr; it covers http(s) and file URLs, ``Range`` resumes and
retries, which is all a static table host needs.

Every wait is bounded (:mod:`qpinfer.tables.remote.deadline`). A transfer has an overall deadline
(``timeout`` seconds, retries and back-off included), each connect or read waits at most
:data:`~qpinfer.tables.remote.deadline.STALL_TIMEOUT` seconds of silence, and a request's sockets
are shut down when the deadline passes, so a server that trickles one byte at a time cannot hold a
transfer past it either. The manifest is read up to :data:`MANIFEST_MAX_BYTES`.
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

from qpinfer.tables.remote.deadline import STALL_TIMEOUT as STALL_TIMEOUT
from qpinfer.tables.remote.deadline import (
    Deadline,
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
    "DownloadError",
    "Deadline",
    "fetch_archive",
    "fetch_manifest",
    "join_url",
    "open_url",
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
#: Default overall deadline (seconds) of ``qpinfer download``: manifest and archive, retries
# included.
DEFAULT_TIMEOUT = 600.0
#: Default overall deadline (seconds) of reading a manifest alone (:func:`fetch_manifest`).
MANIFEST_TIMEOUT = 60.0
#: Largest ``manifest.json`` read (bytes); a longer one is refused (a manifest of thousands of
#: tables is a few hundred KiB).
MANIFEST_MAX_BYTES = 4 << 20
_BLOCK = 1 << 20


class DownloadError(RuntimeError):
    """A table could not be downloaded or installed; nothing usable-looking was left behind."""


def resolve_base_url(base_url: str | os.PathLike | None = None) -> str:
    """The table host: ``base_url``, else ``$QPINFER_TABLES_URL``; a local directory path
    becomes a ``file://`` URL. No trailing slash."""
    url = os.fspath(base_url) if base_url is not None else os.environ.get(URL_ENV, "")
    url = url.strip()
    if not url:
        raise DownloadError(
            f"no table host: pass base_url=... (qpinfer download --url URL) or set {URL_ENV} to "
            "the http(s):// or file:// URL of a directory holding manifest.json"
        )
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("http", "https", "file"):
        return url.rstrip("/")
    if scheme and len(scheme) > 1:
        raise DownloadError(f"base URL {url!r}: only http(s):// and file:// URLs are supported")
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


def open_url(url: str, offset: int, timeout: float, deadline: Deadline | None = None) -> _Response:
    """GET ``url`` from byte ``offset`` (``file://``: seek; http: a ``Range`` request).

    ``timeout``: the socket timeout (connect, each read); ``deadline``: the request's sockets
    are shut down when it passes (:class:`qpinfer.tables.remote.deadline.Watchdog`), until the
    response is closed."""
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
    if deadline is None:
        watchdog = None
        resp = urllib.request.urlopen(request, timeout=timeout)
    else:
        watchdog = Watchdog(deadline)
        try:
            resp = watched_opener(watchdog).open(request, timeout=timeout)
        except BaseException:
            watchdog.cancel()
            raise
    status = resp.status
    length = resp.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    total = None
    if status == 206:
        m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", ""))
        if not m or int(m.group(1)) != offset:
            resp.close()
            if watchdog is not None:
                watchdog.cancel()
            raise DownloadError(f"{url}: the server answered a resume request with a wrong range")
        total = int(m.group(3)) if m.group(3) != "*" else None
    elif status == 200:
        total = length
    return _Response(resp, status, length, total, watchdog)


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
        print(f"qpinfer: {what}: {err}; retry {attempt}/{retries}", file=sys.stderr)
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
) -> dict[str, Any]:
    """Read and check ``BASE/manifest.json``; returns ``{"format": 1, "tables": {...}}``.

    ``timeout``: seconds for the whole fetch, retries included (or a
    :class:`~qpinfer.tables.remote.deadline.Deadline` shared with other transfers). At most
    :data:`MANIFEST_MAX_BYTES` are read.
    """
    base = resolve_base_url(base_url)
    url = join_url(base, MANIFEST_NAME)
    deadline = as_deadline(timeout)
    received = [0]

    def get() -> bytes:
        received[0] = 0
        resp = open_url(url, 0, deadline.wait_limit(), deadline)
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
        raise DownloadError(
            f"cannot fetch the table manifest {url}: HTTP {exc.code} {exc.reason}"
        ) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if deadline.expired():
            raise DownloadError(
                f"fetching the table manifest {url} timed out after {deadline.elapsed():.1f} s "
                f"(timeout {deadline.seconds:g} s, retries included; {received[0]} bytes "
                "received)"
            ) from None
        raise DownloadError(
            f"cannot reach the table host {base} (fetching {MANIFEST_NAME}): {reason}"
        ) from None
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise DownloadError(f"{url} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("tables"), dict):
        raise DownloadError(f"{url}: not a qpinfer table manifest (no 'tables' mapping)")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise DownloadError(
            f"{url}: manifest format {manifest.get('format')!r}, this qpinfer reads "
            f"{MANIFEST_FORMAT} (upgrade qpinfer?)"
        )
    return manifest


def fetch_archive(
    url: str,
    part: Path,
    size: int,
    retries: int,
    timeout: float | Deadline,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Bring ``part`` to ``size`` bytes of ``url``, resuming; see the module docstring.

    ``timeout``: seconds for the whole transfer, retries and back-off included (or a
    :class:`~qpinfer.tables.remote.deadline.Deadline` shared with other transfers); past it the
    transfer stops with a :class:`DownloadError` naming the URL, the time and the bytes received
    (kept in ``part``, to resume from).
    """
    deadline = as_deadline(timeout)
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
            resp = open_url(url, have, deadline.wait_limit(), deadline)
        except urllib.error.HTTPError as exc:
            if exc.code == 416:  # the remote file ends at or before `have`
                part.unlink(missing_ok=True)
                raise DownloadError(
                    f"{url} is shorter than the manifest says ({size} bytes): the host's copy "
                    "is truncated; the download was discarded"
                ) from None
            if exc.code < 500:
                raise DownloadError(
                    f"cannot download {url}: HTTP {exc.code} {exc.reason}"
                ) from None
            retry_or_raise(f"cannot download {url}: HTTP {exc.code} {exc.reason}")
            continue
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            retry_or_raise(
                f"cannot reach {url} ({reason}) after {failures + 1} attempts"
                + (
                    f"; {have} of {size} bytes are kept in {part} and resumed next time"
                    if have
                    else ""
                )
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
            with open(part, "ab" if have else "wb") as f:
                try:
                    while True:
                        if deadline.expired():
                            raise _Interrupted(TimeoutError("the deadline was reached"))
                        try:
                            block = read_some(resp, _BLOCK)
                        except (http.client.HTTPException, OSError) as exc:
                            raise _Interrupted(exc) from None
                        if not block:
                            break
                        f.write(block)
                        have += len(block)
                        if have > size:
                            break
                        if progress is not None:
                            progress(have, size)
                finally:
                    f.flush()
                    os.fsync(f.fileno())
        except _Interrupted as exc:
            why = exc.args[0]
            why = f"no data for {STALL_TIMEOUT:g} s" if isinstance(why, TimeoutError) else repr(why)
            retry_or_raise(
                f"download of {url} was interrupted ({why}) after {failures + 1} "
                f"attempts; {have} of {size} bytes are kept in {part} and resumed next time"
            )
            continue
        finally:
            resp.close()
        if have > size:
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"{url} is larger than the manifest says ({size} bytes); the download was "
                "discarded (stale manifest?)"
            )
        if have < size:  # the body ended early without an error: resume (counts as a failure)
            retry_or_raise(
                f"download of {url} stopped at {have} of {size} bytes after {failures + 1} "
                f"attempts; kept in {part} and resumed next time"
            )


class _Interrupted(Exception):
    pass


class _TooLarge(Exception):
    pass
