"""Poisson counts with the square link, rate f^2 (Zhang et al., 2020, App. C.2).

The Laplace and VB baselines: ``log p = 2 y log|f| - f^2 - log y!``; the derivatives
are ``2y/f - 2f``, ``-2y/f^2 - 2`` (< 0 away from f = 0: log p is strictly concave on each
half-line, singular at 0 for y >= 1) and ``4y/f^3``. The expectation is in closed form,
``E[log p] = y E[log f^2] - (m^2 + v) - log y!`` with, for ``a = m^2 / (2v)``
(``f^2 / v`` is non-central chi-square with one degree of freedom and non-centrality ``2a``),

    E[log f^2] = log(2v) + sum_j Poisson(j; a) psi(j + 1/2)                   (a <= 40)
               = log(m^2) - sum_{n>=1} (2n-1)!! / n * (v/m^2)^n               (a > 40, asymptotic)

    dE[log f^2]/dm = 2 sqrt(2/v) D(m / sqrt(2v)),   dE[log f^2]/dv = (1 - 2 x D(x)) / v,

``D`` Dawson's integral and ``x = |m| / sqrt(2v)`` (from ``d/da sum_j Poisson(j; a) psi(j+1/2) =
sum_j Poisson(j; a) / (j + 1/2) = 2 D(sqrt a) / sqrt a``). The asymptotic series is truncated at
its smallest term, which for ``a > 40`` is below ``1e-17`` relative (the neglected part is
``O(e^-a)``: the mass of N(m, v) near the singularity at 0).

Holds: :class:`PoissonSquare` with the baselines' expectations (here), its tilted moments for
any count (``moments``) and its cell-table boxes (``boxes``). May import: what
:mod:`qpinfer.likelihoods` may; never another likelihood.
"""

from __future__ import annotations

import numpy as np
from scipy.special import dawsn, gammaln, psi

from qpinfer.checks import check_counts
from qpinfer.likelihoods.base import Likelihood

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_GUESS_STEPS = 3  # Newton steps of the level-set guess on the side facing f = 0


_SERIES_MAX_A = 40.0
_SERIES_TERMS = int(_SERIES_MAX_A + 12.0 * np.sqrt(_SERIES_MAX_A) + 60.0)
_PSI_HALF = psi(np.arange(_SERIES_TERMS) + 0.5)
_LOG_FACT = gammaln(np.arange(_SERIES_TERMS) + 1.0)
# (2n-1)!!/n for the asymptotic series, n = 1..60
_N = np.arange(1, 61)
_DFACT_OVER_N = np.exp(np.cumsum(np.log(2.0 * _N - 1.0)) - np.log(_N))


