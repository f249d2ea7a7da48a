"""The v2 sigma* tables shipped inside qpinfer (package data), and how to find them.

``qptables ship`` builds every table listed in :data:`SHIPPED` into ``qpinfer/tables_data``
(bit for bit the same on every run: the kernel's results do not depend on scheduling, and the
stores record no times); ``tests/tables/test_shipped_tables.py`` rebuilds a random sample of their tiles
and compares the bytes. The estimators' ``table=None`` uses them unless a table installed for
the likelihood (:func:`qpinfer.tables.remote.install.download` installs one) is at least as good
in coverage and verified error (:mod:`qpinfer.tables.choice`); an explicitly passed table always
wins.
"""

from __future__ import annotations

import functools
from pathlib import Path

from qpinfer.likelihoods.base import Likelihood
from qpinfer.likelihoods.student_t import StudentT, parse_name, student_t_name
from qpinfer.tables.reader import SigmaTableReader
from qpinfer.tables.reduced import open_reduced
from qpinfer.tables.student_t import ScaledTable, base_name

__all__ = ["SHIPPED", "open_shipped", "shipped_key", "shipped_path", "shipped_table"]

#: likelihood name -> store directory name under ``qpinfer/tables_data``
SHIPPED = {
    "probit": "probit.zarr",
    "poisson_square": "poisson_square.zarr",
    "step_noise(eps=0.2)": "step_noise-eps0.2.zarr",
    # issue #15 (boxes: qpinfer.tables.boxes.logit)
    "logit": "logit.zarr",
    "poisson_log": "poisson_log.zarr",
    # issue #15: one Student-t table per nu, built for scale 1, serving every scale
    # (boxes: qpinfer.tables.boxes.student_t; scaling: qpinfer.tables.student_t); issue #27:
    # nu = 5 beside 4 (nu = 3 does not ship: its build fails verification, 1.2e-8 against the
    # kernel, whose EP std is 5e-11 low against mpmath near s = 1e9, past its last level set)
    "student_t(nu=4.0, scale=1.0)": "student_t-nu4.zarr",
    "student_t(nu=5.0, scale=1.0)": "student_t-nu5.zarr",
}

DATA_DIR = Path(__file__).resolve().parents[1] / "tables_data"


def shipped_key(likelihood: str | Likelihood) -> str | None:
    """The key of :data:`SHIPPED` whose store serves ``likelihood`` (a likelihood object or
    name): its own, or for a Student-t likelihood of any scale the scale-1 store of its nu;
    ``None`` if none ships."""
    name = likelihood if isinstance(likelihood, str) else likelihood.name
    if name in SHIPPED:
        return name
    key = None
    if isinstance(likelihood, StudentT):
        key = base_name(likelihood)
    elif isinstance(likelihood, str):
        params = parse_name(likelihood)  # a Student-t name of another scale (None: not one)
        key = None if params is None else student_t_name(params[0], 1.0)
    return key if key in SHIPPED else None


def shipped_path(likelihood: str | Likelihood) -> Path | None:
    """The shipped store serving a likelihood object or name (:func:`shipped_key`), or
    ``None`` if none ships."""
    key = shipped_key(likelihood)
    return None if key is None else DATA_DIR / SHIPPED[key]


@functools.cache
def open_shipped(likelihood_name: str) -> SigmaTableReader | None:
    """The shipped table of a likelihood name, opened once per process (validated: schema,
    integrity, verification); ``None`` if none ships. A damaged shipped file raises
    :class:`~qpinfer.TableError` naming it. A Student-t name of a scale other than 1
    gets its nu's table through :class:`qpinfer.tables.student_t.ScaledTable`
    (:func:`shipped_table`)."""
    if likelihood_name in SHIPPED:
        return open_reduced(DATA_DIR / SHIPPED[likelihood_name])
    params = parse_name(likelihood_name)  # a Student-t name of another scale (None: not one)
    return None if params is None else shipped_table(StudentT(*params))


def shipped_table(likelihood: Likelihood) -> SigmaTableReader | None:
    """The shipped table serving a likelihood object (its store opened once per process by
    :func:`~qpinfer.tables.shipped.open_shipped`), a Student-t likelihood of another scale answered
    by its nu's scale-1 table through a :class:`~qpinfer.tables.student_t.ScaledTable` that holds
    this very object; ``None`` if none ships."""
    key = shipped_key(likelihood)
    if key is None:
        return None
    table = open_shipped(key)
    return table if key == likelihood.name else ScaledTable(table, likelihood)
