"""Reader of precomputed sigma* tables (Zhang et al., 2020, App. J): memory-mapped, constant-time lookups.

The store layout is the contract in :mod:`qpinfer.tables.schema` (written by ``qptables``).
Published stores hold one chunk file per ``(variable, y)`` (``tile_mu == n_mu``); the reader accepts
any ``tile_mu``, but every chunk a lookup batch touches costs one Python iteration, so few chunks
keep small batches (EP's N sites per sweep) fast.

Opening (:func:`~qpinfer.open_table`) reads metadata only -- the root and array ``zarr.json`` files
and the three small coordinate arrays -- and ``stat``-s every data chunk file; it never reads table
data. Chunks are uncompressed, so each chunk file is the raw little-endian float64 block
``(tile_mu, n_log10_sigma)`` of one ``y``; a chunk is memory-mapped with :class:`numpy.memmap`
the first time a lookup needs it, and a lookup touches only the pages holding its four
neighbours.

Validation at open (refused with :class:`~qpinfer.TableError`, a ``ValueError``): zarr format 3,
schema version :data:`~qpinfer.tables.schema.SCHEMA_VERSION`, every attribute of
:data:`~qpinfer.tables.schema.REQUIRED_ATTRS`, ``complete == True``, a verification report with
``passed == True``, data variables with dims ``(y, mu, log10_sigma)``, float64, chunks
``(1, tile_mu, n_log10_sigma)`` with the bytes codec only, coordinates equal to the grid in
``attrs["grid"]`` (:func:`qpinfer.tables.schema.grid_axis`), and every
chunk file present with exactly ``tile_mu * n_log10_sigma * 8`` bytes (a truncated chunk is
caught here) and listed in ``attrs["checksums"]``.

Checksums: hashing a paper-grid store (2 x 2 x 20001 x 2001 float64, 1.3 GB) takes seconds,
which would defeat the <= 20 ms open goal. So by default (``verify_checksums="lazy"``) each chunk
file's sha256 is checked the first time it is memory-mapped (about 1 ms per 800 kB chunk, once
per process), and a mismatch raises :class:`~qpinfer.TableError` before any value from that chunk is
used. ``verify_checksums=True`` hashes every chunk at open; ``False`` trusts the sizes only.

Interpolation: the stored ``sigma_ratio = sigma_qp / sigma_ep`` (in (0, 1] by Theorem 2, and much
smoother than sigma* itself) is interpolated bilinearly in ``(mu, log10 sigma)`` on the exact
``y`` slice, and multiplied by the exact EP standard deviation (the tilted std, eq. (5)) at the
query point. Outside the grid, or for a ``y`` the table lacks, sigma* is computed exactly with
:func:`qpinfer.sigma_qp` -- not the paper's ``sigma_QP ~ sigma_EP`` fallback, which biases
variances upward -- counted in :attr:`qpinfer.SigmaTable.fallback_count`, with a one-time warning.

Holds: the reader's parts: :mod:`qpinfer.tables.reader` (:class:`SigmaTableReader`, the one
interface of every open table), :mod:`qpinfer.tables.store` (errors, paths, reading store files),
:mod:`qpinfer.tables.open` (:func:`~qpinfer.open_table`, either schema),
:mod:`qpinfer.tables.grid_store` (validating a v1 store), :mod:`qpinfer.tables.grid_table` (v1
lookups), :mod:`qpinfer.tables.reduced` with :mod:`qpinfer.tables.reduced_store` (v2 stores) and
:mod:`qpinfer.tables.scaled` (one Student-t table for every noise scale); the v2 cells
(:mod:`qpinfer.tables.chebyshev`, :mod:`qpinfer.tables.sweep_evaluator`) and coordinates
(:mod:`qpinfer.likelihoods.layout`); :mod:`qpinfer.tables.shipped` (the tables inside qpinfer);
:mod:`qpinfer.tables.choice` (which table ``table=None`` uses: shipped or installed, by
coverage and verified error);
:mod:`qpinfer.tables.replace`; :mod:`qpinfer.tables.remote` (downloads).

May import: :mod:`qpinfer.sigma` (the exact fallback), :mod:`qpinfer.likelihoods`,
:mod:`qpinfer.quadrature`, zarr's metadata files and the top-level helpers; never inference or
the estimators.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from qpinfer.tables.choice import TableChoiceWarning as TableChoiceWarning
from qpinfer.tables.grid_table import SigmaTable as SigmaTable
from qpinfer.tables.grid_table import _reopen as _reopen  # pickles of tables name it here
from qpinfer.tables.open import open_table as open_table
from qpinfer.tables.reader import SigmaTableReader as SigmaTableReader
from qpinfer.tables.reader import TableFallbackWarning as TableFallbackWarning
from qpinfer.tables.store import TableError as TableError
from qpinfer.tables.store import installed_table_path as installed_table_path
from qpinfer.tables.store import sha256_file as sha256_file
from qpinfer.tables.store import tables_dir as tables_dir

__all__ = [
    "SigmaTable",
    "SigmaTableReader",
    "TableChoiceWarning",
    "TableError",
    "TableFallbackWarning",
    "download",
    "installed_table_path",
    "open_table",
    "tables_dir",
]


def download(name: str, base_url: str | os.PathLike | None = None, **kwargs: Any) -> Path:
    """Download the prebuilt table ``name`` and install it where :func:`~qpinfer.open_table`
    finds it (``open_table(name)``, and ``open_table(likelihood)`` unless
    ``make_default=False``); see :func:`qpinfer.tables.remote.install.download` (keyword
    arguments ``force``, ``make_default``, ``retries``, ``timeout``, ``low_speed_limit``,
    ``low_speed_time``, ``stall_timeout``, ``max_bytes``, ``progress``).

    The estimators' ``table=None`` uses it only where it is at least as good as the table
    shipped inside qpinfer in coverage and verified error (:mod:`qpinfer.tables.choice`;
    ``qpinfer list`` shows which is used); ``table=name`` uses it always.

    ``base_url``: the ``http(s)://`` or ``file://`` URL of a directory holding ``manifest.json``
    (written by ``qptables publish``); default ``$QPINFER_TABLES_URL``. Returns
    ``tables_dir() / f"{name}.zarr"``.
    """
    from qpinfer.tables.remote.install import (
        download as _download,  # lazy: urllib/tarfile only when used
    )

    return _download(name, base_url, **kwargs)
