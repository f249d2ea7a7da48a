"""One L-BFGS-B helper for every hyperparameter search: failures backtrack, exits are checked.

Every estimator (and :func:`qpinfer.inference.vb.fit_vb`) maximises an evidence (eq. (4), R&W
eq. (3.32), the ELBO, eq. (110)/(128)) over log hyperparameters with L-BFGS-B (paper 000 Sec. 6)
through :func:`search_evidence`, over a packed vector of :mod:`qpinfer.inference.search_space`.
The objective returns the value and gradient and, optionally, what to keep of an evaluation:
the best evaluation's comes back as :attr:`qpinfer.inference.search_result.SearchResult.best`, the
latest successful one's in a :class:`SearchTrail` (where a nested search warm-starts its next inner
loop). The inner loops' warnings are ignored during the search (only the result counts); an
energy-stall rule (``stall_rtol``) may end it early and a box trust region (``trust``) re-centre it.

An evaluation can fail -- the inner loop raises ``LinAlgError``/``ValueError`` or returns a
non-finite evidence -- typically at the optimiser's first trial step, which follows the raw
gradient to the bounds. Returning ``inf`` there ends L-BFGS-B's line search on the spot (it
reports convergence at its start). :func:`minimize_lbfgsb` instead returns a finite *wall*
above every value seen, ``f_max + (1 + |f_best|) (1 + |x - x_best|^2)``, whose gradient points
back to the best point, so the line search backtracks and the search goes on.

Every exit is checked (:func:`~qpinfer.inference.search_result.check_search`): a search that scipy
reports as failed, one that never got past its start while evaluations failed, and a best point on a
bound of the box each warn with :class:`~qpinfer.inference.search_result.OptimizerWarning` (a
:class:`~qpinfer.inference.site_loop.ConvergenceWarning`) naming the estimator, the method, scipy's
message and the failures' cause. A search in which no evaluation succeeded raises
:class:`~qpinfer.inference.search_result.SearchFailedError`. An :class:`InnerLoopBudget` ends a
search (with the best point so far and an
:class:`~qpinfer.inference.search_result.OptimizerWarning`) once :data:`MAX_UNCONVERGED_EVALUATIONS`
inner loops ran to ``max_iter`` without converging, so that a fit costs at most that many
``max_iter``-long inner loops besides the converged ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult, minimize

from qpinfer.inference.search_result import (
    BOUND_ATOL,
    BoundWarning,
    OptimizerWarning,
    SearchFailedError,
    SearchResult,
    check_search,
    combine,
)
from qpinfer.inference.search_space import SearchSpace, theta_names
from qpinfer.inference.site_loop import ConvergenceWarning

__all__ = [
    "EVALUATION_ERRORS",
    "LBFGS_FTOL",
    "MAX_UNCONVERGED_EVALUATIONS",
    "STALL_WINDOW",
    "BoundWarning",
    "InnerLoopBudget",
    "OptimizerWarning",
    "SearchFailedError",
    "SearchResult",
    "SearchTrail",
    "check_search",
    "combine",
    "minimize_lbfgsb",
    "search_evidence",
    "theta_names",
]

#: L-BFGS-B's relative function tolerance in every evidence search (paper 000 Sec. 6)
LBFGS_FTOL = 1e-9
#: what an evaluation may raise when inference fails at a hyperparameter value (the search
#: backtracks from it); anything else propagates
EVALUATION_ERRORS = (np.linalg.LinAlgError, ValueError, FloatingPointError, OverflowError)
#: a search stops once this many evaluations' inner loops ended without converging
MAX_UNCONVERGED_EVALUATIONS = 10
#: scipy-like status of a search ended by its :class:`InnerLoopBudget`
BUDGET_STATUS = -1
#: the energy-stall rule's window, in iterations (``stall_rtol`` of :func:`minimize_lbfgsb`)
STALL_WINDOW = 10
#: the inner loops' warnings ignored during a search by default (only the result counts)
QUIET = (ConvergenceWarning, RuntimeWarning)


class InnerLoopBudget:
    """The inner loops of one search: their total iterations (``n_inner``) and how many ended
    without converging; :meth:`~qpinfer.inference.optimize.InnerLoopBudget.record` each evaluation's
    inner result (``.n_iter``, ``.converged``). Exhausted after ``limit`` unconverged ones."""

    def __init__(self, max_iter: int, limit: int = MAX_UNCONVERGED_EVALUATIONS) -> None:
        self.max_iter = int(max_iter)
        self.limit = int(limit)
        self.n_inner = 0
        self.n_unconverged = 0

    def record(self, result: Any) -> None:
        """Count one evaluation's inner loop."""
        self.n_inner += int(getattr(result, "n_iter", 0))
        if not getattr(result, "converged", True):
            self.n_unconverged += 1

    @property
    def exhausted(self) -> bool:
        return self.n_unconverged >= self.limit

    def message(self) -> str:
        return (
            f"stopped: the inner loop did not converge within max_iter={self.max_iter} at "
            f"{self.n_unconverged} hyperparameter values (the cap, {self.limit}; "
            f"{self.n_inner} inner iterations in all)"
        )


