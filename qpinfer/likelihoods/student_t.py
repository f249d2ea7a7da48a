# Over 400 lines: the likelihood with all the kernel hooks its two lobes need (stationary points, antimode, edges).
"""Student-t regression noise for EP and QP (issue #15), y real.

    p(y | f) = t_nu((y - f) / s) / s,   t_nu(x) = C_nu (1 + x^2 / nu)^(-(nu + 1) / 2),
    C_nu = Gamma((nu + 1) / 2) / (Gamma(nu / 2) sqrt(nu pi)),   nu > 0, s > 0.

Not log-concave: the tilted density ``q(f) = p(y|f) N(f | mu, sigma^2) / Z`` (paper 000 eq. (5))
is bimodal when the cavity sits far from the observation, and EP/QP site precisions may be
negative (:mod:`qpinfer.inference.ep` keeps them for ``log_concave = False``).

Canonical coordinates. ``f' = (f - y) / s`` maps the tilted family onto itself with
``mu' = (mu - y) / s``, ``sigma' = sigma / s``, and ``f' -> -f'`` mirrors ``mu'``, so
``sigma*(mu, sigma, y) = s sigma*(|mu'|, sigma', 0)`` and ``sigma* / sigma_EP`` depends on
``(|mu - y| / s, sigma / s)`` for each nu only. In these units (``mu' >= 0``) the stationary
points of ``log q`` solve the cubic

    G(f) = (mu' - f)(nu + f^2) - (nu + 1) sigma'^2 f = 0,    all roots in [0, mu'],

one root (unimodal) or three: the likelihood's mode near 0, an antimode and the cavity's mode
near mu'. They are bracketed by the critical points of G and found by bisection. The QP kernel
(eq. (7), :mod:`qpinfer.sigma.kernel`) gets the two lobes split at the antimode (``_lobes``), panel edges
on log-density level sets of each lobe found by bisection (``_lobe_edges``: the lobes are not
log-concave, so the kernel's Newton steps are not used), the level sets ending exactly at the
antimode, and geometric edges ``+-sqrt(nu) 2^k`` (``_breakpoints``) where the polynomial tails
of the t factor span many decades (wide cavities).

The tilted moments (EP's projection, eq. (5)) and ``log Z`` have no closed form: they are
Gauss-Legendre sums over the same panels, with every node written as an offset from its lobe's
mode and the log density relative to the mode (``_log_ratio``) so that no digits cancel.
Where the cavity is narrow relative to the t factor's curvature scale,
``r = sigma' sqrt((nu + 1) / (nu + mu'^2)) < 1e-3``, the tilted density is Gaussian to double
precision (its skewness and excess kurtosis are O(r^3) and O(r^4), and sigma*/sigma_EP - 1 is
second order in them: measured against mpmath <= 1e-19 at r = 1e-3 for nu = 0.1 ... 1e5), and
sigma* is the EP std (``_sigma_closed_form``). Supported: ``sigma / s <= 1e10`` (a ``ValueError`` naming
sigma beyond); every finite mu.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
from numpy.polynomial import legendre
from scipy.special import gammaln

from qpinfer.checks import finite_array as _finite
from qpinfer.likelihoods.base import Likelihood

__all__ = ["DEFAULT_NU", "MAX_SIGMA_RATIO", "StudentT", "check_nu_scale", "parse_name"]

DEFAULT_NU = 4.0
#: largest supported cavity std in units of the noise scale
MAX_SIGMA_RATIO = 1e10
#: r = sigma' sqrt((nu + 1) / (nu + mu'^2)) below which the tilt is Gaussian to double precision
GAUSSIAN_R = 1e-3
_SERIES_R2 = 1e-16  # r^2 below which the tilt's moments are its Laplace series (canonical_moments)
_FAR = 1e100  # |mu - y| / s beyond which the tilt is the cavity (sigma / s <= 1e10)
_EXTRA_LEVEL = 80.0  # nats: a deeper last level set for the polynomial tails of the t factor
_BISECT = 40
_ROOT_BISECT = 64
_N_NODES = 20
_MOMENT_BATCH = 4096  # points per vectorized moment batch


def _positive(name: str, value: Any) -> float:
    v = np.nan
    if not isinstance(value, bool | str):
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = np.nan
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0 for student_t, got {value!r}")
    return v


def check_nu_scale(nu: Any, scale: Any) -> tuple[float, float]:
    """``(float(nu), float(scale))``, each finite and > 0, else ``ValueError`` naming it."""
    return _positive("nu", nu), _positive("scale", scale)


def parse_name(name: Any) -> tuple[float, float] | None:
    """``(nu, scale)`` of ``"student_t"`` (defaults) or ``"student_t(nu=4.0, scale=1.0)"``
    (:attr:`StudentT.name`), else ``None``; a malformed number is a ``ValueError``."""
    if not isinstance(name, str) or not name.startswith("student_t"):
        return None
    if name == "student_t":
        return DEFAULT_NU, 1.0
    m = re.fullmatch(r"student_t\(nu=([^,()]*), scale=([^,()]*)\)", name)
    if m is None:
        return None
    try:
        nu, scale = float(m.group(1)), float(m.group(2))
    except ValueError:
        raise ValueError(f"nu or scale in likelihood name {name!r} is not a number") from None
    return check_nu_scale(nu, scale)


# ----------------------------------------------------------------- canonical units (y=0, s=1)


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
        mode, mode - mu, lower - mode, upper - mode, sigma, nu, np.append(levels, _EXTRA_LEVEL)
    )
    if need:
        extra = graded_edges(need, nu)[None, :] - mode[:, None]
        off = np.sort(np.concatenate([off, np.clip(extra, off[:, :1], off[:, -1:])], axis=-1))
    return np.where(width[:, None] > 0, off, 0.0)


def canonical_moments(mu, sigma, nu):
    """``(log Z', mean', std')`` of the tilted density in canonical units (mu >= 0), log Z'
    including the t normaliser: Z' = int t_nu(f) N(f | mu, sigma^2) df."""
    mu, sigma = np.broadcast_arrays(np.asarray(mu, float), np.asarray(sigma, float))
    shape = mu.shape
    mu, sigma = mu.ravel(), sigma.ravel()  # 1-D inside (the batches index by position)
    out = np.empty((3, mu.size))
    # mu > 1e100 (sigma <= 1e10): the t factor is log-linear over the cavity to 1e-180, so the
    # tilt is the cavity itself and Z' = t_nu(mu) (log1p(mu^2/nu) = 2 log mu - log nu + O(1e-200))
    # sigma < 1e-100 (and mu <= 1e100): likewise, to 1e-100 relative (mean shift sigma^2 t'/t)
    far, narrow = mu > _FAR, (sigma < 1.0 / _FAR) & (mu <= _FAR)
    log_c = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi)
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
        series = ~far & (sigma * sigma * (nu + 1.0) < _SERIES_R2 * (nu + mu * mu))
    if series.any():
        m, s2 = mu[series], sigma[series] ** 2
        a = nu + m * m
        d1 = -(nu + 1.0) * m / a
        d2 = -(nu + 1.0) * (nu - m * m) / (a * a)
        out[0, series] = log_c - 0.5 * (nu + 1.0) * np.log1p(m * m / nu) + 0.5 * s2 * (d2 + d1 * d1)
        out[1, series] = m + s2 * d1
        out[2, series] = sigma[series] * np.sqrt(1.0 + s2 * d2)
        far |= series
    need = graded_need(mu, sigma, nu)
    for w in np.unique(need[~far]):
        sel = np.flatnonzero((need == w) & ~far)
        for i in range(0, sel.size, _MOMENT_BATCH):  # bounded temporaries (~100 KB per point)
            b = sel[i : i + _MOMENT_BATCH]
            out[:, b] = _moments_group(mu[b], sigma[b], nu, int(w))
    return out[0].reshape(shape), out[1].reshape(shape), out[2].reshape(shape)


