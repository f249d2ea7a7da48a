"""What a hyperparameter search returns and the check of how it ended.

:class:`SearchResult` is the best successful evaluation of a search by
:func:`qpinfer.inference.optimize.minimize_lbfgsb` (its point, value and what the objective kept
there), scipy's result and the failures on the way; :func:`combine` joins consecutive searches
(a trust region's rounds). :func:`check_search` raises :class:`SearchFailedError` when no
evaluation succeeded and warns with :class:`OptimizerWarning` (a
:class:`~qpinfer.inference.site_loop.ConvergenceWarning`) when scipy reports a failure or the
search never left its start while evaluations failed, and with :class:`BoundWarning` when the
best point lies on a bound of the box -- once scikit-learn is loaded, as subclasses that are
also its ``ConvergenceWarning``
(:func:`qpinfer.inference.sklearn_warnings.sklearn_compatible`). :func:`warn_extreme_scale` warns
about a fit whose kernel matrix stayed the identity or a constant (features on an extreme scale).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult

from qpinfer.inference.search_space import as_box
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sklearn_warnings import register, sklearn_compatible

__all__ = [
    "BOUND_ATOL",
    "BoundWarning",
    "OptimizerWarning",
    "SearchFailedError",
    "SearchResult",
    "bound_hit",
    "check_search",
    "combine",
    "sklearn_compatible",
    "warn_extreme_scale",
]

#: scipy's status when the callback raised ``StopIteration`` (a deliberate stop, not a failure)
_STOPPED_BY_CALLBACK = 99
#: a best point within this distance (log units) of a bound counts as "at the bound": for a log
#: hyperparameter, within a relative margin of 1e-3 of the bound's value
BOUND_ATOL = 1e-3
_ABNORMAL_STATUS = 2  # scipy: the line search found no decrease
_ABNORMAL = (
    " -- the line search found no decrease along the gradient: near the optimum the inner "
    "loop's tolerance makes the evidence and its gradient inexact"
)


@register
class OptimizerWarning(ConvergenceWarning):
    """A hyperparameter search ended without success, never left its start, or ended on a bound."""


@register
class BoundWarning(OptimizerWarning):
    """A fitted hyperparameter lies on (within :data:`BOUND_ATOL` of) a bound of the search box;
    the message names it and the bound, as scikit-learn's ``ConvergenceWarning`` does."""


class SearchFailedError(ValueError):
    """No evaluation of a hyperparameter search succeeded (the message names the cause)."""


@dataclass
class SearchResult:
    """The best successful evaluation of a search, scipy's result, and what failed on the way."""

    x: np.ndarray | None  # best point evaluated successfully (None: none succeeded)
    fun: float  # its objective value (inf: none)
    scipy: OptimizeResult
    x0: np.ndarray
    n_evaluations: int
    n_failed: int
    first_failure: str | None
    last_failure: str | None
    #: what the objective kept at the best point (its third item; ``None`` if it returns two)
    best: Any = None
    #: the objective at the start (if that evaluation succeeded), then after each iteration
    history: list[float] = field(default_factory=list)
    #: with restarts (:func:`qpinfer.inference.restarts.best_of`), each start's best objective
    #: value (``inf``: none succeeded), the given start first; otherwise empty
    start_values: list[float] = field(default_factory=list)

    @property
    def best_is_start(self) -> bool:
        """Whether no evaluation improved on the starting point."""
        return self.x is not None and bool(np.array_equal(self.x, self.x0))

    def failures(self) -> str:
        """``"k of n evaluations failed (first: ..., last: ...)"``, or ``""``."""
        if not self.n_failed:
            return ""
        text = f"{self.n_failed} of {self.n_evaluations} evaluations failed (first: {self.first_failure}"
        if self.last_failure != self.first_failure:
            text += f"; last: {self.last_failure}"
        return text + ")"


def combine(searches: Sequence[SearchResult]) -> SearchResult:
    """One :class:`SearchResult` for consecutive searches (restarts): the best point of all (and
    what was kept there), the first search's start, the last one's scipy result, the
    evaluations, failures and histories joined."""
    best = min((s for s in searches if s.x is not None), key=lambda s: s.fun, default=searches[-1])
    failed = [s for s in searches if s.n_failed]
    return SearchResult(
        best.x,
        best.fun,
        searches[-1].scipy,
        searches[0].x0,
        sum(s.n_evaluations for s in searches),
        sum(s.n_failed for s in searches),
        failed[0].first_failure if failed else None,
        failed[-1].last_failure if failed else None,
        best.best,
        [f for s in searches for f in s.history],
    )


