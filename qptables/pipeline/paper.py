# Over 400 lines: build() validates its many arguments and _build_locked runs the life cycle below in order.
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
   (:mod:`qptables.reference.verify`; ``attrs["verification"]``). A failed verification leaves ``OUT``
   untouched and the partial store for inspection.
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

Bit-identity. The kernel's value at a point never depends on the other points of its call

The steps live in modules of their own: planning (:mod:`qptables.pipeline.plan`), locking and resuming
(:mod:`qptables.pipeline.resume`), the tile kernel (:mod:`qptables.pipeline.tiles`, with the bit-identity and
probit-mirror notes), the dask run (:mod:`qptables.pipeline.dask_run`) and publishing
(:mod:`qptables.pipeline.destination`); this module runs them in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from qpinfer.tables.replace import remove_store
from qptables.grid import GridError, GridSpec, validate_y
from qptables.pipeline.dask_run import SINGLE_THREAD_ENV as SINGLE_THREAD_ENV
from qptables.pipeline.dask_run import WORKER_WAIT_SECONDS as WORKER_WAIT_SECONDS
from qptables.pipeline.dask_run import connect_workers, open_client, run_tiles
from qptables.pipeline.destination import (
    check_destinations,
    check_writable,
    clean_stale,
    publish_build,
)
from qptables.pipeline.errors import BuildError, BuildInputError, LockError, writing
from qptables.pipeline.estimate import CONCURRENCY_FACTOR, calibrate_workers, estimate_build
from qptables.pipeline.interrupt import deferred_sigterm, stop_on_signals
from qptables.pipeline.plan import (
    check_disk_space,
    describe_plan,
    mirror_pairs,
    points_to_compute,
    resolve_grid,
)
from qptables.pipeline.resume import (
    BuildLock,
    build_record,
    create_partial,
    lock_path,
    partial_path,
    publishing_path,
    resumable_tiles,
)
from qptables.pipeline.tiles import MIRRORS as MIRRORS
from qptables.pipeline.tiles import compute_tile as compute_tile
from qptables.pipeline.tiles import evaluate_rows, mirror_rows, probe
from qptables.reference.verify import (
    DEFAULT_DPS,
    DEFAULT_SAMPLES,
    DEFAULT_TOLERANCE,
    reference_sample,
    scan_store,
)
from qptables.store import scan_tiles, update_attrs
from qptables.units import human_bytes, human_seconds

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

# names this module held before its split (imported from here by tests, scripts and
# qptables.pipeline.v2), kept: the ``X as X`` imports above and these aliases
_human_bytes = human_bytes
_human_seconds = human_seconds
_mirror_rows = mirror_rows
_client = open_client


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
    import qpinfer

    t_start = time.perf_counter()
    stream = stream if stream is not None else sys.stderr

    def say(msg: str) -> None:
        print(msg, file=stream, flush=True)

    # -- 1. validate -------------------------------------------------------------------
    if not isinstance(likelihood, str):
        raise BuildInputError(f"LIKELIHOOD: expected a name, got {likelihood!r}")
    try:
        # the canonical name identifies parameters: "step_noise" -> "step_noise(eps=0.2)"
        likelihood = qpinfer.get_likelihood(likelihood).name
    except ValueError as exc:
        raise BuildInputError(f"LIKELIHOOD: unknown likelihood {likelihood!r} ({exc})") from None
    try:
        grid = resolve_grid(likelihood, grid, y_max)
        validate_y(likelihood, grid.y)
    except GridError as exc:
        raise BuildInputError(str(exc)) from None
    if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
        raise BuildInputError(f"--workers: must be a positive integer, got {workers!r}")
    if samples < 0:
        raise BuildInputError(f"--samples: must be >= 0, got {samples!r}")
    if not (np.isfinite(tolerance) and tolerance > 0):
        raise BuildInputError(f"--tolerance: must be a positive number, got {tolerance!r}")
    if int(verify_dps) < 15:
        raise BuildInputError(f"--verify-dps: must be >= 15, got {verify_dps!r}")
    out = Path(out).expanduser().absolute()
    if out.name in ("", ".", ".."):
        raise BuildInputError(f"OUT: {out} is not a valid store name")
    partial = partial_path(out)
    check_writable(out.parent, out)
    check_destinations(out, force)
    # cheap disk check before anything allocates or computes (the precise one, which counts
    # the reusable chunks of an unfinished build, follows once the partial store is scanned)
    check_disk_space(out, grid)

    lock = BuildLock(out)
    with stop_on_signals(partial):  # SIGTERM: unwind as for Ctrl-C (qptables.pipeline.interrupt)
        lock.acquire()
        try:
            return _build_locked(
                likelihood,
                out,
                partial,
                grid,
                scheduler,
                workers,
                force,
                samples,
                tolerance,
                seed,
                verify_dps,
                progress,
                say,
                client,
                t_start,
                dry_run,
            )
        finally:
            with deferred_sigterm():
                lock.release()


