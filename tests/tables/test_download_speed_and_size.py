"""A transfer is bounded by its speed and its size, not by a total time.

* A transfer slower than ``low_speed_limit`` bytes/s over ``low_speed_time`` seconds ends with an
  error naming the rate and the limit; a steady one above the limit completes however long it
  takes; a host that sends nothing ends by the socket timeout (``stall_timeout``).
* The archive is never written past the size the manifest lists for it, and a manifest that
  lists more than the free disk space (archive plus unpacked store) or than ``max_bytes`` is
  refused before any transfer, naming the size and the folder.
* Text the host chooses (its status line, its table names) reaches an error message only as
  printable ASCII, length-capped.

The hosts are real: ``http.server`` on 127.0.0.1 in a thread, throttled in its handler, serving
an archive ``qptables publish`` wrote for a small store of
:func:`test_tables_reader.write_store`. The limits are scaled down (a window of 0.4 s) through
:func:`qpinfer.tables.download`'s keyword arguments.
"""

from __future__ import annotations

import http.server
import json
import shutil
import time
from pathlib import Path

import pytest

import qpinfer.tables.remote.install as dl
from qpinfer.cli import main
from qpinfer.tables import TableError, open_table
from qpinfer.tables.remote.install import DownloadError, UnknownTableError
from tests.tables.conftest import LoopbackServer, probit_host

NAME = "probit-speed"
#: Window of the low-speed limit in these tests (seconds); the default is a minute.
WINDOW = 0.4


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> tuple[Path, dict]:
    return probit_host(tmp_path_factory, NAME)


def copy_host(host: tuple[Path, dict], tmp_path: Path, **changes) -> Path:
    """A copy of the host whose manifest entry has ``changes``."""
    d = tmp_path / "host"
    shutil.copytree(host[0], d)
    m = json.loads((d / "manifest.json").read_text())
    m["tables"][NAME].update(changes)
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def nothing_installed(cache: Path) -> bool:
    with pytest.raises(TableError, match="qpinfer download"):
        open_table(NAME)
    return not cache.exists() or not list(cache.glob("*.zarr"))


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the host directory; the archive as the server's ``mode`` says: ``"rate"`` (at
    ``rate`` bytes/s, in slices every 0.05 s), ``"silent"`` (headers, then nothing),
    ``"endless"`` (no length, zeros as fast as they go, at most 64 MiB) or ``"status"`` (the
    status line ``code`` ``reason``, whatever the path)."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        srv = self.server
        srv.requests.append(self.path)
        if srv.mode == "status":
            self.send_response(srv.code, srv.reason)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if not self.path.endswith(".tar.gz"):
            return super().do_GET()
        data = Path(self.translate_path(self.path)).read_bytes()
        self.send_response(200)
        if srv.mode != "endless":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.flush()
        try:
            if srv.mode == "endless":
                for _ in range(64):
                    if srv.stop.is_set():
                        return None
                    self.wfile.write(b"\0" * (1 << 20))
            elif srv.mode == "silent":
                srv.stop.wait(30)
            else:
                step = max(1, round(srv.rate * 0.05))
                for i in range(0, len(data), step):
                    if srv.stop.wait(0.05):
                        return None
                    self.wfile.write(data[i : i + step])
                    self.wfile.flush()
        except OSError:
            pass
        return None


class Server(LoopbackServer):
    handler = Handler


# ----------------------------------------------------------------------------- speed


def test_a_steady_transfer_above_the_low_speed_limit_completes_however_long(host, cache):
    """Several windows long at a steady rate four times the limit: installed (a total deadline
    of the same length as the windows would have cut it)."""
    d, entry = host
    rate = entry["size"] / 2.0  # two seconds, five windows
    with Server(d, "rate", rate=rate) as srv:
        t0 = time.monotonic()
        path = dl.download(
            NAME, srv.url, low_speed_limit=rate / 4, low_speed_time=WINDOW, retries=0
        )
        seconds = time.monotonic() - t0
    assert open_table(path, verify_checksums=True).likelihood == "probit"
    assert seconds > 3 * WINDOW, seconds  # it did span several windows


