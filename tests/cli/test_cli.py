"""The ``qptables`` command line: bad input is refused clearly (exit 2) and nothing is lost;
``info``, ``verify`` and ``plot`` on a real store."""

from __future__ import annotations

import json
import os
import re
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


# ----------------------------------------------------------------------------- every argument


@pytest.fixture(scope="module")
def small_stores(tmp_path_factory) -> dict[str, Path]:
    """A small complete grid store (tiles computed in-process, no verification report) and a
    copy of the smallest shipped cells store, 60 kB."""
    from qpinfer.tables.shipped import DATA_DIR

    root = tmp_path_factory.mktemp("stores")
    grid_store = root / "probit.zarr"
    grid = GridSpec((-1.0, 1.0, 0.5), (-1.0, 1.0, 1.0), (-1, 1))
    create_store(grid_store, "probit", grid, package_version="test", build_info={})
    for iy, k in grid.tiles():
        compute_tile(str(grid_store), "probit", grid.to_attrs(), grid.tile_mu, iy, k)
    scan = scan_store(grid_store, check_checksums=False)
    update_attrs(grid_store, checksums=scan["checksums"], complete=True)
    cells = root / "cells.zarr"
    shutil.copytree(DATA_DIR / "step_noise-eps0.2.zarr", cells)
    return {"grid": grid_store, "cells": cells}


