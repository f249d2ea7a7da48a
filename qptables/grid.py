"""Grid specifications for sigma* lookup tables of the grid layout (Zhang et al. (2020), App. J).

A table covers the cavity parameters ``mu`` (linear scale), ``log10_sigma`` (``sigma`` on a
log10 scale) and the observed label ``y``. Axis values follow the store contract
(:func:`qpinfer.tables.schema.grid_axis`): ``(i0 + arange(n)) * step`` (exactly symmetric) with
``n = round((stop - start) / step) + 1``, both ends inclusive.

The grid is split into *tiles*: one tile is one zarr chunk of shape
``(1, tile_mu, n_log10_sigma)`` -- ``tile_mu`` consecutive full rows of one ``y`` slice.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from qpinfer.tables.schema import grid_axis

__all__ = [
    "DEFAULT_POISSON_Y_MAX",
    "LOG10_SIGMA_RANGE",
    "PAPER_LOG10_SIGMA",
    "PAPER_MU",
    "TARGET_TILE_POINTS",
    "AxisSpec",
    "GridError",
    "GridSpec",
    "default_tile_mu",
    "paper_grid",
    "validate_y",
]

#: The paper's ``mu`` axis: -10 to 10 in steps of 0.001 (20001 values).
PAPER_MU = (-10.0, 10.0, 0.001)
#: The paper's ``log10 sigma`` axis: -1 to 1 in steps of 0.001 (2001 values).
PAPER_LOG10_SIGMA = (-1.0, 1.0, 0.001)
#: Default largest count for the ``poisson_square`` paper preset (``y = 0..y_max``).
DEFAULT_POISSON_Y_MAX = 10
#: Largest ``--y-max`` accepted: the labels are listed before the disk space is counted.
MAX_POISSON_Y_MAX = 100_000
#: Points per tile the default tiling aims for: ~3 s at the kernel's target ~50k points/s/core
#: (~4 s at the ~35k measured so far); larger tiles mean fewer chunk files for the reader.
TARGET_TILE_POINTS = 150_000
#: Tiles per ``y`` slice the default tiling aims for at least (so small grids still give a
#: useful progress bar and some parallelism).
MIN_TILES_PER_SLICE = 16
#: ``log10 sigma`` values whose ``sigma = 10**x`` is a normal, finite float64.
LOG10_SIGMA_RANGE = (sys.float_info.min_10_exp, sys.float_info.max_10_exp)
#: Largest number of values allowed on one axis (guards against absurd steps before any
#: array is allocated).
MAX_AXIS_POINTS = 10**8


class GridError(ValueError):
    """An invalid grid specification; the message names the offending option."""


@dataclass(frozen=True)
class AxisSpec:
    """One inclusive, evenly spaced axis ``start, start + step, ..., stop``.

    Parameters
    ----------
    start, stop, step
        Range ends (both included) and spacing; ``step > 0`` and ``start < stop``, and
        ``stop - start`` must be a whole number of steps.
    name
        Axis name used in error messages (``"mu"`` or ``"log10_sigma"``); the matching
        command-line flag is ``--mu`` / ``--log10-sigma``.
    """

    start: float
    stop: float
    step: float
    name: str = "axis"

    def __post_init__(self) -> None:
        flag = "--" + self.name.replace("_", "-")
        where = f"{flag} START STOP STEP"
        vals = []
        for label in ("start", "stop", "step"):
            raw = getattr(self, label)
            try:
                v = float(raw)
            except (TypeError, ValueError):
                raise GridError(f"{where}: {label} must be a number, got {raw!r}") from None
            if not math.isfinite(v):
                raise GridError(f"{where}: {label} must be finite, got {v!r}")
            vals.append(v)
        start, stop, step = vals
        if step <= 0:
            raise GridError(f"{where}: step must be > 0, got {step!r}")
        if start >= stop:
            raise GridError(f"{where}: start must be < stop, got start={start!r} stop={stop!r}")
        if self.name == "log10_sigma" and not (
            LOG10_SIGMA_RANGE[0] <= start and stop <= LOG10_SIGMA_RANGE[1]
        ):
            raise GridError(
                f"{where}: log10 sigma must lie in [{LOG10_SIGMA_RANGE[0]}, "
                f"{LOG10_SIGMA_RANGE[1]}] (sigma = 10**log10_sigma must be a positive, finite "
                f"float64), got start={start!r} stop={stop!r}"
            )
        steps = (stop - start) / step
        if not math.isfinite(steps) or steps + 1 > MAX_AXIS_POINTS:
            raise GridError(
                f"{where}: {steps:.4g} steps is too many (at most {MAX_AXIS_POINTS - 1} per axis)"
            )
        if abs(steps - round(steps)) > 1e-6 * max(1.0, abs(steps)):
            raise GridError(
                f"{where}: stop - start = {stop - start!r} is not a whole number of steps of "
                f"{step!r} (ranges include both ends)"
            )
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "step", step)

    @property
    def n(self) -> int:
        """Number of values on the axis (both ends included)."""
        return round((self.stop - self.start) / self.step) + 1

    def values(self) -> np.ndarray:
        """The axis values, exactly as the store contract defines them."""
        return grid_axis(self.start, self.stop, self.step)

    def as_list(self) -> list[float]:
        """``[start, stop, step]`` as recorded in the store's ``grid`` attribute."""
        return [self.start, self.stop, self.step]


