"""The v2 sigma* tables shipped inside qpinfer (package data), and how to find them.

``qptables ship`` builds every table listed in :data:`SHIPPED` into ``qpinfer/tables_data``
(bit for bit the same on every run: the kernel's results do not depend on scheduling, and the
stores record no times); ``tests/test_shipped_tables.py`` rebuilds a random sample of their tiles
and compares the bytes. The estimators' ``table=None`` uses them when no table is installed for
the likelihood (:func:`qpinfer.download.download` installs one, and an installed or explicitly
passed table wins).
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["SHIPPED", "open_shipped", "shipped_path"]

#: likelihood name -> store directory name under ``qpinfer/tables_data``
SHIPPED = {
    "probit": "probit.zarr",
    "poisson_square": "poisson_square.zarr",
    "step_noise(eps=0.2)": "step_noise-eps0.2.zarr",
    # issue #15 (boxes: qpinfer.reduced_logit)
    "logit": "logit.zarr",
    "poisson_log": "poisson_log.zarr",
}

DATA_DIR = Path(__file__).with_name("tables_data")


def shipped_path(likelihood_name: str) -> Path | None:
    """The shipped store for a likelihood name, or ``None`` if none ships."""
    name = SHIPPED.get(likelihood_name)
    return None if name is None else DATA_DIR / name


@functools.cache
def open_shipped(likelihood_name: str):
    """The shipped table of a likelihood, opened once per process (validated: schema, integrity,
    verification); ``None`` if none ships. A damaged shipped file raises
    :class:`~qpinfer.tables.TableError` naming it."""
    path = shipped_path(likelihood_name)
    if path is None:
        return None
    from qpinfer.tables_v2 import open_reduced

    return open_reduced(path)
