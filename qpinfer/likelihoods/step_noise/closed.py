"""sigma* of the step-noise likelihood from its closed-form tilted quantile function.

Canonical ``y = +1``, ``z = mu / sigma``, ``a = -z`` the step in standardized units
``x = (f - mu) / sigma``. The tilted density is ``phi(x) w(x) / Z``, ``w = eps`` left of ``a`` and
``1 - eps`` right of it, ``Z = eps Phi(-z) + (1 - eps) Phi(z)``: two lobes of masses
``m_L = eps Phi(a) / Z`` and ``m_R = 1 - m_L``, and the tilted quantile function is closed form on
each side of ``u_0 = m_L``::

    Q(u) = Phi^-1(u / c_1)            u < u_0,  c_1 = eps / Z <= 1
    Q(u) = -Phi^-1((1 - u) / c_2)      u > u_0,  c_2 = (1 - eps) / Z >= 1

so ``sigma* / sigma = R(z, eps) = int_0^1 Q(u) Phi^-1(u) du`` (Zhang et al., 2020, eq. (7)). Each side is
integrated in the variable that keeps its integrand smooth:

* **left**, in ``x`` (``u = c_1 Phi(x)``, ``x <= a``): ``c_1 int x Phi^-1(c_1 Phi(x)) phi(x) dx``.
  An argument of ``Phi^-1`` above 1/2 is taken from its complement ``(1 - c_1) + c_1 Phi(-x)``, a
  sum of positive terms (``1 - c_1 = (1 - 2 eps) Phi(z) / Z``). In ``u`` or ``t = Phi^-1(u)``
  this side is near-singular where the left lobe holds the Gaussian's centre and ends far in its
  tail (``Q`` climbs steeply to ``a`` as ``u -> u_0``); in ``x`` it is not.
* **right**, in ``t`` (``u = Phi(t)``, ``t >= t_0 = Phi^-1(u_0)``): ``int T(t) t phi(t) dt``,
  ``T = Q(Phi(t))``, whose argument above 1/2 is ``p + Phi(t) / c_2``, again positive terms
  (``p = 1 - 1 / c_2 = (1 - 2 eps) Phi(-z) / (1 - eps)``). In ``x`` this side is near-singular
  where the left lobe's mass is small (``Phi^-1(F)``, ``F ~ u_0 + k (x - a)``: the panel kernel's
  graded breakpoints); in ``t`` it is not.

Cancellation. Exactly one lobe holds the Gaussian's centre. Its integrand is ``x (Phi^-1(.) - x)``
(resp. ``t (T - t)``) with the Gaussian part ``int x^2 phi`` added in closed form
(``m_L - c_1 a phi(a)``, resp. ``m_R + t_0 phi(t_0)``), so a nearly Gaussian tilt is summed to
its small correction. The other lobe is a tail lobe beyond the step, ``Q = a + O(1 / |a|)``: it is
integrated as ``Q - a`` and ``|a| phi(t_0)`` (``int Phi^-1 = -phi(Phi^-1)``) restores the sum. A
right tail lobe's ``D = Q - a`` (``a > 1.5``) solves ``-log(Phi(-(a + D)) / Phi(-a)) = L``,
``L = log(m_R / Phi(-t))``: ``Phi^-1`` (in logs) gives it to ``ulp(a)``, i.e. ``1e-16 a^2``
relative, and one Newton step on the Mills-ratio form ``a D + D^2 / 2 - log(erfcx((a + D) / sqrt 2)
/ erfcx(a / sqrt 2))``, free of cancellation, leaves an error ``~(1e-16 a)^2 / a``: exact to
rounding up to eps = 0's ``a = 1e8`` (a normal truncated 1e8 sd into its tail). ``rho = m_L / m_R``
is a ratio of ``Phi``s, not of their logs (``ulp(log Phi(-30))`` is 5e-14).

Quadrature. Each side is cut where ``phi`` is ``e^-42`` below its largest value on the side (a
dropped part ``< 1e-17`` of sigma*; a centre lobe at ``|x| = 9.17``). It has at most one feature,
the knee of ``Phi^-1(p + Phi(t))`` at ``t = Phi^-1(p) < 0`` (right) or of
``Phi^-1((1 - c_1) + c_1 Phi(-x))`` at ``x = -Phi^-1((1 - c_1) / c_1) > 0`` (left): smooth, of
width ``~1 / |knee|``, its complex singularities ``~pi / |knee|`` off the axis. The side is cut in
three panels, at the knee where it lies inside (and the longer part halved), else in thirds, so
the singularities sit next to a panel end and no panel is longer than 9.2; a panel gets 20, 28 or
36 Gauss-Legendre nodes for lengths up to 3, 6 and 9.2 (about 75 per side on the paper domain).
Against the same sums with 100 nodes per panel the result moves by <= 1e-15 for every eps in
[0, 0.5) (29 values, 1e-300 to 0.49) and z on a 0.025 grid over [-12, 9] plus -30, -1e4, -1e8;
against mpmath (``tests/likelihoods/test_step_noise_closed_form.py``) it is within ~1e-15. The Gauss-Legendre
weights are refined in 40-digit decimal arithmetic: numpy's ``leggauss`` weights are off by up to
1e-12 at n >= 40, which biased sigma* by ~5e-15.

No ``z`` is special-cased here and no ``eps`` but 0 (no left lobe): the caller
(``qpinfer.likelihoods.step_noise.StepNoise._sigma_qp_exact``) answers the regimes where the
tilted density is the cavity (``sigma* = sigma``) and maps eps = 0's deep tail to ``z = -1e8``.
"""