def tree(path: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory under ``path``."""
    return {
        str(p.relative_to(path)): p.read_bytes() if p.is_file() else None
        for p in sorted(path.rglob("*"))
    }


BUILD = ["build", "probit", "{tmp}/t.zarr", *SMALL, "--samples", "0", "--verify-dps", "20"]
POISSON = ["build", "poisson_square", "{tmp}/t.zarr", *SMALL]
CASES = [
    # build: every flag, LIKELIHOOD and OUT
    (["build", "gaussian", "{tmp}/t.zarr", *SMALL], ["LIKELIHOOD", "gaussian"]),
    (["build", "probit", "{tmp}/missing/t.zarr", *SMALL], ["does not exist"]),
    (["build", "probit", "{file}/t.zarr", *SMALL], ["not a directory"]),
    ([*BUILD, "--seed", "-1"], ["--seed", ">= 0"]),
    ([*BUILD, "--seed", "x"], ["--seed"]),
    ([*BUILD, "--verify-dps", "100000"], ["--verify-dps", "[15, 100]", "100000"]),
    ([*BUILD, "--verify-dps", "14"], ["--verify-dps", "[15, 100]"]),
    ([*BUILD, "--samples", "-1"], ["--samples", ">= 0"]),
    ([*BUILD, "--tolerance", "0"], ["--tolerance", "positive"]),
    ([*BUILD, "--tolerance", "inf"], ["--tolerance", "positive"]),
    ([*BUILD, "--workers", "0"], ["--workers"]),
    ([*BUILD, "--workers", "100000"], ["--workers", "per CPU core"]),
    ([*BUILD, "--tile-mu", "0"], ["--tile-mu"]),
    ([*BUILD, "--grid", "bogus"], ["--grid", "bogus"]),
    ([*BUILD, "--grid", "cells"], ["--mu", "--grid cells"]),
    ([*BUILD, "--eps", "0.1"], ["--eps", "step_noise"]),
    (["build", "step_noise", "{tmp}/t.zarr", *SMALL, "--eps", "0.7"], ["--eps", "0.7"]),
    ([*BUILD, "--y", "2"], ["--y", "-1 or +1"]),
    ([*POISSON, "--y-max", "-1"], ["--y-max"]),
    ([*POISSON, "--y-max", "1000000"], ["--y-max", "[0, 100000]"]),  # the labels were listed
    ([*BUILD, "--mu", "1", "-1", "0.5"], ["--mu", "start must be < stop"]),
    ([*BUILD, "--log10-sigma", "-1", "1", "0"], ["--log10-sigma", "step must be > 0"]),
    ([*BUILD, "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], ["--workers"]),
    # verify, on a grid store and on a cells store
    (["verify", "{grid}", "--seed", "-1"], ["--seed", ">= 0"]),
    (["verify", "{cells}", "--seed", "-1"], ["--seed", ">= 0"]),
    (["verify", "{grid}", "--verify-dps", "100000"], ["--verify-dps", "[15, 100]"]),
    (["verify", "{cells}", "--verify-dps", "101"], ["--verify-dps", "[15, 100]"]),
    (["verify", "{grid}", "--verify-dps", "5"], ["--verify-dps", "[15, 100]"]),
    (["verify", "{grid}", "--samples", "-1"], ["--samples"]),
    (["verify", "{cells}", "--tolerance", "-1"], ["--tolerance"]),
    (["verify", "{cells}", "--kernel-points", "0"], ["--kernel-points"]),
    (["verify", "{grid}", "--kernel-points", "5"], ["--kernel-points", "only for cells"]),
    (["verify", "{grid}", "--boxes", "core"], ["--boxes", "only for cells"]),
    (["verify", "{cells}", "--boxes", "nope"], ["--boxes", "nope"]),
    (["verify", "{grid}", "--workers", "0"], ["--workers"]),
    (["verify", "{cells}", "--workers", "100000"], ["--workers", "per CPU core"]),
    (["verify", "{grid}", "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], ["--workers"]),
    (["verify", "{tmp}/nope.zarr"], ["OUT", "not a table store"]),
    # ship (each build would check again; refused before DIR is created)
    (["ship", "--out", "{tmp}/ship", "--workers", "100000"], ["--workers", "per CPU core"]),
    (["ship", "--out", "{tmp}/ship", "--workers", "0"], ["--workers"]),
    (["ship", "--out", "{tmp}/ship", "--into-package"], ["--into-package"]),
    (["ship", "--out", "{file}/ship"], ["--out"]),
    (["ship", "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], ["--workers"]),
    # info
    (["info", "{tmp}/nope.zarr"], ["OUT", "not a table store"]),
    # plot
    (["plot", "{grid}", "--y", "5", "--output", "{tmp}/p.png"], ["--y", "not a label"]),
    (["plot", "{cells}", "--y", "0.5", "--output", "{tmp}/p.png"], ["--y", "not a label"]),
    (["plot", "{cells}", "--y", "1", "--output", "{tmp}/none/p.png"], ["--output", "not exist"]),
    (["plot", "{cells}", "--y", "1", "--output", "{tmp}/p.txt"], ["--output", "FILE.png"]),
    (["plot", "{cells}", "--y", "1", "--output", "{tmp}"], ["--output", "is a directory"]),
    (["plot", "{grid}", "--y", "1", "--output", "{tmp}/p.png", "--var", "x"], ["--var"]),
    (["plot", "{cells}", "--y", "1", "--output", "{tmp}/p.png", "--mu", "1", "-1"], ["--mu"]),
    (["plot", "{grid}", "--y", "1", "--output", "{tmp}/p.png", "--mu", "-1", "1"], ["--mu"]),
    (["plot", "{grid}", "--output", "{tmp}/p.png"], ["--y"]),
    # publish
    (["publish", "{cells}", "--to", "{file}"], ["--to", "not a directory"]),
    (["publish", "{cells}", "--to", "{file}/host"], ["--to", "not a directory"]),
    (["publish", "{cells}", "--to", "{tmp}/host", "--name", "../x"], ["--name"]),
    (["publish", "{cells}", "--to", "{tmp}/host", "--manifest", "{tmp}"], ["--manifest"]),
    (["publish", "{cells}", "--to", "{tmp}/host", "--manifest", "{file}"], ["--manifest", "JSON"]),
    (["publish", "{grid}", "--to", "{tmp}/host"], ["STORE", "not a finished, verified"]),
    (["publish", "{tmp}/nope.zarr", "--to", "{tmp}/host"], ["not a table store"]),
    (["publish", "{cells}"], ["--to"]),
]


def _case_id(argv: list[str]) -> str:
    """``build --seed -1``: the command and what differs from the small build's flags."""
    for prefix in (BUILD, POISSON):
        if argv[: len(prefix)] == prefix:
            return " ".join([argv[0], argv[1], *argv[len(prefix) :]])
    return " ".join(argv)


@pytest.mark.parametrize(("argv", "needles"), CASES, ids=[_case_id(c[0]) for c in CASES])
def test_every_bad_argument_is_refused_before_any_work(
    capsys, tmp_path, small_stores, argv, needles
):
    """Exit 2 and one error line naming the argument, with nothing computed or written: no file
    appears, changes or disappears (the stores included) -- a build's tiles would have made
    OUT.partial, a check's report would have been written into the grid store."""
    stores = {}
    for kind, src in small_stores.items():
        stores[kind] = tmp_path / src.name
        shutil.copytree(src, stores[kind])
    afile = tmp_path / "notes.txt"
    afile.write_text("not a directory, not a manifest\n")
    before = tree(tmp_path)
    names = {"tmp": tmp_path, "file": afile, **stores}
    code, err = run(capsys, *(a.format(**names) for a in argv))
    assert code == 2, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert tree(tmp_path) == before


def test_build_api_checks_every_option_before_any_work(tmp_path):
    """``qptables.build`` (the Python API) refuses as the command does, naming the flag."""
    from qptables import BuildInputError, build

    grid = GridSpec((-1.0, 1.0, 0.5), (-1.0, 1.0, 0.5), (1,))
    for kwargs, needle in [
        ({"seed": -1}, "--seed"),
        ({"seed": 1.5}, "--seed"),
        ({"verify_dps": 100_000}, "[15, 100]"),
        ({"samples": -2}, "--samples"),
        ({"workers": 10**6}, "per CPU core"),
        ({"tolerance": float("nan")}, "--tolerance"),
    ]:
        with pytest.raises(BuildInputError, match=re.escape(needle)):
            build("probit", tmp_path / "t.zarr", grid, progress=False, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_verify_api_checks_every_option_before_any_work(small_stores):
    from qptables import BuildInputError, verify

    for store in small_stores.values():
        for kwargs, needle in [
            ({"seed": -1}, "--seed"),
            ({"dps": 500}, "[15, 100]"),
            ({"workers": 0}, "--workers"),
        ]:
            with pytest.raises(BuildInputError, match=re.escape(needle)):
                verify(store, **kwargs)


# ----------------------------------------------------------------------------- --verify-dps


def test_the_estimate_scales_with_the_reference_precision(capsys, tmp_path):
    """A dry run's estimate counts what a reference point costs at --verify-dps (measured:
    ~0.28 s at 40, ~5.8 s at 100): the same build at dps 100 is estimated longer by the
    mpmath points' extra cost, not the same 0.5 s a point."""

    def estimate(dps: str) -> float:
        argv = ["build", "probit", str(tmp_path / "t.zarr"), *SMALL, "--y", "1", "--dry-run"]
        code = main([*argv, "--json", "--workers", "1", "--verify-dps", dps])
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)["estimate_seconds"]

    n_verify = 8 + 24  # the corners and edge midpoints of the one label, and the default sample
    at_40, at_100 = estimate("40"), estimate("100")
    # measured 5.8 - 0.28 s more per point at dps 100 than at 40; 4 s is a safe lower bound
    assert at_100 - at_40 > 4.0 * n_verify, (at_40, at_100)
    from qptables.pipeline.estimate import MPMATH_FIRST_SECONDS, mpmath_factor, mpmath_seconds

    assert mpmath_factor(40) == 1.0 and mpmath_factor(100) == pytest.approx(5.8 / 0.278)
    extra = n_verify * (mpmath_seconds(100) - mpmath_seconds(40))
    extra += MPMATH_FIRST_SECONDS * (mpmath_factor(100) - 1.0)
    # the kernel probe's timing differs between the two runs; the mpmath part is exact
    assert at_100 - at_40 == pytest.approx(extra, rel=0.05)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- read-only store


def _read_only(path: Path) -> list[str]:
    """The command prefix that runs a command with ``path`` read-only: its modes made read-only,
    and -- as root, who writes through any mode -- a private mount namespace in which ``path`` is
    bind-mounted read-only (``unshare -m``; the test is skipped where that is not permitted)."""
    for p in sorted(path.rglob("*"), reverse=True):
        p.chmod(0o555 if p.is_dir() else 0o444)
    path.chmod(0o555)
    if os.geteuid() != 0:
        return []
    script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    prefix = ["unshare", "-m", "sh", "-c", script, str(path)]
    probe = subprocess.run([*prefix, "true"], check=False, capture_output=True, timeout=30)
    if shutil.which("unshare") is None or probe.returncode != 0:
        pytest.skip("running as root without a way to make a directory read-only (unshare -m)")
    return prefix


def test_verify_of_a_read_only_grid_store_suggests_no_write(store, tmp_path):
    """A store the user cannot write: refused before the check runs, naming the store and
    --no-write; with --no-write it is checked and left as it was."""
    ro = tmp_path / "ro.zarr"
    shutil.copytree(store, ro)
    before = tree(ro)
    try:
        prefix = _read_only(ro)
        argv = [*prefix, sys.executable, "-m", "qptables.cli.commands", "verify", str(ro)]
        argv += ["--samples", "1", "--verify-dps", "20", "--workers", "1"]
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        kw = {"capture_output": True, "text": True, "timeout": 300, "env": env}
        p = subprocess.run(argv, check=False, **kw)
        errors = [line for line in p.stderr.splitlines() if ": error:" in line]
        assert p.returncode == 2 and len(errors) == 1, p.stderr
        assert "--no-write" in errors[0] and str(ro) in errors[0], errors[0]
        p = subprocess.run([*argv, "--no-write"], check=False, **kw)
        assert p.returncode == 0 and "PASSED" in p.stderr, p.stderr
        assert tree(ro) == before
    finally:
        for p in [ro, *ro.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)


# ----------------------------------------------------------------------------- publish's lock


def test_publish_leaves_no_lock_file_in_the_host_folder(capsys, small_stores, tmp_path):
    host = tmp_path / "host"
    for name in ("a", "b"):
        code, err = run(
            capsys, "publish", str(small_stores["cells"]), "--to", str(host), "--name", name
        )
        assert code == 0, err
    assert sorted(p.name for p in host.iterdir()) == ["a.tar.gz", "b.tar.gz", "manifest.json"]
    assert sorted(json.loads((host / "manifest.json").read_text())["tables"]) == ["a", "b"]


def test_concurrent_manifest_updates_lose_none_and_leave_no_lock(tmp_path):
    """Publishers that update one manifest at once (threads: each lock is its own open file,
    so they exclude each other as processes do) all get their entry in, one at a time, though
    each deletes the lock file when done."""
    import threading

    from qptables.pipeline.publish import update_manifest

    manifest = tmp_path / "manifest.json"
    n_threads, per_thread = 8, 25
    errors: list[BaseException] = []

    def publisher(t: int) -> None:
        try:
            for k in range(per_thread):
                update_manifest(manifest, {"name": f"t{t}-{k}"})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=publisher, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    tables = json.loads(manifest.read_text())["tables"]
    assert len(tables) == n_threads * per_thread
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
