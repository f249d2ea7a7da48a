"""The ``qptables`` command line: bad input is refused clearly (exit 2) and nothing is lost;
``info``, ``verify`` and ``plot`` on a real store."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from qptables.cli.commands import main
from qptables.grid import GridSpec
from qptables.pipeline.resume import lock_path, partial_path
from qptables.pipeline.tiles import compute_tile
from qptables.reference.verify import scan_store
from qptables.store import consolidate_store, create_store, read_attrs, update_attrs


def run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, capsys.readouterr().err


def assert_nothing_created(directory: Path, before: set[str]) -> None:
    assert {p.name for p in directory.iterdir()} == before


SMALL = ["--mu", "-1", "1", "0.5", "--log10-sigma", "-1", "1", "0.5"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mu", "-1", "1", "0"], "--mu START STOP STEP: step must be > 0"),
        (["--mu", "-1", "1", "-0.5"], "--mu START STOP STEP: step must be > 0"),
        (
            ["--log10-sigma", "1", "-1", "0.1"],
            "--log10-sigma START STOP STEP: start must be < stop",
        ),
        (["--log10-sigma", "0", "0", "0.1"], "start must be < stop"),
        (["--mu", "nan", "1", "0.1"], "--mu START STOP STEP: start must be finite"),
        (["--mu", "-1", "inf", "0.1"], "stop must be finite"),
        (["--mu", "-1", "1", "0.3"], "not a whole number of steps"),
        (
            ["--mu", "-1000", "1000", "0.0001", "--log10-sigma", "-1", "1", "0.0001"],
            "only",
        ),  # ~12.8 TB does not fit in the free disk space
        (["--y", "0"], "--y: probit labels must be -1 or +1"),
        (["--y", "1", "1"], "--y: duplicate"),
        (["--y", "1", "--y-max", "3"], "--y-max"),
        (["--tolerance", "-1"], "--tolerance"),
        (["--tolerance", "nan"], "--tolerance"),
        (["--verify-dps", "5"], "--verify-dps"),
    ],
)
def test_invalid_build_input_is_refused_with_exit_2(capsys, tmp_path, args, needle):
    before = {p.name for p in tmp_path.iterdir()}
    # a repeated --mu/--log10-sigma replaces the earlier one (argparse: last wins)
    code, err = run(capsys, "build", "probit", str(tmp_path / "t.zarr"), *SMALL, *args)
    assert code == 2, err
    assert needle in err and "error" in err
    assert_nothing_created(tmp_path, before)


def test_disk_space_error_names_the_grid_flags(capsys, tmp_path):
    code, err = run(
        capsys,
        "build",
        "probit",
        str(tmp_path / "t.zarr"),
        "--mu",
        "-1000",
        "1000",
        "0.0001",
        "--log10-sigma",
        "-1",
        "1",
        "0.0001",
    )
    assert code == 2 and "--mu/--log10-sigma/--y" in err and "free" in err


def test_unknown_likelihood_and_invalid_labels(capsys, tmp_path):
    code, err = run(capsys, "build", "gaussian", str(tmp_path / "t.zarr"), *SMALL)
    assert code == 2 and "LIKELIHOOD: unknown likelihood 'gaussian'" in err
    code, err = run(
        capsys, "build", "poisson_square", str(tmp_path / "t.zarr"), *SMALL, "--y", "-1", "2"
    )
    assert code == 2 and "--y: poisson_square labels are counts" in err
    code, err = run(capsys, "build", "probit", str(tmp_path / "t.zarr"), "--y", "0.5")
    assert code == 2 and "--y" in err  # argparse: invalid int value
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--workers", "--tile-mu"])
def test_non_positive_counts_are_argparse_errors(capsys, tmp_path, flag):
    code, err = run(capsys, "build", "probit", str(tmp_path / "t.zarr"), flag, "0")
    assert code == 2 and flag in err


def test_existing_store_is_refused_without_force_and_left_untouched(capsys, tmp_path):
    out = tmp_path / "t.zarr"
    out.mkdir()
    (out / "zarr.json").write_text('{"precious": true}')
    code, err = run(capsys, "build", "probit", str(out), *SMALL)
    assert code == 2 and "already exists; pass --force" in err
    assert (out / "zarr.json").read_text() == '{"precious": true}'
    assert not partial_path(out).exists() and not lock_path(out).exists()


def test_unwritable_destinations_are_refused(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, err = run(capsys, "build", "probit", str(afile / "t.zarr"), *SMALL)
    assert code == 2 and "is not a directory" in err
    code, err = run(capsys, "build", "probit", str(tmp_path / "missing" / "t.zarr"), *SMALL)
    assert code == 2 and "does not exist" in err
    code, err = run(capsys, "build", "probit", "/proc/qptables-test.zarr", *SMALL)
    assert code == 2 and "not writable" in err
    assert afile.read_text() == "x"


def test_a_running_build_holds_the_lock(capsys, tmp_path):
    out = tmp_path / "t.zarr"
    lock_path(out).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename}))
    code, err = run(capsys, "build", "probit", str(out), *SMALL)
    assert code == 2 and "is running" in err and str(lock_path(out)) in err
    assert not partial_path(out).exists()


def test_entry_point_exit_status_in_a_subprocess(tmp_path):
    exe = shutil.which("qptables", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "qptables.cli.commands"]
    argv = [*cmd, "build", "probit", str(tmp_path / "t.zarr"), "--mu", "1", "0", "0.1"]
    p = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--mu" in p.stderr
    p = subprocess.run([*cmd, "--help"], check=False, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "build" in p.stdout and "verify" in p.stdout


# ----------------------------------------------------------------------------- info/verify/plot


@pytest.fixture(scope="module", params=["tiled", "published"])
def store(request, tmp_path_factory) -> Path:
    """A small complete store written without a cluster (tiles computed in-process), in the
    build's tiled layout and in the published one-chunk-per-(variable, y) layout."""
    path = tmp_path_factory.mktemp("cli") / "probit.zarr"
    grid = GridSpec((-1.0, 1.0, 0.25), (-1.0, 1.0, 0.5), (1,))
    tiles = path if request.param == "tiled" else path.with_name("probit.zarr.partial")
    create_store(tiles, "probit", grid, package_version="test", build_info={})
    for iy, k in grid.tiles():
        compute_tile(str(tiles), "probit", grid.to_attrs(), grid.tile_mu, iy, k)
    scan = scan_store(tiles, check_checksums=False)
    update_attrs(tiles, checksums=scan["checksums"], complete=request.param == "tiled")
    if request.param == "published":
        consolidate_store(tiles, path)
        assert read_attrs(path)["tile_mu"] == grid.mu.n and grid.tile_mu < grid.mu.n
    return path


