"""Objects sent to dask workers with every task -- a minibatch fit's projection and targets --
whose tables are opened once per worker process, not once per task.

A projection or a likelihood may hold tables (QP's sigma* table, the moment table of
:meth:`qpinfer.Likelihood.with_moment_table`, a scaled table's base), each pickled as its path
and re-opened -- read, hashed and validated -- when unpickled. :class:`Shipped` pickles its
object with every such table by reference (its own pickle as a persistent id); a worker
unpickles each table once and keeps it (``_TABLES``), so a task carries a few hundred bytes and a
new likelihood scale each step costs no re-opening. In this process :meth:`Shipped.get` is the
object itself (its tables count their fallbacks where the estimator sees them).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

__all__ = ["Shipped"]

#: tables unpickled in this process, by their pickle (a worker's, over its tasks)
_TABLES: dict[bytes, Any] = {}


class Shipped:
    """``obj`` for a dask task: ``get`` on the worker gives it back, tables shared."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def get(self) -> Any:
        return self.obj

    def __reduce__(self):
        buffer = io.BytesIO()
        _TablePickler(buffer).dump(self.obj)
        return (_unship, (buffer.getvalue(),))


def _is_table(obj: Any) -> bool:
    """A table opened from a store (pickled as its path); a scaled table, which wraps one, is
    pickled as usual (its base then by reference)."""
    from qpinfer.tables.reader import SigmaTableReader

    return isinstance(obj, SigmaTableReader) and not hasattr(obj, "base")


class _TablePickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> bytes | None:
        return pickle.dumps(obj) if _is_table(obj) else None


class _TableUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: bytes) -> Any:
        table = _TABLES.get(pid)
        if table is None:
            table = _TABLES[pid] = pickle.loads(pid)  # noqa: S301 (our own tasks' pickles)
        return table


def _unship(data: bytes) -> Shipped:
    return Shipped(_TableUnpickler(io.BytesIO(data)).load())
