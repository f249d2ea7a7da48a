"""``qptables`` on every store layout: ``info``, ``verify``, ``plot`` and ``publish`` on each
shipped (cells) table and on small real builds of both layouts; ``build --dry-run`` writes nothing
for any layout; flags that do not apply to a layout are refused in one line; help lists every
likelihood and the default grid; a missing ``tables`` extra is named; ``ship`` never
writes into an installed package unless asked."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from qpinfer.likelihoods import registry
from qpinfer.tables.open import open_table
from qpinfer.tables.reduced import ReducedTable
from qpinfer.tables.shipped import DATA_DIR, SHIPPED, shipped_path
from qptables.cli.commands import main
from qptables.cli.ship import ship_destination
from qptables.pipeline.resume import lock_path

REPO = Path(__file__).resolve().parents[2]
#: A label to plot per shipped likelihood (Student-t labels are real numbers).
PLOT_LABEL = {
    "probit": "1",
    "poisson_square": "3",
    "step_noise(eps=0.2)": "-1",
    "logit": "1",
    "poisson_log": "2",
    "student_t(nu=4.0, scale=1.0)": "0.5",
    "student_t(nu=5.0, scale=1.0)": "-2",
}
#: The check flags the tests use: one mpmath point per box (or per label and corner on the
#: paper grid) at 20 digits, computed inline.
CHECK = ["--samples", "1", "--verify-dps", "20", "--workers", "1"]
#: Boxes checked per shipped table (``--boxes``; ``None``: every box). Student-t's mpmath
#: reference takes 5-30 s a point in its wide and bimodal-gap boxes at 20 digits (~2 min for
#: one point per box), so the command is shown working on its two boxes of narrow cavities;
#: the builds that shipped those tables checked every box against mpmath (their
#: ``verification`` attribute).
BOXES = {
    "student_t(nu=4.0, scale=1.0)": ["narrow", "mid"],
    "student_t(nu=5.0, scale=1.0)": ["narrow", "mid"],
}
PAPER_SMALL = ["--mu", "-1", "1", "0.5", "--log10-sigma", "-1", "1", "0.5", "--y", "1"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` with its bytes (directories by their relative names)."""
    return {
        p.relative_to(path).as_posix(): (p.read_bytes() if p.is_file() else b"<dir>")
        for p in sorted(path.rglob("*"))
    }


def assert_all_commands_work(
    capsys, store: Path, label: str, tmp_path: Path, boxes: list[str] | None = None
) -> dict:
    """info, verify (of ``boxes`` only, if given), plot and publish succeed on ``store`` and leave
    it byte for byte as it was; returns the manifest entry."""
    before = tree(store)
    code, out, err = run(capsys, "info", str(store))
    assert code == 0, err
    assert str(store) in out and "likelihood:" in out
    code, out, err = run(capsys, "info", str(store), "--json")
    assert code == 0 and json.loads(out)["likelihood"]
    fewer = ["--kernel-points", "2000"] if json.loads(out)["qp_schema_version"] == 2 else []
    chosen = ["--boxes", *boxes] if boxes else []
    code, out, err = run(
        capsys, "verify", str(store), *CHECK, *fewer, *chosen, "--no-write", "--json"
    )
    assert code == 0, err
    assert "PASSED" in err
    if boxes:
        assert json.loads(out)["mpmath_boxes"] == sorted(boxes)
    if fewer:  # --kernel-points 2000: 2000 // boxes per box
        assert int(re.search(r"on (\d+) random points", err).group(1)) in range(1990, 2001)
    png = tmp_path / "plot.png"
    code, _, err = run(capsys, "plot", str(store), "--y", label, "--output", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    host = tmp_path / "host"
    code, out, err = run(capsys, "publish", str(store), "--to", str(host), "--json")
    assert code == 0, err
    entry = json.loads(out)
    manifest = json.loads((host / "manifest.json").read_text())
    assert manifest["tables"][entry["name"]] == entry
    assert (host / entry["file"]).stat().st_size == entry["size"]
    assert tree(store) == before  # none of the commands wrote into the store
    return entry


@pytest.mark.parametrize("likelihood", sorted(SHIPPED))
def test_every_command_works_on_each_shipped_table(capsys, tmp_path, likelihood):
    store = shipped_path(likelihood)
    entry = assert_all_commands_work(
        capsys, store, PLOT_LABEL[likelihood], tmp_path, BOXES.get(likelihood)
    )
    assert entry["likelihood"] == likelihood and entry["schema_version"] == 2


def test_verify_refuses_boxes_a_store_does_not_have(capsys):
    store = shipped_path("probit")
    code, _, err = run(capsys, "verify", str(store), *CHECK, "--boxes", "nowhere")
    assert code == 2 and "--boxes" in err and "nowhere" in err


def test_a_published_cells_table_installs_with_download(capsys, tmp_path, monkeypatch):
    """What ``publish`` writes for a cells store is what ``qpinfer download`` installs."""
    from qpinfer.tables.remote.install import download

    host = tmp_path / "host"
    code, _, err = run(capsys, "publish", str(shipped_path("probit")), "--to", str(host))
    assert code == 0, err
    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path / "installed"))
    path = download("probit", base_url=host, make_default=False)
    table = open_table(path)
    assert isinstance(table, ReducedTable) and table.likelihood == "probit"
    assert tree(path) == tree(shipped_path("probit"))


