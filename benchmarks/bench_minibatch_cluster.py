"""Minibatch sparse EP streamed from an on-disk zarr store on a dask cluster (issue #32).

Writes ``--n`` rows of :func:`experiments.datasets.synthetic_classification` (10 features; in
chunks of ``--chunk`` rows, chunk ``i`` drawn with seed ``i``: the latent function is the same
for every seed, so the store is one i.i.d. sample, stored in random order) to a zarr store, opens
it with :func:`dask.array.from_zarr` and fits ``MiniBatchSparseGPClassifier(100,
scheduler=client)`` for ``--epochs`` epochs on

* ``--cluster local``: a ``LocalCluster`` of 2 single-threaded worker processes, 2 GB each;
* ``--cluster slurm``: ``dask_jobqueue.SLURMCluster`` (2 jobs of one core and 2 GB, queue
  ``debug``: the one-node SLURM of ``cluster/hpc/local-slurm.sh``);
* ``--cluster process``: no cluster, the batches read from the store in this process (the same
  fit: ``tests/pipeline/test_slurm.py`` compares the two).

The workers read their batches' rows from the store themselves; the client holds only the
O(M^2) state. Printed: the time of each epoch, the extrapolated time of ``--fit-epochs`` epochs,
each worker's peak memory (``VmHWM`` of the worker process, read on the worker) and the held-out
NTLL / error on 10,000 test rows of another seed.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_minibatch_cluster.py --n 10000000 --epochs 1
    python benchmarks/bench_minibatch_cluster.py --cluster slurm --n 20000 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.datasets import synthetic_classification  # noqa: E402

M = 100


def write_store(path: Path, n: int, chunk: int) -> None:
    """``X`` (n, 10) and ``y`` (n,) in chunks of ``chunk`` rows, written chunk by chunk."""
    import zarr

    if (path / "done").exists():
        return
    root = zarr.open_group(str(path), mode="w")
    X = root.create_array("X", shape=(n, 10), chunks=(chunk, 10), dtype="f8")
    y = root.create_array("y", shape=(n,), chunks=(chunk,), dtype="f8")
    for i, a in enumerate(range(0, n, chunk)):
        b = min(a + chunk, n)
        Xi, yi = synthetic_classification(b - a, seed=i)
        X[a:b], y[a:b] = Xi, yi
    (path / "done").write_text("ok")


def _worker_peak_mb() -> float:
    # self-contained (not benchmarks._common.proc_status_mb): client.run ships it to workers
    # that may not have the repository's benchmarks on their path
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def _cluster(kind: str, scratch: Path):
    if kind == "local":
        from distributed import LocalCluster

        return LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="2GB")
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(
        cores=1,
        processes=1,
        memory="2GB",
        queue="debug",
        walltime="00:30:00",
        job_name="qpinfer-minibatch",
        job_script_prologue=["export OMP_NUM_THREADS=1", "export OPENBLAS_NUM_THREADS=1"],
        local_directory=str(scratch),
        log_directory=str(scratch),  # the jobs' slurm-*.out beside the store, not in the cwd
    )
    cluster.scale(jobs=2)
    return cluster


def run(
    n: int, epochs: int, fit_epochs: int, cluster_kind: str, store: Path, chunk: int, batch: int
) -> dict:
    """Write (once) and fit; returns the measured numbers."""
    import dask.array as da
    from distributed import Client

    import qpinfer

    t0 = time.perf_counter()
    write_store(store, n, chunk)
    write_s = time.perf_counter() - t0
    X = da.from_zarr(str(store), component="X")
    y = da.from_zarr(str(store), component="y")
    Xte, yte = synthetic_classification(10_000, seed=10**6)
    kw = dict(batch_size=batch, batch_parts=2, max_epochs=epochs, random_state=0)
    kw.update(validation_fraction=0.01, verbose=True)
    if cluster_kind == "process":  # the same fit in this process, for comparison
        model = qpinfer.MiniBatchSparseGPClassifier(M, **kw)
        t0 = time.perf_counter()
        model.fit(X, y)
        fit_s, peaks = time.perf_counter() - t0, {"this process": _worker_peak_mb()}
    else:
        with _cluster(cluster_kind, store.parent) as cluster, Client(cluster) as client:
            client.wait_for_workers(2, timeout=600)
            model = qpinfer.MiniBatchSparseGPClassifier(M, scheduler=client, **kw)
            t0 = time.perf_counter()
            model.fit(X, y)
            fit_s = time.perf_counter() - t0
            peaks = client.run(_worker_peak_mb)
    p1 = np.clip(model.predict_proba(Xte)[:, 1], 1e-300, 1 - 1e-16)
    ntll = float(-np.mean(np.log(np.where(yte > 0, p1, 1 - p1))))
    out = {
        "cluster": cluster_kind,
        "n": n,
        "epochs": model.n_epochs_,
        "batch_size": batch,
        "write_s": write_s,
        "fit_s": fit_s,
        "epoch_s": fit_s / model.n_epochs_,
        "extrapolated_fit_s": fit_s / model.n_epochs_ * fit_epochs,
        "fit_epochs": fit_epochs,
        "worker_peak_mb": sorted(peaks.values()),
        "test_ntll": ntll,
        "theta": model.kernel_.theta.tolist(),
        "test_error": float(np.mean((p1 > 0.5) != (yte > 0))),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", choices=["local", "slurm", "process"], default="local")
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--fit-epochs", type=int, default=20, help="epochs the extrapolation assumes")
    ap.add_argument("--chunk", type=int, default=65_536)
    ap.add_argument("--batch", type=int, default=16_384)
    ap.add_argument("--store", type=Path, default=Path("minibatch_data.zarr"))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    out = run(a.n, a.epochs, a.fit_epochs, a.cluster, a.store, a.chunk, a.batch)
    print(json.dumps(out, indent=1))
    print(
        f"\n{a.cluster}: N = {a.n:,}, one epoch {out['epoch_s']:.0f} s, {a.fit_epochs} epochs "
        f"~{out['extrapolated_fit_s'] / 60:.1f} min; worker peaks {out['worker_peak_mb']} MB; "
        f"test NTLL {out['test_ntll']:.4f}, error {out['test_error']:.4f}"
    )
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
