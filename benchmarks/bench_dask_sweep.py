"""The sparse EP/QP sweep on dask: time per sweep with 1 vs 2 worker processes, and in-process
(issue #17 target: >= 1.7x from 1 to 2 workers on a sweep-bound problem).

A sweep-bound problem: synthetic N x D inputs (default N = 2e5, D = 10), M inducing inputs (k-means
of a subsample), fixed hyperparameters, a fixed number of parallel sweeps (``tol`` below reach).
Per sweep is the median of the wall-clock times the sweep loop records
(:attr:`~qpinfer.inference.site_loop.SiteResult.sweep_seconds`, the first sweep left out: it
includes the first site sums) in an S-sweep run, the best of ``--repeats``; the once-per-run work
(sending the data, ``A_p = Lu^-1 K(Z, X_p)``, gathering the sites) is outside it. (The difference of
an S-sweep and a 1-sweep run, used before, carried that once-per-run work's noise: 0.3-0.6 s at N =
2e5.) Three engines, interleaved in every repeat (a shared machine's load hits all three alike; each
dask cluster is started for its run and closed after it):

* ``in-process``: :func:`qpinfer.sparse.run_sparse_pep` (``A`` computed in this process);
* ``dask 1 worker`` / ``dask 2 workers``:
  :func:`qpinfer.inference.sparse.dask_sweep.run_sparse_pep_dask` on the cluster
  ``scheduler="local"`` starts (:func:`qpinfer.inference.sparse.dask_partitions.local_client`) with
  k single-threaded worker processes (one partition per worker; ``OPENBLAS_NUM_THREADS=1`` and
  ``OMP_NUM_THREADS=1`` in the workers, checked).

The machine should be otherwise idle: the wall clock is what is measured (an earlier CPU-time
column, from the same S-sweep minus 1-sweep difference, carried the same once-per-run noise and
gave impossible splits above 2x; it was dropped).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_dask_sweep.py [--n 200000] [--m 100]
        [--sweeps 10] [--repeats 3] [--method qp|ep] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import warnings

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy: this process and the worker processes it spawns

import numpy as np  # noqa: E402

from qpinfer.inference.projections import MomentMatching, QuantileMatching  # noqa: E402
from qpinfer.inference.site_loop import ConvergenceWarning  # noqa: E402
from qpinfer.inference.sparse.dask_partitions import local_client  # noqa: E402
from qpinfer.inference.sparse.dask_sweep import run_sparse_pep_dask  # noqa: E402
from qpinfer.inference.sparse.pseudo_points import kmeans_inducing_points, pseudo_point_prior  # noqa: E402
from qpinfer.inference.sparse.sites import run_sparse_pep  # noqa: E402
from qpinfer.kernels import ARDSquaredExponential  # noqa: E402
from qpinfer.likelihoods.probit import Probit  # noqa: E402
from qpinfer.tables.shipped import open_shipped  # noqa: E402


def synthetic(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``N(0, I)``; labels the sign of a smooth function plus noise (probit: -1/+1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] - 0.3 * X[:, 3] + 0.4 * rng.normal(size=n)
    return X, np.where(f > 0, 1.0, -1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--method", choices=("qp", "ep"), default="qp")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    if args.sweeps < 3:
        ap.error(f"--sweeps must be at least 3 (the first sweep is left out), got {args.sweeps}")

    X, y = synthetic(args.n, args.d, args.seed)
    Z = kmeans_inducing_points(X[:: max(1, args.n // 20_000)], args.m, args.seed)
    kern = ARDSquaredExponential(2.0, np.full(args.d, np.sqrt(args.d)))
    lik = Probit()
    proj = (
        QuantileMatching(lik, open_shipped("probit"))
        if args.method == "qp"
        else MomentMatching(lik)
    )
    run_opts = {"tol": 1e-300, "damping": 0.5}  # never converges: exactly max_iter sweeps

    def in_process(sweeps):
        prior = pseudo_point_prior(kern, X, Z)
        return run_sparse_pep(prior.A, prior.h, y, proj, max_iter=sweeps, **run_opts)

    def on(client):
        return lambda sweeps: run_sparse_pep_dask(
            kern, X, y, Z, proj, scheduler=client, max_iter=sweeps, **run_opts
        )[0]

    @contextlib.contextmanager
    def engine(name):
        """The engine. A dask engine's cluster
        (:func:`qpinfer.inference.sparse.dask_partitions.local_client`, as ``scheduler="local"``
        makes it) lives only while it runs: an idle cluster's processes (heartbeats, monitors) took
        ~5% of the cores from the running one."""
        if name == "in-process":
            yield in_process
            return
        with local_client(int(name.split()[1])) as client:
            worker_env[len(client.scheduler_info()["workers"])] = client.run(
                lambda: (os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_NUM_THREADS"))
            )
            yield on(client)

    load_before = os.getloadavg()
    worker_env: dict[int, dict] = {}
    engines = ("in-process", "dask 1 worker", "dask 2 workers")
    loop_seconds: dict[str, list[float]] = {e: [] for e in engines}
    results = {}
    for rep in range(args.repeats):
        for name in engines:
            with engine(name) as run, warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = run(args.sweeps)
            results[name] = res
            loop_seconds[name].append(float(np.median(res.sweep_seconds[1:])))
        print(f"repeat {rep + 1}: " + ", ".join(
            f"{k} {loop_seconds[k][-1]:.3f} s/sweep" for k in engines
        ), f"(load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip

    per_sweep = {k: min(v) for k, v in loop_seconds.items()}
    ref = results["in-process"]
    max_diff = {
        k: float(max(np.max(np.abs(r.tau - ref.tau)), np.max(np.abs(r.nu - ref.nu))))
        for k, r in results.items()
    }
    scaling = per_sweep["dask 1 worker"] / per_sweep["dask 2 workers"]
    print(f"\nN = {args.n}, D = {args.d}, M = {args.m}, {args.method}, {args.sweeps} sweeps, "
          f"best of {args.repeats}; load average before {load_before[0]:.2f}, "
          f"after {os.getloadavg()[0]:.2f}; worker (OPENBLAS, OMP) threads {worker_env}")  # fmt: skip
    print(f"{'engine':16s} {'s/sweep':>8s} {'vs in-process':>14s} {'max |site diff|':>16s}")
    for k, t in per_sweep.items():
        print(f"{k:16s} {t:8.3f} {per_sweep['in-process'] / t:13.2f}x {max_diff[k]:16.2e}")
    print(f"scaling 1 -> 2 workers: {scaling:.2f}x wall clock per sweep (target >= 1.7x)")
    if args.json:
        out = {
            "args": vars(args),
            "seconds_per_sweep": per_sweep,
            "scaling_1_to_2_workers": scaling,
            "median_sweep_seconds_per_repeat": loop_seconds,
            "max_abs_site_diff_vs_in_process": max_diff,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "cpu_count": os.cpu_count(),
            "worker_threads_env": {str(k): v for k, v in worker_env.items()},
        }
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
