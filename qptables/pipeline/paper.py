"""Build a verified sigma* table store with dask (``qptables build``).

The build is a graph of pure tasks, one per *tile* (one zarr chunk of shape
``(1, tile_mu, n_log10_sigma)``, see :mod:`qptables.grid`). Each task evaluates qpinfer's
vectorized kernel -- :func:`qpinfer.sigma_qp` (sigma*, paper 000 eq. (7)) and
:func:`qpinfer.tilted_moments` (EP's sigma, eq. (5)) -- on its tile and the *worker* writes the
tile straight into the store (a zarr region write of exactly one chunk per variable). The
client only ever holds tiny per-tile reports, never grid data.

Life cycle of ``build(likelihood, OUT, grid)``:

1. Validate everything up front (likelihood, labels, grid, destination writable, free disk
   space, ``OUT`` absent unless ``force``; with ``force`` it, and ``OUT.partial`` and
   ``OUT.publishing`` always, must be a table store of this package -- a plain file, a
   directory that is not a store or a symlink is never replaced, see :mod:`qpinfer.tables.replace`)
   -- a refused build changes nothing and starts no cluster.
2. Take the lock ``OUT.lock`` (``O_EXCL``; holds pid and host). A concurrent build into the
   same ``OUT`` is refused; a lock left by a dead process on this host is taken over.
3. Start the cluster or connect to the scheduler (a deadline covering the dask handshake,
   :func:`qptables.pipeline.dask_run.probe_scheduler`), then create -- or, when resuming, reopen --
   the temporary store ``OUT.partial``. Resuming requires the same likelihood, grid, tiling
   and kernel output (a fingerprint of a probe tile); anything else is an error unless
   ``force`` (which starts afresh). A new ``OUT.partial`` is deleted again if the workers
   fail before any tile is computed.
4. Find the finished tiles (chunk files present with the exact uncompressed size; see
   :mod:`qptables.store`) and compute only the others, with a progress bar.
5. Checksum every chunk (``attrs["checksums"]``) and verify against mpmath
   (:mod:`qptables.reference.verify`; ``attrs["verification"]``). A failed verification leaves
   ``OUT`` untouched and the partial store for inspection.
6. Publish by *copy*: write the published layout -- ONE chunk per ``(variable, y)``, chunks
   ``(1, n_mu, n_log10_sigma)``, which the reader looks up much faster than many small tiles
   -- into the sibling ``OUT.publishing`` (one dask task per ``(variable, y)``, see
   :func:`qptables.store.consolidate_store`; each tile is re-checked against its sha256 and
   each new chunk hashed), with fresh checksums and ``attrs["complete"] = True`` written last;
   then atomically rename ``OUT.publishing`` to ``OUT`` and delete ``OUT.partial``. With
   ``force`` an existing ``OUT`` store is swapped out atomically
   (:func:`qpinfer.tables.replace.replace_store`) and deleted only after the new store is in place.
   The published store records the metadata digest ``attrs["integrity"]``
   (:mod:`qpinfer.tables.integrity`). An interrupted publish leaves no ``OUT`` (only ``OUT.partial``
   and a stale ``OUT.publishing``, which the next run deletes and redoes from the verified
   tiles).

SIGTERM and Ctrl-C unwind the build (:mod:`qptables.pipeline.interrupt`): the lock is released, an
unfinished ``OUT.publishing`` deleted, ``OUT.partial`` (never marked complete) kept, and the
error says where. A failed write (a full disk) names its phase and path
(:func:`qptables.pipeline.errors.writing`).

Bit-identity. The kernel's value at a point never depends on the other points of its call, so
tiling, worker count, resuming and the probit mirror cannot change a single bit.

The steps live in modules of their own: planning (:mod:`qptables.pipeline.plan`), locking and
resuming (:mod:`qptables.pipeline.resume`), the tile kernel (:mod:`qptables.pipeline.tiles`, with
the bit-identity and probit-mirror notes), the dask run (:mod:`qptables.pipeline.dask_run`) and
publishing (:mod:`qptables.pipeline.destination`); this module runs them in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from qpinfer.tables.replace import remove_store
from qptables.grid import GridSpec
from qptables.pipeline.dask_run import SINGLE_THREAD_ENV as SINGLE_THREAD_ENV
from qptables.pipeline.dask_run import WORKER_WAIT_SECONDS as WORKER_WAIT_SECONDS
from qptables.pipeline.dask_run import connect_workers, open_client, run_tiles
from qptables.pipeline.destination import (
    check_destinations,
    check_writable,
    clean_stale,
    publish_build,
)
from qptables.pipeline.dry_run import check_unlocked_readonly
from qptables.pipeline.errors import BuildError, BuildInputError, LockError, writing
from qptables.pipeline.estimate import CONCURRENCY_FACTOR, calibrate_workers, estimate_build
from qptables.pipeline.plan import (
    check_disk_space,
    check_inputs,
    describe_plan,
    mirror_pairs,
    points_to_compute,
)
from qptables.pipeline.resume import (
    BuildLock,
    build_record,
    create_partial,
    lock_path,
    locked,
    partial_path,
    publishing_path,
    resumable_tiles,
)
from qptables.pipeline.tiles import MIRRORS as MIRRORS
from qptables.pipeline.tiles import compute_tile as compute_tile
from qptables.pipeline.tiles import evaluate_rows, probe
from qptables.pipeline.tiles import mirror_rows as _mirror_rows  # noqa: F401 - tests import it
from qptables.reference.verify import (
    DEFAULT_DPS,
    DEFAULT_SAMPLES,
    DEFAULT_TOLERANCE,
    reference_sample,
    scan_store,
    verification_report,
)
from qptables.store import StoreHeader, create_store, read_attrs, scan_tiles, update_attrs
from qptables.units import human_seconds

__all__ = [
    "BuildError",
    "BuildInputError",
    "BuildLock",
    "BuildResult",
    "LockError",
    "build",
    "evaluate_rows",
    "lock_path",
    "partial_path",
    "publishing_path",
]


@dataclasses.dataclass
class BuildResult:
    """What :func:`build` did."""

    path: Path
    tiles_total: int
    tiles_computed: int
    tiles_reused: int
    points_computed: int
    rows_mirrored: int
    seconds: float
    compute_seconds: float
    verification: dict[str, Any]
    published: bool


@dataclasses.dataclass
class _Build:
    """One build's validated settings, handed from :func:`build` to its steps."""

    likelihood: str
    out: Path
    grid: GridSpec
    scheduler: str | None
    workers: int | None
    force: bool
    checks: dict[str, Any]  # samples, tolerance, seed, dps: options of reference_sample
    progress: bool
    say: Callable[[str], None]
    client: Any | None
    dry_run: bool
    t_start: float

    @property
    def partial(self) -> Path:
        return partial_path(self.out)

    def result(self, **counts: Any) -> BuildResult:
        """The :class:`BuildResult` of this build (timed to now) with ``counts``."""
        counts = {"compute_seconds": 0.0, "verification": {}, "published": False, **counts}
        seconds = time.perf_counter() - self.t_start
        return BuildResult(self.out, self.grid.n_tiles, seconds=seconds, **counts)


