"""A table is a layout of boxes; this is what a build asks of a layout.

Two layouts are built: ``"grid"`` -- the App. J grid of Zhang et al. (2020), one box over
``(mu, log10 sigma)`` in identity coordinates, linearly interpolated
(:mod:`qptables.pipeline.grid_layout`) -- and ``"cells"`` -- the reduced-coordinate boxes of
Chebyshev cells that qpinfer ships (:mod:`qptables.pipeline.cells_layout`). The one build
(:func:`qptables.pipeline.build.build`) runs every shared step -- the checks, the lock, the resume
record, the plan, the partial store, the dask run of the tiles, the interrupt handling -- and asks
the :class:`Layout` only for what differs: its tiles and their kernel, its store's schema, its
check and how its store is put in place.

:func:`store_layout` tells the two kinds of finished stores apart (``qptables verify``, ``info``,
``plot`` and ``publish`` take both).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from qptables.pipeline.dask_run import TileTask

__all__ = ["LAYOUTS", "Layout", "store_layout"]

#: The layouts a build knows, by name.
LAYOUTS = ("grid", "cells")


def store_layout(attrs: dict[str, Any]) -> str:
    """The layout of a store from its root attributes: ``"cells"`` for the reduced-coordinate
    stores (schema 2), else ``"grid"``."""
    return "cells" if attrs.get("qp_schema_version") == 2 else "grid"


class Layout(ABC):
    """One layout's part of a build of ``likelihood`` (the likelihood's canonical name).

    :meth:`prepare` runs under the build's lock and sets ``record``, the resume record
    (:func:`qptables.pipeline.resume.build_record`); the other methods follow in the build's
    order.
    """

    #: ``"grid"`` or ``"cells"``.
    name: str
    likelihood: str
    record: dict

    @abstractmethod
    def prepare(self) -> None:
        """Probe what the plan needs (grid: the kernel's fingerprint and rate) and set
        ``record``; :class:`~qptables.BuildInputError` for what the kernel refuses."""

    @abstractmethod
    def tiles(self) -> list[Hashable]:
        """Every tile of the table, in order."""

    @abstractmethod
    def finished(self, partial: Path, clean: bool = True) -> set:
        """The finished tiles of the build store ``partial`` (``clean``: delete what a killed
        writer left)."""

    def check_disk_space(self, out: Path, done: set | None = None) -> int | None:
        """Refuse a build that does not fit beside ``out`` (``done``: tiles already there; None
        before the lock); the free bytes, or None if not checked."""
        return None

    @abstractmethod
    def describe(
        self, out: Path, done: set, todo: list, free: int | None, say: Callable[[str], None]
    ) -> None:
        """Print what the build will do, before it does it."""

    @abstractmethod
    def estimate(self, todo: list, n_workers: int, client: Any | None) -> tuple[float, str]:
        """``(seconds, text)``: the time the tiles ``todo`` and the check will take on
        ``n_workers`` (``client``: calibrated on its workers; None: a dry run's probe)."""

    @abstractmethod
    def create(self, path: Path) -> None:
        """Create the empty build store at ``path``."""

    @abstractmethod
    def tasks(self, partial: Path, todo: list) -> list[TileTask]:
        """One task per tile of ``todo``, writing into ``partial``."""

    @abstractmethod
    def verify_partial(
        self, partial: Path, client: Any, progress: bool, say: Callable[[str], None]
    ) -> dict[str, Any]:
        """Check the finished build store and record the report in it; a failed check is a
        :class:`~qptables.BuildError` (nothing published, ``partial`` kept)."""

    @abstractmethod
    def publish(
        self, partial: Path, out: Path, force: bool, client: Any, say: Callable[[str], None]
    ) -> None:
        """Put the verified build store at ``out`` atomically (an existing ``out`` only with
        ``force``)."""
