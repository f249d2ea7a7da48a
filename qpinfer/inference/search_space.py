"""The packed parameter vector of a hyperparameter search: start, box and names, block by block.

An evidence search (:func:`qpinfer.inference.optimize.search_evidence`) runs over one vector that
joins blocks -- a kernel's log hyperparameters within its bounds (:func:`kernel_block`), free
coordinates such as inducing inputs (:func:`free_block`), one bounded coordinate such as a log
noise scale (:func:`scalar_block`) -- whose names the search's warnings quote
(:func:`qpinfer.inference.search_result.check_search`). The objective unpacks its argument in the
order of the blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Block",
    "SearchSpace",
    "as_box",
    "free_block",
    "kernel_block",
    "scalar_block",
    "search_space",
    "theta_names",
]


class Block(NamedTuple):
    """Consecutive coordinates of a search: start ``values``, ``(n, 2)`` ``bounds`` (``-inf``/
    ``inf``: free) and ``names`` (for the search's warnings)."""

    values: np.ndarray
    bounds: np.ndarray
    names: list[str]


def as_box(bounds: Any) -> np.ndarray:
    """``(low, high)`` pairs as an ``(n, 2)`` float array, ``None`` as an infinite bound."""
    return np.asarray(
        [(-np.inf if lo is None else lo, np.inf if hi is None else hi) for lo, hi in bounds],
        dtype=np.float64,
    ).reshape(-1, 2)


def kernel_block(kernel: Any) -> Block:
    """A kernel's log hyperparameters ``theta`` within its ``bounds``, named by
    :func:`theta_names`."""
    return Block(
        np.asarray(kernel.theta, dtype=np.float64), as_box(kernel.bounds), theta_names(kernel)
    )


def free_block(values: Any, name: str) -> Block:
    """``values`` (raveled, e.g. inducing inputs) without bounds, named ``name[i]``."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    box = np.tile([-np.inf, np.inf], (flat.size, 1))
    return Block(flat, box, [f"{name}[{i}]" for i in range(flat.size)])


def scalar_block(value: float, bounds: Any, name: str) -> Block:
    """One coordinate ``value`` within ``bounds = (low, high)``, named ``name``."""
    return Block(np.array([float(value)]), as_box([bounds]), [name])


@dataclass
class SearchSpace:
    """The packed start ``x0``, its ``(n, 2)`` box ``bounds`` and the coordinates' ``names``."""

    x0: np.ndarray
    bounds: np.ndarray
    names: list[str]


def search_space(*blocks: Block) -> SearchSpace:
    """The blocks one after another (the objective unpacks its argument in the same order)."""
    return SearchSpace(
        np.concatenate([b.values for b in blocks]),
        np.vstack([b.bounds for b in blocks]),
        [name for b in blocks for name in b.names],
    )


def theta_names(kernel: Any) -> list[str]:
    """Names of a kernel's log hyperparameters for messages: the ARD SE kernel's
    ``log variance``, ``log length_scale[j]``; for another kernel ``"log "`` and its
    ``hyperparameter_names`` (a scikit-learn kernel's are scikit-learn's, e.g.
    ``log k1__constant_value``, ``log k2__length_scale[1]``), so a warning names the parameter
    as the user set it; ``theta[i]`` without usable names."""
    n = int(np.asarray(kernel.theta).size)
    if (
        hasattr(kernel, "length_scale")
        and hasattr(kernel, "variance")
        and n == 1 + np.size(kernel.length_scale)
    ):
        return ["log variance"] + [f"log length_scale[{j}]" for j in range(n - 1)]
    names = getattr(kernel, "hyperparameter_names", None)
    if names is not None and len(names) == n:
        return [f"log {name}" for name in names]
    return [f"theta[{i}]" for i in range(n)]
