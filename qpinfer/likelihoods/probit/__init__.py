"""The probit likelihood p(y | f) = Phi(y f), y in {-1, +1} (Zhang et al., 2020, App. C.1).

Holds: :class:`Probit` (here), its sigma* limits (``limits``), its Power EP moments (``power``)
and its cell-table boxes (``boxes``). May import: what :mod:`qpinfer.likelihoods` may; never
another likelihood.
"""

from __future__ import annotations

import numpy as np
from scipy.special import erfcx, log_ndtr, ndtr

from qpinfer.likelihoods.base import Likelihood, check_sign_labels
from qpinfer.quadrature.normal_ratios import normal_ratio_terms, ratio_phi_over_Phi

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


_GL_X, _GL_W = np.polynomial.legendre.leggauss(40)
_T_MAX = 10.0  # |t| > 10 carries < 1e-22 of the N(0, 1) mass
_Z_BREAK = 6.0  # log Phi(z) changes regime within |z| < 6 (~0 above, ~ -z^2/2 below)


def _gauss_nodes(m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-site nodes f and weights for E[g(f)], f ~ N(m, s^2): composite Gauss-Legendre in
    t = (f - m)/s on [-10, 10], with panel edges where y f = -+6 so that the transition of
    log Phi is resolved for any s (plain Gauss-Hermite loses digits once s > 2: 1e-5 relative
    at s = 5 with 64 nodes)."""
    lo = np.clip((-_Z_BREAK - m) / s, -_T_MAX, _T_MAX)
    hi = np.clip((_Z_BREAK - m) / s, -_T_MAX, _T_MAX)
    edges = np.stack([np.full(m.shape, -_T_MAX), lo, hi, np.full(m.shape, _T_MAX)], axis=-1)
    a, b = edges[..., :-1, None], edges[..., 1:, None]
    t = 0.5 * (a + b) + 0.5 * (b - a) * _GL_X
    w = 0.5 * (b - a) * _GL_W * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)
    shape = m.shape + (-1,)
    return (m[..., None] + s[..., None] * t.reshape(shape)), w.reshape(shape)


class Probit(Likelihood):
    """Probit likelihood p(y | f) = Phi(y f) with labels y in {-1, +1} (Zhang et al. (2020), Appendix C.1)."""

    name = "probit"

    def check_y(self, y) -> np.ndarray:
        if type(y) is np.ndarray and y.dtype == np.float64 and (np.abs(y) == 1.0).all():
            return y  # the common case, in two array operations
        return check_sign_labels(y, "probit")

    def log_pdf(self, f, y) -> np.ndarray:
        return log_ndtr(np.asarray(y, dtype=np.float64) * np.asarray(f, dtype=np.float64))

    def _z(self, mu, sigma, y):
        return y * mu / np.hypot(1.0, sigma)  # hypot: no overflow of 1 + sigma^2

    def log_z(self, mu, sigma, y) -> np.ndarray:
        """eq. (35): Z = Phi(z), z = y mu / sqrt(1 + sigma^2)."""
        return log_ndtr(self._z(mu, sigma, y))

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """eq. (36) for the mean; variance sigma^2 - sigma^4 r (z + r) / (1 + sigma^2), r = phi/Phi.

        Written with eps = 1/sqrt(1 + sigma^2) and delta = sigma eps (no overflow or underflow of
        sigma^2 for any positive float sigma): mean = mu eps^2 + y sigma delta (z + r) and
        std = sigma sqrt(eps^2 + delta^2 (1 - r (z + r))), each term without cancellation.
        """
        mean, sigma, eps, delta, var_factor, _ = self._mean_terms(mu, sigma, y)
        std = sigma * np.sqrt(eps * eps + delta * delta * var_factor.reshape(mean.shape))
        return mean, std

    _mean_alone = True
    _boxes_module = "qpinfer.likelihoods.probit.boxes"

    def _log_lik_derivatives(self, f, y):
        """``log Phi(y f)`` and its derivatives from ``r = phi(z) / Phi(z)``, ``z = y f``, in the
        cancellation-free form of :func:`qpinfer.quadrature.normal_ratios.normal_ratio_terms`."""
        z = y * f
        r, z_plus_r, var_factor = normal_ratio_terms(np.atleast_1d(z).astype(np.float64))
        r, z_plus_r, var_factor = (a.reshape(np.shape(z)) for a in (r, z_plus_r, var_factor))
        lp = log_ndtr(z)
        d1 = y * r
        d2 = var_factor - 1.0  # -r (z + r)
        d3 = y * r * (z_plus_r * z_plus_r - var_factor)  # y r ((z+r)(z+2r) - 1)
        return lp, d1, d2, d3

    def _expected_log_lik(self, m, v, y):
        """By composite Gauss-Legendre quadrature (3 panels x 40 nodes per site, edges at
        ``z = -+6``; relative error ~1e-14 for any variance), with ``dE/dm = E[d log p/df]`` and
        ``dE/dv = E[d^2 log p/df^2] / 2`` (Bonnet's and Price's theorems)."""
        m, v, y = np.broadcast_arrays(m, v, y)
        # nodes placed in z = y f (log Phi(z)); E over f ~ N(m, v) is E over z ~ N(y m, v)
        z, w = _gauss_nodes(y * m, np.sqrt(v))
        lp, d1, d2, _ = self._log_lik_derivatives(z, np.ones_like(z))
        ys = y[..., None]
        return np.sum(w * lp, -1), np.sum(w * ys * d1, -1), 0.5 * np.sum(w * d2, -1)

    def power_moments(self, mu, sigma, y, power: float) -> tuple[np.ndarray, ...]:
        """By panel quadrature about the mode of the log-concave fractional tilt
        (:func:`qpinfer.likelihoods.probit.power.tilted_power_moments`)."""
        from qpinfer.likelihoods.probit.power import tilted_power_moments

        return tilted_power_moments(self, mu, sigma, y, power)

    def smoothed_scale(self, h) -> np.ndarray:
        """``sqrt(1 + h)``: ``int N(f | a, h) Phi(y f) df = Phi(y a / sqrt(1 + h))``."""
        return np.sqrt(1.0 + np.asarray(h, dtype=np.float64))

    def decision_values(self, mean, var) -> np.ndarray:
        """``mean / sqrt(1 + var)``: ``Phi`` of it is ``P(y* = +1)`` (R&W eq. (3.82))."""
        return mean / np.sqrt(1.0 + var)

    def class_probabilities(self, mean, var) -> np.ndarray:
        """``[Phi(-z), Phi(z)]`` with ``z = mean / sqrt(1 + var)`` (R&W eq. (3.82))."""
        z = self.decision_values(mean, var)
        return np.column_stack((ndtr(-z), ndtr(z)))

    def tilted_mean(self, mu, sigma, y) -> np.ndarray:
        """The mean of :meth:`tilted_moments` alone (the same operations): QP with a table that
        stores sigma* / sigma needs EP's mean but not its standard deviation."""
        return self._mean_terms(mu, sigma, y, variance=False)[0]

    def tilted_mean_and_z(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(tilted_mean, z)``: the mean of :meth:`tilted_moments` and its
        ``z = y mu / sqrt(1 + sigma^2)``, which is also the probit table's core coordinate tau
        of the canonical cavity (:class:`qpinfer.likelihoods.probit.boxes.ProbitCore`, bit for bit): QP's
        sweep with a cell table takes both from one pass
        (:meth:`qpinfer.tables.reduced.ReducedTable.qp_moments`)."""
        terms = self._mean_terms(mu, sigma, y, variance=False)
        return terms[0], terms[5]

    def _mean_terms(self, mu, sigma, y, variance=True):
        mu, sigma, y = np.broadcast_arrays(mu, sigma, y)
        # the tail branch of normal_ratio_terms replaces what overflows in the direct forms;
        # the mean itself may exceed the float range only when |mu| is within a factor of it
        with np.errstate(over="ignore", invalid="ignore"):
            h = np.hypot(1.0, sigma)  # no overflow of 1 + sigma^2
            z = np.atleast_1d(y * mu / h)  # the same operations as _z
            _, z_plus_r, var_factor = normal_ratio_terms(z, variance)
            eps, delta = 1.0 / h, sigma / h
            mean = (mu * eps) * eps + y * (sigma * delta) * z_plus_r.reshape(mu.shape)
        return mean, sigma, eps, delta, var_factor, z

    def canonical(self, mu, y):
        """Mirror symmetry: sigma*(mu, sigma, -1) == sigma*(-mu, sigma, +1) exactly."""
        return y * mu, np.ones_like(y)

    def _canonical_slope(self, mu, y):
        return y.astype(np.float64)  # canonical mu = y mu

    @staticmethod
    def _log_cdf(f):
        """``(log Phi(f), phi(f) / Phi(f))``: log(ndtr) is twice as fast as log_ndtr and as
        accurate while Phi(f) does not underflow (decided per element, so a point's result never
        depends on its batch)."""
        with np.errstate(divide="ignore"):
            log_cdf = np.log(ndtr(f))
        low = f < -30.0
        if low.any():
            log_cdf[low] = log_ndtr(f[low])
        return log_cdf, np.exp(-0.5 * f * f - _LOG_SQRT_2PI - log_cdf)

    def _log_tilted(self, f, mu, sigma, y, derivative=True):
        """log Phi(f) - (f - mu)^2 / (2 sigma^2) up to a per-point constant (y == +1 after
        canonical()), about the anchor c = mu / (1 + sigma^2): with t = f - c,
        -(f - mu)^2 / (2 sigma^2) = -t^2 / (2 sigma^2) + c t + const. Near the tilted mass t and
        c t are O(1) even where f - mu is huge (mu = -1e12, sigma = 1e6), so no digits cancel."""
        h = np.hypot(1.0, sigma)
        c = (mu / h) / h
        t = f - c
        g = t / sigma
        log_cdf, ratio = self._log_cdf(f)
        log_q = log_cdf - 0.5 * g * g + c * t
        deep = c < -20.0
        if np.any(deep):
            # Mass deep in Phi's left tail (f ~ c << 0), where log Phi(f) ~ -f^2/2 is 1e4-1e5
            # nats and its rounding (1e-16 relative) would be 1e-12 nats of noise: with
            # log Phi(f) = L(f) - f^2/2, L(f) = log(erfcx(-f/sqrt 2) / 2) (~ -log|f|, exact),
            # the same density is L(f) - t^2 (1 + 1/sigma^2) / 2 - c^2/2: all terms O(1).
            deep = np.broadcast_to(deep, np.shape(f))
            fd, td = f[deep], np.broadcast_to(t, np.shape(f))[deep]
            sd = np.broadcast_to(sigma, np.shape(f))[deep]
            big_l = np.where(
                fd < 0, np.log(0.5 * erfcx(-fd / np.sqrt(2.0))), log_cdf[deep] + 0.5 * fd * fd
            )
            log_q[deep] = big_l - 0.5 * td * td * (1.0 + 1.0 / sd / sd)
        if not derivative:
            return log_q, None
        return log_q, ratio - g / sigma + c

    _closed_form_takes_moments = True  # the cell table passes the EP moments it has already
    _clamp_closed_forms = (
        True  # the limits of qpinfer.likelihoods.probit.limits round above sigma_EP
    )
    _tail_check_sigma = 1.0  # the step's width: narrower cavities see a Gaussian-like tilt

    def _sigma_closed_form(self, mu, sigma, y, moments=None):
        """Regimes where quadrature would lose digits and a limit is exact to double precision;
        see :mod:`qpinfer.likelihoods.probit.limits`."""
        from qpinfer.likelihoods.probit.limits import (
            sigma_qp_limits,  # late: it builds on this class
        )

        return sigma_qp_limits(self, mu, sigma, moments)

    def _rescale(self, mu, sigma, y):
        """Very wide cavities: see :func:`qpinfer.likelihoods.probit.limits.rescale_wide`."""
        from qpinfer.likelihoods.probit.limits import rescale_wide

        return rescale_wide(mu, sigma)

    def _breakpoints(self, mu, sigma, y):
        """Phi(f) rises from ~0 to 1 - 1e-17 over f in [-3, 8.5], a feature of width ~1; a wide
        cavity (sigma > 2) makes the level-set panels much wider than that. For sigma > 20 the
        edges continue geometrically, 8.5 * 2^k up to the mass's extent, so that no panel is much
        longer than its distance from the step (where phi(Phi^-1(F)) ~ F sqrt(2 log(1/F)) is nearly
        singular); points are grouped by how many such edges they need."""
        from qpinfer.likelihoods.probit.limits import graded_breakpoints

        return graded_breakpoints(mu, sigma)

    def _level_guess(self, side, level, mode, x, mu, sigma, y):
        """First guess of a level set right of the mode: where Phi is ~flat, the drop from the
        mode is that of the Gaussian factor alone, u^2 / (2 sigma^2) + u r(mode) = level for
        u = x - mode (r = phi/Phi, the Gaussian's slope at the mode), solved without
        cancellation. The generic guess (curvature width at the mode) is far too short for a
        wide cavity, whose width at the mode is set by Phi. Left of the mode: ``x`` unchanged."""
        if side < 0:
            return x
        r = ratio_phi_over_Phi(mode)
        u = 2.0 * level / (r + np.sqrt(r * r + 2.0 * level / sigma / sigma))
        return np.where(sigma > 20.0, mode + u, x)

    def _lobes(self, mu, sigma, y):
        # Newton on g'(f) = r(f) - (f - mu)/sigma^2, which is convex and decreasing, so Newton
        # converges monotonically from any start left of the root. (f - mu)/sigma^2 is formed
        # about the anchor c = mu/(1 + sigma^2) as (f - c)/sigma^2 - c (no cancellation), and
        # c itself is such a start: g'(c) = r(c) + c > 0 for every c. (The tilted mean, right
        # of the mode, overshoots to f ~ mu for wide cavities with mu << 0.)
        h = np.hypot(1.0, sigma)
        c = (mu / h) / h
        f = c.copy()
        # A fixed number of steps (no batch-wide stopping test), so a point's result never
        # depends on the other points in its batch; the mode only centres the panels.
        for _ in range(30):
            r = ratio_phi_over_Phi(f)
            slope = (f - c) / sigma / sigma - c
            f = f - (r - slope) / (-r * (f + r) - 1.0 / sigma / sigma)
        r = ratio_phi_over_Phi(f)
        width = 1.0 / np.sqrt(r * (f + r) + 1.0 / sigma / sigma)
        inf = np.full_like(f, np.inf)
        return [(f, width, -inf, inf)]
