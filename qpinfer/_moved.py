"""Module paths that moved in 0.2 (issue #31), still importable for one release.

Importing an old path (import qpinfer.tables_v2, from qpinfer.ep import run_ep) warns
:class:`DeprecationWarning` naming the new path and returns the new module itself, so state,
pickles and monkeypatches are shared. :func:`install` serves both packages: qptables passes its
own map. Delete this module and its calls in the release after 0.2.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old module path -> new module path, for qpinfer
QPINFER = {
    "qpinfer.box_registry": "qpinfer.tables.boxes.registry",
    "qpinfer.cheb_cells": "qpinfer.tables.chebyshev",
    "qpinfer.classifier": "qpinfer.estimators.classifier",
    "qpinfer.dask_partitions": "qpinfer.inference.sparse.dask_partitions",
    "qpinfer.dask_sweep": "qpinfer.inference.sparse.dask_sweep",
    "qpinfer.deadline": "qpinfer.tables.remote.deadline",
    "qpinfer.dense_posterior": "qpinfer.inference.dense_posterior",
    "qpinfer.download": "qpinfer.tables.remote.install",
    "qpinfer.ep": "qpinfer.inference.ep",
    "qpinfer.estimator": "qpinfer.estimators.base",
    "qpinfer.evidence": "qpinfer.inference.evidence",
    "qpinfer.grid_cubic": "qpinfer.tables.grid_cubic",
    "qpinfer.grid_store": "qpinfer.tables.grid_store",
    "qpinfer.integrity": "qpinfer.tables.integrity",
    "qpinfer.laplace": "qpinfer.inference.laplace",
    "qpinfer.level_sets": "qpinfer.quadrature.level_sets",
    "qpinfer.logit": "qpinfer.likelihoods.logit",
    "qpinfer.loglik": "qpinfer.likelihoods.loglik",
    "qpinfer.loglik_logit_poisson_log": "qpinfer.likelihoods.loglik_logit_poisson_log",
    "qpinfer.loglik_student_t": "qpinfer.likelihoods.loglik_student_t",
    "qpinfer.normal_ratios": "qpinfer.quadrature.normal_ratios",
    "qpinfer.optimize": "qpinfer.inference.optimize",
    "qpinfer.panel_quadrature": "qpinfer.quadrature.panels",
    "qpinfer.poisson_log": "qpinfer.likelihoods.poisson_log",
    "qpinfer.poisson_moments": "qpinfer.likelihoods.poisson_moments",
    "qpinfer.power_ep": "qpinfer.inference.power_ep",
    "qpinfer.predictions": "qpinfer.estimators.predictions",
    "qpinfer.probit_limits": "qpinfer.likelihoods.probit_limits",
    "qpinfer.projections": "qpinfer.inference.projections",
    "qpinfer.pseudo_points": "qpinfer.inference.sparse.pseudo_points",
    "qpinfer.reduced": "qpinfer.tables.boxes.probit",
    "qpinfer.reduced_boxes": "qpinfer.tables.boxes.poisson",
    "qpinfer.reduced_logit": "qpinfer.tables.boxes.logit",
    "qpinfer.reduced_student_t": "qpinfer.tables.boxes.student_t",
    "qpinfer.registry": "qpinfer.likelihoods.registry",
    "qpinfer.regression": "qpinfer.estimators.poisson_regressor",
    "qpinfer.rep": "qpinfer.inference.relaxed_ep",
    "qpinfer.replace": "qpinfer.tables.replace",
    "qpinfer.robust_regression": "qpinfer.estimators.student_t_regressor",
    "qpinfer.schema": "qpinfer.tables.schema",
    "qpinfer.shipped": "qpinfer.tables.shipped",
    "qpinfer.sigma_table": "qpinfer.tables.grid_table",
    "qpinfer.site_loop": "qpinfer.inference.site_loop",
    "qpinfer.sparse_classifier": "qpinfer.estimators.sparse_classifier",
    "qpinfer.sparse_estimator": "qpinfer.estimators.sparse_base",
    "qpinfer.sparse_regressor": "qpinfer.estimators.sparse_regressor",
    "qpinfer.sparse_sites": "qpinfer.inference.sparse.sites",
    "qpinfer.step_noise": "qpinfer.likelihoods.step_noise",
    "qpinfer.student_t": "qpinfer.likelihoods.student_t",
    "qpinfer.student_t_scale": "qpinfer.inference.student_t_scale",
    "qpinfer.sweep_cells": "qpinfer.tables.sweep_evaluator",
    "qpinfer.table_open": "qpinfer.tables.open",
    "qpinfer.table_store": "qpinfer.tables.store",
    "qpinfer.tables_student_t": "qpinfer.tables.student_t",
    "qpinfer.tables_v2": "qpinfer.tables.reduced",
    "qpinfer.tilted_quadrature": "qpinfer.quadrature.tilted",
    "qpinfer.transfer": "qpinfer.tables.remote.transfer",
    "qpinfer.unpack": "qpinfer.tables.remote.unpack",
    "qpinfer.vb": "qpinfer.inference.vb",
}

#: old module path -> new module path, for qptables (used by :mod:`qptables`). Not here:
#: ``qptables.build`` and ``qptables.verify``, whose names are the package's public functions (an
#: import of a module under them would rebind ``qptables.build`` to the module).
QPTABLES = {
    "qptables.cli_parser": "qptables.cli.parser",
    "qptables.dask_run": "qptables.pipeline.dask_run",
    "qptables.destination": "qptables.pipeline.destination",
    "qptables.errors": "qptables.pipeline.errors",
    "qptables.estimate": "qptables.pipeline.estimate",
    "qptables.fanout": "qptables.reference.fanout",
    "qptables.interrupt": "qptables.pipeline.interrupt",
    "qptables.mp_panels": "qptables.reference.mp_panels",
    "qptables.plan": "qptables.pipeline.plan",
    "qptables.plot": "qptables.cli.plot",
    "qptables.publish": "qptables.pipeline.publish",
    "qptables.reference_logit": "qptables.reference.logit",
    "qptables.resume": "qptables.pipeline.resume",
    "qptables.step_noise_reference": "qptables.reference.step_noise",
    "qptables.student_t_reference": "qptables.reference.student_t",
    "qptables.tiles": "qptables.pipeline.tiles",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path, warns, and puts the new module into sys.modules under it."""

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder; exec_module swaps in the real module

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        new = self.moved[old]
        warnings.warn(
            f"{old} moved to {new}; the old path works until the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        # the import system returns whatever sys.modules holds under the name once this returns
        sys.modules[old] = importlib.import_module(new)


def install(moved: dict[str, str]) -> None:
    """Serve the old paths of moved (idempotent per map)."""
    if not any(isinstance(f, _MovedFinder) and f.moved is moved for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder(moved))
