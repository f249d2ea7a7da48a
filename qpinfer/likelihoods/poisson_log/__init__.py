"""Poisson counts with the log link, rate exp(f): p(y | f) = exp(y f - e^f) / y!, y = 0, 1, 2, ...

The tilted density (Zhang et al., 2020, eq. (5), (7)) is, with ``m' = mu + y s^2``::

    exp(y f - e^f) N(f | mu, s^2) = exp(y mu + y^2 s^2 / 2) exp(-e^f) N(f | m', s^2),

so every count is the y = 0 tilt at the shifted mean m': ``sigma*/sigma_EP`` is one function of
``(m', s)``. Its mode solves ``f + s^2 e^f = m'``: ``a = m' - omega``, ``omega = W(s^2 e^m')``
(Wright's omega of ``x = m' + 2 log s``), and ``e^a = omega / s^2 =: alpha``. About the mode,
``g = f - a``, the log density is exactly (h2(g) = e^g - 1 - g)::

    log q(a + g) - log q(a) = -alpha h2(g) - g^2 / (2 s^2),

a log-gamma(alpha) density times N(0, s^2): rho depends on (alpha, s) only.

Kernel coordinate (:mod:`qpinfer.sigma.exact`, :mod:`qpinfer.quadrature.tilted`): where the tilt is
narrower than e^f's scale (``alpha + 1/s^2 >= 1``) it is g, so node positions are exact relative
to the width for every count and cavity (h2 by its Taylor series for ``|g| < 1/2``: no terms of size
alpha cancel). Wider tilts use f itself, ``-e^f - f (f/2 - m') / s^2``, with panel edges graded
geometrically about f = 0, where e^f's feature of width ~1 sits.

Closed forms: the *flat* regime ``Phi(m'/s) + exp(m' + s^2/2) Phi(-m'/s - s) < e^-40`` (a bound
of ``E[min(1, e^f)]`` under N(m', s^2): the tilt is N(m', s^2), sigma* = s) and the *Gaussian*
regime where the standardized skewness ``gamma = alpha (alpha + 1/s^2)^-3/2 < 1e-8`` and the
width ``(alpha + 1/s^2)^-1/2 < 0.05`` (measured 1 - sigma*/sigma_EP ~ gamma^2 / 36 < 3e-18;
``tests/likelihoods/test_logit_poisson_log.py``): sigma* = sigma_EP. Counts above ``MAX_COUNT`` (1e6)
and cavities with ``s > SIGMA_MAX`` (1e4) are refused with a ValueError naming y or sigma.

Holds: :class:`PoissonLog` with its mode frame and Laplace moments (here) and its cell-table
boxes (``boxes``). May import: what :mod:`qpinfer.likelihoods` may; never another likelihood.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, log_ndtr, wrightomega

from qpinfer.checks import check_counts
from qpinfer.likelihoods.base import (
    Likelihood,
    check_sigma_at_most,
    fill_ep_std,
    flat_cavities,
    graded_step_edges,
)

__all__ = ["MAX_COUNT", "SIGMA_MAX", "PoissonLog", "flat_nats", "mode_frame"]

MAX_COUNT = 1e6
SIGMA_MAX = 1e4
_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_CLOSED_NATS = 40.0
_GAUSS_SKEW = 1e-8
# h2(g) = g^2 (1/2 + g/6 + g^2/24 + ...) for |g| < 1/2: coefficients 1/(k+2)!, k = 0..19
_H2_COEF = np.exp(-gammaln(np.arange(2, 22, dtype=np.float64) + 1.0))


def _h2(g):
    """e^g - 1 - g without cancellation."""
    small = np.abs(g) < 0.5
    gs = np.where(small, g, 0.0)
    acc = np.zeros_like(gs)
    for c in _H2_COEF[::-1]:
        acc = acc * gs + c
    return np.where(small, gs * gs * acc, np.expm1(g) - g)


def mode_frame(mu, sigma, y):
    """``(m', a, alpha, omega)``: shifted mean, tilted mode a = log(omega) - 2 log s, alpha = e^a
    (may overflow where the tilt is Gaussian; closed forms there use omega = alpha s^2 only)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        log_s = np.log(sigma)
        m = mu + y * sigma * sigma
        x = m + 2.0 * log_s
        omega = np.real(wrightomega(x))
        log_omega = np.where(omega < 1.0, x - omega, np.log(omega))
        # a = m' - omega = log(omega) - 2 log s exactly: take the form with smaller operands
        a = np.where(
            np.abs(m) + omega < np.abs(log_omega) + 2.0 * np.abs(log_s),
            m - omega,
            log_omega - 2.0 * log_s,
        )
        alpha = np.exp(a)
    return m, a, alpha, omega


def flat_nats(m, sigma):
    """``P = -log(Phi(m/s) + exp(m + s^2/2) Phi(-m/s - s)) = -log E[min(1, e^f)]`` under
    ``N(m, s^2)`` (m the shifted mean m'): it bounds the likelihood's effect on the tilt, whose
    flat closed form holds where ``P > 40``. Decreasing in m, ``dP/dm = -E[e^f; f < 0] /
    E[min(1, e^f)]``."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return -np.logaddexp(
            log_ndtr(m / sigma), m + 0.5 * sigma * sigma + log_ndtr(-m / sigma - sigma)
        )


def laplace_moments(mu, sigma, y):
    """``(log Z, mean, std)`` of the plain Laplace approximation of the tilt: its mode a, width
    ``s / sqrt(1 + omega)``, and ``log q(a) + log(width sqrt(2 pi))`` (no corrections: smooth and
    finite for every cavity, a reference for the table's stored moments)."""
    _, a, alpha, omega = mode_frame(mu, sigma, y)
    log_q = y * a - alpha - gammaln(y + 1.0) - 0.5 * ((a - mu) / sigma) ** 2
    log_z = log_q - 0.5 * np.log1p(omega)
    return log_z, a, sigma / np.sqrt(1.0 + omega)


def _laplace_corrections(sigma, omega):
    """``(delta, gamma)`` of the Laplace expansion about the mode (``PoissonLog._laplace``):
    ``delta = alpha / P^2``, the skewness ``gamma = alpha / P^1.5``, ``P = (1 + omega) / s^2``."""
    with np.errstate(over="ignore"):
        return omega * sigma * sigma / (1.0 + omega) ** 2, omega * sigma / (1.0 + omega) ** 1.5


def _wide(mu, sigma, y):
    """The wide frame (kernel coordinate f itself, graded edges about f = 0): where the tilt's
    width (alpha + 1/s^2)^-1/2 exceeds 1, the scale of e^f."""
    omega = mode_frame(mu, sigma, y)[3]
    return 1.0 + omega < sigma * sigma


class PoissonLog(Likelihood):
    """Poisson counts with rate exp(f) (see the module docstring), y in {0, 1, ..., 1e6}."""

    name = "poisson_log"
    _boxes_module = "qpinfer.likelihoods.poisson_log.boxes"

    def _log_lik_derivatives(self, f, y):
        """``y f - e^f - log y!`` and its derivatives ``y - e^f``, ``-e^f``, ``-e^f``."""
        ef = np.exp(f)
        return y * f - ef - gammaln(y + 1.0), y - ef, -ef, -ef

    def _expected_log_lik(self, m, v, y):
        """``y m - exp(m + v/2) - log y!`` and its derivatives, in closed form."""
        m, v, y = np.broadcast_arrays(m, v, y)
        e = np.exp(m + 0.5 * v)
        return y * m - e - gammaln(y + 1.0), y - e, -0.5 * e

    _n_nodes = 20
    _ep_from_panels = True  # tilted_moments by qpinfer.quadrature.tilted on the kernel's panels
    _tail_check_sigma = 0.0  # every cavity: sqrt(drop) bends at the link's kink

    def check_y(self, y) -> np.ndarray:
        yf = check_counts(y, "poisson_log", MAX_COUNT, f"{MAX_COUNT:.0e}")
        return yf

    def check_sigma(self, sigma) -> None:
        check_sigma_at_most(sigma, SIGMA_MAX, "the poisson_log likelihood")

    def log_pdf(self, f, y) -> np.ndarray:
        f = np.asarray(f, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        return y * f - np.exp(f) - gammaln(y + 1.0)

    # -- regimes -----------------------------------------------------------------------------
    @staticmethod
    def _masks(mu, sigma, y):
        m, _, _, omega = mode_frame(mu, sigma, y)
        flat = flat_nats(m, sigma) > _CLOSED_NATS
        with np.errstate(over="ignore", invalid="ignore"):
            # precision (1 + omega)/s^2 and skewness alpha / prec^1.5, without overflow
            width = sigma / np.sqrt(1.0 + omega)
            skew = omega * sigma / (1.0 + omega) ** 1.5
        # the cubic term measures the shape only where the tilt is narrow against e^f's scale
        gauss = (skew < _GAUSS_SKEW) & (width < 0.05) & ~flat
        return flat, gauss, m

    def _moments(self, mu, sigma, y):
        from qpinfer.quadrature.tilted import panel_moments

        flat, gauss, m = self._masks(mu, sigma, y)
        s2 = sigma * sigma
        with np.errstate(over="ignore"):
            # flat: log E[exp(-e^f)] = -(1 - Z0) to e^-80, and 1 - Z0 lies below both E[e^f]
            # and E[min(1, e^f)] = exp(-P) < e^-40 (the former overflows for wide cavities)
            drop = np.minimum(np.exp(m + 0.5 * s2), np.exp(-flat_nats(m, sigma)))
            log_z = y * mu + 0.5 * y * y * s2 - gammaln(y + 1.0) - drop
        mean, std = m.copy(), sigma.copy()
        if gauss.any():
            log_z[gauss], mean[gauss], std[gauss] = self._laplace(mu[gauss], sigma[gauss], y[gauss])
        rest = ~(flat | gauss)
        if rest.any():
            log_z[rest], mean[rest], std[rest] = self._table_moments(
                mu[rest], sigma[rest], y[rest], lambda m, s, yy: panel_moments(self, m, s, yy)
            )
        return log_z, mean, std

    def _laplace(self, mu, sigma, y):
        """Moments where the tilt is Gaussian to double precision (skewness gamma < 1e-8): the
        Laplace expansion about the mode with its first corrections (d^3 = d^4 log q = -alpha,
        precision P = (1 + omega)/s^2, delta = alpha/P^2 = gamma P^-1/2 < 5e-10): mean
        a - delta/2, std P^-1/2 (1 - delta/4 + gamma^2/2), log Z = log q(a) + log(2 pi / P)/2 -
        delta/8 + 5 gamma^2/24; what is left is O(delta^2, gamma^2 delta) relative."""
        _, a, _, omega = mode_frame(mu, sigma, y)
        shift, skew = _laplace_corrections(sigma, omega)
        with np.errstate(over="ignore"):
            log_q = -self._narrow_offset(mu, sigma, y)
            log_z = log_q + np.log(sigma) - 0.5 * np.log1p(omega) + _LOG_SQRT_2PI
            log_z += -shift / 8.0 + 5.0 * skew * skew / 24.0
        std = sigma / np.sqrt(1.0 + omega) * (1.0 - 0.25 * shift + 0.5 * skew * skew)
        return log_z, a - 0.5 * shift, std

    def log_z(self, mu, sigma, y) -> np.ndarray:
        """log E[Poisson(y | e^f)], f ~ N(mu, sigma^2): about the mode (no terms of size y^2)."""
        return self.ep_moments(mu, sigma, y)[0]

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of exp(y f - e^f) N(f | mu, sigma^2) / Z (EP's projection, eq. (5))."""
        return self.ep_moments(mu, sigma, y)[1:]

    def ep_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` in one pass: closed forms, else the moment table
        (:meth:`~qpinfer.Likelihood.with_moment_table`) or the panel quadrature."""
        shape, m, s, yy = flat_cavities(mu, sigma, y, self.check_sigma)
        return tuple(a.reshape(shape) for a in self._moments(m, s, yy))

    #: the boxes hold the y = 0 tilt at m' = mu + y s^2 and measure log Z against a reference
    #: at the count itself (qpinfer.likelihoods.poisson_log.boxes): what they give is the query's
    _tabulated_moments = True

    def _equivalent_cavities(self, mu, sigma, y, rng):
        """Counts 0..1000 at ``mu - y' s^2``: the same tilt as count y at mu (``m'`` kept)."""
        counts = rng.integers(0, 1001, np.shape(mu)).astype(np.float64)
        return mu + (y - counts) * sigma * sigma, counts

    def laplace_residual(self, mu, sigma) -> np.ndarray:
        """log Z of the y = 0 tilt at ``mu`` (1-D arrays) minus its plain Laplace approximation's
        (:func:`laplace_moments`), without the terms of size ``(omega / s)^2`` both carry (a
        table stores it; a count y at ``mu - y s^2`` adds the same terms to both): the
        expansion's corrections where the tilt is Gaussian; elsewhere the quadrature's log
        integral, about the mode (narrow frame: log Z + offset = L, the offset being -log q(a))
        or about f = 0 (wide frame: the offset ``log(s sqrt(2 pi)) + mu^2 / (2 s^2)`` and the
        Laplace terms combine into ``a^2 / (2 s^2) + a alpha`` with ``mu = a + omega``)."""
        from qpinfer.quadrature.tilted import panel_moments

        y = np.zeros(mu.shape)
        flat, gauss, _ = self._masks(mu, sigma, y)
        _, a, alpha, omega = mode_frame(mu, sigma, y)
        half_log1p = 0.5 * np.log1p(omega)
        shift, skew = _laplace_corrections(sigma, omega)
        out = -shift / 8.0 + 5.0 * skew * skew / 24.0  # gauss (_laplace's corrections)
        if flat.any():
            log_z = self._moments(mu[flat], sigma[flat], y[flat])[0]
            out[flat] = log_z - laplace_moments(mu[flat], sigma[flat], y[flat])[0]
        rest = ~(flat | gauss)
        if rest.any():
            m, s = mu[rest], sigma[rest]
            big_l = panel_moments(self, m, s, y[rest], offset=False)[0]
            narrow = big_l - np.log(s) - _LOG_SQRT_2PI + half_log1p[rest]
            ar, alr = a[rest], alpha[rest]
            wide = narrow - 0.5 * (ar / s) ** 2 - ar * alr + alr
            out[rest] = np.where(_wide(m, s, y[rest]), wide, narrow)
        return out

    # -- hooks of the exact sigma* kernel (coordinate g = f - a) -----------------------------
    _closed_form_takes_moments = True

    def _sigma_closed_form(self, mu, sigma, y, moments=None):
        self.check_sigma(sigma)
        flat, gauss, _ = self._masks(mu, sigma, y)
        out = fill_ep_std(
            sigma.astype(np.float64).copy(),
            gauss,
            moments,
            lambda sel: self._laplace(mu[sel], sigma[sel], y[sel])[2],
        )
        return flat | gauss, out

    def _anchor(self, mu, sigma, y):
        return np.where(_wide(mu, sigma, y), 0.0, mode_frame(mu, sigma, y)[1])

    def _log_tilted_offset(self, mu, sigma, y):
        """K with _log_tilted = log p(y | A + x) + log N(A + x | mu, s^2) + K: narrow frame
        -log(p(y | a) N(a | mu, s^2)) at the mode a; wide frame log y! + log(s sqrt(2 pi)) +
        mu^2 / (2 s^2) (from y f - (f - mu)^2/(2s^2) = -(f - m')^2/(2s^2) + y mu + y^2 s^2/2)."""
        wide_k = gammaln(y + 1.0) + np.log(sigma) + _LOG_SQRT_2PI + 0.5 * (mu / sigma) ** 2
        return np.where(_wide(mu, sigma, y), wide_k, self._narrow_offset(mu, sigma, y))

    def _narrow_offset(self, mu, sigma, y):
        _, a, alpha, omega = mode_frame(mu, sigma, y)
        s2 = sigma * sigma
        # a - mu = y s^2 - omega exactly: take the form with the smaller operands
        d = np.where(np.abs(a) + np.abs(mu) <= y * s2 + omega, a - mu, y * s2 - omega)
        ell = y * a - alpha - gammaln(y + 1.0) - 0.5 * (d / sigma) ** 2
        return -(ell - np.log(sigma) - _LOG_SQRT_2PI)

    def _log_tilted(self, x, mu, sigma, y, derivative=True):
        """Narrow frame (x = g = f - a): -alpha h2(g) - g^2/(2 s^2); wide frame (x = f):
        -e^f - f (f/2 - m') / s^2, expanded about f = 0 (|m'| <= ~s^2 there, so no term of
        size (m'/s)^2 is formed)."""
        m, _, alpha, _ = mode_frame(mu, sigma, y)
        wide = _wide(mu, sigma, y)
        xs = x / sigma
        log_q = np.where(
            wide, -np.exp(x) - xs * (0.5 * xs - m / sigma), -alpha * _h2(x) - 0.5 * xs * xs
        )
        if not derivative:
            return log_q, None
        d = np.where(wide, -np.exp(x) - (x - m) / sigma / sigma, -alpha * np.expm1(x) - xs / sigma)
        return log_q, d

    def _lobes(self, mu, sigma, y):
        _, a, _, omega = mode_frame(mu, sigma, y)
        mode = np.where(_wide(mu, sigma, y), a, 0.0)
        width = sigma / np.sqrt(1.0 + omega)
        inf = np.full(np.shape(a), np.inf)
        return [(mode, width, -inf, inf)]

    def _breakpoints(self, mu, sigma, y):
        """Wide frame: e^f's scale-1 feature at f = 0 (the wall of the tilt and its change of
        curvature) lies in level-set panels as wide as the tilt; edges at 0 and +-0.5 * 2^k up
        to the mass's extent |m'| + 12 s keep every panel no longer than its distance from it."""
        m = mode_frame(mu, sigma, y)[0]
        k = np.ceil(np.log2(np.maximum(np.abs(m) + 12.0 * sigma, 1.0) / 0.5)) + 1
        need = np.where(_wide(mu, sigma, y), 1 + np.maximum(k, 1), 0)
        return need.astype(np.int64), graded_step_edges

    def _level_guess(self, side, level, mode, x, mu, sigma, y):
        """Right: min of the Gaussian and the pure log-gamma solutions (both beyond the level
        set, where the kernel's Newton steps on the convex sqrt-drop converge monotonically);
        left: max of two distances short of it (drop <= alpha |g| + g^2 / (2 s^2))."""
        _, _, alpha, omega = mode_frame(mu, sigma, y)
        gauss = sigma * np.sqrt(2.0 * level / (1.0 + omega))
        if side > 0:
            with np.errstate(divide="ignore"):
                u = np.log1p(level / alpha)
                for _ in range(3):
                    u = np.log1p(level / alpha + u)
            return mode + np.minimum(gauss, u)
        lin = 2.0 * level / (alpha + np.sqrt(alpha * alpha + 2.0 * level / sigma / sigma))
        return mode - np.maximum(gauss, lin)


# -- the log-link count regressor's predictive (estimators.poisson_regressor, link="log") ---------
def predictive_log_pmf(mean, var, counts) -> np.ndarray:
    """log p(y* | data) = log E[Poisson(y* | e^f*)], f* ~ N(mean, var): the tilted normaliser of
    this module (exact quadrature; no gamma approximation as the square link's App. H uses)."""
    sd = np.sqrt(np.maximum(var, np.finfo(np.float64).tiny))
    return PoissonLog().log_z(*np.broadcast_arrays(mean, sd, counts))


def predictive_mode(mean, var) -> np.ndarray:
    """The mode of the predictive count (unimodal: a Poisson-lognormal mixture), searched on
    0..K per point, K past the mean by 8 standard deviations of the count (capped at 1e6)."""
    mean, var = np.broadcast_arrays(
        np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
    )
    with np.errstate(over="ignore"):
        m1 = np.exp(mean + 0.5 * var)
        sd = np.sqrt(m1 + m1 * m1 * np.expm1(var))
    top = np.minimum(np.ceil(m1 + 8.0 * sd + 10.0), MAX_COUNT)
    out = np.empty(mean.shape)
    for i in np.ndindex(mean.shape):
        k = np.arange(int(top[i]) + 1, dtype=np.float64)
        out[i] = np.argmax(predictive_log_pmf(mean[i], var[i], k))
    return out
