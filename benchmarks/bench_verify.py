"""Benchmark the mpmath verification fanned out over dask workers (``qptables verify``).

Builds a small probit store once (no verification), then for 1 and 2 single-threaded
``dask worker`` processes on a real ``dask scheduler`` (started by this script, as
``benchmarks/bench_build.py`` does) checks the same stratified sample of ``--samples`` points
against the mpmath reference with :func:`qptables.reference.verify.reference_sample` (the function
both ``qptables build`` and ``qptables verify --scheduler`` use) and prints points/s and the
speed-up. Each worker is warmed up first (mpmath import and quadrature nodes at the working
precision: a one-off ~1 s per process that every verification pays once per worker).
Goal: >= 1.7x with 2 workers on a 2-core machine.

Usage::

    python benchmarks/bench_verify.py                    # 200 points (~2.5 min on 2 cores)
    python benchmarks/bench_verify.py --samples 2000     # the size of a cluster build's check
    python benchmarks/bench_verify.py --quick            # 40 points: checks the script works

Prints a table; ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bench_build import dask_cluster

from qptables import GridSpec, build
from qptables.reference.verify import reference_sample

GRID = GridSpec((-8.0, 8.0, 0.01), (-1.0, 1.0, 0.01), (-1, 1))


def _warm(dps: int) -> int:
    """Import mpmath and build its quadrature nodes at ``dps`` on a worker."""
    from qptables.reference.sigma import sigma_qp_reference

    sigma_qp_reference("probit", 0.5, 1.0, 1, dps=dps)
    return os.getpid()


def bench(store: Path, workdir: Path, n_workers: int, samples: int, dps: int) -> dict:
    """Points/s of :func:`reference_sample` on ``n_workers`` dask workers."""
    from distributed import Client

    with dask_cluster(n_workers, workdir) as address, Client(address) as client:
        client.run(_warm, dps)
        t0 = time.perf_counter()
        report = reference_sample(store, samples=samples, dps=dps, client=client, progress=True)
        wall = time.perf_counter() - t0
    return {
        "workers": n_workers,
        "points": report["points"],
        "seconds": round(wall, 2),
        "points_per_s": round(report["points"] / wall, 3),
        "max_rel_error": report["max_rel_error"],
        "per_worker": report["where"]["workers"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=None, help="random points (default 200)")
    p.add_argument("--quick", action="store_true", help="40 points")
    p.add_argument("--dps", type=int, default=40, help="mpmath digits (default 40)")
    p.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    samples = args.samples if args.samples is not None else (40 if args.quick else 200)
    if samples < 1:
        p.error(f"--samples: must be >= 1, got {samples}")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "probit-verify.zarr"
    if not store.exists():
        build("probit", store, GRID, workers=2, samples=0, progress=False)
    rows = [bench(store, work, n, samples, args.dps) for n in (1, 2)]
    speedup = rows[1]["points_per_s"] / rows[0]["points_per_s"]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    for r in rows:
        print(
            f"verify {r['workers']} worker(s): {r['points']} mpmath points in {r['seconds']:.1f} s"
            f" = {r['points_per_s']:.2f} points/s (max rel error {r['max_rel_error']:.2e}; "
            f"per worker {sorted(r['per_worker'].values())})"
        )
    print(f"speed-up 1 -> 2 workers: {speedup:.2f}x (goal >= 1.7x)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "speedup": speedup}, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
