"""The cells of a user likelihood's table, refined until the kernel check holds: the plan step
of ``qptables build package.module:ClassName --grid cells``.

A :class:`qpinfer.CustomLikelihood`'s boxes (:mod:`qpinfer.likelihoods.custom.boxes`: the
standardised cavity and the tail box to sigma -> infinity) have no cell widths measured in
advance, as the shipped likelihoods' have. :func:`plan_boxes` starts each box from
:data:`START_CELLS` and doubles its cells while the Chebyshev
interpolant of what it stores -- rho = sigma*/sigma_EP and EP's three moments -- misses the
exact kernel by more than the tolerance at random points of its probe cells: for every label,
the four corner cells and ``probes`` seeded random ones (of at most five labels, evenly spaced). The build's own check (20,000 random
points against the kernel, a stratified sample against mpmath) then judges the whole table.
"""

from __future__ import annotations

import numpy as np

import qpinfer
from qpinfer.likelihoods.custom.boxes import NODES, custom_boxes, spans
from qpinfer.likelihoods.layout import CellAxis
from qpinfer.tables.chebyshev import coefficients, evaluate

__all__ = ["PLAN_TOLERANCE", "plan_boxes"]

#: the probes' largest accepted error (below the build check's 1e-10: the probes see fewer
#: cells than the check)
PLAN_TOLERANCE = 5e-11
#: the cells each box starts from, (tau, second axis)
START_CELLS = {"narrow": (10, 3), "mid": (10, 10), "wide": (10, 2), "tail": (10, 2)}
_ROUNDS = 4
_PROBED_LABELS = 5  # labels probed per box: evenly spaced, both ends included


def plan_boxes(
    likelihood, tolerance: float = PLAN_TOLERANCE, probes: int = 4, seed: int = 0, say=None
) -> tuple:
    """The boxes of ``likelihood`` (a :class:`qpinfer.CustomLikelihood`) with the fewest cells
    that pass the probes (module docstring): a box whose probes miss gets twice the cells on
    both axes, at most ``_ROUNDS`` times, and is left out if they still miss (the exact kernel
    answers its cavities, counted as fallbacks); ``say`` gets a line per box."""
    lik = qpinfer.get_likelihood(likelihood)
    cells = dict(START_CELLS)
    names = spans(lik)
    dropped = []
    for name in names:
        for round_ in range(_ROUNDS):
            box = {b.name: b for b in custom_boxes(lik, cells)}[name]
            worst = _probe(lik, box, np.random.default_rng(seed), probes)
            if say is not None:
                say(
                    f"  plan {name}: {cells[name][0]} x {cells[name][1]} cells, probe error "
                    f"{worst:.1e} (tolerance {tolerance:.0e})"
                )
            if worst <= tolerance:
                break
            if round_ == _ROUNDS - 1:  # not resolved: its cavities go to the exact kernel
                dropped.append(name)
                if say is not None:
                    say(f"  plan {name}: left out (the exact kernel answers its cavities)")
                break
            n_tau, n_second = cells[name]
            cells[name] = (2 * n_tau, 2 * n_second)
    boxes = tuple(b for b in custom_boxes(lik, cells) if b.name not in dropped)
    if not boxes:
        raise ValueError(
            f"no box of {lik.name}'s table passed its probes (tolerance {tolerance:g}): "
            "is its log_lik smooth in f?"
        )
    return boxes


def _probe(lik, box, rng, probes: int) -> float:
    """The largest error of the box's interpolants at 4 random points of each probe cell."""
    worst = 0.0
    corners = [(i, j) for i in (0, box.axes[0].n_cells - 1) for j in (0, box.axes[1].n_cells - 1)]
    labels = np.asarray(box.labels)
    chosen = np.unique(np.linspace(0, labels.size - 1, _PROBED_LABELS).round().astype(int))
    for label in labels[chosen]:
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
