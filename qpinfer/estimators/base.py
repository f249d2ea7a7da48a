# Over 400 lines: one class holds what the dense estimators share (inner loop, kernel checks, searches, evidence); split, its methods and the subclasses' overrides would span modules.
"""What the dense GP estimators share: fitting by EP/QP, VB or Laplace, and latent predictions.

:class:`GPEstimatorBase` holds everything of :class:`qpinfer.GPClassifier`,
:class:`qpinfer.GPPoissonRegressor` and the Student-t regressor that does not depend on the
likelihood, in scikit-learn's conventions (learned state in attributes ending in ``_``,
validation at the boundary with messages that name the argument) without depending on
scikit-learn; its parameters (shared with the sparse estimators: their defaults, checks and
text) are :class:`qpinfer.estimators.params.SiteLoopParams`, its protocol
:class:`qpinfer.estimators.protocol.ParamsMixin`. A subclass supplies the likelihood, the target
validation and the predictions.

Inference methods (``method=``):

* ``"ep"``, ``"qp"`` (and other projections, e.g. Power EP) -- the Anderson-accelerated site
  updates of :func:`qpinfer.inference.ep.run_ep` with :class:`~qpinfer.MomentMatching` (eq. (5))
  or :class:`~qpinfer.QuantileMatching` (eq. (7)), EP's moments and sigma* from the tables
  (:func:`~qpinfer.estimators.tables.with_moment_table`); evidence eq. (4), R&W eq. (5.27);
* ``"laplace"`` -- :func:`qpinfer.inference.laplace.laplace_mode` (R&W Alg. 3.1), evidence R&W eq.
  (3.32), gradient R&W Alg. 5.1;
* ``"vb"`` -- :func:`qpinfer.inference.vb.vb_fixed_point` (Opper & Archambeau's Gaussian VB), the
  ELBO in place of the log marginal likelihood, its gradient the envelope theorem's.

Hyperparameters (paper Sec. 6): L-BFGS-B (at most 1000 iterations, relative function tolerance
1e-9) over the log kernel hyperparameters. For every method each evaluation re-runs the inner
loop (EP/QP sites, the Laplace mode, VB's variational parameters) to convergence, warm-started
from the previous evaluation (except for the square link, see ``_warm_start``), and returns the
evidence (VB: the ELBO) with its gradient; the fit keeps the best evidence seen. The search is
:func:`qpinfer.inference.optimize.search_evidence`: an evaluation where inference fails backtracks
(it no longer ends the search at its start); a search that fails, never leaves its start or ends on
a bound warns (:class:`qpinfer.inference.search_result.OptimizerWarning`); it stops after
``MAX_UNCONVERGED_EVALUATIONS`` inner loops that ran to ``max_iter``. Dense fits on more than
``qpinfer.checks.DENSE_WARN_N`` rows warn first (:class:`~qpinfer.checks.LargeDenseFitWarning`). QP
maximises its own ``qp_objective`` in one search with the total gradient through its site fixed
point (:mod:`qpinfer.inference.total_gradient`), or with ``qp_objective="ep"`` first EP's
evidence and then polishes its own from there (see ``GPEstimatorBase._optimize()``); why the
inner loop is nested, not alternated with whole L-BFGS-B runs: :mod:`qpinfer.estimators.classifier`.

The kernel matrix is checked at the start and at every evaluation of the search (Laplace's: at
the start) (:func:`qpinfer.inference.dense_posterior.check_kernel_matrix`: a ``ValueError``
naming ``kernel`` if it is not positive semi-definite); a fit whose kernel matrix is the identity or a constant at
the start and at the end (features on an extreme scale) warns (``OptimizerWarning``).

Starting points: for the square link the posterior is symmetric under ``f -> -f`` and the
symmetric state (posterior mean 0) is a saddle that EP's and VB's updates never leave; every
method starts on the positive branch (:func:`qpinfer.inference.laplace.positive_branch_start`).
QP's own searches, and EP's on many sites, warm-start each evaluation by chord steps from the
previous fixed point (:class:`qpinfer.inference.site_chord.SearchChord`).
"""

