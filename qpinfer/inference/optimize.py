# Over 400 lines: L-BFGS-B and a callable optimizer share one evaluation loop (_Evaluations) and one search (search_evidence); split, they would import each other.
"""One L-BFGS-B helper for every hyperparameter search: failures backtrack, exits are checked.

Every estimator (and :func:`qpinfer.inference.vb.fit_vb`) maximises an evidence (eq. (4), R&W
eq. (3.32), the ELBO, eq. (110)/(128)) over log hyperparameters with L-BFGS-B (Zhang et al., 2020, Sec. 6)
through :func:`search_evidence`, over a packed vector of :mod:`qpinfer.inference.search_space`.
The objective returns the value and gradient and, optionally, what to keep of an evaluation:
the best evaluation's comes back as :attr:`qpinfer.inference.search_result.SearchResult.best`, the
latest successful one's in a :class:`SearchTrail` (where a nested search warm-starts its next inner
loop). The inner loops' warnings are ignored during the search (only the result counts); an
energy-stall rule (``stall_rtol``) may end it early and a box trust region (``trust``) re-centre it.
scikit-learn's callable ``optimizer`` and ``n_restarts_optimizer`` run through the same
:func:`search_evidence` (:mod:`qpinfer.inference.restarts`).

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

from qpinfer.inference.progress import ProgressObjective
from qpinfer.inference.restarts import (
    LBFGS_NAMES,
    best_of,
    check_n_restarts,
    check_random_state,
    draw_starts,
    run_callable,
)
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
from qpinfer.tables.reader import TableFallbackWarning

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
    "minimize_callable",
    "minimize_lbfgsb",
    "search_evidence",
    "theta_names",
]

#: L-BFGS-B's relative function tolerance in every evidence search (Zhang et al., 2020, Sec. 6)
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
#: the inner loops' warnings ignored during a search by default (only the result counts), except
#: :class:`~qpinfer.tables.reader.TableFallbackWarning`
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

    def restart(self) -> None:
        """A new search (a restart) starts: its unconverged inner loops are counted afresh (the
        total iterations ``n_inner`` go on)."""
        self.n_unconverged = 0

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


class _Evaluations:
    """The evaluations of one search: the best and the latest successful one, the failures (each
    answered by the wall of the module docstring) and the objective's history."""

    def __init__(self, objective: Callable, budget: Any = None, trail: Any = None) -> None:
        self.objective, self.budget, self.trail = objective, budget, trail
        self.best_x: np.ndarray | None = None
        self.best_f, self.max_f = np.inf, -np.inf
        self.n = self.failed = 0
        self.first: str | None = None
        self.last: str | None = None
        self.best: Any = None
        self.latest: tuple[np.ndarray, float, Any] | None = None  # (x, value, keep)
        #: the objective at the start (if it succeeded), then per iteration
        self.history: list[float] = []

    def fail(self, x: np.ndarray, cause: Any) -> tuple[float, np.ndarray]:
        self.failed += 1
        self.last = _describe(cause)
        if self.first is None:
            self.first = self.last
        if self.best_x is None:
            return np.inf, np.zeros_like(x)
        d = x - self.best_x
        height = 1.0 + abs(self.best_f)
        return self.max_f + height * (1.0 + d @ d), 2.0 * height * d

    def evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        try:
            out = self.objective(x)
        except EVALUATION_ERRORS as exc:
            return self.fail(x, exc)
        value = float(out[0])
        grad = np.asarray(out[1], dtype=np.float64)
        if not np.isfinite(value):
            return self.fail(x, f"objective {value} at x={np.array2string(x, precision=3)}")
        if not np.all(np.isfinite(grad)):
            return self.fail(x, f"non-finite gradient at x={np.array2string(x, precision=3)}")
        keep = out[2] if len(out) > 2 else None
        if self.trail is not None:
            self.trail.latest = keep
        self.latest = (x.copy(), value, keep)
        if self.n == 1:
            self.history.append(value)
        self.max_f = max(self.max_f, value)
        if value < self.best_f:
            self.best_f, self.best_x, self.best = value, x.copy(), keep
        return value, grad

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        self.n += 1
        out = self.evaluate(np.array(x, dtype=np.float64))
        if self.budget is not None and self.budget.exhausted:
            raise _BudgetExhausted
        return out

    def budget_result(self, nit: int) -> OptimizeResult:
        """scipy's result of a search its budget ended."""
        return OptimizeResult(
            x=self.best_x, fun=self.best_f, success=False, status=BUDGET_STATUS,
            message=self.budget.message(), nit=nit, nfev=self.n,
        )  # fmt: skip

    def result(self, res: OptimizeResult, x0: np.ndarray) -> SearchResult:
        best = (self.best_x, float(self.best_f), res, x0, self.n, self.failed)
        return SearchResult(*best, self.first, self.last, self.best, self.history)


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
    ev = _Evaluations(objective, budget, trail)
    iterates: list[float] = []  # the objective after each iteration (the stall rule's window)

    def counted(intermediate_result: Any) -> None:
        iterates.append(float(intermediate_result.fun))
        ev.history.append(iterates[-1])
        if stall_rtol is not None and len(iterates) > STALL_WINDOW:
            old, new = iterates[-1 - STALL_WINDOW], iterates[-1]
            if old - new <= stall_rtol * max(abs(new), 1.0):
                raise StopIteration

    options: dict[str, Any] = {"maxiter": int(maxiter), "ftol": ftol}
    if gtol is not None:
        options["gtol"] = gtol
    try:
        res = minimize(
            ev, x0, jac=True, method="L-BFGS-B", bounds=bounds, options=options, callback=counted
        )
    except _BudgetExhausted:
        res = ev.budget_result(len(iterates))
    return ev.result(res, x0)


