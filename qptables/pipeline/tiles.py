"""The tile kernel: what one dask task of a build computes and writes (runs on a worker).

A tile is one zarr chunk of shape ``(1, tile_mu, n_log10_sigma)`` (:mod:`qptables.grid`). Each
task evaluates qpinfer's vectorized kernel -- :func:`qpinfer.sigma_qp` (sigma*, Zhang et al.
(2020), eq. (7)) and :func:`qpinfer.tilted_moments` (EP's sigma, eq. (5)) -- on its tile and
writes it straight into the store (a region write of exactly one chunk per variable).

Bit-identity. The kernel's value at a point never depends on the other points of its call
(no batch-wide stopping tests; ``tests/sigma/test_kernel_determinism.py``), so tiling, worker count,
resuming and the probit mirror cannot change a single bit.

Probit mirror. ``sigma*(mu, sigma, -1) == sigma*(-mu, sigma, +1)`` exactly (the kernel
canonicalizes ``(mu, y) -> (y mu, +1)``, an exact negation). When both labels are built, the
``y = -1`` row at ``mu[i]`` is copied from the ``y = +1`` row at ``mu[n-1-i]`` whenever
``mu[n-1-i] == -mu[i]`` *bitwise* (so the copy is identical to computing it); other rows are
computed. :func:`qpinfer.tables.schema.grid_axis` makes every grid whose start is a whole number of
steps (the paper grid included) exactly symmetric, so there every row is mirrored. The
property is re-checked on a probe row (:func:`probe`) at every build; if the kernel ever loses
it, mirroring is switched off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import Any

import numpy as np

from qpinfer.malloc import tune_malloc
from qpinfer.tables.schema import DATA_VARS
from qptables.grid import GridSpec
from qptables.store import read_rows, write_tile

__all__ = ["MIRRORS", "compute_tile", "evaluate_rows", "mirror_map", "mirror_rows", "probe"]

#: Probit: the label derived by mirroring -> the label it is mirrored from.
MIRRORS = {"probit": {-1: 1}}


def mirror_map(likelihood: str) -> dict[int, int]:
    """Labels derivable by the exact mirror ``sigma*(mu, s, -1) = sigma*(-mu, s, +1)``: probit
    and every step-noise table (one store per eps, ``step_noise(eps=...)``)."""
    if likelihood.startswith("step_noise"):
        return {-1: 1}
    return MIRRORS.get(likelihood, {})


def evaluate_rows(
    likelihood: str, mu: np.ndarray, sigma: np.ndarray, y: int
) -> dict[str, np.ndarray]:
    """``sigma_qp`` and ``sigma_ratio`` on the rows ``mu x sigma`` for label ``y``.

    One vectorized kernel call for the whole tile (the kernel's value at a point does not depend
    on the other points of a call, so tiling never changes a bit). Returns arrays of shape
    ``(len(mu), len(sigma))``: ``sigma_qp`` (eq. (7)) and ``sigma_qp / sigma_ep`` with
    ``sigma_ep`` the tilted standard deviation of :func:`qpinfer.tilted_moments`.
    """
    import qpinfer

    mu_grid, sigma_grid = np.meshgrid(
        np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64), indexing="ij"
    )
    with np.errstate(all="ignore"):  # the tile's final values are checked for finiteness
        sq = qpinfer.sigma_qp(likelihood, mu_grid, sigma_grid, y)
        _, s_ep = qpinfer.tilted_moments(likelihood, mu_grid, sigma_grid, y)
    return {"sigma_qp": sq, "sigma_ratio": sq / s_ep}


def mirror_rows(grid: GridSpec, k: int) -> tuple[tuple[int, int], np.ndarray]:
    """Source rows ``[n-b, n-a)`` (to be reversed) for tile ``k`` and which rows mirror exactly."""
    a, b = grid.tile_rows(k)
    mu = grid.mu_values()
    n = len(mu)
    rows = np.arange(a, b)
    exact = mu[n - 1 - rows] == -mu[rows]
    return (n - b, n - a), exact


def compute_tile(
    store: str,
    likelihood: str,
    grid_attrs: dict,
    tile_mu: int,
    iy: int,
    k: int,
    mirror_from: int | None = None,
    *_dependencies: Any,
) -> dict[str, Any]:
    """Compute tile ``(iy, k)`` and write it into ``store`` (runs on a worker).

    With ``mirror_from`` (the ``y`` index of +1, probit), rows whose mirrored ``mu`` is
    exactly representable are copied, reversed, from that slice (already in the store:
    ``_dependencies`` are the futures of the source tiles, only used for ordering).
    Returns a small report (no grid data).
    """
    t0 = time.perf_counter()
    tune_malloc()  # ~30 % more points per CPU-second (qpinfer/malloc.py)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scipy's stack
        limits: Any = contextlib.nullcontext()
    else:
        limits = threadpool_limits(1)
    grid = GridSpec.from_attrs(grid_attrs, tile_mu)
    a, b = grid.tile_rows(k)
    mu = grid.mu_values()[a:b]
    sigma = grid.sigma_values()
    y = int(grid.y[iy])
    with limits:
        if mirror_from is None:
            values = evaluate_rows(likelihood, mu, sigma, y)
            computed_rows = b - a
        else:
            src_rows, exact = mirror_rows(grid, k)
            values = {
                var: read_rows(store, var, mirror_from, src_rows)[::-1].copy() for var in DATA_VARS
            }
            todo = np.flatnonzero(~exact)
            if todo.size:
                fresh = evaluate_rows(likelihood, mu[todo], sigma, y)
                for var in DATA_VARS:
                    values[var][todo] = fresh[var]
            computed_rows = int(todo.size)
    for var in DATA_VARS:
        bad = ~np.isfinite(values[var])
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise FloatingPointError(
                f"kernel returned {values[var][i, j]!r} for {var} at y={y}, mu={mu[i]!r}, "
                f"log10_sigma={grid.log10_sigma_values()[j]!r}"
            )
    write_tile(store, iy, (a, b), values)
    return {
        "tile": (iy, k),
        "rows_computed": computed_rows,
        "rows_mirrored": (b - a) - computed_rows,
        "points_computed": computed_rows * grid.log10_sigma.n,
        "seconds": time.perf_counter() - t0,
        "pid": os.getpid(),
    }


def probe_rows(grid: GridSpec) -> list[tuple[int, int]]:
    """``(y index, mu index)`` rows the probe evaluates: a few interior rows spread over ``mu``
    for up to three labels (first, middle, last), ~6000 points in all."""
    n_y, n_mu, n_ls = grid.shape
    labels = sorted({0, n_y // 2, n_y - 1})
    per_label = int(np.clip(-(-6000 // (n_ls * len(labels))), 2, 8))
    mus = sorted({int(i) for i in np.linspace(0, n_mu - 1, per_label + 2)[1:-1].round()})
    return [(iy, i) for iy in labels for i in mus]


def probe(likelihood: str, grid: GridSpec, mirror: bool) -> tuple[str, float, bool]:
    """Kernel fingerprint, measured points/s (one core) and whether the mirror holds.

    The probe evaluates a few grid rows (:func:`probe_rows`) with the build's call unit, so
    their sha256 fingerprints the kernel: a resumed build must see the same fingerprint. Their
    timing gives the estimate (rows from several labels and ``mu`` values, since the cost per
    point varies, e.g. closed forms for ``poisson_square`` at ``y = 0``).
    """
    mu = grid.mu_values()
    sigma = grid.sigma_values()
    tune_malloc()  # as the tiles do
    evaluate_rows(likelihood, mu[:1], sigma[:2], int(grid.y[0]))  # warm-up (imports, caches)
    h = hashlib.sha256()
    points = 0
    t0 = time.perf_counter()
    for iy, i in probe_rows(grid):
        vals = evaluate_rows(likelihood, mu[i : i + 1], sigma, int(grid.y[iy]))
        points += len(sigma)
        for var in DATA_VARS:
            h.update(np.ascontiguousarray(vals[var], dtype="<f8").tobytes())
    seconds = time.perf_counter() - t0
    rate = points / max(seconds, 1e-9)
    mirror_ok = False
    if mirror:
        m = mu[len(mu) // 3 : len(mu) // 3 + 1]
        pos = evaluate_rows(likelihood, -m, sigma, 1)
        neg = evaluate_rows(likelihood, m, sigma, -1)
        mirror_ok = all(np.array_equal(pos[v], neg[v]) for v in DATA_VARS)
    return h.hexdigest(), rate, mirror_ok
