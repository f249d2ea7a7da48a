"""The Laplace approximation for GP models with factorised likelihoods (baseline to EP/QP).

Mode finding is Newton's method of Rasmussen & Williams (2006, "R&W") Algorithm 3.1, in the
``a``-parameterisation ``f = K a`` (so ``Psi(f) = log p(y|f) - a^T f / 2`` needs no ``K^-1``),
with a backtracking line search along the Newton step; predictions are R&W Alg. 3.2 (they share
:func:`qpinfer.inference.dense_posterior.predict_latent` through the same
:class:`qpinfer.inference.dense_posterior.Posterior`, with site precisions ``W = -d^2 log p / df^2``
and weights ``b = grad log p(f^)``); the approximate log marginal likelihood is R&W eq. (3.32),
``-a^T f / 2 + log p(y|f) - sum log diag L``, and its gradient in the kernel hyperparameters R&W
Alg. 5.1 (eq. (5.23)), including the implicit dependence through the mode (the third derivative of
log p).

The square link is not log-concave (Zhang et al., 2020, App. C.2)
------------------------------------------------------------------
For Poisson counts with rate f^2, ``log p(y|f) = 2 y log|f| - f^2 - log y!``. For ``y >= 1`` it is
``-inf`` at ``f = 0`` and the posterior is invariant under ``f -> -f`` (it has a mirror-image
mode for every mode). On each half-line, however, log p is strictly concave
(``W = 2y/f^2 + 2 >= 2``). What this module's Laplace approximation does:

* it approximates the posterior around the mode of the **positive branch**: the maximiser of
  ``Psi`` over the open region ``{f : f_i > 0 for every site with y_i >= 1}`` (sites with
  ``y_i = 0`` are unconstrained; their log-likelihood ``-f^2`` is concave everywhere). ``Psi`` is
  strictly concave on that region and tends to ``-inf`` at its boundary, so that mode exists, is
  unique, and is the one the positive-rate interpretation (``f = +sqrt(rate)``) wants; the
  negative branch gives the mirror image ``-f^`` with the same evidence;
* Newton starts at a point of that region -- the GP regression smoother of ``sqrt(y)`` with
  per-site precisions ``-d^2 log p`` at each likelihood term's own positive mode (4 for
  ``y >= 1``, 2 for ``y = 0``), shifted upwards until it is inside -- and every step is
  backtracked (halved) until ``Psi`` increases; a step that would cross ``f = 0`` has
  ``Psi = -inf`` and is always rejected, so the iterates never leave the region and converge to
  its mode (a concave maximisation with a barrier);
* ``W`` is positive at every iterate, so the Cholesky factor of ``B = I + W^1/2 K W^1/2`` always
  exists and the evidence and its gradient are the standard ones. (For probit and the square
  link only round-off can produce ``W < 0``, and ``W`` is clipped at 0.)

Likelihoods that are not log-concave (``log_concave = False``: Student-t noise) have
genuinely negative ``W`` where a residual exceeds the curvature scale. Newton then takes the exact
step ``(K^-1 + W)^-1 (W f + grad log p)`` wherever ``K^-1 + W`` is positive definite (checked by
the inertia of the indefinite ``M = diag(sign W) + |W|^1/2 K |W|^1/2``, as for EP's negative
sites in :mod:`qpinfer.inference.dense_posterior`), and clips W at 0 elsewhere (an ascent direction,
so the backtracking line search always progresses; GPML's ``infLaplace`` does the same with
``Wmin = 0``). At the mode ``K^-1 + W`` is positive definite (a maximum), and the evidence uses
``log det(I + K W) = log |det M|``; the gradient (R&W Alg. 5.1) uses
``Z = (K + W^-1)^-1 = |W|^1/2 M^-1 |W|^1/2`` in place of ``W^1/2 B^-1 W^1/2``. The mode found is
one of possibly several (the Student-t posterior can be multimodal).

The approximation ignores the mirror mode and any other sign pattern: it is the Laplace
approximation of the posterior restricted to the positive branch (for EP/QP see
:mod:`qpinfer.estimators.poisson_regressor`, which starts the site updates on the same branch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import cho_solve

from qpinfer.inference.dense_posterior import (
    Posterior,
    PosteriorMoments,
    _chol_B,
    posterior_from_sites,
    scaled_B_inverse,
)

__all__ = [
    "LaplaceResult",
    "laplace_log_evidence_gradient",
    "laplace_mode",
    "positive_branch_start",
]


@dataclass
class LaplaceResult(PosteriorMoments):
    """The mode, the Gaussian it implies, and the approximate evidence (R&W equation (3.32))."""

    f: np.ndarray
    a: np.ndarray
    W: np.ndarray
    posterior: Posterior
    log_marginal_likelihood: float
    n_iter: int
    converged: bool
    fixed_point_residual: float
    history: list[float] = field(default_factory=list)


def _feasible(likelihood: Any, f: np.ndarray, y: np.ndarray) -> bool:
    if not likelihood.two_branches:
        return bool(np.all(np.isfinite(f)))
    return bool(np.all(np.isfinite(f)) and np.all(f[y > 0] > 0))


def positive_branch_start(
    K: np.ndarray, y: np.ndarray, likelihood: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sign-consistent starting point ``(a, tau, nu)`` for the square link (zeros for probit).

    Each likelihood term alone is approximated at its own positive mode ``f = sqrt(y)`` with
    precision ``tau = -d^2 log p = 4`` (``y >= 1``) or 2 (``y = 0``, mode 0); ``a`` gives the GP
    posterior mean ``f = K a = K (K + diag(1/tau))^-1 (sqrt(y) + c)`` of those Gaussian sites,
    with the smallest shift ``c`` in ``0, 1/2, 1, 2, ...`` that makes ``f_i > 0`` at every site
    with ``y_i >= 1``. ``(tau, nu = tau (sqrt(y) + c))`` are the sites themselves (the start of
    EP/QP on the positive branch).
    """
    n = y.shape[0]
    if not likelihood.two_branches:
        return np.zeros(n), np.zeros(n), np.zeros(n)
    tau = np.where(y > 0, 4.0, 2.0)
    s = np.sqrt(tau)
    L = _chol_B(K, s)
    for c in [0.0] + [0.5 * 2.0**k for k in range(12)]:
        target = np.sqrt(y) + c
        a = s * cho_solve((L, True), s * target, check_finite=False)
        if _feasible(likelihood, K @ a, y):
            return a, tau, tau * target
    raise ValueError(
        "could not find a starting point with f > 0 at every site with y >= 1 (is K degenerate?)"
    )


