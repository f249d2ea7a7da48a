"""The v2 sigma* tables shipped inside qpinfer (package data), and how to find them.

``qptables ship`` builds every table listed in :data:`SHIPPED` into ``qpinfer/tables_data``
(bit for bit the same on every run: the kernel's results do not depend on scheduling, and the
stores record no times); ``tests/test_shipped_tables.py`` rebuilds a random sample of their tiles
and compares the bytes. The estimators' ``table=None`` uses them when no table is installed for
the likelihood (:func:`qpinfer.tables.download.install.download` installs one, and an installed or explicitly
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
    # issue #15 (boxes: qpinfer.tables.boxes.logit)
    "logit": "logit.zarr",
    "poisson_log": "poisson_log.zarr",
    # issue #15: one Student-t table per nu, built for scale 1, serving every scale
    # (boxes: qpinfer.tables.boxes.student_t; scaling: qpinfer.tables.student_t)
    "student_t(nu=4.0, scale=1.0)": "student_t-nu4.zarr",
}

DATA_DIR = Path(__file__).resolve().parents[1] / "tables_data"


def shipped_path(likelihood_name: str) -> Path | None:
    """The shipped store for a likelihood name, or ``None`` if none ships (a Student-t name of
    any scale: the store of its nu, built for scale 1)."""
    name = SHIPPED.get(likelihood_name)
    if name is None and likelihood_name.startswith("student_t"):
        from qpinfer.tables.student_t import base_name

        name = SHIPPED.get(base_name(likelihood_name))
    return None if name is None else DATA_DIR / name


@functools.cache
def open_shipped(likelihood_name: str):
    """The shipped table of a likelihood, opened once per process (validated: schema, integrity,
    verification); ``None`` if none ships. A damaged shipped file raises
    :class:`~qpinfer.tables.TableError` naming it. A Student-t name of a scale other than 1
    gets its nu's table through :class:`qpinfer.tables.student_t.ScaledTable`."""
    path = shipped_path(likelihood_name)
    if path is None:
        return None
    if likelihood_name not in SHIPPED:  # Student-t, another scale
        from qpinfer.tables.student_t import base_name, for_likelihood

        return for_likelihood(open_shipped(base_name(likelihood_name)), likelihood_name)
    from qpinfer.tables.reduced import open_reduced

    return open_reduced(path)
