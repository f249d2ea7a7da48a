"""Verify a grid store (the App. J layout) against the mpmath reference (``qptables verify`` of a
grid store, through :func:`qptables.pipeline.verify.verify`).

Three checks, whose results form the ``verification`` report stored in the store's attributes:

1. **Reference sample** -- a stratified sample of grid points is recomputed with
   :func:`qptables.reference.sigma.sigma_qp_reference` (mpmath, 40 digits) and compared with the
   stored ``sigma_qp`` (sigma*, Zhang et al. (2020), eq. (7)): for every ``y`` slice the four
   corners and the four edge midpoints of the ``(mu, log10_sigma)`` rectangle, plus ``samples``
   random grid points (seeded, so repeated runs check the same points). The check passes when the
   largest relative error is at most ``tolerance`` (default 1e-10).
2. **Sanity scan** -- every stored value (edge-chunk padding excluded) is finite, ``sigma_qp >
   0`` and ``0 < sigma_ratio <= 1 + 1e-12`` (Theorem 2: sigma_qp <= sigma_ep).
3. **Checksums** -- when the store records ``attrs["checksums"]``, every chunk file's sha256 is
   recomputed and compared (the scan of 2. reads each chunk once for both).

Before any of them, :func:`verify_grid` refuses (``ValueError``, nothing written) a store whose
metadata no longer matches its integrity digest (:mod:`qpinfer.tables.integrity`), naming what
changed; a store without a digest (built before digests existed) is checked as before.

The mpmath points are evaluated in parallel (:mod:`qptables.reference.fanout`): on a dask client's
workers if one is given (as ``qptables build`` does, and ``qptables verify --scheduler``), else
in a local process pool; the report records how many points each worker computed.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qpinfer.tables.integrity import metadata_changes
from qptables.grid import GridSpec
from qptables.reference.fanout import fan_out
from qptables.store import StoreHeader, chunk_keys, read_attrs, read_header, update_attrs

__all__ = [
    "DEFAULT_DPS",
    "DEFAULT_SAMPLES",
    "DEFAULT_TOLERANCE",
    "RATIO_SLACK",
    "reference_sample",
    "sample_indices",
    "scan_store",
    "verification_report",
    "verify_grid",
]

#: Default number of random grid points checked (on top of corners and edge midpoints).
DEFAULT_SAMPLES = 24
#: Default largest accepted relative error of sigma_qp against the mpmath reference.
DEFAULT_TOLERANCE = 1e-10
#: Default working precision (decimal digits) of the mpmath reference.
DEFAULT_DPS = 40
#: Largest accepted excess of sigma_ratio over 1 (rounding of sigma_qp / sigma_ep).
RATIO_SLACK = 1e-12


def sample_indices(grid: GridSpec, samples: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """Stratified grid indices ``(iy, i_mu, i_log10_sigma)`` to check against mpmath.

    For every ``y`` slice: the 4 corners and the 4 edge midpoints; then ``samples`` points,
    stratified (seeded by ``seed``): dealt to the ``y`` slices in turn, and within a slice a
    Latin hypercube over ``(mu, log10_sigma)`` -- with ``m`` points in a slice, each of the
    ``m`` equal bands of ``mu`` and each of the ``m`` bands of ``log10_sigma`` holds exactly one
    point, so thousands of checks cover the grid evenly (no clusters, no holes). Duplicates are
    dropped.
    """
    if samples < 0:
        raise ValueError(f"--samples: must be >= 0, got {samples!r}")
    n_y, n_mu, n_ls = grid.shape
    lm, ls = n_mu - 1, n_ls - 1
    edge = [
        (0, 0),
        (0, ls),
        (lm, 0),
        (lm, ls),
        (0, ls // 2),
        (lm, ls // 2),
        (lm // 2, 0),
        (lm // 2, ls),
    ]
    points: list[tuple[int, int, int]] = []
    for iy in range(n_y):
        points.extend((iy, i, j) for i, j in edge)
    rng = np.random.default_rng(seed)
    for iy in range(n_y):
        m = samples // n_y + (iy < samples % n_y)
        if m == 0:
            continue
        i = _latin_axis(rng, m, n_mu)
        j = _latin_axis(rng, m, n_ls)
        points.extend((iy, int(a), int(b)) for a, b in zip(i, j, strict=True))
    return list(dict.fromkeys(points))


def _latin_axis(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """``m`` indices into an axis of ``n`` values, one in each of ``m`` equal bands (bands of
    whole indices ``[ceil(b n / m), ceil((b + 1) n / m))``), in random band order."""
    band = rng.permutation(m)
    if m > n:  # more points than values: bands narrower than one value
        return np.minimum(((band + rng.random(m)) * n / m).astype(int), n - 1)
    lo = -((-band * n) // m)
    hi = -((-(band + 1) * n) // m)
    return lo + (rng.random(m) * (hi - lo)).astype(int)


def reference_error(
    likelihood: str, mu: float, sigma: float, y: int, table: float, dps: int = 40
) -> tuple[float, float]:
    """``(reference sigma*, relative error of table)`` at one point, error formed in mpmath."""
    import mpmath

    from qptables.reference.sigma import sigma_qp_reference

    ref = sigma_qp_reference(likelihood, mu, sigma, y, dps=dps)
    with mpmath.workdps(dps):
        err = abs(mpmath.mpf(table) - ref) / abs(ref)
    return float(ref), float(err)


def _map(func: Callable, arg_lists: list[list], client: Any | None, workers: int | None) -> list:
    """Apply ``func`` over zipped ``arg_lists`` on a dask client, a process pool or inline."""
    return fan_out(func, arg_lists, client=client, workers=workers)[0]


def reference_sample(
    path: str | os.PathLike,
    *,
    samples: int = DEFAULT_SAMPLES,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    dps: int = DEFAULT_DPS,
    client: Any | None = None,
    workers: int | None = None,
    progress: bool = False,
    header: StoreHeader | None = None,
) -> dict[str, Any]:
    """Check 1 of the module docstring: stored sigma_qp vs mpmath on a stratified sample.

    The points run on the dask ``client``'s workers (else ``workers`` local processes), with
    a tqdm bar if ``progress``. Besides the errors, the report says how many points were
    checked and where: per label (``by_y``), the ``mu``/``log10_sigma`` ranges covered, the
    stratification, and how many points each worker (``host:pid``) computed, at what rate.
    ``header``: the store's (read here if not given).
    """
    import zarr
    from zarr.storage import LocalStore

    attrs, grid = header if header is not None else read_header(path)
    likelihood = attrs["likelihood"]
    idx = sample_indices(grid, samples, seed)
    arr = zarr.open_array(LocalStore(str(path), read_only=True), path="sigma_qp", mode="r")
    mu, ls, ys = grid.mu_values(), grid.log10_sigma_values(), grid.y
    sig = grid.sigma_values()
    table = [float(arr[iy, i, j]) for iy, i, j in idx]
    t0 = time.perf_counter()
    results, where = fan_out(
        reference_error,
        [
            [likelihood] * len(idx),
            [float(mu[i]) for _, i, _ in idx],
            [float(sig[j]) for _, _, j in idx],
            [int(ys[iy]) for iy, _, _ in idx],
            table,
            [dps] * len(idx),
        ],
        client=client,
        workers=workers,
        progress=progress,
        desc="mpmath checks",
    )
    seconds = time.perf_counter() - t0
    errs = np.array([e for _, e in results]) if results else np.zeros(0)
    errs_ok = np.where(np.isfinite(errs), errs, np.inf)
    worst = int(np.argmax(errs_ok)) if errs.size else None
    max_err = float(errs_ok.max()) if errs.size else 0.0
    report: dict[str, Any] = {
        "points": len(idx),
        "random_points": samples,
        "seed": seed,
        "reference": f"qptables.reference.sigma.sigma_qp_reference (mpmath, dps={dps})",
        "max_rel_error": max_err,
        "median_rel_error": float(np.median(errs_ok)) if errs.size else 0.0,
        "tolerance": float(tolerance),
        "seconds": round(seconds, 3),
        "passed": bool(max_err <= tolerance),
        "where": {
            "sampling": "corners and edge midpoints of every y slice + random points dealt to "
            "the y slices in turn, a Latin hypercube over (mu, log10_sigma) within each",
            "by_y": {str(int(ys[iy])): n for iy, n in Counter(p[0] for p in idx).items()},
            "mu_range": [float(mu[min(p[1] for p in idx)]), float(mu[max(p[1] for p in idx)])]
            if idx
            else [],
            "log10_sigma_range": [
                float(ls[min(p[2] for p in idx)]),
                float(ls[max(p[2] for p in idx)]),
            ]
            if idx
            else [],
            "workers": where,
            "points_per_second": round(len(idx) / seconds, 3) if seconds > 0 else None,
        },
    }
    if worst is not None:
        iy, i, j = idx[worst]
        report["worst"] = {
            "y": int(ys[iy]),
            "mu": float(mu[i]),
            "log10_sigma": float(ls[j]),
            "table": table[worst],
            "reference": results[worst][0],
            "rel_error": max_err,
        }
    return report


def _scan_chunk(
    root: str, key: str, valid_rows: int, n_cols: int, expected_sha256: str | None
) -> dict[str, Any]:
    """Read one chunk file once: its sha256, and finite count/min/max of its in-bounds rows
    (``valid_rows`` real ``mu`` rows of ``n_cols`` values; edge-chunk padding excluded)."""
    data = (Path(root) / key).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    vals = np.frombuffer(data, dtype="<f8")[: valid_rows * n_cols]
    finite = np.isfinite(vals)
    good = vals[finite]
    return {
        "key": key,
        "sha256": sha,
        "sha_ok": expected_sha256 is None or sha == expected_sha256,
        "nonfinite": int(vals.size - finite.sum()),
        "min": float(good.min()) if good.size else float("nan"),
        "max": float(good.max()) if good.size else float("nan"),
    }


def scan_store(
    path: str | os.PathLike,
    *,
    client: Any | None = None,
    workers: int | None = None,
    check_checksums: bool = True,
    header: StoreHeader | None = None,
) -> dict[str, Any]:
    """Checks 2 and 3 of the module docstring; returns a summary and the fresh checksums.
    ``header``: the store's (read here if not given)."""
    attrs, grid = header if header is not None else read_header(path)
    expected = attrs.get("checksums") or {}
    keys = chunk_keys(grid)
    rows = []
    for key in keys:
        k = int(key.split("/")[-2])
        a, b = grid.tile_rows(k)
        rows.append(b - a)
    missing = [key for key in keys if not (Path(path) / key).is_file()]
    if missing:
        return {
            "passed": False,
            "missing_chunks": len(missing),
            "message": f"{len(missing)} chunk files missing, e.g. {missing[0]}",
            "checksums": {},
        }
    t0 = time.perf_counter()
    infos = _map(
        _scan_chunk,
        [
            [str(path)] * len(keys),
            keys,
            rows,
            [grid.log10_sigma.n] * len(keys),
            [expected.get(key) if (check_checksums and expected) else None for key in keys],
        ],
        client,
        1 if client is None and workers is None else workers,
    )
    per_var: dict[str, dict[str, float]] = {}
    nonfinite = 0
    bad_sha = []
    for info in infos:
        var = info["key"].split("/")[0]
        v = per_var.setdefault(var, {"min": np.inf, "max": -np.inf})
        if np.isfinite(info["min"]):
            v["min"] = min(v["min"], info["min"])
            v["max"] = max(v["max"], info["max"])
        nonfinite += info["nonfinite"]
        if not info["sha_ok"]:
            bad_sha.append(info["key"])
    problems = []
    if nonfinite:
        problems.append(f"{nonfinite} non-finite values")
    if "sigma_qp" in per_var and not per_var["sigma_qp"]["min"] > 0:
        problems.append(f"sigma_qp min {per_var['sigma_qp']['min']!r} is not > 0")
    if "sigma_ratio" in per_var:
        lo, hi = per_var["sigma_ratio"]["min"], per_var["sigma_ratio"]["max"]
        if not (lo > 0 and hi <= 1 + RATIO_SLACK):
            problems.append(f"sigma_ratio range [{lo!r}, {hi!r}] is not within (0, 1]")
    if bad_sha:
        problems.append(f"{len(bad_sha)} chunk checksums differ, e.g. {bad_sha[0]}")
    return {
        "passed": not problems,
        "message": "; ".join(problems) or "ok",
        "nonfinite": nonfinite,
        "ranges": {k: [float(v["min"]), float(v["max"])] for k, v in per_var.items()},
        "checksums_checked": bool(check_checksums and expected),
        "checksum_mismatches": len(bad_sha),
        "seconds": round(time.perf_counter() - t0, 3),
        "checksums": {info["key"]: info["sha256"] for info in infos},
    }


