# Over 400 lines: one base class holds the whole estimator protocol (params, checks, fit, L-BFGS, evidence).
"""What the GP estimators share: parameters, input checks, and inference by EP/QP, VB or Laplace.

:class:`GPEstimatorBase` holds everything of :class:`qpinfer.GPClassifier` and
:class:`qpinfer.GPPoissonRegressor` that does not depend on the likelihood, in scikit-learn's
conventions (constructor arguments stored verbatim, ``get_params``/``set_params``, learned state
in attributes ending in ``_``, validation at the boundary with messages that name the argument)
without depending on scikit-learn. A subclass supplies the likelihood, the target validation and
the predictions.

Inference methods (``method=``):

* ``"ep"``, ``"qp"`` (and any other projection a subclass adds, e.g. Power EP) -- the site
  updates of :func:`qpinfer.inference.ep.run_ep` with :class:`~qpinfer.inference.ep.MomentMatching` (eq. (5)) or
  :class:`~qpinfer.inference.ep.QuantileMatching` (eq. (7); sigma* from a table, exact outside it);
  evidence eq. (4), gradient R&W eq. (5.27);
* ``"laplace"`` -- :func:`qpinfer.inference.laplace.laplace_mode` (R&W Alg. 3.1), evidence R&W eq. (3.32),
  gradient R&W Alg. 5.1;
* ``"vb"`` -- :func:`qpinfer.inference.vb.vb_fixed_point` (Opper & Archambeau's Gaussian VB), the ELBO in
  place of the log marginal likelihood, its gradient the envelope theorem's.

Hyperparameters (paper Sec. 6): L-BFGS-B (at most 1000 iterations, relative function tolerance
1e-9) over the log kernel hyperparameters. For every method each evaluation re-runs the inner
loop (EP/QP sites, the Laplace mode, VB's variational parameters) to convergence, warm-started
from the previous evaluation (except for the square link, see ``_warm_start``), and returns the evidence (VB: the ELBO) with its gradient; the fit
keeps the best evidence seen. The search is :func:`qpinfer.inference.optimize.minimize_lbfgsb`: an
evaluation where inference fails backtracks (it no longer ends the search at its start); a search
that fails, never leaves its start or ends on a bound warns
(:class:`qpinfer.inference.optimize.OptimizerWarning`); it stops after ``MAX_UNCONVERGED_EVALUATIONS``
inner loops that ran to ``max_iter``. Dense fits on more than ``qpinfer.checks.DENSE_WARN_N`` rows
warn first (:class:`~qpinfer.checks.LargeDenseFitWarning`). QP first maximises EP's evidence (whose
fixed-site gradient is exact) and then polishes its own from there (see :meth:`GPEstimatorBase._optimize`). See
:mod:`qpinfer.estimators.classifier` for why the inner loop is nested rather than alternated with whole
L-BFGS-B runs, and for QP's gradient (EP's expression at QP's sites, sites held fixed).

Starting points: for the square link the posterior is symmetric under ``f -> -f`` and the
symmetric state (posterior mean 0) is a saddle that EP's and VB's updates never leave; every
method therefore starts on the positive branch (:func:`qpinfer.inference.laplace.positive_branch_start`):
EP/QP from Gaussian sites at each likelihood term's positive mode, Laplace and VB from the GP
smoother of ``sqrt(y)``. Probit starts as usual (zero sites, ``f = 0``, GPy's VB start).
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import warnings
from typing import Any

import numpy as np

from qpinfer.checks import (  # check_X, check_positive_int: re-exported (were defined here)
    DataConversionWarning,
    LargeDenseFitWarning,
    check_positive_int,
    check_X,
    warn_large_dense_fit,
)
from qpinfer.inference.ep import (
    ConvergenceWarning,
    EPResult,
    MomentMatching,
    QuantileMatching,
    log_evidence_gradient,
    predict_latent,
    run_ep,
)
from qpinfer.inference.laplace import (
    laplace_log_evidence_gradient,
    laplace_mode,
    positive_branch_start,
)
from qpinfer.inference.optimize import InnerLoopBudget, check_search, minimize_lbfgsb, theta_names
from qpinfer.inference.vb import LBFGS_OPTIONS, elbo, vb_fixed_point
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.tables import TableError, installed_table_path, open_table
from qpinfer.tables.shipped import open_shipped

__all__ = [
    "DataConversionWarning",
    "GPEstimatorBase",
    "LargeDenseFitWarning",
    "NotFittedError",
    "check_X",
]

#: The baselines (not site-update methods).
BASELINE_METHODS = ("vb", "laplace")


class NotFittedError(ValueError, AttributeError):
    """The estimator is used before ``fit`` (same bases as scikit-learn's)."""


_sklearn_compatible: dict[str, type] = {}


def not_fitted_error(message: str) -> NotFittedError:
    """A :class:`NotFittedError`; if scikit-learn is loaded, also an instance of its own
    ``NotFittedError``, so its tooling recognises it (qpinfer never imports scikit-learn)."""
    sk = sys.modules.get("sklearn.exceptions")
    if sk is None:
        return NotFittedError(message)
    cls = _sklearn_compatible.get("NotFittedError")
    if cls is None:
        cls = type("NotFittedError", (NotFittedError, sk.NotFittedError), {})
        _sklearn_compatible["NotFittedError"] = cls
    return cls(message)


_warned_exact: set[str] = set()


def warn_exact_once(reason: str, key: str) -> None:
    """QP without a table: warn once per process and ``key`` (the estimator's name)."""
    if key not in _warned_exact:
        _warned_exact.add(key)
        warnings.warn(
            f"{reason}; QP computes sigma* exactly with qpinfer.sigma_qp (slower than a table "
            "lookup). Install a table (qptables) or pass table=... . Warned once per process.",
            RuntimeWarning,
            stacklevel=5,
        )


def check_site_loop_params(est: Any) -> None:
    """Validate an estimator's ``schedule``, ``max_iter``, ``tol`` and ``damping`` (the site
    loop's settings, :class:`qpinfer.inference.site_loop.SweepSettings`) with messages that name them."""
    if est.schedule not in ("parallel", "sequential"):
        raise ValueError(f"schedule must be 'parallel' or 'sequential', got {est.schedule!r}")
    check_positive_int(est.max_iter, "max_iter")
    if not (isinstance(est.tol, int | float) and est.tol > 0):
        raise ValueError(f"tol must be a positive number, got {est.tol!r}")
    if est.damping is not None and not (0 < est.damping <= 1):
        raise ValueError(f"damping must be None or in (0, 1], got {est.damping!r}")


def site_loop_options(est: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`qpinfer.inference.ep.run_ep` / :func:`qpinfer.sparse.run_sparse_pep`
    that an estimator's ``schedule``, ``damping``, ``max_iter`` and ``tol`` set."""
    return {
        "schedule": est.schedule,
        "damping": est.damping,
        "max_iter": int(est.max_iter),
        "tol": float(est.tol),
    }


def se_kernel_from_params(est: Any, n_features: int) -> ARDSquaredExponential:
    """The initial ARD SE kernel from an estimator's ``variance``, ``length_scale`` and ``ard``
    (a scalar length scale becomes one per feature when ``ard``)."""
    ls = np.asarray(est.length_scale, dtype=np.float64)
    if ls.ndim == 0 and est.ard:
        ls = np.full(n_features, float(ls))
    elif ls.ndim == 1 and ls.size not in (1, n_features):
        raise ValueError(f"length_scale has {ls.size} entries but X has {n_features} features")
    return ARDSquaredExponential(est.variance, ls)


class ParamsMixin:
    """scikit-learn's parameter protocol (``get_params``/``set_params``/``__repr__``, the fitted
    check and the check of prediction inputs) without a dependency on scikit-learn. ``_PARAM_NAMES`` is set from the signature of the subclass's
    ``__init__``, which must store its arguments verbatim."""

    _PARAM_NAMES: tuple[str, ...] = ()
    #: the attribute whose presence means "fitted"
    _FITTED_ATTR = "result_"

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, self._FITTED_ATTR)

    def _check_is_fitted(self) -> None:
        if not hasattr(self, self._FITTED_ATTR):
            raise not_fitted_error(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator."
            )

    def _check_predict_X(self, X: Any) -> np.ndarray:
        self._check_is_fitted()
        X = check_X(X, estimator=type(self).__name__)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            params = inspect.signature(cls.__init__).parameters
            cls._PARAM_NAMES = tuple(name for name in params if name != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments (scikit-learn's ``get_params``)."""
        return {name: getattr(self, name) for name in self._PARAM_NAMES}

    def set_params(self, **params: Any):
        """Set constructor arguments (scikit-learn's ``set_params``)."""
        for key, value in params.items():
            if key not in self._PARAM_NAMES:
                raise ValueError(
                    f"Invalid parameter {key!r} for {type(self).__name__}; valid parameters are "
                    f"{sorted(self._PARAM_NAMES)}"
                )
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = type(self)().get_params()
        changed = []
        for k, v in self.get_params().items():
            d = defaults[k]
            same = v is d or (type(v) is type(d) and not isinstance(v, np.ndarray) and bool(v == d))
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


class GPEstimatorBase(ParamsMixin):
    """Shared parameters, fitting and latent predictions of the GP estimators.

    Subclasses define ``__init__`` (storing its arguments verbatim), and call
    :meth:`_fit_latent` from ``fit`` with validated inputs and the likelihood's labels.
    """

    _METHODS: tuple[str, ...] = ("qp", "ep", "vb", "laplace")
    #: the pseudo-point estimator a too-large dense fit points to (:func:`warn_large_dense_fit`)
    _SPARSE_ALTERNATIVE: str | None = None

    # -- construction of the pieces -----------------------------------------------------------
    def _validate_params(self) -> None:
        if self.method not in self._METHODS:
            names = ", ".join(repr(m) for m in self._METHODS)
            raise ValueError(f"method must be one of {names}; got {self.method!r}")
        if self.optimizer not in ("lbfgs", None):
            raise ValueError(f"optimizer must be 'lbfgs' or None, got {self.optimizer!r}")
        check_site_loop_params(self)
        check_positive_int(self.optimizer_maxiter, "optimizer_maxiter")

    def _initial_kernel(self, n_features: int) -> Any:
        if self.kernel is not None:
            for attr in ("theta", "bounds", "with_theta", "gradient_contract", "diag"):
                if not hasattr(self.kernel, attr):
                    raise ValueError(
                        f"kernel must implement the qpinfer.kernels.Kernel protocol; "
                        f"{type(self.kernel).__name__} lacks {attr!r}"
                    )
            return self.kernel.with_theta(self.kernel.theta)  # a copy; the parameter is kept
        return se_kernel_from_params(self, n_features)

    def _warn_exact(self, reason: str) -> None:
        warn_exact_once(reason, type(self).__name__)

    def _resolve_table(self, likelihood: Any) -> Any:
        if self.method != "qp":
            return None
        table = self.table
        if isinstance(table, str) and table == "exact":
            return None
        if table is None:
            path = installed_table_path(likelihood)
            if not path.exists():
                shipped = open_shipped(likelihood.name)  # the v2 table inside qpinfer
                if shipped is not None:
                    return shipped
                self._warn_exact(f"no installed sigma* table for {likelihood.name!r} at {path}")
                return None
            try:
                return open_table(path)
            except TableError as exc:
                self._warn_exact(f"the installed table is unusable ({exc})")
                return None
        if isinstance(table, str | os.PathLike):
            return open_table(table)
        if not hasattr(table, "sigma_ratio"):
            raise ValueError(
                f"table must be None, 'exact', a path or a table from qpinfer.open_table; got "
                f"{type(table).__name__}"
            )
        return table

    def _projection(self, likelihood: Any, table: Any) -> Any:
        if self.method in BASELINE_METHODS:
            return None
        if self.method == "ep":
            return MomentMatching(likelihood)
        return QuantileMatching(likelihood, table)

    def _run(self, K: np.ndarray, y: np.ndarray, projection: Any, init=None) -> EPResult:
        return run_ep(K, y, projection, init=init, **site_loop_options(self))

    # -- one inner fit at fixed hyperparameters, and its gradient ----------------------------
    def _inner(
        self, kern: Any, X: np.ndarray, K: np.ndarray, y: np.ndarray, init: Any, projection=None
    ) -> Any:
        """EP/QP sites (``projection``, default ``self.projection_``) or the Laplace mode at
        fixed hyperparameters (warm start ``init``)."""
        lik = self.likelihood_
        if self.method == "laplace":
            return laplace_mode(K, y, lik, init=init, max_iter=max(int(self.max_iter), 100))
        if self.method == "vb":
            return vb_fixed_point(K, y, lik, init, max_iter=int(self.max_iter))
        if init is None and lik.name == "poisson_square":
            _, tau, nu = positive_branch_start(K, y, lik)
            init = (tau, nu)
        return self._run(K, y, projection or self.projection_, init)

    def _gradient(self, kern: Any, X: np.ndarray, K: np.ndarray, y: np.ndarray, res: Any):
        if self.method == "laplace":
            return laplace_log_evidence_gradient(kern, X, res, self.likelihood_, y, K)
        if self.method == "vb":  # the partial derivative; total at the optimum (envelope)
            _, _, _, G, _ = elbo(K, res.alpha, res.beta, y, self.likelihood_, lam=res.tau)
            return np.asarray(kern.gradient_contract(X, G, K), dtype=np.float64)
        return log_evidence_gradient(kern, X, res, K)

    def _warm_start(self, res: Any) -> Any:
        """The state to start the next inner fit from (at other hyperparameters), or ``None``.

        ``None`` (the positive-branch start) for the square link: its likelihood terms are
        bimodal in f, and sites warm-started from a distant length scale can converge to a
        fixed point that mixes branches (coal seed 45: evidence -272.7 instead of -124.4 at the
        same hyperparameters), which stalled L-BFGS-B at its starting point.
        """
        if self.likelihood_.name == "poisson_square":
            return None
        return res.a if hasattr(res, "a") else (res.tau, res.nu)

    # -- fitting ------------------------------------------------------------------------------
    def _fit_latent(self, X: np.ndarray, y: np.ndarray, likelihood: Any) -> None:
        """Fit the latent posterior (and hyperparameters) to validated ``X`` and labels ``y``
        (in the likelihood's form); sets the fitted attributes shared by all estimators."""
        warn_large_dense_fit(type(self).__name__, X.shape[0], self._SPARSE_ALTERNATIVE)
        self.likelihood_ = likelihood
        table = self._resolve_table(likelihood)
        self.table_ = table
        self.projection_ = self._projection(likelihood, table)
        kernel = self._initial_kernel(X.shape[1])

        self.stage_seconds_ = {}
        self.n_inner_iter_total_ = 0  # inner iterations over every evaluation (_lbfgs adds)
        if self.optimizer == "lbfgs":
            kernel, result, n_evals = self._optimize(kernel, X, y)
        else:
            start = time.perf_counter()
            result = self._inner(kernel, X, kernel(X), y, None)
            self.stage_seconds_[self.method] = time.perf_counter() - start
            n_evals = 1
            self.n_inner_iter_total_ = int(result.n_iter)
            self._warn_not_converged(result)

        self.n_features_in_ = X.shape[1]
        self.X_train_ = X
        self.y_train_ = y
        self.kernel_ = kernel
        self.result_ = result
        if isinstance(result, EPResult):
            self.ep_result_ = result
        elif hasattr(self, "ep_result_"):
            del self.ep_result_
        self.log_marginal_likelihood_ = result.log_marginal_likelihood
        self.n_iter_ = result.n_iter
        self.n_evaluations_ = n_evals

    def _warn_not_converged(self, result: Any) -> None:
        if isinstance(result, EPResult) or result.converged:
            return  # run_ep warns itself
        warnings.warn(
            f"{self.method}: the inner optimisation did not converge ({type(result).__name__})",
            ConvergenceWarning,
            stacklevel=4,
        )

    def _optimize(self, kernel, X, y) -> tuple[Any, Any, int]:
        """Maximise the evidence over the log hyperparameters with L-BFGS-B (paper Sec. 6).

        Each evaluation runs the inner loop (EP/QP sites, the Laplace mode or VB's fixed point)
        to convergence, warm-started from the previous evaluation (:meth:`_warm_start`), and
        returns the evidence and its gradient.

        QP starts from EP's optimum: QP's evidence (eq. (4) at QP's sites) has no cheap exact
        gradient -- the fixed-site gradient misses the sites' dependence on the hyperparameters,
        so L-BFGS-B's line search stalls far from the optimum (on Sonar at log signal variance
        ~4 where the evidence keeps rising to ~10). EP's evidence, whose fixed-site gradient is
        exact, is the closest surrogate: it is maximised first (from the user's initial
        hyperparameters, as for every method), then QP's own evidence is polished from there
        with QP's sites warm-started from EP's. Returns ``(kernel, result, n_evaluations)``;
        records each stage's wall time in ``stage_seconds_``.
        """
        init, n_ep = None, 0
        if self.method == "qp":
            ep = MomentMatching(self.likelihood_)
            start = time.perf_counter()
            kernel, ep_result, n_ep = self._lbfgs(kernel, X, y, None, ep)
            self.stage_seconds_["ep"] = time.perf_counter() - start
            init = self._warm_start(ep_result)
        start = time.perf_counter()
        kern, result, n = self._lbfgs(kernel, X, y, init, None)
        self.stage_seconds_[self.method] = time.perf_counter() - start
        if not result.converged:
            warnings.warn(
                f"{self.method}: the inner loop did not converge within max_iter={self.max_iter} "
                "at the fitted hyperparameters",
                ConvergenceWarning,
                stacklevel=3,
            )
        return kern, result, n_ep + n

    def _what(self, stage: str | None = None) -> str:
        """``"GPClassifier(method='qp')"`` (plus the stage, e.g. QP's EP stage): who warns."""
        tail = f", stage {stage!r}" if stage and stage != self.method else ""
        return f"{type(self).__name__}(method={self.method!r}{tail})"

    def _lbfgs(self, kernel, X, y, init, projection) -> tuple[Any, Any, int]:
        """L-BFGS-B from ``kernel.theta`` (:func:`qpinfer.inference.optimize.minimize_lbfgsb`: a failed
        evaluation backtracks, the exit is checked); returns the best
        ``(kernel, result, n_evaluations)``."""
        state: dict[str, Any] = {"init": init, "best": None}
        budget = InnerLoopBudget(int(self.max_iter))

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            kern = kernel.with_theta(theta)
            K = kern(X)
            res = self._inner(kern, X, K, y, state["init"], projection)
            budget.record(res)
            grad = self._gradient(kern, X, K, y, res)
            value = res.log_marginal_likelihood
            if not (np.isfinite(value) and np.all(np.isfinite(grad))):
                return -value, -grad  # a failure: minimize_lbfgsb backtracks
            state["init"] = self._warm_start(res)
            best = state["best"]
            if best is None or value > best[2].log_marginal_likelihood:
                state["best"] = (theta.copy(), kern, res)
            return -value, -grad

        with warnings.catch_warnings():
            # the first evaluations may run at extreme hyperparameters; only the result counts
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            search = minimize_lbfgsb(
                objective,
                kernel.theta,
                kernel.bounds,
                maxiter=int(self.optimizer_maxiter),
                ftol=LBFGS_OPTIONS["ftol"],
                budget=budget,
            )
        self.n_inner_iter_total_ = getattr(self, "n_inner_iter_total_", 0) + budget.n_inner
        stage = "ep" if isinstance(projection, MomentMatching) else self.method
        check_search(search, self._what(stage), kernel.bounds, theta_names(kernel), stacklevel=4)
        _, kern, result = state["best"]
        return kern, result, search.n_evaluations

    # -- latent predictions and the evidence --------------------------------------------------
    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent f at ``X`` (R&W eqs. (3.60)-(3.61), Alg. 3.2)."""
        X = self._check_predict_X(X)
        K_star = self.kernel_(self.X_train_, X)
        return predict_latent(self.result_.posterior, K_star, self.kernel_.diag(X))

    def log_marginal_likelihood(
        self, theta: np.ndarray | None = None, eval_gradient: bool = False
    ) -> float | tuple[float, np.ndarray]:
        """The evidence at log hyperparameters ``theta`` (default: the fitted ones).

        EP/QP: eq. (4); Laplace: R&W eq. (3.32); VB: the ELBO. With another ``theta`` the inner
        loop is re-run, warm-started from the fitted state (VB: ``(alpha, beta)`` re-optimised at
        fixed ``theta``). Gradients: R&W eq. (5.27) with the sites fixed (the total derivative
        for EP at convergence; see :mod:`qpinfer.inference.ep` for QP), R&W Alg. 5.1 (Laplace, total), and
        for VB the partial derivative at the optimal ``(alpha, beta)`` (total by the envelope
        theorem, up to the inner optimiser's tolerance).
        """
        self._check_is_fitted()
        X, y = self.X_train_, self.y_train_
        if theta is None:
            kernel, result = self.kernel_, self.result_
        else:
            kernel = self.kernel_.with_theta(np.asarray(theta, dtype=np.float64))
            result = self._inner(kernel, X, kernel(X), y, self._warm_start(self.result_))
        if not eval_gradient:
            return result.log_marginal_likelihood
        K = kernel(X)
        grad = self._gradient(kernel, X, K, y, result)
        return result.log_marginal_likelihood, grad
