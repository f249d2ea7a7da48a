"""Nothing lost, nothing silently wrong: replacing stores, store integrity, the CLIs.

* ``--force`` (and every replace: publish, download, the default-table link) replaces only a
  table store of this package (complete or unfinished); a plain file, a directory that is not a
  store or a symlink is refused before any work, byte for byte intact
  (:mod:`qpinfer.tables.replace`).
* The metadata digest (:mod:`qpinfer.tables.integrity`): a store whose meaning was edited is refused
  by ``open_table`` and ``qptables verify``, naming what changed; byte flips anywhere in a store are
  refused or leave every answer exactly as it was; query labels are checked against the store's
  likelihood; a corrupted installed table is downloaded again.
* The command lines answer errors in one line (exit 2; ``--debug`` for the traceback), and a
  worker's disk error while publishing is summarised, not dumped.

Stores are built with the real pipeline on a small grid; the CLI cases run the real commands in
subprocesses.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import qpinfer
import qpinfer.tables.remote.install as dl
from qpinfer.tables import TableError, open_table
from qpinfer.tables.integrity import INTEGRITY_ATTR, integrity_record
from qpinfer.tables.remote.install import DownloadError
from qpinfer.tables.replace import ReplaceRefusedError, check_replaceable, replace_store, store_kind
from qptables import BuildInputError, GridSpec, build
from qptables.pipeline.publish import publish
from qptables.pipeline.resume import lock_path, partial_path
from qptables.store import create_store, read_attrs, update_attrs
from tests._helpers import FAST

GRID = GridSpec((-1.0, 1.0, 0.25), (-0.5, 0.5, 0.25), (-1, 1))  # 9 x 5 per label
OTHER = GridSpec((-1.0, 1.0, 0.5), (-0.5, 0.5, 0.5), (-1, 1))  # a distinguishable rebuild
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- fixtures & helpers


@pytest.fixture(scope="module")
def client(dask_client):
    return dask_client


@pytest.fixture(scope="module")
def store(tmp_path_factory, client) -> Path:
    """A published probit store built by the pipeline (with its metadata digest)."""
    out = tmp_path_factory.mktemp("built") / "probit.zarr"
    build("probit", out, GRID, client=client, stream=io.StringIO(), **FAST)
    return out


@pytest.fixture
def copy(store, tmp_path) -> Path:
    dst = tmp_path / "copy.zarr"
    shutil.copytree(store, dst)
    return dst


def snapshot(path: Path):
    """Everything at ``path``, byte for byte (a symlink: its target text and what it shows)."""
    if path.is_symlink():
        return ("link", os.readlink(path), snapshot(path.resolve()))
    if path.is_dir():
        return {
            str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(path.rglob("*"))
        }
    return path.read_bytes()


def make_foreign(kind: str, where: Path) -> Path:
    """A plain file, a directory that is not a store, or a symlink to one, at ``where``."""
    if kind == "file":
        where.write_bytes(b"someone's notes\n\x00\xff")
    elif kind == "directory":
        (where / "sub").mkdir(parents=True)
        (where / "thesis.tex").write_text("\\chapter{Intro}\n")
        (where / "sub" / "data.bin").write_bytes(bytes(range(256)))
    else:
        target = where.with_name("elsewhere")
        make_foreign("directory", target)
        where.symlink_to(target.name, target_is_directory=True)
    return where


def edit_root_attrs(path: Path, **changes) -> None:
    meta = json.loads((path / "zarr.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta["attributes"].pop(key, None)
        else:
            meta["attributes"][key] = value
    (path / "zarr.json").write_text(json.dumps(meta))


def qptables_cli(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qptables.cli.commands", *args],
        check=False,
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def qpinfer_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qpinfer.cli", *args],
        check=False,
        env={**ENV, "QPINFER_TABLES": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(p: subprocess.CompletedProcess, prefix: str, code: int = 2) -> str:
    """Exit status ``code`` and exactly one error line ``prefix: error: ...``; no traceback."""
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"{prefix}: error: "), p.stderr
    return errors[0]


# ----------------------------------------------------------------------------- 1. replacing


@pytest.mark.parametrize("kind", ["file", "directory", "symlink"])
def test_force_onto_a_file_a_non_store_directory_or_a_symlink_is_refused_intact(tmp_path, kind):
    out = make_foreign(kind, tmp_path / "out.zarr")
    before, listing = snapshot(out), sorted(p.name for p in tmp_path.iterdir())
    p = qptables_cli(
        "build",
        "probit",
        str(out),
        "--mu",
        "-1",
        "1",
        "0.5",
        "--log10-sigma",
        "-1",
        "1",
        "0.5",
        "--force",
        "--no-progress",
        cwd=tmp_path,
    )
    line = assert_one_line_error(p, "qptables build")
    assert str(out) in line and "left untouched" in line
    assert "workers:" not in p.stderr  # refused before any work: no cluster was started
    assert snapshot(out) == before  # byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no lock, no partial


def test_a_foreign_unfinished_build_directory_is_not_discarded_by_force(tmp_path):
    out = tmp_path / "out.zarr"
    foreign = make_foreign("directory", partial_path(out))
    before = snapshot(foreign)
    with pytest.raises(BuildInputError, match=r"unfinished build.*not a table store"):
        build("probit", out, OTHER, force=True, stream=io.StringIO(), **FAST)
    assert snapshot(foreign) == before
    assert not out.exists() and not lock_path(out).exists()


@pytest.mark.parametrize("older", ["complete", "unfinished", "without digest"])
def test_force_replaces_an_older_store_of_this_package(store, client, tmp_path, older):
    out = tmp_path / "out.zarr"
    if older == "unfinished":  # e.g. a build that never got published
        create_store(out, "probit", GRID, package_version="0.0.1", build_info={})
    else:
        shutil.copytree(store, out)
        if older == "without digest":  # written before digests existed
            edit_root_attrs(out, **{INTEGRITY_ATTR: None})
    assert store_kind(out) == ("unfinished" if older == "unfinished" else "complete")
    build("probit", out, OTHER, client=client, force=True, stream=io.StringIO(), **FAST)
    assert read_attrs(out)["grid"] == OTHER.to_attrs()
    assert open_table(out, verify_checksums=True).shape == OTHER.shape
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]  # old one deleted


def test_replace_store_swaps_atomically_and_refuses_foreign_entries(store, tmp_path):
    old, new = tmp_path / "t.zarr", tmp_path / "t.zarr.new"
    shutil.copytree(store, old)
    shutil.copytree(store, new)
    update_attrs(new, created="2099-01-01T00:00:00+00:00")
    replace_store(new, old)
    assert read_attrs(old)["created"].startswith("2099") and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.zarr"]
    # a store directory someone put their own files into is not replaced
    (old / "my-notes.txt").write_text("mine")
    shutil.copytree(store, new)
    before = snapshot(old)
    with pytest.raises(ReplaceRefusedError, match="foreign entries.*my-notes.txt"):
        replace_store(new, old)
    assert snapshot(old) == before and new.is_dir()


def test_links_replace_only_the_link_and_only_to_a_store(store, tmp_path):
    link = tmp_path / "probit.zarr"
    link.symlink_to(store)
    assert check_replaceable(link, links=True) == "link"
    with pytest.raises(ReplaceRefusedError, match="symlink"):
        check_replaceable(link)  # never without links=True (qptables build --force)
    new = tmp_path / "new-link"
    new.symlink_to("somewhere-else.zarr")
    replace_store(new, link, links=True)
    assert os.readlink(link) == "somewhere-else.zarr" and store.is_dir()  # target untouched
    foreign = make_foreign("symlink", tmp_path / "mine.zarr")
    with pytest.raises(ReplaceRefusedError, match="not a table store"):
        check_replaceable(foreign, links=True)


@pytest.fixture
def host(store, tmp_path, monkeypatch) -> tuple[str, Path]:
    d = tmp_path / "host"
    publish(store, d, name="probit-rb")
    cache = tmp_path / "cache"
    monkeypatch.setenv("QPINFER_TABLES", str(cache))
    monkeypatch.delenv(dl.URL_ENV, raising=False)
    return d.as_uri(), cache


@pytest.mark.parametrize("kind", ["file", "directory", "symlink"])
def test_download_never_replaces_what_it_did_not_install(host, kind):
    url, cache = host
    cache.mkdir()
    target = make_foreign(kind, cache / "probit-rb.zarr")
    before = snapshot(target)
    with pytest.raises(DownloadError, match="not downloaded.*left untouched"):
        qpinfer.tables.download("probit-rb", url, force=True)
    assert snapshot(target) == before
    assert not list((cache / ".downloads").glob("*.part"))  # refused before any transfer


def test_the_default_link_is_not_pointed_away_from_a_users_directory(host):
    url, cache = host
    cache.mkdir()
    link = make_foreign("symlink", cache / "probit.zarr")
    before = snapshot(link)
    path = qpinfer.tables.download("probit-rb", url)
    assert open_table(path).likelihood == "probit"
    assert snapshot(link) == before


def test_redownloading_over_a_corrupted_installed_table_fetches_it_again(host, store):
    url, _ = host
    path = qpinfer.tables.download("probit-rb", url)
    chunk = path / "sigma_ratio" / "c" / "1" / "0" / "0"
    good = chunk.read_bytes()
    chunk.write_bytes(good[:40] + bytes([good[40] ^ 0x10]) + good[41:])
    with pytest.raises(TableError, match="checksum"):
        open_table(path, verify_checksums=True)
    assert qpinfer.tables.download("probit-rb", url) == path  # no force needed
    assert chunk.read_bytes() == good
    open_table(path, verify_checksums=True)


# ----------------------------------------------------------------------------- 2. integrity


def test_a_store_whose_likelihood_was_edited_is_refused_naming_the_attribute(copy):
    edit_root_attrs(copy, likelihood="step_noise(eps=0.2)")
    with pytest.raises(TableError, match=r"attribute 'likelihood' changed"):
        open_table(copy)


def _set_eps(copy: Path) -> None:
    attrs = read_attrs(copy)
    edit_root_attrs(copy, build={**attrs["build"], "likelihood_params": {"eps": 0.1}})


def _flip_coordinate(copy: Path) -> None:
    f = copy / "mu" / "c" / "0"
    data = bytearray(f.read_bytes())
    data[0] ^= 0x01  # the lowest mantissa bit of mu[0]: within the reader's 1e-9 tolerance
    f.write_bytes(bytes(data))


def _edit_array_meta(copy: Path) -> None:
    f = copy / "sigma_ratio" / "zarr.json"
    meta = json.loads(f.read_text())
    meta["fill_value"] = 0.0
    f.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda c: edit_root_attrs(c, grid={**read_attrs(c)["grid"], "y": [1, -1]}),
            "attribute 'grid' changed",
        ),
        (_set_eps, "attribute 'build' changed"),
        (lambda c: edit_root_attrs(c, note="added"), "attribute 'note' was added"),
        (
            lambda c: edit_root_attrs(
                c, checksums={k: "0" * 64 for k in read_attrs(c)["checksums"]}
            ),
            "attribute 'checksums' changed",
        ),
        (_flip_coordinate, "coordinate 'mu' changed"),
        (_edit_array_meta, "metadata of array 'sigma_ratio' changed"),
        (
            lambda c: edit_root_attrs(
                c, **{INTEGRITY_ATTR: {**read_attrs(c)[INTEGRITY_ATTR], "digest": "0" * 64}}
            ),
            "record itself was altered",
        ),
    ],
    ids=["labels", "likelihood-params", "added", "checksums", "coordinate", "array-meta", "record"],
)
def test_any_change_to_what_the_numbers_mean_is_refused_and_named(copy, edit, needle):
    edit(copy)
    with pytest.raises(TableError, match=needle):
        open_table(copy)


def test_the_verification_report_may_be_rewritten(copy):
    """``qptables verify`` rewrites it; it is outside the digest."""
    update_attrs(copy, verification={**read_attrs(copy)["verification"], "seconds": 99.0})
    assert open_table(copy, verify_checksums=True).shape == GRID.shape


def test_a_store_without_a_digest_is_refused_like_a_v2_store(copy):
    """Without the record nothing ties the likelihood to the numbers: an unsigned
    store whose likelihood was edited would open as the new likelihood. Refused, naming it."""
    edit_root_attrs(copy, **{INTEGRITY_ATTR: None, "likelihood": "step_noise(eps=0.2)"})
    with pytest.raises(TableError, match=r"no integrity record \(attrs\['integrity'\]\)"):
        open_table(copy)
    edit_root_attrs(copy, likelihood="probit")  # the original metadata, still unsigned
    with pytest.raises(TableError, match="no integrity record"):
        open_table(copy)
    # a store *signed* with a likelihood its labels are invalid for: the older check still holds
    edit_root_attrs(copy, likelihood="poisson_square")
    edit_root_attrs(copy, **{INTEGRITY_ATTR: integrity_record(copy, read_attrs(copy))})
    with pytest.raises(TableError, match=r"labels \[-1, 1\].*non-negative integer"):
        open_table(copy)


def test_query_labels_are_checked_against_the_likelihood(store):
    t = open_table(store)
    for bad in (0.5, 2, np.array([1.0, 0.0])):
        with pytest.raises(ValueError, match="y must be -1 or \\+1 for the probit"):
            t.sigma_qp(0.0, 1.0, bad)
    with pytest.raises(ValueError, match="y must be finite"):
        t.sigma_qp(0.0, 1.0, np.nan)
    with pytest.raises(ValueError, match="y must be -1 or \\+1"):
        t.sigma_ratio(np.zeros(3), np.ones(3), [1, -1, 3])
    assert t.fallback_count == 0


def test_qptables_verify_refuses_an_edited_store_naming_the_attribute(copy, tmp_path):
    edit_root_attrs(copy, likelihood="step_noise(eps=0.2)")
    before = snapshot(copy)
    p = qptables_cli("verify", str(copy), "--samples", "0", "--workers", "1", cwd=tmp_path)
    line = assert_one_line_error(p, "qptables verify")
    assert "attribute 'likelihood' changed" in line
    assert snapshot(copy) == before  # no report was written


# ----------------------------------------------------------------------------- absurd shapes


#: Bytes a refused open may allocate at most (the small stores here are ~30 kB; the absurd
#: shapes below would need 800 MB to 8 PB).
OPEN_PEAK_BYTES = 20 * 2**20


def _open_refused(path: Path, *needles: str) -> None:
    """``open_table(path)`` refuses at once, naming the store and each of ``needles``, without
    allocating what the metadata claims."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(TableError) as info:
            open_table(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value), info.value
    for needle in needles:
        assert needle in str(info.value), info.value
    assert peak < OPEN_PEAK_BYTES, (peak, info.value)