from __future__ import annotations

import functools
from decimal import Decimal, localcontext

import numpy as np
from numpy.polynomial import legendre
from scipy.special import erfcx, log_ndtr, ndtri, ndtri_exp

__all__ = ["gauss_legendre", "sigma_ratio"]

_TAIL_NATS = 42.0  # each side is cut where phi is e^-42 below its largest value there
_EDGE = float(np.sqrt(2.0 * _TAIL_NATS))  # 9.17: where a side holding the centre is cut
_NEWTON_FROM = 1.5  # a right tail lobe's D = Q - a gets the Newton step where a > this
_BATCH = 2048  # points per vectorized block (its arrays stay in cache)
_SQRT_HALF = float(np.sqrt(0.5))
_INV_SQRT_2PI = float(1.0 / np.sqrt(2.0 * np.pi))
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))


@functools.cache
def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n``-point Gauss-Legendre nodes and weights on [-1, 1] to ~1 ulp: numpy's nodes refined
    by two Newton steps in 40-digit decimal arithmetic, the weights ``2 (1 - x^2) / (n
    P_{n-1}(x))^2`` from them (``numpy.polynomial.legendre.leggauss``'s weights are off by up to
    1e-12 for n >= 40). About 10 ms for n = 36, once per n."""
    x0, _ = legendre.leggauss(n)
    xs, ws = [], []
    with localcontext() as ctx:
        ctx.prec = 40
        for k in range((n + 1) // 2):  # the nodes >= 0, largest first
            x = Decimal(float(x0[n - 1 - k]))
            for step in range(3):
                p0, p1 = Decimal(1), x  # P_{j-1}(x), P_j(x)
                for j in range(2, n + 1):
                    p0, p1 = p1, ((2 * j - 1) * x * p1 - (j - 1) * p0) / j
                if step < 2:
                    x -= p1 * (1 - x * x) / (n * (p0 - x * p1))
            xs.append(float(x))
            ws.append(float(2 * (1 - x * x) / (n * p0) ** 2))
    xs, ws = np.array(xs), np.array(ws)
    m = n // 2
    return np.concatenate([-xs[:m], xs[::-1]]), np.concatenate([ws[:m], ws[::-1]])


def sigma_ratio(z, eps: float) -> np.ndarray:
    """``sigma* / sigma`` of the step-noise likelihood at canonical ``z = mu / sigma`` (y = +1):
    finite ``z <= 37`` (``>= -1e8`` where eps = 0) and ``eps`` in [0, 0.5); a flat array."""
    z = np.asarray(z, dtype=np.float64).ravel()
    out = np.empty(z.shape)
    with np.errstate(under="ignore"):
        for start in range(0, z.size, _BATCH):
            part = slice(start, start + _BATCH)
            out[part] = _ratio_block(z[part], float(eps))
    return out


def _ratio_block(z, eps):
    a = -z
    m_l, m_r, c1, one_m_c1, p, inv_c2, log_pz, log_m_r = _side_terms(z, eps)
    with np.errstate(divide="ignore"):
        t0 = np.where(m_l <= 0.5, ndtri(m_l), -ndtri(m_r))  # -inf where m_L = 0
    phi_t0 = np.exp(-0.5 * t0 * t0) * _INV_SQRT_2PI
    centre_left = a >= 0.0  # the left lobe holds the Gaussian's centre, the right one a tail
    # the centre lobe's int x^2 phi: c_1 (Phi(a) - a phi(a)) = m_L - c_1 a phi(a) on the left,
    # Phi(-t_0) + t_0 phi(t_0) = m_R + t_0 phi(t_0) on the right; the tail lobe's shift |a| phi(t_0)
    left_gauss = m_l - c1 * a * (np.exp(-0.5 * a * a) * _INV_SQRT_2PI)
    right_gauss = m_r + np.where(m_l > 0.0, t0, 0.0) * phi_t0
    total = np.where(centre_left, left_gauss, right_gauss) + np.abs(a) * phi_t0
    if eps > 0.0:
        total += c1 * _left_side(a, c1, one_m_c1, centre_left)
    total += _right_side(a, t0, p, inv_c2, log_pz, log_m_r, centre_left)
    return total


def _side_terms(z, eps):
    """Per point: ``m_L``, ``m_R``, ``c_1``, ``1 - c_1``, ``p``, ``1 / c_2``, ``log Phi(z)`` and
    ``log m_R``, each without cancellation. ``rho = m_L / m_R`` from ``Phi(z)`` itself where it is
    a normal float, else (eps = 0 or subnormal: z < -37) in logs."""
    _, pz, pmz = _normal(z)
    normal = pz > 1e-290
    pz_n = np.where(normal, pz, 1.0)
    log_pz = np.where(normal, np.log(pz_n), log_ndtr(z))
    if eps == 0.0:
        rho = np.zeros_like(z)
    else:
        ratio = eps / (1.0 - eps)
        with np.errstate(over="ignore", divide="ignore"):
            in_logs = np.exp(np.minimum(np.log(ratio) + np.log(pmz) - log_pz, 700.0))
            rho = np.where(normal, ratio * pmz / pz_n, in_logs)
    m_r = 1.0 / (1.0 + rho)
    m_l = rho * m_r
    with np.errstate(divide="ignore", invalid="ignore"):
        c1 = np.where(m_l > 0.0, m_l / pmz, 0.0)  # eps / Z
    one_m_c1 = (1.0 - 2.0 * eps) / (1.0 - eps) * m_r  # (1 - 2 eps) Phi(z) / Z
    p = (1.0 - 2.0 * eps) / (1.0 - eps) * pmz  # 1 - 1 / c_2
    inv_c2 = pz + eps / (1.0 - eps) * pmz  # Z / (1 - eps)
    return m_l, m_r, c1, one_m_c1, p, inv_c2, log_pz, -np.log1p(rho)


def _left_side(a, c1, one_m_c1, centre_left):
    """``int_0^{u_0} (Q - shift) Phi^-1(u) du / c_1`` in x: ``x (Phi^-1 - x)`` on a centre lobe
    (its Gaussian part is the caller's), ``(x - a) Phi^-1`` on a tail lobe."""
    am = np.minimum(a, 0.0)
    lo = -np.sqrt(am * am + 2.0 * _TAIL_NATS)
    hi = np.minimum(a, _EDGE)
    with np.errstate(all="ignore"):
        knee = -ndtri(one_m_c1 / c1)  # c_1 Phi(-x) = 1 - c_1; NaN where the ratio is >= 1
    total = np.zeros(a.shape)
    for rows, pa, pb, n in _panel_jobs(lo, hi, np.where(knee > 0.0, knee, np.nan)):
        x, w, from_b = _nodes(pa, pb, n)
        dens, cdf, sf = _normal(x)
        c = c1[rows, None]
        u = c * cdf
        upper = u > 0.5
        g = ndtri(np.where(upper, one_m_c1[rows, None] + c * sf, np.maximum(u, 5e-324)))
        g = np.where(upper, -g, g)  # Phi^-1(c_1 Phi(x))
        x_a = -(from_b + (hi[rows] - pb)[:, None])  # x - a, exact (hi = a on a tail lobe)
        value = np.where(centre_left[rows, None], x * (g - x), x_a * g)
        total[rows] += np.einsum("ij,ij->i", value * dens, w)
    return total


def _right_side(a, t0, p, inv_c2, log_pz, log_m_r, centre_left):
    """``int_{u_0}^1 (Q - shift) Phi^-1(u) du`` in t: ``t (T - t)`` on a centre lobe (its
    Gaussian part is the caller's), ``t (T - a)`` on a tail lobe."""
    lo = np.maximum(t0, -_EDGE)
    tm = np.minimum(-t0, 0.0)
    hi = np.sqrt(tm * tm + 2.0 * _TAIL_NATS)
    knee = ndtri(p)
    tail = centre_left & (a > _NEWTON_FROM)
    total = np.zeros(a.shape)
    for rows, pa, pb, n in _panel_jobs(lo, hi, np.where(knee < 0.0, knee, np.nan)):
        t, w, _ = _nodes(pa, pb, n)
        dens, cdf, sf = _normal(t)
        value = np.empty(t.shape)
        far = tail[rows]
        if far.any():
            r = rows[far]
            value[far] = _tail_offset(a[r], sf[far], log_pz[r], log_m_r[r])
        near = ~far
        if near.any():
            r = rows[near]
            c = inv_c2[r, None]
            q = sf[near] * c  # Phi(-t) / c_2 = 1 - F(T)
            upper = q > 0.5
            big_t = ndtri(np.where(upper, p[r, None] + cdf[near] * c, q))
            big_t = np.where(upper, big_t, -big_t)  # T = Q(Phi(t))
            value[near] = big_t - np.where(centre_left[r, None], a[r, None], t[near])
        total[rows] += np.einsum("ij,ij->i", value * t * dens, w)
    return total


def _tail_offset(a, sf, log_pz, log_m_r):
    """``D = Q - a >= 0`` on a right tail lobe: ``Phi(-(a + D)) = Phi(-a) Phi(-t) / m_R`` by
    ``Phi^-1`` in logs (``Phi(-a)`` underflows for eps = 0 at a > 37), then one Newton step on
    ``a D + D^2 / 2 - log(erfcx((a + D) / sqrt 2) / erfcx(a / sqrt 2)) = L``."""
    a = a[:, None]
    big_l = log_m_r[:, None] - np.log(sf)  # L = -log(Phi(-t) / m_R) >= 0
    d = -ndtri_exp(log_pz[:, None] - big_l) - a
    ex = erfcx((a + d) * _SQRT_HALF)
    resid = a * d + 0.5 * d * d - np.log(ex / erfcx(a * _SQRT_HALF)) - big_l
    return d - resid * ex / _SQRT_2_OVER_PI  # the slope is the hazard phi / Phi(-(a + D))


def _panel_jobs(lo, hi, knee):
    """A side's three panels on [lo, hi] -- cut at ``knee`` where it lies inside and the longer
    part halved, else in thirds -- grouped by node count: ``(rows, lo, hi, n)`` per group, each
    point at most once in a group."""
    inside = (knee > lo) & (knee < hi)
    cut = np.where(inside, knee, lo + (hi - lo) / 3.0)
    right_longer = (hi - cut) >= (cut - lo)
    e1 = np.where(inside & ~right_longer, 0.5 * (lo + cut), cut)
    e2 = np.where(inside, np.where(right_longer, 0.5 * (cut + hi), cut), lo + 2.0 * (hi - lo) / 3.0)
    for pa, pb in ((lo, e1), (e1, e2), (e2, hi)):
        n = _node_count(pb - pa)
        for k in np.unique(n):
            rows = np.flatnonzero(n == k)
            yield rows, pa[rows], pb[rows], int(k)


def _node_count(length):
    """Gauss-Legendre nodes of a panel of ``length`` (<= 9.2 in standardized units)."""
    return np.where(length <= 3.0, 20, np.where(length <= 6.0, 28, 36))


def _nodes(pa, pb, n):
    """Nodes, weights and the nodes' distances from ``pb``, shape (rows, n), on [pa, pb]."""
    xg, wg = gauss_legendre(n)
    length = (pb - pa)[:, None]
    from_b = length * ((1.0 - xg) / 2.0)
    return pb[:, None] - from_b, length * (wg / 2.0), from_b


def _normal(x):
    """phi(x), Phi(x) and Phi(-x), each to full relative precision (one erfcx, one exp)."""
    e = np.exp(-0.5 * x * x)
    small = 0.5 * erfcx(np.abs(x) * _SQRT_HALF) * e  # Phi(-|x|)
    neg = x < 0
    big = 1.0 - small
    return e * _INV_SQRT_2PI, np.where(neg, small, big), np.where(neg, big, small)
