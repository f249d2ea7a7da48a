#!/usr/bin/env python
"""Run ``qptables build`` on a SLURM or PBS cluster through dask-jobqueue.

Run this on a login node (it starts the dask scheduler there; the batch jobs' workers connect
back to it), from the project's environment installed on a file system the compute nodes see:

    pip install 'quantile-propagation[jobqueue]'
    python cluster/hpc/qptables_jobqueue.py --system slurm --jobs 4 --cores 32 --memory 64GB \\
        --walltime 02:00:00 --queue normal --account myproject \\
        -- probit /scratch/$USER/tables/probit-paper.zarr --grid paper

Everything after ``--`` is passed to ``qptables build`` (likelihood, OUT, grid flags); the
script adds ``--scheduler ADDRESS`` and runs ``python -m qptables.cli.commands build ...`` -- the
same code path as every other recipe in cluster/. Each batch job runs ``--cores`` single-threaded
worker processes (``--nthreads 1``, ``OMP_NUM_THREADS=1``). OUT must be on a shared file system.
When the build ends (or fails, or is interrupted) the jobs are cancelled; re-running the same
command resumes an unfinished build from ``OUT.partial``.

While the build runs, the launcher logs every batch job it submits (job id, and the job's
``squeue``/``qstat`` line) and every ``--requeue-interval`` seconds re-submits the jobs that have
ended (walltime, preemption, ``scancel``): the build's lost tiles are recomputed by the other
workers meanwhile. SIGTERM/SIGINT (e.g. ``scancel`` of a launcher running as a batch job) stop the
build and cancel the jobs; nothing is published half-way and the same command resumes.

``--print-job-script`` prints the batch script and the build command and submits nothing.
Exit status: the build's (0 published, 1 failed -- resumable, 2 refused), 3 no worker started,
143/130 terminated by SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import threading
import time

SINGLE_THREAD = [
    "export OMP_NUM_THREADS=1",
    "export MKL_NUM_THREADS=1",
    "export OPENBLAS_NUM_THREADS=1",
    "export NUMEXPR_NUM_THREADS=1",
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Everything after -- goes to `qptables build` (see qptables build --help).",
    )
    p.add_argument("--system", choices=["slurm", "pbs"], default="slurm")
    p.add_argument("--jobs", type=int, default=2, help="batch jobs to submit (default 2)")
    p.add_argument(
        "--cores", type=int, default=8, help="cores per job = worker processes per job (default 8)"
    )
    p.add_argument("--memory", default="16GB", help="memory per job (default 16GB)")
    p.add_argument("--walltime", default="02:00:00", help="per job (default 02:00:00)")
    p.add_argument("--queue", help="partition (SLURM) or queue (PBS)")
    p.add_argument("--account", help="account / project to charge")
    p.add_argument(
        "--interface",
        help="network interface the workers reach the scheduler on "
        "(e.g. ib0); default: the login node's hostname",
    )
    p.add_argument("--local-directory", help="node-local scratch for worker spill files")
    p.add_argument(
        "--job-directive",
        action="append",
        default=[],
        metavar="LINE",
        help="extra #SBATCH/#PBS option, e.g. --job-directive=--constraint=cpu (repeatable)",
    )
    p.add_argument(
        "--prologue",
        action="append",
        default=[],
        metavar="LINE",
        help="shell line run before the workers start, e.g. 'module load python' (repeatable)",
    )
    p.add_argument(
        "--worker-wait",
        type=float,
        default=3600,
        help="seconds to wait for the first worker (queue time; default 3600)",
    )
    p.add_argument(
        "--requeue-interval",
        type=float,
        default=30.0,
        help="seconds between checks that re-submit ended jobs (default 30; 0: never)",
    )
    p.add_argument(
        "--print-job-script",
        action="store_true",
        help="print the batch script and the build command, submit nothing",
    )
    p.add_argument(
        "build_args", nargs=argparse.REMAINDER, help="-- LIKELIHOOD OUT [qptables build flags]"
    )
    return p


def make_cluster(args: argparse.Namespace):
    """The dask-jobqueue cluster object (starts the scheduler; submits nothing yet)."""
    try:
        from dask_jobqueue import PBSCluster, SLURMCluster
    except ImportError:
        sys.exit("this launcher needs dask-jobqueue: pip install 'quantile-propagation[jobqueue]'")
    cls = SLURMCluster if args.system == "slurm" else PBSCluster
    kwargs = {
        "cores": args.cores,
        "processes": args.cores,  # one single-threaded worker process per core
        "memory": args.memory,
        "walltime": args.walltime,
        "job_name": "qptables-worker",
        "job_script_prologue": SINGLE_THREAD + list(args.prologue),
        "job_extra_directives": list(args.job_directive),
        "scheduler_options": {"dashboard_address": ":8787"},
    }
    if args.queue:
        kwargs["queue"] = args.queue
    if args.account:
        kwargs["account"] = args.account
    if args.interface:
        kwargs["interface"] = args.interface
    if args.local_directory:
        kwargs["local_directory"] = args.local_directory
    return cls(**kwargs)


def build_command(build_args: list[str], address: str) -> list[str]:
    """``python -m qptables.cli.commands build ARGS --scheduler ADDRESS`` (the cluster/ code
    path)."""
    if "--scheduler" in build_args:
        sys.exit("do not pass --scheduler: this script starts the scheduler")
    return [
        sys.executable,
        "-m",
        "qptables.cli.commands",
        "build",
        *build_args,
        "--scheduler",
        address,
    ]


def job_ids(cluster) -> list[str]:
    """Batch job ids of the cluster's current jobs (those submitted so far)."""
    return [str(j.job_id) for j in list(cluster.workers.values()) if getattr(j, "job_id", None)]


