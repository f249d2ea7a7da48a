"""Restarts and scikit-learn's optimizer API for the hyperparameter searches.

scikit-learn's Gaussian process estimators take ``optimizer`` (``"fmin_l_bfgs_b"``, a callable
or ``None``), ``n_restarts_optimizer`` and ``random_state``; every qpinfer estimator takes the
same (:class:`qpinfer.estimators.params.SharedParams`), and
:func:`qpinfer.inference.optimize.search_evidence` runs them with the pieces here:

* :func:`check_optimizer`, :func:`check_n_restarts`, :func:`check_random_state` -- the
  parameters' checks (``ValueError`` naming the argument);
* :func:`draw_starts` -- the restarts' starting points: the first ``n_drawn`` coordinates (the
  kernel's log hyperparameters, and a noise or scale parameter where the estimator has one)
  uniform within their bounds, i.e. log-uniform in the hyperparameters, the rest (inducing
  inputs) at their start; infinite bounds are refused as scikit-learn does;
* :func:`run_callable` -- a user's ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt,
  func_min)`` called with scikit-learn's ``obj_func(theta, eval_gradient=True)``, which returns
  minus the evidence and minus its gradient (minus the evidence alone with
  ``eval_gradient=False``), its ``theta_opt`` checked to lie within the bounds;
  :func:`qpinfer.inference.optimize.minimize_callable` runs it on the
  evaluations of :func:`qpinfer.inference.optimize.minimize_lbfgsb` (warm starts, failures
  answered by a wall);
* :func:`best_of` -- the best of the searches from every start (the highest evidence wins).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

import numpy as np

from qpinfer.inference.search_result import SearchResult

__all__ = [
    "CALLABLE_BOUND_ATOL",
    "LBFGS_NAMES",
    "best_of",
    "check_n_restarts",
    "check_optimizer",
    "check_random_state",
    "draw_starts",
    "run_callable",
]

#: the names of the built-in L-BFGS-B search (qpinfer's and scikit-learn's)
LBFGS_NAMES = ("lbfgs", "fmin_l_bfgs_b")


def check_optimizer(optimizer: Any) -> None:
    """``ValueError`` unless ``optimizer`` is ``"lbfgs"``, ``"fmin_l_bfgs_b"``, ``None`` or a
    callable."""
    if optimizer is None or callable(optimizer):
        return
    if not (isinstance(optimizer, str) and optimizer in LBFGS_NAMES):
        raise ValueError(
            "optimizer must be 'lbfgs' (or scikit-learn's name for it, 'fmin_l_bfgs_b'), None, or "
            "a callable optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min); "
            f"got {optimizer!r}"
        )


def check_n_restarts(n_restarts: Any) -> int:
    """``n_restarts_optimizer`` as an int; ``ValueError`` unless it is an integer >= 0."""
    if isinstance(n_restarts, bool) or not isinstance(n_restarts, Integral) or n_restarts < 0:
        raise ValueError(f"n_restarts_optimizer must be an integer >= 0, got {n_restarts!r}")
    return int(n_restarts)


def check_random_state(random_state: Any) -> Any:
    """A generator with ``uniform(low, high)`` for ``random_state``: ``None`` (fresh entropy), an
    integer >= 0 (a seeded :func:`numpy.random.default_rng`), or a numpy ``Generator`` or
    ``RandomState`` (used as it is, so its state advances); ``ValueError`` otherwise."""
    if isinstance(random_state, np.random.Generator | np.random.RandomState):
        return random_state
    if random_state is None or (
        isinstance(random_state, Integral)
        and not isinstance(random_state, bool)
        and random_state >= 0
    ):
        return np.random.default_rng(None if random_state is None else int(random_state))
    raise ValueError(
        "random_state must be None, an integer >= 0, or a numpy Generator or RandomState; got "
        f"{random_state!r}"
    )


def draw_starts(
    x0: np.ndarray,
    bounds: np.ndarray,
    names: Sequence[str],
    n_restarts: int,
    rng: Any,
    n_drawn: int | None = None,
) -> list[np.ndarray]:
    """``n_restarts`` starting points: copies of ``x0`` whose first ``n_drawn`` coordinates
    (``None``: all) are drawn uniformly within ``bounds`` (the log hyperparameters, so the
    hyperparameters are log-uniform), in one draw of ``rng`` per point. ``ValueError`` naming
    ``n_restarts_optimizer`` and the coordinates when a drawn one has an infinite bound."""
    if n_restarts == 0:
        return []
    x0 = np.asarray(x0, dtype=np.float64)
    k = x0.size if n_drawn is None else int(n_drawn)
    low, high = bounds[:k, 0], bounds[:k, 1]
    infinite = ~(np.isfinite(low) & np.isfinite(high))
    if np.any(infinite):
        which = ", ".join(str(names[i]) for i in np.flatnonzero(infinite))
        raise ValueError(
            f"n_restarts_optimizer={n_restarts} draws its starts within the bounds, which must be "
            f"finite (as in scikit-learn); {which} have infinite bounds"
        )
    starts = []
    for _ in range(n_restarts):
        x = x0.copy()
        x[:k] = rng.uniform(low, high)
        starts.append(x)
    return starts


def best_of(searches: Sequence[SearchResult]) -> SearchResult:
    """The search from the start with the lowest objective (the highest evidence), with the
    evaluations and failures of all of them counted and every start's best value in
    ``start_values`` (``inf`` where no evaluation succeeded); the first search if none
    succeeded."""
    found = [s for s in searches if s.x is not None]
    best = min(found, key=lambda s: s.fun) if found else searches[0]
    failed = [s for s in searches if s.n_failed]
    return dataclasses.replace(
        best,
        n_evaluations=sum(s.n_evaluations for s in searches),
        n_failed=sum(s.n_failed for s in searches),
        first_failure=failed[0].first_failure if failed else None,
        last_failure=failed[-1].last_failure if failed else None,
        start_values=[float(s.fun) if s.x is not None else np.inf for s in searches],
    )


#: how far (log units) a callable optimizer's ``theta_opt`` may lie outside the bounds and be
#: put on them (round-off; a relative change of 1e-9 in the hyperparameter)
CALLABLE_BOUND_ATOL = 1e-9


def run_callable(
    optimizer: Callable, evaluate: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray, bounds: np.ndarray, names: Sequence[str] | None = None,
) -> np.ndarray:  # fmt: skip
    """Call a scikit-learn-style ``optimizer(obj_func, initial_theta, bounds=bounds)`` and return
    its ``theta_opt`` (checked: a finite vector of ``x0``'s size within ``bounds``).

    A ``theta_opt`` outside the bounds by more than :data:`CALLABLE_BOUND_ATOL` is refused (a
    ``ValueError`` naming ``optimizer`` and the coordinate, ``names[i]``): the model would be
    fitted at hyperparameters the search space excludes (scikit-learn fits there silently);
    closer, it is put on the bound.

    ``obj_func(theta, eval_gradient=True)`` is ``evaluate(theta)`` -- ``(value, gradient)``,
    minus the evidence and its gradient -- or, with ``eval_gradient=False``, the value alone.
    ``bounds`` is the ``(n, 2)`` array of the search box (log hyperparameters).
    """
    x0 = np.asarray(x0, dtype=np.float64)

    def obj_func(theta: Any, eval_gradient: bool = True) -> Any:
        value, grad = evaluate(np.asarray(theta, dtype=np.float64).reshape(x0.shape))
        return (value, grad) if eval_gradient else value

    out = optimizer(obj_func, x0.copy(), bounds=np.array(bounds, dtype=np.float64))
    try:
        theta_opt, _ = out
        theta_opt = np.asarray(theta_opt, dtype=np.float64).reshape(x0.shape)
    except (TypeError, ValueError):
        raise ValueError(
            "optimizer must return (theta_opt, func_min) with theta_opt of "
            f"{x0.size} log hyperparameters, as scikit-learn's; got {out!r}"
        ) from None
    if not np.all(np.isfinite(theta_opt)):
        raise ValueError(f"optimizer returned a non-finite theta_opt {theta_opt!r}")
    low, high = bounds[:, 0], bounds[:, 1]
    outside = (theta_opt < low - CALLABLE_BOUND_ATOL) | (theta_opt > high + CALLABLE_BOUND_ATOL)
    if np.any(outside):
        which = "; ".join(
            f"{names[i] if names is not None else f'theta[{i}]'} = {theta_opt[i]:.6g} outside "
            f"[{low[i]:.6g}, {high[i]:.6g}]"
            for i in np.flatnonzero(outside)
        )
        raise ValueError(
            f"optimizer returned a theta_opt outside the bounds it was given: {which} (log "
            "units); a callable optimizer must keep theta_opt within bounds (e.g. "
            "scipy.optimize.minimize(..., bounds=bounds))"
        )
    return np.clip(theta_opt, low, high)
