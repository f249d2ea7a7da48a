"""The Student-t tilted density in canonical units (y = 0, scale 1, mu >= 0): its stationary
points, lobes and panels, and its moments (:class:`qpinfer.likelihoods.student_t.StudentT`).

    log q(f) = -(nu + 1)/2 log(1 + f^2 / nu) - (f - mu)^2 / (2 sigma^2)

The stationary points of ``log q`` solve the cubic

    G(f) = (mu - f)(nu + f^2) - (nu + 1) sigma^2 f = 0,    all roots in [0, mu],

one root (unimodal) or three: the likelihood's mode near 0, an antimode and the cavity's mode
near mu. They are bracketed by the critical points of G and found by bisection
(:func:`stationary_points`). The QP kernel (eq. (7), :mod:`qpinfer.sigma.exact`) gets the two
lobes split at the antimode (:func:`lobes`), panel edges on log-density level sets of each lobe
found by bisection (:func:`level_offsets`: the lobes are not log-concave, so the kernel's Newton
steps are not used), the level sets ending exactly at the antimode, and geometric edges
``+-sqrt(nu) 2^k`` (:func:`graded_edges`) where the polynomial tails of the t factor span many
decades (wide cavities).

The tilted moments (EP's projection, eq. (5)) and ``log Z`` have no closed form:
:func:`canonical_moments` takes the tilt's Laplace series where the cavity is very narrow
relative to the t factor, a Gauss-Hermite rule where it is narrow (``r < 0.05``,
:func:`hermite_moments`), and otherwise Gauss-Legendre rules over the same panels
(:func:`panel_moments`), with every node written as an offset from its lobe's mode and the log
density relative to the mode (``_log_ratio``) so that no digits cancel -- or the cell table's
lookup of them (:meth:`qpinfer.Likelihood.with_moment_table`).
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.polynomial import legendre
from scipy.special import gammaln

__all__ = [
    "EXTRA_LEVEL",
    "N_NODES",
    "canonical_moments",
    "cavity_shift",
    "graded_edges",
    "graded_need",
    "hermite_moments",
    "level_offsets",
    "lobes",
    "panel_moments",
    "stationary_points",
]

_SERIES_R2 = 1e-16  # r^2 below which the tilt's moments are its Laplace series (canonical_moments)
_FAR = 1e100  # |mu - y| / s beyond which the tilt is the cavity (sigma / s <= 1e10)
EXTRA_LEVEL = 80.0  # nats: a deeper last level set for the polynomial tails of the t factor
_BISECT = 40
_ROOT_BISECT = 64
N_NODES = 20  # Gauss-Legendre nodes per panel
_MOMENT_BATCH = 4096  # points per vectorized moment batch
_HERMITE_R2 = 2.5e-3  # r^2 below which the Gauss-Hermite rule serves the moments (r < 0.05)
_HERMITE_NODES = 20
_HERMITE_X, _HERMITE_W = np.polynomial.hermite_e.hermegauss(_HERMITE_NODES)
_LOG_HERMITE_W = np.log(_HERMITE_W)
#: a shoulder's extra panel edges, mu + sigma k (canonical_moments)
_SHOULDER_EDGES = np.arange(-6.0, 10.0)


def _log_ratio(m_t, m_g, d, sigma, nu):
    """log q(m + d) - log q(m), log q(f) = -(nu+1)/2 log(1 + f^2/nu) - (f - mu)^2/(2 sigma^2),
    for m given as m_t = m (from the t factor's centre) and m_g = m - mu (from the cavity's):
    no cancellation for any m (both terms are formed from d). Where m + d nears the t factor's
    centre from a far mode (x -> -1: x rounds to -1 once |m| > ~1e8), the log of the ratio of
    ``nu + f^2`` is taken directly (those nodes hold e^-(huge) of the mass; log1p(-1) = -inf
    there made the moments NaN for d / s > ~2e4 with s > ~4e4)."""
    x = d * (2.0 * m_t + d) / (nu + m_t * m_t)
    far = x < -0.999
    if np.any(far):
        f = m_t + d
        with np.errstate(divide="ignore"):
            direct = np.log((nu + f * f) / (nu + m_t * m_t))
        t_part = -0.5 * (nu + 1.0) * np.where(far, direct, np.log1p(np.maximum(x, -0.999)))
    else:
        t_part = -0.5 * (nu + 1.0) * np.log1p(x)
    return t_part - d * (d + 2.0 * m_g) / (2.0 * sigma * sigma)


def _g(f, mu, sigma, nu):
    """(mu - f)(nu + f^2) - (nu + 1) sigma^2 f: zero at the stationary points of log q."""
    return (mu - f) * (nu + f * f) - (nu + 1.0) * sigma * sigma * f


def _bisect(lo, hi, mu, sigma, nu, decreasing):
    for _ in range(_ROOT_BISECT):
        mid = 0.5 * (lo + hi)
        above = _g(mid, mu, sigma, nu) > 0
        go_right = above == decreasing
        lo = np.where(go_right, mid, lo)
        hi = np.where(go_right, hi, mid)
    return 0.5 * (lo + hi)


def stationary_points(mu, sigma, nu):
    """``(f1, f2, f3, bimodal)``: modes f1 <= f3 and antimode f2 of log q (mu >= 0, canonical
    units); for a unimodal density f1 = f2 = f3 is its mode."""
    mu, sigma = np.broadcast_arrays(np.asarray(mu, float), np.asarray(sigma, float))
    c = nu + (nu + 1.0) * sigma * sigma
    disc = mu * mu - 3.0 * c
    root = np.sqrt(np.maximum(disc, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        p1 = np.where(disc > 0, c / (mu + root), 0.0)  # = (mu - root) / 3, G's local minimum
    p2 = np.where(disc > 0, (mu + root) / 3.0, mu)  # G's local maximum
    g1, g2 = _g(p1, mu, sigma, nu), _g(p2, mu, sigma, nu)
    bimodal = (disc > 0) & (g1 < 0) & (g2 > 0)
    f1 = _bisect(np.zeros_like(mu), np.where(bimodal, p1, mu), mu, sigma, nu, True)
    f2 = _bisect(p1, p2, mu, sigma, nu, False)
    f3 = _bisect(p2, mu, mu, sigma, nu, True)
    # one root: left of p1 if G(p2) <= 0 (or G is monotone), else right of p2
    right = (disc > 0) & (g1 >= 0)
    single = np.where(right, f3, f1)
    f1 = np.where(bimodal, f1, single)
    return f1, np.where(bimodal, f2, single), np.where(bimodal, f3, single), bimodal


def _neg_curvature(m, sigma, nu):
    return (nu + 1.0) * (nu - m * m) / (nu + m * m) ** 2 + 1.0 / (sigma * sigma)


def lobes(mu, sigma, nu):
    """Two lobes ``(mode, width, lower, upper)`` split at the antimode; for a unimodal density
    the second has width 0 (mass proxy -inf: the kernel drops it)."""
    f1, f2, f3, bimodal = stationary_points(mu, sigma, nu)
    inf = np.full_like(f1, np.inf)
    out = []
    for mode, lower, upper in ((f1, -inf, np.where(bimodal, f2, inf)), (f3, f2, inf)):
        curv = _neg_curvature(mode, sigma, nu)
        with np.errstate(divide="ignore", invalid="ignore"):
            width = np.minimum(1.0 / np.sqrt(np.maximum(curv, 0.0)), sigma)
        out.append((mode, width, lower, upper))
    out[1] = (out[1][0], np.where(bimodal, out[1][1], 0.0), out[1][2], out[1][3])
    return out


def level_offsets(mode_t, mode_g, lower_d, upper_d, sigma, nu, levels):
    """Offsets from a lobe's mode (given as ``mode_t`` = mode, ``mode_g`` = mode - mu) of the
    points ``levels`` nats below it on each side (ascending, shape (N, 2K+1), 0 in the middle);
    a level beyond the lobe's bound (offset ``lower_d`` <= 0, ``upper_d`` >= 0, may be infinite)
    is the bound itself.

    Bisection in log distance: on each side log q is monotone up to the bound (there are no
    other stationary points), the drop over d is at most sup(-(log q)'') d^2 / 2 (lower bracket)
    and at least the Gaussian factor's drop less the t factor's largest gain (upper bracket)."""
    nu1 = nu + 1.0
    d_min = 0.5 * np.sqrt(2.0 * levels[0]) * sigma / np.sqrt(1.0 + sigma * sigma * nu1 / nu)
    gap = np.maximum(-mode_g, 0.0)
    gain = 0.5 * nu1 * np.log1p(mode_t * mode_t / nu)
    sides = []
    for side, bound_off in ((-1.0, lower_d), (1.0, upper_d)):
        bound_d = side * bound_off
        drop_bound = np.where(
            np.isfinite(bound_d), -_log_ratio(mode_t, mode_g, bound_off, sigma, nu), np.inf
        )
        prev = np.zeros_like(mode_t)
        offs = []
        hit = np.zeros(mode_t.shape, dtype=bool)
        for level in levels:
            if side > 0:
                d_max = gap + np.sqrt(gap * gap + 2.0 * sigma * sigma * level)
            else:
                b = 2.0 * sigma * sigma * (level + gain)
                d_max = b / (np.sqrt(gap * gap + b) + gap)
            hit |= drop_bound <= level
            lo = np.maximum(d_min, prev)
            hi = np.maximum(np.minimum(d_max, bound_d), lo)
            for _ in range(_BISECT):
                mid = np.sqrt(lo * hi)
                below = -_log_ratio(mode_t, mode_g, side * mid, sigma, nu) < level
                lo = np.where(below, mid, lo)
                hi = np.where(below, hi, mid)
            d = np.where(hit, bound_d, hi)
            offs.append(np.where(hit, bound_off, side * d))
            prev = d
        sides.append(offs)
    return np.stack(sides[0][::-1] + [np.zeros_like(mode_t)] + sides[1], axis=-1)


def graded_need(mu, sigma, nu):
    """0 where the cavity is narrow (level-set panels resolve everything), else a bucket
    1, 2, ... of how many doublings of sqrt(nu) the mass spans (12 per bucket)."""
    extent = (mu + 40.0 * sigma) / np.sqrt(nu)
    with np.errstate(divide="ignore"):
        bucket = 1 + np.floor(np.log2(np.maximum(extent, 1.0)) / 12.0)
    return np.where(sigma < 0.25, 0, bucket).astype(np.int64)


@functools.cache
def graded_edges(need: int, nu: float) -> np.ndarray:
    g = np.sqrt(nu) * 2.0 ** np.arange(-3, 12 * need + 1)
    return np.concatenate([-g[::-1], [0.0], g])


@functools.cache
def _gauss_legendre(n: int):
    return legendre.leggauss(n)


def _lobe_panels(lobe, mu, sigma, nu, need):
    """Offsets of one lobe's panel edges from its mode: level sets plus graded edges."""
    mode, width, lower, upper = lobe
    levels = (np.arange(1, 5) * (np.sqrt(100.0) / 4)) ** 2 / 2.0
    off = level_offsets(
        mode, mode - mu, lower - mode, upper - mode, sigma, nu, np.append(levels, EXTRA_LEVEL)
    )
    if need:
        extra = graded_edges(need, nu)[None, :] - mode[:, None]
        off = np.sort(np.concatenate([off, np.clip(extra, off[:, :1], off[:, -1:])], axis=-1))
    return np.where(width[:, None] > 0, off, 0.0)


