"""One L-BFGS-B helper for every hyperparameter search: failures backtrack, exits are checked.

Every estimator maximises an evidence (eq. (4), R&W eq. (3.32), the ELBO, eq. (110)/(128)) over
log hyperparameters with L-BFGS-B (paper 000 Sec. 6). An evaluation can fail -- the inner loop
raises ``LinAlgError``/``ValueError`` or returns a non-finite evidence -- typically at the
optimiser's first trial step, which follows the raw gradient to the bounds (a count of 1000
among counts ~3 gives a gradient of ~1e3). Returning ``inf`` there ends L-BFGS-B's line search
on the spot: it reports convergence at its starting point. :func:`minimize_lbfgsb` instead
returns a finite *wall* above every value seen, ``f_max + (1 + |f_best|) (1 + |x - x_best|^2)``,
whose gradient points back to the best point, so the line search backtracks (as it does for any
step that increases the objective) and the search goes on from a step that works.

Every exit is then checked (:func:`check_search`): a search that scipy reports as failed
(``success=False``, e.g. the iteration limit or an abnormal line search), one that never got
past its starting point while evaluations failed, and a best point on a bound of the box each
warn with :class:`OptimizerWarning` (a :class:`~qpinfer.inference.site_loop.ConvergenceWarning`) naming
the estimator, the method, scipy's message, the failures' cause and whether the result is the
start. A search in which no evaluation succeeded raises :class:`SearchFailedError` with the
first and last failure's message.

Every evaluation runs an inner loop (EP/QP sweeps, Newton steps, VB steps) capped at
``max_iter``; one that ends without converging has spent the whole cap. An
:class:`InnerLoopBudget` passed to :func:`minimize_lbfgsb` ends the search (with the best point
so far and an :class:`OptimizerWarning`) once :data:`MAX_UNCONVERGED_EVALUATIONS` evaluations
did so, so that a fit costs at most that many ``max_iter``-long inner loops besides the
converged ones (before: up to L-BFGS-B's 15000 evaluations of ``max_iter`` sweeps each).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult, minimize

from qpinfer.inference.site_loop import ConvergenceWarning

__all__ = [
    "EVALUATION_ERRORS",
    "MAX_UNCONVERGED_EVALUATIONS",
    "BoundWarning",
    "InnerLoopBudget",
    "OptimizerWarning",
    "SearchFailedError",
    "SearchResult",
    "check_search",
    "combine",
    "minimize_lbfgsb",
    "theta_names",
]

#: what an evaluation may raise when inference fails at a hyperparameter value (the search
#: backtracks from it); anything else propagates
EVALUATION_ERRORS = (np.linalg.LinAlgError, ValueError, FloatingPointError, OverflowError)
#: scipy's status when the callback raised ``StopIteration`` (a deliberate stop, not a failure)
_STOPPED_BY_CALLBACK = 99
#: a best point within this distance (log units) of a bound counts as "at the bound"
BOUND_ATOL = 1e-3
_ABNORMAL_STATUS = 2  # scipy: the line search found no decrease
_ABNORMAL = (
    " -- the line search found no decrease along the gradient: near the optimum the inner "
    "loop's tolerance makes the evidence and its gradient inexact"
)
#: a search stops once this many evaluations' inner loops ended without converging
MAX_UNCONVERGED_EVALUATIONS = 10
#: scipy-like status of a search ended by its :class:`InnerLoopBudget`
BUDGET_STATUS = -1


class OptimizerWarning(ConvergenceWarning):
    """A hyperparameter search ended without success, never left its start, or ended on a bound."""


class BoundWarning(OptimizerWarning):
    """A fitted hyperparameter lies on a bound of the search box."""


class SearchFailedError(ValueError):
    """No evaluation of a hyperparameter search succeeded (the message names the cause)."""


class InnerLoopBudget:
    """The inner loops of one search: their total iterations (``n_inner``) and how many ended
    without converging; :meth:`record` each evaluation's inner result (``.n_iter``,
    ``.converged``). Exhausted after ``limit`` unconverged ones."""

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
    """One :class:`SearchResult` for consecutive searches (restarts): the best point of all, the
    first search's start, the last one's scipy result, the evaluations and failures summed."""
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
    )


def _describe(exc_or_text: Any) -> str:
    if isinstance(exc_or_text, BaseException):
        text = f"{type(exc_or_text).__name__}: {exc_or_text}"
    else:
        text = str(exc_or_text)
    return text if len(text) <= 300 else text[:297] + "..."


def minimize_lbfgsb(
    objective: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    bounds: Any,
    *,
    maxiter: int,
    ftol: float = 1e-9,
    gtol: float | None = None,
    callback: Callable[[Any], None] | None = None,
    budget: InnerLoopBudget | None = None,
) -> SearchResult:
    """Minimise ``objective`` (value and gradient) by L-BFGS-B from ``x0`` within ``bounds``.

    An evaluation that raises one of :data:`EVALUATION_ERRORS` or returns a non-finite value or
    gradient is a *failure*: before any success the optimiser sees ``inf`` (it stops); after one,
    the wall of the module docstring, so its line search backtracks towards the best point.
    With a ``budget`` (which ``objective`` feeds), the search ends once it is exhausted.
    Returns the best successful evaluation (:class:`SearchResult`); check it with
    :func:`check_search`.
    """
    x0 = np.asarray(x0, dtype=np.float64).copy()
    st: dict[str, Any] = {"best_x": None, "best_f": np.inf, "max_f": -np.inf, "n": 0, "failed": 0}
    st["first"] = st["last"] = None
    st["nit"] = 0

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
            value, grad = objective(x)
        except EVALUATION_ERRORS as exc:
            return fail(x, exc)
        value = float(value)
        grad = np.asarray(grad, dtype=np.float64)
        if not np.isfinite(value):
            return fail(x, f"objective {value} at x={np.array2string(x, precision=3)}")
        if not np.all(np.isfinite(grad)):
            return fail(x, f"non-finite gradient at x={np.array2string(x, precision=3)}")
        st["max_f"] = max(st["max_f"], value)
        if value < st["best_f"]:
            st["best_f"], st["best_x"] = value, x.copy()
        return value, grad

    def wrapped(x: np.ndarray) -> tuple[float, np.ndarray]:
        st["n"] += 1
        out = evaluate(x)
        if budget is not None and budget.exhausted:
            raise _BudgetExhausted
        return out

    def counted(intermediate_result: Any) -> None:
        st["nit"] += 1
        if callback is not None:
            callback(intermediate_result)

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
            message=budget.message(), nit=st["nit"], nfev=st["n"],
        )  # fmt: skip
    return SearchResult(
        st["best_x"], float(st["best_f"]), res, x0, st["n"], st["failed"], st["first"], st["last"]
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
      (``names[i]``, default ``theta[i]``) and the bound.
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
            OptimizerWarning,
            stacklevel=stacklevel + 1,
        )
    elif search.best_is_start and search.n_failed:
        warnings.warn(
            f"{what}: L-BFGS-B found nothing better than its starting point ({res.message}); "
            f"{failures}; the result is the starting point",
            OptimizerWarning,
            stacklevel=stacklevel + 1,
        )
    if bounds is None:
        return
    b = np.asarray(
        [(-np.inf if lo is None else lo, np.inf if hi is None else hi) for lo, hi in bounds],
        dtype=np.float64,
    )
    hits = []
    for i, (xi, (lo, hi)) in enumerate(zip(search.x, b, strict=False)):
        name = names[i] if names is not None and i < len(names) else f"theta[{i}]"
        if abs(xi - lo) <= BOUND_ATOL:
            hits.append(f"{name} = {xi:.6g} at its lower bound")
        elif abs(xi - hi) <= BOUND_ATOL:
            hits.append(f"{name} = {xi:.6g} at its upper bound")
    if hits:
        warnings.warn(
            f"{what}: the fitted {', '.join(hits)}; the evidence would rise beyond the bound. "
            "A length scale at its upper bound marks a feature the fit ignores; at its lower "
            "bound, a fit that follows every point (outliers?). Widen the kernel's bounds if "
            "that matters.",
            BoundWarning,
            stacklevel=stacklevel + 1,
        )


def theta_names(kernel: Any) -> list[str]:
    """Names of a kernel's log hyperparameters for messages: the ARD SE kernel's
    ``log variance``, ``log length_scale[j]``; ``theta[i]`` for other kernels."""
    n = int(np.asarray(kernel.theta).size)
    if (
        hasattr(kernel, "length_scale")
        and hasattr(kernel, "variance")
        and n == 1 + np.size(kernel.length_scale)
    ):
        return ["log variance"] + [f"log length_scale[{j}]" for j in range(n - 1)]
    return [f"theta[{i}]" for i in range(n)]
