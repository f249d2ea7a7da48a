"""What the two sparse (pseudo-point) estimators share: parameters, the initial kernel and the
initial inducing inputs (scikit-learn protocol via :class:`qpinfer.estimators.base.ParamsMixin`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from qpinfer.checks import check_positive_int
from qpinfer.estimators.base import ParamsMixin, se_kernel_from_params
from qpinfer.inference.optimize import InnerLoopBudget, SearchResult, check_search, minimize_lbfgsb
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sparse.pseudo_points import _check_kernel, kmeans_inducing_points
from qpinfer.kernels import ARDSquaredExponential

__all__ = ["DEFAULT_N_INDUCING", "SparseEstimatorBase"]

LBFGS_FTOL = 1e-9  # paper 000 Sec. 6 (as GPClassifier)
#: the energy-stall stopping rule (:meth:`SparseEstimatorBase._lbfgs`): the window, in iterations
STALL_WINDOW = 10
#: pseudo-points used by default (``n_inducing=None``): ``min(DEFAULT_N_INDUCING, n_samples)``
DEFAULT_N_INDUCING = 50


class SparseEstimatorBase(ParamsMixin):
    """Parameter handling shared by the two estimators (scikit-learn protocol via
    :class:`qpinfer.estimators.base.ParamsMixin`)."""

    _FITTED_ATTR = "inducing_points_"

    def _validate_common(self) -> None:
        if self.optimizer not in ("lbfgs", None):
            raise ValueError(f"optimizer must be 'lbfgs' or None, got {self.optimizer!r}")
        check_positive_int(self.max_optimizer_iter, "max_optimizer_iter")
        if not (isinstance(self.jitter, int | float) and self.jitter >= 0):
            raise ValueError(f"jitter must be a non-negative number, got {self.jitter!r}")

    def _store_params(self, args: dict[str, Any]) -> None:
        """Store the constructor arguments ``args`` (``locals()`` of ``__init__``) verbatim."""
        for name in self._PARAM_NAMES:
            setattr(self, name, args[name])

    def _lbfgs(
        self,
        objective: Any,
        p0: np.ndarray,
        bounds: list,
        stall_rtol: float | None = None,
        names: list[str] | None = None,
        quiet: bool = False,
        budget: InnerLoopBudget | None = None,
    ) -> SearchResult:
        """L-BFGS-B on ``objective`` (value and gradient) from ``p0``: at most
        ``max_optimizer_iter`` iterations, relative function tolerance 1e-9 (paper 000 Sec. 6);
        a failed evaluation backtracks and the exit is checked (:mod:`qpinfer.inference.optimize`:
        warnings name the estimator, scipy's message and any parameter ending on a bound,
        ``names[i]``). ``quiet``: ignore the inner loops' convergence and runtime warnings
        during the search (only the result counts); ``budget``: the inner loops' budget that
        ``objective`` feeds (the search ends once it is exhausted). Returns the best evaluation.

        ``stall_rtol`` (``None``: off) adds the energy-stall rule: stop once the objective has
        decreased by at most ``stall_rtol * max(|f|, 1)`` over the last :data:`STALL_WINDOW`
        iterations. A window, not L-BFGS-B's one-iteration ``ftol``, so one short step does not
        end the search; relative to ``|f|`` (which grows like N), so it is a per-point rule."""
        callback = None
        if stall_rtol is not None:
            history: list[float] = []

            def callback(intermediate_result: Any) -> None:
                history.append(float(intermediate_result.fun))
                if len(history) > STALL_WINDOW:
                    old, new = history[-1 - STALL_WINDOW], history[-1]
                    if old - new <= stall_rtol * max(abs(new), 1.0):
                        raise StopIteration

        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", RuntimeWarning)
            search = minimize_lbfgsb(
                objective,
                p0,
                bounds,
                maxiter=int(self.max_optimizer_iter),
                ftol=LBFGS_FTOL,
                callback=callback,
                budget=budget,
            )
        method = getattr(self, "method", None)
        what = type(self).__name__ + ("" if method is None else f"(method={method!r})")
        check_search(search, what, bounds, names, stacklevel=3)
        return search

    def _n_inducing_for(self, n_samples: int) -> int:
        """The number of pseudo-points M for ``n_samples`` training rows, resolved at fit time:
        ``inducing_points``' rows if given, else ``n_inducing``, whose default ``None`` means
        ``min(DEFAULT_N_INDUCING, n_samples)`` (so the default fits any data set). An explicit
        ``n_inducing`` above ``n_samples`` is refused (at most one pseudo-point per training
        point; not clipped, so the M a user asked for is never silently changed)."""
        if self.inducing_points is not None:
            return int(np.asarray(self.inducing_points).shape[0])
        m = self.n_inducing
        if m is None:
            return min(DEFAULT_N_INDUCING, n_samples)
        is_int = isinstance(m, int | np.integer) and not isinstance(m, bool)
        if not (is_int and 1 <= m <= n_samples):
            raise ValueError(
                f"n_inducing must be None (the default, min({DEFAULT_N_INDUCING}, n_samples)) or "
                f"an integer in [1, n_samples={n_samples}] (at most one pseudo-point per training "
                f"point), got {m!r}"
            )
        return int(m)

    def _initial_kernel(self, n_features: int) -> ARDSquaredExponential:
        if self.kernel is not None:
            _check_kernel(self.kernel)
            return self.kernel.with_theta(self.kernel.theta)
        return se_kernel_from_params(self, n_features)

    def _initial_inducing(self, X: np.ndarray) -> np.ndarray:
        m = self._n_inducing_for(X.shape[0])
        if self.inducing_points is not None:
            Z = np.asarray(self.inducing_points, dtype=np.float64)
            if Z.ndim != 2 or Z.shape[1] != X.shape[1] or not np.all(np.isfinite(Z)):
                raise ValueError(
                    f"inducing_points must be a finite (M, {X.shape[1]}) array, got shape {Z.shape}"
                )
            return Z.copy()
        return kmeans_inducing_points(X, m, self.random_state)
