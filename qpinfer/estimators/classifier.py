"""GP classification with EP, QP and baselines, in scikit-learn style (without sklearn).

Two classes here; more by one-vs-rest or one-vs-one binary problems
(:mod:`qpinfer.estimators.multiclass`).

:class:`GPClassifier` follows scikit-learn's conventions (``fit``/``predict``/``predict_proba``/
``score``; constructor arguments stored verbatim; learned state in attributes ending in ``_``;
validation at the boundary with messages naming the argument) but needs only numpy and scipy;
``sklearn.base.clone`` and the estimator checks work on it. The layout mirrors
``sklearn/gaussian_process/_gpc.py``, with EP/QP (Zhang et al., 2020, Algorithm 1) besides Laplace (and
Gaussian VB, the paper's baseline); what it shares with :class:`qpinfer.GPPoissonRegressor` is in
:class:`qpinfer.estimators.base.GPEstimatorBase`.

Hyperparameters (paper Sec. 6): L-BFGS-B (at most 1000 iterations, relative function tolerance
1e-9) maximises eq. (4) over the log kernel hyperparameters. Every evaluation runs the site
updates to convergence (warm-started from the previous evaluation) and returns eq. (4) with the
gradient of R&W eq. (5.27) -- the exact total derivative for EP at convergence. For QP the
objective is ``qp_objective``: by default EP's evidence expression evaluated at QP's sites, with
its total derivative through QP's site fixed point (:mod:`qpinfer.inference.total_gradient`; the
fixed-site gradient is not, as QP's sites are not a stationary point of EP's free energy, and it
stalls L-BFGS-B); ``"ep"`` is the paper's fit, EP's evidence first and QP's polished from EP's
optimum (``qpinfer.estimators.base.GPEstimatorBase._optimize()``).
Nesting the inner loop in every evaluation, rather than alternating whole L-BFGS-B runs at fixed
sites as in Algorithm 1, converges in far fewer site sweeps (alternating creeps along flat
directions of eq. (4)). Laplace and VB are nested the same way (Newton mode with R&W Alg. 5.1's
gradient; VB's natural-gradient fixed point with the envelope gradient).
"""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.checks import check_target_vector, check_X
from qpinfer.estimators.base import (
    DataConversionWarning,
    GPEstimatorBase,
    NotFittedError,
)
from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.multiclass import MultiClassMixin, check_multi_class
from qpinfer.estimators.params import estimator
from qpinfer.estimators.predictions import ProbitPredictionsMixin
from qpinfer.inference.power_ep import PowerMomentMatching, check_power
from qpinfer.inference.relaxed_ep import RelaxedMomentMatching, check_penalty
from qpinfer.likelihoods.probit import Probit
from qpinfer.likelihoods.step_noise import StepNoise, check_eps

__all__ = ["DataConversionWarning", "GPClassifier", "NotFittedError", "ProbitPredictionsMixin"]


def _check_X(X: Any, name: str = "X", estimator: str = "GPClassifier") -> np.ndarray:
    return check_X(X, name, estimator=estimator)


def _check_y(y: Any, n_samples: int, estimator: str = "GPClassifier") -> np.ndarray:
    arr = check_target_vector(y, n_samples, estimator, "y", numeric=False)
    if arr.dtype.kind in "fc" or arr.dtype == object:
        try:
            as_float = arr.astype(np.float64)
        except (TypeError, ValueError):
            as_float = None
        if as_float is not None:
            if not np.isfinite(as_float).all():
                raise ValueError("Input y contains NaN or infinity.")
            if arr.dtype.kind == "f" and np.any(as_float != np.round(as_float)):
                raise ValueError("Unknown label type: continuous. y must hold class labels.")
    if arr.dtype == object:
        kinds = {type(v) for v in arr}
        if len(kinds) > 1:
            raise ValueError(f"Unknown label type: mixed types {sorted(k.__name__ for k in kinds)}")
    return arr


