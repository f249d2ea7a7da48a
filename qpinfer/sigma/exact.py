"""The exact QP standard deviation sigma* of Zhang et al. (2020) eq. (7), vectorized.

    sigma* = integral over f of phi(Phi^{-1}(F(f))) df,

F the CDF of the tilted distribution q(f) proportional to p(y | f) N(f | mu, sigma^2).

Method (one fixed-shape computation per point, no per-point Python):

1. The tilted density is split into log-concave *lobes* (probit: one; Poisson with the square
   link: one on each side of f = 0), each with its mode and curvature width (likelihood hook
   ``_lobes``). Lobes holding less than e^-60 of the mass are dropped, and points are grouped
   by the lobes they need, so every group is one fixed-shape computation.
2. Panel edges on each side of a lobe's mode are placed on level sets of the log density,
   log q(mode) - log q(edge) = (k delta)^2 / 2, k = 1..K, found by Newton steps on
   sqrt(log q(mode) - log q(x)), which is linear in x for a Gaussian: panels are narrow where
   the density changes fast (a sharp probit edge, a narrow Poisson mode) and wide in slow
   Gaussian tails. The last level, ``qpinfer.quadrature.level_sets.TAIL`` nats below the mode, drops
   less than 1e-21 of the mass. A likelihood may add fixed edges at its own features
   (``_breakpoints``: where Phi(f) climbs to 1 after a flat stretch of a wide probit cavity) and ask
   for finer levels.
3. On every panel, Gauss-Legendre nodes carry the density; the CDF at each node is the sum of
   the panels to its left plus a spectral partial integral (exact for polynomials of degree
   n-1), and the survival function S = 1 - F is summed *from the right* the same way, so tails
   never suffer cancellation. Since phi(Phi^{-1}(u)) = phi(Phi^{-1}(1 - u)), the integrand uses
   min(F, S).
4. Between lobes (a flat stretch of F around f = 0 for bimodal Poisson tilts) the integrand is
   constant and is added exactly. A likelihood whose density jumps at a lobe bound (``step_noise``,
   ``_snap_to_bounds``) has the outermost edge moved onto the bound where the level sets reach it.
5. Theorem 2 (sigma* <= sigma_EP) is made exact: the result is clamped to the likelihood's own
   EP std (from the same panels for ``logit`` / ``poisson_log``, else ``tilted_moments``).

A point's result never depends on the other points of the call (no batch-wide stopping tests),
so tables are bit-reproducible however they are tiled. A likelihood may answer some cavities
from limits exact to double precision (``_sigma_closed_form``) and map others to an equivalent
cavity (``_rescale``): the probit's flat, Gaussian and very-wide regimes
(:mod:`qpinfer.likelihoods.probit.limits`), which keep the quadrature where node positions are
exact. Accuracy against the 40-digit mpmath reference (``qptables.reference.sigma``;
``tests/sigma/test_sigma_qp.py``, ``tests/sigma/test_sigma_wide.py``): ~1e-15 relative over the paper
domain (mu in [-10, 10], sigma in [0.1, 10], Poisson counts to 100); probit <= 1e-12 (measured
<= ~5e-16 on 400 random points) for every finite mu and sigma > 0 where the reference converges
(it does not in the deep left tail, where the answer is the EP std, regime 2).
"""

from __future__ import annotations

import numpy as np

from qpinfer.likelihoods.base import check_cavity
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.quadrature.panels import N_LEVELS, N_LEVELS_FINE, sigma_qp_quadrature


def _prepare(likelihood, mu, sigma, y):
    lik = get_likelihood(likelihood)
    if (  # the common case (a sweep's float arrays of one shape) in a few array operations
        type(mu) is np.ndarray
        and type(sigma) is np.ndarray
        and mu.dtype == sigma.dtype == np.float64
        and mu.shape == sigma.shape == np.shape(y)
        and np.isfinite(mu).all()
        and ((sigma > 0.0) & (sigma < np.inf)).all()
    ):
        return lik, mu, sigma, lik.check_y(y)
    mu, sigma = check_cavity(mu, sigma)
    y = lik.check_y(y)
    mu, sigma, y = broadcast_query(mu, sigma, y)
    return lik, mu, sigma, y