# ----------------------------------------------------------------------------- build


def build(
    likelihood: str,
    out: str | os.PathLike,
    grid: GridSpec | str | None = "paper",
    scheduler: str | None = None,
    *,
    workers: int | None = None,
    force: bool = False,
    y_max: int | None = None,
    samples: int = DEFAULT_SAMPLES,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    verify_dps: int = DEFAULT_DPS,
    progress: bool = True,
    stream: TextIO | None = None,
    client: Any | None = None,
    dry_run: bool = False,
) -> BuildResult:
    """Build, verify and publish the sigma* table of ``likelihood`` on ``grid`` at ``out``.

    Parameters
    ----------
    likelihood:
        ``"probit"`` or ``"poisson_square"`` (anything :func:`qpinfer.get_likelihood` knows).
    out:
        Destination directory of the zarr store; built in ``OUT.partial``, locked by
        ``OUT.lock``.
    grid:
        A :class:`~qptables.grid.GridSpec` or ``"paper"`` (App. J grid; ``y_max`` sets the
        Poisson labels).
    scheduler:
        Address of an existing dask-distributed scheduler (workers must see ``out`` on a shared
        file system); ``None`` starts a ``LocalCluster`` of ``workers`` single-threaded worker
        processes (default: one per CPU).
    force:
        Replace an existing ``OUT`` (only once the new store is complete and verified) and
        discard an incompatible ``OUT.partial`` -- only if they are table stores of this
        package (complete or unfinished); anything else is refused before any work.
    samples, tolerance, seed, verify_dps:
        Verification: random points checked against mpmath (besides corners and edge
        midpoints), the largest accepted relative error, the sampling seed and the mpmath
        working precision in decimal digits.
    progress, stream:
        Show a tqdm progress bar; where to print the pre-build summary (default stderr).
    client:
        An existing ``distributed.Client`` to use instead of ``scheduler``/``workers``.
    dry_run:
        Validate, probe the kernel and print the plan and estimate, then stop before creating
        anything (no cluster is started).

    Returns
    -------
    BuildResult
        Counts of computed and reused tiles, timings and the verification report.

    Raises
    ------
    BuildInputError
        Refused before doing anything (bad input, ``OUT`` exists, ``OUT`` is not a table store
        with ``force``, lock held, no disk space, a grid the kernel refuses).
    BuildError
        Failed while running (a failed write names its phase and path); ``OUT`` is untouched
        and re-running resumes.
    qptables.pipeline.errors.BuildInterrupted
        SIGTERM or Ctrl-C (a ``KeyboardInterrupt``): the lock released, the message says where
        the finished tiles are kept.
    """
    t_start = time.perf_counter()
    stream = stream if stream is not None else sys.stderr

    def say(msg: str) -> None:
        print(msg, file=stream, flush=True)

    # -- 1. validate -------------------------------------------------------------------
    likelihood, out, grid = check_inputs(
        likelihood, out, grid, y_max, workers=workers, samples=samples, tolerance=tolerance,
        verify_dps=verify_dps,
    )  # fmt: skip
    (check_unlocked_readonly if dry_run else check_writable)(out.parent, out)  # dry: no writes
    check_destinations(out, force)
    # cheap disk check before anything allocates or computes (the precise one, which counts
    # the reusable chunks of an unfinished build, follows once the partial store is scanned)
    check_disk_space(out, grid)
    checks = {"samples": samples, "tolerance": tolerance, "seed": seed, "dps": verify_dps}
    job = _Build(
        likelihood, out, grid, scheduler, workers, force, checks, progress, say, client, dry_run,
        t_start,
    )  # fmt: skip
    with contextlib.nullcontext() if dry_run else locked(out):  # SIGTERM: unwinds as Ctrl-C
        return _build_locked(job)