def _moments_group(mu, sigma, nu, need):
    x, wts = _gauss_legendre(_N_NODES)
    lbs = lobes(mu, sigma, nu)
    anchor = lbs[0][0]
    parts = []
    for lobe in lbs:
        off = _lobe_panels(lobe, mu, sigma, nu, need)
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
    log_c = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi)
    log_z = log_c + log_q_anchor + top + np.log(mass) - np.log(sigma) - 0.5 * np.log(2.0 * np.pi)
    return log_z, anchor + mean_off, np.sqrt(var)


# ------------------------------------------------------------------------------ the likelihood


class StudentT(Likelihood):
    """Student-t noise p(y | f) = t_nu((y - f)/scale)/scale, y real (issue #15)."""

    _n_nodes = _N_NODES
    #: not log-concave: EP/QP sites may have negative precisions (kept by qpinfer.inference.ep)
    log_concave = False
    _snap_to_bounds = True  # lobes end exactly at the antimode

    def __init__(self, nu: float = DEFAULT_NU, scale: float = 1.0) -> None:
        self.nu, self.scale = check_nu_scale(nu, scale)
        self.name = f"student_t(nu={self.nu!r}, scale={self.scale!r})"
        self._log_c = float(
            gammaln(0.5 * (self.nu + 1.0)) - gammaln(0.5 * self.nu) - 0.5 * np.log(self.nu * np.pi)
        )

    def __repr__(self) -> str:
        return f"StudentT(nu={self.nu!r}, scale={self.scale!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StudentT) and (other.nu, other.scale) == (self.nu, self.scale)

    def __hash__(self) -> int:
        return hash(("student_t", self.nu, self.scale))

    def check_y(self, y) -> np.ndarray:
        return _finite("y", y)

    def log_pdf(self, f, y) -> np.ndarray:
        x = (np.asarray(y, dtype=np.float64) - np.asarray(f, dtype=np.float64)) / self.scale
        return self._log_c - np.log(self.scale) - 0.5 * (self.nu + 1.0) * np.log1p(x * x / self.nu)

    # canonical units ---------------------------------------------------------------------

    def reduced(self, mu, sigma, y):
        """``(|mu - y| / s, sigma / s, sign)``; ``ValueError`` naming sigma beyond the range."""
        mu, sigma, y = np.broadcast_arrays(
            np.asarray(mu, float), np.asarray(sigma, float), np.asarray(y, float)
        )
        with np.errstate(over="ignore"):
            d = (mu - y) / self.scale
            s = sigma / self.scale
        bad = ~(s <= MAX_SIGMA_RATIO)
        if bad.any():
            raise ValueError(
                f"sigma must be <= {MAX_SIGMA_RATIO:g} * scale for student_t (scale="
                f"{self.scale!r}); got {sigma[bad].flat[0]!r}"
            )
        bad = ~(s > 0) | ~np.isfinite(d)
        if bad.any():
            i = np.flatnonzero(bad)[0]
            name = "sigma" if not s.flat[i] > 0 else "mu"
            raise ValueError(
                f"{name} / scale is not a positive finite float64 for student_t: mu="
                f"{mu.flat[i]!r}, sigma={sigma.flat[i]!r}, y={y.flat[i]!r}"
            )
        return np.abs(d), s, np.where(d < 0, -1.0, 1.0)

    def log_z(self, mu, sigma, y) -> np.ndarray:
        d, s, _ = self.reduced(mu, sigma, y)
        return canonical_moments(d, s, self.nu)[0] - np.log(self.scale)

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std by Gauss-Legendre panels about each lobe's mode (no closed form)."""
        mu, sigma, y = np.broadcast_arrays(
            np.asarray(mu, float), np.asarray(sigma, float), np.asarray(y, float)
        )
        d, s, sign = self.reduced(mu, sigma, y)
        _, mean, std = canonical_moments(d, s, self.nu)
        near_cavity, shift = _cavity_shift(d, s, self.nu)
        mean = np.where(near_cavity, mu + sign * self.scale * shift, y + sign * self.scale * mean)
        return mean, self.scale * std

    # hooks of the exact sigma* kernel (qpinfer.sigma.kernel) ---------------------------------------

    def canonical(self, mu, y):
        """Shift and mirror: sigma*(mu, sigma, y) = sigma*(|mu - y|, sigma, 0)."""
        return np.abs(mu - y), np.zeros_like(y)

    _closed_form_takes_moments = True  # the v2 table passes the EP moments it has already

    def _sigma_closed_form(self, mu, sigma, y, moments=None):
        """The Gaussian regime r = sigma' sqrt((nu+1)/(nu+mu'^2)) < GAUSSIAN_R: sigma* = EP std
        (``moments``: EP's ``(mean, std)`` at these cavities if the caller has them)."""
        d, s, _ = self.reduced(mu, sigma, y)
        mask = s * np.sqrt(self.nu + 1.0) < GAUSSIAN_R * np.sqrt(self.nu + d * d)
        values = np.zeros_like(d)
        if mask.any():
            if moments is not None:
                values[mask] = np.broadcast_to(moments[1], d.shape)[mask]
            else:
                values[mask] = self.scale * canonical_moments(d[mask], s[mask], self.nu)[2]
        return mask, values

    def _rescale(self, mu, sigma, y):
        """Every cavity is computed in units of the scale (y = 0 after :meth:`canonical`); none
        to do at scale 1 (the v2 table's lookups then need no second EP moment computation)."""
        if self.scale == 1.0:
            return None
        return np.ones(mu.shape, dtype=bool), mu / self.scale, sigma / self.scale, self.scale

    # The kernel's coordinate is x = f - a, a = _anchor(mu, sigma): the cavity mean where the
    # t factor's lobe is negligible (mu > 30 sigma: it holds < e^-400 of the mass), else 0, so
    # that node positions are exact about the lobe that carries the mass (absolute nodes about
    # f ~ mu would carry 1e-16 mu / sigma relative errors).

    def _breakpoints(self, mu, sigma, y):
        need = np.where(_anchor(mu, sigma) > 0, 0, graded_need(mu, sigma, self.nu))
        return need, lambda w: graded_edges(int(w), self.nu)

    def _log_tilted(self, f, mu, sigma, y, derivative=True):
        """-(nu+1)/2 log(1 + f^2/nu) - (f - mu)^2/(2 sigma^2) at f = a + x (``f`` is x here).
        With a = 0 the Gaussian term about the t factor's lobe carries a rounding of
        ~1e-16 mu^2/(2 sigma^2) <= 5e-14 nats (mu <= 30 sigma)."""
        a = _anchor(mu, sigma)
        ft = f + a
        t = (f + (a - mu)) / sigma
        log_q = -0.5 * t * t - 0.5 * (self.nu + 1.0) * np.log1p(ft * ft / self.nu)
        if not derivative:
            return log_q, None
        return log_q, -(self.nu + 1.0) * ft / (self.nu + ft * ft) - t / sigma

    def _lobes(self, mu, sigma, y):
        a = _anchor(mu, sigma)
        return [(m - a, w, lo - a, up - a) for m, w, lo, up in lobes(mu, sigma, self.nu)]

    def _lobe_edges(self, mode, width, lower, upper, mu, sigma, y, levels):
        """Panel edges of one lobe (replaces the kernel's Newton level sets: not log-concave)."""
        a = _anchor(mu, sigma)
        levels = np.append(levels, _EXTRA_LEVEL)
        off = level_offsets(
            mode + a, mode + (a - mu), lower - mode, upper - mode, sigma, self.nu, levels
        )
        edges = mode[:, None] + off
        # a side whose level sets reach the antimode ends exactly on it (no flat gap between
        # the lobes); otherwise the kernel adds the gap's constant integrand exactly
        edges[:, 0] = np.where(off[:, 0] == lower - mode, lower, edges[:, 0])
        edges[:, -1] = np.where(off[:, -1] == upper - mode, upper, edges[:, -1])
        return np.where(width[:, None] > 0, edges, mode[:, None])


def _cavity_shift(mu, sigma, nu):
    """``(mask, mean' - mu')`` where :func:`canonical_moments` gives the tilted mean as the cavity
    mean plus a shift (``mu' > 1e100`` or ``sigma' < 1e-100``: none; its Laplace series:
    ``sigma'^2 l'``), the shift computed as such. ``y + s mean'`` rounds it away once
    ``|mu - y|`` dwarfs it: at ``|y - mu| = 1e12`` the mean carried ``ulp(1e12) ~ 1e-4`` of
    noise, which kept EP's sites for such outliers from ever converging (issue #26)."""
    with np.errstate(over="ignore", invalid="ignore"):
        far = (mu > _FAR) | (sigma < 1.0 / _FAR)
        series = ~far & (sigma * sigma * (nu + 1.0) < _SERIES_R2 * (nu + mu * mu))
        shift = np.where(series, -(sigma * sigma) * (nu + 1.0) * mu / (nu + mu * mu), 0.0)
    return far | series, shift


def _anchor(mu, sigma):
    return np.where(mu > 30.0 * sigma, mu, 0.0)
