"""Reading what users pass: feature matrices (:func:`~qpinfer.checks.check_X`), scalar parameters
(``alpha``, ``c``, ``eps``, ...; one rule for what counts as a number, so that every check names its
argument the same way), target vectors (scikit-learn's conventions and messages), feature scales
whose squared distances overflow, and data too large for a dense GP fit (a warning before the heavy
work)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = [
    "DENSE_WARN_N",
    "DataConversionWarning",
    "LargeDenseFitWarning",
    "check_squared_distances",
    "warn_large_dense_fit",
    "check_X",
    "check_counts",
    "check_positive_int",
    "check_target_vector",
    "finite_array",
    "number_or_nan",
]


class DataConversionWarning(UserWarning):
    """Input data was converted (same name and message as scikit-learn's)."""


def number_or_nan(value: Any) -> float:
    """``float(value)`` for a real number (not a bool or a string), else NaN -- which fails every
    range test, so the caller's ``ValueError`` names the argument and the range."""
    if isinstance(value, bool | str):
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def check_target_vector(
    y: Any, n_samples: int | None, estimator: str, name: str, numeric: bool = True
) -> np.ndarray:
    """``y`` as a 1-d array of ``n_samples`` values (``None``: any length; a column vector is
    raveled with a :class:`DataConversionWarning`), float64 if ``numeric`` (else as given, e.g.
    class labels), its values not yet checked; ``ValueError`` with scikit-learn's messages
    (None, complex, non-numeric, not 1-d, length)."""
    if y is None:
        what = "y" if name == "y" else f"{name} (y)"
        raise ValueError(f"{estimator} requires {what} to be passed, but the target y is None")
    arr = np.asarray(y)
    if np.iscomplexobj(arr):
        raise ValueError(f"{name}: complex data not supported")
    if numeric and (arr.dtype == object or arr.dtype.kind not in "biuf"):
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be numeric; got dtype {arr.dtype}") from None
    if n_samples is not None:
        if arr.ndim == 2 and arr.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change the "
                "shape of y to (n_samples, ), for example using ravel().",
                DataConversionWarning,
                stacklevel=4,
            )
            arr = arr.ravel()
        if arr.ndim != 1:
            raise ValueError(f"{name} should be a 1d array, got an array of shape {arr.shape}")
        if arr.shape[0] != n_samples:
            raise ValueError(
                f"X and {name} have inconsistent numbers of samples: X has {n_samples}, "
                f"{name} has {arr.shape[0]}"
            )
    return arr.astype(np.float64) if numeric else arr


def finite_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 array; ``ValueError`` naming ``name`` unless real and finite."""
    if np.iscomplexobj(value):
        raise ValueError(f"{name} must be real; got a complex value {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be real numbers; got {value!r}") from None
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} must be finite; got {arr[bad].flat[0]!r}")
    return arr


def check_counts(
    y: Any, likelihood: str, max_count: float, max_text: str, why: str = ""
) -> np.ndarray:
    """Observations of a count likelihood as float64: finite integers in 0..``max_count``, else
    ``ValueError`` naming ``y``, the likelihood and the range (``why``: a note on the range)."""
    y = np.asarray(y)
    yf = finite_array("y", y)
    bad = (yf < 0) | (yf != np.floor(yf))
    if bad.any():
        raise ValueError(
            f"y must be a non-negative integer count for {likelihood}; got {y[bad].flat[0]!r}"
        )
    bad = yf > max_count
    if bad.any():
        raise ValueError(
            f"y must be a count in 0..{max_text} for {likelihood}{why}; got {yf[bad].flat[0]!r}"
        )
    return yf


def check_squared_distances(X: np.ndarray, name: str) -> None:
    """``ValueError`` if squared differences of ``X``'s rows overflow float64 (a feature spanning
    more than ~1.3e154): every kernel of squared distances is then inf/NaN (before: "inference
    failed at every hyperparameter value tried" with no cause)."""
    with np.errstate(over="ignore", invalid="ignore"):
        span = X.max(axis=0) - X.min(axis=0)
        total = np.sum(span * span)
    if np.isfinite(total):
        return
    j = int(np.argmax(np.where(np.isfinite(span), span, np.inf)))
    raise ValueError(
        f"Input {name}: feature {j} spans {span[j]:.3g}; squared differences of the features sum "
        f"to more than float64 holds ({np.finfo(np.float64).max:.3g}: overflow), so no kernel "
        "of squared distances can be evaluated. Rescale the features (e.g. standardise them)."
    )


def check_X(
    X: Any, name: str = "X", estimator: str = "this estimator", *, vector: bool = True
) -> np.ndarray:
    """A finite 2-d float64 array with at least one row and one column, or ``ValueError``.

    ``vector=False`` (a kernel on other inputs, scikit-learn's ``requires_vector_input =
    False``): any sequence of at least one sample, as an array of the samples
    (:func:`check_samples`)."""
    if X is None:
        raise ValueError(f"{name} is None; expected a 2-d array of shape (n_samples, n_features)")
    if not vector:
        return check_samples(X, name)
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise TypeError(
            f"{name}: sparse input is not supported by {estimator}; convert it with "
            f"{name}.toarray()"
        )
    arr = np.asarray(X)
    if np.iscomplexobj(arr):
        raise ValueError("Complex data not supported")
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"Expected 2D array for {name}, got {arr.ndim}D array of shape {arr.shape} instead. "
            "Reshape your data with array.reshape(-1, 1) for a single feature or "
            "array.reshape(1, -1) for a single sample."
        )
    if arr.shape[0] < 1:
        raise ValueError(
            f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required "
            f"({name})."
        )
    if arr.shape[1] < 1:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required "
            f"({name})."
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"Input {name} contains NaN or infinity.")
    check_squared_distances(arr, name)
    return arr


