"""Table open time and lookup throughput (issue goals: open <= 20 ms, >= 20 M lookups/s/core).

By default a *synthetic* store with the paper's grid shape (App. J: 2 x 20001 x 2001, step 0.001,
1.3 GB) is written to a scratch directory -- the open and lookup costs depend on the layout and
size, not on the values -- by qptables' store writer (:mod:`qptables.store`). ``--store PATH``
times a real store instead (e.g. one built by ``qptables``). ``--n-mu/--n-log10-sigma`` shrink
the grid for a quick run.

Printed per run: open time (cold = first open, warm = median of repeated opens), first-touch cost
of a chunk (memory map + lazy sha256), and steady-state throughput of batched ``sigma_ratio``
(the pure lookup) and ``sigma_qp`` (lookup x exact EP std) against the exact kernel.

    python benchmarks/bench_lookup.py [--n-mu 20001 --n-log10-sigma 2001] [--batch 1000000]
                                      [--store PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import qpinfer


def write_store(path: Path, mu: tuple, ls: tuple, tile_mu: int, block_values, note: dict) -> Path:
    """Write a complete probit store with qptables' writer (:func:`qptables.store.create_store`,
    one :func:`~qptables.store.write_tile` per chunk, sha256 per chunk file), marked verified.

    ``block_values(iy, mu_rows, log10_sigma) -> (sigma_qp, sigma_ratio)`` fills one chunk.
    """
    from qpinfer.tables.integrity import integrity_record
    from qptables.grid import GridSpec
    from qptables.store import (
        chunk_checksums,
        chunk_keys,
        create_store,
        read_attrs,
        update_attrs,
        write_tile,
    )

    grid = GridSpec(mu, ls, (-1, 1), tile_mu=tile_mu)
    create_store(
        path, "probit", grid, package_version=qpinfer.__version__, build_info={"benchmark": note}
    )
    mu_v, ls_v = grid.mu_values(), grid.log10_sigma_values()
    for iy in range(len(grid.y)):
        for a in range(0, mu_v.size, grid.tile_mu):
            b = min(a + grid.tile_mu, mu_v.size)
            qp, ratio = block_values(iy, mu_v[a:b], ls_v)
            write_tile(path, iy, (a, b), {"sigma_qp": qp, "sigma_ratio": ratio})
    update_attrs(
        path,
        consolidate=False,
        complete=True,
        checksums=chunk_checksums(path, chunk_keys(grid)),
        verification={"passed": True, "points": 0, **note},
    )
    # the metadata digest a published store carries (the reader refuses a v1 store without it)
    update_attrs(path, consolidate=False, integrity=integrity_record(path, read_attrs(path)))
    return path


def write_synthetic_store(path: Path, n_mu: int, n_ls: int, tile_mu: int) -> Path:
    """A store of the given shape (step 0.001) with smooth synthetic values (timing only)."""
    step = 0.001
    mu = (-(n_mu - 1) * step / 2, (n_mu - 1) * step / 2, step)
    ls = (-(n_ls - 1) * step / 2, (n_ls - 1) * step / 2, step)

    def values(iy, m, ls_v):
        block = 0.97 + 0.02 * np.tanh((1 - 2 * iy) * m)[:, None] * np.cos(ls_v)[None, :]
        return block, block

    return write_store(path, mu, ls, tile_mu, values, {"synthetic": True})


def write_exact_probit_store(path: Path, mu: tuple, ls: tuple, tile_mu: int = 50) -> Path:
    """A real probit store: sigma* from the exact kernel (uses the mirror symmetry in y)."""
    lik = qpinfer.get_likelihood("probit")

    def values(iy, m, ls_v):
        M, S = np.meshgrid(m, 10.0**ls_v, indexing="ij")
        y = np.full(M.shape, -1.0 if iy == 0 else 1.0)
        qp = qpinfer.sigma_qp(lik, M, S, y)
        _, s_ep = lik.tilted_moments(M, S, y)
        return qp, qp / s_ep

    return write_store(path, mu, ls, tile_mu, values, {"exact_kernel": True})


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--store", type=Path, help="time this store instead of a synthetic one")
    ap.add_argument("--n-mu", type=int, default=20001)
    ap.add_argument("--n-log10-sigma", type=int, default=2001)
    ap.add_argument(
        "--tile-mu",
        type=int,
        default=None,
        help="rows per chunk of the synthetic store (default: n_mu, one chunk per y as "
        "qptables publishes; builds compute in 75-row tiles on the paper grid)",
    )
    ap.add_argument("--batch", type=int, default=1_000_000, help="queries per lookup call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--exact-points", type=int, default=20_000, help="points for the exact kernel")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic store")
    args = ap.parse_args(argv)

    scratch = None
    if args.tile_mu is None:
        args.tile_mu = args.n_mu
    if args.store is None:
        scratch = Path(tempfile.mkdtemp(prefix="qp-bench-lookup-"))
        path = scratch / "probit.zarr"
        t = time.perf_counter()
        write_synthetic_store(path, args.n_mu, args.n_log10_sigma, args.tile_mu)
        print(
            f"wrote synthetic store {path} ({args.n_mu} x {args.n_log10_sigma} x 2) in "
            f"{time.perf_counter() - t:.1f} s",
            file=sys.stderr,
        )
    else:
        path = args.store
    try:
        res = run(path, args)
    finally:
        if scratch is not None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return res


def run(path: Path, args) -> dict:
    t0 = time.perf_counter()
    table = qpinfer.open_table(path)
    open_cold = time.perf_counter() - t0
    opens = []
    for _ in range(max(3, args.repeats)):
        t0 = time.perf_counter()
        qpinfer.open_table(path)
        opens.append(time.perf_counter() - t0)
    open_warm = statistics.median(opens)
    n_files = sum(len(v) for v in table._chunk_files.values())

    # first touch of one chunk: memory map + lazy sha256
    t0 = time.perf_counter()
    table.sigma_ratio(0.0, 1.0, 1)
    first_touch = time.perf_counter() - t0

    lo_mu, hi_mu = table.domain["mu"]
    lo_s, hi_s = table.domain["sigma"]
    rng = np.random.default_rng(0)
    n = args.batch
    mu = rng.uniform(lo_mu, hi_mu, n)
    sigma = 10.0 ** rng.uniform(np.log10(lo_s), np.log10(hi_s), n)
    y = rng.choice([-1.0, 1.0], n)
    # warm-up: maps (and lazily checks) every chunk the batch touches
    t0 = time.perf_counter()
    table.sigma_ratio(mu, sigma, y)
    warmup = time.perf_counter() - t0

    def rate(fn, reps):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return n / min(times)

    r_ratio = rate(lambda: table.sigma_ratio(mu, sigma, y), args.repeats)
    r_qp = rate(lambda: table.sigma_qp(mu, sigma, y), args.repeats)
    # small batches (EP-sized)
    small = {}
    for b in (1000, 4000):
        ms, ss, ys = mu[:b], sigma[:b], y[:b]
        t0 = time.perf_counter()
        reps = 200
        for _ in range(reps):
            table.sigma_ratio(ms, ss, ys)
        small[b] = b * reps / (time.perf_counter() - t0)
    m = args.exact_points
    t0 = time.perf_counter()
    qpinfer.sigma_qp("probit", mu[:m], sigma[:m], y[:m])
    r_exact = m / (time.perf_counter() - t0)

    res = {
        "store": str(path),
        "shape": list(table.shape),
        "chunk_files": n_files,
        "open_cold_ms": open_cold * 1e3,
        "open_warm_ms": open_warm * 1e3,
        "first_chunk_touch_ms": first_touch * 1e3,
        "warmup_batch_s": warmup,
        "batch": n,
        "sigma_ratio_lookups_per_s": r_ratio,
        "sigma_qp_lookups_per_s": r_qp,
        "sigma_ratio_per_s_batch_1000": small[1000],
        "sigma_ratio_per_s_batch_4000": small[4000],
        "exact_sigma_qp_per_s": r_exact,
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }
    print(f"\nTable lookup benchmark: {path} shape {table.shape}, {n_files} chunk files")
    print(f"{'measure':<44}{'value':>14}{'goal':>12}{'ratio':>10}")
    rows = [
        ("open, first (ms)", res["open_cold_ms"], 20.0, True),
        ("open, repeated median (ms)", res["open_warm_ms"], 20.0, True),
        ("first touch of a chunk, map + sha256 (ms)", res["first_chunk_touch_ms"], None, None),
        (f"sigma_ratio lookups/s, batch {n:,} (M)", r_ratio / 1e6, 20.0, False),
        (f"sigma_qp lookups/s, batch {n:,} (M)", r_qp / 1e6, None, None),
        ("sigma_ratio lookups/s, batch 1,000 (M)", small[1000] / 1e6, None, None),
        ("sigma_ratio lookups/s, batch 4,000 (M)", small[4000] / 1e6, None, None),
        ("exact sigma_qp kernel evals/s (M)", r_exact / 1e6, None, None),
        ("sigma_ratio lookup / exact kernel speed-up", r_ratio / r_exact, None, None),
    ]
    for name, value, goal, lower_is_better in rows:
        if goal is None:
            print(f"{name:<44}{value:>14.3f}{'':>12}{'':>10}")
        else:
            ratio = value / goal
            ok = ratio <= 1 if lower_is_better else ratio >= 1
            mark = "ok" if ok else "MISS"
            print(f"{name:<44}{value:>14.3f}{goal:>12.1f}{ratio:>9.2f} {mark}")
    return res


if __name__ == "__main__":
    main()
