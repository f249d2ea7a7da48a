"""The cell-table box of the label-noise step likelihood.

**step_noise.** The kernel's ``_rescale`` maps every cavity to ``(z, 1)``, ``z = mu / sigma``
(canonical y = +1), and ``_sigma_closed_form`` answers ``|z| > 9`` where the side holding the
Gaussian's centre carries all but e^-40 of the mass -- for eps = 0.2 that is every ``|z| > 9``.
One box: ``z`` in [-9.5, 9.5]. A store for a small eps must reach further left: the closed form
starts at ``z_lo(eps)``, where ``log(eps / (1 - eps)) - log Phi(z_lo) = 40``
(:func:`step_noise_z_range`), e.g. -9.4 for eps = 1e-3 and -10.9 for 1e-10; eps = 0 is never
closed form for z < 0 (a normal truncated in its tail) and needs a probit-like tail box in
``u = z_0 / z`` down to the kernel's own rescaling at z = -1e8 (an exponential limit with an
O(1/z^2) correction). :func:`step_noise_boxes` refuses eps it cannot cover.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr

from qpinfer.likelihoods.layout import Box, CellAxis

__all__ = ["StepNoiseBox", "boxes", "step_noise_boxes", "step_noise_z_range"]


@dataclass(frozen=True)
class StepNoiseBox(Box):
    """``z = mu / sigma`` (canonical y = +1; the kernel's ``_rescale`` already maps cavities to
    ``(z, 1)``), one label (1.0)."""

    def cavity(self, label, z):
        z = np.asarray(z, dtype=np.float64)
        return z, np.ones_like(z)

    def locate(self, mu, sigma, y):
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.asarray(mu, dtype=np.float64) / np.asarray(sigma, dtype=np.float64)
        coords = (z,)
        return self._inside_axes(coords), np.zeros(np.shape(z), dtype=np.intp), coords


def step_noise_z_range(eps: float) -> tuple[float, float]:
    """The z interval of a step-noise box for ``eps``: from just below where the kernel's closed
    form takes over on the left (``log(eps/(1-eps)) - log Phi(z) > 40`` and ``z < -9``) to 9.5
    (the closed form holds for every z > 9), both rounded out to a multiple of 0.5."""
    from scipy.optimize import brentq

    if not 0.0 < eps < 0.5:
        raise ValueError(
            f"eps must be in (0, 0.5) for a step_noise cell box; got {eps!r} (eps = 0 has no "
            "closed form for z < 0 and needs a tail box in u = z_0 / z)"
        )
    gap = np.log(eps / (1.0 - eps))
    z_lo = brentq(lambda z: gap - log_ndtr(z) - 40.0, -60.0, 0.0)
    lo = np.floor(2.0 * min(z_lo, -9.0)) / 2.0 - 0.5
    return float(lo), 9.5


def step_noise_boxes(eps: float = 0.2, nodes: int = 12, width: float = 0.5) -> tuple[Box, ...]:
    """The step-noise box for ``eps``: ``z`` in :func:`step_noise_z_range`, cells of
    ``width``."""
    lo, hi = step_noise_z_range(eps)
    n_cells = round((hi - lo) / width)
    return (StepNoiseBox("core", (CellAxis("z", lo, width, n_cells, nodes),), (1.0,)),)


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table (``Likelihood.table_boxes``)."""
    return step_noise_boxes(likelihood.eps)