def check_samples(X: Any, name: str = "X") -> np.ndarray:
    """The samples of ``X`` for a kernel on non-vector inputs (strings, graphs, ...), as
    scikit-learn's ``check_array(X, ensure_2d=False, dtype=None)``: ``numpy.asarray(X)``, or a
    1-d object array of its items where they do not form a regular array; ``ValueError``
    unless ``X`` is a sequence of at least one sample."""
    if isinstance(X, str | bytes) or not hasattr(X, "__len__"):
        raise ValueError(f"{name} must be a sequence of samples, got {type(X).__name__}")
    try:
        arr = np.asarray(X)
    except ValueError:  # ragged: one object per sample
        arr = np.empty(len(X), dtype=object)
        arr[:] = list(X)
    if arr.ndim == 0 or arr.shape[0] < 1:
        raise ValueError(
            f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required "
            f"({name})."
        )
    return arr


def check_positive_int(value: Any, name: str) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is an integer >= 1 (not a bool)."""
    if isinstance(value, bool) or not (isinstance(value, int | np.integer) and value >= 1):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class LargeDenseFitWarning(UserWarning):
    """A dense (full-GP) fit on so many rows that its N x N matrices and O(N^3) work are large."""


#: above this many rows a dense fit warns (:class:`LargeDenseFitWarning`) before its heavy work
DENSE_WARN_N = 5000
#: N x N float64 matrices a dense fit holds at once (K, the posterior's factor, a work array)
_DENSE_MATRICES = 3


def warn_large_dense_fit(estimator: str, n: int, sparse: str | None, stacklevel: int = 4) -> None:
    """:class:`LargeDenseFitWarning` for a dense fit on ``n > DENSE_WARN_N`` rows: the memory
    of its N x N matrices (8 N^2 bytes each), its O(N^3) cost per sweep or evaluation, and
    the pseudo-point estimator ``sparse`` to use instead (if any)."""
    if n <= DENSE_WARN_N:
        return
    gb = 8.0 * n * n / 1e9
    flops = float(n) ** 3
    alternative = (
        f"use {sparse} (pseudo-points: O(N M^2) per sweep)"
        if sparse
        else "this likelihood has no pseudo-point estimator; fit a subsample"
    )
    warnings.warn(
        f"{estimator}: a dense GP fit on N={n} rows (above {DENSE_WARN_N}) holds N x N "
        f"matrices of {gb:.2g} GB each (~{_DENSE_MATRICES * gb:.2g} GB in all) and costs O(N^3) "
        f"~ {flops:.2g} flops per sweep and per hyperparameter evaluation (~{flops / 1e10:.0f} s "
        f"each at 1e10 flop/s); {alternative}",
        LargeDenseFitWarning,
        stacklevel=stacklevel,
    )
