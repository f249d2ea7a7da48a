"""The table-store contract shared by the writer (``qptables``) and the reader (``qpinfer``).

One zarr v3 directory store per likelihood, openable with ``xarray.open_zarr``:

* data variable ``sigma_qp`` (float64, dims ``(y, mu, log10_sigma)``): the QP standard
  deviation sigma* of Zhang et al. (2020) eq. (7) at each cavity grid point;
* data variable ``sigma_ratio`` (float64, same dims): ``sigma_qp / sigma_ep``, bounded in (0, 1]
  by Theorem 2 and much smoother than ``sigma_qp`` itself; readers interpolate this and
  multiply by the exact EP standard deviation at the query point;
* coordinate arrays ``y`` (int64), ``mu`` and ``log10_sigma`` (float64);
* data chunks are ``(1, tile_mu, n_log10_sigma)`` -- full rows, so one chunk file holds a
  contiguous block of ``mu`` rows -- and stored *uncompressed* (bytes codec, little endian,
  C order). An uncompressed chunk has a known size, so a truncated chunk is detectable, and a
  reader can memory-map chunk files directly;
* ``tile_mu`` differs between a build and a published store: ``qptables build`` computes in
  small tiles (e.g. 75 rows on the paper grid) but *publishes* a copy with ONE chunk per
  ``(variable, y)``, so readers of a published store see ``tile_mu == n_mu`` (chunks
  ``(1, n_mu, n_log10_sigma)``; far faster lookups in small batches). The build's tiling is
  recorded in ``attrs["layout"]["build_tile_mu"]``. Readers must accept any ``tile_mu``
  (``1 <= tile_mu <= n_mu``; the last chunk is stored full size, padded with NaN);
* grid values are given by :func:`grid_axis` (``n = round((stop - start) / step) + 1`` points,
  both ends inclusive, exactly symmetric when the grid is);
* root attributes listed in :data:`REQUIRED_ATTRS`; stores published by ``qptables`` also record
  ``integrity``, one digest over the metadata that gives the numbers their meaning and the chunk
  checksums (:mod:`qpinfer.tables.integrity`); the reader refuses a store without it.
"""

from __future__ import annotations

import numpy as np

#: Version of this contract, stored as the root attribute ``qp_schema_version``.
SCHEMA_VERSION = 1
DATA_VARS = ("sigma_qp", "sigma_ratio")
DIMS = ("y", "mu", "log10_sigma")
#: Root attributes every store must have (the reader refuses a store missing one).
REQUIRED_ATTRS = (
    "qp_schema_version",  # == SCHEMA_VERSION
    "likelihood",  # e.g. "probit", "poisson_square"
    "grid",  # {"mu": [start, stop, step], "log10_sigma": [start, stop, step], "y": [...]}
    "tile_mu",  # rows of mu per chunk (== n_mu in published stores)
    "package_version",
    "created",  # ISO 8601 UTC
    "complete",  # True only once every chunk has been written and checksummed
    "checksums",  # {"sigma_qp/c/0/3/0": "<sha256 hex>", ...} for every data chunk file
    "verification",  # {"points", "max_rel_error", "median_rel_error", "tolerance", "seconds", "passed", ...}
)


def grid_axis(start: float, stop: float, step: float) -> np.ndarray:
    """Grid values from ``start`` to ``stop`` (both inclusive) in steps of ``step``.

    ``n = round((stop - start) / step) + 1`` points. When ``start`` is a whole number of steps
    (as on the paper grid, ``-10 = -10000 * 0.001``) the values are ``(i0 + arange(n)) * step``
    with integer ``i0``, so a grid symmetric about 0 is *exactly* symmetric in floating point
    (``x[n-1-k] == -x[k]``), which lets the probit mirror symmetry be used bit for bit;
    otherwise ``start + step * arange(n)``.
    """
    n = round((stop - start) / step) + 1
    i0 = round(start / step)
    if abs(start / step - i0) <= 1e-9 * max(1.0, abs(i0)):
        return (i0 + np.arange(n, dtype=np.float64)) * step
    return start + step * np.arange(n, dtype=np.float64)
