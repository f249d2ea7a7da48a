"""What the full-batch pseudo-point estimators of a non-Gaussian likelihood share (Bui, Yan and
Turner, 2017): the search over kernel hyperparameters, likelihood parameters and inducing
inputs by the Power EP energy eq. (110), the final convergence, QP at the end, the fitted
attributes, the latent predictions and ``log_marginal_likelihood``.

:class:`SparseSiteEstimator` is the base of :class:`qpinfer.SparseGPClassifier`,
:class:`qpinfer.SparseGPPoissonRegressor` and :class:`qpinfer.SparseGPStudentTRegressor`; a
subclass validates its targets and calls ``SparseSiteEstimator._fit_sites`` with its
likelihood and the targets in the likelihood's form. The site updates are
:func:`~qpinfer.inference.sparse.sites.run_sparse_pep` for every likelihood: EP's moments (and
QP's sigma*) from the tables (:mod:`qpinfer.estimators.tables`); QP on the tilted marginal of
``f_n`` where the likelihood's Gaussian smoothing is no rescaling of itself
(``_ConditionalProjection`` of :mod:`qpinfer.inference.sparse.sites`).

A likelihood parameter fitted with the kernel (the Student-t ``scale``) enters through three
hooks: ``_likelihood_params`` (its log values, ``()`` by default), ``_likelihood_at`` and
``_likelihood_gradient`` (the energy's derivative at a fixed point: the explicit one at fixed
cavities of ``f_n``).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from qpinfer.estimators.params import SiteLoopParams
from qpinfer.estimators.sparse_base import (
    SchedulerCloneMixin,
    SparseEstimatorBase,
    check_inducing_kernel,
)
from qpinfer.estimators.tables import resolve_table, with_moment_table
from qpinfer.inference.optimize import InnerLoopBudget, SearchTrail, search_evidence
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.inference.projections import MomentMatching, QuantileMatching
from qpinfer.inference.search_space import free_block, kernel_block, search_space
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sparse.pseudo_points import predict_latent_low_rank, pseudo_point_prior
from qpinfer.inference.sparse.sites import (
    SparsePEPResult,
    positive_branch_sites,
    run_sparse_pep,
    sparse_pep_gradient,
)
from qpinfer.inference.sparse.total_gradient import sparse_qp_objective_gradient
from qpinfer.kernels.sklearn_se import sklearn_face

__all__ = ["SparseSiteEstimator"]


@dataclasses.dataclass(eq=False, repr=False, match_args=False, kw_only=True)
class SparseSiteEstimator(SchedulerCloneMixin, SparseEstimatorBase, SiteLoopParams):
    """The fit of a pseudo-point estimator by site updates (module docstring); the parameters
    its subclasses share."""

    qp_objective: str = "ep"  # the dense estimators': "evidence" (SparseGPClassifier's text)
    optimizer_rtol: float | None = 3e-3
    search_tol: float | None = 1e-3
    table: Any = None
    scheduler: Any = None

    #: what ``qp_objective`` may be besides ``"ep"``: QP's own objectives have total gradients
    #: for the probit only (:mod:`qpinfer.inference.sparse.total_gradient`)
    _OWN_QP_OBJECTIVES = False

    # -- checks and hooks ----------------------------------------------------------------------
    def _check_sparse_params(self) -> None:
        """The shared parameters: search, pseudo-points, site loop, ``optimizer_rtol``,
        ``search_tol`` and (``method="qp"``) ``qp_objective``."""
        self._check_pseudo_point_params()
        for name in ("optimizer_rtol", "search_tol"):
            v = getattr(self, name)
            ok = v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v > 0)
            if not (ok and (v is None or np.isfinite(v))):
                raise ValueError(f"{name} must be None or a positive number, got {v!r}")
        self._check_site_loop()
        if self.method == "qp" and self.qp_objective != "ep" and not self._OWN_QP_OBJECTIVES:
            raise ValueError(
                f"qp_objective={self.qp_objective!r} is available for the probit likelihood "
                f"only (its total gradient); {type(self).__name__} fits QP's hyperparameters "
                "by sparse EP's energy: use qp_objective='ep'"
            )

    def _table_for(self, table: Any, likelihood: Any) -> Any:
        """QP's table for ``likelihood`` (a table of its family's base serves it: the
        Student-t's); ``table`` itself by default."""
        return table

    def _likelihood_params(self, likelihood: Any) -> np.ndarray:
        """The likelihood's fitted log parameters, searched after the kernel's (none)."""
        return np.empty(0)

    def _likelihood_blocks(self, likelihood: Any) -> list:
        """Their search blocks (:mod:`qpinfer.inference.search_space`)."""
        return []

    def _likelihood_at(self, likelihood: Any, values: np.ndarray) -> Any:
        """The likelihood at log parameters ``values`` (with ``likelihood``'s moment table)."""
        return likelihood

    def _likelihood_gradient(self, likelihood: Any, result: SparsePEPResult, prior, y):
        """Eq. (110)'s derivative in the likelihood's log parameters at a fixed point."""
        return np.empty(0)

    def _search_trust(self) -> float | None:
        """The search's box trust region (log units), ``None``: off."""
        return None

    def _projection(self, likelihood: Any, alpha: float) -> Any:
        """The site update of the search (and of ``method`` "ep" / "pep")."""
        if self.method == "pep":
            return PowerMomentMatching(likelihood, alpha)
        return MomentMatching(likelihood)

    # -- site loops ----------------------------------------------------------------------------
    def _run(self, prior, y, projection, init=None, tol=None) -> SparsePEPResult:
        """The sites at ``prior`` (warm start ``init``; ``None``: the likelihood's start)."""
        options = self._site_loop_options()
        if tol is not None:
            options["tol"] = tol
        warm = init is not None
        if not warm:
            init = positive_branch_sites(prior.A, y, projection.likelihood)
        try:
            return run_sparse_pep(prior.A, prior.h, y, projection, init=init, **options)
        except (np.linalg.LinAlgError, ValueError):
            if not warm:
                raise
            cold = positive_branch_sites(prior.A, y, projection.likelihood)  # the warm start
            return run_sparse_pep(prior.A, prior.h, y, projection, init=cold, **options)

    @staticmethod
    def _warm(result: SparsePEPResult | None, likelihood: Any):
        """The sites to start the next loop from: ``result``'s, except for a likelihood with
        two branches (the square link: always its positive-branch start, as the dense
        estimators, :meth:`qpinfer.estimators.base.GPEstimatorBase._warm_start`)."""
        if result is None or likelihood.two_branches:
            return None
        return (result.tau, result.nu)

    # -- the fit -------------------------------------------------------------------------------
    def _fit_sites(self, X: np.ndarray, y: np.ndarray, likelihood: Any, alpha: float = 1.0):
        """Fit sites, kernel hyperparameters, likelihood parameters and inducing inputs to
        checked ``X`` and targets ``y`` in ``likelihood``'s form; sets the fitted attributes."""
        table = self._table_for(resolve_table(self, likelihood), likelihood)
        likelihood = with_moment_table(self, likelihood, table)
        own = self.method == "qp" and self.qp_objective != "ep"  # probit: QP's own objective
        kernel = self._initial_kernel(X.shape[1])
        Z = self._initial_inducing(X)
        check_inducing_kernel(kernel, Z)
        d, n_theta = X.shape[1], kernel.theta.size
        n_lik = self._likelihood_params(likelihood).size
        n_evals, starts, Lu, result, prior = 1, [], None, None, None
        tol = float(self.tol)
        loose = tol if self.search_tol is None else max(tol, float(self.search_tol))

        def projection_at(lik):  # the search's: QP's with its own objective, else EP's/PEP's
            if own:
                return QuantileMatching(lik, self._table_for(table, lik))
            return self._projection(lik, alpha)

        if self.scheduler is not None:  # fixed hyperparameters, the sweeps on dask
            from qpinfer.inference.sparse.dask_sweep import (
                fit_on_scheduler,  # dask only when asked for
            )

            final = self._final_projection(likelihood, table, alpha)
            init = None
            if likelihood.two_branches:  # its start needs the low-rank posterior here
                init = positive_branch_sites(
                    pseudo_point_prior(kernel, X, Z, self.jitter).A, y, likelihood
                )
            result, Lu = fit_on_scheduler(self, kernel, X, y, Z, final, init=init)
        elif self.optimizer is not None:
            opt_Z = bool(self.optimize_inducing)
            budget, trail = InnerLoopBudget(int(self.max_iter)), SearchTrail()

            def objective(p):
                kern = kernel.with_theta(p[:n_theta])
                lik = self._likelihood_at(likelihood, p[n_theta : n_theta + n_lik])
                Zp = p[n_theta + n_lik :].reshape(-1, d) if opt_Z else Z
                prior = pseudo_point_prior(kern, X, Zp, self.jitter)
                last = trail.latest  # (kernel, Z, result, lik) of the latest success
                proj = projection_at(lik)
                res = self._run(prior, y, proj, self._warm(last and last[2], lik), loose)
                budget.record(res)
                g_lik = np.empty(0)
                if own:  # QP's own objective (probit), its total gradient
                    args = (kern, X, Zp, prior, res, y, proj, self.qp_objective)
                    value, g_theta, g_Z = sparse_qp_objective_gradient(*args)
                else:
                    value = res.log_marginal_likelihood
                    g_theta, g_Z = sparse_pep_gradient(kern, X, Zp, prior, res, y, proj)
                    if n_lik:
                        g_lik = self._likelihood_gradient(lik, res, prior, y)
                parts = [g_theta, g_lik] + ([g_Z.ravel()] if opt_Z else [])
                # no prior kept: its two M x N arrays are recomputed once at the end
                return -value, -np.concatenate(parts), (kern, Zp.copy(), res, lik)

            blocks = [kernel_block(kernel), *self._likelihood_blocks(likelihood)]
            blocks += [free_block(Z, "Z")] if opt_Z else []
            search = search_evidence(
                objective,
                search_space(*blocks),
                self._what(),
                maxiter=int(self.optimizer_maxiter),
                budget=budget,
                trail=trail,
                stall_rtol=self.optimizer_rtol,
                trust=self._search_trust(),
                stacklevel=3,  # the caller of the estimator's fit
                **self._search_options(n_drawn=n_theta + n_lik),
            )
            kernel, Z, result, likelihood = search.best
            starts = search.start_values
            n_evals = search.n_evaluations
            same = type(self._final_projection(likelihood, table, alpha))
            if loose > tol and same is type(projection_at(likelihood)):
                # the search's sites, converged to tol (QP after EP: from the search's)
                prior = pseudo_point_prior(kernel, X, Z, self.jitter)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    warm = self._warm(result, likelihood)
                    result = self._run(prior, y, projection_at(likelihood), warm)
            if not result.converged:
                warnings.warn(
                    f"sparse Power EP did not converge within max_iter={self.max_iter} sweeps "
                    f"at the fitted hyperparameters (RMS change {result.rms_change:.3g})",
                    ConvergenceWarning,
                    stacklevel=3,
                )
        final = self._final_projection(likelihood, table, alpha)
        if self.scheduler is None:
            if prior is None:  # none kept by the search: its M x N arrays, once
                prior = pseudo_point_prior(kernel, X, Z, self.jitter)
            if result is None or type(final) is not type(projection_at(likelihood)):
                # QP at the fitted (or given) values, from the search's sites
                result = self._run(prior, y, final, self._warm(result, likelihood))
            Lu = prior.Lu
        self.likelihood_ = likelihood
        self.table_ = final.table if isinstance(final, QuantileMatching) else None
        self.n_features_in_ = d
        self.X_train_ = X
        self.y_train_ = y
        self.kernel_ = sklearn_face(kernel)  # scikit-learn's face of the default kernel
        self.inducing_points_ = Z
        self.projection_ = final
        self.pep_result_ = result
        self._Lu = Lu
        self.log_marginal_likelihood_ = result.log_marginal_likelihood
        self.log_marginal_likelihood_value_ = result.log_marginal_likelihood  # scikit-learn's
        values = starts or [-result.log_marginal_likelihood]
        self.restart_evidence_ = -np.asarray(values, dtype=np.float64)
        self.n_iter_ = result.n_iter
        self.n_evaluations_ = n_evals
        return self

    def _final_projection(self, likelihood: Any, table: Any, alpha: float) -> Any:
        """The fitted sites' update: QP's at the fitted likelihood, else the search's."""
        if self.method == "qp":
            return QuantileMatching(likelihood, self._table_for(table, likelihood))
        return self._projection(likelihood, alpha)

    # -- predictions and the evidence ----------------------------------------------------------
    def _latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (eq. (18))."""
        X = self._check_predict_X(X)
        return predict_latent_low_rank(
            self.kernel_, self.inducing_points_, self._Lu, self.pep_result_.posterior, X
        )

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (Bui et al., 2017, eq. (18))."""
        return self._latent(X)

    def _sparse_log_marginal_likelihood(self, theta, eval_gradient, clone_kernel):
        """Eq. (110) at ``theta`` (the kernel's log hyperparameters, then the likelihood's
        fitted ones), inducing inputs fixed at the fitted ones; the gradient at the sites of the
        fitted method (Power EP's total derivative at its fixed point; QP's with its sites held
        fixed)."""
        lik = self.likelihood_
        extra = self._likelihood_params(lik)
        if theta is None:
            theta = np.concatenate([self.kernel_.theta, extra])
        names = ("log scale",) * extra.size
        theta = self._checked_theta(theta, clone_kernel, names)
        nk = self.kernel_.theta.size
        X, Z, y = self.X_train_, self.inducing_points_, self.y_train_
        fitted = np.array_equal(theta, np.concatenate([self.kernel_.theta, extra]))
        result, projection = self.pep_result_, self.projection_
        kernel = self.kernel_ if fitted else self.kernel_.with_theta(theta[:nk])
        prior = pseudo_point_prior(kernel, X, Z, self.jitter)
        if not fitted:
            lik = self._likelihood_at(lik, theta[nk:])
            if extra.size:
                projection = copy_projection(projection, lik, self._table_for(self.table_, lik))
            result = self._run(prior, y, projection, self._warm(result, lik))
        if not eval_gradient:
            return result.log_marginal_likelihood
        g_theta, _ = sparse_pep_gradient(kernel, X, Z, prior, result, y, projection)
        if extra.size:
            g_theta = np.append(g_theta, self._likelihood_gradient(lik, result, prior, y))
        return result.log_marginal_likelihood, g_theta


def copy_projection(projection: Any, likelihood: Any, table: Any) -> Any:
    """``projection``'s kind (QP, EP or Power EP) for another ``likelihood``."""
    if isinstance(projection, QuantileMatching):
        return QuantileMatching(likelihood, table)
    if isinstance(projection, PowerMomentMatching):
        return PowerMomentMatching(likelihood, projection.power)
    return MomentMatching(likelihood)
