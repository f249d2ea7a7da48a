"""Which tables a dense or sparse estimator's site updates use: QP's sigma* table (by the
estimator's ``table`` parameter) and the table serving EP's moments, for EP and QP alike.

:func:`resolve_table` is the first, :func:`with_moment_table` the second."""

from __future__ import annotations

import os
import warnings
from typing import Any

from qpinfer.tables import open_table
from qpinfer.tables.choice import open_default
from qpinfer.tables.reader import SigmaTableReader

__all__ = ["resolve_table", "warn_exact_once", "with_moment_table"]

_warned_exact: set[str] = set()


def warn_exact_once(reason: str, key: str) -> None:
    """QP without a table: warn once per process and ``key`` (the estimator's name)."""
    if key not in _warned_exact:
        _warned_exact.add(key)
        warnings.warn(
            f"{reason}; QP computes sigma* exactly with qpinfer.sigma_qp (slower than a table "
            "lookup). Install a table (qptables) or pass table=... . Warned once per process.",
            RuntimeWarning,
            stacklevel=5,
        )


def resolve_table(est: Any, likelihood: Any) -> Any:
    """The sigma* table QP uses for ``likelihood`` by ``est.table`` (``None`` for other
    methods and for exact sigma*).

    ``None``: the better of the table shipped inside qpinfer and the installed one
    (``tables_dir()/<likelihood>.zarr``) by coverage and verified lookup error
    (:mod:`qpinfer.tables.choice`: an installed or downloaded table never silently replaces a
    better one; an unusable installed table is refused with a warning), else exact (warned
    once). ``"exact"``: exact sigma*. A path, or the bare name of an installed table
    (:func:`qpinfer.open_table`), or a table object: that table, always."""
    if est.method != "qp":
        return None
    table = est.table
    if isinstance(table, str) and table == "exact":
        return None
    if table is None:
        chosen, choice = open_default(likelihood)
        if chosen is None:
            warn_exact_once(choice.reason, type(est).__name__)
        return chosen
    if isinstance(table, str | os.PathLike):
        return open_table(table)
    if not isinstance(table, SigmaTableReader):
        raise ValueError(
            "table must be None (the best shipped or installed table), 'exact', a path or "
            "installed table name (qpinfer list shows them), or a table from "
            f"qpinfer.open_table; got {type(table).__name__}"
        )
    return table


def with_moment_table(est: Any, likelihood: Any, table: Any) -> Any:
    """The likelihood the site updates use: where its EP moments have no closed form, with a
    table serving them (:meth:`qpinfer.Likelihood.with_moment_table`) -- QP's ``table`` if it
    stores them (for EP, which uses no sigma* table, the ``table`` the user names), else, for
    the default ``est.table=None``, the table shipped for the likelihood; exact moments with
    ``est.table == "exact"``, with a table of the user's that stores none, or where none
    ships."""
    if not likelihood._tabulated_moments:
        return likelihood
    if isinstance(est.table, str) and est.table == "exact":
        return likelihood
    if table is None and est.table is not None:  # EP with the user's table: its moments
        table = est.table if isinstance(est.table, SigmaTableReader) else open_table(est.table)
    source = None if table is None else table.moment_table
    if source is None and (table is None or est.table is None):
        from qpinfer.tables.shipped import shipped_table

        shipped = shipped_table(likelihood)
        source = None if shipped is None else shipped.moment_table
    return likelihood.with_moment_table(source)