def _is_step_noise(likelihood: str) -> bool:
    return isinstance(likelihood, str) and likelihood.startswith("step_noise")


def validate_y(likelihood: str, y: Iterable[int]) -> tuple[int, ...]:
    """Check the labels ``y`` for ``likelihood`` and return them sorted ascending.

    ``probit`` accepts ``-1`` and ``+1``; ``poisson_square`` accepts counts ``0, 1, 2, ...``;
    any other likelihood accepts integers. Raises :class:`GridError` naming ``--y``.
    """
    out: list[int] = []
    for raw in y:
        try:
            fv = float(raw)
        except (TypeError, ValueError):
            raise GridError(f"--y: labels must be integers, got {raw!r}") from None
        if not math.isfinite(fv) or fv != int(fv):
            raise GridError(f"--y: labels must be integers, got {raw!r}")
        out.append(int(fv))
    if not out:
        raise GridError("--y: at least one label is required")
    if len(set(out)) != len(out):
        raise GridError(f"--y: duplicate labels in {out}")
    if likelihood == "probit" or _is_step_noise(likelihood):
        bad = [v for v in out if v not in (-1, 1)]
        if bad:
            raise GridError(f"--y: {likelihood} labels must be -1 or +1, got {bad}")
    elif likelihood == "poisson_square":
        bad = [v for v in out if v < 0]
        if bad:
            raise GridError(f"--y: poisson_square labels are counts 0, 1, 2, ..., got {bad}")
    return tuple(sorted(out))


def default_tile_mu(n_mu: int, n_log10_sigma: int) -> int:
    """Rows of ``mu`` per tile for a grid of ``n_mu x n_log10_sigma`` points per ``y``.

    Aims for :data:`TARGET_TILE_POINTS` points per tile (~3 s of kernel time at ~50k points/s)
    but at least :data:`MIN_TILES_PER_SLICE` tiles per ``y`` slice. Depends on the grid only
    (never on the number of workers), so a resumed build uses the same tiling. The paper grid
    (20001 x 2001) gets 75 rows = 150075 points per tile and 267 tiles per label.
    """
    by_points = max(1, round(TARGET_TILE_POINTS / max(1, n_log10_sigma)))
    by_count = max(1, math.ceil(n_mu / MIN_TILES_PER_SLICE))
    return int(min(by_points, by_count))


def _axis(value: AxisSpec | Sequence[float], name: str) -> AxisSpec:
    if isinstance(value, AxisSpec):
        return value if value.name == name else AxisSpec(value.start, value.stop, value.step, name)
    try:
        start, stop, step = value
    except (TypeError, ValueError):
        flag = "--" + name.replace("_", "-")
        raise GridError(f"{flag}: expected START STOP STEP, got {value!r}") from None
    return AxisSpec(start, stop, step, name)


