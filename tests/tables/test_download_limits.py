"""Bounded downloads and installs.

* Every transfer has an overall deadline (``timeout``, ``qpinfer download --timeout``) and a
  per-read socket timeout: a server that trickles one byte at a time or stalls after its headers
  ends the download within the deadline with an error naming the URL, the time and the bytes
  received; the manifest is read up to a size cap, never whole into memory.
* An install unpacks only what the store's own record lists, and no more bytes than the
  manifest's ``store_bytes``: an archive with a stray chunk is refused, naming the member, and
  nothing is installed.

The hosts are real: ``http.server`` on 127.0.0.1 in a thread, archives packed in ``tmp_path``
from a small store written by :func:`test_tables_reader.write_store` and published by
``qptables publish``.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import re
import shutil
import tarfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

import qpinfer.tables.remote.install as dl
import qpinfer.tables.remote.transfer
from qpinfer.cli import main
from qpinfer.tables import TableError, open_table
from qpinfer.tables.remote.install import DownloadError
from tests.tables.conftest import LoopbackServer, probit_host, repack_host

NAME = "probit-lim"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> tuple[Path, dict]:
    """A table host directory (manifest + archive) holding one small probit table."""
    return probit_host(tmp_path_factory, NAME)


def assert_nothing_installed(cache: Path) -> None:
    """No ``*.zarr``, no staging directory, nothing under ``.downloads`` that looks finished."""
    if cache.exists():
        assert sorted(p.name for p in cache.glob("*.zarr")) == []
        assert [p.name for p in cache.iterdir() if p.name != ".downloads"] == []
        left = (
            [p.name for p in (cache / ".downloads").iterdir()]
            if (cache / ".downloads").exists()
            else []
        )
        assert all(n.endswith((".part", ".lock")) for n in left), left
    with pytest.raises(TableError, match="qpinfer download"):
        open_table(NAME)


# ----------------------------------------------------------------------------- a slow host


class SlowHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the host directory, except: every answer's headers trickle (``"headers"``); the
    archive trickles (``mode == "trickle"``: one byte
    every 0.5 s) or stalls after its headers (``"stall"``); the manifest can be replaced by an
    endless one (``"endless"``: 64 MiB of a JSON string, fast)."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        srv = self.server
        mode = srv.mode
        if mode == "endless" and self.path.endswith("manifest.json"):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"format": 1, "tables": {"x": "')
            block = b"x" * (1 << 20)
            try:
                for _ in range(
                    64
                ):  # bounded, so a reader without a cap ends (with the wrong error)
                    if srv.stop.is_set():
                        return
                    self.wfile.write(block)
            except OSError:
                return
            return
        if mode == "headers":  # the status line, then one header byte every 0.5 s
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while not srv.stop.wait(0.5):
                    self.wfile.write(b"a")
                    self.wfile.flush()
            except OSError:
                return
            return
        if mode in ("trickle", "stall") and self.path.endswith(".tar.gz"):
            data = Path(self.translate_path(self.path)).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            try:
                for i in range(len(data)):
                    if srv.stop.wait(0.5):
                        return
                    if mode == "trickle":
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
            except OSError:
                return
            return
        super().do_GET()


class SlowServer(LoopbackServer):
    handler = SlowHandler


def run_with_watchdog(func, limit: float) -> tuple[float, BaseException | None, bool]:
    """Run ``func`` in a daemon thread; ``(seconds, exception, finished)`` after at most
    ``limit`` seconds (a hung call is left behind, unfinished, instead of hanging the test)."""
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = func()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["exc"] = exc

    t0 = time.monotonic()
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(limit)
    return time.monotonic() - t0, out.get("exc"), not th.is_alive()


@pytest.mark.parametrize("retries", [0, 3])
def test_a_trickling_server_ends_within_the_deadline_with_a_clear_error(host, cache, retries):
    d, entry = host
    with SlowServer(d, "trickle") as srv:
        seconds, exc, finished = run_with_watchdog(
            lambda: dl.download(NAME, srv.url, retries=retries, timeout=2.0), limit=15.0
        )
    assert finished, f"download(timeout=2) still running after {seconds:.1f} s"
    assert seconds < 5.0, seconds
    assert isinstance(exc, DownloadError), exc
    msg = str(exc)
    assert "timed out" in msg and f"{srv.url}/{entry['file']}" in msg, msg
    assert f"of {entry['size']} bytes" in msg, msg  # bytes received are named
    assert_nothing_installed(cache)


def test_a_server_that_stalls_after_its_headers_ends_within_the_deadline(host, cache):
    d, entry = host
    with SlowServer(d, "stall") as srv:
        seconds, exc, finished = run_with_watchdog(
            lambda: dl.download(NAME, srv.url, timeout=2.0), limit=15.0
        )
    assert finished and seconds < 5.0, seconds
    assert isinstance(exc, DownloadError) and "timed out" in str(exc), exc
    assert f"{srv.url}/{entry['file']}" in str(exc)
    assert_nothing_installed(cache)


def test_a_server_that_trickles_its_headers_ends_within_the_deadline(host, cache):
    d, _ = host
    with SlowServer(d, "headers") as srv:
        seconds, exc, finished = run_with_watchdog(
            lambda: dl.download(NAME, srv.url, timeout=2.0), limit=15.0
        )
    assert finished and seconds < 5.0, seconds
    assert isinstance(exc, DownloadError), exc
    assert f"{srv.url}/manifest.json timed out" in str(exc), exc
    assert_nothing_installed(cache)


def test_an_endless_manifest_is_refused_at_its_size_cap_with_bounded_memory(host, cache):
    d, _ = host
    with SlowServer(d, "endless") as srv:
        tracemalloc.start()
        try:
            with pytest.raises(DownloadError) as info:
                dl.download(NAME, srv.url, retries=0, timeout=20.0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    cap = qpinfer.tables.remote.transfer.MANIFEST_MAX_BYTES
    msg = str(info.value)
    assert f"{srv.url}/manifest.json" in msg and f"{cap} bytes" in msg, msg
    assert peak < 3 * cap, peak  # read up to the cap, never the whole stream
    assert_nothing_installed(cache)


def test_the_command_line_takes_a_timeout(host, cache, capsys):
    d, entry = host
    with SlowServer(d, "trickle") as srv:
        seconds, exc, finished = run_with_watchdog(
            lambda: main(["download", NAME, "--url", srv.url, "--timeout", "1.5", "--quiet"]),
            limit=15.0,
        )
        assert finished and exc is None, exc
    assert seconds < 5.0, seconds
    err = capsys.readouterr().err
    assert "qpinfer download: error:" in err and "timed out" in err, err
    assert_nothing_installed(cache)
    with pytest.raises(SystemExit):
        main(["download", NAME, "--url", str(d), "--timeout", "0"])
    assert "--timeout" in capsys.readouterr().err


def test_a_timeout_must_be_positive(host, cache):
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            dl.download(NAME, host[0], timeout=bad)


# ----------------------------------------------------------------------------- bounded installs


STRAY = b"\0" * (4 << 20)  # a few MB: the property is the same as for the 300 MB


def test_a_stray_chunk_beyond_the_manifests_unpacked_size_is_refused(host, cache, tmp_path):
    d = repack_host(host, tmp_path, NAME, {"sigma_qp/c/9": STRAY})
    with pytest.raises(DownloadError, match=r"sigma_qp/c/9.*store_bytes"):
        dl.download(NAME, d.as_uri())
    assert_nothing_installed(cache)


def test_a_member_not_listed_in_the_stores_record_is_refused(host, cache, tmp_path):
    """Even when the manifest's unpacked size allows it: only what the store lists is unpacked."""
    d = repack_host(host, tmp_path, NAME, {"sigma_qp/c/9": STRAY})
    m = json.loads((d / "manifest.json").read_text())
    m["tables"][NAME]["store_bytes"] += len(STRAY)
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DownloadError, match=r"sigma_qp/c/9.*not part of the table store"):
        dl.download(NAME, d.as_uri())
    assert_nothing_installed(cache)


