"""Build a verified sigma* table store with dask (``qptables build``): the one build of every
table layout (:mod:`qptables.pipeline.layouts`) -- the App. J grid (``grid="paper"`` or a
:class:`~qptables.grid.GridSpec`, :mod:`qptables.pipeline.grid_layout`) and the reduced-coordinate
cells qpinfer ships (``grid="cells"``, :mod:`qptables.pipeline.cells_layout`).

The build is a graph of pure tasks, one per *tile* (one zarr chunk); each task evaluates
qpinfer's vectorized kernel on its tile and the *worker* writes the tile straight into the store.
The client only ever holds tiny per-tile reports, never table data.

Life cycle of ``build(likelihood, OUT, grid)``:

1. Validate everything up front (likelihood, labels, grid, destination writable, free disk
   space, ``OUT`` absent unless ``force``; with ``force`` it, and ``OUT.partial`` and
   ``OUT.publishing`` always, must be a table store of this package -- a plain file, a
   directory that is not a store or a symlink is never replaced, see :mod:`qpinfer.tables.replace`)
   -- a refused build changes nothing and starts no cluster.
2. Take the lock ``OUT.lock`` (``O_EXCL``; holds pid and host). A concurrent build into the
   same ``OUT`` is refused; a lock left by a dead process on this host is taken over.
3. Probe (the grid: a fingerprint of the kernel's output on a few rows) and reuse an unfinished
   ``OUT.partial`` if its resume record matches this build's
   (:func:`qptables.pipeline.resume.build_record`); anything else is an error unless ``force``
   (which starts afresh). Print the plan.
4. Start the cluster or connect to the scheduler, then create the partial store if there is
   none (a new one is deleted again if the workers fail before any tile is computed), estimate
   the time on the workers, and compute the tiles not yet finished (chunk files present with
   the exact uncompressed size; see :mod:`qptables.store`) with a progress bar
   (:func:`qptables.pipeline.dask_run.run_tiles`).
5. Check the store as its layout does (the grid: checksums and mpmath; the cells: the exact
   kernel and mpmath) and record the report. A failed check leaves ``OUT`` untouched and the
   partial store for inspection.
6. Publish atomically (the grid: a one-chunk-per-(variable, y) copy renamed into place; the
   cells: the store itself, completed and renamed). With ``force`` an existing ``OUT`` store is
   swapped out (:func:`qpinfer.tables.replace.replace_store`) and deleted only after the new
   store is in place.

SIGTERM and Ctrl-C unwind the build (:mod:`qptables.pipeline.interrupt`): the lock is released, an
unfinished ``OUT.publishing`` deleted, ``OUT.partial`` (never marked complete) kept, and the
error says where. A failed write (a full disk) names its phase and path
(:func:`qptables.pipeline.errors.writing`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from qpinfer.tables.replace import remove_store
from qptables.grid import GridSpec
from qptables.pipeline.dask_run import connect_workers, open_client, run_tiles
from qptables.pipeline.destination import check_destinations, check_writable, clean_stale
from qptables.pipeline.dry_run import check_unlocked_readonly
from qptables.pipeline.errors import BuildError, BuildInputError, LockError
from qptables.pipeline.layouts import Layout
from qptables.pipeline.plan import check_inputs
from qptables.pipeline.resume import create_partial, locked, partial_path, resumable
from qptables.reference.verify import DEFAULT_SAMPLES
from qptables.units import human_seconds

__all__ = ["BuildError", "BuildInputError", "BuildResult", "LockError", "build"]


@dataclasses.dataclass
class BuildResult:
    """What :func:`build` did: the store (``path``) of ``likelihood`` in ``layout`` (``"grid"``
    or ``"cells"``), its tiles (all, computed by this run, reused from an unfinished build),
    the kernel points computed and probit rows mirrored, the seconds in all and of the tiles,
    the check's report and whether the store was published (a dry run: not; its
    ``estimate_seconds`` is the time the build would take)."""

    path: Path
    likelihood: str
    layout: str
    tiles_total: int
    tiles_computed: int
    tiles_reused: int
    points_computed: int
    rows_mirrored: int
    seconds: float
    compute_seconds: float = 0.0
    verification: dict[str, Any] = dataclasses.field(default_factory=dict)
    published: bool = False
    estimate_seconds: float | None = None


@dataclasses.dataclass
class _Build:
    """One build's validated settings, handed from :func:`build` to its steps."""

    layout: Layout
    out: Path
    scheduler: str | None
    workers: int | None
    force: bool
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
        seconds = time.perf_counter() - self.t_start
        layout = self.layout
        total = len(layout.tiles())
        return BuildResult(
            self.out, layout.likelihood, layout.name, total, seconds=seconds, **counts
        )


