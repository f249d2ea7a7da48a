"""Fixtures shared by the download tests: an empty table cache, a table host directory, a
copy of a host with files added to its archive, and a loopback http server."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import shutil
import tarfile
import threading
from pathlib import Path

import pytest

import qpinfer.tables.remote.install as dl
import qpinfer.tables.remote.transfer
from qptables.pipeline.publish import publish
from tests.tables.test_tables_reader import write_store


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty table cache (``QPINFER_TABLES``), no host URL from the environment, and quick
    retries."""
    c = tmp_path / "cache"
    monkeypatch.setenv("QPINFER_TABLES", str(c))
    monkeypatch.delenv(dl.URL_ENV, raising=False)
    monkeypatch.setattr(qpinfer.tables.remote.transfer, "RETRY_BACKOFF", 0.01)
    return c


def probit_host(tmp_path_factory, name: str) -> tuple[Path, dict]:
    """A table host directory (manifest + archive) holding one small probit table ``name``,
    and its manifest entry."""
    root = tmp_path_factory.mktemp(name)
    store, _, _ = write_store(root / f"{name}.zarr")
    d = root / "host"
    return d, publish(store, d, name=name)


def repack_host(
    host: tuple[Path, dict],
    tmp_path: Path,
    name: str,
    extra: dict[str, bytes],
    listed: bool = False,
    **entry,
) -> Path:
    """A copy of the host whose archive of the table ``name`` also holds the files ``extra``
    (``{path under the store: content}``, replacing a file of that path), listed in the store's
    integrity record if ``listed``; the manifest entry's size and sha256 follow the new archive,
    and its fields ``entry`` take the values given (``None`` removes the field)."""
    src, listing = host
    d = tmp_path / "host"
    shutil.copytree(src, d)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(d / listing["file"]) as tar:
        tar.extractall(unpacked, filter="data")
    top = unpacked / f"{name}.zarr"
    for rel, data in extra.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_bytes(data)
    if listed:
        root = json.loads((top / "zarr.json").read_text())
        root["attributes"]["integrity"]["files"].update(dict.fromkeys(extra, "0" * 64))
        (top / "zarr.json").write_text(json.dumps(root))
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        tar.add(top, arcname=f"{name}.zarr")
    (d / listing["file"]).write_bytes(buf.getvalue())
    m = json.loads((d / "manifest.json").read_text())
    fields = m["tables"][name]
    fields.update(size=len(buf.getvalue()), sha256=hashlib.sha256(buf.getvalue()).hexdigest())
    for key, value in entry.items():
        if value is None:
            fields.pop(key, None)
        else:
            fields[key] = value
    (d / "manifest.json").write_text(json.dumps(m))
    return d


class LoopbackServer:
    """A threaded ``http.server`` on 127.0.0.1 serving ``directory`` with the subclass's
    ``handler``, from ``with`` to its end; the handler reads the server's ``mode``, ``stop`` (set
    on exit), ``requests`` (a list to record paths in) and the ``settings`` given."""

    handler: type[http.server.BaseHTTPRequestHandler]

    def __init__(self, directory: Path, mode: str, **settings) -> None:
        handler = functools.partial(type(self).handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.mode = mode
        self.httpd.requests = []
        self.httpd.stop = threading.Event()
        for key, value in settings.items():
            setattr(self.httpd, key, value)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
