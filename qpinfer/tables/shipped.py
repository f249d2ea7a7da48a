"""The sigma* cell tables shipped inside qpinfer (package data), and how to find them.

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
from qpinfer.likelihoods.registry import get_likelihood, registered
from qpinfer.tables.reader import SigmaTableReader
from qpinfer.tables.reduced import open_reduced
from qpinfer.tables.scaled import ScaledTable

__all__ = ["SHIPPED", "open_shipped", "shipped_key", "shipped_path", "shipped_table"]

#: likelihood name -> store directory name under ``qpinfer/tables_data``
SHIPPED = {
    "probit": "probit.zarr",
    "poisson_square": "poisson_square.zarr",
    "step_noise(eps=0.2)": "step_noise-eps0.2.zarr",
    "logit": "logit.zarr",
    "poisson_log": "poisson_log.zarr",
    # one Student-t table per nu, built for scale 1, serving every scale (qpinfer.tables.scaled):
    # nu = 5 beside 4 (nu = 3 does not ship: its build fails verification, 1.2e-8 against the
    # kernel, whose EP std is 5e-11 low against mpmath near s = 1e9, past its last level set)
    "student_t(nu=4.0, scale=1.0)": "student_t-nu4.zarr",
    "student_t(nu=5.0, scale=1.0)": "student_t-nu5.zarr",
}

DATA_DIR = Path(__file__).resolve().parents[1] / "tables_data"


def _member(likelihood: str | Likelihood) -> Likelihood | None:
    """The likelihood object of an object or a name of a registered family, else ``None``."""
    if not isinstance(likelihood, str):
        return likelihood
    return get_likelihood(likelihood) if likelihood.split("(")[0] in registered() else None


def shipped_key(likelihood: str | Likelihood) -> str | None:
    """The key of :data:`SHIPPED` whose store serves ``likelihood`` (a likelihood object or
    name): its own, or that of its :meth:`~qpinfer.Likelihood.table_base` (a Student-t
    likelihood of any scale: the scale-1 store of its nu); ``None`` if none ships."""
    name = likelihood if isinstance(likelihood, str) else likelihood.name
    if name in SHIPPED:
        return name
    lik = _member(likelihood)
    base = None if lik is None else lik.table_base()
    return base.name if base is not None and base.name in SHIPPED else None


def shipped_path(likelihood: str | Likelihood) -> Path | None:
    """The shipped store serving a likelihood object or name (:func:`shipped_key`), or
    ``None`` if none ships."""
    key = shipped_key(likelihood)
    return None if key is None else DATA_DIR / SHIPPED[key]


@functools.cache
def open_shipped(likelihood_name: str) -> SigmaTableReader | None:
    """The shipped table of a likelihood name, opened once per process (validated: schema,
    integrity, verification); ``None`` if none ships. A damaged shipped file raises
    :class:`~qpinfer.TableError` naming it. The name of a likelihood whose table is another's
    (a Student-t name of a scale other than 1) gets that table through
    :class:`qpinfer.tables.scaled.ScaledTable` (:func:`shipped_table`)."""
    if likelihood_name in SHIPPED:
        return open_reduced(DATA_DIR / SHIPPED[likelihood_name])
    lik = _member(likelihood_name)
    return None if lik is None or lik.table_base() is None else shipped_table(lik)


def shipped_table(likelihood: Likelihood) -> SigmaTableReader | None:
    """The shipped table serving a likelihood object (its store opened once per process by
    :func:`~qpinfer.tables.shipped.open_shipped`); a likelihood answered by its
    :meth:`~qpinfer.Likelihood.table_base`'s table (a Student-t likelihood of another scale)
    gets a :class:`~qpinfer.tables.scaled.ScaledTable` that holds this very object; ``None`` if
    none ships."""
    key = shipped_key(likelihood)
    if key is None:
        return None
    table = open_shipped(key)
    return table if key == likelihood.name else ScaledTable(table, likelihood)
