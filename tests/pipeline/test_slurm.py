"""``qptables build`` on a real SLURM (slurmctld + slurmd + munge on this machine).

Marker ``slurm`` (not in the default run): ``bash cluster/hpc/local-slurm.sh && bash
scripts/test.sh -m slurm -rP``. The module fixture uses a running SLURM, or (as root) starts one
with ``cluster/hpc/local-slurm.sh``; the tests are skipped, with the reason, only where SLURM
cannot start. Nothing is mocked: the ``cluster/hpc/qptables_jobqueue.py`` launcher starts a dask
scheduler and submits worker jobs with ``sbatch`` through ``dask_jobqueue.SLURMCluster``; the
tests log the job ids and ``squeue`` lines they see, and compare the published store's chunk
checksums with a ``LocalCluster`` build of the same grid:

* a plain build (verified, published, then packed with ``qptables publish``);
* ``scancel`` of a worker job mid-build: the build completes, bit-identical;
* SIGTERM of the launcher mid-build: nothing published, no job left in the queue, the lock
  released or stale; the same command then resumes (reusing tiles), bit-identical.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Self

import numpy as np
import pytest

from qptables.store import read_attrs

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cluster" / "hpc" / "local-slurm.sh"
LAUNCHER = ROOT / "cluster" / "hpc" / "qptables_jobqueue.py"
JOB_NAME = "qptables-worker"
# 3201 x 201 points per label, 25-row tiles (129 per label); y = -1 is mirrored from +1:
# ~0.64 M kernel points, ~10 s on two workers -- long enough to interrupt mid-build
GRID = "--mu -8 8 0.005 --log10-sigma -1 1 0.01 --y -1 1 --tile-mu 25 --samples 16 --no-progress"
GRID = GRID.split()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _slurm_up() -> bool:
    if not shutil.which("sbatch") or not shutil.which("scontrol"):
        return False
    p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False)
    return "UP" in p.stdout


@pytest.fixture(scope="module")
def slurm() -> None:
    """A running one-node SLURM, started with cluster/hpc/local-slurm.sh if need be (root)."""
    if not _slurm_up():
        if os.geteuid() != 0:
            pytest.skip(
                "SLURM is not running and starting it needs root: run "
                "`sudo bash cluster/hpc/local-slurm.sh` first"
            )
        p = subprocess.run(
            ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=900, check=False
        )
        if p.returncode != 0 or not _slurm_up():
            pytest.skip(
                f"SLURM cannot start here (cluster/hpc/local-slurm.sh exit "
                f"{p.returncode}): {p.stderr.strip()[-1500:]}"
            )
    state = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %T %c %m"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"sinfo: {state}")
    leftover = _queue()
    assert not leftover, f"qptables worker jobs already queued: {leftover}"


def _queue() -> list[str]:
    """squeue lines of this test's worker jobs: 'JOBID NAME STATE TIME NODELIST'."""
    p = subprocess.run(
        ["squeue", "--noheader", "-n", JOB_NAME, "-o", "%i %j %T %M %N"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line.strip() for line in p.stdout.splitlines() if line.strip()]


class QueueWatch:
    """Polls squeue in a thread; keeps every distinct line seen (job id + state)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for line in _queue():
                job, _, state = line.split()[:3]
                self.seen.setdefault((job, state), line)
            self._stop.wait(0.5)

    def running(self) -> list[str]:
        return [line.split()[0] for line in _queue() if line.split()[2] == "RUNNING"]

    def job_ids(self) -> list[str]:
        return sorted({job for job, _ in self.seen}, key=int)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _launcher(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(LAUNCHER),
        "--system",
        "slurm",
        "--jobs",
        "2",
        "--cores",
        "1",
        "--memory",
        "2GB",
        "--walltime",
        "00:20:00",
        "--queue",
        "debug",
        "--requeue-interval",
        "5",
        "--worker-wait",
        "300",
        "--local-directory",
        str(out.parent / "dask-scratch"),
        "--",
        "probit",
        str(out),
        *GRID,
        *extra,
    ]


def _start(out: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            _launcher(out),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=ENV,
            cwd=out.parent,
            start_new_session=True,
        )


def _wait_queue_empty(timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [line for line in _queue() if "COMPLETING" not in line]
        if not left:
            return []
        time.sleep(0.5)
    return _queue()


def _tiles_done(out: Path) -> int:
    base = out.with_name(out.name + ".partial") / "sigma_qp" / "c"
    return sum(1 for p in base.rglob("0") if p.is_file()) if base.is_dir() else 0


def _wait_mid_build(proc: subprocess.Popen, watch: QueueWatch, out: Path, at_least: int) -> int:
    """Wait until both worker jobs run and ``at_least`` sigma_qp tiles are written."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the build ended before it could be interrupted"
        n = _tiles_done(out)
        if n >= at_least and len(watch.running()) >= 2:
            return n
        time.sleep(0.05)
    raise TimeoutError("the build did not reach the interruption point in 300 s")


def _report(name: str, log: Path, watch: QueueWatch) -> str:
    text = log.read_text(errors="replace")
    print(f"===== {name}: squeue lines seen (job id, name, state, time, node)")
    for line in watch.seen.values():
        print(f"  {line}")
    print(f"===== {name}: launcher/build log")
    print("\n".join(ln for ln in text.splitlines() if "#SBATCH" not in ln)[-6000:])
    return text


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    """Chunk checksums of a LocalCluster (2 workers) build of GRID."""
    out = tmp_path_factory.mktemp("local") / "probit.zarr"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "qptables.cli.commands",
            "build",
            "probit",
            str(out),
            *GRID,
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr
    return read_attrs(out)["checksums"]


def _assert_published_identical(out: Path, reference: dict[str, str]) -> None:
    assert out.is_dir() and not out.with_name(out.name + ".partial").exists()
    attrs = read_attrs(out)
    assert attrs["complete"] is True and attrs["verification"]["passed"] is True
    assert attrs["checksums"] == reference, "SLURM build differs from the LocalCluster build"


def test_slurm_build_submits_worker_jobs_verifies_publishes_bit_identically(
    slurm, reference, tmp_path
):
    out, log = tmp_path / "probit.zarr", tmp_path / "launcher.log"
    with QueueWatch() as watch:
        proc = _start(out, log)
        rc = proc.wait(timeout=900)
    text = _report("plain SLURM build", log, watch)
    assert rc == 0, text[-3000:]
    assert "submitted slurm jobs:" in text and watch.job_ids(), "no sbatch job seen"
    assert any(state == "RUNNING" for _, state in watch.seen), "no job seen RUNNING in squeue"
    assert "published" in text
    _assert_published_identical(out, reference)
    assert _wait_queue_empty() == [], "worker jobs left in the queue after the build"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "qptables.cli.commands",
            "publish",
            str(out),
            "--to",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    manifest = json.loads((tmp_path / "dist" / "manifest.json").read_text())
    assert "probit" in json.dumps(manifest)


def test_scancel_of_a_worker_job_mid_build_still_completes_bit_identically(
    slurm, reference, tmp_path
):
    out, log = tmp_path / "probit.zarr", tmp_path / "launcher.log"
    with QueueWatch() as watch:
        proc = _start(out, log)
        try:
            n = _wait_mid_build(proc, watch, out, at_least=10)
            victim = watch.running()[0]
            subprocess.run(["scancel", victim], check=True)
            print(f"scancel {victim} after {n} of 258 tiles")
            rc = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
    text = _report("scancel of a worker job", log, watch)
    assert rc == 0, text[-3000:]
    assert (victim, "RUNNING") in watch.seen
    _assert_published_identical(out, reference)
    assert _wait_queue_empty() == [], "worker jobs left in the queue after the build"


def test_sigterm_of_the_launcher_publishes_nothing_and_the_rerun_resumes_bit_identically(
    slurm, reference, tmp_path
):
    out, log = tmp_path / "probit.zarr", tmp_path / "launcher.log"
    with QueueWatch() as watch:
        proc = _start(out, log)
        n = _wait_mid_build(proc, watch, out, at_least=20)
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=120)
        print(f"SIGTERM to the launcher after {n} tiles: exit {rc}")
        assert rc != 0
        assert not out.exists(), "something was published after SIGTERM"
        assert out.with_name(out.name + ".partial").is_dir()
        assert _wait_queue_empty() == [], "worker jobs left in the queue after SIGTERM"
        print(f"kept {_tiles_done(out)} sigma_qp tiles in {out.name}.partial")
        proc = _start(out, log)
        rc = proc.wait(timeout=900)
    text = _report("SIGTERM of the launcher, then the same command", log, watch)
    assert rc == 0, text[-3000:]
    reused = [int(m) for m in re.findall(r"computed \d+ tiles, reused (\d+)", text)]
    assert reused and reused[-1] > 0, f"the re-run reused no tiles: {reused}"
    _assert_published_identical(out, reference)


