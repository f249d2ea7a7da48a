"""The ``qptables`` command line: ``build``, ``verify``, ``info``, ``plot``, ``publish``, ``ship``.

Holds: :mod:`~qptables.cli.parser` (commands, flags and their value checks),
:mod:`~qptables.cli.commands` (the paper-grid commands and :func:`~qptables.cli.commands.main`),
:mod:`~qptables.cli.v2` (the v2 commands), :mod:`~qptables.cli.plot` (``qptables plot``).

May import: everything of qptables and qpinfer; nothing imports it but the entry point.
"""

from qptables.cli.commands import main

__all__ = ["main"]