def canonical_moments(mu, sigma, nu, panels=None):
    """``(log Z', mean', std')`` of the tilted density in canonical units (mu >= 0), log Z'
    including the t normaliser: Z' = int t_nu(f) N(f | mu, sigma^2) df. Closed forms where the
    tilt is the cavity or its Laplace series, the Gauss-Hermite rule where the cavity is narrow
    (:func:`hermite_moments`), else ``panels(mu, sigma)`` (1-D arrays of those cavities;
    default :func:`panel_moments`, a likelihood with a moment table passes its lookup)."""
    mu, sigma = np.broadcast_arrays(np.asarray(mu, float), np.asarray(sigma, float))
    shape = mu.shape
    mu, sigma = mu.ravel(), sigma.ravel()  # 1-D inside (the batches index by position)
    out = np.empty((3, mu.size))
    # mu > 1e100 (sigma <= 1e10): the t factor is log-linear over the cavity to 1e-180, so the
    # tilt is the cavity itself and Z' = t_nu(mu) (log1p(mu^2/nu) = 2 log mu - log nu + O(1e-200))
    # sigma < 1e-100 (and mu <= 1e100): likewise, to 1e-100 relative (mean shift sigma^2 t'/t)
    far, narrow = mu > _FAR, (sigma < 1.0 / _FAR) & (mu <= _FAR)
    log_c = _log_c(nu)
    out[0, far] = log_c - (nu + 1.0) * (np.log(mu[far]) - 0.5 * np.log(nu))
    out[0, narrow] = log_c - 0.5 * (nu + 1.0) * np.log1p(mu[narrow] ** 2 / nu)
    far |= narrow
    out[1, far], out[2, far] = mu[far], sigma[far]
    # r = sigma sqrt((nu+1)/(nu+mu^2)) < 1e-8: the cavity is narrower than ~1e-8 of the t
    # factor's curvature scale, and the second-order Laplace series of the tilt (l = log t_nu at
    # mu) is exact to O(r^3) < 1e-24: log Z' = l + sigma^2 (l'' + l'^2)/2, mean = mu + sigma^2 l',
    # var = sigma^2 (1 + sigma^2 l''). (The panels cannot serve these: past mu ~ 1e12 the mode's
    # offset from mu is below mu's ulp, which can exceed sigma.)
    with np.errstate(over="ignore"):
        s2_nu, a_mu = sigma * sigma * (nu + 1.0), nu + mu * mu
    series = ~far & (s2_nu < _SERIES_R2 * a_mu)
    if series.any():
        m, s2 = mu[series], sigma[series] ** 2
        a = nu + m * m
        d1 = -(nu + 1.0) * m / a
        d2 = -(nu + 1.0) * (nu - m * m) / (a * a)
        out[0, series] = log_c - 0.5 * (nu + 1.0) * np.log1p(m * m / nu) + 0.5 * s2 * (d2 + d1 * d1)
        out[1, series] = m + s2 * d1
        out[2, series] = sigma[series] * np.sqrt(1.0 + s2 * d2)
        far |= series
    hermite = ~far & (s2_nu < _HERMITE_R2 * a_mu)
    if hermite.any():
        out[:, hermite] = hermite_moments(mu[hermite], sigma[hermite], nu)
        far |= hermite
    rest = np.flatnonzero(~far)
    if rest.size:
        if panels is None:
            out[:, rest] = panel_moments(mu[rest], sigma[rest], nu)
        else:
            out[:, rest] = panels(mu[rest], sigma[rest])
    return out[0].reshape(shape), out[1].reshape(shape), out[2].reshape(shape)


