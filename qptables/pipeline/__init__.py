"""Building a table: the grid's plan, the dask run of its tiles, the lock and resume, the atomic
publish, and packing a finished store for distribution.

Holds: :mod:`~qptables.pipeline.paper` (``qptables build`` of the paper's (mu, log10 sigma)
grid), :mod:`~qptables.pipeline.v2` (the v2 reduced-coordinate tables, with ``v2_check`` and
``publish_v2``), and the parts they share: ``plan``, ``tiles``, ``dask_run``, ``resume``,
``destination``, ``estimate``, ``dry_run``, ``interrupt``, ``errors``, ``publish``. Named ``pipeline`` rather than ``build`` because :func:`qptables.build`
is the public build function.

May import: :mod:`qptables.reference` (verification), the top-level ``grid``, ``store``,
``units``, and qpinfer; never :mod:`qptables.cli`.
"""
