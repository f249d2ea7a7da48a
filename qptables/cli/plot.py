"""``qptables plot``: a PNG heatmap of sigma_qp / sigma_ep over ``(mu, log10_sigma)``.

matplotlib is an optional extra (``pip install quantile-propagation[plot]``) and is imported
only when a plot is requested.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from qptables.grid import GridSpec
from qptables.store import read_attrs

__all__ = ["MAX_PIXELS", "plot_table"]

#: Largest number of grid points drawn per axis (larger grids are subsampled by striding).
MAX_PIXELS = (2000, 1000)

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
    """Draw ``var`` (default ``sigma_ratio`` = sigma_qp / sigma_ep) of label ``y`` as a heatmap
    with ``mu`` on the x axis and ``log10 sigma`` on the y axis; save it to ``output``."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "qptables plot needs matplotlib: pip install 'quantile-propagation[plot]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import zarr
    from zarr.storage import LocalStore

    if var not in _LABELS:
        raise ValueError(f"--var: expected one of {sorted(_LABELS)}, got {var!r}")
    attrs = read_attrs(path)
    grid = GridSpec.from_attrs(attrs["grid"], attrs["tile_mu"])
    if int(y) not in grid.y:
        raise ValueError(f"--y: {y!r} is not a label of this table (labels: {list(grid.y)})")
    iy = grid.y.index(int(y))
    s_mu = max(1, -(-grid.mu.n // MAX_PIXELS[0]))
    s_ls = max(1, -(-grid.log10_sigma.n // MAX_PIXELS[1]))
    arr = zarr.open_array(LocalStore(str(path), read_only=True), path=var, mode="r")
    data = np.asarray(arr[iy, ::s_mu, ::s_ls])
    mu = grid.mu_values()[::s_mu]
    ls = grid.log10_sigma_values()[::s_ls]

    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    mesh = ax.pcolormesh(mu, ls, data.T, shading="nearest", cmap="viridis")
    cbar = fig.colorbar(mesh, ax=ax)
    cbar.set_label(_LABELS[var])
    ax.set_xlabel(r"cavity mean $\mu$")
    ax.set_ylabel(r"$\log_{10}$ cavity std $\sigma$")
    ax.set_title(f"{attrs['likelihood']}, y = {int(y)}: {_LABELS[var]}")
    output = Path(output)
    fig.savefig(output, dpi=dpi)
    plt.close(fig)
    return output