def test_a_listed_chunk_of_the_wrong_size_is_refused_before_unpacking(host, cache, tmp_path):
    key = "sigma_qp/c/0/0/0"
    d = repack_host(host, tmp_path, NAME, {key: STRAY})  # replaces a real chunk by a larger file
    m = json.loads((d / "manifest.json").read_text())
    m["tables"][NAME].pop("store_bytes")  # an older manifest: the store's own sizes still bound it
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DownloadError, match=rf"archive member .*{key}.*{len(STRAY)} bytes"):
        dl.download(NAME, d.as_uri())
    assert_nothing_installed(cache)


@pytest.mark.parametrize(
    ("member", "kind"),
    [
        ("probit-lim.zarr/sigma_qp/c/link", tarfile.SYMTYPE),
        ("probit-lim.zarr/../evil", tarfile.REGTYPE),
    ],
)
def test_links_and_paths_outside_the_store_are_refused(host, cache, tmp_path, member, kind):
    src, entry = host
    d = tmp_path / "host"
    shutil.copytree(src, d)
    buf = io.BytesIO()
    with (
        tarfile.open(src / entry["file"]) as old,
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for m in old:
            tar.addfile(m, old.extractfile(m) if m.isfile() else None)
        info = tarfile.TarInfo(member)
        info.type = kind
        info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    (d / entry["file"]).write_bytes(buf.getvalue())
    m = json.loads((d / "manifest.json").read_text())
    m["tables"][NAME].update(
        size=len(buf.getvalue()), sha256=hashlib.sha256(buf.getvalue()).hexdigest()
    )
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DownloadError, match=rf"{re.escape(member)}.*not a plain file or directory"):
        dl.download(NAME, d.as_uri())
    assert_nothing_installed(cache)


def test_the_published_archive_still_installs(host, cache):
    path = dl.download(NAME, host[0].as_uri())
    assert open_table(path, verify_checksums=True).likelihood == "probit"