def _log_c(nu):
    """log of the t density's normaliser (scale 1)."""
    return gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi)


def hermite_moments(mu, sigma, nu) -> np.ndarray:
    """``(log Z', mean', std')`` (rows of a ``(3, n)`` array) of 1-D canonical cavities with
    ``r < 0.05`` by the Gauss-Hermite rule of ``_HERMITE_NODES`` (20) nodes in ``x = (f - mu) /
    sigma``: the t factor ``(1 + (mu + sigma x)^2 / nu)^(-(nu+1)/2)`` is analytic for
    ``|x| < sqrt(nu + mu^2) / sigma = sqrt(nu + 1) / r`` (its poles at ``f = +-i sqrt(nu)``),
    ``> 44`` here, so the rule's error (~ that radius to the power ``-2n`` times ``(2n -
    1)!!``, < 1e-41) is far below double precision; the weights are taken about their largest
    term. Measured against mpmath at r in [0.025, 0.05], nu = 4 and 5: <= 1.6e-16 in log Z,
    9e-16 in the variance; the panels (:func:`panel_moments`) lose up to 7e-13 of log Z
    relative where the cavity is far (mu ~ 1e7) and r ~ 1e-3."""
    x = _HERMITE_X
    f = mu[:, None] + sigma[:, None] * x
    log_p = -0.5 * (nu + 1.0) * np.log1p(f * f / nu) + _LOG_HERMITE_W
    top = log_p.max(axis=1, keepdims=True)
    w = np.exp(log_p - top)
    total = w.sum(axis=1)
    log_z = _log_c(nu) + top[:, 0] + np.log(total) - 0.5 * np.log(2.0 * np.pi)
    xbar = (w @ x) / total
    d = x[None, :] - xbar[:, None]
    var = np.einsum("ij,ij->i", w, d * d) / total
    return np.stack([log_z, mu + sigma * xbar, sigma * np.sqrt(var)])