class _BudgetExhausted(Exception):
    pass


class SearchTrail:
    """What the latest successful evaluation of a search kept (``latest``: the third item its
    objective returned, ``None`` before the first success), where a nested search warm-starts
    the next inner loop. :func:`minimize_lbfgsb` updates it; one trail may span consecutive
    searches (the rounds of a trust region, :func:`search_evidence`)."""

    def __init__(self) -> None:
        self.latest: Any = None


# -- one L-BFGS-B run ---------------------------------------------------------------------------
def _describe(exc_or_text: Any) -> str:
    if isinstance(exc_or_text, BaseException):
        text = f"{type(exc_or_text).__name__}: {exc_or_text}"
    else:
        text = str(exc_or_text)
    return text if len(text) <= 300 else text[:297] + "..."


def minimize_lbfgsb(
    objective: Callable[[np.ndarray], tuple[Any, ...]],
    x0: np.ndarray,
    bounds: Any,
    *,
    maxiter: int,
    ftol: float = LBFGS_FTOL,
    gtol: float | None = None,
    budget: InnerLoopBudget | None = None,
    stall_rtol: float | None = None,
    trail: SearchTrail | None = None,
) -> SearchResult:
    """Minimise ``objective`` by L-BFGS-B from ``x0`` within ``bounds``.

    ``objective(x)`` returns ``(value, gradient)`` or ``(value, gradient, keep)``; the best
    successful evaluation's ``keep`` is :attr:`qpinfer.inference.search_result.SearchResult.best`,
    the latest one's ``trail.latest``. An evaluation that raises one of :data:`EVALUATION_ERRORS` or
    returns a non-finite value or gradient is a *failure*: before any success the optimiser sees
    ``inf`` (it stops); after one, the wall of the module docstring, so its line search backtracks
    towards the best point. With a ``budget`` (which ``objective`` feeds), the search ends once
    it is exhausted. ``stall_rtol`` (``None``: off) adds the energy-stall rule: stop once the
    objective has decreased by at most ``stall_rtol * max(|f|, 1)`` over the last
    :data:`STALL_WINDOW` iterations -- a window, not L-BFGS-B's one-iteration ``ftol``, so one
    short step does not end the search; relative to ``|f|`` (which grows like N), so it is a
    per-point rule. Returns the best successful evaluation
    (:class:`~qpinfer.inference.search_result.SearchResult`); check it with
    :func:`~qpinfer.inference.search_result.check_search`.
    """
    x0 = np.asarray(x0, dtype=np.float64).copy()
    st: dict[str, Any] = {"best_x": None, "best_f": np.inf, "max_f": -np.inf, "n": 0, "failed": 0}
    st["first"] = st["last"] = st["best"] = None
    history: list[float] = []  # the objective at the start (if it succeeded), then per iteration
    iterates: list[float] = []  # the objective after each iteration (the stall rule's window)

    def fail(x: np.ndarray, cause: Any) -> tuple[float, np.ndarray]:
        st["failed"] += 1
        st["last"] = _describe(cause)
        if st["first"] is None:
            st["first"] = st["last"]
        if st["best_x"] is None:
            return np.inf, np.zeros_like(x)
        d = x - st["best_x"]
        height = 1.0 + abs(st["best_f"])
        return st["max_f"] + height * (1.0 + d @ d), 2.0 * height * d

    def evaluate(x: np.ndarray) -> tuple[float, np.ndarray]:
        try:
            out = objective(x)
        except EVALUATION_ERRORS as exc:
            return fail(x, exc)
        value = float(out[0])
        grad = np.asarray(out[1], dtype=np.float64)
        if not np.isfinite(value):
            return fail(x, f"objective {value} at x={np.array2string(x, precision=3)}")
        if not np.all(np.isfinite(grad)):
            return fail(x, f"non-finite gradient at x={np.array2string(x, precision=3)}")
        keep = out[2] if len(out) > 2 else None
        if trail is not None:
            trail.latest = keep
        if st["n"] == 1:
            history.append(value)
        st["max_f"] = max(st["max_f"], value)
        if value < st["best_f"]:
            st["best_f"], st["best_x"], st["best"] = value, x.copy(), keep
        return value, grad

    def wrapped(x: np.ndarray) -> tuple[float, np.ndarray]:
        st["n"] += 1
        out = evaluate(x)
        if budget is not None and budget.exhausted:
            raise _BudgetExhausted
        return out

    def counted(intermediate_result: Any) -> None:
        iterates.append(float(intermediate_result.fun))
        history.append(iterates[-1])
        if stall_rtol is not None and len(iterates) > STALL_WINDOW:
            old, new = iterates[-1 - STALL_WINDOW], iterates[-1]
            if old - new <= stall_rtol * max(abs(new), 1.0):
                raise StopIteration

    options: dict[str, Any] = {"maxiter": int(maxiter), "ftol": ftol}
    if gtol is not None:
        options["gtol"] = gtol
    try:
        res = minimize(
            wrapped,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options=options,
            callback=counted,
        )
    except _BudgetExhausted:
        res = OptimizeResult(
            x=st["best_x"], fun=st["best_f"], success=False, status=BUDGET_STATUS,
            message=budget.message(), nit=len(iterates), nfev=st["n"],
        )  # fmt: skip
    best = (st["best_x"], float(st["best_f"]), res, x0, st["n"], st["failed"])
    return SearchResult(*best, st["first"], st["last"], st["best"], history)