def broadcast_query(mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``mu``, ``sigma`` and ``y`` broadcast together; ``ValueError`` naming the shapes if not."""
    try:
        return tuple(np.broadcast_arrays(mu, sigma, y))
    except ValueError:
        raise ValueError(
            f"mu, sigma and y must broadcast together; got shapes {np.shape(mu)}, "
            f"{np.shape(sigma)}, {np.shape(y)}"
        ) from None


def tilted_moments(likelihood, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the tilted distribution p(y|f) N(f|mu, sigma^2) / Z.

    This is EP's projection (Zhang et al., 2020, eq. (5)); QP keeps the same mean (eq. (7)).

    Parameters
    ----------
    likelihood : str or Likelihood
        ``"probit"``, ``"poisson_square"`` or a :class:`~qpinfer.Likelihood`.
    mu, sigma, y : array_like
        Cavity mean, cavity *standard deviation* (> 0) and observation; broadcast together.

    Returns
    -------
    mean, std : ndarray of float64

    Examples
    --------
    The probit's tilted moments are closed-form (Rasmussen and Williams, 2006, eq. (3.58)):

    >>> import numpy as np
    >>> from qpinfer import tilted_moments
    >>> mean, std = tilted_moments("probit", np.array([0.5, -1.0]), np.array([1.0, 2.0]), [1, -1])
    >>> mean.round(6), std.round(6)
    (array([ 0.91526 , -1.960004]), array([0.850732, 1.519996]))
    """
    lik, mu, sigma, y = _prepare(likelihood, mu, sigma, y)
    mean, std = lik.tilted_moments(mu, sigma, y)
    return np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)


def sigma_qp(likelihood, mu, sigma, y, *, batch_size: int = 4096) -> np.ndarray:
    """QP standard deviation sigma* (Zhang et al. (2020), equation (7)): the std of the Gaussian closest in
    L2-Wasserstein distance to the tilted distribution p(y|f) N(f|mu, sigma^2) / Z.

    Accurate to ~1e-13 relative over mu in [-50, 50], sigma in [0.01, 100], and for the probit
    likelihood to <= 1e-12 for every finite mu and sigma > 0 (see tests against the mpmath
    reference in :mod:`qptables.reference.sigma`); ``sigma_qp <= tilted std`` (Theorem 2) holds
    exactly against :func:`tilted_moments`'s std (the result is clamped to it).

    Parameters
    ----------
    likelihood : str or Likelihood
    mu, sigma, y : array_like
        Cavity mean, cavity standard deviation (> 0) and observation; broadcast together.
    batch_size : int
        Points per vectorized batch (bounds temporary memory, ~1 KiB per point).

    Returns
    -------
    ndarray of float64 with the broadcast shape.

    Examples
    --------
    >>> import numpy as np
    >>> from qpinfer import sigma_qp, tilted_moments
    >>> mu, sigma, y = np.array([0.5, -1.0]), np.array([1.0, 2.0]), np.array([1, -1])
    >>> s = sigma_qp("probit", mu, sigma, y)
    >>> s.round(6)
    array([0.850218, 1.511715])
    >>> bool(np.all(s <= tilted_moments("probit", mu, sigma, y)[1]))  # Theorem 2
    True
    """
    lik, mu, sigma, y = _prepare(likelihood, mu, sigma, y)
    shape, mu0, sigma0, y0 = mu.shape, mu, sigma, y
    mu, y = lik.canonical(mu.ravel(), y.ravel())
    sigma = sigma.ravel()
    out = np.empty(mu.shape)
    todo = np.ones(mu.shape, dtype=bool)
    # inf/NaN intermediates (infinite lobe bounds, underflowed tails, limits of far-out
    # points) are expected and masked
    with np.errstate(all="ignore"):
        own = lik._sigma_qp_exact(mu, sigma, y)  # a closed form at every cavity (label noise)
        closed = (todo.copy(), own) if own is not None else lik._sigma_closed_form(mu, sigma, y)
        if closed is not None:
            mask, values = closed
            out[mask] = values[mask]
            todo &= ~mask
        scale = None
        rescaled = lik._rescale(mu, sigma, y)
        if rescaled is not None:  # the rest computed at an equivalent cavity, then scaled
            mask, mu_r, sigma_r, scale_r = rescaled
            mask = mask & todo
            mu, sigma = np.where(mask, mu_r, mu), np.where(mask, sigma_r, sigma)
            scale = np.where(mask, scale_r, 1.0)
        breaks = lik._breakpoints(mu, sigma, y)
        idx_all = np.flatnonzero(todo)
        # sigma_EP from the kernel's own panels where the likelihood's EP moments are computed
        # on exactly these panels (logit, poisson_log); +inf where not computed here
        ep = np.full(mu.shape, np.inf) if scale is None and lik._ep_from_panels else None
        _quadrature_batches(lik, mu, sigma, y, idx_all, breaks, out, batch_size, ep)
        if scale is not None:
            out[todo] *= scale[todo]
        _clamp_to_ep(lik, mu0, sigma0, y0, out, ep, None if lik._clamp_closed_forms else todo)
    # the answer underflows (a tilted density narrower than 5e-324) or overflows (a cavity
    # near the largest float64 whose tilted density is wider still)
    bad = ~((out > 0) & (out < np.inf))
    if bad.any():
        i = np.flatnonzero(bad)[0]
        what = "underflows" if out[i] == 0 else "overflows"
        raise ValueError(
            f"sigma* {what} float64 for mu={mu0.flat[i]!r}, sigma={sigma0.flat[i]!r}"
            f" ({lik.name}): supported are cavities whose QP standard deviation is a positive"
            " finite float64"
        )
    return out.reshape(shape)