def _build_locked(job: _Build) -> BuildResult:
    import qpinfer

    likelihood, out, partial, grid, say = job.likelihood, job.out, job.partial, job.grid, job.say
    # re-check under the lock (another build may have published meanwhile)
    check_destinations(out, job.force)

    # -- 2. probe the kernel ---------------------------------------------------------------
    pairs = mirror_pairs(likelihood, grid)
    try:
        fingerprint, rate, mirror_ok = probe(likelihood, grid, bool(pairs))
    except ValueError as exc:  # the kernel refuses part of the grid
        raise BuildInputError(f"grid (--mu/--log10-sigma/--y): {exc}") from None
    if pairs and not mirror_ok:
        warnings.warn(
            "the kernel's probit mirror symmetry is not bit-exact; computing both labels",
            stacklevel=2,
        )
        pairs = {}
    info = build_record(likelihood, grid, fingerprint, bool(pairs))

    # -- 3. reuse or (re)create the partial store; 4. disk space; 5. plan --------------------
    done = resumable_tiles(partial, grid, info, job.force, job.dry_run, say)
    free = check_disk_space(out, grid, done)
    todo = [t for t in grid.tiles() if t not in done]
    est_points = points_to_compute(grid, todo, pairs)
    describe_plan(likelihood, out, grid, pairs, len(done), len(todo), free, say)
    n_verify = len(grid.y) * 8 + job.checks["samples"]

    if job.dry_run:
        est = estimate_build(
            grid, points=est_points, tiles=len(todo), n_verify=n_verify,
            n_workers=job.workers or os.cpu_count() or 1, rate=rate * CONCURRENCY_FACTOR,
            source=f"(probed here x{CONCURRENCY_FACTOR}: all cores busy)",
        )  # fmt: skip
        say(f"  estimate: {est.describe()}")
        say("  dry run: nothing was created")
        return job.result(tiles_computed=0, tiles_reused=len(done), points_computed=0,
                          rows_mirrored=0)  # fmt: skip

    # -- 6. compute: the cluster first (a scheduler that cannot be reached leaves nothing) ----
    with contextlib.ExitStack() as stack:
        client = job.client
        if client is None:
            client = stack.enter_context(open_client(job.scheduler, job.workers))
        clean_stale(out, say)
        fresh = create_partial(
            partial,
            lambda path: create_store(
                path, likelihood, grid, package_version=qpinfer.__version__, build_info=info
            ),
        )
        try:
            n_workers = connect_workers(client, partial, say)
            # calibrated on all workers at once (also warms them up); see qptables.pipeline.estimate
            rate, mp_s = calibrate_workers(
                client, likelihood, grid, rate, points=est_points, n_verify=n_verify,
                dps=job.checks["dps"],
            )  # fmt: skip
        except BaseException:
            if fresh:  # nothing was computed into it yet
                remove_store(partial, what="OUT (its unfinished build)")
            raise
        est = estimate_build(
            grid, points=est_points, tiles=len(todo), n_verify=n_verify, n_workers=n_workers,
            rate=rate, mpmath_seconds=mp_s,
        )  # fmt: skip
        elapsed = time.perf_counter() - job.t_start
        say(f"  estimate: {human_seconds(elapsed + est.total)} in all, {est.describe()}")
        t_compute = time.perf_counter()
        reports = run_tiles(client, partial, likelihood, grid, todo, pairs, job.progress)
        compute_seconds = time.perf_counter() - t_compute

        finished = scan_tiles(partial, grid)
        missing = [t for t in grid.tiles() if t not in finished]
        if missing:
            raise BuildError(
                f"{len(missing)} tiles still missing after the run, e.g. {missing[0]}; re-run "
                f"to resume"
            )

        # -- 7. checksums + verification ----------------------------------------------------
        say(f"  computed {len(todo)} tiles, reused {len(done)}; checksumming and verifying ...")
        report, header = _verify_partial(job, client)
        tolerance = job.checks["tolerance"]
        if not report["passed"]:
            raise BuildError(
                f"verification failed, not published (kept in {partial}): "
                f"max relative error {report['max_rel_error']:.3g} vs tolerance {tolerance:g}"
                f"{'' if report['scan']['passed'] else '; ' + report['scan']['message']}"
                + (f"; worst point {report['worst']}" if "worst" in report else "")
            )
        say(
            f"  verified: {report['points']} mpmath points, max rel error "
            f"{report['max_rel_error']:.2e} (tolerance {tolerance:g})"
        )

        # -- 8. publish: a one-chunk-per-(variable, y) copy, renamed into place ------------------
        say(f"  publishing: one chunk per (variable, y) into {publishing_path(out).name} ...")
        publish_build(partial, out, job.force, client, header)  # while the workers are there
    result = job.result(
        tiles_computed=len(todo),
        tiles_reused=len(done),
        points_computed=sum(r["points_computed"] for r in reports),
        rows_mirrored=sum(r["rows_mirrored"] for r in reports),
        compute_seconds=compute_seconds,
        verification=report,
        published=True,
    )
    say(
        f"  published {out} in {human_seconds(result.seconds)} (estimated "
        f"{human_seconds(elapsed + est.total)}; tiles {human_seconds(compute_seconds)})"
    )
    return result


def _verify_partial(job: _Build, client: Any) -> tuple[dict[str, Any], StoreHeader]:
    """Checksum every chunk of the build store and check it against mpmath; the report is
    written to its attributes (the store never says complete) and returned with the store's
    header (its attributes read once here, and as updated since)."""
    partial = job.partial
    header = StoreHeader(read_attrs(partial), job.grid)
    scan = scan_store(partial, client=client, check_checksums=False, header=header)
    with writing("writing the checksums to", partial):
        attrs = update_attrs(partial, consolidate=False, checksums=scan.pop("checksums"))
    header = header._replace(attrs=attrs)
    ref = reference_sample(
        partial, client=client, progress=job.progress, header=header, **job.checks
    )
    report = verification_report(ref, scan)
    with writing("writing the verification report to", partial):
        header = header._replace(attrs=update_attrs(partial, verification=report))
    return report, header
