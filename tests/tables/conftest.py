"""Fixtures shared by the download tests: an empty table cache, and a table host directory."""

from __future__ import annotations

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