def panel_moments(mu, sigma, nu) -> np.ndarray:
    """``(log Z', mean', std')`` (rows of a ``(3, n)`` array) of 1-D canonical cavities by
    Gauss-Legendre panels about each lobe (any cavity; :func:`canonical_moments` leaves them
    the cavities no closed form serves)."""
    out = np.empty((3, mu.size))
    need = graded_need(mu, sigma, nu)
    # shoulder: unimodal, but G has its two critical points (disc > 0): the cavity's side of
    # the tilt is a shoulder about to become a lobe, whose mass times its distance squared the
    # variance needs; the panels get the cavity's own edges too (_SHOULDER_EDGES)
    c = nu + (nu + 1.0) * sigma * sigma
    with np.errstate(over="ignore", invalid="ignore"):
        shoulder = (mu * mu > 3.0 * c) & ~stationary_points(mu, sigma, nu)[3]
    for w in np.unique(need):
        for sh in (False, True):
            sel = np.flatnonzero((need == w) & (shoulder == sh))
            for i in range(0, sel.size, _MOMENT_BATCH):  # bounded temporaries (~100 KB/point)
                b = sel[i : i + _MOMENT_BATCH]
                out[:, b] = _moments_group(mu[b], sigma[b], nu, int(w), sh)
    return out