@dataclass(frozen=True)
class GridSpec:
    """The full grid of one table: ``y`` labels x ``mu`` axis x ``log10_sigma`` axis.

    Parameters
    ----------
    mu, log10_sigma
        :class:`AxisSpec` or ``(start, stop, step)`` triples (inclusive ranges).
    y
        Integer labels; stored sorted ascending. Validate them against a likelihood with
        :meth:`validated_for`.
    tile_mu
        Rows of ``mu`` per tile/chunk; ``None`` chooses :func:`~qptables.grid.default_tile_mu`.
    """

    mu: AxisSpec
    log10_sigma: AxisSpec
    y: tuple[int, ...]
    tile_mu: int | None = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", _axis(self.mu, "mu"))
        object.__setattr__(self, "log10_sigma", _axis(self.log10_sigma, "log10_sigma"))
        object.__setattr__(self, "y", validate_y("", self.y))
        if self.tile_mu is None:
            object.__setattr__(self, "tile_mu", default_tile_mu(self.mu.n, self.log10_sigma.n))
        else:
            t = self.tile_mu
            if isinstance(t, bool) or not isinstance(t, int | np.integer) or t < 1:
                raise GridError(f"--tile-mu: must be a positive integer, got {t!r}")
            object.__setattr__(self, "tile_mu", int(min(t, self.mu.n)))

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_attrs(cls, grid: dict, tile_mu: int | None = None) -> GridSpec:
        """Rebuild a grid from a store's ``grid`` attribute (and ``tile_mu`` attribute)."""
        return cls(tuple(grid["mu"]), tuple(grid["log10_sigma"]), tuple(grid["y"]), tile_mu)

    def to_attrs(self) -> dict:
        """The ``grid`` attribute: ``{"mu": [start, stop, step], "log10_sigma": [...], "y":
        [...]}``."""
        return {
            "mu": self.mu.as_list(),
            "log10_sigma": self.log10_sigma.as_list(),
            "y": list(self.y),
        }

    def validated_for(self, likelihood: str) -> GridSpec:
        """Return ``self`` after checking the labels are valid for ``likelihood``."""
        validate_y(likelihood, self.y)
        return self

    # ----------------------------------------------------------------- sizes
    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n_y, n_mu, n_log10_sigma)``."""
        return (len(self.y), self.mu.n, self.log10_sigma.n)

    @property
    def n_points(self) -> int:
        """Grid points over all labels."""
        a, b, c = self.shape
        return a * b * c

    @property
    def chunk_shape(self) -> tuple[int, int, int]:
        """Zarr chunk (= tile) shape ``(1, tile_mu, n_log10_sigma)``."""
        assert self.tile_mu is not None
        return (1, self.tile_mu, self.log10_sigma.n)

    @property
    def tiles_per_y(self) -> int:
        """Tiles (chunks) per ``y`` slice."""
        assert self.tile_mu is not None
        return -(-self.mu.n // self.tile_mu)

    @property
    def n_tiles(self) -> int:
        """Tiles (chunks) per data variable."""
        return len(self.y) * self.tiles_per_y

    def chunk_nbytes(self, itemsize: int = 8) -> int:
        """Bytes of one uncompressed chunk file (edge chunks are stored full size)."""
        a, b, c = self.chunk_shape
        return a * b * c * itemsize

    def store_nbytes(self, n_vars: int = 2, itemsize: int = 8) -> int:
        """Bytes of all chunk files of ``n_vars`` data variables (metadata excluded)."""
        return n_vars * self.n_tiles * self.chunk_nbytes(itemsize)

    def tiles(self) -> list[tuple[int, int]]:
        """All tiles as ``(y_index, mu_chunk_index)`` pairs, ``y`` slices in order."""
        return [(iy, k) for iy in range(len(self.y)) for k in range(self.tiles_per_y)]

    def tile_rows(self, k: int) -> tuple[int, int]:
        """``mu`` row range ``[start, stop)`` covered by tile ``k`` (clipped at the edge)."""
        assert self.tile_mu is not None
        a = k * self.tile_mu
        return a, min(a + self.tile_mu, self.mu.n)

    # ----------------------------------------------------------------- values
    def mu_values(self) -> np.ndarray:
        """``mu`` coordinate values."""
        return self.mu.values()

    def log10_sigma_values(self) -> np.ndarray:
        """``log10_sigma`` coordinate values."""
        return self.log10_sigma.values()

    def sigma_values(self) -> np.ndarray:
        """Cavity standard deviations ``10 ** log10_sigma`` passed to the kernel."""
        return np.power(10.0, self.log10_sigma_values())

    def describe(self) -> str:
        """One-line human-readable summary."""
        m, s = self.mu, self.log10_sigma
        return (
            f"y={list(self.y)}; mu {m.start:g}..{m.stop:g} step {m.step:g} ({m.n}); "
            f"log10_sigma {s.start:g}..{s.stop:g} step {s.step:g} ({s.n}); "
            f"{self.n_points:,} points in {self.n_tiles:,} tiles of {self.chunk_shape[1]}x"
            f"{self.chunk_shape[2]}"
        )


def paper_grid(likelihood: str, y_max: int | None = None) -> GridSpec:
    """The grid of Zhang et al. (2020), Appendix J: mu in [-10, 10], log10 sigma in [-1, 1], both step 0.001.

    Labels: ``y = (-1, +1)`` for probit; ``y = 0..y_max`` for ``poisson_square`` (``y_max``
    defaults to :data:`~qptables.grid.DEFAULT_POISSON_Y_MAX`); other likelihoods need explicit
    ``--y``.
    """
    if likelihood == "probit" or _is_step_noise(likelihood):
        y: tuple[int, ...] = (-1, 1)
    elif likelihood == "poisson_square":
        ymax = DEFAULT_POISSON_Y_MAX if y_max is None else y_max
        if (
            isinstance(ymax, bool)
            or not isinstance(ymax, int | np.integer)
            or not 0 <= ymax <= MAX_POISSON_Y_MAX
        ):
            raise GridError(
                f"--y-max: must be an integer in [0, {MAX_POISSON_Y_MAX}], got {ymax!r}"
            )
        y = tuple(range(int(ymax) + 1))
    else:
        raise GridError(f"--grid paper: no default labels for likelihood {likelihood!r}; pass --y")
    return GridSpec(PAPER_MU, PAPER_LOG10_SIGMA, y)
