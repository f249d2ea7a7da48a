"""The ``"grid"`` layout: the App. J grid of Zhang et al. (2020) -- one box over
``(mu, log10 sigma)`` in identity coordinates, linearly interpolated by the reader.

A tile is one zarr chunk of shape ``(1, tile_mu, n_log10_sigma)`` (:mod:`qptables.grid`); its task
(:func:`qptables.pipeline.tiles.compute_tile`) evaluates qpinfer's vectorized kernel --
:func:`qpinfer.sigma_qp` (sigma*) and :func:`qpinfer.tilted_moments` (EP's sigma) -- and the
worker writes the tile straight into the store. A probe of a few rows fingerprints the kernel (a
resumed build must see the same fingerprint) and times it for the estimate; the probit mirror
copies the ``y = -1`` rows from ``y = +1`` where that is exact (:mod:`qptables.pipeline.tiles`).

The check: every chunk checksummed and scanned, and a stratified sample against mpmath
(:mod:`qptables.reference.verify`), recorded in ``attrs["verification"]``. Publishing *copies* the
verified tiles into ``OUT.publishing`` with ONE chunk per ``(variable, y)`` -- which the reader
looks up much faster than many small tiles -- and renames it to ``OUT``
(:func:`qptables.pipeline.destination.publish_build`).

Bit-identity. The kernel's value at a point never depends on the other points of its call, so
tiling, worker count, resuming and the probit mirror cannot change a single bit.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import qpinfer
from qptables.grid import GridSpec
from qptables.pipeline.dask_run import TileTask
from qptables.pipeline.destination import publish_build
from qptables.pipeline.errors import BuildError, BuildInputError, writing
from qptables.pipeline.estimate import (
    CONCURRENCY_FACTOR,
    calibrate_workers,
    estimate_build,
    mpmath_seconds,
)
from qptables.pipeline.layouts import Layout
from qptables.pipeline.plan import (
    check_disk_space,
    describe_plan,
    mirror_pairs,
    points_to_compute,
)
from qptables.pipeline.resume import build_record, publishing_path
from qptables.pipeline.tiles import compute_tile, mirror_rows, probe
from qptables.reference.verify import (
    DEFAULT_DPS,
    DEFAULT_TOLERANCE,
    reference_sample,
    scan_store,
    verification_report,
)
from qptables.store import StoreHeader, create_store, read_attrs, scan_tiles, update_attrs

__all__ = ["GridLayout"]


class GridLayout(Layout):
    """The App. J grid's part of a build of ``likelihood`` on ``grid``; ``checks``: the options
    of :func:`qptables.reference.verify.reference_sample` (``samples``, ``tolerance``, ``seed``,
    ``dps``)."""

    name = "grid"

    def __init__(self, likelihood: str, grid: GridSpec, checks: dict[str, Any]) -> None:
        self.likelihood, self.grid = likelihood, grid
        self.checks = {"tolerance": DEFAULT_TOLERANCE, "dps": DEFAULT_DPS, **checks}
        self.pairs: dict[int, int] = {}
        self.rate = 0.0
        self.header: StoreHeader | None = None

    def prepare(self) -> None:
        pairs = mirror_pairs(self.likelihood, self.grid)
        try:
            fingerprint, self.rate, mirror_ok = probe(self.likelihood, self.grid, bool(pairs))
        except ValueError as exc:  # the kernel refuses part of the grid
            raise BuildInputError(f"grid (--mu/--log10-sigma/--y): {exc}") from None
        if pairs and not mirror_ok:
            warnings.warn(
                "the kernel's probit mirror symmetry is not bit-exact; computing both labels",
                stacklevel=3,
            )
            pairs = {}
        self.pairs = pairs
        self.record = build_record(
            "grid", self.likelihood, grid=self.grid, fingerprint=fingerprint, mirror=bool(pairs)
        )

    def tiles(self) -> list[tuple[int, int]]:
        return list(self.grid.tiles())

    def finished(self, partial: Path, clean: bool = True) -> set[tuple[int, int]]:
        return scan_tiles(partial, self.grid, clean=clean)

    def check_disk_space(self, out: Path, done: set | None = None) -> int:
        return check_disk_space(out, self.grid, done)

    def describe(self, out, done, todo, free, say) -> None:
        describe_plan(self.likelihood, out, self.grid, self.pairs, len(done), len(todo), free, say)

    def estimate(self, todo: list, n_workers: int, client: Any | None) -> tuple[float, str]:
        points = points_to_compute(self.grid, todo, self.pairs)
        n_verify = len(self.grid.y) * 8 + self.checks["samples"]
        common = {"points": points, "tiles": len(todo), "n_verify": n_verify}
        dps = self.checks["dps"]
        if client is None:
            est = estimate_build(
                self.grid, **common, n_workers=n_workers, rate=self.rate * CONCURRENCY_FACTOR,
                source=f"(probed here x{CONCURRENCY_FACTOR}: all cores busy)",
                mpmath_seconds=mpmath_seconds(dps), dps=dps,
            )  # fmt: skip
            return est.total, est.describe()
        # calibrated on all workers at once (also warms them up); see qptables.pipeline.estimate
        rate, mp_s = calibrate_workers(
            client, self.likelihood, self.grid, self.rate, points=points, n_verify=n_verify,
            dps=dps,
        )  # fmt: skip
        est = estimate_build(
            self.grid, **common, n_workers=n_workers, rate=rate, mpmath_seconds=mp_s, dps=dps
        )
        return est.total, est.describe()

    def create(self, path: Path) -> None:
        create_store(
            path,
            self.likelihood,
            self.grid,
            package_version=qpinfer.__version__,
            build_info=self.record,
        )

    def tasks(self, partial: Path, todo: list) -> list[TileTask]:
        """One :func:`~qptables.pipeline.tiles.compute_tile` per tile, a mirrored label's tiles
        after the tiles of its source label they copy rows from."""
        grid, pairs = self.grid, self.pairs
        grid_attrs = grid.to_attrs()
        out = []
        for iy, k in sorted(todo, key=lambda t: (t[0] in pairs, t)):
            src = pairs.get(iy)
            after: tuple = ()
            if src is not None:
                (lo, hi), _exact = mirror_rows(grid, k)
                after = tuple(
                    (src, kk) for kk in range(lo // grid.tile_mu, (hi - 1) // grid.tile_mu + 1)
                )
            out.append(
                TileTask(
                    (iy, k),
                    f"tile {k + 1}/{grid.tiles_per_y} of y={grid.y[iy]}",
                    compute_tile,
                    (str(partial), self.likelihood, grid_attrs, grid.tile_mu, iy, k, src),
                    after=after,
                    priority=0 if src is not None else 1,
                )
            )
        return out

    def verify_partial(self, partial, client, progress, say) -> dict[str, Any]:
        """Checksum every chunk and check against mpmath; the report is written to the store's
        attributes (the store never says complete)."""
        header = StoreHeader(read_attrs(partial), self.grid)
        scan = scan_store(partial, client=client, check_checksums=False, header=header)
        with writing("writing the checksums to", partial):
            attrs = update_attrs(partial, consolidate=False, checksums=scan.pop("checksums"))
        header = header._replace(attrs=attrs)
        ref = reference_sample(
            partial, client=client, progress=progress, header=header, **self.checks
        )
        report = verification_report(ref, scan)
        with writing("writing the verification report to", partial):
            self.header = header._replace(attrs=update_attrs(partial, verification=report))
        tolerance = self.checks["tolerance"]
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
        return report

    def publish(self, partial, out, force, client, say) -> None:
        """A one-chunk-per-(variable, y) copy, renamed into place."""
        say(f"  publishing: one chunk per (variable, y) into {publishing_path(out).name} ...")
        publish_build(partial, out, force, client, self.header)  # while the workers are there