# -- the search every estimator runs ----------------------------------------------------------
def _trust_region(
    objective: Callable, space: SearchSpace, trust: float, *, maxiter: int, **options: Any
) -> SearchResult:
    """L-BFGS-B in a box of ``+-trust`` about its start, re-centred on the best point until
    that lies inside the box (or a round did not move it), ``maxiter`` iterations in all; the
    rounds :func:`combine`\\ d."""
    low, high = space.bounds[:, 0], space.bounds[:, 1]
    budget = options.get("budget")
    x, iterations, searches = space.x0, int(maxiter), []
    while iterations > 0:
        box = np.column_stack([np.maximum(low, x - trust), np.minimum(high, x + trust)])
        searches.append(minimize_lbfgsb(objective, x, box, maxiter=iterations, **options))
        iterations -= max(int(searches[-1].scipy.nit), 1)
        best = combine(searches)
        if best.x is None or (budget is not None and budget.exhausted):
            break
        inner = (box[:, 0] == low) | (best.x > box[:, 0] + BOUND_ATOL)
        inner &= (box[:, 1] == high) | (best.x < box[:, 1] - BOUND_ATOL)
        if np.all(inner) or np.array_equal(best.x, x):
            break
        x = best.x
    return combine(searches)


def search_evidence(
    objective: Callable[[np.ndarray], tuple[Any, ...]],
    space: SearchSpace,
    what: str,
    *,
    maxiter: int,
    trust: float | None = None,
    quiet: tuple[type[Warning], ...] = QUIET,
    stacklevel: int = 2,
    **options: Any,
) -> SearchResult:
    """Minimise ``objective`` (minus an evidence, :func:`minimize_lbfgsb`'s protocol) over
    ``space`` from ``space.x0``, at most ``maxiter`` iterations, and check how it ended
    (:func:`~qpinfer.inference.search_result.check_search`, whose warnings name ``what``, the
    estimator and method, and ``space.names``; ``stacklevel`` counts from the caller).

    ``options`` (``ftol``, ``gtol``, ``budget``, ``stall_rtol``, ``trail``): as
    :func:`minimize_lbfgsb`. ``quiet``: the warning categories ignored during the search
    (default: the inner loops' convergence and runtime warnings; the evaluations may run at
    extreme hyperparameters and only the result counts). ``trust`` (log units; ``None``: off):
    a box trust region of ``+-trust`` about the current point, re-centred on the best point
    until it lies inside the box (L-BFGS-B's first step follows the raw gradient, which can
    reach a bound where the inner loop fails); the budget and the iterations span the rounds.
    """
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        if trust is None:
            search = minimize_lbfgsb(objective, space.x0, space.bounds, maxiter=maxiter, **options)
        else:
            search = _trust_region(objective, space, trust, maxiter=maxiter, **options)
    check_search(search, what, space.bounds, space.names, stacklevel=stacklevel + 1)
    return search