@pytest.mark.parametrize(
    ("mu", "needles"),
    [
        ([-1.0, 1.0, 2e-8], ("grid['mu']", "100000001")),  # 1e8 points: 800 MB before the fix
        ([-1.0, 1.0, 2e-15], ("grid['mu']", "1000000000000001")),  # raw MemoryError before
        ([-1.0, 1.0, 0.0], ("grid", "step > 0")),
        ([-1.0, 1.0, float("nan")], ("grid", "finite")),
    ],
    ids=["1e8-points", "1e15-points", "zero-step", "nan-step"],
)
def test_a_signed_grid_store_with_an_absurd_axis_is_refused_without_allocating(copy, mu, needles):
    edit_root_attrs(copy, grid={**read_attrs(copy)["grid"], "mu": mu})
    edit_root_attrs(copy, **{INTEGRITY_ATTR: integrity_record(copy, read_attrs(copy))})
    _open_refused(copy, *needles)


@pytest.fixture
def cells_copy(tmp_path) -> Path:
    """A copy of the smallest shipped cells store (60 kB)."""
    from qpinfer.tables.shipped import DATA_DIR

    dst = tmp_path / "cells.zarr"
    shutil.copytree(DATA_DIR / "step_noise-eps0.2.zarr", dst)
    return dst


