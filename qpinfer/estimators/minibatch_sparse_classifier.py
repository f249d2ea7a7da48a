"""MiniBatchSparseGPClassifier: sparse GP classification (probit) by minibatch EP / QP, for data
of millions of rows or more than memory."""

from __future__ import annotations

import math
import warnings
from dataclasses import KW_ONLY
from typing import Any

import numpy as np

from qpinfer.checks import check_positive_int, check_X
from qpinfer.estimators.blas import check_blas_threads, limits_blas
from qpinfer.estimators.params import estimator, initial_kernel
from qpinfer.estimators.predictions import ProbitPredictionsMixin
from qpinfer.estimators.protocol import ParamsMixin
from qpinfer.estimators.sparse_base import (
    SchedulerCloneMixin,
    check_inducing_kernel,
    checked_inducing_points,
)
from qpinfer.estimators.tables import resolve_table
from qpinfer.inference.power_ep import PowerMomentMatching, check_power
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.restarts import check_random_state
from qpinfer.inference.site_loop import ConvergenceWarning
from qpinfer.inference.sparse.dask_partitions import is_dask_array
from qpinfer.inference.sparse.minibatch import (
    DaskRunner,
    LocalRunner,
    MinibatchSettings,
    classes_of,
    fit_minibatch,
)
from qpinfer.inference.sparse.pseudo_points import (
    LowRankPosterior,
    _check_kernel,
    kmeans_inducing_points,
    predict_latent_low_rank,
)
from qpinfer.likelihoods.probit import Probit

__all__ = ["MiniBatchSparseGPClassifier"]

#: rows of the sample that k-means places the initial inducing inputs on (read batch by batch)
KMEANS_SAMPLE_ROWS = 20_000


