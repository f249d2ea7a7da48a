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
   directory that is not a store or a symlink is never replaced, see :mod:`qpinfer.replace`)
   -- a refused build changes nothing and starts no cluster.
2. Take the lock ``OUT.lock`` (``O_EXCL``; holds pid and host). A concurrent build into the
   same ``OUT`` is refused; a lock left by a dead process on this host is taken over.
3. Create -- or, when resuming, reopen -- the temporary store ``OUT.partial``. Resuming
   requires the same likelihood, grid, tiling and kernel output (a fingerprint of a probe
   tile); anything else is an error unless ``force`` (which starts afresh).
4. Find the finished tiles (chunk files present with the exact uncompressed size; see
   :mod:`qptables.store`) and compute only the others, with a progress bar.
5. Checksum every chunk (``attrs["checksums"]``) and verify against mpmath
   (:mod:`qptables.verify`; ``attrs["verification"]``). A failed verification leaves ``OUT``
   untouched and the partial store for inspection.
6. Publish by *copy*: write the published layout -- ONE chunk per ``(variable, y)``, chunks
   ``(1, n_mu, n_log10_sigma)``, which the reader looks up much faster than many small tiles
   -- into the sibling ``OUT.publishing`` (one dask task per ``(variable, y)``, see
   :func:`qptables.store.consolidate_store`; each tile is re-checked against its sha256 and
   each new chunk hashed), with fresh checksums and ``attrs["complete"] = True`` written last;
   then atomically rename ``OUT.publishing`` to ``OUT`` and delete ``OUT.partial``. With
   ``force`` an existing ``OUT`` store is swapped out atomically
   (:func:`qpinfer.replace.replace_store`) and deleted only after the new store is in place.
   The published store records the metadata digest ``attrs["integrity"]``
   (:mod:`qpinfer.integrity`). An interrupted publish leaves no ``OUT`` (only ``OUT.partial``
   and a stale ``OUT.publishing``, which the next run deletes and redoes from the verified
   tiles).

Bit-identity. The kernel's value at a point never depends on the other points of its call
(no batch-wide stopping tests; ``tests/test_kernel_determinism.py``), so tiling, worker count,
resuming and the probit mirror cannot change a single bit.

Probit mirror. ``sigma*(mu, sigma, -1) == sigma*(-mu, sigma, +1)`` exactly (the kernel
canonicalizes ``(mu, y) -> (y mu, +1)``, an exact negation). When both labels are built, the
``y = -1`` row at ``mu[i]`` is copied from the ``y = +1`` row at ``mu[n-1-i]`` whenever
``mu[n-1-i] == -mu[i]`` *bitwise* (so the copy is identical to computing it); other rows are
computed. :func:`qpinfer.schema.grid_axis` makes every grid whose start is a whole number of
steps (the paper grid included) exactly symmetric, so there every row is mirrored. The
property is re-checked on a
probe row at every build; if the kernel ever loses it, mirroring is switched off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self, TextIO

import numpy as np

from qpinfer.replace import ReplaceRefusedError, check_replaceable, remove_store, replace_store
from qpinfer.schema import DATA_VARS
from qptables.estimate import CONCURRENCY_FACTOR, calibrate_workers, estimate_build
from qptables.grid import GridError, GridSpec, paper_grid, validate_y
from qptables.malloc import tune_malloc
from qptables.store import (
    StoreError,
    consolidate_store,
    create_store,
    read_attrs,
    read_rows,
    scan_tiles,
    update_attrs,
    write_tile,
)
from qptables.verify import (
    DEFAULT_DPS,
    DEFAULT_SAMPLES,
    DEFAULT_TOLERANCE,
    reference_sample,
    scan_store,
)

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

log = logging.getLogger("qptables")

#: Environment for worker processes: single-threaded numerical libraries (one task per core).
SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
}
#: How long a build on an external scheduler waits for its first worker.
WORKER_WAIT_SECONDS = 600
#: Bytes of slack required on top of the chunk data (metadata, temporary files).
DISK_SLACK_BYTES = 16 * 2**20
#: Probit: the label derived by mirroring -> the label it is mirrored from.
MIRRORS = {"probit": {-1: 1}}


def _mirror_map(likelihood: str) -> dict[int, int]:
    """Labels derivable by the exact mirror ``sigma*(mu, s, -1) = sigma*(-mu, s, +1)``: probit
    and every step-noise table (one store per eps, ``step_noise(eps=...)``)."""
    if likelihood.startswith("step_noise"):
        return {-1: 1}
    return MIRRORS.get(likelihood, {})