def verify_grid(
    path: str | os.PathLike, *, write: bool = True, progress: bool | None = None, **options: Any
) -> dict[str, Any]:
    """Verify the grid store at ``path``; return the report and (``write=True``) store it in
    ``attrs["verification"]``.

    ``options``: those of :func:`reference_sample` -- ``samples``, ``tolerance`` (default
    :data:`DEFAULT_TOLERANCE`), ``seed``, ``dps`` (default :data:`DEFAULT_DPS`), and where the
    points run (``client``, ``workers``). The report holds ``points``, ``max_rel_error``,
    ``median_rel_error``, ``tolerance``, ``seconds`` and ``passed`` (all three checks of the
    module docstring), plus details (``worst`` point, ``scan`` summary, ``where`` the points were
    and which workers ran them). ``progress``: a progress bar of the mpmath points (default: when
    stderr is a terminal).
    """
    if progress is None:
        progress = sys.stderr.isatty()
    options = {"tolerance": DEFAULT_TOLERANCE, "dps": DEFAULT_DPS, **options}
    tolerance, dps = options["tolerance"], options["dps"]
    if not (isinstance(tolerance, float | int) and np.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"--tolerance: must be a positive number, got {tolerance!r}")
    if int(dps) < 15:
        raise ValueError(f"--verify-dps: must be >= 15, got {dps!r}")
    t0 = time.perf_counter()
    attrs = read_attrs(path)
    for name in ("grid", "tile_mu", "likelihood"):
        if name not in attrs:
            raise ValueError(f"{path}: not a qptables store (attribute {name!r} missing)")
    changes = metadata_changes(path, attrs)
    if changes:
        raise ValueError(
            f"{path}: its metadata no longer matches the integrity digest written when it was "
            f"built ({'; '.join(changes)}); not verified (nothing written) -- rebuild it"
        )
    header = StoreHeader.of(attrs)
    where = {"client": options.get("client"), "workers": options.get("workers")}
    scan = scan_store(path, header=header, **where)
    scan.pop("checksums", None)
    ref = reference_sample(path, progress=progress, header=header, **options)
    report = verification_report(ref, scan)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    if write:
        update_attrs(path, verification=report)
    return report


def verification_report(reference: dict[str, Any], scan: dict[str, Any]) -> dict[str, Any]:
    """The ``verification`` report of a store: the :func:`reference_sample` report
    ``reference`` (check 1), the :func:`scan_store` summary ``scan`` (checks 2 and 3), whether
    each and both passed, and when it was checked."""
    report = dict(reference)
    report["reference_passed"] = reference["passed"]
    report["scan"] = scan
    report["passed"] = bool(reference["passed"] and scan["passed"])
    report["checked"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report
