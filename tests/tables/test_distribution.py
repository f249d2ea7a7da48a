"""Publishing (``qptables publish``) and downloading (``qpinfer.tables.download``) prebuilt tables.

A small probit table is built with the real pipeline, published into a directory, served by
``http.server`` on 127.0.0.1 (a random port, in a thread), downloaded into a temporary cache and
used by ``GPClassifier``; then a truncated file, a wrong checksum, an unreachable host, an
interrupted transfer and a tampered archive each fail clearly and leave no usable-looking table.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Self

import numpy as np
import pytest

import qpinfer
import qpinfer.tables.remote.install as dl
import qpinfer.tables.remote.transfer
from qpinfer.tables import TableError, open_table
from qpinfer.tables.remote.install import DownloadError, UnknownTableError
from qptables import GridSpec, build
from qptables.pipeline.publish import PublishError, publish
from qptables.store import chunk_key, read_attrs, update_attrs

NAME = "probit-test"
GRID = GridSpec((-6.0, 6.0, 0.05), (-1.0, 1.0, 0.05), (-1, 1))  # 241 x 41 per label


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / f"{NAME}.zarr"
    build(
        "probit",
        out,
        GRID,
        workers=1,
        samples=2,
        verify_dps=20,
        progress=False,
        stream=io.StringIO(),
    )
    return out


@pytest.fixture(scope="module")
def host(store, tmp_path_factory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("host")
    entry = publish(store, d, name=NAME)
    return d, entry


class Handler(http.server.SimpleHTTPRequestHandler):
    """``http.server``'s file handler, plus (when the test asks) byte ranges and dropped
    connections; records every request."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        path = self.translate_path(self.path)
        cuts = srv.cuts.get(self.path)
        if not (srv.ranges or cuts) or not os.path.isfile(path):
            return super().do_GET()
        data = Path(path).read_bytes()
        start = 0
        rng = self.headers.get("Range") if srv.ranges else None
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return self.send_error(416)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if cuts:  # send part of the body, then drop the connection
            self.wfile.write(body[: cuts.pop(0)])
            self.wfile.flush()
            self.close_connection = True
            return None
        self.wfile.write(body)
        return None