def _indefinite(likelihood: Any) -> bool:
    """Whether W = -d^2 log p may legitimately be negative (``log_concave = False``)."""
    return not likelihood.log_concave


def _newton_a(
    K: np.ndarray, f: np.ndarray, d1: np.ndarray, W: np.ndarray, indefinite: bool
) -> np.ndarray:
    """``a`` of the Newton target ``f_new = (K^-1 + W)^-1 (W f + d1) = K a``.

    With negative entries of W (a likelihood that is not log-concave) the exact Newton step is
    taken where ``K^-1 + W`` is positive definite (the Woodbury form of
    :func:`qpinfer.inference.dense_posterior.posterior_from_sites`, whose ``b`` is this ``a``);
    where it is not, the Newton direction need not ascend, and W is clipped at 0 instead: the step
    ``(K^-1 + W_+)^-1 grad Psi`` is an ascent direction (``K^-1 + W_+`` is positive definite),
    so the line search of :func:`laplace_mode` always makes progress. For log-concave
    likelihoods W is only clipped against round-off (R&W Alg. 3.1).
    """
    if indefinite and np.any(W < 0):
        try:
            return posterior_from_sites(K, W, W * f + d1).b
        except np.linalg.LinAlgError:
            pass
    W = np.maximum(W, 0.0)
    s = np.sqrt(W)
    L = _chol_B(K, s)
    b = W * f + d1
    return b - s * cho_solve((L, True), s * (K @ b), check_finite=False)


