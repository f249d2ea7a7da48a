"""qptables: the dask pipeline that builds verified sigma* tables for qpinfer.

Public API (the ``qptables`` command line is a thin layer over it):

* :class:`GridSpec` / :func:`paper_grid` -- the App. J grid of Zhang et al. (2020) and other
  rectangles of the grid layout;
* :func:`build` -- compute, verify and atomically publish a table store of either layout: the
  grid (``grid="paper"`` or a GridSpec) or the reduced-coordinate cells (``grid="cells"``);
* :func:`verify` -- re-check a store of either layout against mpmath (and the cells against the
  exact kernel);
* :func:`sigma_qp_reference` -- the mpmath ground truth (imported lazily).

The rooms, lowest first: the top-level :mod:`qptables.grid`, :mod:`qptables.store` and
:mod:`qptables.units`; :mod:`qptables.reference` (mpmath, verification);
:mod:`qptables.pipeline` (the dask build); :mod:`qptables.cli`. Contracts in ``.importlinter``.
"""

from __future__ import annotations

from typing import Any

from qptables.grid import AxisSpec, GridError, GridSpec, paper_grid

__version__ = "0.1.0"
__all__ = [
    "AxisSpec",
    "BuildError",
    "BuildInputError",
    "BuildResult",
    "GridError",
    "GridSpec",
    "LockError",
    "__version__",
    "build",
    "paper_grid",
    "sigma_qp_reference",
    "verify",
]


#: Public names imported on first use: they need the ``tables`` extra (dask, distributed,
#: mpmath), and the ``qptables`` command must start without it to name the extra to install.
_LAZY = {
    "BuildError": "qptables.pipeline.errors",
    "BuildInputError": "qptables.pipeline.errors",
    "BuildResult": "qptables.pipeline.build",
    "LockError": "qptables.pipeline.errors",
    "build": "qptables.pipeline.build",
    "verify": "qptables.pipeline.verify",
    "sigma_qp_reference": "qptables.reference.sigma",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'qptables' has no attribute {name!r}")
