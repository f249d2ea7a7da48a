"""Tables from a table host (``qpinfer download``, :func:`qpinfer.tables.download`): no dask needed.

Named ``remote`` rather than ``download`` because :func:`qpinfer.tables.download` is the public
function that installs a table.

Holds: :mod:`~qpinfer.tables.remote.install` (by name, with checksums, locks and atomic
install), :mod:`~qpinfer.tables.remote.transfer` (URLs, manifest, resumable fetch),
:mod:`~qpinfer.tables.remote.unpack` (only what the store says it holds, no larger than it says),
:mod:`~qpinfer.tables.remote.deadline` (a low-speed limit, a socket timeout, an optional deadline).

May import: the table store modules of :mod:`qpinfer.tables` (``store``, ``schema``, ``open``,
``replace``) and :mod:`qpinfer.version`.
"""