class BuildInputError(ValueError):
    """The build was refused before doing anything (bad flag, destination, disk space...)."""


class LockError(BuildInputError):
    """Another build holds the destination's lock."""


class BuildError(RuntimeError):
    """The build failed while running (task error, verification failure...); resumable."""


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


# ----------------------------------------------------------------------------- paths & lock


def partial_path(out: str | os.PathLike) -> Path:
    """Temporary sibling the store is built in: ``OUT.partial``."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def publishing_path(out: str | os.PathLike) -> Path:
    """Sibling the published copy is written to before it is renamed to ``OUT``."""
    out = Path(out)
    return out.with_name(out.name + ".publishing")


def lock_path(out: str | os.PathLike) -> Path:
    """Lock file next to ``OUT``: ``OUT.lock``."""
    out = Path(out)
    return out.with_name(out.name + ".lock")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


#: Tokens of the locks this process holds (a lock with our pid but another token is stale).
_HELD_TOKENS: set[str] = set()


class BuildLock:
    """Exclusive lock file ``OUT.lock`` created with ``O_CREAT | O_EXCL``.

    Holds ``{"pid", "host", "started"}``. A lock whose pid is dead on this host -- or is this
    process's own pid (a re-run container with a pinned hostname, as in ``cluster/``) -- is
    stale and taken over with a warning; any other existing lock refuses the build
    (:class:`LockError`).
    """

    def __init__(self, out: str | os.PathLike) -> None:
        self.path = lock_path(out)
        self.info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "token": uuid.uuid4().hex,
        }
        self.held = False

    def _read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text() or "null")
        except (OSError, ValueError):
            return None

    def acquire(self) -> None:
        """Take the lock or raise :class:`LockError`."""
        for _attempt in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = self._read()
                if other is None:
                    # being written right now, or garbage: stale only if old
                    with contextlib.suppress(OSError):
                        if time.time() - self.path.stat().st_mtime > 30:
                            warnings.warn(
                                f"removing unreadable stale lock {self.path}", stacklevel=2
                            )
                            self.path.unlink(missing_ok=True)
                            continue
                    raise LockError(
                        f"another build holds the lock {self.path} (unreadable); if no build is "
                        f"running, delete that file"
                    ) from None
                host, pid = other.get("host"), int(other.get("pid", -1))
                # dead on this host -- or "alive" only because it is our own pid but not a
                # lock this process holds: a container re-run with the same hostname (cluster/
                # pins it) reuses pid 1, and no other process on this host has our pid
                ours = pid == os.getpid() and other.get("token") not in _HELD_TOKENS
                if host == self.info["host"] and (ours or not _pid_alive(pid)):
                    warnings.warn(
                        f"taking over stale lock {self.path} of dead process {pid} on {host}",
                        stacklevel=2,
                    )
                    self.path.unlink(missing_ok=True)
                    continue
                raise LockError(
                    f"another build into {self.path.name[: -len('.lock')]} is running: pid {pid} "
                    f"on host {host} since {other.get('started')} (lock file {self.path}); if no "
                    f"build is running there, delete the lock file"
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self.info))
            self.held = True
            _HELD_TOKENS.add(self.info["token"])
            return
        raise LockError(f"could not take the lock {self.path}")

    def release(self) -> None:
        """Remove the lock file if it is still ours."""
        if self.held:
            other = self._read()
            if other is not None and other.get("token") == self.info["token"]:
                self.path.unlink(missing_ok=True)
            self.held = False
            _HELD_TOKENS.discard(self.info["token"])

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# ----------------------------------------------------------------------------- the tile kernel


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


def _mirror_rows(grid: GridSpec, k: int) -> tuple[tuple[int, int], np.ndarray]:
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
    tune_malloc()  # ~30 % more points per CPU-second (qptables/malloc.py)
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
            src_rows, exact = _mirror_rows(grid, k)
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


# ----------------------------------------------------------------------------- probe


def _probe_rows(grid: GridSpec) -> list[tuple[int, int]]:
    """``(y index, mu index)`` rows the probe evaluates: a few interior rows spread over ``mu``
    for up to three labels (first, middle, last), ~6000 points in all."""
    n_y, n_mu, n_ls = grid.shape
    labels = sorted({0, n_y // 2, n_y - 1})
    per_label = int(np.clip(-(-6000 // (n_ls * len(labels))), 2, 8))
    mus = sorted({int(i) for i in np.linspace(0, n_mu - 1, per_label + 2)[1:-1].round()})
    return [(iy, i) for iy in labels for i in mus]


def _probe(likelihood: str, grid: GridSpec, mirror: bool) -> tuple[str, float, bool]:
    """Kernel fingerprint, measured points/s (one core) and whether the mirror holds.

    The probe evaluates a few grid rows (:func:`_probe_rows`) with the build's call unit, so
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
    for iy, i in _probe_rows(grid):
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


