"""GP regression with Student-t noise (issue #15): a robust regressor by EP and QP.

``y_i = f(x_i) + e_i``, ``e_i ~ t_nu(0, scale)`` (:class:`qpinfer.student_t.StudentT`), a GP
prior on f. The likelihood is not log-concave: sites may have negative precisions, which
:func:`qpinfer.ep.run_ep` keeps (``log_concave = False``); sweeps are damped (parallel schedule,
damping 0.5 by default) and a run that does not converge warns with
:class:`~qpinfer.ep.ConvergenceWarning` and returns the sites with the smallest change seen.

Methods: ``"ep"`` (eq. (5)) and ``"qp"`` (eq. (7); sigma* from the v2 table of its nu shipped
inside qpinfer, which serves every scale -- :mod:`qpinfer.tables_student_t` -- else exact). The kernel
hyperparameters are fitted by maximising the evidence (eq. (4)) as for the other estimators;
``nu`` and ``scale`` are fixed constructor arguments in this version. Laplace and VB are not
offered: their implementations (:mod:`qpinfer.laplace`, :mod:`qpinfer.vb`) are specific to the
probit and square-link likelihoods, and Laplace on a non-log-concave likelihood needs a
negative-curvature safeguard that is not written yet.

Predictions: the latent predictive ``N(m*, v*)`` (R&W eqs. (3.60)-(3.61)); the predictive
density of a new ``y*`` is the tilted normaliser ``StudentT.log_z(m*, sqrt(v*), y*)`` (exact,
by quadrature); :meth:`score` is scikit-learn's R^2 of the predictive mean.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.checks import check_target_vector
from qpinfer.estimator import GPEstimatorBase, check_X
from qpinfer.likelihoods import _finite
from qpinfer.student_t import DEFAULT_NU, StudentT, check_nu_scale

__all__ = ["GPStudentTRegressor"]


def _check_targets(y: Any, n_samples: int | None) -> np.ndarray:
    """Real, finite targets (``ValueError`` naming ``y``)."""
    return _finite("y", check_target_vector(y, n_samples, "GPStudentTRegressor", "y"))


class GPStudentTRegressor(GPEstimatorBase):
    """GP regression with Student-t noise ``t_nu(0, scale)``, by EP or QP.

    Parameters
    ----------
    method : {"qp", "ep"}
    table : None, "exact", path or table object
        Where QP gets sigma* from. ``None``: an installed table, else the v2 table shipped for
        ``nu`` (nu = 4; any scale), else exact computation (warned once); ``"exact"``: always
        exact. A scale-1 Student-t table of the same nu serves every scale. Points outside a
        table are computed exactly (counted in its ``fallback_count``).
    nu, scale : float
        Degrees of freedom and scale of the noise (> 0; fixed).
    kernel, variance, length_scale, ard, optimizer, optimizer_maxiter :
        As :class:`qpinfer.GPPoissonRegressor`.
    schedule, max_iter, tol, damping :
        Site updates as in :func:`qpinfer.ep.run_ep` (``damping=None``: 0.5 in parallel).
    """

    _METHODS = ("qp", "ep")

    def __init__(
        self,
        method: str = "qp",
        *,
        nu: float = DEFAULT_NU,
        scale: float = 1.0,
        kernel: Any = None,
        variance: float = 1.0,
        length_scale: float | np.ndarray = 1.0,
        ard: bool = True,
        optimizer: str | None = "lbfgs",
        optimizer_maxiter: int = 1000,
        schedule: str = "parallel",
        max_iter: int = 1000,
        tol: float = 1e-6,
        damping: float | None = None,
        table: Any = None,
    ) -> None:
        self.method = method
        self.table = table
        self.nu = nu
        self.scale = scale
        self.kernel = kernel
        self.variance = variance
        self.length_scale = length_scale
        self.ard = ard
        self.optimizer = optimizer
        self.optimizer_maxiter = optimizer_maxiter
        self.schedule = schedule
        self.max_iter = max_iter
        self.tol = tol
        self.damping = damping

    def __sklearn_tags__(self):  # called by scikit-learn only
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(
            estimator_type="regressor",
            target_tags=TargetTags(required=True),
            regressor_tags=RegressorTags(),
            input_tags=InputTags(),
        )

    def _resolve_table(self, likelihood: Any) -> Any:
        """The base rule (:meth:`GPEstimatorBase._resolve_table`), with a scale-1 Student-t
        table of the same nu serving this scale (:func:`qpinfer.tables_student_t.for_likelihood`)."""
        from qpinfer.tables_student_t import for_likelihood

        return for_likelihood(super()._resolve_table(likelihood), likelihood)

    def fit(self, X: Any, y: Any) -> GPStudentTRegressor:
        """Fit the latent posterior (and, with ``optimizer="lbfgs"``, the kernel
        hyperparameters) to inputs ``X`` (n_samples, n_features) and real targets ``y``."""
        self._validate_params()
        nu, scale = check_nu_scale(self.nu, self.scale)
        X = check_X(X, estimator="GPStudentTRegressor")
        y = _check_targets(y, X.shape[0])
        self._fit_latent(X, y, StudentT(nu, scale))
        return self

    def _gradient(self, kern: Any, X: np.ndarray, K: np.ndarray, y: np.ndarray, res: Any):
        """R&W eq. (5.27) at fixed sites, ``1/2 tr((b b^T - A) dK/dtheta)`` with
        ``A = (K + T^-1)^-1 = T (I + K T)^-1`` (T the site precisions): the form that holds for
        negative site precisions, where the B = I + S^1/2 K S^1/2 Cholesky route does not."""
        if res.posterior.L is not None:
            return super()._gradient(kern, X, K, y, res)
        tau = np.asarray(res.tau, dtype=np.float64)
        A = tau[:, None] * np.linalg.solve(np.eye(tau.size) + K * tau[None, :], np.eye(tau.size))
        A = 0.5 * (A + A.T)
        b = res.posterior.b
        R = np.outer(b, b) - A
        return 0.5 * np.asarray(kern.gradient_contract(X, R, K), dtype=np.float64)

    def predict(self, X: Any, return_std: bool = False):
        """Predictive mean of y (the latent mean: the noise is symmetric); with ``return_std``
        also the latent standard deviation."""
        mean, var = self.predict_latent(X)
        return (mean, np.sqrt(var)) if return_std else mean

    def log_predictive_density(self, X: Any, y: Any) -> np.ndarray:
        """log p(y* | data) = log of int t(y* - f) N(f | m*, v*) df, per point."""
        self._check_is_fitted()
        X = check_X(X, estimator="GPStudentTRegressor")
        y = _check_targets(y, X.shape[0])
        mean, var = self.predict_latent(X)
        return self.likelihood_.log_z(mean, np.sqrt(var), y)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R^2 of the predictive mean (scikit-learn's regressor score)."""
        self._check_is_fitted()
        X = check_X(X, estimator="GPStudentTRegressor")
        y = _check_targets(y, X.shape[0])
        w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, float)
        pred = self.predict(X)
        mean = np.sum(w * y) / np.sum(w)
        ss_res = np.sum(w * (y - pred) ** 2)
        ss_tot = np.sum(w * (y - mean) ** 2)
        if ss_tot == 0:
            return 1.0 if ss_res == 0 else 0.0
        return float(1.0 - ss_res / ss_tot)
