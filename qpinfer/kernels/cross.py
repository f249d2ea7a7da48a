"""Contracted derivatives of scikit-learn kernels' cross-covariances K(X, Z), for pseudo-points.

The sparse estimators (:mod:`qpinfer.inference.sparse.pseudo_points`) need, for a weight matrix
``W`` (N x M), the contractions ``sum_ab W_ab dK(X, Z)_ab`` with respect to the log
hyperparameters **and** to the inducing inputs ``Z``, plus ``sum_n g_n d k(x_n, x_n)``
(the diagonal ``diag K(X, X)``). scikit-learn's ``eval_gradient=True`` gives neither for a
cross-covariance (only ``dK(X, X)/dtheta``, as an N x N x P array), so they are written out here
for its kernels, recursively over the kernel algebra:

* ``RBF`` (isotropic or one length scale per feature), ``Matern`` with ``nu`` in
  {0.5, 1.5, 2.5, inf} and ``RationalQuadratic``: functions of the scaled squared distance
  ``r2 = sum_d (x_d - z_d)^2 / l_d^2``; with ``P = W * dk/dr2`` the length-scale term is
  ``-2 sum_ab P_ab (x_ad - z_bd)^2 / l_d^2`` (``-2 (rowsum(P) . xs_d^2 + colsum(P) . zs_d^2 -
  2 xs_d^T P zs_d)``, O(N M D) in GEMMs) and the inducing-input term
  ``-2 (P^T xs - colsum(P) zs) / l`` (``xs = x / l``);
* ``ExpSineSquared``: a function of the Euclidean distance, the same form with ``l = 1``;
* ``DotProduct`` (``sigma_0^2 + x . z``) and ``ConstantKernel``;
* ``Sum``; ``Product`` by the product rule (``k1`` contracted with ``W * K2``, ``k2`` with
  ``W * K1``); ``Exponentiation`` by the chain rule (``W * e K^(e-1)``).

Theta is in scikit-learn's order (``kernel.theta``: each kernel's hyperparameters sorted by name,
e.g. ``RationalQuadratic``'s ``[log alpha, log length_scale]``; ``k1`` before ``k2``) with the
``"fixed"`` ones left out. Memory: a few N x M arrays per node of the kernel, never an
N x M x P array. ``Matern(nu=0.5)`` is not differentiable at ``x = z``; there its derivative in
``z`` is taken as 0 (the mean of the one-sided ones).

``WhiteKernel`` is refused: ``K(X, Z)`` is 0 but ``K(X, X)`` has the noise on its diagonal, so the
pseudo-point prior ``diag(Kff - Qff)`` would carry the noise as if it were signal. Any other
kernel (``PairwiseKernel``, ``CompoundKernel``, a subclass, ...) is refused with one line listing
the supported ones. Kernels are recognised by their class (its name in scikit-learn's kernels
module), so scikit-learn is never imported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

__all__ = ["SUPPORTED", "check_cross_kernel", "cross_contract", "diag_contract"]

#: what the refusal lists (the Matern orders are those with a closed form)
SUPPORTED = (
    "RBF, Matern (nu in 0.5, 1.5, 2.5, inf), RationalQuadratic, ExpSineSquared, DotProduct, "
    "ConstantKernel and their sums, products and powers (Exponentiation)"
)

_MATERN_NU = (0.5, 1.5, 2.5, np.inf)
_LEAVES = ("RBF", "RationalQuadratic", "ExpSineSquared", "DotProduct", "ConstantKernel")


_SKLEARN_MODULE = "sklearn.gaussian_process.kernels"


def _kind(k: Any) -> str | None:
    """The class name of a kernel of scikit-learn's kernels module (its exact class: a subclass
    defined elsewhere may compute something else), else ``None``. Read from the class, so
    scikit-learn is never imported here."""
    t = type(k)
    return t.__qualname__ if t.__module__ == _SKLEARN_MODULE else None


def _refusal(kernel: Any, part: Any, why: str = "") -> ValueError:
    name = type(part).__name__
    if name == "Matern":
        name = f"Matern(nu={part.nu})"
    whole = "" if part is kernel else f" in {kernel!r}"
    return ValueError(
        f"kernel: the sparse (pseudo-point) estimators take qpinfer.kernels.ARDSquaredExponential "
        f"or scikit-learn's {SUPPORTED}; got {name}{whole}{why}"
    )


def check_cross_kernel(kernel: Any) -> None:
    """``ValueError`` (one line, naming ``kernel`` and listing ``SUPPORTED``) unless
    ``kernel`` is a scikit-learn kernel built only of the supported ones."""
    _check(kernel, kernel)


def _check(root: Any, k: Any) -> None:
    t = _kind(k)
    if t in ("Sum", "Product"):
        _check(root, k.k1)
        _check(root, k.k2)
    elif t == "Exponentiation":
        _check(root, k.kernel)
    elif t == "WhiteKernel":
        raise _refusal(
            root,
            k,
            " (its noise is on K(X, X) only, K(X, Z) = 0: the pseudo-point prior would count it "
            "as signal; SparseGPRegressor fits the noise as noise_variance)",
        )
    elif t == "Matern":
        if float(k.nu) not in _MATERN_NU:
            raise _refusal(root, k, " (no closed form for the derivatives)")
    elif t in _LEAVES:
        if t == "RationalQuadratic" and np.iterable(k.length_scale):
            raise _refusal(root, k, " (scikit-learn's RationalQuadratic is isotropic)")
    else:
        raise _refusal(root, k)


def _free(k: Any, grads: dict[str, Any]) -> np.ndarray:
    """The contractions of a leaf kernel in its ``theta`` order (sorted names, fixed left out)."""
    parts = [np.atleast_1d(grads[h.name]) for h in k.hyperparameters if not h.fixed]
    return np.concatenate(parts) if parts else np.zeros(0)


def _is_fixed(k: Any, name: str) -> bool:
    return bool(getattr(k, f"hyperparameter_{name}").fixed)


def cross_contract(
    kernel: Any, X: np.ndarray, Z: np.ndarray, W: np.ndarray, K: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(g_theta, g_Z)``: ``sum_ab W_ab dK(X, Z)_ab`` in ``kernel.theta`` and in ``Z``.

    Parameters
    ----------
    kernel:
        A scikit-learn kernel of the supported kinds
        (:func:`qpinfer.kernels.cross.check_cross_kernel`).
    X, Z:
        ``(N, D)`` and ``(M, D)`` inputs.
    W:
        ``(N, M)`` weights (not modified).
    K:
        ``kernel(X, Z)`` if the caller has it.

    Returns
    -------
    g_theta : ndarray of shape (kernel.theta.size,)
        Derivatives in the log hyperparameters, scikit-learn's order, fixed ones left out.
    g_Z : ndarray of shape (M, D)
        Derivatives in the second argument ``Z`` only (for ``K(Z, Z)`` with a symmetric ``W``,
        the total derivative in ``Z`` is twice this).
    """
    check_cross_kernel(kernel)
    X = np.asarray(X, dtype=np.float64)
    Z = np.asarray(Z, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    if X.ndim != 2 or Z.ndim != 2 or X.shape[1] != Z.shape[1]:
        raise ValueError(f"X and Z must be 2-d with as many columns, got {X.shape}, {Z.shape}")
    if W.shape != (X.shape[0], Z.shape[0]):
        raise ValueError(f"W must have shape {(X.shape[0], Z.shape[0])}, got {W.shape}")
    return _contract(kernel, X, Z, W, K)


def _contract(k, X, Z, W, K):
    t = _kind(k)
    if t == "Sum":
        g1, z1 = _contract(k.k1, X, Z, W, None)
        g2, z2 = _contract(k.k2, X, Z, W, None)
        return np.concatenate([g1, g2]), z1 + z2
    if t == "Product":
        K1, K2 = _factor_values(k, X, Z, K)
        g1, z1 = _contract(k.k1, X, Z, W * K2, K1)
        g2, z2 = _contract(k.k2, X, Z, W * K1, K2)
        return np.concatenate([g1, g2]), z1 + z2
    if t == "Exponentiation":
        B = k.kernel(X, Z)
        e = float(k.exponent)
        return _contract(k.kernel, X, Z, W * (e * B ** (e - 1.0)), B)
    if t == "ConstantKernel":
        c = float(k.constant_value)
        return _free(k, {"constant_value": c * W.sum()}), np.zeros_like(Z)
    if t == "DotProduct":
        s2 = float(k.sigma_0) ** 2
        return _free(k, {"sigma_0": 2.0 * s2 * W.sum()}), W.T @ X
    if t == "ExpSineSquared":
        return _exp_sine(k, X, Z, W, K)
    return _distance_kernel(k, X, Z, W, K)


def _factor_values(k, X, Z, K):
    """``K1 = k1(X, Z)`` and ``K2 = k2(X, Z)`` of a product; a ``ConstantKernel`` factor's value
    is its constant (a scalar, no N x M array), and the other factor's is then ``K / c`` when
    the product's ``K`` is given."""
    values = []
    for f, other in ((k.k1, k.k2), (k.k2, k.k1)):
        if _kind(f) == "ConstantKernel":
            values.append(float(f.constant_value))
        elif _kind(other) == "ConstantKernel" and K is not None and other.constant_value > 0:
            values.append(K / float(other.constant_value))
        else:
            values.append(f(X, Z))
    return values


def _distance_terms(P, X, Z, ls, per_dim):
    """``sum_ab P_ab d r2_ab`` for ``r2 = |(x - z) / l|^2``: per log length scale (``per_dim``:
    one per feature, else their sum is left to the caller) and in ``Z``."""
    Xs, Zs = X / ls, Z / ls
    rs, cs = P.sum(axis=1), P.sum(axis=0)
    g_Z = -2.0 * (P.T @ Xs - cs[:, None] * Zs) / ls
    if not per_dim:
        return None, g_Z
    g_l = -2.0 * (rs @ (Xs * Xs) + cs @ (Zs * Zs) - 2.0 * np.einsum("ad,ad->d", Xs, P @ Zs))
    return g_l, g_Z


def _distance_kernel(k, X, Z, W, K):
    """RBF, Matern and RationalQuadratic: ``k = phi(r2)``, ``P = W * dphi/dr2``."""
    ls = np.asarray(k.length_scale, dtype=np.float64)
    ard = ls.ndim == 1 and ls.size > 1
    grads: dict[str, Any] = {}
    kind = _kind(k)
    nu = float(k.nu) if kind == "Matern" else np.inf
    rbf_with_K = kind != "RationalQuadratic" and nu == np.inf and K is not None
    r2 = None if rbf_with_K else cdist(X / ls, Z / ls, metric="sqeuclidean")
    if kind == "RationalQuadratic":
        a = float(k.alpha)
        base = 1.0 + r2 / (2.0 * a)
        if K is None:
            K = base**-a
        s = -0.5 * K / base
        if not _is_fixed(k, "alpha"):
            grads["alpha"] = np.sum(W * (a * K) * ((base - 1.0) / base - np.log(base)))
    elif nu == np.inf:  # RBF, or Matern(nu=inf) = RBF
        s = -0.5 * (np.exp(-0.5 * r2) if K is None else K)
    else:
        r = np.sqrt(r2)
        if nu == 0.5:  # exp(-r): dk/dr2 = -exp(-r) / (2 r), taken as 0 at r = 0
            with np.errstate(divide="ignore", invalid="ignore"):
                s = np.where(r > 0, -0.5 * np.exp(-r) / r, 0.0)
        elif nu == 1.5:  # (1 + sqrt3 r) exp(-sqrt3 r)
            s = -1.5 * np.exp(-np.sqrt(3.0) * r)
        else:  # 2.5: (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)
            s = -(5.0 / 6.0) * (1.0 + np.sqrt(5.0) * r) * np.exp(-np.sqrt(5.0) * r)
    P = np.multiply(W, s, out=s)
    free_ls = not _is_fixed(k, "length_scale")
    exact = r2 is not None and not ard  # one length scale: -2 sum P r2 (no expansion)
    g_l, g_Z = _distance_terms(P, X, Z, ls, per_dim=free_ls and not exact)
    if free_ls:
        grads["length_scale"] = -2.0 * np.sum(P * r2) if exact else (g_l if ard else g_l.sum())
    return _free(k, grads), g_Z


def _exp_sine(k, X, Z, W, K):
    """``k = exp(-2 sin^2(pi d / p) / l^2)``, ``d = |x - z|``."""
    ls, p = float(k.length_scale), float(k.periodicity)
    d = cdist(X, Z, metric="euclidean")
    arg = (np.pi / p) * d
    sin = np.sin(arg)
    if K is None:
        K = np.exp(-2.0 * (sin / ls) ** 2)
    WK = W * K
    grads: dict[str, Any] = {}
    if not _is_fixed(k, "length_scale"):
        grads["length_scale"] = 4.0 / ls**2 * np.sum(WK * sin * sin)
    if not _is_fixed(k, "periodicity"):
        grads["periodicity"] = 2.0 / ls**2 * np.sum(WK * np.sin(2.0 * arg) * arg)
    # dk/d(d^2) = -K (2 pi^2 / (p^2 l^2)) sinc(2 d / p): finite at d = 0
    P = WK * np.sinc(2.0 * d / p)
    P *= -2.0 * np.pi**2 / (p * p * ls * ls)
    _, g_Z = _distance_terms(P, X, Z, 1.0, per_dim=False)
    return _free(k, grads), g_Z


def diag_contract(
    kernel: Any, X: np.ndarray, g: np.ndarray, eval_input_gradient: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``sum_n g_n d k(x_n, x_n) / dtheta`` (scikit-learn's theta order, fixed left out).

    With ``eval_input_gradient`` also ``g_n d k(x_n, x_n) / dx_n`` as an ``(N, D)`` array
    (nonzero for ``DotProduct`` only: every other supported kernel's diagonal is constant).
    """
    check_cross_kernel(kernel)
    X = np.asarray(X, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    if X.ndim != 2 or g.shape != (X.shape[0],):
        raise ValueError(f"X must be 2-d and g of shape ({len(X)},), got {X.shape}, {g.shape}")
    _, g_theta, g_X = _diag(kernel, X, g)
    return (g_theta, g_X) if eval_input_gradient else g_theta


def _diag(k, X, g):
    """``(diag K(X, X), g . d diag / dtheta, g d diag / dX)``."""
    t = _kind(k)
    if t == "Sum":
        d1, g1, x1 = _diag(k.k1, X, g)
        d2, g2, x2 = _diag(k.k2, X, g)
        return d1 + d2, np.concatenate([g1, g2]), x1 + x2
    if t == "Product":
        d1, d2 = k.k1.diag(X), k.k2.diag(X)
        _, g1, x1 = _diag(k.k1, X, g * d2)
        _, g2, x2 = _diag(k.k2, X, g * d1)
        return d1 * d2, np.concatenate([g1, g2]), x1 + x2
    if t == "Exponentiation":
        b = k.kernel.diag(X)
        e = float(k.exponent)
        _, gb, xb = _diag(k.kernel, X, g * (e * b ** (e - 1.0)))
        return b**e, gb, xb
    if t == "ConstantKernel":
        c = float(k.constant_value)
        return np.full(X.shape[0], c), _free(k, {"constant_value": c * g.sum()}), np.zeros_like(X)
    if t == "DotProduct":
        s2 = float(k.sigma_0) ** 2
        diag = s2 + np.einsum("nd,nd->n", X, X)
        return diag, _free(k, {"sigma_0": 2.0 * s2 * g.sum()}), 2.0 * g[:, None] * X
    # stationary kernels: k(x, x) = 1 whatever the hyperparameters
    return np.ones(X.shape[0]), np.zeros(k.n_dims), np.zeros_like(X)
