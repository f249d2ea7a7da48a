"""Label-noise step likelihood (Qi and Guo, 2012, eq. (8)) for EP, Power EP and QP.

    p(y | f) = (1 - eps) Theta(y f) + eps Theta(-y f),   y in {-1, +1},  eps in [0, 0.5),

``Theta(a) = 1`` for ``a >= 0``: a label is flipped with probability ``eps`` whatever ``f`` is.

Tilted distribution (canonical ``y = +1``, ``z = mu / sigma``): a Gaussian N(f | mu, sigma^2)
with a step at ``f = 0`` -- weight ``eps`` on ``f < 0`` and ``1 - eps`` on ``f >= 0``, i.e. a
mixture of two truncated Gaussians. Closed forms (``t = (f - mu)/sigma``, ``phi``/``Phi`` the
standard normal pdf/cdf)::

    Z      = eps + (1 - 2 eps) Phi(z)
    E[t]   = r := (1 - 2 eps) phi(z) / Z
    Var[t] = 1 - r (z + r)

(the same form as the probit moments with a different ``r``; for ``eps = 0`` the probit
Mills-ratio continued fraction of :func:`qpinfer.quadrature.normal_ratios.normal_ratio_terms` is
used in the lower tail). The tilted CDF is closed form too, so is its quantile function, and
:func:`qpinfer.sigma.exact.sigma_qp` takes sigma* from it (``StepNoise._sigma_qp_exact``,
:mod:`qpinfer.likelihoods.step_noise.closed`: two Gauss-Legendre sums, ~1e-15). The panel hooks
remain for sigma*'s derivatives (:mod:`qpinfer.sigma.derivatives`) and the tables' regimes: the
density is two lobes split at ``f = 0`` with hard bounds, each a truncated Gaussian whose mode is
``mu`` clipped into its side; ``eps = 0`` leaves one lobe (the other has zero mass and is dropped
by the kernel).

QP tables: one store per ``eps`` (the table coordinates stay ``(mu, log10 sigma, y)``); the
likelihood name identifies ``eps`` -- ``StepNoise(0.2).name == "step_noise(eps=0.2)"`` -- so a
table built for one ``eps`` is refused by :class:`qpinfer.QuantileMatching` for another.

Power EP (Qi and Guo, 2012, App. C, eq. (41)): ``p(y|f)^u = C [(1 - eps_u) Theta(y f) + eps_u Theta(-y f)]``
with ``C = (1 - eps)^u + eps^u`` and ``eps_u = eps^u / C`` -- again a step likelihood, so the
fractional tilted moments are closed form
(:meth:`StepNoise.power_moments`).

Holds: :class:`StepNoise` (here), sigma* from its closed-form tilted quantile function
(``closed``) and its cell-table box (``boxes``). May import: what :mod:`qpinfer.likelihoods`
may; never another likelihood.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtr

from qpinfer.checks import number_or_nan
from qpinfer.likelihoods.base import Likelihood, check_sign_labels
from qpinfer.likelihoods.step_noise.closed import sigma_ratio
from qpinfer.quadrature.normal_ratios import normal_ratio_terms

__all__ = ["DEFAULT_EPS", "StepNoise", "check_eps", "parse_name"]

#: ``eps`` of ``get_likelihood("step_noise")`` (Qi and Guo, 2012, Sec. 6.2 uses 0.2 with 20% flips).
DEFAULT_EPS = 0.2

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
# First log-density level of qpinfer.sigma.exact's panels: (sqrt(2 * _TAIL) / _N_LEVELS)^2 / 2
# nats.
_FIRST_LEVEL = 50.0 / 16.0
_GRADED = 10.0 ** np.arange(2.5, -14.5, -0.5)
_GRADED_EDGES = np.concatenate([-_GRADED, [0.0], _GRADED[::-1]])
_DEEP_TAIL = 1e8  # |z| beyond which a far-truncated normal is an exponential to double precision


def check_eps(eps: Any) -> float:
    """``float(eps)`` if it is a number in [0, 0.5), else ``ValueError`` naming ``eps``."""
    e = number_or_nan(eps)
    if not (0.0 <= e < 0.5):
        raise ValueError(
            f"eps (the label-flip probability of step_noise) must be in [0, 0.5), got {eps!r}"
        )
    return e


def parse_name(name: Any) -> float | None:
    """``eps`` of a step-noise likelihood name -- ``"step_noise"`` (the default eps) or
    ``"step_noise(eps=0.2)"`` (the form :attr:`StepNoise.name <qpinfer.Likelihood.name>` and table
    stores use) -- or ``None`` if ``name`` is not one. A malformed or out-of-range eps is a
    ``ValueError``."""
    if not isinstance(name, str) or not name.startswith("step_noise"):
        return None
    if name == "step_noise":
        return DEFAULT_EPS
    m = re.fullmatch(r"step_noise\(eps=([^()]*)\)", name)
    if m is None:
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        raise ValueError(f"eps in likelihood name {name!r} is not a number") from None
    return check_eps(value)


class StepNoise(Likelihood):
    """p(y | f) = (1 - eps) Theta(y f) + eps Theta(-y f), y in {-1, +1} (Qi and Guo, 2012, eq. (8))."""

    _n_nodes = 20
    #: not log-concave in f (a step): EP/QP sites may have negative precisions, which
    #: :func:`qpinfer.inference.ep.run_ep` then keeps instead of clipping
    log_concave = False
    _snap_to_bounds = True  # the density jumps at f = 0: lobes must end exactly there
    _boxes_module = "qpinfer.likelihoods.step_noise.boxes"

    def __init__(self, eps: float = DEFAULT_EPS) -> None:
        self.eps = check_eps(eps)
        self.name = f"step_noise(eps={self.eps!r})"
        with np.errstate(divide="ignore"):
            self._log_eps = float(np.log(self.eps))
        self._log_1m_eps = float(np.log1p(-self.eps))

    def __repr__(self) -> str:
        return f"StepNoise(eps={self.eps!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepNoise) and other.eps == self.eps

    def __hash__(self) -> int:
        return hash(("step_noise", self.eps))

    def check_y(self, y) -> np.ndarray:
        return check_sign_labels(y, "step_noise")

    def log_pdf(self, f, y) -> np.ndarray:
        yf = np.asarray(y, dtype=np.float64) * np.asarray(f, dtype=np.float64)
        return np.where(yf >= 0, self._log_1m_eps, self._log_eps)

    def _log_z_of(self, z):
        with np.errstate(divide="ignore"):
            return np.logaddexp(self._log_eps + log_ndtr(-z), self._log_1m_eps + log_ndtr(z))

    def log_z(self, mu, sigma, y) -> np.ndarray:
        """log Z, Z = eps Phi(-z) + (1 - eps) Phi(z), z = y mu / sigma."""
        return self._log_z_of(y * mu / sigma)

    def table_params(self) -> dict:
        return {"eps": self.eps}

    def tilted_expected_log_lik(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``E_q[log p] = A log(1 - eps) + (1 - A) log eps``, ``A = (1 - eps) Phi(z) / Z`` the
        tilt's mass on the side of the label, and log Z (Qi and Guo, 2012, eq. (35))."""
        z = y * mu / sigma
        log_z = self._log_z_of(z)
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.exp(self._log_1m_eps + log_ndtr(z) - log_z)
            return log_z, a * self._log_1m_eps + np.where(a < 1, (1.0 - a) * self._log_eps, 0.0)

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean mu + y sigma r and std sigma sqrt(1 - r (z + r)), r = (1-2eps) phi(z) / Z."""
        mu, sigma, y = np.broadcast_arrays(
            np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64), y
        )
        # |z| overflows (mu / sigma beyond the largest float): inf / NaN intermediates, masked
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.atleast_1d(y * mu / sigma)
            if self.eps == 0.0:
                r, z_plus_r, var_factor = normal_ratio_terms(z)
            else:
                log_r = np.log1p(-2.0 * self.eps) - 0.5 * z * z - _LOG_SQRT_2PI - self._log_z_of(z)
                r = np.exp(log_r)
                z_plus_r = z + r
                # r = 0 where |z| overflows: the tilted density is the cavity there
                var_factor = np.where(r > 0, 1.0 - r * z_plus_r, 1.0)
            var_factor = np.where(r > 0, var_factor, 1.0)  # r = 0 where z = +-inf: the cavity
            r = r.reshape(mu.shape)
            var_factor = np.maximum(var_factor.reshape(mu.shape), 0.0)
            return mu + y * sigma * r, sigma * np.sqrt(var_factor)

    def decision_values(self, mean, var) -> np.ndarray:
        """``mean / sqrt(var)``: ``P(y* = +1) = eps + (1 - 2 eps) Phi`` of it."""
        return mean / np.sqrt(np.maximum(var, np.finfo(np.float64).tiny))

    def class_probabilities(self, mean, var) -> np.ndarray:
        """``[1 - p, p]``, ``p = eps + (1 - 2 eps) Phi(mean / sqrt(var))`` (Qi and Guo, 2012,
        eq. (8))."""
        e = self.eps
        p1 = e + (1.0 - 2.0 * e) * ndtr(self.decision_values(mean, var))
        return np.column_stack((1.0 - p1, p1))

    def power_moments(self, mu, sigma, y, power: float) -> tuple[np.ndarray, ...]:
        """Closed form: ``p(y|f)^power = C StepNoise(eps_u)``, ``C = (1 - eps)^power +
        eps^power``, ``eps_u = eps^power / C`` (Qi and Guo, 2012, App. C, eq. (41))."""
        e = self.eps
        c = (1.0 - e) ** power + e**power
        frac = StepNoise(e**power / c)
        return float(np.log(c)) + frac.log_z(mu, sigma, y), *frac.tilted_moments(mu, sigma, y)

    def canonical(self, mu, y):
        """Mirror symmetry: sigma*(mu, sigma, -1) == sigma*(-mu, sigma, +1) exactly."""
        return y * mu, np.ones_like(y)

    def _canonical_slope(self, mu, y):
        return y.astype(np.float64)  # canonical mu = y mu

    def _log_tilted(self, f, mu, sigma, y, derivative=True):
        """log p(+1 | f) - (f - mu)^2 / (2 sigma^2) up to the per-point constant
        mu^2 / (2 sigma^2), i.e. -f^2 / (2 sigma^2) + f mu / sigma^2: a lobe far from its
        Gaussian's centre (the deep tail beyond the step) lives at |f| << |mu|, where this form
        loses nothing and (f - mu)^2 would lose all digits. (The kernel sees sigma = 1 only,
        see :meth:`_rescale`; near the centre |mu| <= 9 or the answer is closed form.)"""
        log_q = (
            np.where(f >= 0, self._log_1m_eps, self._log_eps)
            + f * (mu / sigma - 0.5 * f / sigma) / sigma
        )
        return log_q, ((mu - f) / sigma / sigma) if derivative else None

    def _side_log_masses(self, mu, sigma):
        """z = mu / sigma and the log masses of the tilted density left and right of f = 0."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            z = mu / sigma
            return z, self._log_eps + log_ndtr(-z), self._log_1m_eps + log_ndtr(z)

    def _sigma_closed_form(self, mu, sigma, y):
        """sigma* = sigma where the side holding the Gaussian's centre carries all but e^-40 of
        the mass and the step is more than 9 sd from the centre: the tilted density is then the
        cavity to double precision (it loses < 1e-19 of its mass to the truncation)."""
        z, left, right = self._side_log_masses(mu, sigma)
        centre_wins = np.where(z < 0, left - right, right - left) > 40.0
        return centre_wins & (np.abs(z) > 9.0), sigma

    def _sigma_qp_exact(self, mu, sigma, y):
        """sigma* at canonical cavities (y = +1) without panels, for
        :func:`qpinfer.sigma.exact.sigma_qp`: ``sigma`` where the tilted density is the cavity
        (:meth:`_sigma_closed_form`), else ``sigma * R(z)`` with ``R`` from the closed-form tilted
        quantile function (:func:`qpinfer.likelihoods.step_noise.closed.sigma_ratio`; eps = 0's
        deep tail at z = -1e8, scaled: :meth:`_rescale`), clamped to the EP std (Theorem 2, as
        the panel kernel's points are)."""
        closed, out = self._sigma_closed_form(mu, sigma, y)
        out = np.array(out, dtype=np.float64)
        idx = np.flatnonzero(~closed)
        if idx.size:
            _, z, _, scale = self._rescale(mu[idx], sigma[idx], y[idx])
            with np.errstate(over="ignore", under="ignore"):
                got = sigma_ratio(z, self.eps) * scale
            ep = self.tilted_moments(mu[idx], sigma[idx], y[idx])[1]
            out[idx] = np.where((got > ep) & (ep > 0.0) & (ep < np.inf), ep, got)
        return out

    def _rescale(self, mu, sigma, y):
        """Every cavity is mapped to sigma' = 1, mu' = z = mu / sigma (the ratio depends on z and
        eps only: the family is affine-equivariant), so no node position depends on the scale.
        Where the side away from the centre carries the mass (eps ~ 0, z << 0: a normal
        truncated far in its tail, ~ an exponential of scale 1/|z|) and |z| > 1e8, the ratio at
        z' = -1e8 is used, scaled by 1e8 / |z| (the shape's correction is O(1/z^2) < 1e-16)."""
        z, left, right = self._side_log_masses(mu, sigma)
        deep = (z < -_DEEP_TAIL) & ~(left > right - 40.0)  # also where both underflow
        z_r = np.where(deep, -_DEEP_TAIL, z)
        with np.errstate(divide="ignore"):
            scale = np.where(deep, sigma * (_DEEP_TAIL / np.abs(z)), sigma)
        return np.ones(z.shape, dtype=bool), z_r, np.ones_like(z), scale

    def _rescale_jacobian(self, mu, sigma, mu_r, sigma_r, scale):
        """mu' = mu / sigma, sigma' = 1, scale = sigma, where the cavity is not deep."""
        one, zero = np.ones_like(mu), np.zeros_like(mu)
        ok = (sigma_r == 1.0) & (scale == sigma) & (mu_r == mu / sigma)
        return ok, (1.0 / sigma, -mu_r / sigma, zero, zero, zero, one)

    def _breakpoints(self, mu, sigma, y):
        """Where the CDF at the jump, u0 = min(F(0), 1 - F(0)), is small, phi(Phi^-1(F(f))) ~
        u0 + c |f| sqrt(2 log(1 / (u0 + c |f|))) has a near-singular derivative at f = 0: edges
        graded geometrically towards 0 (absolute, 1e-14 ... 300; clipped into each lobe) keep
        the Gauss-Legendre panels away from it."""
        z = y * mu / sigma
        with np.errstate(divide="ignore"):
            log_f0 = self._log_eps + log_ndtr(-z) - self._log_z_of(z)
            log_s0 = self._log_1m_eps + log_ndtr(z) - self._log_z_of(z)
        need = (np.minimum(log_f0, log_s0) < np.log(0.2)).astype(np.int64)
        return need, _GRADED_EDGES

    def _lobes(self, mu, sigma, y):
        # Two truncated Gaussians split at f = 0. A lobe's mode is mu clipped into its side; when
        # the mode sits on the bound, the drop below it is ((x - mu)^2 - mu^2) / (2 sigma^2), so
        # the "width" is chosen to make the kernel's first level-set guess exact (later guesses
        # then lie on the mode side of their level sets, where its Newton steps are monotone).
        zero = np.zeros_like(mu)
        inf = np.full_like(mu, np.inf)
        a = np.abs(mu)
        # (sqrt(a^2 + b) - a) / sqrt(2 L) with b = 2 sigma^2 L, without cancellation for a >> sigma
        b = 2.0 * sigma * sigma * _FIRST_LEVEL
        boundary_width = b / (np.sqrt(a * a + b) + a) / np.sqrt(2.0 * _FIRST_LEVEL)
        left_mode = np.minimum(mu, 0.0)
        right_mode = np.maximum(mu, 0.0)
        left_width = np.where(mu < 0, sigma, boundary_width)
        right_width = np.where(mu > 0, sigma, boundary_width)
        return [(left_mode, left_width, -inf, zero), (right_mode, right_width, zero, inf)]
