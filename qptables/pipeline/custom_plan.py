"""The cells of a user likelihood's table, refined until the kernel check holds: the plan step
of ``qptables build package.module:ClassName --grid cells``.

A :class:`qpinfer.CustomLikelihood`'s boxes (:mod:`qpinfer.likelihoods.custom.boxes`: the
standardised cavity and the tail box to sigma -> infinity) have no cell widths measured in
advance, as the shipped likelihoods' have. :func:`plan_boxes` starts from cells of 2 (in tau)
by 1 (in log10 sigma/w) and one tail cell, and halves the widths of a box while the Chebyshev
interpolant of what it stores -- rho = sigma*/sigma_EP and EP's three moments -- misses the
exact kernel by more than the tolerance at random points of its probe cells: for every label,
the four corner cells and ``probes`` seeded random ones. The build's own check (20,000 random
points against the kernel, a stratified sample against mpmath) then judges the whole table.
"""

from __future__ import annotations

import numpy as np

import qpinfer
from qpinfer.likelihoods.custom.boxes import NODES, custom_boxes
from qpinfer.likelihoods.layout import CellAxis
from qpinfer.tables.chebyshev import coefficients, evaluate

__all__ = ["PLAN_TOLERANCE", "plan_boxes"]

#: the probes' largest accepted error (a tenth of the acceptance 1e-10, for the cells probed
#: less densely than the build's check)
PLAN_TOLERANCE = 1e-11
_ROUNDS = 5


def plan_boxes(
    likelihood, tolerance: float = PLAN_TOLERANCE, probes: int = 4, seed: int = 0, say=None
) -> tuple:
    """The boxes of ``likelihood`` (a :class:`qpinfer.CustomLikelihood`) with the widest cells
    that pass the probes (module docstring); ``say`` gets a line per round."""
    lik = qpinfer.get_likelihood(likelihood)
    cells = [2.0, 1.0, 1]
    for round_ in range(_ROUNDS):
        rng = np.random.default_rng(seed)
        core, tail = custom_boxes(lik, *cells)
        worst_core = _probe(lik, core, rng, probes)
        worst_tail = _probe(lik, tail, rng, probes)
        if say is not None:
            say(
                f"  plan round {round_ + 1}: cells tau {cells[0]:g} x log10(sigma/w) "
                f"{cells[1]:g}, {cells[2]} tail cell(s): probe error core {worst_core:.1e}, "
                f"tail {worst_tail:.1e} (tolerance {tolerance:.0e})"
            )
        if worst_core <= tolerance and worst_tail <= tolerance:
            break
        if worst_core > tolerance:
            cells[0], cells[1] = cells[0] / 2, cells[1] / 2
        if worst_tail > tolerance:
            cells[2] *= 2
    return custom_boxes(lik, *cells)


def _probe(lik, box, rng, probes: int) -> float:
    """The largest error of the box's interpolants at 4 random points of each probe cell."""
    worst = 0.0
    corners = [(i, j) for i in (0, box.axes[0].n_cells - 1) for j in (0, box.axes[1].n_cells - 1)]
    for label in box.labels:
        picks = corners + [
            tuple(int(rng.integers(ax.n_cells)) for ax in box.axes) for _ in range(probes)
        ]
        for cell in picks:
            axes = tuple(
                CellAxis(ax.name, ax.start + ax.width * c, ax.width, 1, NODES)
                for ax, c in zip(box.axes, cell, strict=True)
            )
            grid = np.meshgrid(*(ax.nodes() for ax in axes), indexing="ij")
            nodes = _stored(lik, box, label, *(g.ravel() for g in grid))
            points = tuple(ax.start + ax.width * rng.uniform(0.01, 0.99, 4) for ax in axes)
            exact = _stored(lik, box, label, *points)
            for k, (at_nodes, want) in enumerate(zip(nodes, exact, strict=True)):
                got = evaluate(coefficients(at_nodes.reshape(grid[0].shape), axes), axes, points)
                scale = np.abs(want) if k == 0 else np.maximum(1.0, np.abs(want))
                worst = max(worst, float(np.max(np.abs(got - want) / scale)))
    return worst


def _stored(lik, box, label, *coords):
    """rho and EP's moments as the box stores them, at box coordinates ``coords``."""
    y = np.full(coords[0].shape, float(label))
    mu, sigma = box.cavity(y, *coords)
    moments = lik.ep_moments(mu, sigma, y)
    rho = qpinfer.sigma_qp(lik, mu, sigma, y) / moments[2]
    return (rho, *box.stored_moments(lik, mu, sigma, y, moments))