def _z_matrix(post: Posterior) -> np.ndarray:
    """``Z = (K + W^-1)^-1 = S^1/2 B^-1 S^1/2`` (``S^1/2 M^-1 S^1/2`` with negative W)."""
    s = post.sqrt_tau
    if post.L is None:
        return s[:, None] * post.solve_B(np.diag(s))
    return scaled_B_inverse(post.L, s)


def _psi(likelihood: Any, a: np.ndarray, f: np.ndarray, y: np.ndarray) -> float:
    lp = likelihood.log_lik_derivatives(f, y)[0]
    value = float(np.sum(lp) - 0.5 * a @ f)
    return value if np.isfinite(value) else -np.inf


_EPS = float(np.finfo(np.float64).eps)


def laplace_mode(
    K: np.ndarray,
    y: np.ndarray,
    likelihood: Any,
    *,
    init: np.ndarray | None = None,
    max_iter: int = 100,
    tol: float = 1e-12,
) -> LaplaceResult:
    """Newton's method for the posterior mode, with backtracking, and the Laplace evidence.

    Rasmussen and Williams (2006), Algorithm 3.1 and equation (3.32).

    ``init`` is a starting ``a`` (``f = K a``), e.g. the previous mode during hyperparameter
    optimisation; it is ignored if ``K a`` is outside the positive branch (square link), and the
    default is :func:`~qpinfer.inference.laplace.positive_branch_start`. Iterations stop when a full
    Newton step changes ``f`` by less than ``tol * (1 + max|f|)``, or by no more than the round-off
    bound of ``f = K a`` (``n eps max(|K| |a|)``, which a large ``K`` keeps above ``tol``) without
    changing ``Psi`` beyond round-off (``1e-14`` relative), or when a small step (below ``1e-6 *
    (1 + max|f|)``) is no smaller than the one before (Newton's steps shrink quadratically near
    the mode: such a step is round-off), or when ``Psi`` cannot be increased any more.
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    if K.shape != (n, n):
        raise ValueError(f"K must have shape ({n}, {n}), got {K.shape}")
    a = None
    if init is not None:
        a = np.asarray(init, dtype=np.float64)
        if a.shape != (n,) or not _feasible(likelihood, K @ a, y):
            a = None
    if a is None:
        a = positive_branch_start(K, y, likelihood)[0]
    f = K @ a
    psi = _psi(likelihood, a, f, y)
    history = [psi]
    converged = False
    it = 0
    last_step = np.inf
    for it in range(1, int(max_iter) + 1):
        _, d1, d2, _ = likelihood.log_lik_derivatives(f, y)
        a_new = _newton_a(K, f, d1, -d2, _indefinite(likelihood))
        f_new = K @ a_new
        step_f = f_new - f
        step_a = a_new - a
        scale = 1.0 + np.max(np.abs(f))
        step = np.max(np.abs(step_f))
        t = 1.0
        accepted = False
        for _ in range(60):
            a_t = a + t * step_a
            f_t = f + t * step_f
            psi_t = _psi(likelihood, a_t, f_t, y)
            # near the mode Psi is flat to round-off: a small full Newton step is taken as long
            # as Psi does not drop by more than round-off (quadratic convergence does the rest)
            if psi_t >= psi or (
                t == 1.0 and step <= 1e-6 * scale and psi_t >= psi - 1e-12 * (1.0 + abs(psi))
            ):
                accepted = True
                break
            t *= 0.5
        # converged: a negligible Newton step, or (with large K, whose round-off keeps steps
        # above tol * scale: crabs at signal variance 1e5) a small one that no longer changes Psi
        # (a flat Psi alone is no test: near the mode Psi moves by step^2, below round-off
        # while the step is still far above it, which left |a - grad log p| at 1e-7)
        # the round-off bound of K a (an O(n^2) product) only once the cheap tests pass
        flat = (
            accepted
            and abs(psi_t - psi) <= 1e-14 * (1.0 + abs(psi))
            and step <= 2.0 * n * _EPS * np.max(np.abs(K) @ np.abs(a))
        )
        # at the noise floor: Newton's steps shrink quadratically near the mode, so a small step
        # that is no smaller than the one before is round-off (of d log p and W f with large
        # counts: the log link at rates ~400 crabbed for max_iter with steps ~1e-10)
        stalled = accepted and step <= 1e-6 * scale and step >= last_step
        last_step = step
        if accepted:
            a, f, psi = a_t, f_t, psi_t
            history.append(psi)
        if step <= tol * scale or flat or stalled or not accepted:
            converged = accepted
            break
    return _result(K, y, likelihood, a, f, it, converged, history)


def _result(K, y, likelihood, a, f, n_iter, converged, history) -> LaplaceResult:
    lp, d1, d2, _ = likelihood.log_lik_derivatives(f, y)
    residual = float(np.max(np.abs(f - K @ d1)) / (1.0 + np.max(np.abs(f))))
    # the Gaussian N(f^, (K^-1 + W)^-1) of sites (W, W f^ + grad log p): R&W's B-form, or with
    # negative W (not log-concave) the Woodbury form with the indefinite M = diag(sign W) +
    # |W|^1/2 K |W|^1/2 (eigh; LinAlgError if K^-1 + W is not positive definite, i.e. f^ is a
    # saddle), log det(I + K W) = log |det M|. W is clipped at 0 against round-off otherwise.
    W = -d2 if _indefinite(likelihood) and np.any(d2 > 0) else np.maximum(-d2, 0.0)
    post = posterior_from_sites(K, W, W * f + d1)
    post.mean, post.b = f, d1  # equal in exact arithmetic at the mode; keep the mode's
    log_z = float(np.sum(lp) - 0.5 * a @ f - post.half_logdet_B())
    return LaplaceResult(
        f=f,
        a=a,
        W=W,
        posterior=post,
        log_marginal_likelihood=log_z,
        n_iter=n_iter,
        converged=converged,
        fixed_point_residual=residual,
        history=history,
    )


def laplace_log_evidence_gradient(
    kernel: Any,
    X: np.ndarray,
    result: LaplaceResult,
    likelihood: Any,
    y: np.ndarray,
    K: np.ndarray | None = None,
) -> np.ndarray:
    """Gradient of R&W eq. (3.32) in the log kernel hyperparameters (R&W Alg. 5.1, eq. (5.23)).

    Explicit part ``1/2 tr((a a^T - Z) dK)`` with ``Z = W^1/2 B^-1 W^1/2``; implicit part (the
    mode moves with K) ``s2^T (I - K Z) dK grad log p`` with
    ``s2 = d(-log|B|/2)/df^ = +1/2 diag((K^-1 + W)^-1) d^3 log p`` (``dW/df = -d^3 log p``; the
    sign is checked against finite differences in ``tests/inference/test_laplace.py``). Both parts are
    contracted by the kernel (``gradient_contract``) without forming dK/dtheta.
    """
    if K is None:
        K = kernel(X)
    post = result.posterior
    _, d1, _, d3 = likelihood.log_lik_derivatives(result.f, y)
    Z = _z_matrix(post)
    s2 = 0.5 * post.var * d3  # d(-log|B|/2)/df^ = diag((K^-1 + W)^-1) d^3 log p / 2
    u = s2 - Z @ (K @ s2)
    R = 0.5 * (np.outer(result.a, result.a) - Z)
    R += 0.5 * (np.outer(u, d1) + np.outer(d1, u))
    return np.asarray(kernel.gradient_contract(X, R, K), dtype=np.float64)