# ----------------------------------------------------------------------------- small builds


@pytest.fixture(scope="module")
def cells_build(tmp_path_factory):
    """The cheapest cells table (step_noise: one box, one tile) built by the CLI on a real
    LocalCluster, with every check flag set to a non-default value."""
    out = tmp_path_factory.mktemp("cells") / "step.zarr"
    argv = ["build", "step_noise", str(out), "--grid", "cells", "--workers", "1", "--samples", "3"]
    argv += ["--seed", "5", "--tolerance", "1e-11", "--verify-dps", "20", "--json"]
    code = main([*argv, "--no-progress"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def paper_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper") / "probit.zarr"
    argv = ["build", "probit", str(out), *PAPER_SMALL, *CHECK, "--no-progress"]
    assert main(argv) == 0
    return out


def test_cells_build_honours_the_check_flags_and_json(capsys, cells_build):
    attrs = json.loads((cells_build / "zarr.json").read_text())["attributes"]
    ver = attrs["verification"]
    # --samples 3 over one box: 3 mpmath points; --seed, --tolerance, --verify-dps recorded
    assert ver["mpmath_points"] == 3 and ver["seed"] == 5
    assert ver["tolerance"] == 1e-11 and ver["dps"] == 20 and ver["passed"] is True


def test_every_command_works_on_a_small_cells_build(capsys, tmp_path, cells_build):
    assert_all_commands_work(capsys, cells_build, "1", tmp_path)


def test_every_command_works_on_a_small_paper_grid_build(capsys, tmp_path, paper_build):
    # the paper store's verify writes its report unless --no-write (which assert_... passes)
    entry = assert_all_commands_work(capsys, paper_build, "1", tmp_path)
    assert entry["shape"] == [1, 5, 5]


def test_cells_verify_fails_on_a_flipped_byte(capsys, tmp_path, cells_build):
    bad = tmp_path / "bad.zarr"
    shutil.copytree(cells_build, bad)
    chunk = max((p for p in (bad / "rho_core" / "c").rglob("*") if p.is_file()), key=str)
    data = bytearray(chunk.read_bytes())
    data[8] ^= 1  # a last-bit change: only the integrity record can tell
    chunk.write_bytes(bytes(data))
    code, _, err = run(capsys, "verify", str(bad), *CHECK)
    assert code == 1 and "FAILED" in err and "BROKEN" in err and "rho_core/c" in err


# ----------------------------------------------------------------------------- dry runs


@pytest.mark.parametrize(
    "argv",
    [
        ["probit"],  # the paper's App. J grid
        ["poisson_square", "--y-max", "3"],
        ["logit", *PAPER_SMALL],
        *([name, "--grid", "cells"] for name in sorted(registry._REGISTRY)),
        ["probit", "--grid", "cells", "--scheduler", "tcp://127.0.0.1:1", "--workers", "8"],
    ],
    ids=lambda a: "-".join(a[:3]),
)
def test_dry_run_prints_plan_and_estimate_and_writes_nothing(capsys, tmp_path, argv):
    (tmp_path / "other").write_text("x")
    before = tree(tmp_path)
    out = tmp_path / "t.zarr"
    code, stdout, err = run(capsys, "build", argv[0], str(out), *argv[1:], "--dry-run", "--json")
    assert code == 0, err
    assert "estimate:" in err and "dry run: nothing was created" in err
    assert json.loads(stdout)["dry_run"] is True
    assert tree(tmp_path) == before


@pytest.mark.parametrize("grid", ["paper", "cells"])
def test_dry_run_reads_a_held_lock_and_leaves_it(capsys, tmp_path, grid):
    out = tmp_path / "t.zarr"
    lock = lock_path(out)
    lock.write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename}))
    before = tree(tmp_path)
    code, _, err = run(capsys, "build", "probit", str(out), "--grid", grid, "--dry-run")
    assert code == 2 and "is running" in err and str(lock) in err
    assert tree(tmp_path) == before


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["build", "probit", "OUT", "--grid", "cells", "--mu", "-1", "1", "0.5"], "--mu:"),
        (
            ["build", "probit", "OUT", "--grid", "cells", "--log10-sigma", "0", "1", "1"],
            "--log10-sigma:",
        ),
        (["build", "probit", "OUT", "--grid", "cells", "--y", "1"], "--y:"),
        (["build", "poisson_square", "OUT", "--grid", "cells", "--y-max", "3"], "--y-max:"),
        (["build", "probit", "OUT", "--grid", "cells", "--tile-mu", "5"], "--tile-mu:"),
        (
            ["build", "probit", "OUT", "--y-max", "3", "--dry-run"],
            "--y-max: only for poisson_square",
        ),
        (["build", "probit", "OUT", "--eps", "0.1", "--dry-run"], "--eps:"),
        (
            ["build", "probit", "OUT", "--grid", "cells", "--verify-dps", "10", "--dry-run"],
            "--verify-dps",
        ),
        (
            ["build", "probit", "OUT", "--grid", "cells", "--tolerance", "0", "--dry-run"],
            "--tolerance",
        ),
        (
            ["build", "probit", "OUT", "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"],
            "--workers:",
        ),
        (["verify", "STORE", "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "--workers:"),
        (
            ["plot", "PAPER", "--y", "1", "--output", "x.png", "--mu", "0", "1"],
            "--mu: only for cells",
        ),
        (["verify", "PAPER", "--kernel-points", "9"], "--kernel-points: only for cells"),
        (["verify", "PAPER", "--boxes", "lobe"], "--boxes: only for cells"),
        (["plot", "STORE", "--y", "0", "--output", "x.png"], "--y: 0 is not a label"),
        (["ship", "--out", "DIR", "--into-package"], "--into-package:"),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(v[:1] + [a for a in v if a[:2] == "--"]),
)
def test_flags_that_do_not_apply_are_refused_in_one_line(
    capsys, tmp_path, paper_build, argv, needle
):
    subs = {
        "OUT": str(tmp_path / "t.zarr"),
        "STORE": str(shipped_path("probit")),
        "PAPER": str(paper_build),
        "DIR": str(tmp_path / "dir"),
        "x.png": str(tmp_path / "x.png"),
    }
    before = tree(tmp_path)
    code, _, err = run(capsys, *(subs.get(a, a) for a in argv))
    assert code == 2, err
    assert needle in err and err.count("\n") == 1 and err.startswith("qptables ")
    assert tree(tmp_path) == before


# ----------------------------------------------------------------------------- help


def test_help_lists_every_likelihood_and_says_what_each_grid_gives():
    p = subprocess.run(
        [sys.executable, "-m", "qptables.cli", "build", "--help"],
        check=True, capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    text = " ".join(p.stdout.split())
    for name in registry._REGISTRY:
        assert name in text, name
    assert "App. J" in text and "20001 x 2001 points per label" in text
    assert "paper (default)" in text and "cells:" in text and "as shipped in qpinfer" in text


# ----------------------------------------------------------------------------- missing extra

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
sys.argv = ["qptables", *sys.argv[1:]]
from qptables.cli.commands import main
sys.exit(main())
"""


ALL_BLOCKED = ("dask", "distributed", "mpmath")


@pytest.mark.parametrize(
    ("command", "blocked"),
    [("build", ("distributed",)), ("build", ALL_BLOCKED), ("build-cells", ("mpmath",))]
    + [("verify", ("distributed",)), ("verify", ALL_BLOCKED), ("ship", ("distributed",))],
)
def test_a_missing_tables_extra_is_named_in_one_line(tmp_path, blocked, command):
    argv = {
        "build": ["build", "probit", str(tmp_path / "t.zarr"), *PAPER_SMALL],
        "build-cells": ["build", "probit", str(tmp_path / "t.zarr"), "--grid", "cells"],
        "verify": ["verify", str(shipped_path("probit")), *CHECK],
        "ship": ["ship", "--out", str(tmp_path / "ship")],
    }[command]
    p = subprocess.run(
        [sys.executable, "-c", BLOCK.format(blocked=blocked), *argv],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert p.returncode not in (0, None), p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert "pip install 'quantile-propagation[tables]'" in p.stderr
    assert list(tmp_path.iterdir()) == []


def test_info_of_a_cells_store_needs_no_tables_extra():
    block = BLOCK.format(blocked=ALL_BLOCKED)
    p = subprocess.run(
        [sys.executable, "-c", block, "info", str(shipped_path("logit"))],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "integrity ok" in p.stdout


# ----------------------------------------------------------------------------- ship


def _ship_args(**kw) -> Namespace:
    return Namespace(**{"out": None, "into_package": False, **kw})


def test_ship_writes_into_the_source_checkout_by_default():
    assert (REPO / "pyproject.toml").is_file()  # this test runs in the source checkout
    assert ship_destination(_ship_args()) == DATA_DIR == REPO / "qpinfer" / "tables_data"
    assert ship_destination(_ship_args(out="elsewhere")) == Path("elsewhere")
    assert ship_destination(_ship_args(into_package=True)) == DATA_DIR


def test_ship_refuses_an_installed_package_unless_asked(tmp_path):
    """qpinfer copied as an installed package is (no pyproject.toml beside it): ``ship`` without
    ``--out`` refuses in one line and writes nothing into it."""
    site = tmp_path / "site-packages"
    shutil.copytree(
        REPO / "qpinfer", site / "qpinfer", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = tree(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    code = "import sys; from qptables.cli.commands import main; sys.exit(main(['ship']))"
    probe = "import qpinfer; print(qpinfer.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # fmt: skip (cwd: not the checkout, which `python -c` puts first on sys.path)
    assert where.startswith(str(site))
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert "not in a source checkout" in p.stderr and "--into-package" in p.stderr
    assert p.stderr.count("\n") == 1
    assert tree(site) == before
