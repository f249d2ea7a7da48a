"""Benchmark the qptables build pipeline.

(a) **Paper build**: wall time of the full App. J probit table (mu -10..10, log10 sigma -1..1,
    steps 0.001, y = -1 and +1; verified and published) on the default embedded LocalCluster
    (one single-threaded worker process per CPU). Goal: <= 10 minutes on a 2-core machine.
(b) **Scaling**: tiles/second of the tile phase with 1 and with 2 worker processes on a real
    ``dask scheduler`` (scheduler and ``dask worker`` processes started by this script) on a
    fixed sub-grid of the paper grid (paper tiles, even tile count), and the speed-up.
    Goal: >= 1.8x.

Usage::

    python benchmarks/bench_build.py                     # (a) and (b), full size
    python benchmarks/bench_build.py --quick             # small grids: checks the script works
    python benchmarks/bench_build.py --mu-stop 1         # (a) on mu in [-1, 1] only
    python benchmarks/bench_build.py --only scaling --json results.json

Prints a table; ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from qptables import GridSpec, build, paper_grid
from qptables.grid import PAPER_LOG10_SIGMA, PAPER_MU
from qptables.pipeline.dask_run import SINGLE_THREAD_ENV

DASK = str(Path(sys.executable).with_name("dask"))


def bench_paper(workdir: Path, mu_stop: float | None, quick: bool, workers: int | None) -> dict:
    """(a): one full build (probe, tiles, checksums, mpmath verification, publish)."""
    grid = paper_grid("probit")
    if quick:
        grid = GridSpec((-0.5, 0.5, 0.001), (-1.0, 1.0, 0.01), (-1, 1))
    elif mu_stop is not None:
        grid = GridSpec((-mu_stop, mu_stop, PAPER_MU[2]), PAPER_LOG10_SIGMA, (-1, 1))
    out = workdir / "paper-probit.zarr"
    t0 = time.perf_counter()
    result = build("probit", out, grid, workers=workers, progress=True)
    wall = time.perf_counter() - t0
    row = {
        "benchmark": "paper_build" if not (quick or mu_stop) else "reduced_paper_build",
        "grid": grid.describe(),
        "points": grid.n_points,
        "tiles": result.tiles_total,
        "workers": workers or os.cpu_count(),
        "wall_seconds": round(wall, 2),
        "tile_phase_seconds": round(result.compute_seconds, 2),
        "kernel_points": result.points_computed,
        "mirrored_rows": result.rows_mirrored,
        "verification_points": result.verification["points"],
        "max_rel_error": result.verification["max_rel_error"],
        "goal_seconds": 600,
    }
    shutil.rmtree(out, ignore_errors=True)
    return row


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dask_cluster(n_workers: int, workdir: Path):
    """A ``dask scheduler`` and ``n_workers`` single-threaded ``dask worker`` processes."""
    env = {**os.environ, **SINGLE_THREAD_ENV}
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = []

    def start(*args: str) -> None:
        procs.append(
            subprocess.Popen(
                [DASK, *args],
                env=env,
                cwd=workdir,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        for _ in range(n_workers):
            start(
                "worker",
                address,
                "--host",
                "127.0.0.1",
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
            )
        from distributed import Client

        with Client(address, timeout="60s") as c:
            c.wait_for_workers(n_workers, timeout=120)
        yield address
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def bench_scaling(workdir: Path, quick: bool) -> list[dict]:
    """(b): tiles/second of the tile phase with 1 and 2 worker processes on a real scheduler."""
    if quick:
        grid = GridSpec((0.0, 0.599, 0.001), (-1.0, 1.0, 0.01), (1,), tile_mu=75)  # 8 tiles
    else:
        grid = GridSpec((0.0, 1.499, 0.001), PAPER_LOG10_SIGMA, (1,), tile_mu=75)  # 20 paper tiles
    rows = []
    for n in (1, 2):
        out = workdir / f"scaling-{n}.zarr"
        with dask_cluster(n, workdir) as address:
            result = build("probit", out, grid, scheduler=address, samples=0, progress=False)
        rate = result.tiles_computed / result.compute_seconds
        rows.append(
            {
                "benchmark": "scaling",
                "grid": grid.describe(),
                "workers": n,
                "tiles": result.tiles_computed,
                "tile_phase_seconds": round(result.compute_seconds, 2),
                "tiles_per_second": round(rate, 3),
                "points_per_second": round(result.points_computed / result.compute_seconds),
            }
        )
        shutil.rmtree(out, ignore_errors=True)
    rows[1]["speedup"] = round(rows[1]["tiles_per_second"] / rows[0]["tiles_per_second"], 3)
    rows[1]["goal_speedup"] = 1.8
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["paper", "scaling"], help="run one benchmark only")
    p.add_argument("--quick", action="store_true", help="small grids (checks the script)")
    p.add_argument("--mu-stop", type=float, help="(a) on mu in [-MU_STOP, MU_STOP] only")
    p.add_argument("--workers", type=int, help="(a) LocalCluster workers (default: CPU count)")
    p.add_argument("--workdir", type=Path, help="where stores are built (default: a temp dir)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write results as JSON")
    args = p.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="qptables-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    try:
        if args.only in (None, "paper"):
            results.append(bench_paper(workdir, args.mu_stop, args.quick, args.workers))
        if args.only in (None, "scaling"):
            results.extend(bench_scaling(workdir, args.quick))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    for r in results:
        if r["benchmark"] == "scaling":
            extra = f"  speed-up {r['speedup']}x (goal >= 1.8x)" if "speedup" in r else ""
            print(
                f"scaling   {r['workers']} worker(s): {r['tiles']} tiles in "
                f"{r['tile_phase_seconds']:.1f} s = {r['tiles_per_second']:.3f} tiles/s "
                f"({r['points_per_second']:,} points/s){extra}"
            )
        else:
            print(
                f"{r['benchmark']}: {r['points']:,} points, {r['tiles']} tiles, "
                f"{r['workers']} workers: {r['wall_seconds']:.1f} s wall "
                f"(tiles {r['tile_phase_seconds']:.1f} s; goal <= 600 s for the paper grid); "
                f"verified {r['verification_points']} points, max rel error "
                f"{r['max_rel_error']:.2e}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
