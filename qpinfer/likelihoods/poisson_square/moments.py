# Over 400 lines: every count's regime (closed form, Laplace, lobe quadrature) in one place, with the guards between them.
"""Tilted moments and normaliser of the Poisson square-link likelihood for every count, at a
cost that does not grow with the count (the numerics behind
:class:`qpinfer.PoissonSquare`).

The tilted density is ``q(f) ∝ |f|^(2y) N(f | beta, v)`` (``beta = mu / a``, ``v = sigma^2 / a``,
``a = 1 + 2 sigma^2``). In units ``x = f / sqrt(v)``, ``b = beta / sqrt(v)``, ``n = 2y`` it is
``|x|^n phi(x - b)``. Two methods, chosen per point (``b >= 0`` by the mirror symmetry):

* **recurrence** (``y <= 64`` and ``|b| <= 1e3``): ``P_n(b) = E[(b + t)^n]``, ``t ~ N(0, 1)``,
  by the positive recurrence ``P_{n+1} = b P_n + n P_{n-1}``; the mean and variance by Stein's
  identity, ``E[t] = n P_{n-1}/P_n``, ``E[t^2] = 1 + n (n-1) P_{n-2}/P_n`` (eq. (56)-(60)). The
  variance cancels ~``n`` units in the last place, hence the cut at ``n = 128`` (<= ~1e-13).
* **lobes** (otherwise): one log-concave lobe on each side of ``x = 0``, modes
  ``x_+ = (b + r) / 2`` and ``x_- = -2n / (r + b)``, ``r = sqrt(b^2 + 4n)``. About a lobe's mode
  ``u`` the log density is ``n log1pmx(h / u) - h^2 / 2`` (``h = x - u``,
  ``log1pmx(z) = log(1 + z) - z``: the terms of size ``n log u`` cancel analytically, not in
  floating point). It is below ``-h^2 / 2``, so composite Gauss-Legendre on ``h in [-10, 10]``
  (10 panels x 16 nodes) holds all but e^-50 of the mass. The lobes are combined with their
  exact log-mass offset ``log q(x_-) - log q(x_+) = n log1p(-2b / (r + b)) - r b / 2`` (the far
  lobe is skipped below e^-60); mean and variance are the mixture's (each lobe's variance about
  its mode plus the between-lobe term), with no cancellation. ``log Z`` is written as the log
  density at the main mode ``m`` -- Loader's saddle-point form of the Poisson pmf,
  ``-stirlerr(y) - log(2 pi y) / 2 - bd0(y, m^2)``, plus ``log N(m | mu, sigma^2)`` -- plus the
  log of the lobe integrals, so no terms of size ``y log y`` cancel either.

Cost per point is O(1) in ``y``; accuracy against mpmath ~1e-15 relative for the moments (tests
in ``tests/estimators/test_robustness_inputs.py``). :func:`lobe_modes` gives the same geometry in ``f``
units for the sigma* kernel's hooks (``PoissonSquare._lobes`` / ``_log_tilted``).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import gammaln

from qpinfer.quadrature.level_sets import TiltedDensity
from qpinfer.quadrature.panels import sigma_qp_quadrature

#: The largest count ``PoissonSquare.check_y`` (so ``sigma_qp``, ``tilted_moments``) and
#: ``GPPoissonRegressor`` accept. The moments here hold ~1e-15 far beyond it, but the sigma*
#: kernel places nodes at ``f ~ sqrt(2 y v)`` in double precision on lobes of width
#: ``~ sqrt(v / 2)``, which costs ~``sqrt(y)`` units in the last place: 1e8 keeps it <= 1e-12.
MAX_COUNT = 10**8
MAX_COUNT_TEXT = "1e8"  # as error messages print it

_RECURRENCE_MAX_COUNT = 64
_RECURRENCE_MAX_B = 1e3
_HALF_SPAN = 10.0  # lobe quadrature on h in [-10, 10]: log density <= -h^2/2 <= -50 outside
_N_PANELS = 10
_N_NODES = 16
_FAR_LOBE_CUT = -60.0  # skip a lobe whose peak is this many nats below the other's
_BATCH = 4096  # points per vectorised block of the lobe quadrature (bounds memory)
_LOG_2PI = np.log(2.0 * np.pi)
_HERMITE_NODES = 20  # the main lobe's Gauss-Hermite rule (_hermite_lobe_x)
_HERMITE_T, _HERMITE_W = np.polynomial.hermite_e.hermegauss(_HERMITE_NODES)


def log1pmx(z) -> np.ndarray:
    """``log(1 + z) - z`` for ``z > -1`` to a few ulp (no cancellation for small ``|z|``).

    For ``|z| < 1/4``: with ``s = z / (2 + z)``, ``log(1 + z) = 2 atanh(s)``, so
    ``log(1 + z) - z = -z^2 / (2 + z) + 2 s^3 (1/3 + s^2/5 + ...)``, ten terms (``|s| < 1/7``,
    truncation < 1e-17 relative); elsewhere directly (<= 10 ulp). A fixed number of terms, so a
    point's value never depends on the other points of the call."""
    z = np.asarray(z, dtype=np.float64)
    small = np.abs(z) < 0.25
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log1p(z) - z
        s = np.where(small, z / (2.0 + z), 0.0)
    s2 = s * s
    acc = np.full(z.shape, 1.0 / 21.0)
    for k in range(9, 0, -1):
        acc = acc * s2 + 1.0 / (2 * k + 1)
    with np.errstate(invalid="ignore"):
        series = -z * z / (2.0 + z) + 2.0 * s * s2 * acc
    return np.where(small, series, out)


