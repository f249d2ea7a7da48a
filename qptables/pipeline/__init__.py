"""Building a table: the one build of every layout (the App. J grid and the reduced-coordinate
cells), its plan, the dask run of its tiles, the lock and resume, the atomic publish, the check of
a finished store, and packing a finished store for distribution.

Holds: :mod:`~qptables.pipeline.build` (``qptables build``, :func:`qptables.build`) and what it
asks of a layout (:mod:`~qptables.pipeline.layouts`): the grid's
(:mod:`~qptables.pipeline.grid_layout`, with ``plan``, ``tiles`` and ``estimate``) and the
cells' (:mod:`~qptables.pipeline.cells_layout`, with ``cells`` and ``cells_check``); the steps
every layout shares: ``dask_run``, ``resume``, ``destination``, ``dry_run``, ``interrupt``,
``errors``; and ``verify`` and ``publish``, one function each for every store. Named
``pipeline`` rather than ``build`` because :func:`qptables.build` is the public build function.

May import: :mod:`qptables.reference` (verification), the top-level ``grid``, ``store``,
``units``, and qpinfer; never :mod:`qptables.cli`.
"""