def _clamp_to_ep(lik, mu0, sigma0, y0, out, ep, where=None) -> None:
    """Theorem 2, ``sigma* <= sigma_EP``, made exact against the library's own EP std (the
    quadrature's rounding left sigma* up to 2e-14 above it where the tilt is nearly Gaussian,
    e.g. 1 ulp at step_noise(0.2), mu = -2.6562, sigma = 0.3205, y = -1). ``ep`` (from the
    kernel's panels) where given; else the likelihood's ``tilted_moments`` at the points
    ``where`` (default all). Closed-form regimes give sigma_EP itself or the cavity std where the
    tilt is the cavity (``ep = inf`` / outside ``where`` leaves them alone), except the probit's
    limits (:mod:`qpinfer.likelihoods.probit.limits`), whose likelihood sets
    ``_clamp_closed_forms``. In place."""
    if ep is None:
        idx = np.arange(out.size) if where is None else np.flatnonzero(where)
        ep = np.full(out.shape, np.inf)
        if idx.size:
            ep[idx] = lik.tilted_moments(mu0.ravel()[idx], sigma0.ravel()[idx], y0.ravel()[idx])[1]
    over = (out > ep) & (ep > 0) & (ep < np.inf)  # never clamp to a degenerate EP std
    out[over] = ep[over]


def lobe_groups(lik, m, s, yy, breaks, idx):
    """The points of one batch grouped by the lobes they need and by whether they need
    breakpoints: ``(sel, sub_lobes, extra, n_levels)`` per group, for
    :func:`qpinfer.quadrature.panels.sigma_qp_quadrature` (and sigma*'s derivatives)."""
    lobes = lik._lobes(m, s, yy)
    # drop lobes holding < e^-60 of the mass (proxy: peak density x curvature width)
    log_mass = np.stack(
        [
            lik._log_tilted(mode, m, s, yy, derivative=False)[0] + np.log(width)
            for mode, width, _, _ in lobes
        ],
        axis=-1,
    )
    needed = log_mass >= log_mass.max(axis=-1, keepdims=True) - 60.0
    wide = breaks[0][idx] if breaks is not None else np.zeros(idx.size, dtype=np.int64)
    key = needed @ (1 << np.arange(len(lobes))) + (wide << len(lobes))
    for k in np.unique(key):
        sel = key == k
        sub_lobes = [tuple(a[sel] for a in lobe) for j, lobe in enumerate(lobes) if (k >> j) & 1]
        w = k >> len(lobes)
        extra = None
        if w:
            extra = breaks[1](w) if callable(breaks[1]) else breaks[1]
        yield sel, sub_lobes, extra, N_LEVELS_FINE if w >= 2 else N_LEVELS


def _quadrature_batches(lik, mu, sigma, y, idx_all, breaks, out, batch_size, ep=None) -> None:
    """Fill ``out[idx_all]`` batch by batch, grouping points by the lobes they need
    (:func:`lobe_groups`; and ``ep[idx_all]`` with the tilted std on the same panels, if
    given)."""
    for ii, m, s, yy, lobes, extra, n_levels in lobe_batches(
        lik, mu, sigma, y, idx_all, breaks, batch_size
    ):
        got = sigma_qp_quadrature(
            lik, m, s, yy, lobes, extra=extra, n_levels=n_levels, with_std=ep is not None
        )
        if ep is not None:
            got, ep[ii] = got
        out[ii] = got


def lobe_batches(lik, mu, sigma, y, idx_all, breaks, batch_size):
    """``(ii, mu, sigma, y, lobes, extra, n_levels)`` of the points ``idx_all`` batch by batch,
    grouped by the lobes they need (:func:`lobe_groups`); ``ii`` are their indices."""
    for start in range(0, idx_all.size, batch_size):
        idx = idx_all[start : start + batch_size]
        m, s, yy = mu[idx], sigma[idx], y[idx]
        for sel, sub_lobes, extra, n_levels in lobe_groups(lik, m, s, yy, breaks, idx):
            yield idx[sel], m[sel], s[sel], yy[sel], sub_lobes, extra, n_levels