def _edit_cells_array(path: Path, name: str, change) -> None:
    """Edit the ``zarr.json`` of array ``name``: ``change(shape, chunk_shape)`` gives the new
    ones; then re-sign the store as the build does, so only the new check can refuse it."""
    from qpinfer.tables.reduced_store import integrity_record as cells_record

    f = path / name / "zarr.json"
    meta = json.loads(f.read_text())
    config = meta["chunk_grid"]["configuration"]
    meta["shape"], config["chunk_shape"] = change(meta["shape"], config["chunk_shape"])
    f.write_text(json.dumps(meta))
    edit_root_attrs(path, integrity=None)
    edit_root_attrs(path, integrity=cells_record(path, read_attrs(path)))


def _rho(path: Path) -> str:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("rho_"))[0]


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        # 1e16 values: "array is too big" (a raw ValueError) before the fix; 1e10: 80 GB
        (lambda s, c: ([*s[:-1], 10**16], c), ("shape", "chunk files")),
        (lambda s, c: ([*s[:-1], 10**10], c), ("shape", "chunk files")),
        (lambda s, c: (s, [*c[:-1], 0]), ("chunk_shape", "positive integers")),  # "range() arg 3"
        (lambda s, c: (s, [*c[:-1], -4]), ("chunk_shape", "positive integers")),
        (lambda s, c: ([*s, 3], c), ("shape", "rank")),
        (lambda s, c: ([*s[:-1], 2.5], c), ("shape", "positive integers")),
    ],
    ids=["1e16", "1e10", "zero-chunk", "negative-chunk", "rank", "not-integer"],
)
def test_a_signed_cells_store_with_an_absurd_array_shape_is_refused_without_allocating(
    cells_copy, change, needles
):
    name = _rho(cells_copy)
    _edit_cells_array(cells_copy, name, change)
    _open_refused(cells_copy, name, *needles)


