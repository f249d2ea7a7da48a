"""Any scikit-learn kernel as a :class:`qpinfer.kernels.protocol.Kernel` (an adapter, no import).

:class:`SklearnKernel` wraps an ``sklearn.gaussian_process.kernels.Kernel`` -- RBF, Matern,
RationalQuadratic, ExpSineSquared, DotProduct, ConstantKernel, WhiteKernel, their sums,
products and exponentiations -- and gives inference the protocol's members from scikit-learn's
own: ``theta`` and ``bounds`` are scikit-learn's (already log space; hyperparameters with
``bounds="fixed"`` are not in them, so they stay fixed), ``with_theta`` is ``clone_with_theta``
and ``gradient_contract`` contracts the ``N x N x P`` array of ``kernel(X, eval_gradient=True)``.

Everything else is the wrapped kernel's: the adapter reads and sets attributes on it
(``kernel_.k1``, ``kernel_.get_params()``, ``kernel_.length_scale``), shows its ``repr``,
compares equal to it and combines with ``+``, ``*`` and ``**`` into scikit-learn kernels; so a
fitted ``kernel_`` behaves like the scikit-learn kernel a user passed. It is not an instance of
scikit-learn's ``Kernel`` class: ``kernel_.wrapped`` is the scikit-learn object itself (for
``isinstance`` or to put it right of a scikit-learn kernel in ``k + kernel_.wrapped``), and
``sklearn.base.clone(kernel_)`` returns a copy of it.

:func:`as_kernel` is how the estimators read their ``kernel`` argument: protocol objects pass
through, scikit-learn kernels are wrapped (recognised by duck typing, so this module never
imports scikit-learn and ``import qpinfer`` stays light), anything else is a ``ValueError``
naming what is missing.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

__all__ = ["PROTOCOL_MEMBERS", "SKLEARN_MEMBERS", "SklearnFace", "SklearnKernel", "as_kernel"]

#: what a :class:`qpinfer.kernels.protocol.Kernel` must have (``__call__`` aside)
PROTOCOL_MEMBERS = ("theta", "bounds", "with_theta", "gradient_contract", "diag")
#: what identifies a scikit-learn kernel (``sklearn.gaussian_process.kernels.Kernel``)
SKLEARN_MEMBERS = ("clone_with_theta", "hyperparameters", "theta", "bounds", "diag")


def _missing(obj: Any, members: tuple[str, ...]) -> list[str]:
    return [m for m in members if not hasattr(obj, m)]


def _unwrap(obj: Any) -> Any:
    """The scikit-learn kernel inside an adapter (any :class:`SklearnFace`), anything else as it
    is."""
    return obj.wrapped if isinstance(obj, SklearnFace) else obj


class SklearnFace:
    """What an object that presents the scikit-learn kernel ``wrapped`` shares with it: unknown
    attributes, ``repr``, ``==``, the kernel algebra (``+``, ``*``, ``**``: scikit-learn kernels)
    and ``sklearn.base.clone`` (an exact copy of ``wrapped``) are the wrapped kernel's. Used by
    :class:`SklearnKernel` and :class:`qpinfer.kernels.sklearn_se.SklearnFacedSE`."""

    wrapped: Any

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "wrapped":
            raise AttributeError(name)  # copy/pickle probe dunders before wrapped exists
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return repr(self.wrapped)

    def __eq__(self, other: object) -> bool:
        return bool(self.wrapped == _unwrap(other))

    __hash__ = None  # type: ignore[assignment]  # as scikit-learn's kernels (mutable, __eq__)

    def __add__(self, other: Any) -> Any:
        return self.wrapped + _unwrap(other)

    def __radd__(self, other: Any) -> Any:
        return _unwrap(other) + self.wrapped

    def __mul__(self, other: Any) -> Any:
        return self.wrapped * _unwrap(other)

    def __rmul__(self, other: Any) -> Any:
        return _unwrap(other) * self.wrapped

    def __pow__(self, exponent: Any) -> Any:
        return self.wrapped**exponent

    def __sklearn_clone__(self) -> Any:
        """``sklearn.base.clone`` of the adapter: a copy of the scikit-learn kernel (exact, no
        round trip through ``theta``'s logarithms)."""
        return copy.deepcopy(self.wrapped)


class SklearnKernel(SklearnFace):
    """A scikit-learn kernel with the members of :class:`qpinfer.kernels.protocol.Kernel`.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        Any scikit-learn GP kernel instance; kept (not copied) as ``wrapped``.

    Attributes
    ----------
    wrapped : sklearn.gaussian_process.kernels.Kernel
        The scikit-learn kernel. Attributes the adapter does not define are read from and
        written to it (see the module docstring).
    """

    def __init__(self, kernel: Any) -> None:
        if isinstance(kernel, type):
            raise ValueError(
                f"kernel must be a kernel instance, got the class {kernel.__name__}; "
                f"pass {kernel.__name__}() instead"
            )
        missing = _missing(kernel, SKLEARN_MEMBERS)
        if missing:
            raise ValueError(
                f"kernel must be a scikit-learn kernel; {type(kernel).__name__} lacks "
                + ", ".join(repr(m) for m in missing)
            )
        object.__setattr__(self, "wrapped", _unwrap(kernel))

    # -- protocol ---------------------------------------------------------------------------
    @property
    def theta(self) -> np.ndarray:
        """scikit-learn's ``theta``: the log of the non-fixed hyperparameters."""
        return np.asarray(self.wrapped.theta, dtype=np.float64)

    @theta.setter
    def theta(self, theta: np.ndarray) -> None:
        self.wrapped.theta = theta

    @property
    def bounds(self) -> np.ndarray:
        """scikit-learn's ``bounds`` (log space) as an ``(n_params, 2)`` array."""
        return np.asarray(self.wrapped.bounds, dtype=np.float64).reshape(-1, 2)

    @property
    def hyperparameter_names(self) -> list[str]:
        """scikit-learn's names of the entries of ``theta``: ``k1__constant_value``; a vector
        hyperparameter one name per entry, ``k2__length_scale[1]``; fixed ones left out."""
        names: list[str] = []
        for hp in self.wrapped.hyperparameters:
            if hp.fixed:
                continue
            if hp.n_elements == 1:
                names.append(hp.name)
            else:
                names.extend(f"{hp.name}[{i}]" for i in range(hp.n_elements))
        n = self.theta.size
        return names if len(names) == n else [f"theta[{i}]" for i in range(n)]

    def with_theta(self, theta: np.ndarray) -> SklearnKernel:
        """A copy with log hyperparameters ``theta`` (scikit-learn's ``clone_with_theta``)."""
        theta = np.asarray(theta, dtype=np.float64)
        n = self.theta.size
        if theta.shape != (n,):
            raise ValueError(f"theta must have shape ({n},), got {theta.shape}")
        return SklearnKernel(self.wrapped.clone_with_theta(theta))

    def __call__(
        self, X: np.ndarray, Z: np.ndarray | None = None, eval_gradient: bool = False
    ) -> Any:
        """``K(X, Z)`` (``K(X, X)`` for ``Z=None``); with ``eval_gradient`` (``Z=None`` only)
        also scikit-learn's ``dK/dtheta``, as its kernels return them."""
        if eval_gradient:
            return self.wrapped(X, Z, eval_gradient=True)
        K = self.wrapped(X) if Z is None else self.wrapped(X, Z)
        return np.asarray(K, dtype=np.float64)

    def diag(self, X: np.ndarray) -> np.ndarray:
        """``diag(K(X, X))`` (scikit-learn's ``diag``)."""
        return np.asarray(self.wrapped.diag(X), dtype=np.float64)

    def gradient_contract(
        self, X: np.ndarray, W: np.ndarray, K: np.ndarray | None = None
    ) -> np.ndarray:
        """``g_j = sum_ab W_ab dK_ab / dtheta_j`` (theta in log space).

        From ``kernel(X, eval_gradient=True)``, which returns ``K`` with the ``N x N x P``
        array of derivatives (scikit-learn has no cheaper contraction): O(N^2 P) memory, one
        kernel evaluation. ``K`` is accepted for the protocol and not used (scikit-learn
        computes it with the derivatives anyway).
        """
        _, dK = self.wrapped(X, eval_gradient=True)
        W = np.asarray(W, dtype=np.float64)
        if dK.shape[:2] != W.shape:
            raise ValueError(f"W must have shape {dK.shape[:2]}, got {W.shape}")
        if dK.shape[2] == 0:
            return np.zeros(0)
        return np.tensordot(W, dK, axes=([0, 1], [0, 1]))

    # -- the wrapped kernel's face ------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if name == "theta":
            object.__setattr__(self, name, value)  # the property's setter
        else:
            setattr(self.wrapped, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.wrapped)))

    def __getstate__(self) -> dict[str, Any]:
        return {"wrapped": self.wrapped}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "wrapped", state["wrapped"])