class Server:
    def __init__(self, directory: Path, ranges: bool = False) -> None:
        handler = functools.partial(Handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.requests = []
        self.httpd.cuts = {}
        self.httpd.ranges = ranges
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def requests(self) -> list:
        return self.httpd.requests


def assert_no_usable_table(cache: Path) -> None:
    """The cache holds no ``*.zarr`` table, no staging directory, and the name does not open."""
    if cache.exists():
        assert sorted(p.name for p in cache.glob("*.zarr")) == []
        assert [p.name for p in cache.iterdir() if p.name != ".downloads"] == []
    with pytest.raises(TableError, match="qpinfer download"):
        open_table(NAME)


def copy_host(host: tuple[Path, dict], tmp_path: Path) -> tuple[Path, dict]:
    src, entry = host
    d = tmp_path / "host"
    shutil.copytree(src, d)
    return d, dict(entry)


def set_entry(directory: Path, **changes) -> None:
    m = json.loads((directory / "manifest.json").read_text())
    m["tables"][NAME].update(changes)
    (directory / "manifest.json").write_text(json.dumps(m))


# ----------------------------------------------------------------------------- publish


def test_publish_writes_a_reproducible_archive_and_a_manifest_entry(store, host, tmp_path):
    d, entry = host  # shared by the other tests: not modified here
    archive = d / entry["file"]
    assert entry["file"] == f"{NAME}.tar.gz" and archive.stat().st_size == entry["size"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == entry["sha256"]
    attrs = read_attrs(store)
    assert entry["likelihood"] == "probit" and entry["grid"] == GRID.to_attrs()
    assert entry["shape"] == list(GRID.shape) and entry["package_version"] == qpinfer.__version__
    v = entry["verification"]
    assert v["passed"] is True and v["points"] == attrs["verification"]["points"] >= 16
    assert v["max_rel_error"] <= v["tolerance"]
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["format"] == dl.MANIFEST_FORMAT and manifest["tables"][NAME] == entry
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert all(n == f"{NAME}.zarr" or n.startswith(f"{NAME}.zarr/") for n in names)
    assert f"{NAME}.zarr/sigma_ratio/c/1/0/0" in names  # the published one-chunk layout
    # same store, same bytes; a second table is added beside the first
    again = publish(store, tmp_path / "again", name=NAME)
    assert again["sha256"] == entry["sha256"]
    shared = tmp_path / "shared"
    shutil.copytree(d, shared)  # (the module's host stays as it is)
    other = publish(store, shared, name="probit-copy")
    names = sorted(json.loads((shared / "manifest.json").read_text())["tables"])
    assert names == ["probit-copy", NAME] and other["content_sha256"] == entry["content_sha256"]


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        ("incomplete", "incomplete"),
        ("unverified", "verification did not pass"),
        ("no-points", "no mpmath-checked points"),
        ("corrupt", "fails its checksum"),
    ],
)
def test_publish_refuses_unfinished_unverified_or_corrupt_stores(store, tmp_path, damage, needle):
    bad = tmp_path / "bad.zarr"
    shutil.copytree(store, bad)
    ver = read_attrs(bad)["verification"]
    if damage == "incomplete":
        update_attrs(bad, complete=False)
    elif damage == "unverified":
        update_attrs(bad, verification={**ver, "passed": False})
    elif damage == "no-points":
        update_attrs(bad, verification={"passed": True, "points": 0})
    else:
        chunk = bad / chunk_key("sigma_ratio", 0, 0)
        data = bytearray(chunk.read_bytes())
        data[100] ^= 1
        chunk.write_bytes(bytes(data))
    with pytest.raises(PublishError, match=needle):
        publish(bad, tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


def test_publish_command_line(store, tmp_path, capsys):
    from qptables.cli.commands import main

    code = main(["publish", str(store), "--to", str(tmp_path / "dist"), "--json"])
    assert code == 0, capsys.readouterr().err
    entry = json.loads(capsys.readouterr().out)
    assert entry["name"] == NAME and (tmp_path / "dist" / "manifest.json").is_file()
    code = main(["publish", str(tmp_path / "missing.zarr"), "--to", str(tmp_path / "dist")])
    assert code == 2 and "not a table store" in capsys.readouterr().err
    code = main(["publish", str(store), "--to", str(tmp_path / "d2"), "--name", "no/slash"])
    assert code == 2 and "--name" in capsys.readouterr().err


# ----------------------------------------------------------------------------- download


def test_download_over_http_installs_atomically_and_serves_inference(host, cache, monkeypatch):
    d, entry = host
    with Server(d) as srv:
        path = qpinfer.tables.download(NAME, base_url=srv.url + "/")
        assert path == cache / f"{NAME}.zarr" and path.is_dir()
        assert [r[0] for r in srv.requests] == ["/manifest.json", f"/{entry['file']}"]
        # the likelihood's default (what table=None finds) points at it
        default = qpinfer.tables.installed_table_path("probit")
        assert default.is_symlink() and default.resolve() == path.resolve()
        assert sorted(p.name for p in cache.iterdir()) == [
            ".downloads",
            f"{NAME}.zarr",
            "probit.zarr",
        ]
        assert list((cache / ".downloads").glob("*.part")) == []
        # installed content already matches: a second call fetches the manifest only
        monkeypatch.setenv(dl.URL_ENV, srv.url)
        assert qpinfer.tables.download(NAME) == path
        assert [r[0] for r in srv.requests][2:] == ["/manifest.json"]

    table = open_table(NAME)  # by name
    assert table.path == path and table.shape == GRID.shape
    assert open_table("probit").attrs["checksums"] == table.attrs["checksums"]

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=40) > 0, 1, -1)
    # by name: table=None keeps the shipped table, which covers more (qpinfer.tables.choice)
    clf = qpinfer.GPClassifier("qp", table=NAME, optimizer=None, length_scale=1.5).fit(X, y)
    assert Path(clf.table_.path).resolve() == path.resolve()
    assert clf.table_.lookup_count > 0
    assert clf.score(X, y) > 0.8
    exact = qpinfer.GPClassifier("qp", table="exact", optimizer=None, length_scale=1.5).fit(X, y)
    np.testing.assert_allclose(clf.predict_proba(X), exact.predict_proba(X), atol=1e-4)


def test_download_from_a_file_url_and_the_command_line(host, cache, capsys):
    from qpinfer.cli import main

    d, _ = host
    code = main(["download", NAME, "--url", d.as_uri(), "--quiet", "--no-default"])
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip() == str(cache / f"{NAME}.zarr")
    assert not (cache / "probit.zarr").exists()  # --no-default
    code = main(["download", "nonexistent", "--url", str(d)])
    assert code == 2 and "no table named 'nonexistent'" in capsys.readouterr().err
    code = main(["list", "--url", str(d)])
    out = capsys.readouterr().out
    assert code == 0 and f"{NAME}.zarr" in out and f"{NAME}: probit" in out


