"""Sparse GP classification (probit) with M pseudo-points by Power EP or QP (Bui et al., 2017); more than
two classes by one-vs-rest or one-vs-one (:mod:`qpinfer.estimators.multiclass`)."""

from __future__ import annotations

import warnings
from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.classifier import _check_X, _check_y, binary_labels
from qpinfer.estimators.multiclass import MultiClassMixin, check_multi_class
from qpinfer.estimators.params import SiteLoopParams, estimator
from qpinfer.estimators.predictions import ProbitPredictionsMixin
from qpinfer.estimators.protocol import log_marginal_likelihood_method
from qpinfer.estimators.sparse_base import (
    SchedulerCloneMixin,
    SparseEstimatorBase,
    check_inducing_kernel,
)
from qpinfer.estimators.tables import resolve_table
from qpinfer.inference.optimize import InnerLoopBudget, SearchTrail, search_evidence
from qpinfer.inference.power_ep import PowerMomentMatching, check_power
from qpinfer.inference.projections import MomentMatching, QuantileMatching
from qpinfer.inference.search_space import free_block, kernel_block, search_space
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sparse.pseudo_points import predict_latent_low_rank, pseudo_point_prior
from qpinfer.inference.sparse.sites import SparsePEPResult, run_sparse_pep, sparse_pep_gradient
from qpinfer.inference.sparse.total_gradient import sparse_qp_objective_gradient
from qpinfer.likelihoods.probit import Probit

__all__ = ["SparseGPClassifier"]


