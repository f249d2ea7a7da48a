"""BLAS threads inside the estimators' ``fit`` and predictions: one thread where threading is slower.

Dense EP factorises an N x N matrix per sweep, and the sparse fits work on N x M blocks. On the
problem sizes GP users fit, BLAS's own threads cost more than they gain -- and on a machine
shared with other work far more (the threads spin for cores that are taken). Measured on the
project's 2-core machine while other jobs ran (load 2-5; best of 3, or 2, interleaved; 10
features; ``blas_threads=1`` against OpenBLAS's default of 2 threads):

====================================================  =======  ========  ==========
fit                                                   N        1 thread  2 threads
====================================================  =======  ========  ==========
EP, fixed hyperparameters (``optimizer=None``)        100      0.011 s   0.18 s
EP, fixed hyperparameters                             400      0.28 s    1.45 s
EP, fixed hyperparameters                             1000     2.6 s     8.2 s
EP, fixed hyperparameters                             2000     9.7 s     13.7 s
EP with L-BFGS-B (15 iterations)                      100      0.15 s    0.14 s
EP with L-BFGS-B (15 iterations)                      400      2.0 s     2.6 s
SparseGPClassifier, M = 50, L-BFGS-B (15 iterations)  2000     0.34 s    4.4 s
SparseGPClassifier, M = 50, L-BFGS-B (15 iterations)  10000    1.2 s     2.8 s
====================================================  =======  ========  ==========

(idle, EP on breast cancer's 398 rows: 1.24 s against 1.66 s). Threads won nowhere
beyond the noise; their loss shrinks with N. So by default (``blas_threads=None``) BLAS runs on one thread inside
``fit`` and the predictions of a problem of at most :data:`AUTO_MAX_ROWS` rows (training rows,
or prediction rows if more; dense fits above 5000 rows warn anyway,
:class:`~qpinfer.checks.LargeDenseFitWarning`), through threadpoolctl -- unless the user chose:

* an environment variable of :data:`ENV_VARS` is set (``OPENBLAS_NUM_THREADS=4 python ...``);
* the BLAS libraries' thread counts differ from those recorded when qpinfer was imported (the
  user's own ``threadpoolctl.threadpool_limits``, as a context or a call);
* the estimator's ``blas_threads`` is an integer: BLAS runs with that many threads, always.

Without threadpoolctl installed, the automatic rule does nothing and an integer
``blas_threads`` raises ``ImportError``. threadpoolctl is imported here, at qpinfer's import
(about 2 ms beyond what qpinfer imports anyway, plus ~6 ms for reading the loaded BLAS
libraries' thread counts once).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import scipy.linalg  # noqa: F401 -- loads scipy's own BLAS before the snapshot below

__all__ = [
    "AUTO_MAX_ROWS",
    "ENV_VARS",
    "blas_limits",
    "check_blas_threads",
    "limits_blas",
    "user_chose_threads",
]

#: the automatic rule limits BLAS to one thread for problems of at most this many rows
AUTO_MAX_ROWS = 10_000
#: environment variables that set a BLAS/OpenMP library's thread count (the user's choice)
ENV_VARS = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "GOTO_NUM_THREADS",
)


def _blas_threads_now() -> dict[str, int] | None:
    """The loaded BLAS libraries' thread counts by file path (``None`` without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return {
        info["filepath"]: int(info["num_threads"])
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    }


#: the BLAS thread counts when qpinfer was imported (the defaults the automatic rule compares to)
_AT_IMPORT = _blas_threads_now()


def check_blas_threads(blas_threads: Any) -> int | None:
    """``blas_threads`` as ``None`` or a positive ``int``; ``ValueError`` naming it otherwise."""
    if blas_threads is None:
        return None
    is_int = isinstance(blas_threads, int | np.integer) and not isinstance(blas_threads, bool)
    if not (is_int and blas_threads >= 1):
        raise ValueError(
            "blas_threads must be None (automatic: one thread for problems of at most "
            f"{AUTO_MAX_ROWS} rows) or a positive integer, got {blas_threads!r}"
        )
    return int(blas_threads)


def user_chose_threads() -> bool:
    """Whether the user set BLAS's threads: an environment variable of :data:`ENV_VARS`, or
    thread counts other than at qpinfer's import (their ``threadpool_limits``, ours included
    while one of our fits runs). ``True`` without threadpoolctl (nothing to change then)."""
    if any(os.environ.get(name, "").strip() for name in ENV_VARS):
        return True
    now = _blas_threads_now()
    if now is None or _AT_IMPORT is None:
        return True
    return any(_AT_IMPORT.get(path, n) != n for path, n in now.items())


def blas_limits(blas_threads: Any, n_rows: int) -> AbstractContextManager:
    """The context a fit or prediction of ``n_rows`` rows runs in: BLAS limited to
    ``blas_threads`` threads if that is an int; for ``None`` to one thread when ``n_rows <=``
    :data:`AUTO_MAX_ROWS` and not :func:`user_chose_threads`; else nothing changes."""
    threads = check_blas_threads(blas_threads)
    if threads is None:
        if n_rows > AUTO_MAX_ROWS or user_chose_threads():
            return nullcontext()
        threads = 1
    try:
        from threadpoolctl import threadpool_limits
    except ImportError as exc:
        raise ImportError(
            f"blas_threads={threads} needs threadpoolctl: pip install 'threadpoolctl>=3'"
        ) from exc
    return threadpool_limits(limits=threads, user_api="blas")


def _rows(X: Any) -> int:
    """The number of rows of ``X`` (0 if it has none; the method checks ``X`` itself)."""
    try:
        return int(np.shape(X)[0]) if np.ndim(X) else 0
    except (TypeError, ValueError, IndexError):
        return 0


def limits_blas(method: Callable) -> Callable:
    """Decorate an estimator's ``fit(X, ...)`` or prediction ``(X, ...)``: run it within
    :func:`blas_limits` of the estimator's ``blas_threads`` for ``max(rows of X, training
    rows)`` (a prediction's; ``X_train_``'s rows, if the estimator keeps them), or for the rows
    its products actually take at once where it says so (``_blas_block_rows(n)``: a minibatch
    fit works on one batch at a time, whatever N)."""
    predicts = method.__name__ != "fit"

    @functools.wraps(method)
    def wrapper(self: Any, X: Any, *args: Any, **kwargs: Any) -> Any:
        train = getattr(self, "X_train_", None) if predicts else None
        n = max(_rows(X), _rows(train) if train is not None else 0)
        n = self._blas_block_rows(n) if hasattr(self, "_blas_block_rows") else n
        with blas_limits(getattr(self, "blas_threads", None), n):
            return method(self, X, *args, **kwargs)

    return wrapper
