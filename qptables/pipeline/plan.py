"""Planning a build: its inputs checked, the grid, the disk space it needs, the tiles still to
compute (with the probit mirror's pairs of labels) and the plan printed before any work.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qpinfer.tables.schema import DATA_VARS
from qptables.grid import GridError, GridSpec, paper_grid, validate_y
from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.resume import partial_path
from qptables.pipeline.tiles import mirror_map, mirror_rows
from qptables.units import human_bytes

__all__ = [
    "DISK_SLACK_BYTES",
    "WORKERS_PER_CPU",
    "check_disk_space",
    "check_inputs",
    "check_options",
    "describe_plan",
    "mirror_pairs",
    "points_to_compute",
    "published_nbytes",
    "resolve_grid",
]

#: Bytes of slack required on top of the chunk data (metadata, temporary files).
DISK_SLACK_BYTES = 16 * 2**20


def published_nbytes(grid: GridSpec) -> int:
    """Bytes of the published copy (one chunk per (variable, y), no edge padding)."""
    return len(DATA_VARS) * grid.n_points * 8


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).stat().st_size
    return total


def resolve_grid(likelihood: str, grid: GridSpec | str | None, y_max: int | None) -> GridSpec | str:
    """``grid`` itself (a GridSpec, or ``"cells"``: the reduced-coordinate boxes), or the App. J
    grid for ``"paper"``/``None`` (``y_max``: Poisson labels)."""
    if grid is None or (isinstance(grid, str) and grid == "paper"):
        return paper_grid(likelihood, y_max)
    if isinstance(grid, str):
        if grid != "cells":
            raise GridError(f"--grid: unknown layout {grid!r}; expected 'paper' or 'cells'")
        if y_max is not None:
            raise GridError("--y-max: only for the grid layout; the cells' boxes are fixed")
        return grid
    if not isinstance(grid, GridSpec):
        raise GridError(f"grid: expected a GridSpec, 'paper' or 'cells', got {type(grid).__name__}")
    return grid


def check_inputs(
    likelihood: Any,
    out: str | os.PathLike,
    grid: GridSpec | str | None,
    y_max: int | None,
    *,
    workers: Any,
    samples: int,
    tolerance: float | None,
    verify_dps: int | None,
    seed: int = 0,
    scheduler: str | None = None,
) -> tuple[str, Path, GridSpec | str]:
    """Step 1 of a build (:mod:`qptables.pipeline.build`): the canonical likelihood name
    (``"step_noise"`` -> ``"step_noise(eps=0.2)"``), the absolute ``OUT`` and the layout
    (:func:`resolve_grid`; the cells: the likelihood must have boxes), or
    :class:`~qptables.BuildInputError` naming the argument; the check's and the cluster's
    options by :func:`check_options`. ``tolerance`` and ``verify_dps``: None for the layout's
    default."""
    import qpinfer

    if not isinstance(likelihood, str):
        raise BuildInputError(f"LIKELIHOOD: expected a name, got {likelihood!r}")
    try:
        likelihood = qpinfer.get_likelihood(likelihood).name
    except ValueError as exc:
        raise BuildInputError(f"LIKELIHOOD: unknown likelihood {likelihood!r} ({exc})") from None
    try:
        grid = resolve_grid(likelihood, grid, y_max)
        if isinstance(grid, GridSpec):
            validate_y(likelihood, grid.y)
    except GridError as exc:
        raise BuildInputError(str(exc)) from None
    check_options(
        samples=samples, tolerance=tolerance, seed=seed, verify_dps=verify_dps, workers=workers,
        local=scheduler is None,
    )  # fmt: skip
    out = Path(out).expanduser().absolute()
    if out.name in ("", ".", ".."):
        raise BuildInputError(f"OUT: {out} is not a valid store name")
    return likelihood, out, grid


#: Local worker processes allowed per CPU core: the kernels and the mpmath points run one per
#: core, so more only share the cores (and each process costs ~100 MB); a mistyped count would
#: otherwise start thousands of processes.
WORKERS_PER_CPU = 4


def _whole(flag: str, value: Any, lo: int, hi: int | None = None, what: str = "") -> None:
    """``value`` must be an integer (not a bool) in ``[lo, hi]``, else
    :class:`~qptables.BuildInputError` naming ``flag``, the range and ``what`` it is."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if ok and lo <= value and (hi is None or value <= hi):
        return
    span = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
    raise BuildInputError(f"{flag}: must be {span}{what}, got {value!r}")