@estimator
class MiniBatchSparseGPClassifier(ProbitPredictionsMixin, SchedulerCloneMixin, ParamsMixin):
    """Sparse GP classification (probit) with M pseudo-points by minibatch EP or QP.

    Stochastic EP with one tied site (:mod:`qpinfer.inference.sparse.stochastic`): the
    posterior of the pseudo-points is updated from one batch of rows at a time, the kernel's
    hyperparameters and the inducing inputs by Adam on the tied-site energy's unbiased minibatch
    gradient. An epoch costs O(N M^2) and the memory is O(batch_size x M + M^2) beside the data:
    ``X`` may be a dask array (e.g. ``dask.array.from_zarr``) read batch by batch, in this
    process or, with ``scheduler``, on a dask cluster's workers
    (:mod:`qpinfer.inference.sparse.minibatch`). For the same ``random_state`` the fit is the
    same either way. Predictions on a dask ``X`` are lazy dask arrays. Binary labels only.

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
        Power EP power (``method="pep"``): 1 is EP.
    method : {"pep", "qp"}, default "pep"
        Power EP's moment projection, or QP's (the Wasserstein variance of the site variable,
        sigma* from ``table``; alpha = 1).
    table : None, "exact", path or table object
        Where QP gets sigma* from, as :class:`qpinfer.GPClassifier`'s ``table``.
    kernel, variance, length_scale, ard :
        The initial kernel: a scikit-learn kernel (with inducing-input derivatives), or the SE
        kernel of ``variance`` and ``length_scale`` (one per feature if ``ard``).
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
    """

    n_inducing: int = 100
    alpha: float = 1.0
    _: KW_ONLY
    method: str = "pep"
    table: Any = None
    kernel: Any = None
    variance: float = 1.0
    length_scale: Any = 1.0
    ard: bool = False
    optimizer: Any = "adam"
    optimize_inducing: bool = True
    inducing_points: Any = None
    batch_size: int = 4096
    batch_parts: int = 2
    max_epochs: int = 20
    learning_rate: float = 0.1
    validation_fraction: float = 0.05
    n_iter_no_change: int = 10
    tol: float = 1e-4
    jitter: float = 1e-6
    random_state: Any = None
    scheduler: Any = None
    verbose: bool = False
    blas_threads: int | None = None

    _FITTED_ATTR = "inducing_points_"

    def _settings(self) -> MinibatchSettings:
        """The parameters checked, as the loop's settings."""
        for name in ("n_inducing", "batch_size", "batch_parts", "max_epochs", "n_iter_no_change"):
            check_positive_int(getattr(self, name), name)
        for name in ("tol", "jitter"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, int | float) and np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
        lr = self.learning_rate
        if isinstance(lr, bool) or not (isinstance(lr, int | float) and 0 < lr <= 1):
            raise ValueError(
                f"learning_rate must be a number in (0, 1], got {lr!r}: Adam moves each log "
                "hyperparameter by up to about learning_rate a step, and above 1 the kernel "
                "collapses to predicting 0.5 everywhere"
            )
        vf = self.validation_fraction
        if isinstance(vf, bool) or not (isinstance(vf, int | float) and 0 <= vf < 0.5):
            raise ValueError(f"validation_fraction must be a number in [0, 0.5), got {vf!r}")
        if self.method not in ("pep", "qp"):
            raise ValueError(f"method must be 'pep' or 'qp', got {self.method!r}")
        if self.optimizer not in ("adam", None):
            raise ValueError(f"optimizer must be 'adam' or None, got {self.optimizer!r}")
        rng = check_random_state(self.random_state)  # ValueError naming random_state
        check_blas_threads(self.blas_threads)
        return MinibatchSettings(
            batch_size=int(self.batch_size),
            batch_parts=int(self.batch_parts),
            max_epochs=int(self.max_epochs),
            learning_rate=float(lr),
            validation_fraction=float(vf),
            n_iter_no_change=int(self.n_iter_no_change),
            tol=float(self.tol),
            optimize_kernel=self.optimizer is not None,
            optimize_inducing=bool(self.optimize_inducing) and self.optimizer is not None,
            jitter=float(self.jitter),
            seed=self._seed(rng),
            verbose=bool(self.verbose),
        )

    def _seed(self, rng: Any) -> int:
        """The integer seed of the fit: ``random_state`` itself if an integer, else one draw
        of ``rng`` (fresh entropy for ``None``; a user's generator advances)."""
        rs = self.random_state
        if rs is not None and not isinstance(rs, np.random.Generator | np.random.RandomState):
            return int(rs)
        if isinstance(rng, np.random.RandomState):
            return int(rng.randint(2**32, dtype=np.int64))
        return int(rng.integers(2**32))

    def _projection(self) -> tuple[Any, Any]:
        lik = Probit()
        if self.method == "qp":
            table = resolve_table(self, lik)
            return QuantileMatching(lik, table), table
        return PowerMomentMatching(lik, check_power(self.alpha)), None

    def _initial_inducing(self, X: Any, m: int, seed: int) -> np.ndarray:
        if self.inducing_points is not None:
            return checked_inducing_points(self.inducing_points, X.shape[1])
        n = X.shape[0]
        rng = np.random.default_rng(seed)
        if n <= KMEANS_SAMPLE_ROWS:
            sample = check_X(np.asarray(X), "X", type(self).__name__)
        else:  # a few random batches: a dask X is read only there
            bs = self.batch_size
            n_batches = -(-n // bs)
            take = min(n_batches, -(-KMEANS_SAMPLE_ROWS // bs))
            picked = np.sort(rng.choice(n_batches, size=take, replace=False))
            sample = np.concatenate([np.asarray(X[i * bs : (i + 1) * bs]) for i in picked])
            sample = check_X(sample, "X", type(self).__name__)
        if m > sample.shape[0]:
            raise ValueError(f"n_inducing={m} exceeds the {sample.shape[0]} rows to place them on")
        return kmeans_inducing_points(sample, m, seed)

    @limits_blas
    def fit(self, X: Any, y: Any) -> MiniBatchSparseGPClassifier:
        """Fit by minibatch EP/QP; ``X``, ``y`` numpy arrays or dask arrays (read by batches)."""
        s = self._settings()
        projection, table = self._projection()
        if not is_dask_array(X):
            X = check_X(X, "X", type(self).__name__)
        _check_known_chunks(X, "X")
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
        y = y if is_dask_array(y) else np.asarray(y)
        _check_known_chunks(y, "y")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), one label per row, got {y.shape}")
        classes, counts = classes_of(y)
        if classes.size != 2:
            raise ValueError(
                f"{type(self).__name__} needs exactly 2 classes in y, got {classes.size}: "
                f"{classes[:10].tolist()}"
            )
        kernel = initial_kernel(self, X.shape[1], _check_kernel)
        Z = self._initial_inducing(X, int(self.n_inducing), s.seed)
        check_inducing_kernel(kernel, Z)
        if self.scheduler is None:
            res = fit_minibatch(kernel, Z, classes, X.shape[0], projection, LocalRunner(X, y), s)
        else:
            from qpinfer.inference.sparse.dask_partitions import client_for

            with client_for(self.scheduler) as client:
                part = -(-s.batch_size // s.batch_parts)
                runner = DaskRunner(client, X, y, part)
                res = fit_minibatch(kernel, Z, classes, X.shape[0], projection, runner, s)
        self.classes_ = classes
        self.n_classes_ = 2
        self.n_features_in_ = X.shape[1]
        self.kernel_ = res.kernel
        self.inducing_points_ = res.Z
        self.table_ = table
        self.projection_ = projection
        self.result_ = res
        self.n_epochs_ = res.epochs
        self.best_epoch_ = res.best_epoch
        self.energy_ = res.energy
        self.validation_ntll_ = res.validation_ntll
        self.n_train_ = res.n_train
        self._warn_if_null(res, int(counts[1]))
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

    def predict_latent(self, X: Any) -> tuple[Any, Any]:
        """Mean and variance of the latent ``f*`` (eq. (18)) under the fitted posterior; for a
        dask ``X``, two lazy dask arrays computed block by block."""
        if is_dask_array(X):
            both = self._blockwise(lambda b: np.column_stack(self.predict_latent(b)), X, 2)
            return both[:, 0], both[:, 1]
        return self._predict_latent(X)

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities (columns follow ``classes_``); lazy for a dask ``X``."""
        if is_dask_array(X):
            return self._blockwise(super().predict_proba, X, 2)
        return super().predict_proba(X)

    def predict(self, X: Any) -> Any:
        """The more probable class; lazy for a dask ``X``."""
        if is_dask_array(X):
            return self._blockwise(super().predict, X, None, self.classes_.dtype)
        return super().predict(X)

    def decision_function(self, X: Any) -> Any:
        """Positive for ``classes_[1]``; lazy for a dask ``X``."""
        if is_dask_array(X):
            return self._blockwise(super().decision_function, X, None)
        return super().decision_function(X)

    def _blockwise(self, method, X: Any, n_columns: int | None, dtype: Any = np.float64) -> Any:
        """``method`` on each row block of a dask ``X`` (its columns in one chunk): a dask array
        of one (``n_columns=None``) or ``n_columns`` columns, computed where dask runs it."""
        self._check_is_fitted()
        Xc = X.rechunk({1: -1})
        if n_columns is None:
            return Xc.map_blocks(method, drop_axis=1, dtype=dtype)
        return Xc.map_blocks(method, chunks=(Xc.chunks[0], (n_columns,)), dtype=dtype)

    @limits_blas
    def _predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        self._check_is_fitted()
        X = check_X(X, "X", type(self).__name__)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features_in_}")
        post = self.result_.posterior
        low_rank = LowRankPosterior(L=post.L, mean_v=post.mean, mean=np.empty(0), var=np.empty(0))
        return predict_latent_low_rank(
            self.kernel_, self.inducing_points_, self.result_.Lu, low_rank, X
        )


def _check_known_chunks(a: Any, name: str) -> None:
    """``ValueError`` for a dask array whose row chunks have unknown (``nan``) sizes."""
    if not is_dask_array(a) or not any(math.isnan(c) for c in a.chunks[0]):
        return
    raise ValueError(
        f"{name} is a dask array whose chunk sizes are unknown ({name}.chunks[0] holds nan, "
        "e.g. a dask DataFrame's .values or a boolean mask); the batches are row slices and "
        "need them: build it with df.to_dask_array(lengths=True) or call "
        f"{name}.compute_chunk_sizes() (each reads the data once) before fit"
    )