# ----------------------------------------------------------------------------- helpers


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PiB"


def _human_seconds(s: float) -> str:
    s = float(s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _published_nbytes(grid: GridSpec) -> int:
    """Bytes of the published copy (one chunk per (variable, y), no edge padding)."""
    return len(DATA_VARS) * grid.n_points * 8


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).stat().st_size
    return total


def _check_writable(directory: Path, out: Path) -> None:
    if not directory.exists():
        raise BuildInputError(f"OUT: directory {directory} of {out} does not exist")
    if not directory.is_dir():
        raise BuildInputError(f"OUT: {directory} (parent of {out}) is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".qptables-probe-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise BuildInputError(
            f"OUT: destination {directory} is not writable ({exc.strerror})"
        ) from None


def _resolve_grid(likelihood: str, grid: GridSpec | str | None, y_max: int | None) -> GridSpec:
    if grid is None or (isinstance(grid, str) and grid == "paper"):
        return paper_grid(likelihood, y_max)
    if isinstance(grid, str):
        raise GridError(f"--grid: unknown preset {grid!r}; expected 'paper'")
    if not isinstance(grid, GridSpec):
        raise GridError(f"grid must be a GridSpec or 'paper', got {type(grid).__name__}")
    return grid


def _build_info(likelihood: str, grid: GridSpec, fingerprint: str, mirror: bool) -> dict:
    from qpinfer.step_noise import parse_name

    params = {}
    eps = parse_name(likelihood)
    if eps is not None:  # one store per eps: recorded beside the name, checked by open_table
        params["eps"] = eps
    return {
        "likelihood": likelihood,
        "likelihood_params": params,
        "grid": grid.to_attrs(),
        "tile_mu": int(grid.tile_mu),
        "kernel_fingerprint": fingerprint,
        "kernel_call_unit": "one mu row (all log10_sigma) per qpinfer.sigma_qp call",
        "probit_mirror": bool(mirror),
        "tool": "qptables build",
    }


def _same_build(old: dict, new: dict) -> str | None:
    """None if ``old`` (attrs["build"] of a partial store) can be resumed as ``new``."""
    if not old:
        return "it has no build record"
    for key in ("likelihood", "grid", "tile_mu", "kernel_fingerprint"):
        if old.get(key) != new.get(key):
            return f"its {key} is {old.get(key)!r}, this build's is {new.get(key)!r}"
    return None


@contextlib.contextmanager
def _client(scheduler: str | None, workers: int | None) -> Iterator[Any]:
    """A dask.distributed client: on ``scheduler`` or on a new LocalCluster of ``workers``."""
    from distributed import Client, LocalCluster

    cluster = None
    if scheduler is None:
        n = workers or os.cpu_count() or 1
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            # task errors reach the user once, summarised by the build (BuildError), not as the
            # workers' and scheduler's logged tracebacks
            silence_logs=logging.CRITICAL,
            env=dict(SINGLE_THREAD_ENV),
        )
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout="20s")
        except OSError as exc:
            raise BuildInputError(f"--scheduler: cannot connect to {scheduler!r} ({exc})") from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _dashboard(client: Any) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:  # noqa: BLE001 - no dashboard service is not an error
        return None
    info = client.scheduler_info()
    services = info.get("services", {}) if isinstance(info, dict) else {}
    if "dashboard" not in services or not link:
        return None
    import importlib.util

    if importlib.util.find_spec("bokeh") is None:
        link += " (the status pages need bokeh installed where the scheduler runs)"
    return link


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
        Failed while running; ``OUT`` is untouched and re-running resumes.
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
        grid = _resolve_grid(likelihood, grid, y_max)
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
    _check_writable(out.parent, out)
    _check_destinations(out, force)

    # cheap disk check before anything allocates or computes (the precise one, which counts
    # the reusable chunks of an unfinished build, follows once the partial store is scanned)
    # (the tiles plus, while publishing, their one-chunk-per-slice copy)
    total_bytes = grid.store_nbytes(len(DATA_VARS)) + _published_nbytes(grid)
    free = shutil.disk_usage(out.parent).free
    reusable = _tree_bytes(partial) if partial.is_dir() else 0
    if total_bytes + DISK_SLACK_BYTES > free + reusable:
        raise BuildInputError(
            f"grid (--mu/--log10-sigma/--y): the build needs {_human_bytes(total_bytes)} but "
            f"only {_human_bytes(free)} is free on {out.parent} ({grid.describe()})"
        )

    lock = BuildLock(out)
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
    _check_destinations(out, force)

    # -- 2. probe the kernel ---------------------------------------------------------------
    ys = list(grid.y)
    mirror_map = _mirror_map(likelihood)
    mirror_pairs = {
        ys.index(dst): ys.index(src) for dst, src in mirror_map.items() if dst in ys and src in ys
    }
    try:
        fingerprint, rate, mirror_ok = _probe(likelihood, grid, bool(mirror_pairs))
    except ValueError as exc:  # the kernel refuses part of the grid
        raise BuildInputError(f"grid (--mu/--log10-sigma/--y): {exc}") from None
    if mirror_pairs and not mirror_ok:
        warnings.warn(
            "the kernel's probit mirror symmetry is not bit-exact; computing both labels",
            stacklevel=2,
        )
        mirror_pairs = {}
    info = _build_info(likelihood, grid, fingerprint, bool(mirror_pairs))

    # -- 3. reuse or (re)create the partial store -----------------------------------------------
    done: set[tuple[int, int]] = set()
    if partial.exists():
        try:
            reason = _same_build(read_attrs(partial).get("build", {}), info)
        except StoreError as exc:
            reason = str(exc)
        if reason is not None:
            if not force:
                raise BuildInputError(
                    f"{partial} holds an unfinished build that cannot be resumed by this one "
                    f"({reason}); re-run with the original options, or pass --force to discard it"
                )
            if dry_run:
                say(f"  (a real run would discard the incompatible {partial}: {reason})")
            else:
                say(f"discarding incompatible unfinished build {partial} ({reason})")
                remove_store(partial, what="OUT (its unfinished build)")
        else:
            done = scan_tiles(partial, grid, clean=not dry_run)

    # -- 4. disk space -------------------------------------------------------------------------
    chunk_bytes = grid.chunk_nbytes()
    total_bytes = grid.store_nbytes(len(DATA_VARS))
    need = (
        total_bytes
        - len(done) * len(DATA_VARS) * chunk_bytes
        + _published_nbytes(grid)
        + DISK_SLACK_BYTES
    )
    free = shutil.disk_usage(out.parent).free
    if need > free:
        raise BuildInputError(
            f"grid (--mu/--log10-sigma/--y): the store needs {_human_bytes(need)} more on "
            f"{out.parent} but only {_human_bytes(free)} is free ({grid.describe()})"
        )

    # -- 5. plan ---------------------------------------------------------------------------
    todo = [t for t in grid.tiles() if t not in done]
    n_ls = grid.log10_sigma.n
    est_points = 0
    for iy, k in todo:
        a, b = grid.tile_rows(k)
        if iy in mirror_pairs:
            est_points += int((~_mirror_rows(grid, k)[1]).sum()) * n_ls
        else:
            est_points += (b - a) * n_ls
    say(f"qptables build {likelihood} -> {out}")
    say(f"  grid: {grid.describe()}")
    if mirror_pairs:
        n_rows = grid.mu.n
        exact = int((grid.mu_values()[::-1] == -grid.mu_values()).sum())
        say(f"  probit mirror: y=-1 copied from y=+1 on {exact}/{n_rows} mu rows (exact negation)")
    say(
        f"  store: {_human_bytes(_published_nbytes(grid))} on disk when done "
        f"({len(DATA_VARS)} variables x {len(grid.y)} uncompressed chunks, one per (variable, y)); "
        f"built in {len(DATA_VARS)} x {grid.n_tiles} tiles of {_human_bytes(chunk_bytes)} "
        f"({_human_bytes(total_bytes)}, deleted once published); {_human_bytes(free)} free"
    )
    say(f"  tiles: {grid.n_tiles} total, {len(done)} already done, {len(todo)} to compute")

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

    # staging directories of killed builds (we hold the lock, so none is in use)
    for name in (partial.name, publishing_path(out).name):
        for stale in partial.parent.glob(name + ".new-*"):
            shutil.rmtree(stale, ignore_errors=True)
    stale_pub = publishing_path(out)
    if stale_pub.exists() or stale_pub.is_symlink():
        say(f"  deleting {stale_pub.name} left by an interrupted publish")
        remove_store(stale_pub, what="OUT (its publishing copy)")
    if not partial.exists():
        staging = partial.with_name(partial.name + f".new-{os.getpid()}")
        create_store(
            staging, likelihood, grid, package_version=qpinfer.__version__, build_info=info
        )
        os.replace(staging, partial)

    # -- 6. compute -------------------------------------------------------------------------
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(_client(scheduler, workers))
        nthreads = client.nthreads()
        if not nthreads:
            say(f"  waiting up to {WORKER_WAIT_SECONDS} s for workers to connect ...")
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
            except (TimeoutError, OSError) as exc:
                raise BuildError(
                    f"--scheduler: no dask worker connected within {WORKER_WAIT_SECONDS} s "
                    f"({exc!r}); start workers (dask worker ADDRESS --nthreads 1) and re-run"
                ) from None
            time.sleep(1.0)  # let the other workers of a starting cluster join too
            nthreads = client.nthreads()
        n_workers = max(1, sum(nthreads.values()))
        say(f"  workers: {n_workers} ({'scheduler ' + client.scheduler.address})")
        if any(n > 1 for n in nthreads.values()):
            say(
                "  note: some workers run several threads; one single-threaded worker process "
                "per core (dask worker --nthreads 1, OMP_NUM_THREADS=1) is faster for this kernel"
            )
        link = _dashboard(client)
        if link:
            say(f"  dashboard: {link}")
        visible = client.run(os.path.isdir, str(partial))
        if not all(visible.values()):
            bad = [w for w, ok in visible.items() if not ok]
            raise BuildInputError(
                f"--scheduler: workers {bad} cannot see {partial}; OUT must be on a file system "
                f"shared by the client and all workers"
            )
        # calibrated on all workers at once (also warms them up); see qptables.estimate
        n_verify = len(grid.y) * 8 + samples
        rate, mp_s = calibrate_workers(
            client, likelihood, grid, rate, points=est_points, n_verify=n_verify, dps=verify_dps
        )
        est = estimate_build(
            grid, points=est_points, tiles=len(todo), n_verify=n_verify, n_workers=n_workers,
            rate=rate, mpmath_seconds=mp_s,
        )  # fmt: skip
        elapsed = time.perf_counter() - t_start
        say(f"  estimate: {_human_seconds(elapsed + est.total)} in all, {est.describe()}")
        t_compute = time.perf_counter()
        reports = _run_tiles(client, partial, likelihood, grid, todo, mirror_pairs, progress)
        compute_seconds = time.perf_counter() - t_compute

        missing = [t for t in grid.tiles() if t not in scan_tiles(partial, grid)]
        if missing:
            raise BuildError(
                f"{len(missing)} tiles still missing after the run, e.g. {missing[0]}; re-run "
                f"to resume"
            )

        # -- 7. checksums + verification ----------------------------------------------------
        say(f"  computed {len(todo)} tiles, reused {len(done)}; checksumming and verifying ...")
        scan = scan_store(partial, client=client, check_checksums=False)
        checksums = scan.pop("checksums")
        update_attrs(partial, consolidate=False, checksums=checksums)
        ref = reference_sample(
            partial,
            samples=samples,
            tolerance=tolerance,
            seed=seed,
            dps=verify_dps,
            client=client,
            progress=progress,
        )
        report = dict(ref)
        report["reference_passed"] = ref["passed"]
        report["scan"] = scan
        report["passed"] = bool(ref["passed"] and scan["passed"])
        report["checked"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
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
        update_attrs(partial, verification=report)  # the partial never says complete
        if not report["passed"]:
            raise BuildError(
                f"verification failed, not published (kept in {partial}): "
                f"max relative error {report['max_rel_error']:.3g} vs tolerance {tolerance:g}"
                f"{'' if scan['passed'] else '; ' + scan['message']}"
                + (f"; worst point {report['worst']}" if "worst" in report else "")
            )
        say(
            f"  verified: {report['points']} mpmath points, max rel error "
            f"{report['max_rel_error']:.2e} (tolerance {tolerance:g})"
        )

        # -- 8. publish: a one-chunk-per-(variable, y) copy, renamed into place ------------------
        publishing = publishing_path(out)
        say(f"  publishing: one chunk per (variable, y) into {publishing.name} ...")
        try:
            consolidate_store(partial, publishing, client=client)
        except BaseException as exc:
            shutil.rmtree(publishing, ignore_errors=True)
            if isinstance(exc, StoreError | OSError):
                raise BuildError(
                    f"publishing failed, nothing published ({exc}); re-run to resume"
                ) from exc
            raise
    _publish(publishing, out, force)
    shutil.rmtree(partial, ignore_errors=True)
    result.published = True
    result.seconds = time.perf_counter() - t_start
    say(
        f"  published {out} in {_human_seconds(result.seconds)} (estimated "
        f"{_human_seconds(elapsed + est.total)}; tiles {_human_seconds(compute_seconds)})"
    )
    return result


def _run_tiles(
    client: Any,
    partial: Path,
    likelihood: str,
    grid: GridSpec,
    todo: list[tuple[int, int]],
    mirror_pairs: dict[int, int],
    progress: bool,
) -> list[dict[str, Any]]:
    """Submit one task per tile (mirror tiles after their sources); wait with a progress bar."""
    from distributed import as_completed

    token = uuid.uuid4().hex[:8]
    grid_attrs = grid.to_attrs()
    todo_set = set(todo)
    futures: dict[tuple[int, int], Any] = {}
    ordered = sorted(todo, key=lambda t: (t[0] in mirror_pairs, t))
    for iy, k in ordered:
        deps = []
        src = mirror_pairs.get(iy)
        if src is not None:
            (lo, hi), _exact = _mirror_rows(grid, k)
            for kk in range(lo // grid.tile_mu, (hi - 1) // grid.tile_mu + 1):
                if (src, kk) in todo_set:
                    deps.append(futures[(src, kk)])
        futures[(iy, k)] = client.submit(
            compute_tile,
            str(partial),
            likelihood,
            grid_attrs,
            grid.tile_mu,
            iy,
            k,
            src,
            *deps,
            key=f"qptile-{token}-{iy}-{k}",
            pure=False,
            retries=2,
            priority=0 if src is not None else 1,
        )
    if not futures:
        return []
    reports = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(futures), unit="tile", desc="tiles", file=sys.stderr)
    try:
        for fut in as_completed(list(futures.values())):
            if fut.status == "error":
                exc = fut.exception()
                iy, k = (int(p) for p in str(fut.key).rsplit("-", 2)[1:])
                raise BuildError(
                    f"the task of tile {k + 1}/{grid.tiles_per_y} of y={grid.y[iy]} failed: "
                    f"{type(exc).__name__}: {exc}; the other tiles are kept, re-run to resume"
                ) from exc
            reports.append(fut.result())
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        for fut in futures.values():
            fut.cancel()
    return reports


def _publish(partial: Path, out: Path, force: bool) -> None:
    """Put ``partial`` (the finished ``OUT.publishing`` copy) at ``out`` atomically with
    :func:`qpinfer.replace.replace_store`: an existing ``out`` (``force``; a table store only)
    is deleted only after the new store is in place."""
    if (out.exists() or out.is_symlink()) and not force:
        raise BuildError(f"{out} appeared during the build; not replaced (pass --force)")
    try:
        replace_store(partial, out, what="OUT")
    except ReplaceRefusedError as exc:
        raise BuildError(f"not published ({exc}); the new store is kept in {partial}") from None
    except OSError as exc:
        raise BuildError(f"could not publish {partial} as {out}: {exc}") from exc


def _check_destinations(out: Path, force: bool) -> None:
    """Refuse, before any work, a build whose ``OUT`` exists without ``force``, or whose
    ``OUT`` (with ``force``), ``OUT.partial`` or ``OUT.publishing`` holds something that is not
    a table store of this package (:func:`qpinfer.replace.check_replaceable`): such paths are
    never replaced or deleted."""
    try:
        if out.exists() or out.is_symlink():
            if not force:
                raise BuildInputError(f"OUT: {out} already exists; pass --force to replace it")
            check_replaceable(out, what="OUT")
        check_replaceable(partial_path(out), what="OUT (its unfinished build)")
        check_replaceable(publishing_path(out), what="OUT (its publishing copy)")
    except ReplaceRefusedError as exc:
        raise BuildInputError(str(exc)) from None