def expected_log_f2(m: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``E[log f^2]`` for ``f ~ N(m, v)`` and its derivatives in ``m`` and ``v`` (closed form)."""
    m, v = np.broadcast_arrays(np.asarray(m, dtype=np.float64), np.asarray(v, dtype=np.float64))
    m = np.atleast_1d(m)
    v = np.atleast_1d(v)
    a = m * m / (2.0 * v)
    value = np.empty(m.shape)
    small = a <= _SERIES_MAX_A
    if small.any():
        a_s = a[small][:, None]
        j = np.arange(_SERIES_TERMS)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_w = j * np.log(a_s) - a_s - _LOG_FACT
        log_w[:, 0] = -a_s[:, 0]  # 0 * log(0) = 0
        value[small] = np.log(2.0 * v[small]) + np.exp(log_w) @ _PSI_HALF
    big = ~small
    if big.any():
        s2 = v[big] / (m[big] * m[big])
        terms = _DFACT_OVER_N[None, :] * s2[:, None] ** _N[None, :]
        # truncate each row at its smallest term (optimal truncation of an asymptotic series)
        stop = np.argmin(terms, axis=1)
        keep = _N[None, :] - 1 <= stop[:, None]
        value[big] = np.log(m[big] * m[big]) - np.sum(np.where(keep, terms, 0.0), axis=1)
    x = m / np.sqrt(2.0 * v)
    d_m = 2.0 * np.sqrt(2.0 / v) * dawsn(x)
    d_v = (1.0 - 2.0 * x * dawsn(x)) / v  # x D(x) is even in x
    return value, d_m, d_v


class PoissonSquare(Likelihood):
    """Poisson counts with rate f^2 (square link, Zhang et al. (2020), Appendix C.2), y in {0, 1, 2, ...}.

    With N(f | mu, sigma^2) exp(-f^2) = N(f | beta, v) exp(-mu^2/(1+2 sigma^2)) / sqrt(1+2 sigma^2),
    ``beta = mu / (1 + 2 sigma^2)``, ``v = sigma^2 / (1 + 2 sigma^2)``, the tilted density is
    proportional to f^(2y) N(f | beta, v). Writing f = beta + sqrt(v) t, b = beta/sqrt(v), its
    moments follow from P_n(b) = E[(b + t)^n], t ~ N(0, 1): for counts up to 64 by the positive
    recurrence P_{n+1} = b P_n + n P_{n-1} and Stein's identity, above by a quadrature of each
    of the two lobes about its mode whose cost does not grow with y
    (:mod:`qpinfer.likelihoods.poisson_square.moments`). Counts up to ``MAX_COUNT`` = 1e8 are accepted;
    larger ones are refused by :meth:`check_y` (``ValueError`` naming y and the range).
    """

    name = "poisson_square"
    _boxes_module = "qpinfer.likelihoods.poisson_square.boxes"
    two_branches = True

    def _log_lik_derivatives(self, f, y):
        """``2 y log|f| - f^2 - log y!`` and its derivatives ``2y/f - 2f``, ``-2y/f^2 - 2`` (< 0
        away from f = 0: strictly concave on each half-line, singular at 0 for y >= 1) and
        ``4y/f^3``; at ``f = 0`` with ``y >= 1``, ``-inf`` and infinite derivatives."""
        with np.errstate(divide="ignore", invalid="ignore"):
            pos = y > 0
            lp = np.where(pos, y * np.log(f * f), 0.0) - f * f - gammaln(y + 1.0)
            d1 = np.where(pos, 2.0 * y / f, 0.0) - 2.0 * f
            d2 = np.where(pos, -2.0 * y / (f * f), 0.0) - 2.0
            d3 = np.where(pos, 4.0 * y / (f * f * f), 0.0)
        return lp, d1, d2, d3

    def _expected_log_lik(self, m, v, y):
        """``y E[log f^2] - (m^2 + v) - log y!`` in closed form (:func:`expected_log_f2`)."""
        e, e_m, e_v = expected_log_f2(m, v)
        e, e_m, e_v = (a.reshape(np.broadcast(m, v).shape) for a in (e, e_m, e_v))
        value = np.where(y > 0, y * e, 0.0) - (m * m + v) - gammaln(y + 1.0)
        return value, y * e_m - 2.0 * m, y * e_v - 1.0

    _n_nodes = 16  # lobes are Gaussian times |f|^2y: smooth on every panel

    def check_y(self, y) -> np.ndarray:
        from qpinfer.likelihoods.poisson_square.moments import MAX_COUNT, MAX_COUNT_TEXT

        why = " (the range where sigma* holds 1e-12 accuracy)"
        yf = check_counts(y, "poisson_square", MAX_COUNT, MAX_COUNT_TEXT, why)
        return yf

    def log_pdf(self, f, y) -> np.ndarray:
        f = np.asarray(f, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        with np.errstate(divide="ignore"):
            logf2 = np.where(y > 0, y * np.log(f * f), 0.0)
        return logf2 - f * f - gammaln(y + 1.0)

    @staticmethod
    def _beta_v(mu, sigma):
        a = 1.0 + 2.0 * sigma * sigma
        return mu / a, sigma * sigma / a, a

    def log_z(self, mu, sigma, y) -> np.ndarray:
        """eq. (53)-(54): for counts up to 64 as log E[f^2y] under N(beta, v) (positive terms
        only); above, Loader's saddle-point form at the main mode (no terms of size y log y
        cancel; see :mod:`qpinfer.likelihoods.poisson_square.moments`)."""
        return self.ep_moments(mu, sigma, y)[0]

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of ``|f|^(2y) N(f | beta, v)`` (:mod:`qpinfer.likelihoods.poisson_square.moments`):
        for y <= 64 Stein's identity, E[t] = 2y P_{2y-1}/P_{2y}, E[t^2] = 1 + 2y(2y-1)
        P_{2y-2}/P_{2y} (equivalent to eq. (56)-(60)); above, the two lobes' moments about their
        modes."""
        return self.ep_moments(mu, sigma, y)[1:]

    #: the series and the two-lobe quadrature cost O(y) or 160 nodes a point: the cell table
    #: stores EP's moments where the main lobe's Gauss-Hermite rule does not serve them
    _tabulated_moments = True
    #: counts up to this take the series even with a table: 2-4.8 M points/s against a
    #: lookup's 1.2 M/s (measured, one thread, 2e5 cavities), and less overhead in small batches
    _SERIES_BEFORE_TABLE = 8

    def ep_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` in one pass: small counts (the series) and far cavities (the
        main lobe's Gauss-Hermite rule) computed, the rest from the moment table
        (:meth:`~qpinfer.Likelihood.with_moment_table`) or computed."""
        from qpinfer.likelihoods.poisson_square.moments import (
            ep_moments,
            hermite_min_b,
            scaled_cavity,
        )

        if self._moment_table is None:
            return ep_moments(mu, sigma, y)
        mu, sigma, y = np.broadcast_arrays(
            *(np.asarray(a, dtype=np.float64) for a in (mu, sigma, y))
        )
        shape, (m, s, yy) = mu.shape, (np.abs(mu).ravel(), sigma.ravel(), y.ravel())
        b = scaled_cavity(m, s)[2]
        tab = (yy > self._SERIES_BEFORE_TABLE) & (b < hermite_min_b(yy))
        tab &= (s >= 1e-100) & (s <= 1e100)
        out = np.empty((3, m.size))
        rest = ~tab
        if rest.any():
            out[:, rest] = ep_moments(m[rest], s[rest], yy[rest])
        if tab.any():
            out[:, tab] = self._table_moments(m[tab], s[tab], yy[tab], ep_moments)
        mean = np.where(mu.ravel() < 0, -out[1], out[1])
        return out[0].reshape(shape), mean.reshape(shape), out[2].reshape(shape)

    def canonical(self, mu, y):
        """Symmetry f -> -f: sigma*(mu) == sigma*(-mu) exactly."""
        return np.abs(mu), y

    def _canonical_slope(self, mu, y):
        return np.sign(mu)  # canonical mu = |mu|

    def _closed_form_slopes(self, mu, sigma, y, mask):
        """y = 0: sigma* = sigma / sqrt(1 + 2 sigma^2), whose slopes are (0, (1 + 2 sigma^2)^-3/2)."""
        zero = mask & (y == 0)
        return zero, 0.0, (1.0 + 2.0 * sigma[zero] ** 2) ** -1.5

    def _sigma_closed_form(self, mu, sigma, y):
        """y = 0 (the tilted density N(f | beta, v) is Gaussian, sigma* = sqrt(v) exactly), a
        main lobe Gaussian to double precision (sigma* = the tilted std) and far single lobes
        (quadrature about the mode): see
        :func:`qpinfer.likelihoods.poisson_square.moments.sigma_closed_form`."""
        from qpinfer.likelihoods.poisson_square.moments import sigma_closed_form

        return sigma_closed_form(mu, sigma, y)

    def _table_closed_form(self, mu, sigma, y, moments):
        """The closed forms but the far single lobes' quadrature (a table's ``lobe`` box,
        :mod:`qpinfer.likelihoods.poisson_square.boxes`, answers those cavities ~20x faster), the Gaussian
        lobes' sigma* taken from EP's ``moments``."""
        from qpinfer.likelihoods.poisson_square.moments import sigma_closed_form

        ep_std = None if moments is None else np.asarray(moments[1], dtype=np.float64)
        return sigma_closed_form(mu, sigma, y, quadrature=False, ep_std=ep_std)

    def _rescale(self, mu, sigma, y):
        """sigma outside [1e-100, 1e100]: sigma* = 2 sv sigma*(b, 1/sqrt(2), y), see
        :func:`qpinfer.likelihoods.poisson_square.moments.rescale`."""
        from qpinfer.likelihoods.poisson_square.moments import rescale

        return rescale(mu, sigma, y)

    def _log_tilted(self, f, mu, sigma, y, derivative=True):
        """2y log|f| - (f - beta)^2 / (2v) up to a per-point constant, written about the mode of
        f's own lobe so that no terms of size y cancel (see
        :func:`qpinfer.likelihoods.poisson_square.moments.log_tilted`)."""
        from qpinfer.likelihoods.poisson_square.moments import log_tilted

        beta, v, _ = self._beta_v(mu, sigma)
        return log_tilted(f, beta, v, y, derivative)

    def _level_guess(self, side, level, mode, x, mu, sigma, y):
        """On the side of a lobe facing f = 0 (where log q -> -inf), the level set itself, solved
        in w = log(mode / f) > 0, where the drop is 2y phi(w) with
        ``phi = (w - 1 + e^-w) + (kappa / 2) (1 - e^-w)^2``, ``kappa = mode^2 / (2 y v)``
        (exact: :func:`~qpinfer.likelihoods.poisson_square.moments.log_tilted` about the lobe's mode).
        sqrt(phi) is concave in w, so Newton on it from a start short of the level (the largest
        of three lower bounds: phi <= (1 + kappa) w^2 / 2, <= w + kappa w^2 / 2, <= w +
        kappa / 2) climbs monotonically onto it and f = mode e^-w never reaches the bound;
        _GUESS_STEPS steps land within 0.05 of a level spacing (the kernel's Newton steps then
        polish). The kernel's first guess there, the previous edge scaled as for a Gaussian,
        could land on or past f = 0, and three Newton steps from the log-singular wall stopped
        short (y = 3, sigma = 2, mu ~ 14.7187: the second left edge at 36 nats
        instead of 12.5, sigma* 2.6e-12 off). The side away from f = 0: ``x`` unchanged."""
        _, v, _ = self._beta_v(mu, sigma)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            n = 2.0 * y
            kappa = (mode / v) * (mode / n)
            ell = level / n
            w = np.maximum(
                np.sqrt(2.0 * ell / (1.0 + kappa)),
                2.0 * ell / (1.0 + np.sqrt(1.0 + 2.0 * kappa * ell)),
            )
            w = np.maximum(w, ell - 0.5 * kappa)
            for _ in range(_GUESS_STEPS):
                em = -np.expm1(-w)  # 1 - e^-w
                root_phi = np.sqrt((w - em) + 0.5 * kappa * em * em)
                w = w + 2.0 * root_phi * (np.sqrt(ell) - root_phi) / (em + kappa * em * (1.0 - em))
            return np.where((side * mode < 0.0) & (y > 0.0), mode * np.exp(-w), x)

    def _lobes(self, mu, sigma, y):
        # q ~ |f|^{2y} N(f | beta, v): for y >= 1 one log-concave lobe on each side of f = 0 with
        # modes solving f^2 - beta f - 2 y v = 0 (y = 0 is closed form, never reaches here).
        from qpinfer.likelihoods.poisson_square.moments import lobe_modes

        beta, v, _ = self._beta_v(mu, sigma)
        near, far, _ = lobe_modes(beta, v, y)
        lobes = []
        for side, mode in ((-1.0, np.minimum(near, far)), (1.0, np.maximum(near, far))):
            with np.errstate(divide="ignore", invalid="ignore"):
                curv = np.where(y > 0, 2.0 * y / (mode * mode), 0.0) + 1.0 / v
            width = 1.0 / np.sqrt(curv)
            zero = np.zeros_like(mode)
            inf = np.full_like(mode, np.inf)
            lobes.append((mode, width, -inf if side < 0 else zero, zero if side < 0 else inf))
        return lobes