def _build_locked(
    likelihood: str,
    out: Path,
    partial: Path,
    grid: GridSpec,
    scheduler: str | None,
    workers: int | None,
    force: bool,
    samples: int,
    tolerance: float,
    seed: int,
    verify_dps: int,
    progress: bool,
    say: Any,
    client: Any | None,
    t_start: float,
    dry_run: bool,
) -> BuildResult:
    import qpinfer

    # re-check under the lock (another build may have published meanwhile)
    check_destinations(out, force)

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
    done = resumable_tiles(partial, grid, info, force, dry_run, say)
    free = check_disk_space(out, grid, done)
    todo = [t for t in grid.tiles() if t not in done]
    est_points = points_to_compute(grid, todo, pairs)
    describe_plan(likelihood, out, grid, pairs, len(done), len(todo), free, say)

    if dry_run:
        n_workers = workers or os.cpu_count() or 1
        est = estimate_build(
            grid, points=est_points, tiles=len(todo), n_verify=len(grid.y) * 8 + samples,
            n_workers=n_workers, rate=rate * CONCURRENCY_FACTOR,
            source=f"(probed here x{CONCURRENCY_FACTOR}: all cores busy)",
        )  # fmt: skip
        say(f"  estimate: {est.describe()}")
        say("  dry run: nothing was created")
        return BuildResult(
            path=out,
            tiles_total=grid.n_tiles,
            tiles_computed=0,
            tiles_reused=len(done),
            points_computed=0,
            rows_mirrored=0,
            seconds=time.perf_counter() - t_start,
            compute_seconds=0.0,
            verification={},
            published=False,
        )

    # -- 6. compute: the cluster first (a scheduler that cannot be reached leaves nothing) ----
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(open_client(scheduler, workers))
        clean_stale(out, say)
        fresh = create_partial(partial, likelihood, grid, qpinfer.__version__, info)
        try:
            n_workers = connect_workers(client, partial, say)
            # calibrated on all workers at once (also warms them up); see qptables.pipeline.estimate
            n_verify = len(grid.y) * 8 + samples
            rate, mp_s = calibrate_workers(
                client, likelihood, grid, rate, points=est_points, n_verify=n_verify,
                dps=verify_dps,
            )  # fmt: skip
        except BaseException:
            if fresh:  # nothing was computed into it yet
                remove_store(partial, what="OUT (its unfinished build)")
            raise
        est = estimate_build(
            grid, points=est_points, tiles=len(todo), n_verify=n_verify, n_workers=n_workers,
            rate=rate, mpmath_seconds=mp_s,
        )  # fmt: skip
        elapsed = time.perf_counter() - t_start
        say(f"  estimate: {human_seconds(elapsed + est.total)} in all, {est.describe()}")
        t_compute = time.perf_counter()
        reports = run_tiles(client, partial, likelihood, grid, todo, pairs, progress)
        compute_seconds = time.perf_counter() - t_compute

        missing = [t for t in grid.tiles() if t not in scan_tiles(partial, grid)]
        if missing:
            raise BuildError(
                f"{len(missing)} tiles still missing after the run, e.g. {missing[0]}; re-run "
                f"to resume"
            )

        # -- 7. checksums + verification ----------------------------------------------------
        say(f"  computed {len(todo)} tiles, reused {len(done)}; checksumming and verifying ...")
        report = _verify_partial(partial, samples, tolerance, seed, verify_dps, client, progress)
        result = BuildResult(
            path=out,
            tiles_total=grid.n_tiles,
            tiles_computed=len(todo),
            tiles_reused=len(done),
            points_computed=sum(r["points_computed"] for r in reports),
            rows_mirrored=sum(r["rows_mirrored"] for r in reports),
            seconds=0.0,
            compute_seconds=compute_seconds,
            verification=report,
            published=False,
        )
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
        publishing = publishing_path(out)
        say(f"  publishing: one chunk per (variable, y) into {publishing.name} ...")
        publish_build(partial, out, force, client)  # while the workers are still there
        result.published = True
    result.seconds = time.perf_counter() - t_start
    say(
        f"  published {out} in {human_seconds(result.seconds)} (estimated "
        f"{human_seconds(elapsed + est.total)}; tiles {human_seconds(compute_seconds)})"
    )
    return result


def _verify_partial(
    partial: Path,
    samples: int,
    tolerance: float,
    seed: int,
    dps: int,
    client: Any,
    progress: bool,
) -> dict[str, Any]:
    """Checksum every chunk of ``partial`` and check it against mpmath; the report is written
    to its attributes (the partial store never says complete) and returned."""
    scan = scan_store(partial, client=client, check_checksums=False)
    checksums = scan.pop("checksums")
    with writing("writing the checksums to", partial):
        update_attrs(partial, consolidate=False, checksums=checksums)
    ref = reference_sample(
        partial,
        samples=samples,
        tolerance=tolerance,
        seed=seed,
        dps=dps,
        client=client,
        progress=progress,
    )
    report = dict(ref)
    report["reference_passed"] = ref["passed"]
    report["scan"] = scan
    report["passed"] = bool(ref["passed"] and scan["passed"])
    report["checked"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with writing("writing the verification report to", partial):
        update_attrs(partial, verification=report)
    return report
