"""The sigma* table reader (qpinfer.tables): validation, memory-mapped lookups, exact fallback.

Stores are written here by :func:`write_store`, a minimal writer that follows
``qpinfer/tables/schema.py`` to the letter (zarr v3, uncompressed ``(1, tile_mu, n_log10_sigma)``
chunks, the required attributes, sha256 per chunk file, the integrity record of
:mod:`qpinfer.tables.integrity` as a published build has it); one test also reads a store built by
the real pipeline (``qptables.pipeline.build``) when it is available.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.interpolate import RegularGridInterpolator

import qpinfer
from qpinfer.tables import TableError, open_table
from qpinfer.tables.integrity import INTEGRITY_ATTR, integrity_record
from qpinfer.tables.schema import DATA_VARS, DIMS, SCHEMA_VERSION, grid_axis
from tests._helpers import FAST

PROBIT = qpinfer.get_likelihood("probit")


# --------------------------------------------------------------------------------------------
# a minimal writer that follows the contract in qpinfer/tables/schema.py ---------------------------
def exact_grid_values(likelihood, y, mu, log10_sigma):
    """sigma_qp and sigma_ratio on the grid, shape (len(y), len(mu), len(log10_sigma))."""
    lik = qpinfer.get_likelihood(likelihood)
    qp = np.empty((len(y), mu.size, log10_sigma.size))
    ratio = np.empty_like(qp)
    M, S = np.meshgrid(mu, 10.0**log10_sigma, indexing="ij")
    symmetric = lik.name == "probit" and np.allclose(mu, -mu[::-1], rtol=0, atol=1e-12)
    cache = {}

    def exact(label):
        if label not in cache:
            cache[label] = qpinfer.sigma_qp(lik, M, S, np.full(M.shape, float(label)))
        return cache[label]

    for iy, yy in enumerate(y):
        # exact mirror symmetry of the probit: sigma*(mu, s, -1) = sigma*(-mu, s, +1)
        qp[iy] = exact(1)[::-1] if (symmetric and yy == -1) else exact(yy)
        _, s_ep = lik.tilted_moments(M, S, np.full(M.shape, float(yy)))
        ratio[iy] = qp[iy] / s_ep
    return qp, ratio


def write_store(
    path,
    likelihood="probit",
    mu=(-1.0, 1.0, 0.1),
    log10_sigma=(-0.2, 0.2, 0.05),
    y=(-1, 1),
    tile_mu=4,
    values=None,
):
    """Write a complete, verified store per qpinfer.tables.schema; returns (path, sigma_qp,
    ratio)."""
    import zarr
    from zarr.storage import LocalStore

    mu_v = grid_axis(*mu)
    ls_v = grid_axis(*log10_sigma)
    if values is None:
        values = exact_grid_values(likelihood, y, mu_v, ls_v)
    qp, ratio = values
    g = zarr.open_group(LocalStore(str(path)), mode="w-", zarr_format=3)
    shape = (len(y), mu_v.size, ls_v.size)
    for var, data in (("sigma_qp", qp), ("sigma_ratio", ratio)):
        arr = g.create_array(
            var,
            shape=shape,
            chunks=(1, tile_mu, ls_v.size),
            dtype="<f8",
            compressors=None,
            filters=None,
            fill_value=np.nan,
            dimension_names=DIMS,
        )
        arr[...] = data
    for name, vals in (("y", np.asarray(y, "<i8")), ("mu", mu_v), ("log10_sigma", ls_v)):
        c = g.create_array(
            name,
            shape=vals.shape,
            chunks=vals.shape,
            dtype=vals.dtype,
            compressors=None,
            filters=None,
            dimension_names=(name,),
        )
        c[...] = vals
    checksums = {}
    n_chunks = -(-mu_v.size // tile_mu)
    for var in DATA_VARS:
        for iy in range(len(y)):
            for k in range(n_chunks):
                key = f"{var}/c/{iy}/{k}/0"
                checksums[key] = hashlib.sha256((Path(path) / key).read_bytes()).hexdigest()
    g.attrs.update(
        {
            "qp_schema_version": SCHEMA_VERSION,
            "likelihood": likelihood,
            "grid": {"mu": list(mu), "log10_sigma": list(log10_sigma), "y": list(y)},
            "tile_mu": tile_mu,
            "package_version": qpinfer.__version__,
            "created": "2024-01-01T00:00:00+00:00",
            "complete": True,
            "checksums": checksums,
            "verification": {
                "points": 10,
                "max_rel_error": 1e-12,
                "median_rel_error": 1e-14,
                "tolerance": 1e-9,
                "seconds": 0.1,
                "passed": True,
            },
        }
    )
    _sign(path)
    return Path(path), qp, ratio


def _sign(path) -> None:
    """Write the integrity record over the store's metadata as it is on disk now (what
    ``qptables`` does when it publishes a build)."""
    meta_path = Path(path) / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["attributes"].pop(INTEGRITY_ATTR, None)
    meta["attributes"][INTEGRITY_ATTR] = integrity_record(path, meta["attributes"])
    meta_path.write_text(json.dumps(meta))


def _edit_attrs(path, *, resign=True, **changes):
    """Edit root attributes; ``resign``: record the result in a fresh integrity record (a store
    *written* that way, so the checks behind the record are what is tested)."""
    meta_path = Path(path) / "zarr.json"
    meta = json.loads(meta_path.read_text())
    for k, v in changes.items():
        if v is None:
            meta["attributes"].pop(k, None)
        else:
            meta["attributes"][k] = v
    meta_path.write_text(json.dumps(meta))
    if resign:
        _sign(path)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("tables") / "probit.zarr"
    return write_store(path)


@pytest.fixture
def store_copy(small_store, tmp_path):
    path = small_store[0]
    dst = tmp_path / "copy.zarr"
    shutil.copytree(path, dst)
    return dst


# --------------------------------------------------------------------------------------------
# opening and lookups ------------------------------------------------------------------------------
def test_open_reports_grid_and_likelihood(small_store):
    path, qp, _ = small_store
    t = open_table(path)
    assert t.likelihood == "probit"
    assert t.shape == qp.shape
    assert t.y.tolist() == [-1, 1]
    assert t.domain["mu"] == pytest.approx((-1.0, 1.0))
    assert t.domain["sigma"] == pytest.approx((10**-0.2, 10**0.2))
    assert "probit" in repr(t)


def test_open_maps_no_chunk_until_a_lookup_needs_it(small_store):
    path, _, _ = small_store
    t = open_table(path)
    assert all(m is None for maps in t._maps.values() for m in maps)
    t.sigma_ratio(0.05, 1.0, 1)
    mapped = [i for i, m in enumerate(t._maps["sigma_ratio"]) if m is not None]
    assert len(mapped) == 1  # one chunk: the one holding mu = 0.0 and 0.1 for y = +1


def test_lookup_at_grid_nodes_returns_stored_values(small_store):
    path, _, ratio = small_store
    t = open_table(path)
    mu = grid_axis(-1.0, 1.0, 0.1)
    ls = grid_axis(-0.2, 0.2, 0.05)
    M, L = np.meshgrid(mu, ls, indexing="ij")
    for iy, y in enumerate((-1, 1)):
        got = t.sigma_ratio(M, 10.0**L, y)
        np.testing.assert_allclose(got, ratio[iy], rtol=1e-13)


def test_lookup_is_bilinear_in_mu_and_log10_sigma_across_chunk_boundaries(small_store):
    path, _, ratio = small_store
    t = open_table(path)
    mu = grid_axis(-1.0, 1.0, 0.1)
    ls = grid_axis(-0.2, 0.2, 0.05)
    rng = np.random.default_rng(1)
    n = 20000
    qm = rng.uniform(-1, 1, n)
    qm[:200] = rng.uniform(0.3, 0.4, 200)  # between rows 13 and 14: rows 3 and 0 of chunks 3, 4
    ql = rng.uniform(-0.2, 0.2, n)
    qy = rng.choice([-1, 1], n)
    got = t.sigma_ratio(qm, 10.0**ql, qy)
    for iy, y in enumerate((-1, 1)):
        ref = RegularGridInterpolator((mu, ls), ratio[iy], method="linear")
        sel = qy == y
        np.testing.assert_allclose(got[sel], ref(np.c_[qm[sel], ql[sel]]), rtol=1e-13)
    assert t.fallback_count == 0
    assert t.lookup_count == n


def test_single_queries_take_the_scalar_path_and_agree_with_batches(small_store):
    path, _, _ = small_store
    t = open_table(path)
    rng = np.random.default_rng(5)
    qm = np.r_[rng.uniform(-1, 1, 200), rng.uniform(0.3, 0.4, 50), 1.0, -1.0]
    ql = rng.uniform(-0.2, 0.2, qm.size)
    qy = rng.choice([-1, 1], qm.size)
    batch = t.sigma_ratio(qm, 10.0**ql, qy)
    single = [t.sigma_ratio(m, 10.0**lv, yy) for m, lv, yy in zip(qm, ql, qy, strict=True)]
    np.testing.assert_allclose(single, batch, rtol=1e-14)
    assert t.fallback_count == 0
    with pytest.warns(RuntimeWarning, match="outside"):
        out = t.sigma_ratio(3.0, 1.0, 1)
    _, s_ep = PROBIT.tilted_moments(3.0, 1.0, 1.0)
    assert out == pytest.approx(qpinfer.sigma_qp(PROBIT, 3.0, 1.0, 1.0) / s_ep, rel=1e-14)
    assert t.fallback_count == 1


def test_lookup_at_domain_corners_and_last_row(small_store):
    path, _, ratio = small_store
    t = open_table(path)
    s_lo, s_hi = 10.0**-0.2, 10.0**0.2
    got = t.sigma_ratio([-1.0, 1.0, -1.0, 1.0], [s_lo, s_lo, s_hi, s_hi], 1)
    np.testing.assert_allclose(got, ratio[1][[0, -1, 0, -1], [0, 0, -1, -1]], rtol=1e-13)
    assert t.fallback_count == 0


def test_sigma_qp_is_ratio_times_exact_ep_std(small_store):
    path, _, _ = small_store
    t = open_table(path)
    mu = np.array([-0.55, 0.123, 0.77])
    s = np.array([0.8, 1.0, 1.4])
    y = np.array([1, -1, 1])
    _, s_ep = PROBIT.tilted_moments(mu, s, y.astype(float))
    np.testing.assert_allclose(t.sigma_qp(mu, s, y), t.sigma_ratio(mu, s, y) * s_ep, rtol=1e-15)
    # and a coarse table (step 0.1) is already close to the exact kernel
    np.testing.assert_allclose(t.sigma_qp(mu, s, y), qpinfer.sigma_qp(PROBIT, mu, s, y), rtol=1e-4)


def test_lookup_keeps_the_broadcast_shape(small_store):
    t = open_table(small_store[0])
    out = t.sigma_qp(np.zeros((3, 1)), np.ones((1, 4)), 1)
    assert out.shape == (3, 4)


def test_outside_domain_or_missing_y_falls_back_to_exact_and_is_counted(small_store, tmp_path):
    path, _, _ = small_store
    t = open_table(path)
    mu = np.array([0.0, 5.0, 0.0, -3.0])
    s = np.array([1.0, 1.0, 3.0, 0.1])  # in; mu out; sigma out; both out
    with pytest.warns(RuntimeWarning, match="outside the table"):
        got = t.sigma_qp(mu, s, 1)
    assert t.fallback_count == 3
    exact = qpinfer.sigma_qp(PROBIT, mu, s, np.ones(4))
    np.testing.assert_allclose(got[1:], exact[1:], rtol=1e-14)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = t.sigma_ratio(7.0, 1.0, -1)
    assert not [w for w in caught if "outside the table" in str(w.message)]  # warned once only
    _, s_ep = PROBIT.tilted_moments(7.0, 1.0, -1.0)
    assert r == pytest.approx(qpinfer.sigma_qp(PROBIT, 7.0, 1.0, -1.0) / s_ep, rel=1e-14)
    assert t.fallback_count == 4

    # a table with y = +1 only: y = -1 is computed exactly
    one = write_store(
        tmp_path / "plus.zarr", y=(1,), mu=(-1.0, 1.0, 0.5), log10_sigma=(-0.2, 0.2, 0.2)
    )
    t1 = open_table(one[0])
    with pytest.warns(RuntimeWarning):
        got = t1.sigma_qp([0.1, 0.1], [1.0, 1.0], [1, -1])
    assert t1.fallback_count == 1
    assert got[1] == pytest.approx(qpinfer.sigma_qp(PROBIT, 0.1, 1.0, -1.0), rel=1e-14)


def test_bad_queries_raise_value_error(small_store):
    t = open_table(small_store[0])
    with pytest.raises(ValueError, match="finite"):
        t.sigma_qp(np.nan, 1.0, 1)
    with pytest.raises(ValueError, match="sigma must be > 0"):
        t.sigma_ratio(0.0, -1.0, 1)
    with pytest.raises(ValueError, match="broadcast"):
        t.sigma_ratio(np.zeros(3), np.ones(2), 1)


# --------------------------------------------------------------------------------------------
# validation: corrupt, truncated, incomplete or foreign stores are refused -------------------------
@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"qp_schema_version": 99}, "schema version"),
        ({"complete": False}, "incomplete"),
        ({"verification": {"passed": False, "max_rel_error": 1.0}}, "verification"),
        ({"verification": {}}, "verification"),
        ({"checksums": None}, "missing root attributes"),
        ({"likelihood": None}, "missing root attributes"),
        ({"grid": {"mu": [-1.0, 1.0, 0.2], "log10_sigma": [-0.2, 0.2, 0.05], "y": [-1, 1]}}, "mu"),
        ({"grid": {"mu": [-1.0, 1.0, 0.1], "log10_sigma": [-0.2, 0.2, 0.05], "y": [1, 2]}}, "y"),
        ({"tile_mu": 5}, "chunks"),
    ],
)
def test_store_with_bad_attributes_is_refused(store_copy, change, match):
    _edit_attrs(store_copy, **change)
    with pytest.raises(TableError, match=match):
        open_table(store_copy)


def test_truncated_chunk_is_refused(store_copy):
    f = store_copy / "sigma_ratio" / "c" / "1" / "2" / "0"
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(TableError, match="bytes, expected"):
        open_table(store_copy)


def test_missing_chunk_is_refused(store_copy):
    os.remove(store_copy / "sigma_qp" / "c" / "0" / "5" / "0")
    with pytest.raises(TableError, match="missing"):
        open_table(store_copy)


def test_missing_checksum_entry_is_refused(store_copy):
    meta = json.loads((store_copy / "zarr.json").read_text())
    del meta["attributes"]["checksums"]["sigma_ratio/c/0/0/0"]
    _edit_attrs(store_copy, checksums=meta["attributes"]["checksums"])
    with pytest.raises(TableError, match="no checksum"):
        open_table(store_copy)


def test_a_store_without_its_integrity_record_is_refused(store_copy):
    """Without the record nothing ties the likelihood to the numbers: an edited likelihood would
    be served as the new one. Refused as v2 stores are, naming the record."""
    _edit_attrs(
        store_copy, resign=False, **{INTEGRITY_ATTR: None, "likelihood": "step_noise(eps=0.2)"}
    )
    with pytest.raises(
        TableError, match=r"copy.zarr.*no integrity record \(attrs\['integrity'\]\)"
    ):
        open_table(store_copy)
    _edit_attrs(store_copy, resign=False, likelihood="probit")  # unedited, still unsigned
    with pytest.raises(TableError, match="no integrity record"):
        open_table(store_copy)


def test_an_edited_likelihood_is_refused_by_the_record(store_copy):
    _edit_attrs(store_copy, resign=False, likelihood="step_noise(eps=0.2)")
    with pytest.raises(TableError, match="attribute 'likelihood' changed"):
        open_table(store_copy)


def _corrupt_one_value(store):
    f = store / "sigma_ratio" / "c" / "1" / "2" / "0"
    data = bytearray(f.read_bytes())
    data[8:16] = np.float64(0.5).tobytes()
    f.write_bytes(bytes(data))


def test_corrupt_chunk_fails_its_checksum_lazily_on_first_use(store_copy):
    _corrupt_one_value(store_copy)
    t = open_table(store_copy)  # lazy: open stays metadata-only
    t.sigma_ratio(-0.95, 1.0, 1)  # a healthy chunk is fine
    with pytest.raises(TableError, match="checksum"):
        t.sigma_ratio(-0.15, 1.0, 1)  # row 8 of y=+1 lives in the corrupt chunk (1, 2)


def test_corrupt_chunk_fails_at_open_with_verify_checksums(store_copy):
    _corrupt_one_value(store_copy)
    with pytest.raises(TableError, match="checksum"):
        open_table(store_copy, verify_checksums=True)
    t = open_table(store_copy, verify_checksums=False)  # sizes only, as documented
    assert np.isfinite(t.sigma_ratio(-0.15, 1.0, 1))


def test_compressed_store_is_refused(tmp_path, small_store):
    import zarr

    _, qp, ratio = small_store
    path, _, _ = write_store(tmp_path / "z.zarr", values=(qp, ratio))
    # rewrite sigma_ratio with a compressor, keeping everything else
    g = zarr.open_group(str(path), mode="r+")
    del g["sigma_ratio"]
    arr = g.create_array(
        "sigma_ratio",
        shape=ratio.shape,
        chunks=(1, 4, ratio.shape[2]),
        dtype="<f8",
        dimension_names=DIMS,
    )
    arr[...] = ratio
    _sign(path)  # a store written compressed, not edited afterwards
    with pytest.raises(TableError, match="uncompressed|bytes"):
        open_table(path)


def test_not_a_store_is_refused(tmp_path):
    with pytest.raises(TableError, match="no such store"):
        open_table(tmp_path / "nothing.zarr")
    (tmp_path / "empty.zarr").mkdir()
    with pytest.raises(TableError, match="missing"):
        open_table(tmp_path / "empty.zarr")


def test_table_error_is_a_value_error():
    assert issubclass(TableError, ValueError)


def test_installed_table_path_follows_the_environment(monkeypatch, tmp_path):
    from qpinfer.tables import installed_table_path

    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path))
    assert installed_table_path("probit") == tmp_path / "probit.zarr"
    assert installed_table_path(PROBIT) == tmp_path / "probit.zarr"
    monkeypatch.delenv("QPINFER_TABLES")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert (
        installed_table_path("probit") == tmp_path / "cache" / "qpinfer" / "tables" / "probit.zarr"
    )


def test_store_opens_with_xarray(small_store):
    xr = pytest.importorskip("xarray")
    ds = xr.open_zarr(small_store[0], consolidated=False)
    assert ds["sigma_qp"].dims == DIMS
    assert set(DATA_VARS) <= set(ds.data_vars)


def test_reads_a_store_built_by_the_pipeline(tmp_path, dask_client):
    qptables = pytest.importorskip("qptables")
    out = tmp_path / "probit.zarr"
    grid = qptables.GridSpec((-0.5, 0.5, 0.05), (-0.1, 0.1, 0.05), (-1, 1), tile_mu=4)
    qptables.build("probit", out, grid, client=dask_client, stream=io.StringIO(), **FAST)
    t = open_table(out, verify_checksums=True)
    rng = np.random.default_rng(3)
    mu = rng.uniform(-0.5, 0.5, 200)
    s = 10.0 ** rng.uniform(-0.1, 0.1, 200)
    y = rng.choice([-1.0, 1.0], 200)
    np.testing.assert_allclose(t.sigma_qp(mu, s, y), qpinfer.sigma_qp(PROBIT, mu, s, y), rtol=2e-4)
    assert t.fallback_count == 0


# --------------------------------------------------------------------------------------------
# accuracy with the paper's step (App. J: 0.001 in mu and in log10 sigma) --------------------------
@pytest.fixture(scope="session")
def paper_step_table(tmp_path_factory):
    """A paper-step sub-grid: mu in [-0.5, 0.5], log10 sigma in [-0.1, 0.1], step 0.001."""
    path = tmp_path_factory.mktemp("paper_step") / "probit.zarr"
    write_store(path, mu=(-0.5, 0.5, 0.001), log10_sigma=(-0.1, 0.1, 0.001), tile_mu=50)
    return open_table(path, verify_checksums=True)


def test_lookup_accuracy_at_1e5_off_grid_points_is_within_1e_6(paper_step_table):
    t = paper_step_table
    rng = np.random.default_rng(2024)
    n = 100_000
    mu = rng.uniform(-0.5, 0.5, n)
    ls = rng.uniform(-0.1, 0.1, n)
    y = rng.choice([-1.0, 1.0], n)
    sigma = 10.0**ls
    got = t.sigma_qp(mu, sigma, y)
    exact = qpinfer.sigma_qp(PROBIT, mu, sigma, y)
    rel = np.abs(got / exact - 1.0)
    assert t.fallback_count == 0
    assert rel.max() <= 1e-6, f"max relative error {rel.max():.3g}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mu0", "ls0"),
    [(-10.0, 0.8), (-10.0, -1.0), (-4.0, 0.5), (0.0, 0.9), (3.0, -0.5), (9.8, 0.8)],
)
def test_lookup_accuracy_across_the_paper_domain(tmp_path, mu0, ls0):
    """Patches of the paper grid (App. J) near its edges, 2e4 off-grid points each."""
    mu = (mu0, mu0 + 0.2, 0.001)
    ls = (ls0, ls0 + 0.2, 0.001)
    path, _, _ = write_store(tmp_path / "p.zarr", mu=mu, log10_sigma=ls, tile_mu=50)
    t = open_table(path)
    rng = np.random.default_rng(7)
    n = 20_000
    qm = rng.uniform(mu[0], mu[1], n)
    qs = 10.0 ** rng.uniform(ls[0], ls[1], n)
    qy = rng.choice([-1.0, 1.0], n)
    rel = np.abs(t.sigma_qp(qm, qs, qy) / qpinfer.sigma_qp(PROBIT, qm, qs, qy) - 1.0)
    assert t.fallback_count == 0
    assert rel.max() <= 1e-6