def test_a_signed_cells_store_whose_box_claims_absurd_cells_is_refused_without_allocating(
    cells_copy,
):
    from qpinfer.tables.reduced_store import integrity_record as cells_record

    boxes = read_attrs(cells_copy)["boxes"]
    boxes[0]["axes"][0]["n_cells"] = 10**12
    edit_root_attrs(cells_copy, boxes=boxes, integrity=None)
    edit_root_attrs(cells_copy, integrity=cells_record(cells_copy, read_attrs(cells_copy)))
    _open_refused(cells_copy, f"rho_{boxes[0]['name']}", "attrs['boxes'] declares")


QUERY_MU = np.r_[np.linspace(-1.0, 1.0, 9), -0.93, -0.11, 0.37, 0.999]
QUERY_SIGMA = 10.0 ** np.r_[np.linspace(-0.5, 0.5, 5), -0.41, 0.07, 0.23, 0.49, -0.5, 0, 0.5, 0.3]


def answers(path: Path) -> list[np.ndarray]:
    """Open ``path`` and answer a fixed set of queries: batches over both labels and the whole
    grid (every sigma_ratio chunk), single queries (the scalar path), and one point outside
    the grid (computed exactly with the store's likelihood)."""
    t = open_table(path)
    out = []
    for y in (-1, 1):
        out.append(t.sigma_qp(QUERY_MU, QUERY_SIGMA, y))
        out.append(t.sigma_ratio(QUERY_MU[::-1], QUERY_SIGMA, y))
        out.append(np.array([t.sigma_qp(m, s, y) for m, s in zip(QUERY_MU[:4], QUERY_SIGMA[:4])]))
    out.append(t.sigma_qp([3.0], [0.7], [-1]))
    return out