def test_minibatch_sparse_ep_streams_a_zarr_store_on_slurm_workers(slurm, tmp_path):
    """``MiniBatchSparseGPClassifier(scheduler=client)`` on two SLURM worker jobs
    (``dask_jobqueue.SLURMCluster``) reading their batches from a zarr store on disk; the fit
    equals the same fit in this process (the parts are summed in the same order wherever they
    ran: BLAS round-off only, 1e-9 after 2 epochs)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_minibatch_cluster import run

    args = dict(n=20_000, epochs=2, fit_epochs=20, store=tmp_path / "data.zarr", chunk=4096)
    on_slurm = run(cluster_kind="slurm", batch=4096, **args)
    here = run(cluster_kind="process", batch=4096, **args)
    print(f"SLURM: {on_slurm}")
    assert on_slurm["epochs"] == 2 and here["epochs"] == 2
    assert max(on_slurm["worker_peak_mb"]) < 2048
    assert abs(on_slurm["test_ntll"] - here["test_ntll"]) <= 1e-9 * here["test_ntll"]
    assert on_slurm["test_ntll"] < 0.5  # chance is log 2 = 0.69
    np.testing.assert_allclose(on_slurm["theta"], here["theta"], rtol=1e-9)
    assert not _wait_queue_named("qpinfer-minibatch"), "worker jobs left in the queue"


def _wait_queue_named(name: str, timeout: float = 60.0) -> list[str]:
    """The queue's jobs named ``name`` once none is left, or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        p = subprocess.run(
            ["squeue", "-h", "-n", name, "-o", "%i %T"], capture_output=True, text=True, check=False
        )
        left = [line for line in p.stdout.splitlines() if line.strip()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1.0)