def _moments_group(mu, sigma, nu, need, shoulder=False):
    x, wts = _gauss_legendre(N_NODES)
    lbs = lobes(mu, sigma, nu)
    anchor = lbs[0][0]
    parts = []
    for k, lobe in enumerate(lbs):
        off = _lobe_panels(lobe, mu, sigma, nu, need)
        if shoulder and k == 0:  # (unimodal: the second lobe is empty)
            extra = (mu[:, None] - lobe[0][:, None]) + sigma[:, None] * _SHOULDER_EDGES
            # not clipped at the top: the shoulder lies past the last level set (its density is
            # ~80 nats down, but it spans ~1e9 widths and sits ~1e9 away)
            off = np.sort(np.concatenate([off, np.maximum(extra, off[:, :1])], axis=-1))
        half = 0.5 * (off[:, 1:] - off[:, :-1])
        d = 0.5 * (off[:, 1:] + off[:, :-1])[..., None] + half[..., None] * x  # (N, P, n)
        mode = lobe[0]
        # log q(mode) - log q(anchor), and log q(mode + d) - log q(mode) at the nodes
        shift = _log_ratio(anchor, anchor - mu, mode - anchor, sigma, nu)
        col = (slice(None), None, None)
        log_w = _log_ratio(mode[col], (mode - mu)[col], d, sigma[col], nu)
        parts.append((mode, shift, d, log_w, half[..., None] * wts))
    top = np.max([p[1] for p in parts], axis=0)
    mass, first = 0.0, 0.0
    dens = []
    for mode, shift, d, log_w, hw in parts:
        q = np.exp(log_w + (shift - top)[:, None, None]) * hw
        m_j = q.sum(axis=(1, 2))
        e_j = (q * d).sum(axis=(1, 2)) / np.where(m_j > 0, m_j, 1.0)
        dens.append((mode, d, q, m_j, e_j))
        mass = mass + m_j
        first = first + m_j * (mode - anchor + e_j)
    mean_off = first / mass  # mean - anchor
    var = 0.0
    for mode, d, q, m_j, e_j in dens:
        inner = (q * (d - e_j[:, None, None]) ** 2).sum(axis=(1, 2))
        var = var + inner + m_j * (mode - anchor + e_j - mean_off) ** 2
    var = var / mass
    log_q_anchor = -0.5 * (nu + 1.0) * np.log1p(anchor * anchor / nu) - (anchor - mu) ** 2 / (
        2.0 * sigma * sigma
    )
    log_z = (
        _log_c(nu) + log_q_anchor + top + np.log(mass) - np.log(sigma) - 0.5 * np.log(2.0 * np.pi)
    )
    return log_z, anchor + mean_off, np.sqrt(var)


def cavity_shift(mu, sigma, nu):
    """``(mask, mean' - mu')`` where :func:`canonical_moments` gives the tilted mean as the cavity
    mean plus a shift (``mu' > 1e100`` or ``sigma' < 1e-100``: none; its Laplace series:
    ``sigma'^2 l'``), the shift computed as such. ``y + s mean'`` rounds it away once
    ``|mu - y|`` dwarfs it: at ``|y - mu| = 1e12`` the mean carried ``ulp(1e12) ~ 1e-4`` of
    noise, which kept EP's sites for such outliers from ever converging."""
    with np.errstate(over="ignore", invalid="ignore"):
        far = (mu > _FAR) | (sigma < 1.0 / _FAR)
        series = ~far & (sigma * sigma * (nu + 1.0) < _SERIES_R2 * (nu + mu * mu))
        shift = np.where(series, -(sigma * sigma) * (nu + 1.0) * mu / (nu + mu * mu), 0.0)
    return far | series, shift