def binary_labels(y: np.ndarray, estimator: str) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, y in {-1, +1})`` for checked labels ``y`` of exactly two classes."""
    classes = np.unique(y)
    if classes.size < 2:
        raise ValueError(
            f"{estimator} needs samples of 2 classes, but the data contains only one class: "
            f"{classes.tolist()}"
        )
    if classes.size > 2:
        raise ValueError(
            "Only binary classification is supported. The type of the target is multiclass "
            f"({classes.size} classes)."
        )
    return classes, np.where(y == classes[1], 1.0, -1.0)


@estimator
class GPClassifier(MultiClassMixin, ProbitPredictionsMixin, GPEstimatorBase):
    """Gaussian process classifier (probit or label-noise likelihood) with EP, QP, Power EP,
    relaxed EP, VB or Laplace; two classes, or more by one-vs-rest or one-vs-one.

    Parameters
    ----------
    method : {"qp", "ep", "pep", "rep", "vb", "laplace"}
        Quantile propagation (L2-Wasserstein projection, Zhang et al. (2020) eq. (7)), EP (eq. (5)),
        Power EP with power ``alpha`` (Bui et al., 2017, Sec. 3.4, :mod:`qpinfer.inference.power_ep`; its
        evidence is eq. (110)), relaxed EP with penalty ``rep_c`` (Qi and Guo, 2012,
        :mod:`qpinfer.inference.relaxed_ep`; ``likelihood="step_noise"`` only), or the baselines:
        Gaussian variational Bayes (:mod:`qpinfer.inference.vb`, the paper's Sec. 6 baseline;
        ``log_marginal_likelihood_`` is then the ELBO) and the Laplace approximation
        (:mod:`qpinfer.inference.laplace`, R&W Alg. 3.1/3.2/5.1).
    likelihood : {"probit", "step_noise", "logit"}
        ``"probit"``: p(y|f) = Phi(y f). ``"logit"``: p(y|f) = 1 / (1 + exp(-y f))
        (:mod:`qpinfer.likelihoods.logit`; methods qp, ep, vb and laplace; probabilities are
        ``E[sigma(f*)]`` by quadrature). ``"step_noise"``: the label-noise step of Qi and Guo (2012)
        eq. (8), p(y|f) = (1 - eps) Theta(y f) + eps Theta(-y f)
        (:mod:`qpinfer.likelihoods.step_noise`), with methods qp, ep, pep and rep. It is not
        log-concave: sites may have negative precisions (kept, see :mod:`qpinfer.inference.ep`), so
        the evidence gradient of R&W eq. (5.27) does not apply and hyperparameter fitting is not
        offered -- ``optimizer`` must be ``None`` (choose the kernel width by cross-validation, as
        Qi and Guo (2012) does). QP uses the installed table ``step_noise(eps=<eps>)`` if there is one
        (``qptables build step_noise --eps``), else exact sigma*.
    eps : float in [0, 0.5)
        The label-flip probability of ``"step_noise"`` (ignored by the probit, but validated).
    rep_c : float >= 0
        REP's l1 penalty weight ``c`` (Qi and Guo, 2012, eq. (5)); large ``c`` is EP exactly. Used by
        ``method="rep"`` only (validated always).
    table : None, "exact", path or table object
        Where QP gets sigma* from. ``None``: the cell table shipped inside qpinfer
        (:mod:`qpinfer.tables.shipped`: near-exact, every cavity), or the installed one
        (:func:`qpinfer.tables.installed_table_path`) if it is at least as good in coverage and
        verified error (:mod:`qpinfer.tables.choice`; ``qpinfer list`` shows which), else exact
        computation (with a one-time warning). ``"exact"``: always exact. A path or installed
        table name: :func:`qpinfer.open_table` of it. A table object is used as is; one
        for another likelihood is a ``ValueError``. Ignored by EP.
    %(kernel)s
    %(variance)s
    optimizer : {"lbfgs", "fmin_l_bfgs_b"}, callable or None
        Fit the hyperparameters by maximising the evidence (eq. (4); Laplace: R&W eq. (3.32);
        VB: the ELBO at its optimal variational parameters) with L-BFGS-B, or keep them fixed
        (``None``). QP's two stages with ``qp_objective="ep"`` (EP's evidence, then QP's polished) both use
        a callable.
        %(optimizer_callable)s
    %(search_settings)s
    %(site_loop)s
    %(qp_objective)s
    alpha : float in (0, 1]
        The Power EP power (``method="pep"`` only): ``alpha = 1`` is EP exactly, ``alpha -> 0``
        approaches the variational solution.
    multi_class : {"one_vs_rest", "one_vs_one"}, default "one_vs_rest"
        For more than two classes (scikit-learn's names): one binary classifier per class
        against the rest, or per pair of classes, each a copy of this one (method,
        likelihood, kernel, table, ...) with its own fitted hyperparameters
        (:mod:`qpinfer.estimators.multiclass`). ``predict_proba``: OvR normalises the binary
        probabilities by their row sum (as scikit-learn's GPC); OvO couples the pairwise ones
        (Wu, Lin and Weng 2004, method 2; scikit-learn's GPC refuses OvO probabilities) and
        ``predict`` votes. Ignored for two classes.
    n_jobs : int or None, default None
        Workers fitting the binary problems of a multi-class fit, through joblib's active
        backend (``None``: one, unless in a ``joblib.parallel_backend`` context; ``-1``: all
        cores; ``with joblib.parallel_backend("dask"):`` uses a dask cluster).

    With ``likelihood="step_noise"`` the probabilities are ``eps + (1 - 2 eps) Phi(mean /
    sqrt(var))`` and the decision function is ``mean / sqrt(var)``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; with two, ``classes_[1]`` is the positive class (y = +1 of the
        probit).
    n_classes_ : int
    n_features_in_ : int
    estimators_ : list of GPClassifier
        Multi-class only: the fitted binary classifiers, in scikit-learn's order (OvR: one per
        class of ``classes_``, that class labelled 1 and the rest 0; OvO: one per pair
        ``i < j``, class ``j`` labelled 1). The attributes below from ``X_train_`` on are
        theirs only (``estimators_[i].result_`` ...), except ``kernel_``, ``n_iter_`` (the
        array of theirs) and the evidence.
    X_train_ : ndarray
    kernel_ : kernel object with the fitted hyperparameters.
        Multi-class: as scikit-learn's, a ``CompoundKernel`` of the binary classifiers'
        kernels when they are scikit-learn kernels (its ``theta`` the concatenation that
        ``log_marginal_likelihood`` takes), else their tuple
        (:func:`qpinfer.estimators.multiclass.compound_kernel`).
    log_marginal_likelihood_, log_marginal_likelihood_value_ : float
        Eq. (4) at the fitted hyperparameters and sites (Laplace: R&W eq. (3.32); VB: the ELBO);
        the second name is scikit-learn's. Multi-class: the mean over the binary problems (as
        scikit-learn).
    restart_evidence_ : ndarray (n_restarts_optimizer + 1,)
        The evidence at each start's optimum, the initial hyperparameters' first (QP: EP's
        evidence, the first stage's); ``-inf`` where inference failed throughout.
    result_ : EPResult, LaplaceResult or VBResult
        Posterior and convergence information of the final inner fit.
    ep_result_ : qpinfer.inference.ep.EPResult
        For the site-update methods (qp, ep, pep): the same object as ``result_``.
    n_iter_ : int
        Sweeps (Newton steps, L-BFGS-B iterations) of the final inner fit.
    n_evaluations_ : int
        Inner loops run while fitting (one per L-BFGS-B evaluation).
    n_inner_iter_total_ : int
        Sweeps (Newton/VB steps) of all those inner loops; a search stops once
        ``qpinfer.inference.optimize.MAX_UNCONVERGED_EVALUATIONS`` of them ran to ``max_iter``
        unconverged.
    stage_seconds_ : dict
        Wall seconds of the fit's stages: QP's hyperparameter search with
        ``qp_objective="ep"`` ``{"ep": .., "qp": ..}`` (EP's evidence maximised first, then QP's
        own polished from there); every other fit ``{method: ..}``.
    table_ : table object or None
        The sigma* table QP used (``None`` for EP or exact QP).

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessClassifier : scikit-learn's classifier (Laplace).
    SparseGPClassifier : the same model with M pseudo-points, for larger data.

    Examples
    --------
    Two classes: the kernel hyperparameters are fitted by maximising the evidence.

    >>> from sklearn.datasets import load_breast_cancer, load_iris
    >>> from sklearn.preprocessing import StandardScaler
    >>> from qpinfer import GPClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X, y = StandardScaler().fit_transform(X)[:200], y[:200]
    >>> clf = GPClassifier(method="qp").fit(X, y)
    >>> clf.kernel_.k2  # the fitted kernel, scikit-learn's C * RBF  # doctest: +ELLIPSIS
    RBF(length_scale=...)
    >>> proba = clf.predict_proba(X)
    >>> proba.shape
    (200, 2)
    >>> bool((proba.argmax(axis=1) == y).mean() > 0.95)
    True

    More than two classes, with fixed hyperparameters: one binary classifier per class.

    >>> X, y = load_iris(return_X_y=True)
    >>> clf = GPClassifier(method="ep", optimizer=None, length_scale=1.0).fit(X, y)
    >>> clf.classes_
    array([0, 1, 2])
    >>> len(clf.estimators_), bool(clf.score(X, y) > 0.9)
    (3, True)
    """

    method: str = "qp"
    _: KW_ONLY
    table: Any = None
    alpha: float = 0.5
    likelihood: str = "probit"
    eps: float = 0.2
    rep_c: float = 10.0
    multi_class: str = "one_vs_rest"
    n_jobs: int | None = None

    _METHODS = ("qp", "ep", "pep", "rep", "vb", "laplace")
    _QP_SEARCH_TRUST = 1.0
    _QP_FLAT_RTOL = 1e-3
    _SPARSE_ALTERNATIVE = "qpinfer.SparseGPClassifier"
    _LIKELIHOODS = ("probit", "step_noise", "logit")

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.method == "pep":
            check_power(self.alpha)
        if not (isinstance(self.likelihood, str) and self.likelihood in self._LIKELIHOODS):
            raise ValueError(
                f"likelihood must be one of {self._LIKELIHOODS}, got {self.likelihood!r}"
            )
        check_eps(self.eps)
        check_penalty(self.rep_c)
        check_multi_class(self.multi_class, self.n_jobs)
        if self.likelihood == "step_noise":
            if self.method not in ("qp", "ep", "pep", "rep"):
                raise ValueError(
                    f"method {self.method!r} is not available for likelihood='step_noise' "
                    "(use 'qp', 'ep', 'pep' or 'rep')"
                )
            if self.optimizer is not None:
                raise ValueError(
                    "optimizer must be None for likelihood='step_noise': the likelihood is not "
                    "log-concave, sites may have negative precisions and the evidence gradient "
                    f"does not apply; fix the kernel (e.g. by cross-validation). Got {self.optimizer!r}"
                )
        elif self.likelihood == "logit" and self.method in ("pep", "rep"):
            raise ValueError(
                f"method {self.method!r} is not available for likelihood='logit' "
                "(use 'qp', 'ep', 'vb' or 'laplace')"
            )
        elif self.method == "rep":
            raise ValueError(
                "method='rep' (relaxed EP) needs likelihood='step_noise' (its objective (35) is "
                f"closed-form only for the label-noise step); got likelihood={self.likelihood!r}"
            )

    def _make_likelihood(self) -> Any:
        if self.likelihood == "logit":
            from qpinfer.likelihoods.logit import Logit

            return Logit()
        return StepNoise(self.eps) if self.likelihood == "step_noise" else Probit()

    def _projection(self, likelihood: Any, table: Any) -> Any:
        """Power EP's and relaxed EP's projections; the others as the base class."""
        if self.method == "pep":
            return PowerMomentMatching(likelihood, self.alpha)
        if self.method == "rep":
            return RelaxedMomentMatching(likelihood, self.rep_c)
        return super()._projection(likelihood, table)

    # -- fitting ------------------------------------------------------------------------------
    @limits_blas
    def fit(self, X: Any, y: Any) -> GPClassifier:
        """Fit sites (and, with ``optimizer="lbfgs"``, kernel hyperparameters) to ``(X, y)``;
        more than two classes: the binary problems of ``multi_class``.

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
        self._validate_params()
        X = self._check_fit_X(X)
        y = _check_y(y, X.shape[0])
        if np.unique(y).size > 2:
            return self._fit_multiclass(X, y, np.unique(y))
        self._forget_multiclass()
        classes, y_pm = binary_labels(y, "GPClassifier")
        self._fit_latent(X, y_pm, self._make_likelihood())
        self.classes_ = classes
        self.n_classes_ = 2
        return self