def test_a_trickle_below_the_low_speed_limit_ends_naming_the_rate_and_the_limit(host, cache):
    d, entry = host
    limit = entry["size"] / 2.0
    with Server(d, "rate", rate=limit / 5) as srv:
        t0 = time.monotonic()
        with pytest.raises(DownloadError) as info:
            dl.download(NAME, srv.url, low_speed_limit=limit, low_speed_time=WINDOW, retries=0)
        seconds = time.monotonic() - t0
    msg = str(info.value)
    assert seconds < WINDOW + 1.5, seconds
    assert f"{srv.url}/{entry['file']}" in msg, msg
    assert f"low-speed limit of {limit:.0f} bytes/s" in msg and " bytes/s)" in msg, msg
    assert f"over {WINDOW:g} s" in msg, msg
    assert nothing_installed(cache)


def test_the_command_line_sets_the_low_speed_limit(host, cache, capsys):
    """``qpinfer download --speed-limit --speed-time`` (curl's names) reach the transfer."""
    d, entry = host
    limit = entry["size"] / 2.0
    with Server(d, "rate", rate=limit / 5) as srv:
        argv = ["download", NAME, "--url", srv.url, "--retries", "0", "--quiet"]
        code = main([*argv, "--speed-limit", f"{limit:.0f}", "--speed-time", f"{WINDOW:g}"])
    assert code == 1
    err = capsys.readouterr().err
    assert f"low-speed limit of {limit:.0f} bytes/s over {WINDOW:g} s" in err, err
    assert nothing_installed(cache)
    for flag in ("--speed-limit", "--speed-time"):
        with pytest.raises(SystemExit):
            main(["download", NAME, "--url", "http://127.0.0.1:9", flag, "0"])
        assert f"argument {flag}: must be a positive, finite number" in capsys.readouterr().err


def test_a_silent_host_ends_by_the_socket_timeout(host, cache):
    d, entry = host
    with Server(d, "silent") as srv:
        t0 = time.monotonic()
        with pytest.raises(DownloadError) as info:
            dl.download(NAME, srv.url, stall_timeout=0.5, retries=0)
        seconds = time.monotonic() - t0
    assert seconds < 3.0, seconds
    assert "no data for 0.5 s" in str(info.value) and entry["file"] in str(info.value)
    assert nothing_installed(cache)


@pytest.mark.parametrize(
    ("keyword", "bad"),
    [
        ("low_speed_limit", 0),
        ("low_speed_limit", float("nan")),
        ("low_speed_time", -1.0),
        ("stall_timeout", float("inf")),
        ("max_bytes", 0),
    ],
)
def test_the_limits_are_checked_before_any_transfer(host, cache, keyword, bad):
    with Server(host[0], "rate", rate=1e6) as srv:
        with pytest.raises(ValueError, match=keyword):
            dl.download(NAME, srv.url, **{keyword: bad})
        assert srv.httpd.requests == []


# ----------------------------------------------------------------------------- size


def test_a_size_beyond_the_free_disk_space_is_refused_before_any_transfer(host, cache, tmp_path):
    """A manifest claiming a petabyte and a host that streams: nothing is fetched or kept."""
    d = copy_host(host, tmp_path, size=10**15)
    with Server(d, "endless") as srv:
        with pytest.raises(DownloadError) as info:
            dl.download(NAME, srv.url, retries=0)
        assert not any(p.endswith(".tar.gz") for p in srv.httpd.requests), srv.httpd.requests
    msg = str(info.value)
    assert "1000000000000000 bytes" in msg and str(cache / ".downloads") in msg, msg
    assert "free" in msg, msg
    assert list((cache / ".downloads").glob("*.part")) == []
    assert nothing_installed(cache)


def test_an_unpacked_size_beyond_the_free_disk_space_is_refused(host, cache, tmp_path):
    cache.mkdir()
    free = shutil.disk_usage(cache).free
    d = copy_host(host, tmp_path, store_bytes=free + 1)
    with pytest.raises(DownloadError, match=rf"{free + 1} bytes.*free.*{cache}"):
        dl.download(NAME, d.as_uri(), retries=0)
    assert nothing_installed(cache)


