"""``qptables plot``: a PNG heatmap of sigma_qp / sigma_ep over ``(mu, log10_sigma)``, from a
grid store's values (:func:`~qptables.cli.plot.plot_table`) or a cells store's lookups
(:func:`~qptables.cli.plot.plot_reduced`).

matplotlib is an optional extra (``pip install quantile-propagation[plot]``) and is imported
only when a plot is requested.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from qptables.grid import GridSpec
from qptables.store import read_attrs

__all__ = ["MAX_PIXELS", "CELLS_PIXELS", "CELLS_WINDOW", "plot_reduced", "plot_table"]

#: Largest number of grid points drawn per axis (larger grids are subsampled by striding).
MAX_PIXELS = (2000, 1000)
#: Points per axis of a cells store's heatmap (``mu``, ``log10 sigma``).
CELLS_PIXELS = (401, 201)
#: The ``(mu, log10 sigma)`` window drawn of a cells store by default: the paper's (App. J).
CELLS_WINDOW = ((-10.0, 10.0), (-1.0, 1.0))

_LABELS = {
    "sigma_ratio": r"$\sigma_{QP} / \sigma_{EP}$",
    "sigma_qp": r"$\sigma_{QP}$ (eq. 7)",
}


def plot_table(
    path: str | os.PathLike,
    y: int,
    output: str | os.PathLike,
    var: str = "sigma_ratio",
    dpi: int = 120,
) -> Path:
    """Draw ``var`` (default ``sigma_ratio`` = sigma_qp / sigma_ep) of label ``y`` of a
    grid store as a heatmap with ``mu`` on the x axis and ``log10 sigma`` on the y axis;
    save it to ``output``."""
    if var not in _LABELS:
        raise ValueError(f"--var: expected one of {sorted(_LABELS)}, got {var!r}")
    import zarr
    from zarr.storage import LocalStore

    attrs = read_attrs(path)
    grid = GridSpec.from_attrs(attrs["grid"], attrs["tile_mu"])
    if float(y) not in grid.y:
        raise ValueError(f"--y: {y:g} is not a label of this table (labels: {list(grid.y)})")
    iy = grid.y.index(int(y))
    s_mu = max(1, -(-grid.mu.n // MAX_PIXELS[0]))
    s_ls = max(1, -(-grid.log10_sigma.n // MAX_PIXELS[1]))
    arr = zarr.open_array(LocalStore(str(path), read_only=True), path=var, mode="r")
    data = np.asarray(arr[iy, ::s_mu, ::s_ls])
    mu = grid.mu_values()[::s_mu]
    ls = grid.log10_sigma_values()[::s_ls]
    return _draw(mu, ls, data, var, f"{attrs['likelihood']}, y = {int(y)}", output, dpi)


def plot_reduced(
    path: str | os.PathLike,
    y: float,
    output: str | os.PathLike,
    var: str = "sigma_ratio",
    mu: tuple[float, float] | None = None,
    log10_sigma: tuple[float, float] | None = None,
    dpi: int = 120,
) -> Path:
    """Draw ``var`` of label ``y`` of a cells store from its lookups
    (:meth:`~qpinfer.tables.reduced.ReducedTable.sigma_qp` or ``sigma_ratio``; outside its boxes a
    lookup is the exact kernel's value) on :data:`CELLS_PIXELS` points of the window ``mu`` x ``log10_sigma``
    (default :data:`CELLS_WINDOW`); save it to ``output``. The store is opened as the reader opens
    it (integrity, verification): a store it refuses is not drawn (``ValueError``)."""
    if var not in _LABELS:
        raise ValueError(f"--var: expected one of {sorted(_LABELS)}, got {var!r}")
    from qpinfer.tables.reduced import open_reduced

    window = []
    for flag, given, default in zip(("--mu", "--log10-sigma"), (mu, log10_sigma), CELLS_WINDOW):
        lo, hi = default if given is None else (float(given[0]), float(given[1]))
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"{flag}: expected finite START < STOP, got {lo!r} {hi!r}")
        window.append((lo, hi))
    if not -300 <= window[1][0] < window[1][1] <= 300:
        raise ValueError(f"--log10-sigma: must lie in [-300, 300], got {window[1]}")
    table = open_reduced(path)
    try:  # before the lookups
        table.likelihood_object.check_y(np.array([float(y)]))
    except ValueError as exc:
        raise ValueError(f"--y: {y:g} is not a label of {table.likelihood} ({exc})") from None
    mus = np.linspace(*window[0], CELLS_PIXELS[0])
    ls = np.linspace(*window[1], CELLS_PIXELS[1])
    m, s = np.meshgrid(mus, 10.0**ls, indexing="ij")
    label = np.full(m.shape, float(y))
    lookup = table.sigma_ratio if var == "sigma_ratio" else table.sigma_qp
    try:
        data = lookup(m, s, label)
    except ValueError as exc:
        raise ValueError(f"--y: {y:g} is not a label of {table.likelihood} ({exc})") from None
    return _draw(mus, ls, data, var, f"{table.likelihood} (cells table), y = {y:g}", output, dpi)


def _draw(mu, ls, data, var: str, title: str, output, dpi: int) -> Path:
    """The heatmap of ``data`` (``mu`` x ``ls``) with its colour bar, saved to ``output``."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "qptables plot needs matplotlib: pip install 'quantile-propagation[plot]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    mesh = ax.pcolormesh(mu, ls, data.T, shading="nearest", cmap="viridis")
    cbar = fig.colorbar(mesh, ax=ax)
    cbar.set_label(_LABELS[var])
    ax.set_xlabel(r"cavity mean $\mu$")
    ax.set_ylabel(r"$\log_{10}$ cavity std $\sigma$")
    ax.set_title(f"{title}: {_LABELS[var]}")
    output = Path(output)
    fig.savefig(output, dpi=dpi)
    plt.close(fig)
    return output
