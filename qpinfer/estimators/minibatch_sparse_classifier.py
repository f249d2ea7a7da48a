"""MiniBatchSparseGPClassifier: sparse GP classification (probit or logit; binary or, by
one-vs-rest or one-vs-one, multi-class) by minibatch EP / QP, for data of millions of rows or more
than memory."""

from __future__ import annotations

import math
import warnings
from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.estimators.blas import limits_blas
from qpinfer.estimators.minibatch_base import MiniBatchParams, MiniBatchSparseBase
from qpinfer.estimators.multiclass import (
    MultiClassMixin,
    binary_problems,
    check_multi_class,
    compound_kernel,
    fit_binary_problems,
)
from qpinfer.estimators.params import estimator
from qpinfer.estimators.predictions import ProbitPredictionsMixin
from qpinfer.estimators.tables import resolve_table, with_moment_table
from qpinfer.inference.power_ep import PowerMomentMatching, check_power
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sparse.dask_partitions import is_dask_array
from qpinfer.inference.sparse.minibatch import LabelTarget, classes_of
from qpinfer.likelihoods.probit import Probit

__all__ = ["MiniBatchSparseGPClassifier"]


@estimator
class MiniBatchSparseGPClassifier(
    MultiClassMixin, ProbitPredictionsMixin, MiniBatchSparseBase, MiniBatchParams
):
    """Sparse GP classification (probit or logit) with M pseudo-points by minibatch EP or QP.

    Stochastic EP with one tied site (:mod:`qpinfer.inference.sparse.stochastic`): the
    posterior of the pseudo-points is updated from one batch of rows at a time, the kernel's
    hyperparameters and the inducing inputs by Adam on the tied-site energy's unbiased minibatch
    gradient. An epoch costs O(N M^2) and the memory is O(batch_size x M + M^2) beside the data:
    ``X`` may be a dask array (e.g. ``dask.array.from_zarr``) read batch by batch, in this
    process or, with ``scheduler``, on a dask cluster's workers
    (:mod:`qpinfer.inference.sparse.minibatch`). For the same ``random_state`` the fit is the
    same either way. Predictions on a dask ``X`` are lazy dask arrays.

    More than two classes: the binary problems of ``multi_class``
    (:mod:`qpinfer.estimators.multiclass`), each a minibatch fit with these parameters, with
    numpy or dask ``X``/``y``. The classes are found once, by one pass of dask's ``unique``
    over ``y`` (never over ``X``; each binary fit then counts its own two labels, one more pass
    over ``y`` alone). One-vs-rest gives each problem the lazy labels ``y == c``
    (no copy of ``X``); one-vs-one gathers ``y`` once (N labels in memory) to find each pair's
    rows and gives its problem ``X[rows]`` -- for a dask ``X`` a lazy selection by an integer
    index, whose chunk sizes dask knows without reading ``X``, so each pair's fit reads only
    its own rows (at the cost of its index, 8 bytes a row, and of batches that gather rows
    across ``X``'s chunks).

    A dask ``X`` or ``y`` must know its chunk sizes (batches are row slices): one of unknown
    sizes (``nan``, e.g. a dask DataFrame's ``.values`` or a boolean mask) is refused with a
    ``ValueError`` rather than measured here, since measuring reads all the data once --
    ``df.to_dask_array(lengths=True)`` or ``X.compute_chunk_sizes()`` do it once, and the result
    can be reused for every fit.

    A fit whose best held-out NTLL is no better (by ``tol``) than a null model's -- the training
    rows' class frequencies, or a coin (log 2), whichever is lower on the held-out rows -- warns
    (:class:`~qpinfer.inference.site_loop.ConvergenceWarning`) naming the likely cause: with
    ``optimizer="adam"`` a ``learning_rate`` too large (the kernel collapses to predicting 0.5
    everywhere), with ``optimizer=None`` the fixed kernel. Without held-out rows
    (``validation_fraction=0``) there is nothing to measure this on.

    Parameters
    ----------
    n_inducing : int, default 100
        M, the number of pseudo-points (k-means on a sample of at most 20,000 rows).
    alpha : float in (0, 1], default 1.0
        Power EP power (``method="pep"``): 1 is EP (the only value for ``likelihood="logit"``).
        On the panel of ``docs/development/defaults.md`` (12 real data sets) alpha = 0.5 had
        the higher held-out NTLL on 11 of them, at 2.2-5.7x the time.
    method : {"pep", "qp"}, default "pep"
        Power EP's moment projection, or QP's (the Wasserstein variance of the site variable
        -- for the logit, of ``f_n``'s tilted marginal -- sigma* from ``table``; alpha = 1).
    likelihood : {"probit", "logit"}, default "probit"
        ``p(y | f) = Phi(y f)`` or ``1 / (1 + exp(-y f))`` (EP's moments of the logit from its
        shipped moment table); probabilities as :class:`qpinfer.GPClassifier`'s.
    multi_class : {"one_vs_rest", "one_vs_one"}, default "one_vs_rest"
    n_jobs : int or None
        More than two classes: the binary problems and the joblib workers they are fitted
        with, as :class:`qpinfer.GPClassifier`'s (the class docstring for dask arrays).
    table : None, "exact", path or table object
        Where QP gets sigma* from, as :class:`qpinfer.GPClassifier`'s ``table``.
    kernel, variance, length_scale, ard :
        The initial kernel: a scikit-learn kernel (with inducing-input derivatives), or the SE
        kernel of ``variance`` and ``length_scale`` (one per feature if ``ard``; its fitted
        ``kernel_`` is scikit-learn's equivalent ``ConstantKernel * RBF`` when scikit-learn is
        installed, :mod:`qpinfer.kernels.sklearn_se`). A kernel on non-vector inputs
        (``requires_vector_input`` false) is refused: the inducing points are points of the
        input space.
    optimizer : {"adam"} or None, default "adam"
        Fit the kernel's log hyperparameters (and ``optimize_inducing``: the inducing inputs)
        by Adam, or keep them.
    optimize_inducing : bool, default True
    inducing_points : array (M, n_features) or None
        The initial inducing inputs (default: k-means).
    batch_size : int, default 4096
        Rows per step; the rows are cut into consecutive batches (store them shuffled).
    batch_parts : int, default 2
        Parts each batch is computed in (one dask task each with ``scheduler``; the sum is the
        same whatever ran them).
    max_epochs : int, default 20
    learning_rate : float in (0, 1], default 0.1
        Adam's step size in the first epoch; it decays geometrically to a tenth of that by
        ``max_epochs`` (measured on KEEL magic: 0.01 left the kernel variance far below the
        full-batch optimum after 40 epochs). Adam moves each log hyperparameter (and each
        coordinate of the inducing inputs) by up to about ``learning_rate`` a step, so above 1 a
        step can change a length scale or the variance by more than a factor e: measured on
        a smooth 3-feature problem, every rate from 1.5 up collapsed the kernel to predicting
        0.5 everywhere, so larger values are refused. Near 1 the inducing inputs of unit-scale
        features can still overshoot (the null-model warning below says so).
    validation_fraction : float in [0, 0.5), default 0.05
        The fraction of the rows held out for early stopping: ``round(validation_fraction x
        N)`` rows (at least one), one contiguous range at a seeded random multiple of
        ``batch_size`` (0: none, run ``max_epochs``). The sites are fitted on the other rows,
        whatever ``batch_size``.
    n_iter_no_change : int, default 10
        Stop after this many epochs whose held-out NTLL did not improve by ``tol``.
    tol : float, default 1e-4
        The held-out NTLL improvement that counts: for early stopping, and against the null
        model below.
    jitter : float, default 1e-6
    random_state : int >= 0, numpy Generator or RandomState, or None
        Seeds k-means, the held-out rows and the batch order (a generator: one seed drawn from
        it, so its state advances).
    scheduler : None, "local", address or distributed.Client
        Where batches are computed: in this process (``None``), or on dask.
    verbose : bool, default False
        A progress bar per epoch (tqdm) with the running energy and the held-out NTLL.
    blas_threads : int or None

    Attributes
    ----------
    classes_, n_features_in_, kernel_, inducing_points_ :
    n_epochs_, best_epoch_ : int
    energy_, validation_ntll_ : list of float
        Per epoch: the mean tied-site energy per row, and the held-out NTLL.
    n_train_ : int
        Rows the sites were fitted on (the held-out rows excluded).

    Examples
    --------
    A few epochs of mini-batches of 128 rows (numpy data here; a dask array is streamed block by
    block):

    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from qpinfer import MiniBatchSparseGPClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> clf = MiniBatchSparseGPClassifier(
    ...     20, batch_size=128, max_epochs=5, random_state=0
    ... ).fit(X, y)
    >>> bool(clf.score(X, y) > 0.9)
    True
    >>> clf.predict_proba(X[:3]).shape
    (3, 2)
    """

    _: KW_ONLY
    alpha: float = 1.0
    method: str = "pep"
    table: Any = None
    likelihood: str = "probit"
    multi_class: str = "one_vs_rest"
    n_jobs: int | None = None

    _LIKELIHOODS = ("probit", "logit")

    def _make_likelihood(self) -> Any:
        """The likelihood of ``likelihood`` (``ValueError`` naming it, or ``alpha``)."""
        if not (isinstance(self.likelihood, str) and self.likelihood in self._LIKELIHOODS):
            raise ValueError(
                f"likelihood must be one of {self._LIKELIHOODS}, got {self.likelihood!r}"
            )
        if self.likelihood == "probit":
            return Probit()
        if self.method == "pep" and check_power(self.alpha) != 1.0:
            raise ValueError(
                f"alpha={self.alpha!r} is not available for likelihood='logit': its moments "
                "are tabulated for EP (alpha = 1) only; use alpha=1.0 or likelihood='probit'"
            )
        from qpinfer.likelihoods.logit import Logit

        return Logit()

    def _projection(self, likelihood: Any) -> tuple[Any, Any, Any]:
        """``(projection, QP's table, the likelihood with its moment table)``."""
        table = resolve_table(self, likelihood) if self.method == "qp" else None
        likelihood = with_moment_table(self, likelihood, table)
        if self.method == "qp":
            return QuantileMatching(likelihood, table), table, likelihood
        return PowerMomentMatching(likelihood, check_power(self.alpha)), None, likelihood

    @limits_blas
    def fit(self, X: Any, y: Any) -> MiniBatchSparseGPClassifier:
        """Fit by minibatch EP/QP; ``X``, ``y`` numpy arrays or dask arrays (read by batches);
        more than two classes: the binary problems of ``multi_class``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.
        y : array-like or dask array of shape (n_samples,)
            Class labels.

        Returns
        -------
        self
            The fitted estimator.
        """
        s = self._settings()
        check_multi_class(self.multi_class, self.n_jobs)
        likelihood = self._make_likelihood()
        X, y = self._checked_data(X, y)
        classes, counts = classes_of(y)
        if classes.size > 2:
            return self._fit_multiclass(X, y, classes)
        if classes.size != 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 classes in y, got {classes.size}: "
                f"{classes[:10].tolist()}"
            )
        self._forget_multiclass()
        projection, table, likelihood = self._projection(likelihood)
        target = LabelTarget(classes, None if self.likelihood == "probit" else likelihood)
        res = self._fit_minibatch(X, y, target, projection, s)
        self.classes_ = classes
        self.n_classes_ = 2
        self.likelihood_ = likelihood
        self.table_ = table
        self._warn_if_null(res, int(counts[1]))
        return self

    def _fit_multiclass(self, X: Any, y: Any, classes: np.ndarray) -> MiniBatchSparseGPClassifier:
        """The binary problems of ``multi_class`` on numpy or dask ``X``/``y`` (the class
        docstring), fitted through joblib (:func:`~qpinfer.estimators.multiclass.fit_binary_problems`)."""
        if self.multi_class == "one_vs_rest":
            problems = [(None, (y == c).astype(np.int8)) for c in classes]
        else:
            labels = np.asarray(y.compute() if is_dask_array(y) else y)
            problems = binary_problems(labels, classes, "one_vs_one")
        estimators = fit_binary_problems(self, X, None, classes, problems)
        for name in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, name)  # a previous fit's state
        self.classes_ = classes
        self.n_classes_ = int(classes.size)
        self.estimators_ = estimators
        self.n_features_in_ = X.shape[1]
        self.kernel_ = compound_kernel(estimators)
        return self

    def _warn_if_null(self, res: Any, n_positive: int) -> None:
        """:class:`ConvergenceWarning` when the best held-out NTLL is not below a null model's
        by more than ``tol``: the training rows' frequency of ``classes_[1]`` (``n_positive``
        of all rows), or a coin, whichever does better on the held-out rows."""
        rows, pos = res.held_out_rows, res.held_out_positives
        if rows == 0 or not res.validation_ntll:
            return
        p = (n_positive - pos) / res.n_train
        with np.errstate(divide="ignore"):  # a class absent from the training rows: inf
            prior = -(pos * np.log(p) + (rows - pos) * np.log1p(-p)) / rows if 0 < p < 1 else np.inf
        null = min(math.log(2.0), float(prior))
        best = min(res.validation_ntll)
        if best < null - float(self.tol):  # better by more than early stopping's tolerance
            return
        if self.optimizer is None:
            cause = (
                "the fixed kernel (variance, length_scale; optimizer=None) does not fit the "
                "data, e.g. a variance so small that every prediction is 0.5"
            )
        else:
            cause = (
                f"learning_rate={self.learning_rate!r} is likely too large (Adam's steps "
                "overshoot and the kernel collapses to predicting 0.5 everywhere): try "
                f"{self.learning_rate / 10:g}"
            )
        warnings.warn(
            f"{type(self).__name__}: the best held-out NTLL {best:.6g} is no better than a null "
            f"model's {null:.6g} (the class frequencies or a coin; by less than tol="
            f"{self.tol!r}): the fit learned nothing from X. Likely cause: {cause}; or X "
            "carries no information about y.",
            ConvergenceWarning,
            stacklevel=4,
        )

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities (columns follow ``classes_``); lazy for a dask ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_classes)
        """
        if is_dask_array(X):
            return self._blockwise(self.predict_proba, X, self.n_classes_)
        return super().predict_proba(X)

    def predict(self, X: Any) -> Any:
        """The predicted class; lazy for a dask ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
        """
        if is_dask_array(X):
            return self._blockwise(self.predict, X, None, self.classes_.dtype)
        return super().predict(X)

    def decision_function(self, X: Any) -> Any:
        """Binary: positive for ``classes_[1]``; multi-class: ``(n, k)``
        (:class:`~qpinfer.estimators.multiclass.MultiClassMixin`); lazy for a dask ``X``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).

        Returns
        -------
        ndarray or dask array of shape (n_samples,) or (n_samples, n_classes)
        """
        if is_dask_array(X):
            k = None if self.n_classes_ == 2 else self.n_classes_
            return self._blockwise(self.decision_function, X, k)
        return super().decision_function(X)