def lobe_modes(beta, v, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Modes of ``|f|^(2y) N(f | beta, v)`` (``y >= 1``) and their log-density offset.

    Returns ``(m_near, m_far, offset)``: the mode on the side of ``beta`` (``f > 0`` if
    ``beta == 0``), the mode on the other side, and ``log q(m_far) - log q(m_near) <= 0``, each
    without cancellation (roots of ``f^2 - beta f - 2 y v = 0``; the far one as ``-2yv / near``).
    """
    beta, v, y = (np.asarray(a, dtype=np.float64) for a in (beta, v, y))
    side = np.where(beta < 0, -1.0, 1.0)
    big = np.abs(beta)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        root = np.hypot(big, np.sqrt(8.0 * y * v))
        near = side * 0.5 * (big + root)
        far = -side * 4.0 * y * v / (big + root)
        offset = 2.0 * y * np.log1p(-2.0 * big / (root + big)) - root * (big / (2.0 * v))
    return near, far, np.where((big == 0) | (y == 0), 0.0, offset)


def log_tilted(f, beta, v, y, derivative: bool = True):
    """``2y log|f| - (f - beta)^2 / (2v)`` up to a per-point constant, and its f-derivative
    (``None`` unless ``derivative``): the sigma* kernel's ``PoissonSquare._log_tilted``.

    Written about the mode ``m`` of f's own lobe (:func:`lobe_modes`), ``h = f - m``:
    ``2y log1pmx(h / m) - h^2 / (2v)`` plus that lobe's exact peak offset (0 for the main lobe),
    derivative ``-h (2y / (f m) + 1 / v)``. The terms of size ``y`` cancel analytically, so a
    count of 1e6 costs ~``sqrt(y)`` units in the last place, not ``y`` (``log1p(z) - z`` is
    evaluated directly: its error, ~``2y ulp(z)`` with ``|z| ~ 1/sqrt(2y)`` on the lobe, is of the
    same order as that of the node positions themselves). ``y = 0`` is the Gaussian about beta.
    """
    near, far, offset = lobe_modes(beta, v, y)
    offset = np.maximum(offset, -1e300)  # finite, so that offset * 0 == 0 below
    two_y = 2.0 * y
    half_prec = 0.5 / v
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # The lobe of each f by arithmetic (x * True + z * False == x exactly) and in place:
        # np.where with per-point operands and fresh temporaries cost twice the time here, on
        # ~1e6 nodes per call. f * near >= 0 is f >= 0 where every near >= 0 (mu >= 0).
        on_near = f >= 0 if np.all(near >= 0) else f * near >= 0
        on_far = ~on_near
        m = near * on_near
        m += far * on_far
        h = f - m
        if derivative:
            dlog_q = -h * (two_y / (f * m) + 2.0 * half_prec)
        z = np.divide(h, m, out=m)
        log_q = np.log1p(z)
        log_q -= z
        log_q *= two_y
        h *= h
        h *= half_prec
        log_q -= h
        log_q += np.multiply(offset, on_far, out=z)
        zero = y == 0
        if np.any(zero):  # the Gaussian about beta (only those points change)
            g = f - beta
            log_q = np.where(zero, -g * g * half_prec, log_q)
            if derivative:
                dlog_q = np.where(zero, -2.0 * g * half_prec, dlog_q)
    return log_q, (dlog_q if derivative else None)


@functools.cache
def _panel_nodes() -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (cached)."""
    return np.polynomial.legendre.leggauss(_N_NODES)


def _half_line_lobe(c: np.ndarray, n: np.ndarray):
    """The lobe of ``u^n phi(u - c)`` on ``u > 0`` (any sign of ``c``): ``(mode, I, E[h],
    Var[h])`` with ``I = integral of exp(log q(mode + h) - log q(mode)) dh``, ``h = u - mode``."""
    r = np.hypot(c, 2.0 * np.sqrt(n))
    with np.errstate(divide="ignore", invalid="ignore"):
        mode = np.where(c >= 0, 0.5 * (c + r), 2.0 * n / (r - c))
    lo = np.maximum(-_HALF_SPAN, -mode)[:, None]
    edges = lo + (_HALF_SPAN - lo) * np.linspace(0.0, 1.0, _N_PANELS + 1)[None, :]
    half = 0.5 * (edges[:, 1:] - edges[:, :-1])
    x, w = _panel_nodes()
    centre = 0.5 * (edges[:, 1:] + edges[:, :-1])
    h = (centre[..., None] + half[..., None] * x).reshape(len(c), -1)
    q = (half[..., None] * w).reshape(len(c), -1)
    q *= np.exp(n[:, None] * log1pmx(h / mode[:, None]) - 0.5 * h * h)
    mass = q.sum(axis=1)
    mean_h = (q * h).sum(axis=1) / mass
    var_h = (q * (h - mean_h[:, None]) ** 2).sum(axis=1) / mass
    return mode, mass, mean_h, var_h


def _lobes_x(b: np.ndarray, y: np.ndarray):
    """``(log I, E[x] - b, Var[x])`` by the two-lobe quadrature (1-D arrays, ``b >= 0``), ``I`` the
    integral of ``exp(log q(x) - log q(x_+))`` over ``x``."""
    n = 2.0 * y
    mode_p, mass_p, mean_p, var_p = _half_line_lobe(b, n)
    _, _, offset = lobe_modes(b, np.ones_like(b), y)
    # the main mode's offset from b, (r - b) / 2 = 2n / (r + b) for b >> sqrt(n) (no
    # cancellation); near b = 0 as mode - b, the far lobe's own form (exact mirror at b = 0)
    root_n = 2.0 * np.sqrt(n)
    shift = np.where(b <= root_n, mode_p - b, 2.0 * n / (np.hypot(b, root_n) + b))
    shift_mean, var, total = shift + mean_p, var_p, mass_p
    two = np.flatnonzero(offset > _FAR_LOBE_CUT)
    if two.size:  # the far lobe (the mirror image x -> -x of the lobe of u^n phi(u + b))
        mode_m, mass_m, mean_m, var_m = _half_line_lobe(-b[two], n[two])
        far = np.exp(offset[two]) * mass_m
        tot = mass_p[two] + far
        p_p, p_m = mass_p[two] / tot, far / tot
        loc_p, loc_m = b[two] + shift_mean[two], mode_m + mean_m
        shift_mean[two] = p_p * shift_mean[two] - p_m * (loc_m + b[two])
        var[two] = p_p * var_p[two] + p_m * var_m + p_p * p_m * (loc_p + loc_m) ** 2
        total[two] = tot
    return np.log(total), shift_mean, var


def _recurrence_x(b: np.ndarray, y: np.ndarray):
    """``(log P_n(b), E[x] - b, Var[x])`` by the positive recurrence (1-D arrays, ``b >= 0``)."""
    n_target = (2 * y).astype(np.int64)
    p_prev2 = np.zeros(b.shape)  # P_{n-2}
    p_prev = np.zeros(b.shape)  # P_{n-1}
    p = np.ones(b.shape)  # P_n, n = 0
    log_scale = np.zeros(b.shape)
    log_p, r1, r2 = np.zeros(b.shape), np.zeros(b.shape), np.zeros(b.shape)
    for k in range(int(n_target.max(initial=0)) + 1):
        hit = n_target == k
        if hit.any():
            log_p[hit] = np.log(p[hit]) + log_scale[hit]
            r1[hit] = p_prev[hit] / p[hit]
            r2[hit] = p_prev2[hit] / p[hit]
        p_prev2, p_prev, p = p_prev, p, b * p + k * p_prev
        big = p > 1e200
        if big.any():
            p[big] *= 1e-200
            p_prev[big] *= 1e-200
            p_prev2[big] *= 1e-200
            log_scale[big] += 200.0 * np.log(10.0)
    n = 2.0 * y
    return log_p, n * r1, 1.0 + n * (n - 1.0) * r2 - (n * r1) ** 2


def _stirlerr(y: np.ndarray) -> np.ndarray:
    """``log(y!) - (y + 1/2) log y + y - log(2 pi) / 2`` (Stirling's error), ``y >= 1``."""
    direct = gammaln(y + 1.0) - (y + 0.5) * np.log(y) + y - 0.5 * _LOG_2PI
    r = 1.0 / (y * y)
    series = (1.0 / 12 - r * (1.0 / 360 - r * (1.0 / 1260 - r * (1.0 / 1680 - r / 1188)))) / y
    return np.where(y > 15, series, direct)


def _bd0(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``y log(y / m^2) + m^2 - y >= 0`` (Loader's deviance term), no cancellation: ``m^2 - y``
    from Dekker's exact product, then ``-y log1pmx((m^2 - y) / y)``."""
    split = 134217729.0 * m  # Veltkamp: m = hi + lo exactly, 26-bit halves
    hi = split - (split - m)
    lo = m - hi
    sq = m * m
    err = ((hi * hi - sq) + 2.0 * hi * lo) + lo * lo  # m^2 = sq + err exactly
    z = ((sq - y) + err) / y
    with np.errstate(divide="ignore"):
        far = y * (np.log(y) - 2.0 * np.log(np.abs(m)) - 1.0) + sq
    return np.where(z > -0.5, -y * log1pmx(np.maximum(z, -0.5)), far)


def _flat(*arrays):
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    return arrays[0].shape, [a.ravel() for a in arrays]


def hermite_min_b(y) -> np.ndarray:
    """``b`` from which the main lobe alone, by a Gauss-Hermite rule about its mode, gives the
    moments of a count ``y >= 1`` (``_hermite_lobe_x``): ``max(100, 20 sqrt(2y))``."""
    return np.maximum(100.0, 20.0 * np.sqrt(2.0 * np.asarray(y, dtype=np.float64)))


def _hermite_lobe_x(b: np.ndarray, y: np.ndarray):
    """``(log I, E[x] - b, Var[x])`` as ``_lobes_x`` for ``b >= hermite_min_b(y)``: the main
    lobe alone (the far one is > 56 nats down: ``b sqrt(2n) >= 40 n``) by the Gauss-Hermite
    rule of :data:`_HERMITE_NODES` nodes in ``t = h / w`` about the mode ``u``, ``w = (1 +
    n / u^2)^(-1/2)`` its curvature width: what the Gaussian weight leaves,
    ``n (log1pmx(z) + z^2 / 2)`` (``z = w t / u``), is analytic for ``|t| < u / w >= 28`` and
    below ``n (8 / u)^3 / 3 < 0.05`` over the nodes, so the rule's error is far below double
    precision (the cost of 20 nodes instead of the lobes' 160)."""
    n = 2.0 * y
    r = np.hypot(b, 2.0 * np.sqrt(n))
    mode = 0.5 * (b + r)
    w = 1.0 / np.sqrt(1.0 + (n / mode) / mode)
    z = (w / mode)[:, None] * _HERMITE_T
    g = n[:, None] * (log1pmx(z) + 0.5 * z * z)
    q = np.exp(g) * _HERMITE_W
    total = q.sum(axis=1)
    mean_t = (q @ _HERMITE_T) / total
    d = _HERMITE_T[None, :] - mean_t[:, None]
    var_t = np.einsum("ij,ij->i", q, d * d) / total
    # the mode's offset from b, (r - b) / 2 = 2n / (r + b), without cancellation
    return np.log(w * total), 2.0 * n / (r + b) + w * mean_t, w * w * var_t


def moments_x(b: np.ndarray, y: np.ndarray):
    """Per point ``(log_main, E[x] - b, Var[x])`` and the lobe mask: ``log_main`` is ``log P_n(b)``
    where the recurrence was used and ``log I`` (see ``_lobes_x``) where the lobes (or the
    main lobe's Gauss-Hermite rule, ``_hermite_lobe_x``) were."""
    out = [np.empty(b.shape) for _ in range(3)]
    lobes = (y > 0) & ((y > _RECURRENCE_MAX_COUNT) | (b > _RECURRENCE_MAX_B))
    # b = inf (a cavity so far out that mu / sigma overflows) is the Gaussian limit: the
    # recurrence (y = 0 only) and the lobes then give E[x] - b = 0, Var[x] = 1
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        idx = np.flatnonzero(~lobes)
        if idx.size:
            for o, val in zip(out, _recurrence_x(b[idx], y[idx])):
                o[idx] = val
        idx = np.flatnonzero(lobes)
        if idx.size:
            for o, val in zip(out, lobe_moments_x(b[idx], y[idx])):
                o[idx] = val
    return out, lobes


def lobe_moments_x(b: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(log I, E[x] - b, Var[x])`` of 1-D arrays (``b >= 0``, ``y >= 1``) by the lobes
    (``_lobes_x``), or the main lobe's Gauss-Hermite rule where it holds
    (``_hermite_lobe_x``), for every count: no terms of size ``y log b`` cancel in log I,
    which the series' log Z would need (what the square link's table stores,
    :mod:`qpinfer.likelihoods.poisson_square.boxes`)."""
    out = [np.empty(b.shape) for _ in range(3)]
    hermite = (b >= hermite_min_b(y)) & (b < np.inf)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for rows, method in ((~hermite, _lobes_x), (hermite, _hermite_lobe_x)):
            lobe_idx = np.flatnonzero(rows)
            for start in range(0, lobe_idx.size, _BATCH):
                idx = lobe_idx[start : start + _BATCH]
                for o, val in zip(out, method(b[idx], y[idx])):
                    o[idx] = val
    return tuple(out)


def scaled_cavity(mu, sigma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(beta, sv, b)``: the tilted density's Gaussian factor ``N(f | beta, sv^2)`` and its
    location in units of its width, ``beta = mu / (1 + 2 sigma^2)``,
    ``sv = sigma / sqrt(1 + 2 sigma^2)``, ``b = beta / sv = mu / (sigma sqrt(1 + 2 sigma^2))``,
    for every finite ``mu`` and ``sigma > 0`` without forming ``sigma^2`` (which underflows below
    ~1e-154 and overflows above ~1e154): with ``A = sqrt(1 + 2 sigma^2)`` as
    ``hypot(1, sqrt(2) sigma)`` for ``sigma < 1`` and ``sigma hypot(sqrt(2), 1/sigma)`` above, each
    a few ulp. ``b`` overflows to ``inf`` only where its value exceeds the float range (the
    Gaussian limit, which every user of ``b`` handles); ``beta`` and ``sv`` never overflow."""
    mu, sigma = np.broadcast_arrays(np.asarray(mu, np.float64), np.asarray(sigma, np.float64))
    small = sigma < 1.0
    with np.errstate(over="ignore", under="ignore"):
        s_lo = np.where(small, sigma, 0.5)  # each branch sees only its own range
        s_hi = np.where(small, 1.0, sigma)
        a_lo = np.hypot(1.0, np.sqrt(2.0) * s_lo)  # A
        k_hi = np.hypot(np.sqrt(2.0), 1.0 / s_hi)  # A / sigma
        sv = np.where(small, s_lo / a_lo, 1.0 / k_hi)
        mu_a = mu / a_lo
        mu_s = (mu / s_hi) / s_hi
        beta = np.where(small, mu_a / a_lo, (mu_s / k_hi) / k_hi)
        b = np.where(small, mu_a / s_lo, mu_s / k_hi)
    return beta, sv, b


def ep_moments(mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log Z, mean, std)`` of ``q(f) ∝ f^(2y) exp(-f^2) N(f | mu, sigma^2)`` in one pass
    (:func:`log_z`, :func:`tilted_moments`)."""
    shape, (mu, sigma, y) = _flat(mu, sigma, y)
    beta, sv, b = scaled_cavity(mu, sigma)
    (log_main, shift, var_x), lobes = moments_x(np.abs(b), y)
    with np.errstate(over="ignore", under="ignore"):
        mean = beta + np.where(mu < 0, -sv, sv) * shift
        std = sv * np.sqrt(var_x)
    # (log Z of cavities beyond sigma^2's range is not finite: as before, without warnings
    # for the callers that ask for the mean and std only)
    with np.errstate(all="ignore"):
        out = _log_z(mu, sigma, y, log_main, lobes)
    return out.reshape(shape), mean.reshape(shape), std.reshape(shape)


def tilted_moments(mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``q(f) ∝ f^(2y) exp(-f^2) N(f | mu, sigma^2)``: in the
    scaled form ``mean = beta + sv (E[x] - b)``, ``std = sv sqrt(Var[x])`` (:func:`scaled_cavity`),
    finite for every finite ``mu`` and ``sigma > 0``."""
    return ep_moments(mu, sigma, y)[1:]


def log_z(mu, sigma, y) -> np.ndarray:
    """``log Z = log E[Poisson(y | f^2)]`` under ``f ~ N(mu, sigma^2)`` (App. C.2, eq. (53))."""
    return ep_moments(mu, sigma, y)[0]


def saddle_log_z(mu, sigma, y) -> np.ndarray:
    """``log Z`` less the log of the lobe integrals (1-D arrays, ``y >= 1``): the log density
    at the main mode ``m`` -- Loader's saddle-point form of the Poisson pmf plus ``log N(m |
    mu, sigma^2)`` -- in ``f`` units, so that no terms of size ``y log y`` cancel."""
    a = 1.0 + 2.0 * sigma * sigma
    beta, v = mu / a, sigma * sigma / a
    near, _, _ = lobe_modes(beta, v, y)
    d = (near - mu) / sigma
    log_pois = -_stirlerr(y) - 0.5 * (_LOG_2PI + np.log(y)) - _bd0(y, near)
    log_gauss = -0.5 * d * d - np.log(sigma) - 0.5 * _LOG_2PI
    return log_pois + log_gauss + 0.5 * np.log(v)


def _log_z(mu, sigma, y, log_main, lobes) -> np.ndarray:
    """log Z from :func:`moments_x`'s ``log_main`` (1-D arrays): the recurrence's ``log
    P_n(b)`` with the Gaussian factor's terms, or the lobes' ``log I`` plus
    :func:`saddle_log_z`."""
    a = 1.0 + 2.0 * sigma * sigma
    v = sigma * sigma / a
    out = -0.5 * np.log(a) - mu * mu / a + y * np.log(v) + log_main - gammaln(y + 1.0)
    if lobes.any():  # log q(m) at the main mode m plus log of the lobe integrals (in f units)
        out[lobes] = saddle_log_z(mu[lobes], sigma[lobes], y[lobes]) + log_main[lobes]
    return out


#: sigma* = the tilted std to double precision where the main lobe's skewness
#: gamma = (2n / u^3) / (1 + n / u^2)^(3/2) (n = 2y, u its mode in units of sv) is below this:
#: sigma* / std - 1 = -gamma^2 / 36 against mpmath (gamma = 1.5e-4: -6.07e-10; 4e-6: -4.44e-13;
#: 1.5e-7: -5.6e-16), so <= 3e-20 here.
GAUSSIAN_SKEW = 1e-9
#: single-lobe cavities whose mode lies further than this (in units of sv) from f = 0 take the
#: mode-relative quadrature (the kernel's absolute node positions cost ~ulp(u) / width)
MODE_RELATIVE_MIN = 1e3
_SINGLE_LOBE_CUT = -70.0  # far lobe's peak this many nats below the main one's: dropped


class _ModeRelative(TiltedDensity):
    """The main lobe of ``|x|^n phi(x - b)`` as seen from its mode ``u`` (``h = x - u``):
    ``log q = n log1pmx(h / u) - h^2 / 2``, a likelihood-like object for
    :func:`qpinfer.quadrature.panels.sigma_qp_quadrature` (its ``mu`` slot carries ``u``). Node
    positions are O(width) numbers, exact to an ulp of the width however far ``u`` is from 0."""

    _n_nodes = 16

    @staticmethod
    def _log_tilted(h, u, _unused, y, derivative=True):
        n = 2.0 * y
        z = h / u
        log_q = n * log1pmx(z) - 0.5 * h * h
        if not derivative:
            return log_q, None
        return log_q, -h * (n / (u * (u + h)) + 1.0)


def _sigma_mode_relative(u, y) -> np.ndarray:
    """sigma* (in units of sv) of the lobe about ``u`` (1-D arrays), by the kernel's panel
    quadrature in mode-relative coordinates."""

    out = np.empty(u.shape)
    for start in range(0, u.size, _BATCH):
        sl = slice(start, start + _BATCH)
        uu, yy = u[sl], y[sl]
        width = 1.0 / np.sqrt(1.0 + (2.0 * yy / uu) / uu)
        lobe = (np.zeros_like(uu), width, -uu, np.full_like(uu, np.inf))
        out[sl] = sigma_qp_quadrature(_ModeRelative(), uu, np.ones_like(uu), yy, [lobe])
    return out


def sigma_closed_form(mu, sigma, y, quadrature: bool = True, ep_std=None):
    """``(mask, sigma*)`` for ``PoissonSquare._sigma_closed_form()`` (canonical ``mu >= 0``):

    * ``y = 0``: the tilted density is ``N(beta, sv^2)``, sigma* = sv exactly;
    * the main lobe Gaussian to double precision (skewness <= ``GAUSSIAN_SKEW``, which includes
      ``b = inf``): sigma* = the tilted std;
    * one lobe (the far one > 70 nats down) whose mode lies > ``MODE_RELATIVE_MIN`` widths from
      0: the kernel's quadrature in mode-relative coordinates, times sv (capped at the tilted
      std, Theorem 2, which only acts within rounding of the Gaussian threshold); left out
      with ``quadrature=False`` (a table's lookup, whose boxes answer them).

    ``ep_std``: the tilted std at these cavities if known (a table's lookup has EP's moments),
    used for the Gaussian lobes instead of computing it again.

    Everything in the scaled form of :func:`scaled_cavity`, so no sigma^2 or mu / sigma
    over- or underflows."""
    mu, sigma, y = (np.asarray(a, dtype=np.float64) for a in np.broadcast_arrays(mu, sigma, y))
    _, sv, b = scaled_cavity(mu, sigma)
    b = np.abs(b)
    n = 2.0 * y
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        root = np.hypot(b, 2.0 * np.sqrt(n))
        u = 0.5 * b + 0.5 * root  # halves first: b + root overflows for b near the float max
        far = n * np.log1p(-b / u) - root * (b / 2.0)
        kappa = (n / u) / u
        gamma = ((n / u) / u) / u * 2.0 / (1.0 + kappa) ** 1.5
    one_lobe = (y > 0) & ((b == np.inf) | (far < _SINGLE_LOBE_CUT))
    gaussian = one_lobe & (gamma <= GAUSSIAN_SKEW)
    relative = one_lobe & ~gaussian & (u > MODE_RELATIVE_MIN) & quadrature
    values = np.where(y == 0, sv, np.nan)
    if ep_std is not None and not relative.any():
        values[gaussian] = np.broadcast_to(ep_std, values.shape)[gaussian]
        return (y == 0) | gaussian, values
    idx = np.flatnonzero(gaussian | relative)
    if idx.size:
        (_, _, var_x), _ = moments_x(b[idx], y[idx])
        std_x = np.sqrt(var_x)
        rel = relative[idx]
        if rel.any():
            std_x[rel] = np.minimum(std_x[rel], _sigma_mode_relative(u[idx][rel], y[idx][rel]))
        with np.errstate(under="ignore"):
            values[idx] = sv[idx] * std_x
    return (y == 0) | gaussian | relative, values


def rescale(mu, sigma, y):
    """``(mask, mu', sigma', scale)`` for ``PoissonSquare._rescale()``: sigma* scales with
    f -> lambda f, and ``|f|^(2y) N(f | beta, sv^2)`` depends on the cavity only through
    ``b = beta / sv`` up to that scale, so sigma*(mu, sigma, y) = 2 sv sigma*(b, 1/sqrt(2), y)
    (at sigma' = 1/sqrt(2): sv' = 1/2, b' = mu'). Used for ``sigma`` outside [1e-100, 1e100],
    where the kernel's ``sigma^2``, ``v`` would under- or overflow; elsewhere the kernel sees
    the cavity as given (bit-identical to before)."""
    _, sv, b = scaled_cavity(mu, sigma)
    mask = (sigma < 1e-100) | (sigma > 1e100)
    return mask, np.abs(b), np.full(np.shape(b), np.sqrt(0.5)), 2.0 * sv
