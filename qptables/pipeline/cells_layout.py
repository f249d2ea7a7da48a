"""The ``"cells"`` layout's part of a build: the reduced-coordinate boxes of Chebyshev cells that
qpinfer ships (``qptables build LIK OUT --grid cells``; ``qptables ship`` builds every shipped one).

Its tiles, their kernel and its store's schema are :mod:`qptables.pipeline.cells`. The check
(:func:`qptables.pipeline.cells_check.check_points`): the interpolant against the exact kernel at
random points of every box (``kernel_points``), and against the mpmath reference at a stratified
sample (``samples``, fanned out over the cluster), both at ``tolerance`` relative, recorded in
``attrs["verification"]`` with the integrity record (:mod:`qpinfer.tables.reduced_store`). The
verified store is then marked complete and put at ``OUT`` with one atomic swap
(:func:`qptables.pipeline.destination.publish_store`).

The estimate follows the grid's phase model (:mod:`qptables.pipeline.estimate`): kernel points
over the rate probed here (per box: the cost of a point differs between boxes) times
:data:`~qptables.pipeline.estimate.CONCURRENCY_FACTOR` and the workers, a per-tile overhead, the
check against the exact kernel in the client, and the mpmath points over the workers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

import qpinfer
from qpinfer.likelihoods.layout import Box
from qpinfer.likelihoods.registry import boxes_for
from qpinfer.tables.reduced import open_reduced
from qpinfer.tables.reduced_store import integrity_record
from qptables.pipeline.cells import (
    cell_tiles,
    chunk_sizes,
    create_cells_store,
    run_tile,
    tile_done,
)
from qptables.pipeline.cells_check import (
    DEFAULT_KERNEL_POINTS,
    DEFAULT_SAMPLES,
    TOLERANCE,
    check_points,
)
from qptables.pipeline.custom_plan import plan_boxes
from qptables.pipeline.dask_run import TileTask
from qptables.pipeline.destination import publish_store
from qptables.pipeline.errors import BuildError, BuildInputError
from qptables.pipeline.estimate import (
    CONCURRENCY_FACTOR,
    MPMATH_FIRST_SECONDS,
    MPMATH_SECONDS,
    TILE_OVERHEAD_S,
    mpmath_factor,
)
from qptables.pipeline.interrupt import deferred_sigterm
from qptables.pipeline.layouts import Layout
from qptables.pipeline.resume import build_record
from qptables.store import finished_chunks
from qptables.units import human_bytes, human_seconds

__all__ = ["CellsLayout", "estimate_cells", "probe_rates"]

#: Kernel points timed per box for the estimate (seeded; a fraction of a second each).
PROBE_POINTS = 400


def _box_points(box: Box) -> int:
    return len(box.labels) * int(np.prod([ax.n_cells * ax.n for ax in box.axes]))


def probe_rates(likelihood: str, boxes: tuple[Box, ...]) -> list[float]:
    """Kernel points per second of each box, timed here on :data:`PROBE_POINTS` of its nodes
    (seeded draw), as a tile computes them (sigma* and, for the boxes that store it, EP's std)."""
    rng = np.random.default_rng(0)
    rates = []
    for box in boxes:
        labels = np.asarray(box.labels, dtype=np.float64)
        pick = [rng.integers(0, len(labels), PROBE_POINTS)]
        pick += [rng.integers(0, ax.n_cells * ax.n, PROBE_POINTS) for ax in box.axes]
        y = labels[pick[0]]
        mu, sigma = box.cavity(
            y, *(ax.nodes()[i] for ax, i in zip(box.axes, pick[1:], strict=True))
        )
        qpinfer.sigma_qp(likelihood, mu[:2], sigma[:2], y[:2])  # imports, caches
        t0 = time.perf_counter()
        qpinfer.sigma_qp(likelihood, mu, sigma, y)
        if box.denominator != "sigma":
            qpinfer.tilted_moments(likelihood, mu, sigma, y)
        rates.append(PROBE_POINTS / max(time.perf_counter() - t0, 1e-9))
    return rates


def estimate_cells(
    points: list[int],
    rates: list[float],
    *,
    tiles: int,
    n_workers: int,
    kernel_points: int,
    samples: int,
    n_boxes: int,
    dps: int | None = None,
) -> dict[str, float]:
    """Seconds of each phase of a cells build: ``tiles`` (``points[i]`` kernel points of box
    ``i`` still to compute at ``rates[i]`` points/s in a lone process), ``kernel_check`` (the
    client's check at ``kernel_points`` points), ``mpmath`` (``samples`` points, at least one per
    box, at ``dps`` digits: :func:`~qptables.pipeline.estimate.mpmath_factor`) and ``total``."""
    busy = CONCURRENCY_FACTOR * n_workers
    tile_s = sum(p / r for p, r in zip(points, rates, strict=True)) / busy
    tile_s += tiles * TILE_OVERHEAD_S / n_workers
    kernel_s = kernel_points / (sum(rates) / len(rates)) if rates else 0.0
    n_mp = max(samples // max(n_boxes, 1), 1) * n_boxes
    factor = mpmath_factor(dps)  # the reference's cost at dps digits (None: its own, ~40)
    mp_s = (MPMATH_FIRST_SECONDS + n_mp * MPMATH_SECONDS / n_workers) * factor
    return {
        "tiles": tile_s,
        "kernel_check": kernel_s,
        "mpmath": mp_s,
        "mpmath_points": n_mp,
        "total": tile_s + kernel_s + mp_s,
    }


#: the check's default tolerance for a user likelihood's table (the shipped ones': TOLERANCE)
CUSTOM_TOLERANCE = 1e-10


class CellsLayout(Layout):
    """The cells' part of a build of ``likelihood`` (its boxes:
    :func:`qpinfer.likelihoods.registry.boxes_for`); ``checks``: the options of
    :func:`~qptables.pipeline.cells_check.check_points` (``samples``, ``tolerance``, ``seed``,
    ``dps``) and ``kernel_points`` (None:
    :data:`~qptables.pipeline.cells_check.DEFAULT_KERNEL_POINTS`)."""

    name = "cells"

    def __init__(self, likelihood: str, checks: dict[str, Any], kernel_points: int | None) -> None:
        try:
            lik = qpinfer.get_likelihood(likelihood)
            if isinstance(lik, qpinfer.CustomLikelihood):  # cells refined until probes hold
                self.boxes = plan_boxes(lik, say=lambda line: print(line, flush=True))
            else:
                self.boxes = boxes_for(likelihood)
        except ValueError as exc:
            raise BuildInputError(f"--grid cells: {exc}") from None
        self.likelihood = likelihood
        self.moments = lik._tabulated_moments
        self.sizes = chunk_sizes(self.boxes, self.moments)
        tolerance = CUSTOM_TOLERANCE if isinstance(lik, qpinfer.CustomLikelihood) else TOLERANCE
        self.checks = {"samples": DEFAULT_SAMPLES, "tolerance": tolerance, "dps": None, **checks}
        if kernel_points is not None and (isinstance(kernel_points, bool) or kernel_points < 1):
            raise BuildInputError(f"--kernel-points: must be >= 1, got {kernel_points!r}")
        self.kernel_points = DEFAULT_KERNEL_POINTS if kernel_points is None else kernel_points
        self.rates: list[float] | None = None

    def prepare(self) -> None:
        self.record = build_record("cells", self.likelihood, boxes=self.boxes)

    def tiles(self) -> list[tuple[int, int, int]]:
        return cell_tiles(self.boxes)

    def finished(self, partial: Path, clean: bool = True) -> set[tuple[int, int, int]]:
        done = finished_chunks(partial, self.sizes, clean=clean)
        return {t for t in self.tiles() if tile_done(self.boxes, t, done, self.moments)}

    def _todo_per_box(self, todo: list) -> list[int]:
        per_box = [0] * len(self.boxes)
        for tile in todo:
            per_box[tile[0]] += 1
        return per_box

    def describe(self, out, done, todo, free, say) -> None:
        tiles = self.tiles()
        say(f"qptables build {self.likelihood} -> {out} (cells: reduced coordinates, Chebyshev)")
        n_tiles = [sum(1 for t in tiles if t[0] == k) for k in range(len(self.boxes))]
        for box, n, to_do in zip(self.boxes, n_tiles, self._todo_per_box(todo), strict=True):
            axes = ", ".join(
                f"{ax.name} [{ax.start:g}, {ax.stop:g}] {ax.n_cells} cells x {ax.n} nodes"
                for ax in box.axes
            )
            say(
                f"  box {box.name}: {axes}; {len(box.labels)} label(s); {n} tiles, "
                f"{to_do} to compute"
            )
        say(
            f"  store: {human_bytes(sum(self.sizes.values()))} of data "
            f"({sum(map(_box_points, self.boxes)):,} nodes); tiles: {len(tiles)} total, "
            f"{len(done)} already done, {len(todo)} to compute"
        )

    def estimate(self, todo: list, n_workers: int, client: Any | None) -> tuple[float, str]:
        if self.rates is None:
            self.rates = probe_rates(self.likelihood, self.boxes)
        rates, boxes = self.rates, self.boxes
        tiles = self.tiles()
        n_tiles = [sum(1 for t in tiles if t[0] == k) for k in range(len(boxes))]
        per_box = self._todo_per_box(todo)
        points = [_box_points(b) * t // n for b, t, n in zip(boxes, per_box, n_tiles, strict=True)]
        est = estimate_cells(
            points, rates, tiles=len(todo), n_workers=n_workers,
            kernel_points=self.kernel_points, samples=self.checks["samples"], n_boxes=len(boxes),
            dps=self.checks["dps"],
        )  # fmt: skip
        text = (
            f"{human_seconds(est['total'])} on {n_workers} workers (tiles "
            f"{human_seconds(est['tiles'])}: {sum(points):,} kernel points at "
            f"~{min(rates):,.0f}-{max(rates):,.0f} points/s probed here x{CONCURRENCY_FACTOR}; check against the kernel {human_seconds(est['kernel_check'])} "
            f"at {self.kernel_points:,} points; {est['mpmath_points']} mpmath points "
            f"{human_seconds(est['mpmath'])})"
        )
        return est["total"], text

    def create(self, path: Path) -> None:
        create_cells_store(path, self.likelihood, self.boxes)

    def tasks(self, partial: Path, todo: list) -> list[TileTask]:
        layout = [b.to_attrs() for b in self.boxes]
        return [
            TileTask(
                (k, label, cell),
                f"tile (label {label}, cell {cell}) of box {self.boxes[k].name}",
                run_tile,
                (str(partial), self.likelihood, layout[k], label, cell),
            )
            for k, label, cell in todo
        ]

    def verify_partial(self, partial, client, progress, say) -> dict[str, Any]:
        """:func:`~qptables.pipeline.cells_check.check_points`; a passed report is recorded with
        the integrity record (the store is not complete yet)."""
        import zarr

        report = check_points(
            open_reduced(partial, finished=False), self.likelihood,
            kernel_points=self.kernel_points, client=client, **self.checks,
        )  # fmt: skip
        if not report["passed"]:
            raise BuildError(f"verification failed, nothing published: {report}")
        group = zarr.open_group(str(partial), mode="r+")
        group.attrs["build"] = {"package_version": qpinfer.__version__}
        attrs = group.attrs.asdict()
        group.attrs["integrity"] = integrity_record(partial, attrs)
        group.attrs["verification"] = report
        say(
            f"  verified: kernel {report['kernel_max_rel_err']:.1e} on {report['kernel_points']} "
            f"points, mpmath {report['mpmath_max_rel_err']:.1e} on {report['mpmath_points']} "
            f"(tolerance {report['tolerance']:g})"
        )
        return report

    def publish(self, partial, out, force, client, say) -> None:
        """Marked complete, checked as the reader opens it and renamed to ``out``."""
        import zarr

        with deferred_sigterm():  # complete from here: publish before a SIGTERM is raised
            zarr.open_group(str(partial), mode="r+").attrs["complete"] = True
            open_reduced(partial)  # refuse to publish what the reader would refuse
            publish_store(partial, out, force)