from __future__ import annotations

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
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.params import SiteLoopParams
from qpinfer.estimators.protocol import NotFittedError, log_marginal_likelihood_method
from qpinfer.estimators.tables import resolve_table, with_moment_table
from qpinfer.inference.dense_posterior import check_kernel_matrix, degenerate_kernel_matrix
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
from qpinfer.inference.optimize import InnerLoopBudget, SearchTrail, search_evidence
from qpinfer.inference.search_result import warn_extreme_scale
from qpinfer.inference.search_space import kernel_block, search_space
from qpinfer.inference.site_chord import EP_CHORD_MIN_SITES, SearchChord
from qpinfer.inference.total_gradient import qp_objective_gradient
from qpinfer.inference.vb import elbo, vb_fixed_point
from qpinfer.kernels.sklearn_se import sklearn_face

__all__ = [
    "DataConversionWarning",
    "GPEstimatorBase",
    "LargeDenseFitWarning",
    "NotFittedError",
    "check_X",
    "check_positive_int",
]

#: The baselines (not site-update methods).
BASELINE_METHODS = ("vb", "laplace")


class GPEstimatorBase(SiteLoopParams):
    """Fitting and latent predictions of the dense GP estimators.

    Subclasses are :func:`qpinfer.estimators.params.estimator` dataclasses (their own
    parameters besides the shared ones: ``method``, ``table``, ...) and call
    ``_fit_latent()`` from ``fit`` with validated inputs and the likelihood's labels.
    """

    _METHODS: tuple[str, ...] = ("qp", "ep", "vb", "laplace")
    #: QP's own-objective search (``qp_objective`` "evidence" or "loo") that ends on a bound
    #: is run again in a trust region of this many log units with the flat-objective rule
    #: ``_QP_FLAT_RTOL`` (:func:`qpinfer.inference.optimize.search_evidence`'s ``flat_retry``,
    #: ``flat_rtol``; ``experiments/qp_flat_search.py``); ``None``: plain L-BFGS-B only
    _QP_SEARCH_TRUST: float | None = None
    _QP_FLAT_RTOL: float | None = None
    #: the pseudo-point estimator a too-large dense fit points to (:func:`warn_large_dense_fit`)
    _SPARSE_ALTERNATIVE: str | None = None

    # -- construction of the pieces -----------------------------------------------------------
    def _validate_params(self) -> None:
        if self.method not in self._METHODS:
            names = ", ".join(repr(m) for m in self._METHODS)
            raise ValueError(f"method must be one of {names}; got {self.method!r}")
        self._check_search_params()
        self._check_site_loop()

    def _resolve_table(self, likelihood: Any) -> Any:
        """QP's sigma* table (:func:`qpinfer.estimators.tables.resolve_table`)."""
        return resolve_table(self, likelihood)

    def _projection(self, likelihood: Any, table: Any) -> Any:
        if self.method in BASELINE_METHODS:
            return None
        if self.method == "ep":
            return MomentMatching(likelihood)
        return QuantileMatching(likelihood, table)

    def _run(self, K: np.ndarray, y: np.ndarray, projection: Any, init=None, **loop) -> EPResult:
        options = {**self._site_loop_options(), **loop}  # (loop: run_ep's keep_v)
        return run_ep(K, y, projection, init=init, acceleration=True, **options)

    # -- one inner fit at fixed hyperparameters, and its gradient ----------------------------
    def _inner(self, kern, X, K, y, init, projection=None, checked=False, **loop) -> Any:
        """EP/QP sites (``projection``, default ``self.projection_``; ``loop``: keywords of
        :meth:`_run`) or the Laplace mode at fixed hyperparameters (warm start ``init``) on
        ``K = kern(X)``, checked first (``check_kernel_matrix``) unless ``checked``."""
        if not checked:
            check_kernel_matrix(K, kern)
        lik = self.likelihood_
        if self.method == "laplace":
            return laplace_mode(K, y, lik, init=init, max_iter=max(int(self.max_iter), 100))
        if self.method == "vb":
            return vb_fixed_point(K, y, lik, init, max_iter=int(self.max_iter))
        if init is None and lik.two_branches:
            _, tau, nu = positive_branch_start(K, y, lik)
            init = (tau, nu)
        return self._run(K, y, projection or self.projection_, init, **loop)

    def _own_objective(self, projection: Any = None) -> bool:
        """Whether this search maximises an objective of QP's own (``qp_objective`` "evidence"
        or "loo": one search, total gradient) rather than EP's evidence or the fixed-site one."""
        return (
            self.method == "qp"
            and self.qp_objective != "ep"
            and not isinstance(projection, MomentMatching)
        )

    def _value_and_gradient(
        self, kern: Any, X: np.ndarray, K: np.ndarray, y: np.ndarray, res: Any, **own: Any
    ) -> tuple[float, np.ndarray]:
        """The search objective at the converged ``res`` and its gradient in ``kern.theta``:
        QP's own (:func:`qpinfer.inference.total_gradient.qp_objective_gradient`, ``own``: its
        keywords, ``objective`` defaults to ``qp_objective``) or the evidence with
        :meth:`_gradient`."""
        if not self._own_objective():
            return res.log_marginal_likelihood, self._gradient(kern, X, K, y, res)
        own.setdefault("objective", self.qp_objective)
        return qp_objective_gradient(kern, X, K, y, res, self.projection_, **own)

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
        if self.likelihood_.two_branches:
            return None
        return res.a if hasattr(res, "a") else (res.tau, res.nu)

    # -- fitting ------------------------------------------------------------------------------
    def _fit_latent(self, X: np.ndarray, y: np.ndarray, likelihood: Any) -> None:
        """Fit the latent posterior (and hyperparameters) to validated ``X`` and labels ``y``
        (in the likelihood's form); sets the fitted attributes shared by all estimators."""
        warn_large_dense_fit(type(self).__name__, X.shape[0], self._SPARSE_ALTERNATIVE)
        table = self._resolve_table(likelihood)
        self.likelihood_ = likelihood = with_moment_table(self, likelihood, table)
        self.table_ = table
        self.projection_ = self._projection(likelihood, table)
        kernel = self._initial_kernel(X.shape[1] if X.ndim == 2 else 0)
        K = kernel(X)
        check_kernel_matrix(K, kernel)
        degenerate = degenerate_kernel_matrix(K)
        self.stage_seconds_ = {}
        self.n_inner_iter_total_ = 0  # inner iterations over every evaluation (_search adds)
        self._start_values: list[float] = []  # the restarts' best objectives (_search sets)
        if self.optimizer is not None:
            kernel, result, n_evals = self._optimize(kernel, X, y)
        else:
            start = time.perf_counter()
            result = self._inner(kernel, X, K, y, None, checked=True)
            self.stage_seconds_[self.method] = time.perf_counter() - start
            n_evals = 1
            self.n_inner_iter_total_ = int(result.n_iter)
            self._warn_not_converged(result)

        if X.ndim == 2:
            self.n_features_in_ = X.shape[1]
        elif "n_features_in_" in vars(self):  # samples that are not vectors: no features
            del self.n_features_in_
        self.X_train_ = X
        self.y_train_ = y
        self.kernel_ = sklearn_face(kernel)  # scikit-learn's face of the default kernel
        self.result_ = result
        if isinstance(result, EPResult):
            self.ep_result_ = result
        elif hasattr(self, "ep_result_"):
            del self.ep_result_
        self.log_marginal_likelihood_ = result.log_marginal_likelihood
        self.log_marginal_likelihood_value_ = result.log_marginal_likelihood  # scikit-learn's
        values = self._start_values or [-result.log_marginal_likelihood]
        self.restart_evidence_ = -np.asarray(values, dtype=np.float64)
        self.n_iter_ = result.n_iter
        self.n_evaluations_ = n_evals
        if degenerate is not None and degenerate_kernel_matrix(kernel(X)) == degenerate:
            warn_extreme_scale(self._what(), X, degenerate, kernel, self.optimizer is not None, 4)

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

        QP with its own ``qp_objective`` (``"evidence"``, the default, or ``"loo"``) is one
        search like every other method's, each evaluation returning the objective's total
        gradient (:func:`qpinfer.inference.total_gradient.qp_objective_gradient`). With
        ``qp_objective="ep"`` (the paper's fit) QP starts from EP's optimum: the fixed-site
        gradient of QP's evidence misses the sites' dependence on the hyperparameters, so
        L-BFGS-B's line search on it stalls far from the optimum (on Sonar at log signal
        variance ~4 where the evidence keeps rising to ~10). EP's evidence, whose fixed-site
        gradient is exact, is maximised first (from the user's initial hyperparameters, as for
        every method), then QP's own evidence is polished from there with QP's sites
        warm-started from EP's. Returns ``(kernel, result, n_evaluations)``; records each
        stage's wall time in ``stage_seconds_``.

        A callable ``optimizer`` replaces L-BFGS-B in every stage. Restarts
        (``n_restarts_optimizer``) act on the first: for QP with ``qp_objective="ep"``, EP's
        search runs from every start, and QP's evidence is polished once, from the best of EP's
        optima (``restart_evidence_`` then holds EP's evidence at each start's optimum;
        ``docs/guide/search_api.md``: restarting both stages found the same optimum slower).
        """
        init, n_ep = None, 0
        if self.method == "qp" and not self._own_objective():
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

    def _lbfgs(self, kernel, X, y, init, projection) -> tuple[Any, Any, int]:
        """L-BFGS-B from ``kernel.theta`` (:func:`qpinfer.inference.optimize.search_evidence`:
        a failed evaluation backtracks, the exit is checked), each inner loop warm-started from
        the latest successful one (``init`` before); returns the best ``(kernel, result,
        n_evaluations)``. A kernel without free hyperparameters (all ``"fixed"``, as
        scikit-learn's ``n_dims == 0``) has nothing to search: one inner loop at it."""
        if np.asarray(kernel.theta).size == 0:
            res = self._inner(kernel, X, kernel(X), y, init, projection)
            self.n_inner_iter_total_ = getattr(self, "n_inner_iter_total_", 0) + int(res.n_iter)
            return kernel, res, 1
        budget, trail = InnerLoopBudget(int(self.max_iter)), SearchTrail()
        own = projection is None and self._own_objective()
        ep_chord = projection is None and self.method == "ep" and y.size >= EP_CHORD_MIN_SITES
        chord = SearchChord(self.projection_, float(self.tol), self.schedule)
        loop = {"keep_v": True} if ep_chord and self.schedule == "parallel" else {}

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray, tuple[Any, Any]]:
            kern = kernel.with_theta(theta)
            K = kern(X)
            if self.method != "laplace":  # a ValueError: the search backtracks from here
                # (Laplace's mode fails on such a K by itself, a LinAlgError and so a failed
                # evaluation too, and is cheap enough for the check's extra factorisation to
                # be a visible share of it; fit checked the start)
                check_kernel_matrix(K, kern)
            warm = init if trail.latest is None else self._warm_start(trail.latest[1])
            n_chord, res, jac = 0, None, None
            if own or loop:
                warm, n_chord, res = chord.start(K, y, warm, trail.latest and trail.latest[1])
            if res is None:
                res = self._inner(kern, X, K, y, warm, projection, checked=True, **loop)
            res.n_iter += n_chord  # the chord's site updates count as sweeps
            budget.record(res)
            if own:
                value, grad, jac = self._value_and_gradient(
                    kern, X, K, y, res, return_jacobian=True
                )
            elif projection is None:
                value, grad = self._value_and_gradient(kern, X, K, y, res)
            else:  # EP's stage of qp_objective="ep"
                value, grad = res.log_marginal_likelihood, self._gradient(kern, X, K, y, res)
            if own or loop:
                chord.keep(res, jac, K, y)  # (EP's Jacobian computed there)
            return -value, -grad, (kern, res)

        space = search_space(kernel_block(kernel))
        search = self._search(objective, space, projection, budget, trail)
        kern, result = search.best
        return kern, result, search.n_evaluations

    def _search(self, objective, space, projection, budget, trail, trust=None) -> Any:
        """:func:`qpinfer.inference.optimize.search_evidence` of a dense fit's stage (EP's
        for a ``MomentMatching`` ``projection``, else the method's), with ``optimizer``, and
        restarts in the first stage only (:meth:`_optimize`); adds the inner loops' iterations
        to ``n_inner_iter_total_``."""
        stage = "ep" if isinstance(projection, MomentMatching) else self.method
        options = self._search_options()
        polish = self.method == "qp" and stage != "ep" and not self._own_objective()
        if polish:  # QP's polish from EP's optimum: a local refinement, not restarted
            options["n_restarts"] = 0
        if stage == "qp" and self._own_objective() and self._QP_SEARCH_TRUST is not None:
            options["flat_retry"] = self._QP_SEARCH_TRUST
            options["flat_rtol"] = self._QP_FLAT_RTOL
        search = search_evidence(
            objective,
            space,
            self._what(stage),
            maxiter=int(self.optimizer_maxiter),
            budget=budget,
            trail=trail,
            trust=trust,
            stacklevel=5,
            **options,
        )
        if not polish:
            self._start_values = list(search.start_values)
        self.n_inner_iter_total_ = getattr(self, "n_inner_iter_total_", 0) + budget.n_inner
        return search

    # -- latent predictions and the evidence --------------------------------------------------
    @limits_blas
    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent f at ``X`` (R&W eqs. (3.60)-(3.61), Alg. 3.2).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        X = self._check_predict_X(X)
        K_star = self.kernel_(self.X_train_, X)
        return predict_latent(self.result_.posterior, K_star, self.kernel_.diag(X))

    def _kernel_at(
        self, theta: Any, clone_kernel: Any, extra: tuple[str, ...] = ()
    ) -> tuple[Any, Any]:
        """``(kernel, theta)`` for :meth:`log_marginal_likelihood`: ``theta`` checked
        (``_checked_theta()``: the kernel's entries, then ``extra``) and the fitted kernel at
        its first entries -- ``kernel_`` itself where they are its own and ``clone_kernel`` is
        false."""
        theta = self._checked_theta(theta, clone_kernel, extra)
        nk = np.asarray(self.kernel_.theta).size
        if not clone_kernel and np.array_equal(theta[:nk], self.kernel_.theta):
            return self.kernel_, theta
        return self.kernel_.with_theta(theta[:nk]), theta

    log_marginal_likelihood = log_marginal_likelihood_method(
        """The evidence at log hyperparameters ``theta`` (default: the fitted ones), with
        scikit-learn's signature.

        EP/QP: eq. (4); Laplace: R&W eq. (3.32); VB: the ELBO. With another ``theta`` the inner
        loop is re-run, warm-started from the fitted state (VB: ``(alpha, beta)`` re-optimised at
        fixed ``theta``). Gradients: R&W eq. (5.27) with the sites fixed (the total derivative
        for EP at convergence; see :mod:`qpinfer.inference.ep` for QP), R&W Alg. 5.1 (Laplace,
        total), and for VB the partial derivative at the optimal ``(alpha, beta)`` (total by the
        envelope theorem, up to the inner optimiser's tolerance); with ``theta=None`` the
        gradient is the fitted one's (scikit-learn refuses that combination). Returns a
        ``numpy.float64`` (with ``eval_gradient``: ``(numpy.float64, ndarray)``). As
        scikit-learn, ``clone_kernel=False`` sets ``kernel_.theta`` to ``theta`` (the posterior,
        ``result_``, stays the fitted one, so that predictions then mix the two, as
        scikit-learn's do); ``clone_kernel=True`` leaves the model as fitted.
        """
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        X, y = self.X_train_, self.y_train_
        if theta is None:
            self._checked_theta(self.kernel_.theta, clone_kernel)  # checks clone_kernel
            kernel, result = self.kernel_, self.result_
        else:
            kernel, _ = self._kernel_at(theta, clone_kernel)
            result = self._inner(kernel, X, kernel(X), y, self._warm_start(self.result_))
        if not eval_gradient:
            return result.log_marginal_likelihood
        return self._value_and_gradient(kernel, X, kernel(X), y, result, objective="evidence")
