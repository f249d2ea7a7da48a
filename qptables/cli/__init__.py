"""The ``qptables`` command line: ``build``, ``verify``, ``info``, ``plot``, ``publish``, ``ship``.

Holds: :mod:`~qptables.cli.parser` (commands, flags and their value checks),
:mod:`~qptables.cli.commands` (every command on a store of either layout, and
:func:`~qptables.cli.commands.main`), :mod:`~qptables.cli.info` (``qptables info`` and the
reports' text), :mod:`~qptables.cli.ship` (``qptables ship``), :mod:`~qptables.cli.plot`
(``qptables plot``).

May import: everything of qptables and qpinfer; nothing imports it but the entry point.
"""

from qptables.cli.commands import main

__all__ = ["main"]