@estimator
class SparseGPClassifier(
    MultiClassMixin,
    ProbitPredictionsMixin,
    SchedulerCloneMixin,
    SparseEstimatorBase,
    SiteLoopParams,
):
    """Sparse GP classification (probit) with M pseudo-points by Power EP (Bui et al., 2017).

    Iterative pseudo-point Power EP (:func:`~qpinfer.inference.sparse.sites.run_sparse_pep`, eqs.
    (20), (106)-(109)), energy eq. (110); L-BFGS-B maximises the energy over the kernel
    hyperparameters and (optionally) the inducing inputs, running Power EP to convergence at every
    evaluation (warm-started) with the analytic gradient of
    :func:`~qpinfer.inference.sparse.sites.sparse_pep_gradient`. O(N M^2) per sweep.

    The fast path (the defaults; issue 17: KEEL ``magic``, 17,020 points, M = 100, went from
    528 s to under a minute at the same test error, ``benchmarks/bench_sparse_scale.py``):

    * during the search the sites are converged only to ``search_tol`` (default 1e-3, RMS
      change of the site parameters; warm-started, that is one to three sweeps per evaluation
      instead of ~20 at 1e-6), and at the best values found they are then converged to ``tol``;
      the gradient's fixed-point assumption holds to that tolerance, which L-BFGS tolerates;
    * the search stops when the energy has improved by at most ``optimizer_rtol`` (default 3e-3)
      of its size over the last 10 L-BFGS iterations. Measured on ``magic`` and on the
      synthetic problem of the benchmark (N = 1e4): the test error and NTLL are flat (NTLL
      even rises) after 30-60 evaluations while eq. (110) keeps creeping up, the kernel
      variance and the 1000 inducing-input coordinates overfitting; the old rule (only
      ``ftol`` = 1e-9 and ``optimizer_maxiter``) ran ~500 evaluations on ``magic`` for 12.4%
      test error, 3e-3 stops after ~70 at 12.8% and 1e-3 after ~120 at 12.5%.
      ``optimizer_rtol=None, search_tol=None`` restore the old search.

    QP with pseudo-points (``method="qp"``): the alpha = 1 moment projection of every site is
    replaced by the L2-Wasserstein projection of Zhang et al. (2020) eq. (7). A site is a factor of ``u``
    through ``a_n = w_n^T u`` only, so its tilted distribution differs from the cavity only in
    the marginal of ``a_n``, ``N(a | mu_c, s_c) Phi(y a / sqrt(1 + h_n))`` (``f_n | u`` has
    variance ``h_n``): QP keeps EP's mean and sets the variance of ``a_n`` to that marginal's
    sigma*, which is the probit's at the rescaled cavity (``_qp_ratio()``; a table lookup, or
    exact sigma*). With ``M = N``, ``Z = X`` (``h = 0``) this is exactly full QP
    (:class:`qpinfer.GPClassifier` ``method="qp"``), and sigma* <= sigma_EP (Theorem 2) gives
    sites at least as precise as sparse EP's. Hyperparameters and inducing inputs
    (``optimizer="lbfgs"``) are by default (``qp_objective="ep"``) sparse EP's (alpha = 1),
    after which QP runs at them warm-started from EP's sites; or they maximise QP's own
    ``qp_objective`` in one search with QP's sites inside: ``"evidence"`` (eq. (110) at QP's
    sites) or ``"loo"`` (``sum_n log Z^_n`` at QP's cavities), with the total gradient through
    QP's fixed point
    (:func:`~qpinfer.inference.sparse.total_gradient.sparse_qp_objective_gradient`, O(N M^2)).
    ``log_marginal_likelihood_`` is eq. (110) at QP's sites. Cost: one sigma* per site update on
    top of EP's O(M^2) (``docs/rep.md`` has timings).

    Parameters
    ----------
    %(n_inducing)s
    alpha : float in (0, 1]
        Power EP power: 1 is EP (FITC-EP), smaller values move toward the variational solution.
        Ignored by ``method="qp"`` (which replaces the alpha = 1 projection).
    method : {"pep", "qp"}
        Power EP with ``alpha`` (moment projection of the fractional tilted distribution), or
        QP (Wasserstein projection, alpha = 1).
    table : None, "exact", path or table object
        Where QP gets sigma* from, as :class:`qpinfer.GPClassifier`'s ``table``.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Maximise eq. (110) over the kernel hyperparameters (and the inducing inputs), or keep
        them fixed (``None``). The search runs over the kernel's log hyperparameters and
        (``optimize_inducing``) the inducing inputs, in that order; restarts draw the first.
        ``search_tol`` applies to a callable too, ``optimizer_rtol`` to L-BFGS-B only.
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    qp_objective : {"ep", "evidence", "loo"}, default "ep"
        What QP's hyperparameters and inducing inputs maximise (``method="qp"`` only):
        ``"ep"``, sparse EP's eq. (110) (alpha = 1) and then QP at its optimum; ``"evidence"``,
        eq. (110) at QP's sites, or ``"loo"``, QP's leave-one-out predictive, each in one search
        with its total gradient. The default differs from the dense estimators' (``"evidence"``)
        because here the data chose it: on KEEL magic (17,020 rows, M = 50) ``"evidence"``
        took 39 s against 13 s for a held-out NTLL of 0.3159 against 0.3150
        (``docs/guide/qp_hyperparameters.md``).
    %(inducing_points)s
    %(jitter)s
    optimizer_rtol : float or None, default 3e-3
        The energy-stall stopping rule of the L-BFGS search (above); ``None``: off.
    search_tol : float or None, default 1e-3
        Site tolerance during the search (``max(tol, search_tol)``); ``None``: ``tol``
        throughout. The fitted sites are always converged to ``tol``.
    multi_class, n_jobs :
        More than two classes, as :class:`qpinfer.GPClassifier`: one binary sparse classifier
        per class (``"one_vs_rest"``, the default) or per pair of classes (``"one_vs_one"``),
        each a copy of this one with its own inducing inputs and hyperparameters, fitted through
        joblib's active backend with ``n_jobs`` workers (:mod:`qpinfer.estimators.multiclass`).
        Ignored for two classes.
    scheduler : None, "local", address or distributed.Client, default None
        Where the site sweeps run: ``None`` in this process; otherwise on dask, one map-reduce
        over data partitions per parallel sweep (:mod:`qpinfer.inference.sparse.dask_sweep`;
        ``"local"`` starts a LocalCluster of one single-threaded worker process per core). Needs
        ``optimizer=None`` (fixed hyperparameters and inducing inputs) and ``schedule="parallel"``.

    Attributes
    ----------
    classes_, n_classes_, n_features_in_, kernel_, inducing_points_ :
        Multi-class: ``kernel_`` is the tuple of the binary classifiers', ``estimators_`` the
        fitted binary classifiers (as :class:`qpinfer.GPClassifier`), the rest theirs only.
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        Eq. (110) at the fitted values (the second name is scikit-learn's).
    restart_evidence_ : ndarray (n_restarts_optimizer + 1,)
        Eq. (110) (sparse EP's, alpha = 1 for QP with ``qp_objective="ep"``; else QP's
        objective) at each start's optimum, the initial values' first; ``-inf`` where inference
        failed throughout.
    pep_result_ : SparsePEPResult
    n_iter_, n_evaluations_ : int
    """

    alpha: float = 0.5
    _: KW_ONLY
    qp_objective: str = "ep"  # the dense estimators': "evidence" (see the docstring)
    optimizer_rtol: float | None = 3e-3
    search_tol: float | None = 1e-3
    method: str = "pep"
    table: Any = None
    scheduler: Any = None
    multi_class: str = "one_vs_rest"
    n_jobs: int | None = None

    def _validate(self) -> float:
        """Check the parameters besides the shared ones; returns the Power EP power."""
        for name in ("optimizer_rtol", "search_tol"):
            v = getattr(self, name)
            ok = v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v > 0)
            if not (ok and (v is None or np.isfinite(v))):
                raise ValueError(f"{name} must be None or a positive number, got {v!r}")
        if self.method not in ("pep", "qp"):
            raise ValueError(f"method must be 'pep' or 'qp', got {self.method!r}")
        alpha = check_power(self.alpha)
        self._check_site_loop()
        check_multi_class(self.multi_class, self.n_jobs)
        return alpha

    def _run(self, prior, y, projection, init=None, tol=None) -> SparsePEPResult:
        options = self._site_loop_options()
        if tol is not None:
            options["tol"] = tol
        return run_sparse_pep(prior.A, prior.h, y, projection, init=init, **options)

    @limits_blas
    def fit(self, X: Any, y: Any) -> SparseGPClassifier:
        """Fit sites, kernel hyperparameters and inducing inputs (eq. (110))."""
        self._check_pseudo_point_params()
        alpha = self._validate()
        X = _check_X(X, estimator=type(self).__name__)
        y = _check_y(y, X.shape[0], type(self).__name__)
        if np.unique(y).size > 2:
            return self._fit_multiclass(X, y, np.unique(y))
        self._forget_multiclass()
        classes, y_pm = binary_labels(y, type(self).__name__)
        if self.method == "qp":
            lik = Probit()
            table = resolve_table(self, lik)  # the same rules as GPClassifier's
            final = QuantileMatching(lik, table)
            # "ep": hyperparameters/inducing inputs are sparse EP's; else QP's own, one search
            projection = MomentMatching(lik) if self.qp_objective == "ep" else final
        else:
            table = None
            projection = final = PowerMomentMatching(Probit(), alpha)
        kernel = self._initial_kernel(X.shape[1])
        Z = self._initial_inducing(X)
        check_inducing_kernel(kernel, Z)
        d = X.shape[1]
        n_theta = kernel.theta.size
        n_evals, starts = 1, []
        tol = float(self.tol)
        loose = tol if self.search_tol is None else max(tol, float(self.search_tol))
        if self.scheduler is not None:  # fixed hyperparameters, the sweeps on dask
            from qpinfer.inference.sparse.dask_sweep import (
                fit_on_scheduler,  # dask only when asked for
            )

            result, Lu = fit_on_scheduler(self, kernel, X, y_pm, Z, final)
        elif self.optimizer is not None:
            opt_Z = bool(self.optimize_inducing)
            budget, trail = InnerLoopBudget(int(self.max_iter)), SearchTrail()

            def objective(p):
                kern = kernel.with_theta(p[:n_theta])
                Zp = p[n_theta:].reshape(-1, d) if opt_Z else Z
                prior = pseudo_point_prior(kern, X, Zp, self.jitter)
                last = trail.latest  # (kernel, Z, result) of the latest success: warm start
                init = None if last is None else (last[2].tau, last[2].nu)
                res = self._run(prior, y_pm, projection, init, loose)
                budget.record(res)
                if isinstance(projection, QuantileMatching):  # QP's own objective, total grad
                    args = (kern, X, Zp, prior, res, y_pm, projection, self.qp_objective)
                    value, g_theta, g_Z = sparse_qp_objective_gradient(*args)
                else:
                    value = res.log_marginal_likelihood
                    g_theta, g_Z = sparse_pep_gradient(kern, X, Zp, prior, res, y_pm, projection)
                grad = np.concatenate([g_theta, g_Z.ravel()]) if opt_Z else g_theta
                # no prior kept: its two M x N arrays are recomputed once at the end
                return -value, -grad, (kern, Zp.copy(), res)

            blocks = [kernel_block(kernel)] + ([free_block(Z, "Z")] if opt_Z else [])
            search = search_evidence(
                objective,
                search_space(*blocks),
                self._what(),
                maxiter=int(self.optimizer_maxiter),
                budget=budget,
                trail=trail,
                stall_rtol=self.optimizer_rtol,
                **self._search_options(n_drawn=n_theta),
            )
            kernel, Z, result = search.best
            starts = search.start_values
            prior = pseudo_point_prior(kernel, X, Z, self.jitter)
            n_evals = search.n_evaluations
            if loose > tol and final is projection:  # the search's sites, converged to tol
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    result = self._run(prior, y_pm, projection, (result.tau, result.nu))
            if not result.converged:
                warnings.warn(
                    f"sparse Power EP did not converge within max_iter={self.max_iter} sweeps at "
                    f"the fitted hyperparameters (RMS change {result.rms_change:.3g})",
                    ConvergenceWarning,
                    stacklevel=2,
                )
        else:
            prior = pseudo_point_prior(kernel, X, Z, self.jitter)
            result = None if final is not projection else self._run(prior, y_pm, projection)
        if final is not projection and self.scheduler is None:  # QP at the fitted/given values
            init = None if result is None else (result.tau, result.nu)
            result = self._run(prior, y_pm, final, init)
        self.table_ = table
        self.classes_ = classes
        self.n_classes_ = 2
        self.n_features_in_ = d
        self.X_train_ = X
        self.y_train_ = y_pm
        self.kernel_ = kernel
        self.inducing_points_ = Z
        self.projection_ = final
        self.pep_result_ = result
        self._Lu = prior.Lu if self.scheduler is None else Lu
        self.log_marginal_likelihood_ = result.log_marginal_likelihood
        self.log_marginal_likelihood_value_ = result.log_marginal_likelihood  # scikit-learn's
        values = starts or [-result.log_marginal_likelihood]
        self.restart_evidence_ = -np.asarray(values, dtype=np.float64)
        self.n_iter_ = result.n_iter
        self.n_evaluations_ = n_evals
        return self

    @limits_blas
    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (eq. (18)); binary only (multi-class:
        ``estimators_[i]``'s)."""
        if self._is_multiclass():
            return super().predict_latent(X)  # MultiClassMixin's refusal
        X = self._check_predict_X(X)
        return predict_latent_low_rank(
            self.kernel_, self.inducing_points_, self._Lu, self.pep_result_.posterior, X
        )

    log_marginal_likelihood = log_marginal_likelihood_method(
        """Eq. (110) at the kernel's log hyperparameters ``theta`` (default: the fitted ones),
        inducing inputs fixed at the fitted ones, with scikit-learn's signature.

        Another ``theta`` re-runs the site updates of the fitted method (Power EP, or QP),
        warm-started from the fitted sites. The gradient is
        :func:`~qpinfer.inference.sparse.sites.sparse_pep_gradient` at those sites (Power EP's
        total derivative at its fixed point; QP's with its sites held fixed, as for
        :class:`qpinfer.GPClassifier`). ``clone_kernel`` is accepted (checked) and changes
        nothing: the fitted model is never modified. Multi-class: the mean over the binary
        problems (:meth:`qpinfer.estimators.multiclass.MultiClassMixin.log_marginal_likelihood`).
        """
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        if self._is_multiclass():
            return super().log_marginal_likelihood(theta, eval_gradient, clone_kernel=clone_kernel)
        theta = self._checked_theta(self.kernel_.theta if theta is None else theta, clone_kernel)
        X, Z, y = self.X_train_, self.inducing_points_, self.y_train_
        fitted = np.array_equal(theta, self.kernel_.theta)
        kernel = self.kernel_ if fitted else self.kernel_.with_theta(theta)
        result = self.pep_result_
        prior = pseudo_point_prior(kernel, X, Z, self.jitter)
        if not fitted:
            result = self._run(prior, y, self.projection_, (result.tau, result.nu))
        if not eval_gradient:
            return result.log_marginal_likelihood
        g_theta, _ = sparse_pep_gradient(kernel, X, Z, prior, result, y, self.projection_)
        return result.log_marginal_likelihood, g_theta