def as_kernel(obj: Any, name: str = "kernel") -> Any:
    """``obj`` as a :class:`qpinfer.kernels.protocol.Kernel`.

    A protocol object (it has ``theta``, ``bounds``, ``with_theta``, ``gradient_contract`` and
    ``diag``, e.g. :class:`~qpinfer.kernels.se.ARDSquaredExponential` or a
    :class:`SklearnKernel`) is returned as it is; a scikit-learn kernel (``clone_with_theta``
    and ``hyperparameters``, recognised without importing scikit-learn) is wrapped in a
    :class:`SklearnKernel`; anything else is a one-line ``ValueError`` naming ``name`` and what
    the object lacks.
    """
    if isinstance(obj, type):
        raise ValueError(
            f"{name} must be a kernel instance, got the class {obj.__name__}; "
            f"pass {obj.__name__}(...) instead"
        )
    if not _missing(obj, PROTOCOL_MEMBERS) and callable(obj):
        return obj
    if not _missing(obj, SKLEARN_MEMBERS) and callable(obj):
        return SklearnKernel(obj)
    missing = _missing(obj, PROTOCOL_MEMBERS) or ["__call__"]
    missing_sk = _missing(obj, SKLEARN_MEMBERS) or ["__call__"]
    raise ValueError(
        f"{name} must be a scikit-learn kernel (sklearn.gaussian_process.kernels) or implement "
        f"the qpinfer.kernels.Kernel protocol; got {type(obj).__name__}, which lacks "
        f"{', '.join(repr(m) for m in missing_sk)} (scikit-learn) and "
        f"{', '.join(repr(m) for m in missing)} (qpinfer)"
    )
