"""Sparse GP classification (probit or logit) with M pseudo-points by Power EP, EP or QP (Bui et
al., 2017); more than two classes by one-vs-rest or one-vs-one
(:mod:`qpinfer.estimators.multiclass`). The fit is
:class:`qpinfer.estimators.sparse_site_fit.SparseSiteEstimator`'s."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.classifier import _check_X, _check_y, binary_labels
from qpinfer.estimators.multiclass import MultiClassMixin, check_multi_class
from qpinfer.estimators.params import estimator
from qpinfer.estimators.predictions import ProbitPredictionsMixin
from qpinfer.estimators.protocol import log_marginal_likelihood_method
from qpinfer.estimators.sparse_site_fit import SparseSiteEstimator
from qpinfer.inference.power_ep import check_power
from qpinfer.likelihoods.probit import Probit

__all__ = ["SparseGPClassifier"]


@estimator
class SparseGPClassifier(MultiClassMixin, ProbitPredictionsMixin, SparseSiteEstimator):
    """Sparse GP classification (probit or logit) with M pseudo-points by Power EP (Bui et al.,
    2017).

    Iterative pseudo-point Power EP (:func:`~qpinfer.inference.sparse.sites.run_sparse_pep`, eqs.
    (20), (106)-(109)), energy eq. (110); L-BFGS-B maximises the energy over the kernel
    hyperparameters and (optionally) the inducing inputs, running Power EP to convergence at every
    evaluation (warm-started) with the analytic gradient of
    :func:`~qpinfer.inference.sparse.sites.sparse_pep_gradient`. O(N M^2) per sweep.

    The fast path (the defaults; KEEL ``magic``, 17,020 points, M = 100, went from
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
    top of EP's O(M^2) (``docs/development/rep.md`` has timings).

    Parameters
    ----------
    %(n_inducing)s
    alpha : float in (0, 1], default 0.5
        Power EP power (``method="pep"``): 1 is EP (FITC-EP), smaller values move toward the
        variational solution. Ignored by ``method="qp"`` (which replaces the alpha = 1
        projection) and ``"ep"``.
    method : {"pep", "ep", "qp"}, default "qp"
        Power EP with ``alpha`` (moment projection of the fractional tilted distribution), EP
        (Power EP at alpha = 1), or QP (Wasserstein projection, alpha = 1). The default was
        ``"pep"`` (alpha 0.5) until a panel of 12 real data sets (KEEL, up to 2,000 training
        rows, M = 50; ``docs/development/defaults.md``): QP's held-out NTLL was lower than
        Power EP's at alpha = 0.5 on 8 of the 12 (EP's within 1e-4 of QP's on every set), and
        its fits took 0.07-0.58x the time (21 s for the panel against 177 s; spambase: 7 s
        against 100 s).
    likelihood : {"probit", "logit"}
        As :class:`qpinfer.GPClassifier`'s: ``Phi(y f)`` or ``1 / (1 + exp(-y f))``
        (:mod:`qpinfer.likelihoods.logit`; EP's moments from its shipped table; probabilities
        ``E[sigma(f*)]`` by quadrature). The logit has no fractional tilted moments: with it
        ``method="pep"`` needs ``alpha=1``, and QP's ``qp_objective`` must be ``"ep"``. QP
        projects the tilted marginal of ``f_n`` for the logit (the smoothed logit is no logit;
        ``_ConditionalProjection`` of :mod:`qpinfer.inference.sparse.sites`).
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
        Multi-class: ``kernel_`` is the binary classifiers' kernels as a ``CompoundKernel``
        when they are scikit-learn kernels, else their tuple
        (:func:`qpinfer.estimators.multiclass.compound_kernel`), ``estimators_`` the
        fitted binary classifiers (as :class:`qpinfer.GPClassifier`), the rest theirs only.
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        Eq. (110) at the fitted values (the second name is scikit-learn's).
    restart_evidence_ : ndarray (n_restarts_optimizer + 1,)
        Eq. (110) (sparse EP's, alpha = 1 for QP with ``qp_objective="ep"``; else QP's
        objective) at each start's optimum, the initial values' first; ``-inf`` where inference
        failed throughout.
    pep_result_ : SparsePEPResult
    n_iter_, n_evaluations_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from qpinfer import SparseGPClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> clf = SparseGPClassifier(20, random_state=0).fit(X, y)  # 20 pseudo-points
    >>> clf.inducing_points_.shape
    (20, 30)
    >>> bool(clf.score(X, y) > 0.95)
    True
    >>> clf.predict_proba(X[:3]).shape
    (3, 2)
    """

    _: KW_ONLY
    alpha: float = 0.5
    method: str = "qp"
    likelihood: str = "probit"
    multi_class: str = "one_vs_rest"
    n_jobs: int | None = None

    _LIKELIHOODS = ("probit", "logit")
    _OWN_QP_OBJECTIVES = True  # the probit's; checked with the likelihood in _validate

    def _validate(self) -> float:
        """Check the parameters; returns the Power EP power."""
        self._check_sparse_params()
        if self.method not in ("pep", "ep", "qp"):
            raise ValueError(f"method must be 'pep', 'ep' or 'qp', got {self.method!r}")
        if not (isinstance(self.likelihood, str) and self.likelihood in self._LIKELIHOODS):
            raise ValueError(
                f"likelihood must be one of {self._LIKELIHOODS}, got {self.likelihood!r}"
            )
        alpha = check_power(self.alpha)
        if self.likelihood == "logit":
            if self.method == "pep" and alpha != 1.0:
                raise ValueError(
                    f"method='pep' with alpha={self.alpha!r} is not available for "
                    "likelihood='logit' (it has no fractional tilted moments): use "
                    "method='ep' (alpha = 1) or 'qp'"
                )
            if self.method == "qp" and self.qp_objective != "ep":
                raise ValueError(
                    f"qp_objective={self.qp_objective!r} is available for the probit "
                    "likelihood only (its total gradient); with likelihood='logit' QP's "
                    "hyperparameters are sparse EP's: use qp_objective='ep'"
                )
        check_multi_class(self.multi_class, self.n_jobs)
        return alpha

    def _make_likelihood(self) -> Any:
        if self.likelihood == "logit":
            from qpinfer.likelihoods.logit import Logit

            return Logit()
        return Probit()

    @limits_blas
    def fit(self, X: Any, y: Any) -> SparseGPClassifier:
        """Fit sites, kernel hyperparameters and inducing inputs (eq. (110)).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        y : array-like of shape (n_samples,)
            Class labels (two or more distinct values of any sortable type).

        Returns
        -------
        self
            The fitted estimator.
        """
        alpha = self._validate()
        X = _check_X(X, estimator=type(self).__name__)
        y = _check_y(y, X.shape[0], type(self).__name__)
        if np.unique(y).size > 2:
            return self._fit_multiclass(X, y, np.unique(y))
        self._forget_multiclass()
        classes, y_pm = binary_labels(y, type(self).__name__)
        self._fit_sites(X, y_pm, self._make_likelihood(), alpha)
        self.classes_ = classes
        self.n_classes_ = 2
        return self

    @limits_blas
    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent ``f*`` (eq. (18)); binary only (multi-class:
        ``estimators_[i]``'s).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        mean, var : ndarray of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        if self._is_multiclass():
            return super().predict_latent(X)  # MultiClassMixin's refusal
        return self._latent(X)

    log_marginal_likelihood = log_marginal_likelihood_method(
        """Eq. (110) at the kernel's log hyperparameters ``theta`` (default: the fitted ones),
        inducing inputs fixed at the fitted ones, with scikit-learn's signature.

        Another ``theta`` re-runs the site updates of the fitted method (Power EP, or QP),
        warm-started from the fitted sites. The gradient is
        :func:`~qpinfer.inference.sparse.sites.sparse_pep_gradient` at those sites (Power EP's
        total derivative at its fixed point; QP's with its sites held fixed, as for
        :class:`qpinfer.GPClassifier`). As scikit-learn, ``clone_kernel=False`` sets
        ``kernel_.theta`` to ``theta``'s kernel entries (the fitted posterior is kept). Multi-class: the mean over the binary
        problems (:meth:`qpinfer.estimators.multiclass.MultiClassMixin.log_marginal_likelihood`).
        """
    )

    def _log_marginal_likelihood(self, theta: Any, eval_gradient: bool, clone_kernel: Any) -> Any:
        if self._is_multiclass():
            return super().log_marginal_likelihood(theta, eval_gradient, clone_kernel=clone_kernel)
        return self._sparse_log_marginal_likelihood(theta, eval_gradient, clone_kernel)
