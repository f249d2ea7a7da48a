"""``qptables build --dry-run``: the checks, the plan and the time estimate of a build, with
nothing written -- no ``OUT``, no ``OUT.partial``, no lock, not even a probe file.

The destination is checked with ``access(2)`` instead of the probe file a real build writes,
and the lock ``OUT.lock`` is read, never taken (:func:`check_unlocked_readonly`): a live build holding it refuses the dry run as it would refuse the
build. :func:`plan_v2` is the dry run of ``--grid v2``; the paper grid's is
:func:`qptables.pipeline.paper.build` with ``dry_run=True``, which uses the check here.

The v2 estimate (:func:`estimate_v2`) follows the paper grid's phase model
(:mod:`qptables.pipeline.estimate`): kernel points over the probed rate (per box: the cost of a
point differs between boxes) times :data:`~qptables.pipeline.estimate.CONCURRENCY_FACTOR` and the
workers, a per-tile overhead, the check against the exact kernel in the client, and the mpmath
points over the workers.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import qpinfer
from qpinfer.likelihoods.layout import Box
from qpinfer.likelihoods.registry import boxes_for
from qptables.pipeline.destination import check_destinations
from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.estimate import (
    CONCURRENCY_FACTOR,
    MPMATH_FIRST_SECONDS,
    MPMATH_SECONDS,
    TILE_OVERHEAD_S,
)
from qptables.pipeline.resume import lock_path, partial_path, pid_alive, resumable
from qptables.pipeline.v2 import _chunk_sizes, _tile_done, _tiles, resume_check
from qptables.store import finished_chunks
from qptables.units import human_bytes, human_seconds

__all__ = ["check_lock_readonly", "check_unlocked_readonly", "estimate_v2", "plan_v2"]

#: Kernel points timed per box for the estimate (seeded; a fraction of a second each).
PROBE_POINTS = 400


def check_unlocked_readonly(directory: Path, out: Path) -> None:
    """Refuse (:class:`~qptables.BuildInputError`, as the build would) an ``OUT`` whose parent ``directory``
    is missing, not a directory or not writable -- asked of ``access(2)``, nothing created -- or
    whose lock a live build holds (:func:`check_lock_readonly`)."""
    if not directory.exists():
        raise BuildInputError(f"OUT: directory {directory} of {out} does not exist")
    if not directory.is_dir():
        raise BuildInputError(f"OUT: {directory} (parent of {out}) is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BuildInputError(f"OUT: destination {directory} is not writable")
    check_lock_readonly(out)


def check_lock_readonly(out: Path) -> None:
    """Refuse (:class:`~qptables.BuildInputError`) when a live build holds ``OUT.lock``; a stale lock (its
    process is dead on this host) is left for the real build to take over. Nothing is written."""
    path = lock_path(out)
    if not path.exists():
        return
    try:
        other = json.loads(path.read_text() or "null") or {}
        host, pid = other.get("host"), int(other.get("pid", -1))
    except (OSError, ValueError, TypeError, AttributeError):
        raise BuildInputError(
            f"another build may hold the lock {path} (unreadable); if no build is running, "
            f"delete that file"
        ) from None
    if host == socket.gethostname() and not pid_alive(pid):
        return
    raise BuildInputError(
        f"another build into {out.name} is running: pid {pid} on host {host} since "
        f"{other.get('started')} (lock file {path}); if no build is running there, delete the "
        f"lock file"
    )


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


def estimate_v2(
    points: list[int],
    rates: list[float],
    *,
    tiles: int,
    n_workers: int,
    kernel_points: int,
    samples: int,
    n_boxes: int,
) -> dict[str, float]:
    """Seconds of each phase of a v2 build: ``tiles`` (``points[i]`` kernel points of box ``i``
    still to compute at ``rates[i]`` points/s in a lone process), ``kernel_check`` (the client's
    check at ``kernel_points`` points), ``mpmath`` (``samples`` points, at least one per box) and
    ``total``."""
    busy = CONCURRENCY_FACTOR * n_workers
    tile_s = sum(p / r for p, r in zip(points, rates, strict=True)) / busy
    tile_s += tiles * TILE_OVERHEAD_S / n_workers
    kernel_s = kernel_points / (sum(rates) / len(rates)) if rates else 0.0
    n_mp = max(samples // max(n_boxes, 1), 1) * n_boxes
    mp_s = MPMATH_FIRST_SECONDS + n_mp * MPMATH_SECONDS / n_workers
    return {
        "tiles": tile_s,
        "kernel_check": kernel_s,
        "mpmath": mp_s,
        "mpmath_points": n_mp,
        "total": tile_s + kernel_s + mp_s,
    }


def plan_v2(
    likelihood: str,
    out: str | os.PathLike,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    force: bool = False,
    samples: int,
    kernel_points: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The dry run of ``qptables build LIK OUT --grid v2``: refuse what the build would refuse,
    then print the boxes, the store, the tiles (finished ones of a resumable ``OUT.partial``
    counted) and :func:`estimate_v2`; returns the plan as a dict. Writes nothing; starts no
    cluster (``scheduler``: the workers are counted as ``workers`` or this machine's CPUs)."""
    lik = qpinfer.get_likelihood(likelihood)
    boxes = boxes_for(lik.name)
    out = Path(out).expanduser().absolute()
    check_unlocked_readonly(out.parent, out)
    check_destinations(out, force)
    partial = partial_path(out)
    moments = lik._tabulated_moments
    sizes = _chunk_sizes(boxes, moments)
    done: set[str] = set()
    if resumable(partial, resume_check(lik.name, boxes), force, True, say):
        done = finished_chunks(partial, sizes, clean=False)
    tiles = _tiles(boxes)
    todo_per_box = [0] * len(boxes)
    for tile in tiles:
        if not _tile_done(boxes, tile, done, moments):
            todo_per_box[tile[0]] += 1
    n_tiles = [sum(1 for t in tiles if t[0] == k) for k in range(len(boxes))]
    points = [
        _box_points(b) * todo // n for b, todo, n in zip(boxes, todo_per_box, n_tiles, strict=True)
    ]
    rates = probe_rates(lik.name, boxes)
    n_workers = workers or os.cpu_count() or 1
    est = estimate_v2(
        points, rates, tiles=sum(todo_per_box), n_workers=n_workers,
        kernel_points=kernel_points, samples=samples, n_boxes=len(boxes),
    )  # fmt: skip
    say(f"qptables build {lik.name} -> {out} (--grid v2: reduced coordinates, Chebyshev cells)")
    for box, n, todo in zip(boxes, n_tiles, todo_per_box, strict=True):
        axes = ", ".join(
            f"{ax.name} [{ax.start:g}, {ax.stop:g}] {ax.n_cells} cells x {ax.n} nodes"
            for ax in box.axes
        )
        say(f"  box {box.name}: {axes}; {len(box.labels)} label(s); {n} tiles, {todo} to compute")
    store_bytes = sum(sizes.values())
    say(
        f"  store: {human_bytes(store_bytes)} of data ({sum(map(_box_points, boxes)):,} nodes); "
        f"tiles: {len(tiles)} total, {len(done)} already done, {sum(todo_per_box)} to compute"
    )
    where = f"the cluster at {scheduler}, counted as" if scheduler else "a LocalCluster of"
    say(
        f"  estimate: {human_seconds(est['total'])} on {where} {n_workers} workers (tiles "
        f"{human_seconds(est['tiles'])}: {sum(points):,} kernel points at ~"
        f"{min(rates):,.0f}-{max(rates):,.0f} points/s probed here x{CONCURRENCY_FACTOR}; check "
        f"against the kernel {human_seconds(est['kernel_check'])} at {kernel_points:,} points; "
        f"{est['mpmath_points']} mpmath points {human_seconds(est['mpmath'])})"
    )
    say("  dry run: nothing was created")
    return {
        "likelihood": lik.name,
        "out": str(out),
        "grid": "v2",
        "boxes": [b.name for b in boxes],
        "tiles_total": len(tiles),
        "tiles_done": len(done),
        "tiles_to_compute": sum(todo_per_box),
        "store_bytes": store_bytes,
        "workers": n_workers,
        "estimate_seconds": {k: round(float(v), 1) for k, v in est.items()},
    }
