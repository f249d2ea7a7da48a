"""A build that cannot go on stops cleanly and says why.

* ``--scheduler`` pointing at something that is not a dask scheduler -- a port that accepts and
  never answers, a real HTTP server, a server that answers HTTP or garbage bytes, a closed port
  -- fails within the connect deadline (``distributed.comm.timeouts.connect``) with one line
  naming the address; no lock, no ``OUT.partial``, no ``OUT`` is left.
* SIGTERM during a build: one line saying so and where the finished tiles are kept, exit 143,
  the lock released, nothing that looks finished; the next run resumes the kept tiles.
* A full disk (a real ``ENOSPC``: a tmpfs with too few inodes) names the phase and the path.
* A non-finite grid-axis value (``--mu -inf 1 0.1``) is named, not "expected 3 arguments".

The CLI cases run the real ``qptables`` command in subprocesses, against real sockets on
127.0.0.1 and real zarr stores.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qptables.cli.commands import main
from qptables.grid import GridSpec
from qptables.pipeline.dask_run import probe_scheduler
from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.tiles import compute_tile
from qptables.store import create_store, read_attrs

CONNECT_SECONDS = 3  # the connect deadline the subprocesses get (dask config, via environment)
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": f"{CONNECT_SECONDS}s",
}
SMALL_GRID = GridSpec((-1.0, 1.0, 0.25), (-0.5, 0.5, 0.25), (1,), tile_mu=3)  # 3 tiles
SMALL = [
    "--mu", "-1", "1", "0.25", "--log10-sigma", "-0.5", "0.5", "0.25", "--y", "1",
    "--tile-mu", "3", "--samples", "0", "--verify-dps", "20", "--no-progress",
]  # fmt: skip


def qptables(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qptables.cli.commands", *args],
        check=False,
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_line(p: subprocess.CompletedProcess, code: int) -> str:
    """The one ``qptables build: error: ...`` line of a run that exited with ``code``."""
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("qptables build: error: "), p.stderr
    return errors[0]


# ----------------------------------------------------------------------------- 1. --scheduler


class _Silent(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.stop.wait(120)  # accept, never answer


class _AnswersHttp(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.recv(65536)  # whatever the client sent first
        self.request.sendall(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n"
            b"bad request"
        )
        self.server.stop.wait(120)


class _Garbage(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"\xff" * 64)
        self.server.stop.wait(120)


class _Closes(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.close()


class _Web(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html>dashboard</html>")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def server(kind: str) -> Iterator[str]:
    """A real TCP server on 127.0.0.1 that is not a dask scheduler; yields its address."""
    handler = {
        "silent": _Silent,
        "http-server": _Web,
        "answers-http": _AnswersHttp,
        "garbage": _Garbage,
        "closes": _Closes,
    }[kind]
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.stop = threading.Event()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.stop.set()
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("kind", ["silent", "http-server", "answers-http", "garbage", "closes"])
def test_a_scheduler_address_that_does_not_speak_dask_fails_in_bounded_time_leaving_nothing(
    tmp_path, kind
):
    with server(kind) as address:
        t0 = time.monotonic()
        p = qptables(
            "build", "probit", "t.zarr", *SMALL, "--scheduler", address, cwd=tmp_path, timeout=60
        )
        seconds = time.monotonic() - t0
    line = error_line(p, 2)
    assert address in line and "does not speak the dask protocol" in line, line
    assert seconds < CONNECT_SECONDS + 25, seconds  # interpreter start-up + the deadline
    assert sorted(os.listdir(tmp_path)) == []  # no OUT, OUT.partial, OUT.lock


def test_an_unreachable_scheduler_leaves_nothing_behind(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    p = qptables("build", "probit", "t.zarr", *SMALL, "--scheduler", address, cwd=tmp_path)
    line = error_line(p, 2)
    assert f"cannot connect to {address}" in line, line
    assert sorted(os.listdir(tmp_path)) == []


def test_a_real_scheduler_passes_the_probe_and_a_worker_is_named_as_not_one():
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        probe_scheduler(cluster.scheduler_address, 10)  # no error
        (worker,) = cluster.scheduler_info["workers"]
        with pytest.raises(BuildInputError, match="is a dask Worker, not a scheduler"):
            probe_scheduler(worker, 10)


# ----------------------------------------------------------------------------- 2. SIGTERM


def _chunk_files(partial: Path) -> list[Path]:
    return [p for p in (partial / "sigma_qp" / "c").rglob("*") if p.is_file()]


@pytest.mark.slow
def test_sigterm_releases_the_lock_says_so_and_the_next_run_resumes(tmp_path):
    args = [
        "build", "probit", "t.zarr", "--mu", "-5", "5", "0.02", "--log10-sigma", "-1", "1",
        "0.05", "--y", "1", "--tile-mu", "5", "--samples", "0", "--verify-dps", "20",
        "--workers", "1", "--no-progress",
    ]  # fmt: skip
    partial = tmp_path / "t.zarr.partial"
    proc = subprocess.Popen(
        [sys.executable, "-m", "qptables.cli.commands", *args],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (partial.is_dir() and _chunk_files(partial)):  # some tiles are finished
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no tile was written"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("qptables build: interrupted by SIGTERM"), err
    assert str(partial) in last and "resume" in last, last
    assert sorted(os.listdir(tmp_path)) == ["t.zarr.partial"]  # no lock, no OUT, no copy
    assert read_attrs(partial)["complete"] is False
    kept = len(_chunk_files(partial))

    p = qptables(*args, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "stale lock" not in p.stderr, p.stderr
    result = json.loads(p.stdout)
    assert result["published"] and result["tiles_reused"] >= kept > 0, (result, kept)
    assert sorted(os.listdir(tmp_path)) == ["t.zarr"]


# ----------------------------------------------------------------------------- 3. ENOSPC


def _entries(path: Path) -> int:
    """Inodes a directory tree uses: itself, its directories and files."""
    return 1 + sum(len(dirs) + len(files) for _, dirs, files in os.walk(path))


@pytest.fixture(scope="module")
def store_inodes(tmp_path_factory) -> tuple[int, int]:
    """Inodes of the small build's store: metadata only, and with every tile written."""
    path = tmp_path_factory.mktemp("inodes") / "t.zarr.partial"
    create_store(path, "probit", SMALL_GRID, package_version="test", build_info={})
    empty = _entries(path)
    for iy, k in SMALL_GRID.tiles():
        compute_tile(str(path), "probit", SMALL_GRID.to_attrs(), SMALL_GRID.tile_mu, iy, k)
    return empty, _entries(path)


