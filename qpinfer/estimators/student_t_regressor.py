"""GP regression with Student-t noise: a robust regressor by EP, QP, Laplace or VB.

``y_i = f(x_i) + e_i``, ``e_i ~ t_nu(0, scale)`` (:class:`qpinfer.likelihoods.student_t.StudentT`),
a GP prior on f. The likelihood is not log-concave: sites may have negative precisions, which
:func:`qpinfer.inference.ep.run_ep` keeps (``log_concave = False``); sweeps are damped (parallel
schedule, damping 0.5 by default) and a run that does not converge warns with
:class:`~qpinfer.ConvergenceWarning` and returns the sites with the smallest change
seen.

Methods: ``"ep"`` (eq. (5)), ``"qp"`` (eq. (7); sigma* from the cell table of its nu shipped inside
qpinfer, which serves every scale -- :mod:`qpinfer.tables.scaled` -- else exact), ``"laplace"``
(:mod:`qpinfer.inference.laplace`: Newton with the exact step where ``K^-1 + W`` is positive
definite and W clipped at 0 elsewhere, line-searched; evidence R&W eq. (3.32) with ``log det(I + K
W)`` from the indefinite Woodbury factorisation when W has negative entries) and ``"vb"``
(:mod:`qpinfer.inference.vb`, Gaussian q with negative site precisions allowed; the expected
log-likelihood by the quadrature of :mod:`qpinfer.likelihoods.student_t.baselines`). The kernel
hyperparameters are fitted by maximising each method's evidence (eq. (4), R&W eq. (3.32), the
ELBO); with ``optimize_scale=True`` so is ``log(scale)`` (``scale`` is then the starting value,
``scale_`` the fitted one; gradients in :mod:`qpinfer.estimators.student_t_scale`). ``nu`` stays
fixed.

Targets. The GP has zero mean, so targets far from 0 need a mean: with ``normalize_y=True`` (the
default) the fit sees ``(y - median(y)) / s`` with ``s`` the median absolute deviation times
1.4826 (the normal's standard deviation; the standard deviation where more than half the targets
are equal, 1 where all are), robust to the outliers the Student-t noise is for, and predictions,
standard deviations, predictive densities and the score are in the units of ``y``. Without it a
zero-mean GP on ``y = sin(x) + 100`` predicted 0 (R^2 -18,952), on ``+ 300`` spent 510 s for 60
rows, and constant targets of 1e20 fitted nothing; ``normalize_y=False`` on targets whose median
lies more than three robust spreads from 0 warns.

Predictions: the latent predictive ``N(m*, v*)`` (R&W eqs. (3.60)-(3.61)); the predictive
density of a new ``y*`` is the tilted normaliser ``StudentT.log_z(m*, sqrt(v*), y*)`` (exact,
by quadrature); :meth:`~qpinfer.estimators.student_t_predictions.StudentTPredictionsMixin.score` is
scikit-learn's R^2 of the predictive mean.
"""

from __future__ import annotations

import warnings
from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.estimators.base import GPEstimatorBase
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.joint_predictions import DenseJointLatentMixin
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import RegressorTagsMixin, log_marginal_likelihood_method
from qpinfer.estimators.student_t_predictions import (  # robust_center_scale: re-exported
    TRUST,
    StudentTPredictionsMixin,
    check_student_t_options,
    check_targets,
    robust_center_scale,
)
from qpinfer.estimators.student_t_scale import scale_gradient
from qpinfer.inference.ep import MomentMatching
from qpinfer.inference.optimize import InnerLoopBudget, SearchTrail
from qpinfer.inference.search_space import kernel_block, scalar_block, search_space
from qpinfer.likelihoods.student_t import DEFAULT_NU, StudentT

__all__ = ["GPStudentTRegressor", "robust_center_scale"]


