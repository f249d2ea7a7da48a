"""The Jacobian of QP's site update at its fixed point, and chord steps with it.

QP's sites ``s = (tau~, nu~)`` solve ``s = G(s)`` (Zhang et al., 2020, eq. (6) with sigma* of eq. (7),
:func:`~qpinfer.inference.site_update.site_proposal`). Its Jacobian ``M = dG/ds`` at the
converged sites is what :mod:`qpinfer.inference.total_gradient` builds for the adjoint of QP's
total hyperparameter gradient: per-site coefficients in the differentials ``(da, db, dtau~,
dnu~)`` of the posterior marginals and the site itself, with ``da = -(Sigma o Sigma) dtau~`` and
``db = Sigma (dnu~ - mu o dtau~)``. :class:`SiteJacobian` holds it and solves ``(I - M) x = r``
and ``(I - M^T) x = r`` by GMRES with O(N^2) products (:func:`gmres`; a dense LU if GMRES
stalls); :func:`site_update_jacobian` builds it at any sites (:func:`covariances`: the
posterior's dense matrices; :class:`~qpinfer.inference.site_jacobian.SiteMaps`: the per-site
coefficients).

:func:`chord_start` reuses it at the *next* hyperparameters of a search: from the previous fixed
point, Newton's step for ``s = G(s)`` with the stale Jacobian (the chord method) repeated while
each step at least halves the residual, each step one posterior and one projection, like a
sweep; where the stale Jacobian stops helping, it is recomputed at the best sites so far
(Newton's steps, at most :data:`MAX_REFRESHES` times). The site loop
(:func:`qpinfer.inference.ep.run_ep`) then finishes from there, so the fixed point and its
tolerance are the loop's own; only the number of sweeps changes. The damped
parallel sweep contracts the residual by about a half per sweep (damping 0.5); a chord step
from a nearby fixed point by one to three orders of magnitude (Ionosphere, a step of 0.01 in the
log hyperparameters: 3 chord steps against 19 sweeps; of 0.1: 8 against 28). Far from the old
fixed point even Newton's step may be refused; the loop then starts from the best state so far.
Recomputing the Jacobian costs one product with the posterior's factor (its ``V``, kept by the
residual's posterior) and the per-site coefficients, about two sweeps. A chord whose residual
falls below the tolerance ends the evaluation (:func:`chord_result`): a sweep from there would
stop the loop. A QP fit of Ionosphere with hyperparameters took 119 site updates with the stale
Jacobian alone, 107 with Newton's steps, 98 with converged chords ending their evaluations.
EP's searches on :data:`EP_CHORD_MIN_SITES` sites or more take the same steps with EP's site
update (EP's std in sigma*'s place, :mod:`qpinfer.inference.site_jacobian`);
:class:`SearchChord` holds a search's latest fixed point and Jacobian.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular

from qpinfer.inference.dense_posterior import Posterior, posterior_from_sites, scaled_B_inverse
from qpinfer.inference.ep import EPResult
from qpinfer.inference.evidence import log_evidence
from qpinfer.inference.site_jacobian import SiteMaps
from qpinfer.inference.site_loop import convergence_category
from qpinfer.inference.site_update import resolve_floor, site_proposal

__all__ = [
    "CHORD_FACTOR",
    "DENSE_FALLBACK_SITES",
    "DenseCovariance",
    "EP_CHORD_MIN_SITES",
    "MAX_CHORD_STEPS",
    "MAX_REFRESHES",
    "ChordStart",
    "SearchChord",
    "SiteJacobian",
    "chord_result",
    "chord_start",
    "covariances",
    "gmres",
    "site_update_jacobian",
]

#: chord steps tried before the site loop takes over
MAX_CHORD_STEPS: int = 8
#: most GMRES products per solve (the systems here converge in 10-30)
GMRES_MAX_ITER: int = 200
#: largest number of sites for which a stalled GMRES falls back to a dense 2N x 2N solve
DENSE_FALLBACK_SITES: int = 1500
#: a chord step must multiply the RMS residual by less than this, or the Jacobian is refreshed
CHORD_FACTOR: float = 0.5
#: Jacobians recomputed at the current sites (Newton steps) per chord start
MAX_REFRESHES: int = 2
#: EP's searches take chord starts from this many sites on: below, the Jacobian (differences of
#: EP's moments, O(N^2) products) costs more than the sweeps it saves (measured, whole fits of
#: the dense estimators: 112 counts +42% time, 236 counts +22%, Ionosphere's 351 rows -3%,
#: breast cancer's 569 rows -23% (probit) and -33% (logit))
EP_CHORD_MIN_SITES: int = 400


class DenseCovariance:
    """Products with a dense posterior covariance ``Sigma`` and with ``Sigma o Sigma``."""

    def __init__(self, Sigma: np.ndarray) -> None:
        self.Sigma = Sigma
        self.P = Sigma * Sigma

    def dot(self, x: np.ndarray) -> np.ndarray:
        return self.Sigma @ x

    def hadamard_dot(self, x: np.ndarray) -> np.ndarray:
        return self.P @ x


class SiteJacobian:
    """``M = dG/ds`` of the site update at a fixed point, in ``s = (tau~, nu~)`` (2N).

    ``cov`` gives the products with the posterior covariance (``dot``) and with ``Sigma o
    Sigma`` (``hadamard_dot``): :class:`DenseCovariance`, or the pseudo-point posterior's
    O(N M^2) ones (:mod:`qpinfer.inference.sparse.total_gradient`); ``mean`` is the posterior
    mean, ``G_tau`` and ``G_nu`` the new sites' per-site coefficients in ``(da, db, dtau~,
    dnu~)`` (rows 0-3; further rows are not the sites').
    """

    def __init__(self, cov: Any, mean: np.ndarray, G_tau: np.ndarray, G_nu: np.ndarray) -> None:
        self.cov, self.mean, self.G_tau, self.G_nu = cov, mean, G_tau, G_nu
        self.n = mean.size

    def matvec(self, d: np.ndarray) -> np.ndarray:
        """``M d``."""
        n, Gt, Gn = self.n, self.G_tau, self.G_nu
        dt, dn = d[:n], d[n:]
        da = -self.cov.hadamard_dot(dt)
        db = self.cov.dot(dn - self.mean * dt)
        return np.concatenate(
            [
                Gt[0] * da + Gt[1] * db + Gt[2] * dt + Gt[3] * dn,
                Gn[0] * da + Gn[1] * db + Gn[2] * dt + Gn[3] * dn,
            ]
        )

    def rmatvec(self, d: np.ndarray) -> np.ndarray:
        """``M^T d``."""
        n, Gt, Gn = self.n, self.G_tau, self.G_nu
        yt, yn = d[:n], d[n:]
        pa = Gt[0] * yt + Gn[0] * yn
        sb = self.cov.dot(Gt[1] * yt + Gn[1] * yn)
        xt = Gt[2] * yt + Gn[2] * yn - self.cov.hadamard_dot(pa) - self.mean * sb
        xn = Gt[3] * yt + Gn[3] * yn + sb
        return np.concatenate([xt, xn])

    def solve(self, rhs: np.ndarray, transpose: bool = False, rtol: float = 1e-10) -> np.ndarray:
        """``x`` with ``(I - M) x = rhs`` (``transpose``: ``(I - M^T) x = rhs``): GMRES
        (:func:`gmres`) to ``rtol``. If it misses ``max(1e-8, 100 rtol)`` of ``max |rhs|``, a
        dense LU for up to :data:`DENSE_FALLBACK_SITES` sites, else GMRES's answer with a
        :class:`~qpinfer.ConvergenceWarning`."""
        m = self.rmatvec if transpose else self.matvec

        def op(v: np.ndarray) -> np.ndarray:
            return v - m(v)

        scale = max(float(np.max(np.abs(rhs))), np.finfo(np.float64).tiny)
        x = gmres(op, rhs / scale, rtol, min(2 * self.n, GMRES_MAX_ITER)) * scale
        miss = float(np.max(np.abs(op(x) - rhs)))
        if miss <= max(1e-8, 100 * rtol) * scale:
            return x
        if self.n <= DENSE_FALLBACK_SITES:
            dense = np.eye(2 * self.n) - np.column_stack([m(e) for e in np.eye(2 * self.n)])
            return np.linalg.solve(dense, rhs)
        warnings.warn(
            f"GMRES on QP's site-update Jacobian stalled (residual {miss / scale:.2g} of the "
            "right-hand side); the solution is approximate",
            convergence_category(),
            stacklevel=3,
        )
        return x


def gmres(op: Callable[[np.ndarray], np.ndarray], b: np.ndarray, rtol: float, maxiter: int):
    """GMRES without restarts (Saad and Schultz 1986): Arnoldi with classical Gram-Schmidt
    applied twice, Givens rotations for the residual norm, until it is below ``rtol |b|`` or
    after ``maxiter`` products. Lean on purpose: the systems here take 10-30 products of O(N^2),
    where ``scipy.sparse.linalg.gmres``'s per-call and per-iteration overhead cost more than
    the products (Sonar: 1.1 ms per call, a fifth of QP's whole fit)."""
    beta = float(np.linalg.norm(b))
    if beta == 0.0:
        return np.zeros_like(b)
    V = np.empty((maxiter + 1, b.size))
    R = np.zeros((maxiter + 1, maxiter))  # the Hessenberg matrix, rotated to triangular
    cs, sn = np.zeros(maxiter), np.zeros(maxiter)
    g = np.zeros(maxiter + 1)
    g[0] = beta
    V[0] = b / beta
    k = 0
    for k in range(maxiter):
        w = op(V[k])
        for _ in range(2):
            h = V[: k + 1] @ w
            w -= h @ V[: k + 1]
            R[: k + 1, k] += h
        hn = float(np.linalg.norm(w))
        R[k + 1, k] = hn
        for i in range(k):  # the earlier rotations, on the new column
            R[i, k], R[i + 1, k] = (
                cs[i] * R[i, k] + sn[i] * R[i + 1, k],
                -sn[i] * R[i, k] + cs[i] * R[i + 1, k],
            )
        rho = float(np.hypot(R[k, k], hn))
        cs[k], sn[k] = (1.0, 0.0) if rho == 0.0 else (R[k, k] / rho, hn / rho)
        R[k, k], R[k + 1, k] = rho, 0.0
        g[k + 1] = -sn[k] * g[k]
        g[k] = cs[k] * g[k]
        if abs(g[k + 1]) <= rtol * beta or hn == 0.0:
            break
        V[k + 1] = w / hn
    m = k + 1
    y = solve_triangular(R[:m, :m], g[:m], check_finite=False)
    return y @ V[:m]


def covariances(post: Any, K: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``C = (K + S~^-1)^-1``, ``A = K^-1 Sigma = I - C K`` and the posterior covariance
    ``Sigma = K A`` of a dense posterior."""
    s = post.sqrt_tau
    if post.L is not None:
        C = scaled_B_inverse(post.L, s)  # (K + S~^-1)^-1
    else:
        C = s[:, None] * post.solve_B(np.diag(s))  # S M^-1 S
    A = -(C @ K)
    A[np.diag_indices_from(A)] += 1.0  # K^-1 Sigma
    Sigma = K @ A
    return C, A, 0.5 * (Sigma + Sigma.T)


def site_update_jacobian(
    K: np.ndarray, y: np.ndarray, projection: Any, tau: np.ndarray, nu: np.ndarray, post=None
) -> SiteJacobian:
    """The :class:`SiteJacobian` of the site update of ``projection`` (QP's, or EP's with
    :class:`~qpinfer.MomentMatching`) at sites ``(tau~, nu~)`` on prior ``K`` (a fixed point or
    not): the Newton step of :func:`chord_start`. ``post``: the posterior of
    these sites if the caller has it (with ``V`` kept, ``Sigma = K - V^T V`` in one product)."""
    if post is None:
        post = posterior_from_sites(K, tau, nu)
    floor = resolve_floor("auto", projection)
    maps = SiteMaps(projection, post.var, post.mean, tau, nu, y, "loo", None, floor)
    Sigma = covariances(post, K)[2] if post.V is None else K - post.V.T @ post.V
    return SiteJacobian(DenseCovariance(Sigma), post.mean, maps.G_tau, maps.G_nu)


def _residual(K, y, projection, s: np.ndarray, floor: float | None):
    """``(G(s) - s, posterior, n_clipped, n_skipped)`` (sites whose update is not defined keep
    theirs: 0), the posterior with its ``V`` (:func:`site_update_jacobian`); ``LinAlgError`` if
    the sites imply an improper posterior."""
    n = y.size
    tau, nu = s[:n], s[n:]
    post = posterior_from_sites(K, tau, nu, keep_v=True)
    tau_p, nu_p, ok, clipped = site_proposal(projection, post.mean, post.var, tau, nu, y, floor)
    r = np.concatenate([np.where(ok, tau_p - tau, 0.0), np.where(ok, nu_p - nu, 0.0)])
    if not np.all(np.isfinite(r)):
        raise np.linalg.LinAlgError("the site update is not finite")
    return r, post, int(np.count_nonzero(clipped)), int(np.count_nonzero(~ok))


@dataclass
class ChordStart:
    """What :func:`chord_start` found: the best ``sites`` ``(tau~, nu~)``, the ``n_updates``
    it evaluated, and at the sites their ``posterior``, the RMS of ``G(s) - s`` (``rms``) and
    the site update's counts. Unpacks as ``(sites, n_updates)``."""

    sites: tuple[np.ndarray, np.ndarray]
    n_updates: int
    posterior: Posterior | None
    rms: float
    counts: tuple[int, int] = (0, 0)

    def __iter__(self) -> Iterator[Any]:
        yield self.sites
        yield self.n_updates


def chord_result(y: np.ndarray, projection: Any, start: ChordStart, tol: float) -> EPResult:
    """The site loop's result at a chord start's sites whose undamped update moves them by less
    than ``tol`` (RMS): so does any damped parallel sweep from them, which would stop the loop
    (:func:`qpinfer.inference.ep.run_ep`) there, at a sweep's cost (two posteriors and a
    projection); here the posterior is the chord's, and only the evidence is computed."""
    if not start.rms < tol or start.posterior is None:
        raise ValueError(f"the chord start's RMS residual {start.rms:.3g} is not below tol={tol}")
    tau, nu = start.sites
    log_z, cavity_mean, cavity_var = log_evidence(start.posterior, tau, nu, y, projection)
    return EPResult(
        tau=tau,
        nu=nu,
        posterior=start.posterior,
        log_marginal_likelihood=float(log_z),
        cavity_mean=cavity_mean,
        cavity_var=cavity_var,
        n_iter=0,
        converged=True,
        rms_change=start.rms,
        n_clipped=start.counts[0],
        n_skipped=start.counts[1],
    )


def chord_start(
    K: np.ndarray,
    y: np.ndarray,
    projection: Any,
    init: tuple[np.ndarray, np.ndarray],
    jacobian: SiteJacobian,
    tol: float,
    max_steps: int = MAX_CHORD_STEPS,
    max_refreshes: int = MAX_REFRESHES,
) -> ChordStart:
    """Chord steps ``s <- s + (I - M)^-1 (G(s) - s)`` on the sites of ``projection`` (QP's or
    EP's) at prior ``K`` from
    ``init`` (the previous fixed point, whose Jacobian is ``jacobian``) until the RMS residual
    is below ``tol``; returns the :class:`ChordStart`: the best sites, the number of site
    updates it evaluated (each one posterior and projection, as a sweep), their posterior and
    residual.

    A step that reduces the residual by less than :data:`CHORD_FACTOR` is kept; one that does
    not reduce it, or leaves an improper posterior, is dropped. After either, while the Jacobian
    may be recomputed ``max_refreshes`` times more, it is, at the best sites (from the
    posterior their residual computed, :func:`site_update_jacobian`: Newton's step next), and
    the chord goes on; otherwise it stops. A dropped Newton step is halved once before the
    chord stops. Sites are held at or above the site loop's default precision floor."""
    n, floor = y.size, resolve_floor("auto", projection)
    x = np.concatenate([np.asarray(init[0], np.float64), np.asarray(init[1], np.float64)])
    try:
        r, post, *counts = _residual(K, y, projection, x, floor)
    except np.linalg.LinAlgError:
        return ChordStart((x[:n], x[n:]), 1, None, np.inf)
    n_evals, refreshes, fresh, step, backtracked = 1, 0, False, None, False
    rms = float(np.sqrt(np.mean(r * r)))
    for _ in range(max_steps):
        if rms < tol:
            break
        # a step, or half the refused one of a fresh Jacobian (Newton's, backtracked)
        step = 0.5 * step if fresh and step is not None else jacobian.solve(r, rtol=1e-6)
        cand = x + step
        if floor is not None:
            cand[:n] = np.maximum(cand[:n], floor)
        n_evals += 1
        try:
            r_cand, post_cand, *counts_cand = _residual(K, y, projection, cand, floor)
            rms_cand = float(np.sqrt(np.mean(r_cand * r_cand)))
        except np.linalg.LinAlgError:
            rms_cand = np.inf
        if rms_cand < rms:
            step = None
            x, r, post, counts, rms_old, rms = cand, r_cand, post_cand, counts_cand, rms, rms_cand
            if rms < CHORD_FACTOR * rms_old or rms < tol:
                fresh = False
                continue
        elif fresh:  # Newton's step from here does not help: halve it, once
            if backtracked:
                break
            backtracked = True
            continue
        # the stale Jacobian stops helping (or its step was refused): Newton's next, if allowed
        if refreshes >= max_refreshes:
            break
        try:
            jacobian = site_update_jacobian(K, y, projection, x[:n], x[n:], post)
        except np.linalg.LinAlgError:
            break
        refreshes += 1
        fresh, backtracked, step = True, False, None
    return ChordStart((x[:n], x[n:]), n_evals, post, rms, tuple(counts))


class SearchChord:
    """The chord starts of one hyperparameter search: the latest fixed point (a site loop's
    result) and its site-update Jacobian, from which ``start`` warm-starts the next
    evaluation; ``schedule``: the site loop's (a converged chord ends an evaluation of the
    parallel schedule, :func:`chord_result`)."""

    def __init__(self, projection: Any, tol: float, schedule: str) -> None:
        self.projection, self.tol, self.parallel = projection, tol, schedule == "parallel"
        self.jacobian: SiteJacobian | None = None
        self.res: Any = None

    def start(self, K: np.ndarray, y: np.ndarray, warm: Any, latest: Any):
        """``(warm start, chord site updates, result or None)`` at prior ``K``, from the
        search's ``latest`` result if it is the fixed point this holds the Jacobian of."""
        if warm is None or self.res is None or latest is not self.res:
            return warm, 0, None
        start = chord_start(K, y, self.projection, warm, self.jacobian, self.tol)
        res = None
        if start.rms < self.tol and self.parallel:  # converged: no sweep
            res = chord_result(y, self.projection, start, self.tol)
        return start.sites, start.n_updates, res

    def keep(self, res: Any, jacobian=None, K=None, y=None) -> None:
        """Hold ``res`` and its Jacobian: ``jacobian`` (QP's total gradient builds it), else
        computed at ``res`` on prior ``K`` if it converged and its posterior kept ``V``
        (EP's); the posterior's ``V`` is dropped either way."""
        post = res.posterior
        if jacobian is None and res.converged and getattr(post, "V", None) is not None:
            jacobian = site_update_jacobian(K, y, self.projection, res.tau, res.nu, post)
        if jacobian is not None:
            self.jacobian, self.res = jacobian, res
        if hasattr(post, "V"):
            post.V = None