def queue_lines(system: str, ids: list[str]) -> list[str]:
    """The batch system's status lines (``squeue``/``qstat``) of jobs ``ids``; [] if unavailable."""
    if not ids:
        return []
    if system == "slurm":
        cmd = ["squeue", "--noheader", "-o", "%i %j %T %M %R", "-j", ",".join(ids)]
    else:
        cmd = ["qstat", *ids]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in p.stdout.splitlines() if line.strip()]


def log_jobs(system: str, cluster, seen: set[str]) -> None:
    """Print newly submitted job ids and the queue's lines for all current jobs to stderr."""
    ids = job_ids(cluster)
    new = [i for i in ids if i not in seen]
    if new:
        print(f"submitted {system} jobs: {' '.join(new)}", file=sys.stderr, flush=True)
        seen.update(new)
    for line in queue_lines(system, ids):
        print(f"  queue: {line}", file=sys.stderr, flush=True)


def _keep_jobs(cluster, args: argparse.Namespace, stop: threading.Event) -> None:
    """Every ``--requeue-interval`` s: re-submit ended jobs (``scale`` back to ``--jobs``) and
    log any new job ids with their queue lines."""
    seen = set(job_ids(cluster))
    while not stop.wait(args.requeue_interval):
        try:
            cluster.scale(jobs=args.jobs)
            ids = set(job_ids(cluster))
            if ids - seen:
                log_jobs(args.system, cluster, seen)
        except Exception as exc:  # noqa: BLE001 - keep the build running; say why
            print(f"requeue check failed: {exc!r}", file=sys.stderr, flush=True)


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.jobs < 1:
        parser().error(f"--jobs: must be >= 1, got {args.jobs}")
    if args.cores < 1:
        parser().error(f"--cores: must be >= 1, got {args.cores}")
    if args.requeue_interval < 0:
        parser().error(f"--requeue-interval: must be >= 0, got {args.requeue_interval}")
    build_args = list(args.build_args)
    if build_args[:1] == ["--"]:
        build_args = build_args[1:]
    if len(build_args) < 2:
        parser().error("give the build's arguments after --: -- LIKELIHOOD OUT [flags]")
    # SIGTERM (scancel, kill) runs the finally clauses below: the build is stopped, the jobs
    # are cancelled, and the unfinished build stays resumable
    signal.signal(signal.SIGTERM, _terminate)
    cluster = make_cluster(args)
    build = None
    stop = threading.Event()
    try:
        cmd = build_command(build_args, cluster.scheduler_address)
        if args.print_job_script:
            print(cluster.job_script())
            print("# build command:")
            print(shlex.join(cmd))
            return 0
        print(cluster.job_script(), file=sys.stderr)
        print(
            f"scheduler {cluster.scheduler_address}, dashboard {cluster.dashboard_link}",
            file=sys.stderr,
        )
        cluster.scale(jobs=args.jobs)
        from distributed import Client

        with Client(cluster) as client:
            t0 = time.monotonic()
            try:
                client.wait_for_workers(1, timeout=args.worker_wait)
            except TimeoutError:
                print(
                    f"no worker connected within {args.worker_wait:.0f} s (jobs still queued?)",
                    file=sys.stderr,
                )
                return 3
            print(
                f"first worker after {time.monotonic() - t0:.0f} s; running {shlex.join(cmd)}",
                file=sys.stderr,
            )
            log_jobs(args.system, cluster, set())
            if args.requeue_interval > 0:
                threading.Thread(target=_keep_jobs, args=(cluster, args, stop), daemon=True).start()
            build = subprocess.Popen(cmd)
            return build.wait()
    finally:
        stop.set()
        if build is not None and build.poll() is None:
            build.terminate()  # the build's own handlers leave OUT.partial resumable
            try:
                build.wait(timeout=60)
            except subprocess.TimeoutExpired:
                build.kill()
        cluster.close()  # cancels the batch jobs


if __name__ == "__main__":
    sys.exit(main())
