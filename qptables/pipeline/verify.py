"""Re-check a finished table store of either layout (``qptables verify``, :func:`qptables.verify`).

One function for every store the package writes or ships: :func:`verify` reads the store's
layout (:func:`qptables.pipeline.layouts.store_layout`) and runs its check --

* the grid (App. J): the metadata digest, checksums, a sanity scan and mpmath at a stratified
  sample of grid points (:func:`qptables.reference.verify.verify_grid`); the report is written
  into the store unless ``write=False``;
* the cells: the integrity record, the exact kernel at random points of every box and mpmath at
  a stratified sample of them (:func:`qptables.pipeline.cells_check.verify_cells`); the store is
  never written to.

Options that only one layout has (``kernel_points``, ``boxes``) are refused for the other,
naming the flag.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.layouts import store_layout
from qptables.pipeline.plan import check_options
from qptables.store import read_attrs

__all__ = ["check_report_writable", "verify"]


def check_report_writable(path: Path) -> None:
    """A grid store's report is written into its root ``zarr.json`` (replaced through a new file
    beside it): refuse a store where neither can be written before the check runs, suggesting
    ``--no-write``. ``os.access`` asks the kernel, so a read-only file system is refused for
    every user, a read-only mode for all but root (who may write anyway)."""
    for target in (path, path / "zarr.json"):
        if not os.access(target, os.W_OK):
            raise BuildInputError(
                f"OUT: {target} is not writable, so the verification report cannot be stored "
                f"in {path}; pass --no-write to check it without storing the report"
            )


def verify(
    path: str | os.PathLike,
    *,
    samples: int | None = None,
    tolerance: float | None = None,
    seed: int = 0,
    dps: int | None = None,
    client: Any | None = None,
    workers: int | None = None,
    write: bool = True,
    progress: bool | None = None,
    kernel_points: int | None = None,
    boxes: list[str] | None = None,
) -> dict[str, Any]:
    """Re-check the store at ``path`` as its layout's build checked it; returns the report
    (``passed`` says whether every check held).

    Parameters
    ----------
    samples, seed
        Points checked against mpmath (default 24) and the seed of their draw.
    tolerance
        Largest accepted relative error (default: the grid 1e-10; the cells the tolerance the
        build recorded).
    dps
        Decimal digits of the mpmath reference (default: the grid 40; the cells each
        reference's own).
    client, workers
        A dask client whose workers compute the mpmath points; else ``workers`` local processes.
    write, progress
        The grid: store the report in the store; a progress bar of the mpmath points (default:
        when stderr is a terminal). A cells store is never written to.
    kernel_points, boxes
        The cells only: random points checked against the exact kernel (default 20000), and the
        names of the boxes to check (default every box).

    Raises
    ------
    qptables.pipeline.errors.BuildInputError
        Before any check runs: an option out of its range
        (:func:`~qptables.pipeline.plan.check_options`), an option of the other layout, a grid
        store whose report cannot be written (``write=True``: pass ``write=False``), or ``boxes``
        names a box the store does not have.
    ValueError
        The store is not one this package reads (also a ``qpinfer.tables.TableError``), or a
        grid store's metadata no longer matches its digest.
    """
    check_options(
        samples=samples, tolerance=tolerance, seed=seed, verify_dps=dps, workers=workers,
        kernel_points=kernel_points, local=client is None,
    )  # fmt: skip
    path = Path(path)
    if store_layout(read_attrs(path)) == "cells":
        from qptables.pipeline.cells_check import (
            DEFAULT_KERNEL_POINTS,
            DEFAULT_SAMPLES,
            verify_cells,
        )

        return verify_cells(
            path, kernel_points=kernel_points or DEFAULT_KERNEL_POINTS,
            samples=DEFAULT_SAMPLES if samples is None else samples, seed=seed,
            tolerance=tolerance, dps=dps, client=client, workers=workers, boxes=boxes,
        )  # fmt: skip
    for flag, value in (("--kernel-points", kernel_points), ("--boxes", boxes)):
        if value is not None:
            raise BuildInputError(f"{flag}: only for cells stores; {path} is a grid store")
    if write:
        check_report_writable(path)
    from qptables.reference.verify import (
        DEFAULT_DPS,
        DEFAULT_SAMPLES,
        DEFAULT_TOLERANCE,
        verify_grid,
    )

    return verify_grid(
        path, samples=DEFAULT_SAMPLES if samples is None else samples,
        tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance, seed=seed,
        dps=DEFAULT_DPS if dps is None else dps, client=client, workers=workers, write=write,
        progress=progress,
    )  # fmt: skip