def test_info_describes_grid_sizes_and_verification(capsys, store):
    code = main(["info", str(store)])
    out = capsys.readouterr().out
    assert code == 0
    assert "likelihood: probit" in out and "mu: -1 .. 1 step 0.25 (9 values)" in out
    assert "complete: True" in out and "checksums recorded" in out and "on disk" in out
    code = main(["info", str(store), "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["likelihood"] == "probit"


def test_verify_passes_then_detects_a_corrupted_chunk(capsys, store, tmp_path, request):
    # a process pool on one layout, inline on the other (the pool's start-up is most of the time)
    workers = "2" if request.node.callspec.params["store"] == "tiled" else "1"
    code = main(
        ["verify", str(store), "--samples", "1", "--verify-dps", "20", "--workers", workers]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "PASSED" in err
    code = main(["info", str(store)])
    assert "verification: PASSED" in capsys.readouterr().out

    bad = tmp_path / "bad.zarr"
    shutil.copytree(store, bad)
    key = max(k for k in read_attrs(bad)["checksums"] if k.startswith("sigma_ratio/"))
    chunk = bad / key
    data = bytearray(chunk.read_bytes())
    data[8:16] = struct.pack("<d", 0.5)  # a plausible value: only the checksum can tell
    chunk.write_bytes(bytes(data))
    code = main(
        [
            "verify",
            str(bad),
            "--samples",
            "0",
            "--verify-dps",
            "20",
            "--workers",
            workers,
            "--no-write",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and "FAILED" in err and "checksums differ" in err


def test_plot_writes_a_png(capsys, store, tmp_path):
    out = tmp_path / "ratio.png"
    code = main(["plot", str(store), "--y", "1", "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, err = run(capsys, "plot", str(store), "--y", "-1", "--output", str(out))
    assert code == 2 and "--y: -1 is not a label" in err


def test_commands_on_a_missing_store_are_refused(capsys, tmp_path):
    for cmd in (["info"], ["verify"], ["plot", "--y", "1", "--output", "x.png"]):
        argv = [cmd[0], str(tmp_path / "nope.zarr"), *cmd[1:]]
        code, err = run(capsys, *argv)
        assert code == 2 and "is not a table store" in err


def test_dry_run_prints_the_plan_and_creates_nothing(capsys, tmp_path):
    code, err = run(capsys, "build", "probit", str(tmp_path / "paper.zarr"), "--dry-run")
    assert code == 0, err
    assert "80,044,002 points in 534 tiles of 75x2001" in err
    assert "20001/20001 mu rows" in err and "1.2 GiB on disk" in err and "estimate:" in err
    assert list(tmp_path.iterdir()) == []
