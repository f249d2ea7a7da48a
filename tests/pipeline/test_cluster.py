"""Builds on real multi-process clusters, and fault tolerance.

* a ``dask scheduler`` and two ``dask worker`` processes started with :mod:`subprocess` on
  127.0.0.1 (random free ports, one thread per worker);
* killing one worker process mid-build (external cluster and LocalCluster);
* SIGKILL of the ``qptables build`` client process mid-build, then re-running the same command:
  only the missing tiles are computed and the result is bit-identical to a clean build.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from qpinfer.tables.schema import DATA_VARS, DIMS
from qptables import GridSpec, build
from qptables.pipeline.dask_run import SINGLE_THREAD_ENV
from qptables.pipeline.resume import lock_path, partial_path
from qptables.store import read_attrs, scan_tiles
from tests._helpers import FAST, chunk_files, direct_kernel

FASTER = {**FAST, "samples": 0}
SMALL = GridSpec((-2.0, 2.0, 0.1), (-1.0, 1.0, 0.1), (-1, 1))
# ~80k points per label in ~100 tiles: a few seconds of work, long enough to interrupt
LONG = GridSpec((-4.0, 4.0, 0.02), (-1.0, 1.0, 0.01), (1,), tile_mu=4)
DASK = str(Path(sys.executable).with_name("dask"))


def assert_equals_kernel(path: Path, grid: GridSpec) -> None:
    g = zarr.open_group(str(path), mode="r", use_consolidated=False)
    want = direct_kernel("probit", grid)
    for var in DATA_VARS:
        got = np.asarray(g[var][...])
        diff = got != want[var]
        assert not diff.any(), (
            f"{var}: {int(diff.sum())} of {diff.size} values differ from the kernel, max rel "
            f"{np.max(np.abs(got - want[var]) / np.abs(want[var])):.3g}"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_chunks(partial: Path, at_least: int, timeout: float = 120.0) -> int:
    """Poll until ``partial`` holds at least ``at_least`` sigma_qp chunk files."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        base = partial / "sigma_qp" / "c"
        n = sum(1 for p in base.rglob("0") if p.is_file()) if base.is_dir() else 0
        if n >= at_least:
            return n
        time.sleep(0.02)
    raise TimeoutError(f"fewer than {at_least} chunks in {partial} after {timeout} s")


