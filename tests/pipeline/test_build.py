"""End-to-end builds on a real ``distributed.LocalCluster`` (small grids, a few seconds each).

The reference for "exact" is qpinfer's kernel called directly, one ``mu`` row per call -- the
call unit the pipeline documents (see :mod:`qptables.pipeline.grid_layout`, "Bit-identity").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

import qpinfer
from qpinfer.tables.schema import DATA_VARS, DIMS, REQUIRED_ATTRS, SCHEMA_VERSION
from qptables import BuildError, BuildInputError, GridSpec, LockError, build
from qptables.pipeline.resume import lock_path, partial_path, publishing_path
from qptables.store import (
    StoreError,
    chunk_key,
    consolidate_store,
    published_grid,
    read_attrs,
    scan_tiles,
)
from tests._helpers import FAST, chunk_files, direct_kernel

GRID = GridSpec((-2.0, 2.0, 0.1), (-1.0, 1.0, 0.1), (-1, 1))  # 41 x 21 points per label
PUBLISHED = published_grid(GRID)  # one chunk per (variable, y)


def load(path: Path) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(path), mode="r", use_consolidated=False)
    return {var: np.asarray(g[var][...]) for var in DATA_VARS}


@pytest.fixture(scope="module")
def client(dask_client):
    return dask_client


@pytest.fixture(scope="module")
def built(tmp_path_factory, client):
    out = tmp_path_factory.mktemp("built") / "probit.zarr"
    result = build("probit", out, GRID, client=client, **FAST)
    return out, result


def test_build_equals_direct_kernel_output_exactly(built):
    out, result = built
    assert result.published and result.tiles_computed == result.tiles_total == GRID.n_tiles
    got = load(out)
    want = direct_kernel("probit", GRID)
    for var in DATA_VARS:
        assert got[var].shape == GRID.shape
        assert np.array_equal(got[var], want[var]), var


def test_build_matches_whole_grid_kernel_call_to_rounding(built):
    """A single whole-grid call may differ in the last bits (batch-wide Newton stopping)."""
    out, _ = built
    got = load(out)["sigma_qp"]
    mu, ls = np.meshgrid(GRID.mu_values(), GRID.log10_sigma_values(), indexing="ij")
    for iy, y in enumerate(GRID.y):
        whole = qpinfer.sigma_qp("probit", mu, 10.0**ls, y)
        np.testing.assert_allclose(got[iy], whole, rtol=1e-13, atol=0)


def test_probit_mirror_copies_exact_rows_and_stays_bit_identical(built):
    out, result = built
    n_exact = int((GRID.mu_values()[::-1] == -GRID.mu_values()).sum())
    assert result.rows_mirrored == n_exact > 0
    n_ls = GRID.log10_sigma.n
    assert result.points_computed == (GRID.mu.n + GRID.mu.n - n_exact) * n_ls
    got = load(out)
    want = direct_kernel("probit", GridSpec(GRID.mu, GRID.log10_sigma, (-1,)))
    for var in DATA_VARS:
        assert np.array_equal(got[var][0], want[var][0])


@pytest.fixture(scope="module")
def unpublished(tmp_path_factory, client):
    """A finished but unpublished build (``OUT.partial`` with every tile): verification was made
    to fail (tolerance 1e-300), which keeps the partial store."""
    out = tmp_path_factory.mktemp("unpublished") / "probit.zarr"
    with pytest.raises(BuildError, match="verification failed"):
        build("probit", out, GRID, client=client, tolerance=1e-300, **FAST)
    assert not out.exists() and not publishing_path(out).exists()
    return partial_path(out)


def test_store_follows_the_schema_and_opens_with_xarray(built):
    import xarray as xr

    out, _ = built
    attrs = read_attrs(out)
    for name in REQUIRED_ATTRS:
        assert name in attrs, name
    assert attrs["qp_schema_version"] == SCHEMA_VERSION
    assert attrs["complete"] is True
    assert attrs["likelihood"] == "probit"
    # published layout: one chunk per (variable, y); the build's tiling is recorded
    assert attrs["grid"] == GRID.to_attrs() and attrs["tile_mu"] == GRID.mu.n
    assert attrs["layout"]["build_tile_mu"] == GRID.tile_mu < GRID.mu.n
    assert attrs["build"]["tile_mu"] == GRID.tile_mu
    assert set(attrs["checksums"]) == {chunk_key(v, iy, 0) for v in DATA_VARS for iy in (0, 1)}
    v = attrs["verification"]
    assert v["passed"] and v["max_rel_error"] <= v["tolerance"] == 1e-10
    assert v["points"] >= 16 and v["scan"]["nonfinite"] == 0

    g = zarr.open_group(str(out), mode="r")
    for var in DATA_VARS:
        arr = g[var]
        assert arr.chunks == PUBLISHED.chunk_shape == (1, GRID.mu.n, GRID.log10_sigma.n)
        assert arr.compressors == () and arr.metadata.dimension_names == DIMS
    size = PUBLISHED.chunk_nbytes()
    files = chunk_files(out)
    assert len(files) == 4 and all(len(b) == size for b in files.values())
    table = qpinfer.open_table(out, verify_checksums=True)
    assert table.tile_mu == GRID.mu.n and table.shape == GRID.shape

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # consolidated metadata: no fallback warning
        ds = xr.open_zarr(out)
    assert tuple(ds["sigma_qp"].dims) == DIMS
    np.testing.assert_array_equal(ds["mu"].values, GRID.mu_values())
    np.testing.assert_array_equal(ds["log10_sigma"].values, GRID.log10_sigma_values())
    np.testing.assert_array_equal(ds["y"].values, [-1, 1])
    assert ds.attrs["complete"] is True
    assert float(ds["sigma_ratio"].max()) <= 1.0 + 1e-12
    assert not partial_path(out).exists() and not lock_path(out).exists()
    assert not publishing_path(out).exists()


def test_published_copy_holds_the_tiles_bit_for_bit(built, unpublished):
    out, _ = built
    tiles = load(unpublished)
    assert read_attrs(unpublished)["complete"] is False  # a partial never says complete
    for var, values in load(out).items():
        assert np.array_equal(values, tiles[var], equal_nan=False), var


def test_resume_recomputes_only_missing_or_damaged_tiles(built, unpublished, client, tmp_path):
    src, _ = built
    out = tmp_path / "probit.zarr"
    partial = partial_path(out)
    shutil.copytree(unpublished, partial)
    # lose three tiles (one of them a y=+1 tile that y=-1 tiles are mirrored from) ...
    lost = [(1, 0), (1, 5), (0, 7)]
    for iy, k in lost:
        (partial / chunk_key("sigma_qp", iy, k)).unlink()
    # ... truncate one chunk (a half-written file) and leave a killed writer's temp file
    victim = partial / chunk_key("sigma_ratio", 0, 3)
    victim.write_bytes(victim.read_bytes()[:100])
    (victim.parent / "0.deadbeef.partial").write_bytes(b"junk")
    assert len(scan_tiles(partial, GRID, clean=False)) == GRID.n_tiles - 4

    result = build("probit", out, GRID, client=client, **FAST)
    assert (result.tiles_computed, result.tiles_reused) == (4, GRID.n_tiles - 4)
    assert chunk_files(out) == chunk_files(src)
    assert read_attrs(out)["checksums"] == read_attrs(src)["checksums"]


def test_incompatible_partial_is_refused_and_force_restarts(built, client, tmp_path):
    src, _ = built
    out = tmp_path / "probit.zarr"
    shutil.copytree(src, partial_path(out))
    grid = GridSpec((-2.0, 2.0, 0.25), (-1.0, 1.0, 0.1), (-1, 1))  # all rows mirror exactly
    with pytest.raises(BuildInputError, match="cannot be resumed.*grid"):
        build("probit", out, grid, client=client, **FAST)
    assert partial_path(out).exists() and not out.exists()

    result = build("probit", out, grid, client=client, force=True, **FAST)
    assert result.tiles_reused == 0 and result.rows_mirrored == grid.mu.n
    assert result.points_computed == grid.mu.n * grid.log10_sigma.n  # y=-1 costs nothing
    got, want = load(out), direct_kernel("probit", grid)
    for var in DATA_VARS:
        assert np.array_equal(got[var], want[var])


def test_force_replaces_an_existing_store_only_after_success(built, client, tmp_path):
    src, _ = built
    out = tmp_path / "probit.zarr"
    shutil.copytree(src, out)
    before = chunk_files(out), (out / "zarr.json").read_bytes()

    with pytest.raises(BuildInputError, match="already exists.*--force"):
        build("probit", out, GRID, client=client, **FAST)

    # a failing verification never publishes: OUT stays as it was, the partial is kept
    with pytest.raises(BuildError, match="verification failed"):
        build("probit", out, GRID, client=client, force=True, tolerance=1e-300, **FAST)
    assert (chunk_files(out), (out / "zarr.json").read_bytes()) == before
    kept = read_attrs(partial_path(out))
    assert kept["complete"] is False and kept["verification"]["passed"] is False

    # a stale lock (dead process on this host) is taken over with a warning
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    lock_path(out).write_text(json.dumps({"pid": int(proc.stdout), "host": os.uname().nodename}))
    with pytest.warns(UserWarning, match="stale lock"):
        result = build("probit", out, GRID, client=client, force=True, **FAST)
    assert result.tiles_computed == 0 and result.tiles_reused == GRID.n_tiles
    assert chunk_files(out) == before[0]
    assert read_attrs(out)["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probit.zarr"]


def test_a_concurrent_build_is_refused(built, client, tmp_path):
    out = tmp_path / "probit.zarr"
    lock_path(out).write_text(
        json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "started": "now"})
    )
    with pytest.raises(LockError, match=f"pid {os.getppid()}"):
        build("probit", out, GRID, client=client, **FAST)
    assert not out.exists() and not partial_path(out).exists()
    assert lock_path(out).exists()  # someone else's lock is left alone


def test_an_interrupted_publish_leaves_nothing_published_and_reruns_cleanly(
    built, unpublished, client, tmp_path
):
    src, _ = built
    out = tmp_path / "probit.zarr"
    shutil.copytree(unpublished, partial_path(out))
    # a killed publish: its half-written copy even says complete (the last write before the
    # rename); it is never at OUT, and the next run deletes and redoes it
    stale = publishing_path(out)
    shutil.copytree(src, stale)
    (stale / chunk_key("sigma_qp", 1, 0)).unlink()
    result = build("probit", out, GRID, client=client, **FAST)
    assert result.published and result.tiles_computed == 0
    assert chunk_files(out) == chunk_files(src)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probit.zarr"]


def test_publishing_refuses_tiles_changed_after_checksumming(unpublished, tmp_path):
    partial = tmp_path / "probit.zarr.partial"
    shutil.copytree(unpublished, partial)
    victim = partial / chunk_key("sigma_ratio", 1, 2)
    data = bytearray(victim.read_bytes())
    data[0] ^= 1
    victim.write_bytes(bytes(data))
    dst = tmp_path / "probit.zarr.publishing"
    with pytest.raises(StoreError, match="changed since it was checksummed"):
        consolidate_store(partial, dst)  # inline, without a cluster
    assert read_attrs(dst)["complete"] is False  # the unfinished copy never looks complete
    with pytest.raises(qpinfer.TableError, match="incomplete"):
        qpinfer.open_table(dst)


def test_a_lock_with_our_own_pid_from_an_earlier_run_is_stale(tmp_path):
    """A re-run container with a pinned hostname (cluster/) gets the same pid (1) as the killed
    run that left the lock; a lock this process itself holds is still respected."""
    from qptables.pipeline.resume import BuildLock

    out = tmp_path / "probit.zarr"
    lock_path(out).write_text(
        json.dumps(
            {"pid": os.getpid(), "host": os.uname().nodename, "token": "from-a-killed-container"}
        )
    )
    with (
        pytest.warns(UserWarning, match="stale lock"),
        BuildLock(out),
        pytest.raises(LockError, match="is running"),
    ):
        BuildLock(out).acquire()  # another build in this very process (a thread)
    assert not lock_path(out).exists()
