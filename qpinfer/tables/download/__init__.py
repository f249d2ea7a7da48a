"""Installing prebuilt tables from a table host (``qpinfer download``): no dask needed.

Holds: :mod:`~qpinfer.tables.download.install` (by name, with checksums, locks and atomic
install), :mod:`~qpinfer.tables.download.transfer` (URLs, manifest, resumable fetch),
:mod:`~qpinfer.tables.download.unpack` (only what the store says it holds),
:mod:`~qpinfer.tables.download.deadline` (one overall deadline per download).

May import: the table store modules of :mod:`qpinfer.tables` (``store``, ``schema``, ``open``,
``replace``) and :mod:`qpinfer.version`.
"""
