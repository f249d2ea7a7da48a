"""Sparse GP regression with Student-t noise and M pseudo-points by EP or QP (Bui, Yan and
Turner, 2017; Zhang et al., 2020): :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s model, target
normalisation and predictions, O(N M^2) per sweep. The fit is
:class:`qpinfer.estimators.sparse_site_fit.SparseSiteEstimator`'s."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.checks import check_X
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.joint_predictions import SparseSiteJointLatentMixin
from qpinfer.estimators.params import estimator
from qpinfer.estimators.protocol import RegressorTagsMixin, log_marginal_likelihood_method
from qpinfer.estimators.sparse_site_fit import SparseSiteEstimator
from qpinfer.estimators.student_t_predictions import (
    TRUST,
    StudentTPredictionsMixin,
    check_student_t_options,
    check_targets,
    robust_center_scale,
)
from qpinfer.estimators.student_t_scale import cavity_scale_gradient
from qpinfer.inference.search_space import scalar_block
from qpinfer.likelihoods.student_t import DEFAULT_NU, StudentT

__all__ = ["SparseGPStudentTRegressor"]


@estimator
class SparseGPStudentTRegressor(
    StudentTPredictionsMixin, SparseSiteJointLatentMixin, RegressorTagsMixin, SparseSiteEstimator
):
    """Sparse GP regression with Student-t noise ``t_nu(0, scale)`` and M pseudo-points.

    Pseudo-point EP (Bui, Yan and Turner, 2017, eqs. (20), (106)-(110), alpha = 1) or QP: the
    site updates of :class:`qpinfer.SparseGPClassifier` with the Student-t likelihood of
    :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor` (EP's moments and QP's sigma* from the table shipped
    for ``nu``, which serves every scale). The likelihood is not log-concave: sites may have
    negative precisions, which the sweeps keep (a sequential update that would make the
    posterior improper is refused). QP projects the tilted marginal of ``f_n`` at its cavity
    ``N(mu_c, s_c + h_n)`` (``_ConditionalProjection`` of :mod:`qpinfer.inference.sparse.sites`).
    The kernel hyperparameters, ``log(scale)`` (``optimize_scale``) and the inducing inputs
    (``optimize_inducing``) maximise sparse EP's energy eq. (110), in that order, with the
    analytic gradient; QP then runs at them. The derivative in ``log(scale)`` at an EP fixed
    point is the explicit one at fixed cavities of ``f_n``
    (:func:`~qpinfer.estimators.student_t_scale.cavity_scale_gradient`). With ``M = N``,
    ``Z = X`` and no jitter this is :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor` (EP, or QP with
    ``qp_objective="ep"``) exactly.

    Parameters
    ----------
    %(n_inducing)s
    method : {"qp", "ep"}
        QP (Zhang et al., 2020, eq. (7)) or EP.
    nu, scale, optimize_scale, scale_bounds, normalize_y, table :
        As :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s (``optimize_scale`` fits ``log(scale)`` by
        eq. (110) within ``scale_bounds``; ``normalize_y`` fits the robustly normalised
        targets).
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Maximise eq. (110), or keep everything fixed (``None``), as
        :class:`qpinfer.SparseGPClassifier`'s; with ``optimize_scale`` the search runs in a
        box trust region as the dense estimator's.
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    qp_objective : {"ep"}, default "ep"
        QP's hyperparameters are sparse EP's; ``"evidence"`` and ``"loo"`` are the probit's
        only (a ``ValueError`` here).
    %(inducing_points)s
    %(jitter)s
    optimizer_rtol, search_tol, scheduler :
        As :class:`qpinfer.SparseGPClassifier`'s (``scheduler`` needs ``optimizer=None``).

    Attributes
    ----------
    n_features_in_, X_train_, y_train_ (normalised), kernel_, inducing_points_ :
    likelihood_, scale_, y_center_, y_scale_, table_, projection_ :
        As :class:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor`'s, and the site update.
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        Eq. (110) at the fitted values (of the normalised targets).
    restart_evidence_, pep_result_, n_iter_, n_evaluations_ :
        As :class:`qpinfer.SparseGPClassifier`'s.

    Examples
    --------
    >>> import numpy as np
    >>> from qpinfer import SparseGPStudentTRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = np.linspace(0, 6, 300)[:, None]
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(300)
    >>> y[::25] += 4.0  # twelve outliers
    >>> reg = SparseGPStudentTRegressor(15, random_state=0).fit(X, y)
    >>> mean = reg.predict(X)
    >>> bool(np.abs(mean - np.sin(X[:, 0])).max() < 0.3)  # the fit ignores the outliers
    True
    """

    _: KW_ONLY
    method: str = "qp"
    nu: float = DEFAULT_NU
    scale: float = 1.0
    optimize_scale: bool = False
    scale_bounds: tuple[float, float] = (1e-4, 1e4)
    normalize_y: bool = True

    @limits_blas
    def fit(self, X: Any, y: Any) -> SparseGPStudentTRegressor:
        """Fit sites, kernel hyperparameters, the scale (``optimize_scale``) and inducing
        inputs (eq. (110)) to inputs ``X`` (n_samples, n_features) and real targets ``y``.

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
        self._check_sparse_params()
        if self.method not in ("qp", "ep"):
            raise ValueError(f"method must be 'qp' or 'ep', got {self.method!r}")
        nu, scale = check_student_t_options(self)
        name = type(self).__name__
        X = check_X(X, estimator=name)
        y = check_targets(y, X.shape[0], name)
        center, spread = robust_center_scale(y)
        self.y_center_, self.y_scale_ = (center, spread) if self.normalize_y else (0.0, 1.0)
        self._fit_sites(X, (y - self.y_center_) / self.y_scale_, StudentT(nu, scale))
        self.scale_ = self.likelihood_.scale
        return self

    # -- the scale as a searched parameter -----------------------------------------------------
    def _table_for(self, table: Any, likelihood: Any) -> Any:
        """The table of ``nu`` at ``likelihood``'s scale (a scale-1 table serves every
        scale, :func:`qpinfer.tables.scaled.for_likelihood`)."""
        from qpinfer.tables.scaled import for_likelihood

        return for_likelihood(table, likelihood)

    def _likelihood_params(self, likelihood: Any) -> np.ndarray:
        return np.log([likelihood.scale]) if self.optimize_scale else np.empty(0)

    def _likelihood_blocks(self, likelihood: Any) -> list:
        if not self.optimize_scale:
            return []
        box = np.log(np.asarray(self.scale_bounds, dtype=np.float64))
        return [scalar_block(np.log(likelihood.scale), box, "log scale")]

    def _likelihood_at(self, likelihood: Any, values: np.ndarray) -> Any:
        if not values.size:
            return likelihood
        lik = StudentT(likelihood.nu, float(np.exp(values[0])))
        return lik.with_moment_table(likelihood._moment_table)  # it serves every scale

    def _likelihood_gradient(self, likelihood: Any, result: Any, prior: Any, y: np.ndarray):
        """d eq. (110) / dlog(scale) at an EP fixed point: the explicit derivative at the
        fixed cavities ``N(mu_c, s_c + h_n)`` of ``f_n``."""
        cav_var = result.cavity_var + prior.h
        return np.array([cavity_scale_gradient(result.cavity_mean, cav_var, y, likelihood)])

    def _search_trust(self) -> float | None:
        return TRUST if self.optimize_scale else None

    log_marginal_likelihood = log_marginal_likelihood_method(
        """Eq. (110) at log hyperparameters ``theta``, inducing inputs fixed at the fitted
        ones; with ``optimize_scale`` ``theta`` ends with ``log(scale)`` (and so does the
        gradient), as :meth:`~qpinfer.estimators.student_t_regressor.GPStudentTRegressor.log_marginal_likelihood`."""
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        return self._sparse_log_marginal_likelihood(theta, eval_gradient, clone_kernel)