def check_search(
    search: SearchResult,
    what: str,
    bounds: Any = None,
    names: Sequence[str] | None = None,
    stacklevel: int = 2,
) -> None:
    """Raise or warn about how ``search`` ended; ``what`` names the estimator and method.

    * no successful evaluation: :class:`SearchFailedError` with the failures' messages;
    * scipy's ``success`` is false (iteration or evaluation limit, abnormal line search; a stop
      by the callback is deliberate and passes): :class:`OptimizerWarning` with its message;
    * the best point is the start and some evaluations failed: :class:`OptimizerWarning`;
    * the best point lies on a bound of ``bounds``: :class:`BoundWarning` naming the parameter
      (``names[i]``, default ``theta[i]``) and the bound (:func:`bound_hit`).
    """
    res = search.scipy
    failures = search.failures()
    if search.x is None:
        raise SearchFailedError(
            f"{what}: inference failed at every hyperparameter value tried ({failures or 'no evaluation'})"
        )
    if not res.success and res.status != _STOPPED_BY_CALLBACK:
        why = f"status {res.status}: {res.message}"
        if res.status == _ABNORMAL_STATUS:
            why += _ABNORMAL
        parts = [f"{res.nit} iterations, {search.n_evaluations} evaluations", failures]
        if search.best_is_start:
            parts.append("the result is the starting point")
        warnings.warn(
            f"{what}: L-BFGS-B did not converge ({why}); " + "; ".join(p for p in parts if p),
            sklearn_compatible(OptimizerWarning),
            stacklevel=stacklevel + 1,
        )
    elif search.best_is_start and search.n_failed:
        warnings.warn(
            f"{what}: L-BFGS-B found nothing better than its starting point ({res.message}); "
            f"{failures}; the result is the starting point",
            sklearn_compatible(OptimizerWarning),
            stacklevel=stacklevel + 1,
        )
    if bounds is None:
        return
    hits = []
    for i, (xi, (lo, hi)) in enumerate(zip(search.x, as_box(bounds), strict=False)):
        name = names[i] if names is not None and i < len(names) else f"theta[{i}]"
        if abs(xi - lo) <= BOUND_ATOL:
            hits.append(bound_hit(name, xi, "lower", lo))
        elif abs(xi - hi) <= BOUND_ATOL:
            hits.append(bound_hit(name, xi, "upper", hi))
    if hits:
        upper = ["its upper bound" in h for h in hits]  # scikit-learn's advice, per side
        advice = "Increasing the bound" if all(upper) else "Decreasing the bound"
        advice = "Widening the bounds" if any(upper) and not all(upper) else advice
        warnings.warn(
            f"{what}: the optimal value found for {'; '.join(hits)}. "
            f"{advice} and calling fit again may find "
            "a better value (the evidence still rises towards it). A length scale at its upper "
            "bound marks a feature the fit ignores; at its lower bound, a fit that follows every "
            "point (outliers?). The kernel's bounds: e.g. RBF(length_scale_bounds=(low, high)) "
            "for a scikit-learn kernel, qpinfer.ARDSquaredExponential(..., bounds=(low, high)).",
            sklearn_compatible(BoundWarning),
            stacklevel=stacklevel + 1,
        )


def bound_hit(name: str, x: float, side: str, bound: float) -> str:
    """One hyperparameter at a bound, in the units the user sets it in: a log coordinate
    (``name`` ``"log length_scale[3]"``) as ``"length_scale[3] = 1e+05 (log length_scale[3] =
    11.5129) is close to its upper bound 100000"``, any other as its value and bound."""
    if name.startswith("log "):
        value, limit = float(np.exp(x)), float(np.exp(bound))
        return (
            f"{name[4:]} = {value:.6g} ({name} = {x:.6g}) is close to its {side} bound {limit:.6g}"
        )
    return f"{name} = {x:.6g} is close to its {side} bound {bound:.6g}"


def warn_extreme_scale(
    what: str, X: np.ndarray, degenerate: str, kernel: Any, searched: bool, stacklevel: int = 2
) -> None:
    """:class:`OptimizerWarning` for a fit (``what``: estimator and method) whose kernel matrix
    on ``X`` was ``degenerate`` -- ``"identity"`` or ``"constant"``
    (:func:`qpinfer.inference.dense_posterior.degenerate_kernel_matrix`) -- at the start and
    still is at the fitted ``kernel`` (``searched``: by a search; else fixed, ``optimizer=None``):
    X's scale is far from the length scales, the evidence's gradient in them vanishes, so the
    search cannot move them there, and the fit memorises (identity) or ignores (constant) the
    rows. The message quotes X's scale and suggests standardising the features."""
    sd = np.std(X, axis=0)
    if degenerate == "identity":
        looks, way = "~the identity (every correlation between two rows below 1e-3)", "far above"
    else:
        looks, way = "~a constant (every correlation between two rows above 1 - 1e-3)", "far below"
    where = "the fitted" if searched else "the given (optimizer=None)"
    warnings.warn(
        f"{what}: the kernel matrix on X is {looks} at {where} hyperparameters, as at the start: "
        f"X's scale (largest |X| {np.max(np.abs(X)):.3g}, feature standard deviations "
        f"{np.min(sd):.3g} to {np.max(sd):.3g}) is {way} the kernel's length scales ({kernel!r}), "
        "where the evidence has no slope to follow. Standardise the features (e.g. "
        "sklearn.preprocessing.StandardScaler), or start the length scales, and set their "
        "bounds, on X's scale",
        sklearn_compatible(OptimizerWarning),
        stacklevel=stacklevel + 1,
    )