def check_options(
    *,
    samples: int | None = None,
    tolerance: float | None = None,
    seed: int = 0,
    verify_dps: int | None = None,
    workers: int | None = None,
    kernel_points: int | None = None,
    local: bool = True,
) -> None:
    """The options of the check against mpmath and of the cluster, shared by a build and
    ``qptables verify`` and checked before either does any work: ``samples`` >= 0, ``tolerance``
    finite > 0, ``seed`` >= 0 (numpy's generators take no negative seed), ``verify_dps`` in
    :data:`~qptables.pipeline.estimate.VERIFY_DPS_RANGE`, ``workers`` >= 1 and, for a local
    cluster (``local``), at most :data:`WORKERS_PER_CPU` per CPU core, ``kernel_points`` >= 1;
    ``None``: the default. :class:`~qptables.BuildInputError` names the flag and the range."""
    from qptables.pipeline.estimate import VERIFY_DPS_RANGE

    if workers is not None:
        cap = WORKERS_PER_CPU * (os.cpu_count() or 1) if local else None
        why = f" ({WORKERS_PER_CPU} per CPU core of this machine)" if local else ""
        _whole("--workers", workers, 1, cap, why)
    if samples is not None:
        _whole("--samples", samples, 0)
    _whole("--seed", seed, 0)
    if kernel_points is not None:
        _whole("--kernel-points", kernel_points, 1)
    if tolerance is not None:
        number = isinstance(tolerance, float | int | np.floating) and not isinstance(
            tolerance, bool
        )
        if not (number and np.isfinite(tolerance) and tolerance > 0):
            raise BuildInputError(f"--tolerance: must be a positive number, got {tolerance!r}")
    if verify_dps is not None:
        _whole(
            "--verify-dps",
            verify_dps,
            *VERIFY_DPS_RANGE,
            " (decimal digits of the mpmath reference)",
        )


def check_disk_space(out: Path, grid: GridSpec, done: set[tuple[int, int]] | None = None) -> int:
    """Refuse a build whose store does not fit next to ``out``; returns the free bytes.

    ``done=None`` (before the lock): the whole store plus its published copy, counting an
    unfinished ``OUT.partial`` as reusable. Otherwise the tiles not in ``done`` plus the copy.
    """
    free = shutil.disk_usage(out.parent).free
    total_bytes = grid.store_nbytes(len(DATA_VARS))
    if done is None:
        # cheap check before anything allocates or computes (the tiles plus, while publishing,
        # their one-chunk-per-slice copy)
        partial = partial_path(out)
        need = total_bytes + published_nbytes(grid)
        reusable = tree_bytes(partial) if partial.is_dir() else 0
        if need + DISK_SLACK_BYTES > free + reusable:
            raise BuildInputError(
                f"grid (--mu/--log10-sigma/--y): the build needs {human_bytes(need)} but "
                f"only {human_bytes(free)} is free on {out.parent} ({grid.describe()})"
            )
        return free
    need = (
        total_bytes
        - len(done) * len(DATA_VARS) * grid.chunk_nbytes()
        + published_nbytes(grid)
        + DISK_SLACK_BYTES
    )
    if need > free:
        raise BuildInputError(
            f"grid (--mu/--log10-sigma/--y): the store needs {human_bytes(need)} more on "
            f"{out.parent} but only {human_bytes(free)} is free ({grid.describe()})"
        )
    return free


def mirror_pairs(likelihood: str, grid: GridSpec) -> dict[int, int]:
    """``{y index derived by mirroring: y index it is copied from}`` for the labels on ``grid``."""
    ys = list(grid.y)
    return {
        ys.index(dst): ys.index(src)
        for dst, src in mirror_map(likelihood).items()
        if dst in ys and src in ys
    }


def points_to_compute(grid: GridSpec, todo: list[tuple[int, int]], pairs: dict[int, int]) -> int:
    """Kernel points the tiles ``todo`` evaluate (mirrored rows are copied, not computed)."""
    n_ls = grid.log10_sigma.n
    points = 0
    for iy, k in todo:
        a, b = grid.tile_rows(k)
        if iy in pairs:
            points += int((~mirror_rows(grid, k)[1]).sum()) * n_ls
        else:
            points += (b - a) * n_ls
    return points


def describe_plan(
    likelihood: str,
    out: Path,
    grid: GridSpec,
    pairs: dict[int, int],
    n_done: int,
    n_todo: int,
    free: int,
    say: Callable[[str], None],
) -> None:
    """Print what the build will do, before it does it."""
    chunk_bytes = grid.chunk_nbytes()
    total_bytes = grid.store_nbytes(len(DATA_VARS))
    say(f"qptables build {likelihood} -> {out}")
    say(f"  grid: {grid.describe()}")
    if pairs:
        n_rows = grid.mu.n
        exact = int((grid.mu_values()[::-1] == -grid.mu_values()).sum())
        say(f"  probit mirror: y=-1 copied from y=+1 on {exact}/{n_rows} mu rows (exact negation)")
    say(
        f"  store: {human_bytes(published_nbytes(grid))} on disk when done "
        f"({len(DATA_VARS)} variables x {len(grid.y)} uncompressed chunks, one per (variable, y)); "
        f"built in {len(DATA_VARS)} x {grid.n_tiles} tiles of {human_bytes(chunk_bytes)} "
        f"({human_bytes(total_bytes)}, deleted once published); {human_bytes(free)} free"
    )
    say(f"  tiles: {grid.n_tiles} total, {n_done} already done, {n_todo} to compute")
