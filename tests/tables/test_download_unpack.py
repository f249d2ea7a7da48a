"""Unpacking a downloaded v2 (cells) table: membership is decided from the members' names before
any is read, and every file is bounded by the size the store's metadata gives for it.

* Stray metadata members (``*/zarr.json`` the store's integrity record does not list) are refused
  by name without being read: the memory used stays below one metadata budget however many
  there are.
* A listed chunk larger than its array's chunk shape, or a listed file whose size the metadata
  does not give and that is larger than the cap for such files, is refused before anything is
  written -- also when the manifest lists no ``store_bytes``, or an absurd one.

The host is a real directory (``file://``) holding an archive ``qptables publish`` wrote for the
smallest shipped v2 table, repacked with the extra members.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

import qpinfer.tables.remote.install as dl
from qpinfer.tables import TableError, open_table
from qpinfer.tables.reduced import ReducedTable
from qpinfer.tables.remote.install import DownloadError
from qpinfer.tables.remote.unpack import META_MAX_BYTES, UNSIZED_MAX_BYTES
from qpinfer.tables.shipped import shipped_path
from qptables.pipeline.publish import publish
from tests.tables.conftest import repack_host

NAME = "step-cells"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("cells") / "host"
    entry = publish(shipped_path("step_noise(eps=0.2)"), d, name=NAME)
    return d, entry


def assert_nothing_installed(cache: Path) -> None:
    if cache.exists():
        assert [p.name for p in cache.iterdir() if p.name != ".downloads"] == []
    with pytest.raises(TableError, match="qpinfer download"):
        open_table(NAME)


def test_a_published_v2_table_installs(host, cache):
    table = open_table(dl.download(NAME, host[0].as_uri()))
    assert isinstance(table, ReducedTable) and table.likelihood == "step_noise(eps=0.2)"


def test_stray_metadata_members_are_refused_by_name_without_being_read(host, cache, tmp_path):
    """Four metadata files of the largest size read, in the store's own folders, none listed,
    no ``store_bytes``: the memory used stays below one of them."""
    folders = ("core_y/c", "core_z/c", "rho_core/c", "rho_core/c/0")
    d = repack_host(
        host,
        tmp_path,
        NAME,
        {f"{f}/zarr.json": bytes(META_MAX_BYTES) for f in folders},
        store_bytes=None,
    )
    tracemalloc.start()
    try:
        with pytest.raises(DownloadError, match=r"core_y/c/zarr.json.*not part of the table"):
            dl.download(NAME, d.as_uri())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < META_MAX_BYTES, peak
    assert_nothing_installed(cache)


@pytest.mark.parametrize("store_bytes", [None, 10**9], ids=["no-store_bytes", "absurd"])
def test_a_listed_chunk_larger_than_its_array_says_is_refused_before_it_is_written(
    host, cache, tmp_path, store_bytes
):
    key, size = "rho_core/c/0/0", 32 << 20  # the real chunk has 3648 bytes
    d = repack_host(host, tmp_path, NAME, {key: bytes(size)}, store_bytes=store_bytes)
    with pytest.raises(DownloadError, match=rf"{key}.* has {size} bytes, its array's .* 3648"):
        dl.download(NAME, d.as_uri())
    assert_nothing_installed(cache)


def test_a_listed_file_of_no_known_size_is_capped(host, cache, tmp_path):
    size = UNSIZED_MAX_BYTES + 1
    d = repack_host(
        host, tmp_path, NAME, {"notes/blob": bytes(size)}, listed=True, store_bytes=None
    )
    with pytest.raises(DownloadError, match=rf"notes/blob.*{size} bytes; at most {size - 1}"):
        dl.download(NAME, d.as_uri())
    assert_nothing_installed(cache)