def test_a_truncated_file_on_the_host_is_refused(host, cache, tmp_path):
    d, entry = copy_host(host, tmp_path)
    archive = d / entry["file"]
    archive.write_bytes(archive.read_bytes()[: entry["size"] // 2])
    with Server(d) as srv, pytest.raises(DownloadError, match="truncated"):
        qpinfer.tables.download(NAME, srv.url, retries=2)
    assert_no_usable_table(cache)
    assert list((cache / ".downloads").glob("*.part")) == []


def test_a_wrong_checksum_is_refused(host, cache, tmp_path):
    d, _ = copy_host(host, tmp_path)
    set_entry(d, sha256="0" * 64)
    with Server(d) as srv, pytest.raises(DownloadError, match="sha256 .* does not match"):
        qpinfer.tables.download(NAME, srv.url)
    assert_no_usable_table(cache)
    assert list((cache / ".downloads").glob("*.part")) == []


def test_an_unreachable_host_is_a_clear_error(host, cache):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    with pytest.raises(DownloadError, match=f"cannot reach the table host http://127.0.0.1:{port}"):
        qpinfer.tables.download(NAME, f"http://127.0.0.1:{port}", retries=1)
    assert_no_usable_table(cache)
    with pytest.raises(DownloadError, match="no table host"):
        qpinfer.tables.download(NAME)  # neither base_url nor $QPINFER_TABLES_URL
    with pytest.raises(DownloadError, match="manifest .*HTTP 404"):
        qpinfer.tables.download(NAME, Path("/nonexistent-dir").as_uri())
    with pytest.raises(UnknownTableError, match=f"available: {NAME}"):
        qpinfer.tables.download("other", host[0])


def test_an_interrupted_download_fails_cleanly_then_resumes(host, cache, tmp_path):
    d, entry = host
    size, file = entry["size"], f"/{entry['file']}"
    with Server(d, ranges=True) as srv:
        srv.httpd.cuts[file] = [size // 3]
        with pytest.raises(DownloadError, match="interrupted.*resumed next time"):
            qpinfer.tables.download(NAME, srv.url, retries=0)
        assert_no_usable_table(cache)
        (part,) = (cache / ".downloads").glob("*.part")
        assert part.stat().st_size == size // 3
        # the next call resumes where the transfer stopped
        path = qpinfer.tables.download(NAME, srv.url, retries=0)
        assert srv.requests[-1] == (file, f"bytes={size // 3}-")
        assert open_table(path, verify_checksums=True).attrs["complete"] is True
        assert not part.exists()
        # two drops in one call: retried (resuming each time) within the call
        srv.httpd.cuts[file] = [size // 4, size // 2]
        path = qpinfer.tables.download(NAME, srv.url, retries=2, force=True)
        ranges = [r for p, r in srv.requests[-3:] if p == file]
        assert ranges == [None, f"bytes={size // 4}-", f"bytes={size // 4 + size // 2}-"]
    open_table(path, verify_checksums=True)


def test_a_part_file_is_restarted_when_the_server_ignores_ranges(host, cache):
    d, entry = host
    downloads = cache / ".downloads"
    downloads.mkdir(parents=True)
    part = downloads / f"{NAME}-{entry['sha256'][:16]}.tar.gz.part"
    part.write_bytes(b"garbage that a resume would keep")
    with Server(d) as srv:  # plain http.server: no Range support, answers 200
        path = qpinfer.tables.download(NAME, srv.url)
    open_table(path, verify_checksums=True)


def test_an_archive_with_the_right_sha256_but_a_corrupt_table_is_not_installed(
    host, cache, tmp_path
):
    d, entry = copy_host(host, tmp_path)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(d / entry["file"]) as tar:
        tar.extractall(unpacked, filter="data")
    chunk = unpacked / f"{NAME}.zarr" / chunk_key("sigma_qp", 1, 0)
    data = bytearray(chunk.read_bytes())
    data[8] ^= 0x40
    chunk.write_bytes(bytes(data))
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        tar.add(unpacked / f"{NAME}.zarr", arcname=f"{NAME}.zarr")
    (d / entry["file"]).write_bytes(buf.getvalue())
    set_entry(d, size=len(buf.getvalue()), sha256=hashlib.sha256(buf.getvalue()).hexdigest())
    with pytest.raises(DownloadError, match="not valid.*checksum"):
        qpinfer.tables.download(NAME, d.as_uri())
    assert_no_usable_table(cache)


def test_qpinfer_download_imports_no_dask():
    code = (
        "import sys, qpinfer.cli, qpinfer.tables.remote.install, qpinfer.tables; "
        "bad = [m for m in ('dask', 'distributed', 'mpmath') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
