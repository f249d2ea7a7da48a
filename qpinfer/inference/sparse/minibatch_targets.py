"""What :func:`qpinfer.inference.sparse.minibatch.fit_minibatch` needs to know about the targets
of a likelihood: how a part's rows of ``y`` are checked and put in the likelihood's form, and the
held-out rows' log predictive density.

* :class:`~qpinfer.inference.sparse.minibatch_targets.LabelTarget` (binary classifiers: probit, logit): the labels ``classes[0]`` /
  ``classes[1]`` as -1/+1, a row of another label refused by its number.
* :class:`~qpinfer.inference.sparse.minibatch_targets.ValueTarget` (regressors: Poisson counts, Student-t reals): a check of the raw values
  (e.g. non-negative integer counts) and an affine normalisation ``(y - center) / spread``
  (``normalize_y``); with ``scale`` the Student-t noise scale is learned (its log by Adam with
  the hyperparameters, within ``log_bounds``) and ``projection_at(scale)`` gives the site
  projection at a scale.

The held-out density of a row is the likelihood averaged over the latent predictive
``N(f | mean, var)`` -- the tilted normaliser ``likelihood.log_z(mean, sqrt(var), y)`` -- in the
units of the raw targets (``- log spread`` for normalised reals); the probit's is written
``log Phi(y mean / sqrt(1 + var))``.

A likelihood with two branches (the square link) starts the tied site on the positive branch
(:func:`positive_branch_part`, :func:`mean_site`, from the first training batch).

A target travels to dask workers (pickled) with every part; it holds no data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_ndtr

from qpinfer.inference.sparse.pseudo_points import inducing_factor, site_sums, whitened_cross
from qpinfer.inference.sparse.stochastic import BatchStats, TiedSite, average_site_step

__all__ = ["LabelTarget", "ValueTarget", "mean_site", "positive_branch_part"]


@dataclass
class LabelTarget:
    """Binary labels: ``classes[1]`` is +1, ``classes[0]`` is -1, for ``likelihood`` (the
    probit when ``None``)."""

    classes: np.ndarray
    likelihood: Any = None
    #: a Student-t-like noise scale learned with the kernel: never for labels
    learns_scale = False

    def rows(self, y: Any, start: int) -> np.ndarray:
        """``y`` as -1/+1; ``ValueError`` naming the first other label (row ``start + i``)."""
        y = np.asarray(y)
        classes = self.classes
        pos, neg = y == classes[1], y == classes[0]
        if not np.all(pos | neg):
            bad = int(np.flatnonzero(~(pos | neg))[0])
            raise ValueError(
                f"y must hold only the classes {classes.tolist()} seen when the fit started; row "
                f"{start + bad} holds {y[bad]!r}"
            )
        return np.where(pos, 1.0, -1.0)

    def log_density(self, mean: np.ndarray, var: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``log p(y | data)`` of rows ``y`` (-1/+1) at the latent predictive."""
        if self.likelihood is None:
            return log_ndtr(y * mean / np.sqrt(1.0 + var))
        return self.likelihood.log_z(mean, np.sqrt(var), y)

    def positives(self, y: np.ndarray) -> int:
        """Rows holding ``classes[1]``."""
        return int(np.count_nonzero(y > 0))


@dataclass
class ValueTarget:
    """Real or count targets: ``check(y, start)`` (the raw values as float64, ``ValueError``
    naming the bad row), then ``(y - center) / spread``, for ``likelihood``.

    ``scale``: the initial noise scale to learn (``None``: none is learned); ``projection_at``
    builds the site projection at a scale (called on the client only), ``log_bounds`` bounds
    ``log(scale)``."""

    likelihood: Any
    check: Callable[[np.ndarray, int], np.ndarray]
    center: float = 0.0
    spread: float = 1.0
    scale: float | None = None
    log_bounds: tuple[float, float] = (-math.inf, math.inf)
    projection_at: Callable[[float], Any] | None = None

    @property
    def learns_scale(self) -> bool:
        return self.scale is not None

    def rows(self, y: Any, start: int) -> np.ndarray:
        """The checked, normalised values of a part starting at row ``start``."""
        values = self.check(np.asarray(y), start)
        if self.center == 0.0 and self.spread == 1.0:
            return values
        return (values - self.center) / self.spread

    def log_density(self, mean: np.ndarray, var: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``log p(y | data)`` of normalised rows ``y``, as a density of the raw values."""
        return self.likelihood.log_z(mean, np.sqrt(var), y) - math.log(self.spread)

    def at_scale(self, scale: float) -> tuple[ValueTarget, Any]:
        """The same target with the likelihood at noise ``scale``, and the site projection
        there (``projection_at(scale)``, whose likelihood it takes)."""
        from dataclasses import replace

        projection = self.projection_at(scale)
        return replace(self, likelihood=projection.likelihood, scale=scale), projection

    def positives(self, y: np.ndarray) -> int:
        return 0


def positive_branch_part(X, y, target, kernel, Z, jitter, start) -> BatchStats:
    """The positive-branch start of a likelihood with two branches (the square link, whose
    posterior is symmetric under ``f -> -f`` with a saddle at mean 0 that EP never leaves): each
    row's site at its own positive mode, ``f = sqrt(y)`` with precision 4 (``y >= 1``) or 2, as
    :func:`qpinfer.inference.laplace.positive_branch_start` starts the full-batch fits."""
    from qpinfer.inference.sparse.dask_partitions import check_partition

    target = target.get()  # Shipped
    X, y = check_partition(X, slice(start, None)), target.rows(y, start)
    _, Lu, _ = inducing_factor(kernel, Z, jitter)
    A, _ = whitened_cross(Lu, kernel(Z, X), kernel.diag(X))
    tau = np.where(y > 0, 4.0, 2.0)
    prec, shift = site_sums(A, tau, tau * np.sqrt(y))
    return BatchStats(int(y.size), prec, shift, 0.0, None, None, 0)


def mean_site(parts: list) -> TiedSite:
    """The mean site of a batch's parts (added in order)."""
    stats = parts[0]
    for p in parts[1:]:
        stats = stats + p
    return average_site_step(TiedSite.zero(stats.shift_sum.size), stats, 1.0)
