"""A progress display over a hyperparameter search's evaluations (the estimators' ``verbose``).

:class:`ProgressObjective` wraps a search objective (the protocol of
:func:`qpinfer.inference.optimize.minimize_lbfgsb`: minus the evidence first) and counts its
evaluations -- each an inner loop run to convergence -- on a tqdm bar on standard error, with
the best evidence so far. tqdm is a core dependency, imported only by a verbose fit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ProgressObjective"]


class ProgressObjective:
    """``objective`` counting its evaluations on a tqdm bar titled ``what`` (standard error),
    with the best evidence (minus the lowest finite value) so far; :meth:`close` ends it."""

    def __init__(self, objective: Callable[[np.ndarray], tuple[Any, ...]], what: str) -> None:
        from tqdm import tqdm

        self.objective, self.best = objective, np.inf
        self.bar = tqdm(desc=f"{what}: search", unit=" evaluations", file=sys.stderr)

    def __call__(self, theta: np.ndarray) -> tuple[Any, ...]:
        try:
            out = self.objective(theta)
        finally:
            self.bar.update(1)
        value = float(out[0])
        if np.isfinite(value) and value < self.best:
            self.best = value
            self.bar.set_postfix_str(f"best evidence {-value:.6g}", refresh=False)
        return out

    def close(self) -> None:
        """End the bar (its last state stays on the terminal)."""
        self.bar.close()