@estimator
class GPStudentTRegressor(
    StudentTPredictionsMixin, DenseJointLatentMixin, RegressorTagsMixin, GPEstimatorBase
):
    """GP regression with Student-t noise ``t_nu(0, scale)``, by EP, QP, Laplace or VB.

    Parameters
    ----------
    method : {"qp", "ep", "laplace", "vb"}
    table : None, "exact", path or table object
        Where QP gets sigma* from. ``None``: the cell table shipped for ``nu`` (nu = 4 and 5;
        any scale), or an installed table at least as good in coverage and verified error
        (:mod:`qpinfer.tables.choice`), else exact computation (warned once); ``"exact"``: always
        exact. A scale-1 Student-t table of the same nu serves every scale. Points outside a
        table are computed exactly (counted in its ``fallback_count``).
    nu, scale : float
        Degrees of freedom (fixed, in ``[0.1, 1e5]``, see
        :data:`qpinfer.likelihoods.student_t.NU_RANGE`) and scale (> 0; fixed, or the starting
        value with ``optimize_scale``; in units of the normalised targets with ``normalize_y``)
        of the noise.
    optimize_scale : bool
        Also fit ``log(scale)`` by the evidence (needs an optimizer: with ``optimizer=None``
        the scale stays fixed and the fit warns), within ``scale_bounds`` (``(low, high)``,
        ``0 < low <= scale <= high``, the same units as ``scale``).
    normalize_y : bool
        Fit to ``(y - median(y)) / s`` (``s``: 1.4826 times the median absolute deviation, see
        :func:`~qpinfer.estimators.student_t_predictions.robust_center_scale`) and undo it in predictions, as scikit-learn's
        ``normalize_y`` with a centre and spread the outliers do not move. The kernel's
        hyperparameters, ``scale``, ``scale_`` and the evidence are then those of the normalised
        targets (``y_center_``, ``y_scale_``: the centre and spread). Default ``True``: the GP
        has zero mean, and targets far from 0 without it are fitted badly or slowly.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Fit the hyperparameters (EP/QP: eq. (4); Laplace: R&W eq. (3.32); VB: the ELBO) with
        L-BFGS-B, or keep them fixed (``None``). With ``optimize_scale`` the search runs over
        the kernel's log hyperparameters and ``log(scale)`` (in that order).
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    %(qp_objective)s

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessRegressor : Gaussian noise, exact inference.
    SparseGPStudentTRegressor : the same model with M pseudo-points, for larger data.

    Examples
    --------
    A smooth function with a few gross outliers, which the Student-t noise discounts:

    >>> import numpy as np
    >>> from qpinfer import GPStudentTRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = np.linspace(0, 6, 60)[:, None]
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(60)
    >>> y[::12] += 4.0  # five outliers
    >>> reg = GPStudentTRegressor(method="qp", nu=4.0, optimize_scale=True).fit(X, y)
    >>> mean, std = reg.predict(X, return_std=True)
    >>> bool(np.abs(mean - np.sin(X[:, 0])).max() < 0.3)  # the fit ignores the outliers
    True
    >>> bool(np.all(std > 0))
    True
    """

    _METHODS = ("qp", "ep", "laplace", "vb")

    method: str = "qp"
    _: KW_ONLY
    nu: float = DEFAULT_NU
    scale: float = 1.0
    optimize_scale: bool = False
    scale_bounds: tuple[float, float] = (1e-4, 1e4)
    normalize_y: bool = True
    table: Any = None

    def _resolve_table(self, likelihood: Any) -> Any:
        """The base rule (:meth:`GPEstimatorBase._resolve_table`), with a scale-1 Student-t
        table of the same nu serving this scale
        (:func:`qpinfer.tables.scaled.for_likelihood`)."""
        from qpinfer.tables.scaled import for_likelihood

        return for_likelihood(super()._resolve_table(likelihood), likelihood)

    @limits_blas
    def fit(self, X: Any, y: Any) -> GPStudentTRegressor:
        """Fit the latent posterior (and, with ``optimizer="lbfgs"``, the kernel
        hyperparameters) to inputs ``X`` (n_samples, n_features) and real targets ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        y : array-like of shape (n_samples,)
            Real targets.

        Returns
        -------
        self
            The fitted estimator.
        """
        self._validate_params()
        nu, scale = check_student_t_options(self)
        X = self._check_fit_X(X)
        y = check_targets(y, X.shape[0])
        center, spread = robust_center_scale(y)
        if self.normalize_y:
            self.y_center_, self.y_scale_ = center, spread
        else:
            self.y_center_, self.y_scale_ = 0.0, 1.0
            if abs(center) > 3.0 * spread:
                warnings.warn(
                    f"the targets' median {center:.6g} lies {abs(center) / spread:.3g} robust "
                    "spreads from 0 and normalize_y=False: the GP prior has zero mean, so the "
                    "fit may end far from the data; use normalize_y=True or centre y",
                    UserWarning,
                    stacklevel=3,
                )
        self._constant_targets = bool(np.all(y == y[0]))
        if self._constant_targets and self.normalize_y and self.optimizer is not None:
            warnings.warn(
                f"y is constant ({float(y[0])!r}): the fit predicts that constant, with the kernel "
                "hyperparameters kept at their initial values (nothing to fit them to)",
                UserWarning,
                stacklevel=3,
            )
        self._fit_latent(X, (y - self.y_center_) / self.y_scale_, StudentT(nu, scale))
        self.scale_ = self.likelihood_.scale
        return self

    def _optimize(self, kernel, X, y):
        """As the base class; constant targets under ``normalize_y`` (all 0 once normalised:
        the evidence only pushes the signal variance to its bound) keep the initial kernel."""
        if self.normalize_y and getattr(self, "_constant_targets", False):
            result = self._inner(kernel, X, kernel(X), y, None)
            self.n_inner_iter_total_ = int(result.n_iter)
            return kernel, result, 1
        return super()._optimize(kernel, X, y)

    # -- the noise scale by evidence (optimize_scale) ------------------------------------------
    def _use(self, likelihood: StudentT) -> StudentT:
        """Fit at ``likelihood``'s scale from now on: it (with the moment table the fit's
        likelihood has, which serves every scale), the table serving its sigma* and the
        projection; returns the likelihood as used."""
        from qpinfer.tables.scaled import for_likelihood

        likelihood = likelihood.with_moment_table(self.likelihood_._moment_table)
        self.likelihood_ = likelihood
        self.table_ = for_likelihood(self.table_, likelihood)  # the table serves this scale
        self.projection_ = self._projection(likelihood, self.table_)
        return likelihood

    def _evaluate(self, kern, X, K, y, likelihood, init, ep_phase, **own):
        """Inner fit at ``(kernel, scale)``, the search objective and its gradient in ``(theta,
        log scale)`` (``own``: keywords of QP's own objective, as in
        :meth:`_value_and_gradient`)."""
        likelihood = self._use(likelihood)
        projection = MomentMatching(likelihood) if ep_phase else None
        try:
            res = self._inner(kern, X, K, y, init, projection)
        except (np.linalg.LinAlgError, ValueError):
            if init is None:
                raise
            res = self._inner(kern, X, K, y, None, projection)  # the warm start was the problem
        if not ep_phase and self._own_objective():
            value, grad = self._value_and_gradient(kern, X, K, y, res, scale_parameter=True, **own)
            return res, value, grad
        g_k = self._gradient(kern, X, K, y, res)
        g_s = scale_gradient("ep" if ep_phase else self.method, K, res, y, likelihood)
        return res, res.log_marginal_likelihood, np.append(g_k, g_s)

    def _lbfgs(self, kernel, X, y, init, projection):
        """As the base class, over ``(kernel theta, log scale)`` with ``optimize_scale``, in a
        box trust region of ``+-TRUST`` (log units) about the current point: L-BFGS-B's first
        step follows the raw gradient, which for the scale reaches its bound, where EP may
        spend max_iter sweeps failing (no proper cavities); re-centred until the optimum lies
        inside the box (:func:`qpinfer.inference.optimize.search_evidence`; a failed
        evaluation backtracks, and the iterations and inner-loop budget span the rounds)."""
        if not self.optimize_scale:
            return super()._lbfgs(kernel, X, y, init, projection)
        ep_phase, nk = projection is not None, kernel.theta.size
        budget, trail = InnerLoopBudget(int(self.max_iter)), SearchTrail()

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray, tuple[Any, Any, Any]]:
            kern, lik = kernel.with_theta(theta[:nk]), StudentT(self.nu, np.exp(theta[nk]))
            warm = init if trail.latest is None else self._warm_start(trail.latest[1])
            res, value, grad = self._evaluate(kern, X, kern(X), y, lik, warm, ep_phase)
            budget.record(res)
            return -value, -grad, (kern, res, lik)

        log_scale = np.log(self.likelihood_.scale)
        scale_box = np.log(np.asarray(self.scale_bounds, float))
        space = search_space(kernel_block(kernel), scalar_block(log_scale, scale_box, "log scale"))
        search = self._search(objective, space, projection, budget, trail, trust=TRUST)
        kern, result, lik = search.best
        self._use(lik)
        return kern, result, search.n_evaluations

    log_marginal_likelihood = log_marginal_likelihood_method(
        """The evidence (EP/QP eq. (4), Laplace R&W eq. (3.32), VB the ELBO) at log
        hyperparameters ``theta``; with ``optimize_scale`` ``theta`` ends with ``log(scale)``
        (and so does the gradient), otherwise it is the kernel's alone (the base class's, where
        ``eval_gradient`` and ``clone_kernel`` are described)."""
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        if not self.optimize_scale:
            return super()._log_marginal_likelihood(theta, eval_gradient, clone_kernel)
        X, y = self.X_train_, self.y_train_
        if theta is None:
            theta = np.append(self.kernel_.theta, np.log(self.likelihood_.scale))
        kern, theta = self._kernel_at(theta, clone_kernel, ("log scale",))
        lik = StudentT(self.nu, np.exp(theta[-1]))
        saved = self.likelihood_, self.projection_
        try:
            warm = self._warm_start(self.result_)
            _, value, grad = self._evaluate(
                kern, X, kern(X), y, lik, warm, False, objective="evidence"
            )
        finally:
            self.likelihood_, self.projection_ = saved
        return (value, grad) if eval_gradient else value

    def _gradient(self, kern: Any, X: np.ndarray, K: np.ndarray, y: np.ndarray, res: Any):
        """R&W eq. (5.27) at fixed sites, ``1/2 tr((b b^T - A) dK/dtheta)`` with
        ``A = (K + T^-1)^-1 = T (I + K T)^-1`` (T the site precisions): the form that holds for
        negative site precisions, where the B = I + S^1/2 K S^1/2 Cholesky route does not."""
        if self.method in ("laplace", "vb") or res.posterior.L is not None:
            return super()._gradient(kern, X, K, y, res)
        tau = np.asarray(res.tau, dtype=np.float64)
        A = tau[:, None] * np.linalg.solve(np.eye(tau.size) + K * tau[None, :], np.eye(tau.size))
        A = 0.5 * (A + A.T)
        b = res.posterior.b
        R = np.outer(b, b) - A
        return 0.5 * np.asarray(kern.gradient_contract(X, R, K), dtype=np.float64)

    def _inner(self, kern, X, K, y, init, projection=None, **keep):
        """As the base class; Laplace and VB run from the warm start *and* from the cold one
        (``a = 0``; VB's ``(0, 1)``) and keep the higher ``Psi`` / ELBO (GPML's ``infLaplace``
        rule): the Student-t posterior can have several modes, and the warm start alone made
        the evidence depend on the optimiser's path (hills: -1.33 and -1.48 at one theta)."""
        res = super()._inner(kern, X, K, y, init, projection, **keep)
        if self.method not in ("laplace", "vb") or init is None:
            return res
        cold = super()._inner(kern, X, K, y, None, projection)
        if self.method == "laplace":
            return cold if cold.history[-1] > res.history[-1] else res
        return cold if cold.log_marginal_likelihood > res.log_marginal_likelihood else res