# -- the search every estimator runs ----------------------------------------------------------
def _trust_region(
    objective: Callable, space: SearchSpace, x0: np.ndarray, trust: float, *, maxiter: int,
    flat_rtol: float | None = None, **options: Any,
) -> SearchResult:  # fmt: skip
    """L-BFGS-B in a box of ``+-trust`` about its start ``x0``, re-centred on the best point
    until that lies inside the box (or a round did not move it, or, with ``flat_rtol``, improved
    the objective by at most ``flat_rtol * max(|f|, 1)``), ``maxiter`` iterations in all; the
    rounds :func:`combine`\\ d."""
    low, high = space.bounds[:, 0], space.bounds[:, 1]
    budget = options.get("budget")
    x, iterations, searches = x0, int(maxiter), []
    previous = np.inf
    while iterations > 0:
        box = np.column_stack([np.maximum(low, x - trust), np.minimum(high, x + trust)])
        searches.append(minimize_lbfgsb(objective, x, box, maxiter=iterations, **options))
        iterations -= max(int(searches[-1].scipy.nit), 1)
        best = combine(searches)
        if best.x is None or (budget is not None and budget.exhausted):
            break
        if flat_rtol is not None and previous - best.fun <= flat_rtol * max(abs(best.fun), 1.0):
            break
        previous = best.fun
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
    optimizer: Any = "lbfgs",
    n_restarts: int = 0,
    random_state: Any = None,
    n_drawn: int | None = None,
    progress: bool = False,
    flat_rtol: float | None = None,
    flat_retry: float | None = None,
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
    ``flat_rtol`` (with a trust region; ``None``: off) is the flat-objective rule: the rounds
    stop once one of them improved the objective by at most ``flat_rtol * max(|f|, 1)`` -- a
    move of up to ``trust`` log units, a factor ``exp(trust)`` in every hyperparameter, gained
    (almost) nothing, as where an evidence approaches its supremum only as a hyperparameter
    goes to infinity (the signal variance on separable classes). ``flat_retry`` (log units;
    ``None``: off; L-BFGS-B without ``trust`` only): a search whose best point lies on a bound
    is run again from the same starts in a trust region of ``+-flat_retry`` with the
    flat-objective rule, and that search is the result (a search that ends inside the box is
    the plain one, at no extra cost).

    scikit-learn's optimizer API (:mod:`qpinfer.inference.restarts`): ``optimizer`` is
    ``"lbfgs"``/``"fmin_l_bfgs_b"`` (the above) or a callable
    (:func:`minimize_callable`; then
    ``maxiter``, ``trust``, ``ftol``, ``gtol`` and ``stall_rtol`` do not apply). ``n_restarts``
    more searches start from :func:`~qpinfer.inference.restarts.draw_starts` of
    ``random_state`` (the first ``n_drawn`` coordinates drawn within their bounds, ``None``:
    all), each with a fresh ``trail`` (its first inner loop starts as the first search's did)
    and a fresh count of the ``budget``'s unconverged loops; the lowest objective wins
    (:func:`~qpinfer.inference.restarts.best_of`), and only its search is checked.

    ``progress``: a tqdm progress display on standard error over the evaluations (each an inner
    loop to convergence), with the best objective so far (the estimators' ``verbose``).
    """
    if progress:
        bar = ProgressObjective(objective, what)
        try:
            return search_evidence(
                bar, space, what, maxiter=maxiter, trust=trust, quiet=quiet,
                stacklevel=stacklevel + 1, optimizer=optimizer, n_restarts=n_restarts,
                random_state=random_state, n_drawn=n_drawn, flat_rtol=flat_rtol,
                flat_retry=flat_retry, **options,
            )  # fmt: skip
        finally:
            bar.close()
    n_restarts = check_n_restarts(n_restarts)
    if not (callable(optimizer) or optimizer in LBFGS_NAMES):
        raise ValueError(f"optimizer must be 'lbfgs' or a callable, got {optimizer!r}")
    starts = [space.x0] + draw_starts(
        space.x0, space.bounds, space.names, n_restarts, check_random_state(random_state), n_drawn
    )
    run = (objective, space, optimizer, maxiter, quiet, options)
    search = _from_starts(*run, starts, trust, flat_rtol, fresh=False)
    budget = options.get("budget")
    if (
        flat_retry is not None
        and trust is None
        and not callable(optimizer)
        and search.x is not None
        and not (budget is not None and budget.exhausted)
        and _on_bound(search.x, space.bounds)
    ):
        search = _from_starts(*run, starts, flat_retry, flat_rtol, fresh=True)
    check_search(search, what, space.bounds, space.names, stacklevel=stacklevel + 1)
    return search


def _on_bound(x: np.ndarray, bounds: np.ndarray) -> bool:
    """Whether a coordinate of ``x`` lies within :data:`BOUND_ATOL` of its bound."""
    return bool(np.any(np.abs(x[:, None] - bounds) <= BOUND_ATOL))


def _from_starts(
    objective: Callable, space: SearchSpace, optimizer: Any, maxiter: int,
    quiet: tuple[type[Warning], ...], options: dict[str, Any], starts: list[np.ndarray],
    trust: float | None, flat_rtol: float | None, *, fresh: bool,
) -> SearchResult:  # fmt: skip
    """The searches of :func:`search_evidence` from each of ``starts`` (the first afresh too if
    ``fresh``: its trail emptied and the budget's unconverged loops counted anew), the best."""
    trail, budget = options.get("trail"), options.get("budget")
    searches = []
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        # a table's exact fallbacks are the user's to know (warned once per table, not quiet)
        warnings.simplefilter("default", TableFallbackWarning)
        for i, x0 in enumerate(starts):
            if i > 0 or fresh:
                if trail is not None:
                    trail.latest = None
                if budget is not None:
                    budget.restart()
            if callable(optimizer):
                search = minimize_callable(
                    optimizer,
                    objective,
                    x0,
                    space.bounds,
                    budget=budget,
                    trail=trail,
                    names=space.names,
                )
            elif trust is None:
                search = minimize_lbfgsb(objective, x0, space.bounds, maxiter=maxiter, **options)
            else:
                search = _trust_region(
                    objective, space, x0, trust, maxiter=maxiter, flat_rtol=flat_rtol, **options
                )
            searches.append(search)
    if len(searches) > 1:
        search = best_of(searches)
        if trail is not None and search.x is not None:
            trail.latest = search.best
    return search


def minimize_callable(
    optimizer: Callable,
    objective: Callable[[np.ndarray], tuple[Any, ...]],
    x0: np.ndarray,
    bounds: Any,
    *,
    budget: Any = None,
    trail: Any = None,
    names: Any = None,
) -> SearchResult:
    """A scikit-learn-style callable ``optimizer``
    (:func:`~qpinfer.inference.restarts.run_callable`) on ``objective`` (:func:`minimize_lbfgsb`'s
    protocol; failures answered by the same wall).

    The result is the optimizer's ``theta_opt`` -- what the model is fitted at -- with the
    objective there (re-evaluated unless ``theta_opt`` is a point it evaluated), not the best
    point it visited. A budget that runs out ends the optimizer's run (the best point so far,
    with the scipy-like status :data:`BUDGET_STATUS`). A ``theta_opt``
    where inference fails raises :class:`~qpinfer.inference.search_result.SearchFailedError`; one
    outside ``bounds`` a ``ValueError`` naming the coordinate (``names``).
    """
    x0 = np.asarray(x0, dtype=np.float64).copy()
    ev = _Evaluations(objective, budget, trail)
    try:
        theta = run_callable(optimizer, ev, x0, np.asarray(bounds, dtype=np.float64), names)
    except _BudgetExhausted:
        return ev.result(ev.budget_result(0), x0)
    if ev.best_x is not None and np.array_equal(theta, ev.best_x):
        value, keep = ev.best_f, ev.best
    elif ev.latest is not None and np.array_equal(theta, ev.latest[0]):
        _, value, keep = ev.latest
    else:
        ev.n += 1
        try:
            out = objective(theta)
            value, cause = float(out[0]), f"objective {float(out[0])}"
        except EVALUATION_ERRORS as exc:
            value, cause = np.nan, _describe(exc)
        if not np.isfinite(value):
            where = np.array2string(theta, precision=4)
            raise SearchFailedError(f"inference failed at theta_opt {where} ({cause})")
        keep = out[2] if len(out) > 2 else None
        if trail is not None:
            trail.latest = keep
    res = OptimizeResult(
        x=theta, fun=value, success=True, status=0, message="the callable optimizer returned",
        nit=0, nfev=ev.n,
    )  # fmt: skip
    return SearchResult(theta, value, res, x0, ev.n, ev.failed, ev.first, ev.last, keep, ev.history)