def _kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _wait_group_gone(pgid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.fixture
def dask_processes(tmp_path):
    """``dask scheduler`` + two single-threaded ``dask worker`` processes on 127.0.0.1.

    Yields ``(address, workers)``; every process (and its children) is killed at teardown.
    """
    env = {**os.environ, **SINGLE_THREAD_ENV}
    procs: list[subprocess.Popen] = []
    logs = tmp_path / "dask-logs"
    logs.mkdir()

    def start(name: str, *args: str) -> subprocess.Popen:
        log = open(logs / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen(
            [DASK, *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp_path,
        )
        log.close()
        procs.append(p)
        return p

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    try:
        start(
            "scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"
        )
        workers = [
            start(
                f"worker{i}",
                "worker",
                address,
                "--host",
                "127.0.0.1",
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--death-timeout",
                "60",
            )
            for i in range(2)
        ]
        from distributed import Client

        with Client(address, timeout="60s") as c:
            c.wait_for_workers(2, timeout=60)
        yield address, workers
    finally:
        for p in procs:
            _kill_group(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(p)
                p.wait(timeout=10)
            _wait_group_gone(p.pid, timeout=10)


def test_build_on_external_scheduler_and_two_worker_processes(dask_processes, tmp_path):
    import xarray as xr

    address, _ = dask_processes
    out = tmp_path / "probit.zarr"
    result = build("probit", out, SMALL, scheduler=address, **FAST)
    assert result.published and result.tiles_computed == SMALL.n_tiles
    assert_equals_kernel(out, SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(out)
    assert tuple(ds["sigma_qp"].dims) == DIMS and ds.attrs["complete"] is True


def _build_in_thread(**kwargs) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = build(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_killing_a_worker_process_mid_build_still_completes(dask_processes, tmp_path):
    address, workers = dask_processes
    out = tmp_path / "probit.zarr"
    thread, box = _build_in_thread(
        likelihood="probit", out=out, grid=LONG, scheduler=address, **FASTER
    )
    done_at_kill = wait_for_chunks(partial_path(out), 3)
    _kill_group(workers[0])  # the whole `dask worker` (nanny and worker) dies
    workers[0].wait(timeout=30)
    thread.join(timeout=300)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    assert done_at_kill < LONG.n_tiles, "the build finished before the kill; grid too small"
    assert box["result"].published
    assert_equals_kernel(out, LONG)


def test_a_build_whose_workers_all_die_ends_with_an_error_not_an_endless_wait(
    dask_processes, tmp_path, monkeypatch
):
    """Dask waits for a worker forever; the build gives up after WORKER_WAIT_SECONDS (3 s
    here) without any, keeps its finished tiles and releases its lock."""
    from qptables.pipeline import dask_run
    from qptables.pipeline.errors import BuildError

    monkeypatch.setattr(dask_run, "WORKER_WAIT_SECONDS", 3)
    monkeypatch.setattr(dask_run, "_POLL_SECONDS", 0.5)
    address, workers = dask_processes
    out = tmp_path / "probit.zarr"
    thread, box = _build_in_thread(
        likelihood="probit", out=out, grid=LONG, scheduler=address, **FASTER
    )
    wait_for_chunks(partial_path(out), 2)
    for w in workers:
        _kill_group(w)
    for w in workers:
        w.wait(timeout=30)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the build still waits for workers"
    err = box.get("error")
    assert isinstance(err, BuildError), box
    assert "no worker for 3 s" in str(err) and "re-run" in str(err)
    assert partial_path(out).is_dir() and not out.exists() and not lock_path(out).exists()


def test_killing_a_localcluster_worker_mid_build_still_completes(tmp_path):
    from distributed import Client, LocalCluster

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            env=dict(SINGLE_THREAD_ENV),
        )
    client = Client(cluster)
    try:
        pids = list(client.run(os.getpid).values())
        out = tmp_path / "probit.zarr"
        thread, box = _build_in_thread(
            likelihood="probit", out=out, grid=LONG, client=client, **FASTER
        )
        done_at_kill = wait_for_chunks(partial_path(out), 3)
        os.kill(pids[0], signal.SIGKILL)  # the nanny restarts it; its tasks are rescheduled
        thread.join(timeout=300)
        assert not thread.is_alive()
        if "error" in box:
            raise box["error"]
        assert done_at_kill < LONG.n_tiles
        assert box["result"].published
        assert_equals_kernel(out, LONG)
    finally:
        client.close()
        cluster.close()


def _cli(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "qptables.cli.commands",
        "build",
        "probit",
        str(out),
        "--mu",
        "-4",
        "4",
        "0.02",
        "--log10-sigma",
        "-1",
        "1",
        "0.01",
        "--tile-mu",
        "4",
        "--workers",
        "2",
        "--samples",
        "2",
        "--verify-dps",
        "20",
        "--no-progress",
        *extra,
    ]


@pytest.mark.slow
def test_sigkill_of_the_client_then_rerun_resumes_bit_identically(tmp_path):
    grid = GridSpec((-4.0, 4.0, 0.02), (-1.0, 1.0, 0.01), (-1, 1), tile_mu=4)
    out = tmp_path / "killed" / "probit.zarr"
    out.parent.mkdir()
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    proc = subprocess.Popen(
        _cli(out),
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_chunks(partial_path(out), 20)
        os.kill(proc.pid, signal.SIGKILL)  # the client only: its workers notice and exit
        proc.wait(timeout=30)
        _wait_group_gone(proc.pid)
    finally:
        _kill_group(proc)
        proc.wait(timeout=30)

    assert not out.exists(), "an interrupted build must never publish"
    assert lock_path(out).exists()  # left behind by the killed process: stale
    done = len(scan_tiles(partial_path(out), grid))
    assert 0 < done < grid.n_tiles

    rerun = subprocess.run(
        _cli(out), check=False, env=env, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "stale lock" in rerun.stderr
    assert f"computed {grid.n_tiles - done} tiles, reused {done}" in rerun.stderr
    assert read_attrs(out)["complete"] is True
    assert not partial_path(out).exists() and not lock_path(out).exists()

    clean = tmp_path / "clean" / "probit.zarr"
    clean.parent.mkdir()
    fresh = subprocess.run(
        _cli(clean), check=False, env=env, capture_output=True, text=True, timeout=600
    )
    assert fresh.returncode == 0, fresh.stderr
    assert chunk_files(out) == chunk_files(clean)
    assert read_attrs(out)["checksums"] == read_attrs(clean)["checksums"]