def test_a_size_beyond_max_bytes_is_refused_before_any_transfer(host, cache):
    size = host[1]["size"]
    with Server(host[0], "rate", rate=1e6) as srv:
        with pytest.raises(DownloadError, match=rf"{size} bytes.*max_bytes={size - 1}"):
            dl.download(NAME, srv.url, max_bytes=size - 1)
        assert not any(p.endswith(".tar.gz") for p in srv.httpd.requests)
    assert nothing_installed(cache)


def test_a_host_sending_more_than_the_listed_size_is_refused_and_the_part_removed(host, cache):
    d, entry = host
    with Server(d, "endless") as srv:
        with pytest.raises(DownloadError, match="larger than the manifest says"):
            dl.download(NAME, srv.url, retries=0)
    assert list((cache / ".downloads").glob("*.part")) == []
    assert nothing_installed(cache)


# ----------------------------------------------------------------------------- host text

ANSI = "\x1b[2J\x1b[31mpwned\x07"


@pytest.mark.parametrize("code", [403, 503])
def test_the_hosts_status_line_reaches_errors_as_printable_ascii(host, cache, capsys, code):
    reason = ANSI + "x" * 5000
    with Server(host[0], "status", code=code, reason=reason) as srv:
        with pytest.raises(DownloadError) as info:
            dl.download(NAME, srv.url, retries=1)
    msg, err = str(info.value), capsys.readouterr().err
    assert f"HTTP {code}" in msg, msg
    for text in (msg, err):
        assert all(" " <= ch <= "~" or ch == "\n" for ch in text), repr(text[:300])
    assert len(msg) < 600, len(msg)
    assert "pwned" in msg  # what is printable is kept, so the cause stays readable


def test_the_hosts_table_names_reach_errors_as_printable_ascii(host, cache, tmp_path):
    d = copy_host(host, tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    m["tables"][ANSI * 100] = m["tables"][NAME]
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UnknownTableError) as info:
        dl.download("not-there", d.as_uri())
    msg = str(info.value)
    assert all(" " <= ch <= "~" for ch in msg) and len(msg) < 800, repr(msg[:300])
    assert NAME in msg


def test_qpinfer_list_prints_the_hosts_table_names_as_printable_ascii(
    host, cache, tmp_path, capsys
):
    d = copy_host(host, tmp_path, likelihood=ANSI)
    m = json.loads((d / "manifest.json").read_text())
    m["tables"][ANSI] = m["tables"].pop(NAME)
    (d / "manifest.json").write_text(json.dumps(m))
    assert main(["list", "--url", d.as_uri()]) == 0
    out = capsys.readouterr().out
    assert "\\x1b[31mpwned" in out, out
    assert all(" " <= ch <= "~" or ch == "\n" for ch in out), repr(out)


def test_qpinfer_list_prints_a_malformed_host_entry_without_failing(host, tmp_path, capsys):
    """A host's entry with fields of the wrong type (or no mapping at all) prints as ``?``."""
    d = copy_host(host, tmp_path, size="big", verification="none")
    m = json.loads((d / "manifest.json").read_text())
    m["tables"]["other"] = ["not", "a", "mapping"]
    (d / "manifest.json").write_text(json.dumps(m))
    assert main(["list", "--url", d.as_uri()]) == 0
    out = capsys.readouterr().out
    assert f"  {NAME}: probit, shape" in out and "? MiB, max rel error ? (None" in out, out
    assert "  other: None, shape None, ? MiB" in out, out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--retries", "11"], "--retries must be in [0, 10]"),
        (["--retries", "1000000000"], "--retries must be in [0, 10]"),
        (["--url", "http://[::1"], "is not a valid URL (Invalid IPv6 URL)"),
        (["--url", "http://host:99999"], "is not a valid URL (Port out of range"),
        (["--url", "http://"], "names no host"),
        (["--url", "ftp://host/tables"], "only http(s):// and file:// URLs are supported"),
    ],
)
def test_download_arguments_are_checked_before_any_transfer(cache, capsys, args, words):
    """A retry count whose back-off would never end, or a URL that is no URL: one line naming
    it, before any request (the default URL is a port nothing listens on) or any file."""
    argv = ["download", NAME, "--quiet", *args]
    if "--url" not in args:
        argv += ["--url", "http://127.0.0.1:9"]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert "qpinfer download: error:" in err and words in err, err
    assert not cache.exists() or not any(cache.rglob("*"))