def _layout(
    likelihood: str, grid: GridSpec | str, checks: dict[str, Any], kernel_points: int | None
) -> Layout:
    """The layout of ``grid`` (a GridSpec, or ``"cells"``) with the check's options."""
    if isinstance(grid, GridSpec):
        if kernel_points is not None:
            raise BuildInputError("kernel_points: only for grid='cells' (the check of the cells)")
        from qptables.pipeline.grid_layout import GridLayout

        return GridLayout(likelihood, grid, checks)
    from qptables.pipeline.cells_layout import CellsLayout

    return CellsLayout(likelihood, checks, kernel_points)


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
    tolerance: float | None = None,
    seed: int = 0,
    verify_dps: int | None = None,
    kernel_points: int | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
    client: Any | None = None,
    dry_run: bool = False,
) -> BuildResult:
    """Build, verify and publish the sigma* table of ``likelihood`` in the layout ``grid`` at
    ``out``.

    Parameters
    ----------
    likelihood
        A name :func:`qpinfer.get_likelihood` knows, e.g. ``"probit"``, ``"poisson_square"``,
        ``"step_noise(eps=0.1)"``.
    out
        Destination directory of the zarr store; built in ``OUT.partial``, locked by
        ``OUT.lock``.
    grid
        The layout. ``"paper"`` (default): the App. J grid of Zhang et al. (2020), 20001 x 2001
        points per label, linear interpolation (``y_max`` sets the Poisson labels); a
        :class:`~qptables.grid.GridSpec`: another rectangle of the same layout. ``"cells"``: the
        reduced-coordinate boxes of Chebyshev cells that qpinfer ships (fixed boxes,
        :func:`qpinfer.likelihoods.registry.boxes_for`).
    scheduler
        Address of an existing dask-distributed scheduler (workers must see ``out`` on a shared
        file system); ``None`` starts a ``LocalCluster`` of ``workers`` single-threaded worker
        processes (default: one per CPU).
    force
        Replace an existing ``OUT`` (only once the new store is complete and verified) and
        discard an incompatible ``OUT.partial`` -- only if they are table stores of this
        package (complete or unfinished); anything else is refused before any work.
    samples, tolerance, seed, verify_dps, kernel_points
        The check: points checked against mpmath (the grid: besides each label's corners and
        edge midpoints; the cells: a stratified sample of the kernel check's points), the
        largest accepted relative error (default: the grid 1e-10, the cells 1e-12), the
        sampling seed, the mpmath working precision in decimal digits (default: the grid 40,
        the cells each reference's own) and, for the cells only, the random points checked
        against the exact kernel (default 20000). The cells' defaults give the shipped stores
        bit for bit.
    progress, stream
        Show a tqdm progress bar; where to print the plan and progress lines (default stderr).
    client
        An existing ``distributed.Client`` to use instead of ``scheduler``/``workers``.
    dry_run
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
        verify_dps=verify_dps, seed=seed, scheduler=scheduler if client is None else "client",
    )  # fmt: skip
    checks = {"samples": samples, "seed": seed}
    if tolerance is not None:
        checks["tolerance"] = tolerance
    if verify_dps is not None:
        checks["dps"] = verify_dps
    layout = _layout(likelihood, grid, checks, kernel_points)
    (check_unlocked_readonly if dry_run else check_writable)(out.parent, out)  # dry: no writes
    check_destinations(out, force)
    # cheap disk check before anything allocates or computes (the precise one, which counts
    # the reusable chunks of an unfinished build, follows once the partial store is scanned)
    layout.check_disk_space(out)
    job = _Build(layout, out, scheduler, workers, force, progress, say, client, dry_run, t_start)
    with contextlib.nullcontext() if dry_run else locked(out):  # SIGTERM: unwinds as Ctrl-C
        return _build_locked(job)


def _build_locked(job: _Build) -> BuildResult:
    layout, out, partial, say = job.layout, job.out, job.partial, job.say
    # re-check under the lock (another build may have published meanwhile)
    check_destinations(out, job.force)

    # -- 2. probe; 3. reuse or discard the partial store, disk space, plan ------------------
    layout.prepare()
    done: set = set()
    if resumable(partial, layout.name, layout.record, job.force, job.dry_run, say):
        done = layout.finished(partial, clean=not job.dry_run)
    free = layout.check_disk_space(out, done)
    todo = [t for t in layout.tiles() if t not in done]
    layout.describe(out, done, todo, free, say)
    counts = {"tiles_reused": len(done), "points_computed": 0, "rows_mirrored": 0}

    if job.dry_run:
        seconds, text = layout.estimate(todo, job.workers or os.cpu_count() or 1, None)
        say(f"  estimate: {text}")
        say("  dry run: nothing was created")
        return job.result(tiles_computed=0, estimate_seconds=seconds, **counts)

    # -- 4. compute: the cluster first (a scheduler that cannot be reached leaves nothing) ----
    with contextlib.ExitStack() as stack:
        client = job.client
        if client is None:
            client = stack.enter_context(open_client(job.scheduler, job.workers))
        clean_stale(out, say)
        fresh = create_partial(partial, layout.create)
        try:
            n_workers = connect_workers(client, partial, say)
            seconds, text = layout.estimate(todo, n_workers, client)
        except BaseException:
            if fresh:  # nothing was computed into it yet
                remove_store(partial, what="OUT (its unfinished build)")
            raise
        estimated = time.perf_counter() - job.t_start + seconds
        say(f"  estimate: {human_seconds(estimated)} in all, {text}")
        t_compute = time.perf_counter()
        reports = run_tiles(client, partial, layout.tasks(partial, todo), job.progress)
        compute_seconds = time.perf_counter() - t_compute
        finished = layout.finished(partial)
        missing = [t for t in layout.tiles() if t not in finished]
        if missing:
            raise BuildError(
                f"{len(missing)} tiles still missing after the run, e.g. {missing[0]}; re-run "
                f"to resume"
            )

        # -- 5. check; 6. publish --------------------------------------------------------------
        say(f"  computed {len(todo)} tiles, reused {len(done)}; checking ...")
        report = layout.verify_partial(partial, client, job.progress, say)
        layout.publish(partial, out, job.force, client, say)
    counts["points_computed"] = sum(r["points_computed"] for r in reports)
    counts["rows_mirrored"] = sum(r["rows_mirrored"] for r in reports)
    result = job.result(
        tiles_computed=len(todo), compute_seconds=compute_seconds, verification=report,
        published=True, estimate_seconds=seconds, **counts,
    )  # fmt: skip
    say(
        f"  published {out} in {human_seconds(result.seconds)} (estimated "
        f"{human_seconds(estimated)}; tiles {human_seconds(compute_seconds)})"
    )
    return result