def test_byte_flips_anywhere_in_a_store_are_refused_or_change_no_answer(copy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the outside point's one-time warning
        want = answers(copy)
        files = sorted(p for p in copy.rglob("*") if p.is_file())
        masks = (0x01, 0x04, 0x20, 0x80, 0xFF)
        tally = {"refused": 0, "unchanged": 0}
        for n, f in enumerate(files):
            good = f.read_bytes()
            rng = np.random.default_rng(n)
            positions = np.unique(
                np.r_[np.linspace(0, len(good) - 1, 32).astype(int), rng.integers(0, len(good), 16)]
            )
            for i, pos in enumerate(positions.tolist()):
                bad = bytearray(good)
                bad[pos] ^= masks[i % len(masks)]
                f.write_bytes(bytes(bad))
                try:
                    got = answers(copy)
                except ValueError:  # TableError included: refused, clearly
                    tally["refused"] += 1
                else:
                    where = f"{f.relative_to(copy)} byte {pos}"
                    assert all(np.array_equal(a, b) for a, b in zip(got, want)), where
                    tally["unchanged"] += 1
            f.write_bytes(good)
        assert all(np.array_equal(a, b) for a, b in zip(answers(copy), want))
    # flips in the metadata that gives the numbers meaning and in the chunks lookups read are
    # refused; some flips (the unread sigma_qp chunks, the verification report) change nothing
    assert tally["refused"] > 300 and tally["unchanged"] > 0, tally


# ----------------------------------------------------------------------------- 3. command lines


def test_info_on_a_garbled_zarr_json_is_one_line_and_debug_shows_the_traceback(copy, tmp_path):
    raw = (copy / "zarr.json").read_bytes()
    (copy / "zarr.json").write_bytes(raw[: len(raw) // 2])
    p = qptables_cli("info", str(copy), cwd=tmp_path)
    assert str(copy) in assert_one_line_error(p, "qptables info")
    p = qptables_cli("info", str(copy), "--debug", cwd=tmp_path)
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_info_reports_the_digest(store, tmp_path):
    p = qptables_cli("info", str(store), cwd=tmp_path)
    assert p.returncode == 0 and "metadata digest: ok" in p.stdout, p.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--log10-sigma", "-400", "1", "0.5"], "--log10-sigma"),
        (["--log10-sigma", "-1", "400", "0.5"], "--log10-sigma"),
        (["--mu", "-1", "1"], "--mu"),  # argparse: one line too, no usage block
    ],
)
def test_bad_build_input_is_one_line(tmp_path, args, needle):
    p = qptables_cli(
        "build", "probit", str(tmp_path / "t.zarr"), "--mu", "-1", "1", "0.5", *args, cwd=tmp_path
    )
    assert needle in assert_one_line_error(p, "qptables build")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_qpinfer_errors_are_one_line(host, tmp_path):
    url, cache = host
    cache.mkdir()
    make_foreign("directory", cache / "probit-rb.zarr")
    p = qpinfer_cli("download", "probit-rb", "--url", url, cache=cache)
    assert "left untouched" in assert_one_line_error(p, "qpinfer download")
    assert_one_line_error(qpinfer_cli("download", cache=cache), "qpinfer download")  # argparse


def test_a_disk_error_while_publishing_is_summarised_not_dumped(tmp_path):
    """A worker's ``OSError`` (file too large, ``RLIMIT_FSIZE``) while writing the published
    copy: one line naming the task and the error, exit 1, no worker tracebacks."""
    resource = pytest.importorskip("resource")
    limit = 20_000  # the tiles (2 KiB) and metadata fit; the published 33 KiB chunks do not

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    p = qptables_cli(
        "build",
        "probit",
        "e.zarr",
        "--mu",
        "-5",
        "5",
        "0.05",
        "--log10-sigma",
        "-1",
        "1",
        "0.1",
        "--y",
        "1",
        "--no-progress",
        "--samples",
        "0",
        "--verify-dps",
        "20",
        "--workers",
        "1",
        cwd=tmp_path,
        preexec_fn=small_files,
    )
    line = assert_one_line_error(p, "qptables build", code=1)
    assert "publishing task for sigma" in line and "File too large" in line, line
    assert "Compute Failed" not in p.stderr and "distributed.worker" not in p.stderr
    assert not (tmp_path / "e.zarr").exists() and (tmp_path / "e.zarr.partial").is_dir()
