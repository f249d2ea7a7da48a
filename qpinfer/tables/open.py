"""Opening a sigma* table store of either schema: :func:`~qpinfer.open_table` (what it checks is
listed in :mod:`qpinfer.tables`, the reader's front module).
"""

from __future__ import annotations

import os
from pathlib import Path

from qpinfer.tables.grid_table import SigmaTable, open_grid_table
from qpinfer.tables.reduced import ReducedTable, open_reduced
from qpinfer.tables.store import TableError, installed_by_name, read_json, tables_dir

__all__ = ["open_table"]


def open_table(
    path: str | os.PathLike, *, verify_checksums: bool | str = "lazy", interpolation: str = "linear"
) -> SigmaTable | ReducedTable:
    """Open a sigma* table store, validating its schema, completeness and chunk files.

    Parameters
    ----------
    path
        The store directory (``<likelihood>.zarr``), or the bare name of an installed table
        (``"probit-paper"`` or a likelihood such as ``"probit"``: ``tables_dir()/<name>.zarr``,
        see :func:`~qpinfer.tables.download`) when no file or directory of that name exists here.
    verify_checksums
        ``"lazy"`` (default): check each chunk's sha256 when it is first memory-mapped;
        ``True``: check every chunk now (seconds for a paper-grid store); ``False``: sizes only.
    interpolation
        v1 (grid) stores: ``"linear"`` (bilinear, the paper's; ~1e-8 at the paper's step 0.001)
        or ``"cubic"`` (bicubic Lagrange, O(h^4): ~1e-12 at step 0.001, 1e-9 at 0.01; needs one
        chunk per label, the published layout). v2 stores always use their Chebyshev cells.

    Raises
    ------
    TableError
        (a ``ValueError``) naming what was expected and what was found.

    Examples
    --------
    The probit table shipped inside qpinfer, a store of the cells layout:

    >>> import numpy as np
    >>> from importlib.resources import files
    >>> from qpinfer import open_table, sigma_qp
    >>> table = open_table(files("qpinfer") / "tables_data" / "probit.zarr")
    >>> table.likelihood
    'probit'
    >>> mu, sigma, y = np.array([0.5, -1.0]), np.array([1.0, 2.0]), np.array([1, -1])
    >>> bool(np.allclose(table.sigma_qp(mu, sigma, y), sigma_qp("probit", mu, sigma, y), rtol=1e-6))
    True
    """
    if verify_checksums not in (True, False, "lazy"):
        raise ValueError(
            f"verify_checksums must be True, False or 'lazy', got {verify_checksums!r}"
        )
    root = Path(path)
    installed = installed_by_name(path)
    if installed is not None:
        root = installed
    what = f"table {str(root)!r}"
    if not root.is_dir():
        hint = ""
        if isinstance(path, str) and "/" not in path and os.sep not in path:
            hint = (
                f" (nor an installed table {tables_dir() / (path.removesuffix('.zarr') + '.zarr')};"
                " install one with `qpinfer download NAME`)"
            )
        raise TableError(f"{what}: no such store directory{hint}")
    meta = read_json(root / "zarr.json", what)
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "group":
        raise TableError(f"{what}: expected a zarr v3 group, found {meta.get('zarr_format')!r}")
    attrs = meta.get("attributes") or {}
    if attrs.get("qp_schema_version") == 2:  # reduced coordinates (qpinfer.tables.reduced)
        return open_reduced(root)
    return open_grid_table(root, attrs, what, verify_checksums, interpolation)