@contextlib.contextmanager
def tmpfs(where: Path, inodes: int) -> Iterator[Path]:
    """A real tmpfs at ``where`` with room for the data but only ``inodes`` inodes."""
    where.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=24m,nr_inodes={inodes}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {p.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize(
    ("phase", "needle", "kept"),
    [
        ("create", "creating the build store {dir}/t.zarr.partial", []),
        ("tiles", "writing tile 1/3 of y=1 to {dir}/t.zarr.partial/sigma_", ["t.zarr.partial"]),
        pytest.param(
            "publish",
            "writing the published copy {dir}/t.zarr.publishing",
            ["t.zarr.partial"],
            marks=pytest.mark.slow,  # verifies first: ~15 s
        ),
    ],
)
def test_a_full_disk_names_the_phase_and_the_path(tmp_path, store_inodes, phase, needle, kept):
    empty, full = store_inodes
    # the mount's root and the lock take one inode each; then room for: half the store's
    # metadata / the metadata and one more entry / every tile and a few more, not the copy
    inodes = 2 + {"create": empty // 2, "tiles": empty + 1, "publish": full + 8}[phase]
    with tmpfs(tmp_path / "disk", inodes) as disk:
        p = qptables("build", "probit", "t.zarr", *SMALL, "--workers", "1", cwd=disk)
        line = error_line(p, 1)
        assert needle.format(dir=disk) in line and "No space left on device" in line, line
        assert sorted(os.listdir(disk)) == kept  # no lock, no staging copies, no OUT


# ----------------------------------------------------------------------------- 4. grid flags


def run_main(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mu", "-inf", "1", "0.1"], "--mu START STOP STEP: start must be finite, got -inf"),
        (["--mu", "-1", "-Infinity", "0.1"], "--mu START STOP STEP: stop must be finite, got -inf"),
        (["--mu", "-nan", "1", "0.1"], "--mu START STOP STEP: start must be finite, got nan"),
        (["--log10-sigma", "-inf", "1", "0.1"], "--log10-sigma START STOP STEP: start must be"),
        (["--mu", "-1", "1", "-inf"], "--mu START STOP STEP: step must be finite, got -inf"),
    ],
)
def test_a_non_finite_axis_value_is_named(capsys, tmp_path, args, needle):
    code, err = run_main(capsys, "build", "probit", str(tmp_path / "t.zarr"), *args)
    assert code == 2 and needle in err, err
    assert "expected 3 arguments" not in err
    assert os.listdir(tmp_path) == []


def test_negative_axis_values_in_exponent_form_are_numbers(capsys, tmp_path):
    code, err = run_main(
        capsys, "build", "probit", str(tmp_path / "t.zarr"), "--mu", "-1e0", "1", "0.5",
        "--log10-sigma", "-5e-1", "5e-1", "0.5", "--y", "1", "--dry-run",
    )  # fmt: skip
    assert code == 0, err
    assert "mu -1..1 step 0.5 (5); log10_sigma -0.5..0.5 step 0.5 (3)" in err, err
