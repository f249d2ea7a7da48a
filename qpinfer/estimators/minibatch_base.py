"""What every minibatch sparse estimator shares (:class:`qpinfer.MiniBatchSparseGPClassifier`,
:class:`qpinfer.MiniBatchSparseGPPoissonRegressor`, :class:`qpinfer.MiniBatchSparseGPStudentTRegressor`):
the minibatch parameters (:class:`~qpinfer.estimators.minibatch_base.MiniBatchParams`), their checks, the initial inducing inputs,
the fit by :func:`qpinfer.inference.sparse.minibatch.fit_minibatch` in this process or on a dask
cluster, and the latent predictions -- lazy on a dask ``X`` (``MiniBatchSparseBase._blockwise``:
the numpy predictions mapped over its row blocks)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from qpinfer.checks import check_positive_int, check_X
from qpinfer.estimators.blas import check_blas_threads, limits_blas
from qpinfer.estimators.params import initial_kernel
from qpinfer.estimators.protocol import ParamsMixin
from qpinfer.estimators.sparse_base import (
    SchedulerCloneMixin,
    check_inducing_kernel,
    checked_inducing_points,
)
from qpinfer.inference.restarts import check_random_state
from qpinfer.inference.sparse.dask_partitions import is_dask_array
from qpinfer.inference.sparse.minibatch import (
    DaskRunner,
    LocalRunner,
    MinibatchResult,
    MinibatchSettings,
    fit_minibatch,
)
from qpinfer.inference.sparse.pseudo_points import (
    LowRankPosterior,
    _check_kernel,
    kmeans_inducing_points,
    predict_latent_low_rank,
)
from qpinfer.kernels.sklearn_se import sklearn_face

__all__ = ["KMEANS_SAMPLE_ROWS", "MiniBatchParams", "MiniBatchSparseBase", "check_known_chunks"]

#: rows of the sample that k-means places the initial inducing inputs on (read batch by batch)
KMEANS_SAMPLE_ROWS = 20_000


@dataclasses.dataclass(eq=False, repr=False, match_args=False, kw_only=True)
class MiniBatchParams(ParamsMixin):
    """The parameters of every minibatch estimator (``n_inducing`` positional); their meaning:
    :class:`qpinfer.MiniBatchSparseGPClassifier`."""

    n_inducing: int = dataclasses.field(default=100, kw_only=False)
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


class MiniBatchSparseBase(SchedulerCloneMixin):
    """The shared fit and latent predictions (the class docstring of the estimators)."""

    _FITTED_ATTR = "inducing_points_"
    #: the values ``method`` takes
    _METHODS: tuple[str, ...] = ("pep", "qp")

    def _blas_block_rows(self, n_rows: int) -> int:
        """The rows BLAS sees at once (:func:`qpinfer.estimators.blas.limits_blas`): a batch, not
        N. Measured on 1e5 rows (Poisson log link, QP, M = 100, batch 4096, two epochs, this
        2-core machine idle): 3.2 s on one BLAS thread against 5.6-7.1 s on two."""
        size = self.batch_size
        is_int = isinstance(size, int | np.integer) and not isinstance(size, bool)
        return min(n_rows, int(size)) if is_int and size > 0 else n_rows

    def __getstate__(self) -> dict:
        """Pickled (e.g. into the tasks of lazy predictions on a dask ``X``) without a live
        ``distributed.Client`` as ``scheduler``, which cannot be pickled: ``None`` instead."""
        state = self.__dict__.copy()
        if not (state.get("scheduler") is None or isinstance(state["scheduler"], str)):
            state["scheduler"] = None
        return state

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
        if self.method not in self._METHODS:
            choices = " or ".join(repr(m) for m in self._METHODS)
            raise ValueError(f"method must be {choices}, got {self.method!r}")
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

    def _checked_data(self, X: Any, y: Any) -> tuple[Any, Any]:
        """``X`` (numpy: checked finite float64; dask: known chunk sizes) and ``y`` of one
        target per row (numpy or dask, checked part by part during the fit)."""
        if not is_dask_array(X):
            X = check_X(X, "X", type(self).__name__)
        check_known_chunks(X, "X")
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
        y = y if is_dask_array(y) else np.asarray(y)
        check_known_chunks(y, "y")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), one label per row, got {y.shape}")
        return X, y

    def _fit_minibatch(
        self, X: Any, y: Any, target: Any, projection: Any, s: MinibatchSettings
    ) -> MinibatchResult:
        """Run :func:`fit_minibatch` here or on ``scheduler``; set the shared fitted
        attributes."""
        kernel = initial_kernel(self, X.shape[1], _check_kernel)
        Z = self._initial_inducing(X, int(self.n_inducing), s.seed)
        check_inducing_kernel(kernel, Z)
        if self.scheduler is None:
            res = fit_minibatch(kernel, Z, target, X.shape[0], projection, LocalRunner(X, y), s)
        else:
            from qpinfer.inference.sparse.dask_partitions import client_for

            with client_for(self.scheduler) as client:
                part = -(-s.batch_size // s.batch_parts)
                runner = DaskRunner(client, X, y, part)
                res = fit_minibatch(kernel, Z, target, X.shape[0], projection, runner, s)
        self.n_features_in_ = X.shape[1]
        self.kernel_ = sklearn_face(res.kernel)  # scikit-learn's face of the default kernel
        self.inducing_points_ = res.Z
        self.projection_ = projection
        self.result_ = res
        self.n_epochs_ = res.epochs
        self.best_epoch_ = res.best_epoch
        self.energy_ = res.energy
        self.validation_ntll_ = res.validation_ntll
        self.n_train_ = res.n_train
        return res

    # -- latent predictions ---------------------------------------------------------------------
    def predict_latent(self, X: Any) -> tuple[Any, Any]:
        """Mean and variance of the latent ``f*`` (Bui et al., 2017, eq. (18)) under the fitted
        posterior; for a dask ``X``, two lazy dask arrays computed block by block.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Input points (a dask array gives a lazy result, computed block by block).

        Returns
        -------
        mean, var : ndarray or dask array of shape (n_samples,)
            The latent function's predictive mean and variance.
        """
        if is_dask_array(X):
            both = self._blockwise(lambda b: np.column_stack(self._predict_latent(b)), X, 2)
            return both[:, 0], both[:, 1]
        return self._predict_latent(X)

    def _blockwise(self, method, X: Any, n_columns: int | None, dtype: Any = np.float64) -> Any:
        """``method`` on each row block of a dask ``X`` (its columns in one chunk): a dask array
        of one (``n_columns=None``) or ``n_columns`` columns, computed where dask runs it."""
        self._check_is_fitted()
        Xc = X.rechunk({1: -1})
        if n_columns is None:
            return Xc.map_blocks(method, drop_axis=1, dtype=dtype)
        return Xc.map_blocks(method, chunks=(Xc.chunks[0], (n_columns,)), dtype=dtype)

    def _lazy_pair(self, method, X: Any) -> tuple[Any, Any]:
        """A ``method`` returning two vectors, on a dask ``X``: two lazy vectors."""
        both = self._blockwise(lambda b: np.column_stack(method(b)), X, 2)
        return both[:, 0], both[:, 1]

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


def check_known_chunks(a: Any, name: str) -> None:
    """``ValueError`` for a dask array whose row chunks have unknown (``nan``) sizes."""
    if not is_dask_array(a) or not any(math.isnan(c) for c in a.chunks[0]):
        return
    raise ValueError(
        f"{name} is a dask array whose chunk sizes are unknown ({name}.chunks[0] holds nan, "
        "e.g. a dask DataFrame's .values or a boolean mask); the batches are row slices and "
        "need them: build it with df.to_dask_array(lengths=True) or call "
        f"{name}.compute_chunk_sizes() (each reads the data once) before fit"
    )
