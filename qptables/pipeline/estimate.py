"""The time estimate a build prints before it starts (``qptables build``).

Why a probe in the client was not enough: it timed a few kernel rows in the client process,
alone on an idle core, and the estimate was ``kernel points / (rate x workers) + 1 s per mpmath
point``. On this 2-core machine the paper probit grid printed 6.6 min and took 11.5 min: while
every core runs a worker (plus the scheduler and the client), each worker computes ~30 % fewer
points per second than a lone process (shared caches and memory bandwidth, the other
processes), and the checksum/verification/publish phases after the last tile (reading and
hashing 1.3 GB of tiles, writing the 0.6 GB published copy) were not counted at all.

So the estimate is now made after the workers are up, from a calibration that runs on **every
worker at the same time** (:func:`calibrate_workers`: warm-up, ~1 s of the build's own kernel
rows, three mpmath reference points when the verification is long), and it counts every phase that
remains:

* tiles -- kernel points / (sum of the workers' concurrent rates), plus a per-tile cost
  (scheduling, writing and renaming the chunk files) over the workers;
* scan -- checksums and the sanity scan of the tiles (bytes / per-worker read-and-hash rate);
* verification -- mpmath points x the calibrated seconds per point / workers;
* publish -- the one-chunk-per-(variable, y) copy: bytes / per-worker copy rate, with at most
  one worker per (variable, y) slice.

The byte rates and the per-tile cost are constants measured here (README, "Build benchmarks");
the kernel and mpmath rates are measured on the cluster's own workers, so a SLURM node slower or
faster than the login node is accounted for. ``--dry-run`` (no cluster) uses the client probe
with :data:`CONCURRENCY_FACTOR`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from qptables.grid import GridSpec
from qptables.pipeline.tiles import evaluate_rows
from qptables.units import human_seconds

__all__ = [
    "VERIFY_DPS_RANGE",
    "Estimate",
    "calibrate_workers",
    "estimate_build",
    "mpmath_factor",
    "mpmath_seconds",
]

#: Per-worker rate of reading, hashing and scanning tile bytes (checksums + sanity scan).
SCAN_BYTES_PER_S = 250e6
#: Per-worker rate of the publish copy (read + re-hash the tiles, write + hash one chunk).
PUBLISH_BYTES_PER_S = 60e6
#: Per-tile cost besides the kernel: task scheduling, writing and renaming two chunk files.
TILE_OVERHEAD_S = 0.02
#: mpmath seconds per reference point when not calibrated (dps 40, probit; 0.2-1 s measured).
MPMATH_SECONDS = 0.5
#: A worker's first mpmath points build the quadrature nodes for dps (cached afterwards).
MPMATH_FIRST_SECONDS = 1.5
#: The accepted ``--verify-dps`` (decimal digits of the mpmath reference), both ends included.
#: Below 15 the reference is no more precise than the float64 table it checks. The cost of a
#: reference point grows steeply with the precision: measured here (one process, seconds per
#: point after the first; probit / poisson_square) 0.14 / 0.15 s at dps 20, 0.18 / 0.37 at 30,
#: 0.28 / 0.43 at 40, 0.63 / 0.83 at 60, 5.8 / 6.0 at 100 and 87 (probit) at 150 -- so 100 is
#: the largest accepted: a default check (~40 points) stays within minutes per worker, and 100
#: digits are 85 more than a 1e-12 check needs.
VERIFY_DPS_RANGE = (15, 100)
#: ``(dps, seconds per reference point)``, probit, measured as above; :func:`mpmath_factor`
#: interpolates them.
MPMATH_COST = ((20, 0.135), (30, 0.181), (40, 0.278), (60, 0.627), (100, 5.8), (150, 87.0))
#: A lone client-side probe over-states a worker's rate when all cores are busy (dry runs).
CONCURRENCY_FACTOR = 0.7
#: Kernel seconds each worker spends on the calibration (rows of the build's grid).
CALIBRATION_SECONDS = 1.0


def mpmath_factor(dps: int | None) -> float:
    """The cost of a reference point at ``dps`` digits relative to dps 40 (the precision of
    :data:`MPMATH_SECONDS`; ``None``: the reference's own default, 40).

    The fit: linear interpolation of ``log(seconds)`` between the measured points of
    :data:`MPMATH_COST` (the cost grows about exponentially in dps, faster above 60, so no
    single power or exponential fits the whole range), extrapolated with the last segment's
    slope beyond it (below dps 20: the cost at 20)."""
    if dps is None:
        return 1.0
    d, s = np.array(MPMATH_COST, dtype=float).T
    log_s = np.log(s)
    slope = (log_s[-1] - log_s[-2]) / (d[-1] - d[-2])
    x = float(dps)
    at = np.interp(x, d, log_s) if x <= d[-1] else log_s[-1] + slope * (x - d[-1])
    return float(np.exp(at - np.interp(40.0, d, log_s)))


def mpmath_seconds(dps: int | None) -> float:
    """Uncalibrated seconds per reference point at ``dps`` digits: :data:`MPMATH_SECONDS`
    scaled by :func:`mpmath_factor` (the quadrature nodes' first build,
    :data:`MPMATH_FIRST_SECONDS`, scales the same way)."""
    return MPMATH_SECONDS * mpmath_factor(dps)


@dataclass
class Estimate:
    """Seconds per remaining phase of a build, and what they were computed from."""

    tiles: float
    scan: float
    verify: float
    publish: float
    n_workers: int
    points: int
    rate: float
    n_verify: int
    mpmath_seconds: float
    source: str

    @property
    def total(self) -> float:
        """Seconds from now until the store is published."""
        return self.tiles + self.scan + self.verify + self.publish

    def describe(self) -> str:
        """One line: the total, then the phases and the measured rates."""
        return (
            f"{human_seconds(self.total)} on {self.n_workers} workers (tiles "
            f"{human_seconds(self.tiles)}: {self.points:,} kernel points at ~{self.rate:,.0f} "
            f"points/s/worker {self.source}; checksums {human_seconds(self.scan)}; "
            f"{self.n_verify} mpmath checks {human_seconds(self.verify)} at "
            f"{self.mpmath_seconds:.2f} s each; publish {human_seconds(self.publish)})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The estimate as stored in a build's report (seconds rounded to 0.1)."""
        return {
            "seconds": round(self.total, 1),
            "phases": {
                k: round(getattr(self, k), 1) for k in ("tiles", "scan", "verify", "publish")
            },
            "workers": self.n_workers,
            "points_per_s_per_worker": round(self.rate, 1),
            "mpmath_seconds_per_point": round(self.mpmath_seconds, 3),
            "source": self.source,
        }


def estimate_build(
    grid: GridSpec,
    *,
    points: int,
    tiles: int,
    n_verify: int,
    n_workers: int,
    rate: float,
    mpmath_seconds: float = MPMATH_SECONDS,
    n_vars: int = 2,
    source: str = "measured on the workers",
    dps: int | None = None,
) -> Estimate:
    """Seconds for ``tiles`` tiles holding ``points`` kernel points at ``rate`` points/s per
    worker on ``n_workers`` workers, then checksums, ``n_verify`` mpmath points (at
    ``mpmath_seconds`` each, after the nodes' first build for ``dps`` digits) and publishing
    (the phase model of the module docstring)."""
    if n_workers < 1:
        raise ValueError(f"n_workers: must be >= 1, got {n_workers!r}")
    if not rate > 0:
        raise ValueError(f"rate: must be > 0 points/s, got {rate!r}")
    tile_bytes = n_vars * grid.store_nbytes(1)
    slices = n_vars * len(grid.y)
    return Estimate(
        tiles=points / (rate * n_workers) + tiles * TILE_OVERHEAD_S / n_workers,
        scan=tile_bytes / (SCAN_BYTES_PER_S * n_workers),
        verify=MPMATH_FIRST_SECONDS * mpmath_factor(dps) + n_verify * mpmath_seconds / n_workers,
        publish=tile_bytes / (PUBLISH_BYTES_PER_S * min(n_workers, slices)),
        n_workers=n_workers,
        points=points,
        rate=rate,
        n_verify=n_verify,
        mpmath_seconds=mpmath_seconds,
        source=source,
    )


def calibration_rows(grid: GridSpec, rate: float, seconds: float) -> list[tuple[int, int, int]]:
    """Blocks ``(y index, first mu row, end row)`` worth ~``seconds`` at ``rate`` points/s: up
    to 8 equal blocks of contiguous rows (one kernel call each, like a tile), at the middles of
    equal bands of the labels and of ``mu`` -- the kernel's cost varies over both (Poisson: a
    closed form at ``y = 0``, a lobe quadrature above ``y = 64`` at half the speed), and the
    blocks' total time over their total points is then the grid's average cost per point."""
    n_y, n_mu, n_ls = grid.shape
    n_rows = int(np.clip(round(seconds * rate / n_ls), 1, min(256, n_mu)))
    n_blocks = min(8, n_rows)
    per = min(n_rows // n_blocks, grid.tile_mu)
    labels = ((np.arange(n_blocks) + 0.5) * n_y / n_blocks).astype(int)
    starts = np.linspace(0, n_mu - per, n_blocks + 2)[1:-1].round().astype(int)
    return [(int(iy), int(a), int(a) + per) for iy, a in zip(labels, starts, strict=True)]


def _calibrate(
    likelihood: str,
    grid_attrs: dict,
    tile_mu: int,
    rows: list[tuple[int, int, int]],
    mpmath_points: list[tuple[float, float, int]],
    dps: int,
) -> dict[str, float]:
    """Runs on a worker: warm up, then time the row blocks ``rows`` of the kernel (one call per
    block, as a tile does) and the mpmath reference ``mpmath_points``."""
    from qpinfer.malloc import tune_malloc

    tune_malloc()  # as the tiles do
    grid = GridSpec.from_attrs(grid_attrs, tile_mu)
    mu, sigma = grid.mu_values(), grid.sigma_values()
    evaluate_rows(likelihood, mu[:1], sigma[:2], int(grid.y[0]))  # imports, caches
    t0 = time.perf_counter()
    for iy, a, b in rows:
        evaluate_rows(likelihood, mu[a:b], sigma, int(grid.y[iy]))
    kernel = time.perf_counter() - t0
    points = sum(b - a for _, a, b in rows) * len(sigma)
    out = {"rate": points / max(kernel, 1e-9), "pid": float(os.getpid())}
    if mpmath_points:
        from qptables.reference.sigma import sigma_qp_reference

        # the first call at a precision builds mpmath's quadrature nodes (cached per process,
        # so the verification reuses them): warm up at the real dps, then time the points
        sigma_qp_reference(likelihood, 0.5, 1.0, int(grid.y[0]), dps=dps)
        t0 = time.perf_counter()
        for point in mpmath_points:
            sigma_qp_reference(likelihood, *point, dps=dps)
        out["mpmath_seconds"] = (time.perf_counter() - t0) / len(mpmath_points)
    return out


def calibrate_workers(
    client: Any,
    likelihood: str,
    grid: GridSpec,
    probe_rate: float,
    *,
    points: int,
    n_verify: int,
    dps: int = 40,
) -> tuple[float, float]:
    """``(mean points/s per worker, mpmath seconds per point)``, measured on all workers at
    once (``client.run``; this also warms every worker up before the tiles start).

    The kernel is timed for ~:data:`CALIBRATION_SECONDS`, less for a build of few ``points``
    (at most ~2 % of its tile time), and mpmath only when ``n_verify`` points are worth more
    than ~10 s of the workers' time (else :func:`mpmath_seconds` at ``dps`` is assumed): small
    builds stay fast.
    """
    uncalibrated = mpmath_seconds(dps)
    n_workers = max(1, len(client.nthreads()))
    seconds = min(CALIBRATION_SECONDS, 0.02 * points / (probe_rate * n_workers))
    rows = calibration_rows(grid, probe_rate, seconds)
    mu = grid.mu_values()
    sig = grid.sigma_values()
    # three points spread over the grid, as the verification's are (their cost varies 5x)
    points = []
    if n_verify * uncalibrated / n_workers > 10:
        for k, (fm, fs) in enumerate([(0.15, 0.2), (0.5, 0.55), (0.8, 0.9)]):
            i, j = int(fm * (len(mu) - 1)), int(fs * (len(sig) - 1))
            points.append((float(mu[i]), float(sig[j]), int(grid.y[k % len(grid.y)])))
    res = client.run(_calibrate, likelihood, grid.to_attrs(), grid.tile_mu, rows, points, dps)
    rates = [r["rate"] for r in res.values()]
    mp = [r["mpmath_seconds"] for r in res.values() if "mpmath_seconds" in r]
    return float(np.mean(rates)), float(np.median(mp)) if mp else uncalibrated
