# Over 400 lines: one-vs-rest and one-vs-one share the fit, the predictions and the CompoundKernel of scikit-learn in one mixin.
"""Multi-class classification from binary GP classifiers: one-vs-rest and one-vs-one.

:class:`MultiClassMixin` gives a binary classifier scikit-learn's
``GaussianProcessClassifier(multi_class=...)`` behaviour for ``k > 2`` classes. It is generic
over the binary estimator: it needs only the estimator's own class, its parameters
(``get_params``), ``multi_class``, ``n_jobs``, and binary ``fit``/``predict``/
``predict_proba``/``decision_function``/``log_marginal_likelihood``.

* ``"one_vs_rest"`` (OvR): one binary classifier per class ``c`` (in ``classes_`` order),
  fitted on all rows with labels ``1`` for ``c`` and ``0`` for the rest (scikit-learn's
  ``OneVsRestClassifier``). ``predict_proba`` is each classifier's probability of its class
  divided by the row sum over the classes (as scikit-learn's GPC); ``decision_function`` the
  ``(n, k)`` stack of the binary decision functions and ``predict`` its argmax (the argmax of
  ``predict_proba`` too: the binary probabilities increase with the decision functions).
* ``"one_vs_one"`` (OvO): one binary classifier per pair ``i < j`` (in that order), fitted on
  the rows of classes ``i`` and ``j`` with labels ``0`` for ``i`` and ``1`` for ``j``
  (scikit-learn's ``OneVsOneClassifier``). ``decision_function`` is the votes, ties broken by
  the summed binary decision functions (:func:`ovo_decision_function`, scikit-learn's rule).
  scikit-learn's GPC refuses ``predict_proba`` in OvO; here it is the pairwise coupling of Wu,
  Lin and Weng (2004, JMLR 5, "method 2", as libsvm does, :func:`couple_pairwise`) of the
  pairwise probabilities ``r_ij = P(y = i | y in {i, j}, x)``. ``predict`` is its argmax, so
  that a prediction is the most probable class ``predict_proba`` reports; the vote (by which
  ``OneVsOneClassifier`` and ``SVC`` predict) can disagree with it (with 20 classes on 37% of
  the rows).

The binary problems are independent and are fitted through joblib's active backend with
``n_jobs`` workers (scikit-learn's convention: ``None`` is one unless a
``joblib.parallel_backend`` context says otherwise, so
``with joblib.parallel_backend("dask"):`` sends them to a dask cluster). Warnings raised in
another process are re-emitted in the caller's. joblib is imported only here, at fit time.
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from itertools import combinations
from typing import Any

import numpy as np

__all__ = [
    "MULTI_CLASS",
    "MultiClassMixin",
    "check_multi_class",
    "compound_kernel",
    "couple_pairwise",
    "ovo_decision_function",
]

#: the strategies, scikit-learn's names
MULTI_CLASS = ("one_vs_rest", "one_vs_one")
#: pairwise probabilities are clipped to [MIN_PROB, 1 - MIN_PROB] before coupling (libsvm's
#: ``min_prob``), so that every pair constrains the solution
MIN_PROB = 1e-7


def check_multi_class(multi_class: Any, n_jobs: Any) -> None:
    """``ValueError`` naming the argument unless ``multi_class`` is one of :data:`MULTI_CLASS`
    and ``n_jobs`` is ``None`` or a non-zero integer (joblib's: ``-1`` is every core)."""
    if not (isinstance(multi_class, str) and multi_class in MULTI_CLASS):
        raise ValueError(f"multi_class must be 'one_vs_rest' or 'one_vs_one', got {multi_class!r}")
    bad_int = not isinstance(n_jobs, int | np.integer) or isinstance(n_jobs, bool | np.bool_)
    if n_jobs is not None and (bad_int or n_jobs == 0):
        raise ValueError(
            f"n_jobs must be None or a non-zero integer (-1: all cores), got {n_jobs!r}"
        )


def binary_problems(y: np.ndarray, classes: np.ndarray, multi_class: str) -> list:
    """The binary problems ``(rows, y01)`` in scikit-learn's order: ``rows`` indexes the
    training rows (``None``: all of them), ``y01`` the labels 0/1 of those rows."""
    if multi_class == "one_vs_rest":
        return [(None, (y == c).astype(np.intp)) for c in classes]
    problems = []
    for i, j in combinations(range(classes.size), 2):
        rows = np.flatnonzero((y == classes[i]) | (y == classes[j]))
        problems.append((rows, (y[rows] == classes[j]).astype(np.intp)))
    return problems


def _process() -> tuple[str, int]:
    """Which process this is: ``(host name, process id)``."""
    return socket.gethostname(), os.getpid()


def _fit_one(cls: type, params: dict, X: np.ndarray, y: np.ndarray, parent: tuple) -> tuple:
    """Fit ``cls(**params)`` on ``(X, y)``; in another process than the caller's (``parent``,
    :func:`_process`), also return the warnings raised (``(category, text)``), which would
    otherwise be lost."""
    est = cls(**params)
    if _process() == parent:
        return est.fit(X, y), []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, [(w.category, str(w.message)) for w in caught]


def _rewarn(category: type, text: str) -> None:
    try:
        warning = category(text)
    except Exception:  # a warning class with another constructor: keep the text
        warning = UserWarning(f"{category.__name__}: {text}")
    # _rewarn < fit_binary_problems < _fit_multiclass < fit < limits_blas's wrapper < caller
    warnings.warn(warning, stacklevel=6)


def fit_binary_problems(
    est: Any, X: Any, y: Any, classes: np.ndarray, problems: list | None = None
) -> list:
    """The fitted binary clones of ``est`` (its class and parameters, ``n_jobs=None``), one per
    problem of :func:`binary_problems` (or of ``problems``, the same form: an estimator taking
    dask arrays builds them lazily), fitted through joblib with ``est.n_jobs``."""
    from joblib import Parallel, delayed

    params = {**est.get_params(deep=False), "n_jobs": None}
    if problems is None:
        problems = binary_problems(y, classes, est.multi_class)
    parent = _process()
    out = Parallel(n_jobs=est.n_jobs)(
        delayed(_fit_one)(type(est), params, X if rows is None else X[rows], y01, parent)
        for rows, y01 in problems
    )
    for _, caught in out:
        for category, text in caught:
            _rewarn(category, text)
    return [fitted for fitted, _ in out]


def ovo_decision_function(
    predictions: np.ndarray, confidences: np.ndarray, n_classes: int
) -> np.ndarray:
    """Votes plus tie-breaking confidences, ``(n, n_classes)``: scikit-learn's one-vs-one rule.

    ``predictions`` and ``confidences`` are ``(n, n_pairs)``: each pair ``i < j``'s predicted
    label (1 for ``j``) and decision function (positive for ``j``). A class gets a vote per
    pair it wins; its summed confidences ``s`` (``+`` as ``j``, ``-`` as ``i``) are added as
    ``s / (3 (|s| + 1))``, in (-1/3, 1/3), which breaks ties without changing any vote order.
    """
    n = predictions.shape[0]
    votes = np.zeros((n, n_classes))
    conf = np.zeros((n, n_classes))
    for k, (i, j) in enumerate(combinations(range(n_classes), 2)):
        conf[:, i] -= confidences[:, k]
        conf[:, j] += confidences[:, k]
        votes[predictions[:, k] == 0, i] += 1
        votes[predictions[:, k] == 1, j] += 1
    return votes + conf / (3.0 * (np.abs(conf) + 1.0))


def couple_pairwise(r_pairs: np.ndarray, n_classes: int) -> np.ndarray:
    """Class probabilities ``(n, n_classes)`` from pairwise ones: Wu, Lin and Weng's method 2.

    ``r_pairs[:, k]`` is pair ``k = (i, j)``'s (``i < j``, in order) ``P(y = j | y in {i, j})``,
    so ``r_ji = r_pairs[:, k]`` and ``r_ij = 1 - r_ji``, each clipped to ``[MIN_PROB,
    1 - MIN_PROB]``. The probabilities ``p`` minimise ``sum_{i<j} (r_ji p_i - r_ij p_j)^2 =
    p^T Q p`` subject to ``sum p = 1`` (WLW 2004, eqs. (18)-(21); ``Q_ii = sum_{s != i}
    r_si^2``, ``Q_ij = -r_ji r_ij``): the solution of the bordered linear system
    ``[[Q, 1], [1^T, 0]] [p; -b] = [0; 1]``, which is nonsingular because every ``r`` is
    positive (WLW show ``p >= 0`` then; rounding-level negatives are set to 0). libsvm solves
    the same problem iteratively to a tolerance; this is the exact solve, per row.
    """
    n = r_pairs.shape[0]
    r = np.empty((n, n_classes, n_classes))  # r[:, i, j] = P(i | i or j)
    for k, (i, j) in enumerate(combinations(range(n_classes), 2)):
        r_ji = np.clip(r_pairs[:, k], MIN_PROB, 1.0 - MIN_PROB)
        r[:, j, i] = r_ji
        r[:, i, j] = 1.0 - r_ji
    idx = np.arange(n_classes)
    r[:, idx, idx] = 0.0
    Q = -r * np.swapaxes(r, 1, 2)
    Q[:, idx, idx] = np.sum(r**2, axis=1)
    A = np.zeros((n, n_classes + 1, n_classes + 1))
    A[:, :n_classes, :n_classes] = Q
    A[:, :n_classes, n_classes] = 1.0
    A[:, n_classes, :n_classes] = 1.0
    rhs = np.zeros((n, n_classes + 1, 1))
    rhs[:, n_classes] = 1.0
    p = np.maximum(np.linalg.solve(A, rhs)[:, :n_classes, 0], 0.0)
    return p / p.sum(axis=1, keepdims=True)


def compound_kernel(estimators: list) -> Any:
    """The ``kernel_`` of a multi-class fit: as scikit-learn's GPC, a
    ``sklearn.gaussian_process.kernels.CompoundKernel`` of the binary estimators' kernels (the
    same objects, so that setting its ``theta``, their concatenation, sets theirs) when they are
    scikit-learn kernels (then scikit-learn is loaded; qpinfer does not import it); else the
    tuple of the binary ``kernel_`` (qpinfer's own kernels have no compound)."""
    kernels = [getattr(e.kernel_, "wrapped", e.kernel_) for e in estimators]
    sk = sys.modules.get("sklearn.gaussian_process.kernels")
    if sk is not None and all(isinstance(k, sk.Kernel) for k in kernels):
        return sk.CompoundKernel(kernels)
    return tuple(e.kernel_ for e in estimators)


class MultiClassMixin:
    """``k > 2`` classes by one-vs-rest or one-vs-one binary classifiers (module docstring).

    Put it before the binary predictions in the class's bases; ``fit`` calls
    ``_fit_multiclass`` for ``k > 2`` classes and ``_forget_multiclass`` otherwise.
    Multi-class fits set ``classes_``, ``n_classes_``, ``estimators_``, ``n_features_in_``,
    ``kernel_`` (:func:`compound_kernel` of the binary ``kernel_``), ``n_iter_`` (the array of the binary
    ``n_iter_``), ``log_marginal_likelihood_`` and ``log_marginal_likelihood_value_`` (the mean
    over the binary problems, as scikit-learn); every other fitted attribute of the binary fit
    is on ``estimators_[i]`` only.
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags

    # -- fitting ------------------------------------------------------------------------------
    def _is_multiclass(self) -> bool:
        return hasattr(self, "estimators_")

    def _forget_multiclass(self) -> None:
        """Before a binary fit: drop a previous multi-class fit's attributes."""
        if "estimators_" in vars(self):
            del self.estimators_
            for name in ("kernel_", "n_iter_", "log_marginal_likelihood_value_"):
                if name in vars(self):
                    delattr(self, name)

    def _fit_multiclass(self, X: np.ndarray, y: np.ndarray, classes: np.ndarray):
        """Fit the binary problems of ``multi_class`` to validated ``X`` and labels ``y``."""
        estimators = fit_binary_problems(self, X, y, classes)
        for name in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, name)  # a previous binary fit's state
        self.classes_ = classes
        self.n_classes_ = int(classes.size)
        self.estimators_ = estimators
        if X.ndim == 2:  # (samples that are not vectors have no features)
            self.n_features_in_ = X.shape[1]
        self.kernel_ = compound_kernel(estimators)
        self.n_iter_ = np.array([e.n_iter_ for e in estimators])
        lml = float(np.mean([e.log_marginal_likelihood_ for e in estimators]))
        self.log_marginal_likelihood_ = lml
        self.log_marginal_likelihood_value_ = lml
        return self

    # -- the fitted check ---------------------------------------------------------------------
    def __sklearn_is_fitted__(self) -> bool:
        return self._is_multiclass() or super().__sklearn_is_fitted__()

    def _check_is_fitted(self) -> None:
        if not self._is_multiclass():
            super()._check_is_fitted()

    # -- predictions --------------------------------------------------------------------------
    def _pairwise(self, X: np.ndarray, method: str) -> np.ndarray:
        """``(n, n_estimators)``: ``method`` of each binary estimator (its positive class's
        probability for ``"predict_proba"``)."""
        cols = []
        for e in self.estimators_:
            out = getattr(e, method)(X)
            cols.append(out[:, 1] if method == "predict_proba" else out)
        return np.column_stack(cols)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in ``classes_`` order. Binary: the likelihood's
        predictive (:class:`qpinfer.estimators.predictions.ProbitPredictionsMixin`); OvR: the
        binary probabilities normalised by their row sum; OvO: their pairwise coupling
        (:func:`qpinfer.estimators.multiclass.couple_pairwise`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Rows sum to one.
        """
        if not self._is_multiclass():
            return super().predict_proba(X)
        X = self._check_predict_X(X)
        P = self._pairwise(X, "predict_proba")
        if self.multi_class == "one_vs_rest":  # scikit-learn's: a row of zeros stays zeros
            row_sums = P.sum(axis=1, keepdims=True)
            return np.divide(P, row_sums, out=np.zeros_like(P), where=row_sums != 0)
        return couple_pairwise(P, self.n_classes_)

    def decision_function(self, X: Any) -> np.ndarray:
        """Binary: shape ``(n,)``, positive for ``classes_[1]``. Multi-class: ``(n, k)``; OvR
        the binary decision functions, OvO votes plus tie-breaking confidences
        (:func:`qpinfer.estimators.multiclass.ovo_decision_function`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        if not self._is_multiclass():
            return super().decision_function(X)
        X = self._check_predict_X(X)
        D = self._pairwise(X, "decision_function")
        if self.multi_class == "one_vs_rest":
            return D
        return ovo_decision_function(self._pairwise(X, "predict"), D, self.n_classes_)

    def predict(self, X: Any) -> np.ndarray:
        """The predicted class: binary, where the latent mean is positive; multi-class, the
        argmax of :meth:`predict_proba` -- OvR: of :meth:`decision_function` too; OvO: of the
        coupled probabilities, not of the vote that :meth:`decision_function` counts.

        OvO's vote (scikit-learn's ``OneVsOneClassifier`` and ``SVC`` predict by it) and the
        coupled probabilities can disagree (with 20 classes on 37% of the rows): ``predict``
        follows the probabilities, as scikit-learn's ``GaussianProcessClassifier`` does, so that
        a prediction is always the most probable class ``predict_proba`` reports.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input points.

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        if not self._is_multiclass():
            return super().predict(X)
        if self.multi_class == "one_vs_one":
            return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
        return self.classes_[np.argmax(self.decision_function(X), axis=1)]

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """The latent mean and variance (binary only; ``estimators_[i]`` has each binary
        problem's).

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
            raise ValueError(
                "Returning the mean and variance of the latent function f is only supported "
                f"for binary classification, received {self.n_classes_} classes; "
                "estimators_[i].predict_latent(X) gives each binary problem's."
            )
        return super().predict_latent(X)

    def log_marginal_likelihood(
        self, theta: Any = None, eval_gradient: bool = False, **kwargs: Any
    ) -> Any:
        """The evidence at ``theta`` (binary: the estimator's). Multi-class, as scikit-learn's
        GPC: the mean over the binary problems; ``theta`` is one hyperparameter vector for all
        of them or their concatenation (``kernel_[i].theta`` in ``estimators_`` order). With
        ``eval_gradient`` (which scikit-learn does not offer multi-class), the gradient of that
        mean with respect to ``theta``.

        Parameters
        ----------
        theta : array-like or None, default None
            Log kernel hyperparameters; ``None``: the fitted ones (and the fitted value is returned).
        eval_gradient : bool, default False
            Also return the gradient with respect to ``theta``.
        **kwargs
            Passed to the binary estimators' ``log_marginal_likelihood`` (``clone_kernel``).

        Returns
        -------
        float, or (float, ndarray)
            The evidence, and with ``eval_gradient`` its gradient.
        """
        if not self._is_multiclass():
            return super().log_marginal_likelihood(theta, eval_gradient, **kwargs)
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_
        theta = np.asarray(theta, dtype=np.float64)
        n_est = len(self.estimators_)
        n_dims = np.asarray(self.estimators_[0].kernel_.theta).size
        if theta.shape == (n_dims,):
            thetas = [theta] * n_est
        elif theta.shape == (n_dims * n_est,):
            thetas = np.split(theta, n_est)
        else:
            raise ValueError(
                f"theta must have {n_dims} entries (shared by the binary problems) or "
                f"{n_dims * n_est} (one block per estimator), got shape {theta.shape}"
            )
        out = [
            e.log_marginal_likelihood(t, eval_gradient, **kwargs)
            for e, t in zip(self.estimators_, thetas)
        ]
        if not kwargs.get("clone_kernel", True):  # the binary kernel_ were set to theta
            self.kernel_ = compound_kernel(self.estimators_)
        if not eval_gradient:
            return np.float64(np.mean(out))
        value = np.float64(np.mean([v for v, _ in out]))
        grads = [np.asarray(g, dtype=np.float64) for _, g in out]
        if theta.shape == (n_dims,):
            return value, np.mean(grads, axis=0)
        return value, np.concatenate(grads) / n_est
