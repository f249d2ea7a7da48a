"""Power EP for GP models with factorised likelihoods (paper 004, Sec. 3.4).

Power EP removes only a fraction ``alpha`` of a site to form the cavity and brings in the same
fraction of the true likelihood (paper 004, Sec. 3.4, steps 1-3):

* deletion: ``q^{\\n}(f) ∝ q(f) / t_n(f)^alpha``;
* projection: ``q_new = proj[q^{\\n}(f) p(y_n | f_n)^alpha]`` (moment matching);
* update: ``t_n <- (q_new / q^{\\n})^(1/alpha)``.

Fixed points are those of the alpha-divergence energy: ``alpha = 1`` is EP, ``alpha -> 0`` the
variational (exclusive-KL) solution. Damping the update with step ``alpha``,
``t_n <- t_n^(1 - alpha) (q_new / q^{\\n})`` (paper 004 eqs. (108)-(109)), has the same fixed
points; :func:`qpinfer.inference.ep.run_ep` applies its own ``damping`` to the undamped update
instead.

What this module adds to the site-update loop of :mod:`qpinfer.inference.ep`:

* :class:`PowerMomentMatching` -- the projection of the *fractional* tilted distribution
  ``N(f | mu, sigma^2) p(y | f)^alpha``. Its ``power`` attribute is what
  :func:`qpinfer.inference.ep.run_ep` (:func:`qpinfer.inference.site_update.site_proposal`) uses for
  the fractional cavity and the fractional site update (``tau~ <- (1/sigma*^2 - tau_cav) / alpha``).
  With ``alpha = 1`` it calls the likelihood's closed forms, so it *is* EP (bit for bit). Otherwise
  the moments and the normaliser come from :func:`~qpinfer.inference.power_ep.tilted_power_moments`,
  an adaptive Gauss-Hermite rule centred on the mode of the (log-concave) tilted density.
* :func:`power_ep_log_evidence` -- the Power EP approximate log marginal likelihood, paper 004
  eq. (110) with the pseudo-points at the training inputs (``u = f``)::

      log Z = G(q) - G(p) + (1/alpha) sum_n [log Z^_n + G(q^{\\n}) - G(q)]

  ``G`` the log normaliser of a Gaussian (eqs. (113)-(115)); ``G(q) - G(p) = -sum log L_ii +
  nu~^T mean / 2`` (R&W's B-form) and ``G(q^{\\n}) - G(q)`` only involves the marginal of
  ``f_n``. For ``alpha = 1`` this is eq. (4) of paper 000
  (:func:`qpinfer.inference.evidence.log_evidence`).

Its gradient in the kernel hyperparameters at a Power EP fixed point is the fixed-site gradient of
:func:`qpinfer.inference.evidence.log_evidence_gradient` (R&W eq. (5.27)): the bracket in eq. (110)
is ``log E_q[p^alpha / t_n^alpha]`` over the marginal of ``f_n``, which is stationary in that
marginal's mean and variance exactly when the fractional tilted moments match ``q`` (the fixed
point), so only ``G(q) - G(p)`` moves with ``K`` to first order.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.polynomial import legendre
from scipy.special import logsumexp

from qpinfer.checks import number_or_nan
from qpinfer.likelihoods.step_noise import StepNoise
from qpinfer.quadrature.level_sets import TiltedDensity

__all__ = [
    "PowerMomentMatching",
    "StepNoisePowerMatching",
    "check_power",
    "power_ep_log_evidence",
    "tilted_power_moments",
]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_N_LEVELS = 4  # level-set panels on each side of the mode
_N_NODES = 12  # Gauss-Legendre nodes per panel


@functools.cache
def _legendre_rule(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    return legendre.leggauss(n_nodes)


def check_power(power: Any) -> float:
    """``float(power)`` if it is a number in (0, 1], else a ``ValueError`` naming ``alpha``."""
    p = number_or_nan(power)
    if not (0.0 < p <= 1.0):
        raise ValueError(
            f"alpha (the Power EP power) must be in (0, 1], got {power!r}; alpha = 1 is EP, "
            "alpha -> 0 the variational limit"
        )
    return p


def _probit_mode(
    mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, power: float
) -> tuple[np.ndarray, np.ndarray]:
    """Mode and Laplace width of ``N(f | mu, sigma^2) Phi(y f)^power`` (log-concave).

    Newton on ``g'(z) = power r(z) - (z - m)/s2`` in ``z = y f`` with ``m = y mu`` and
    ``r = phi/Phi``: ``g'`` is convex and decreasing, so Newton started at ``z = m`` (where
    ``g' > 0``, left of the root) increases monotonically to the root.
    """
    from qpinfer.quadrature.normal_ratios import (
        probit_moment_terms as _probit_moment_terms,  # stable r, z + r
    )

    s2 = sigma * sigma
    m = y * mu
    z = m.copy()  # g'(m) = power r(m) > 0: left of the root, so Newton increases monotonically
    for _ in range(100):
        r, z_plus_r, _ = _probit_moment_terms(z)
        g1 = power * r - (z - m) / s2
        g2 = -power * r * z_plus_r - 1.0 / s2
        step = g1 / g2
        z = z - step
        if np.all(np.abs(step) <= 1e-12 * (1.0 + np.abs(z))):
            break
    r, z_plus_r, _ = _probit_moment_terms(z)
    width = 1.0 / np.sqrt(power * r * z_plus_r + 1.0 / s2)
    return y * z, width


class _FractionalTilted(TiltedDensity):
    """The fractional tilted density ``p(y | f)^power N(f | mu, sigma^2)`` through the
    likelihood hook ``_log_tilted`` that :func:`qpinfer.quadrature.level_sets.level_edges` places
    panels with."""

    def __init__(self, likelihood: Any, power: float) -> None:
        self.likelihood = likelihood
        self.power = power

    def _log_tilted(self, f, mu, sigma, y, derivative: bool = True):
        log_lik, ratio = self.likelihood._log_cdf(f)  # y == +1 after canonical()
        d = (f - mu) / sigma
        out = self.power * log_lik - 0.5 * d * d
        if not derivative:
            return out, None
        return out, self.power * ratio - d / sigma


def tilted_power_moments(
    likelihood: Any,
    mu: np.ndarray,
    sigma: np.ndarray,
    y: np.ndarray,
    power: float,
    n_levels: int = _N_LEVELS,
    n_nodes: int = _N_NODES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log Z, mean, std)`` of the fractional tilted density ``N(f | mu, sigma^2) p(y|f)^power``.

    ``log Z = log ∫ N(f | mu, sigma^2) p(y | f)^power df`` (paper 004 eq. (116) for one site);
    mean and standard deviation are those of the normalised density (the Power EP projection,
    eq. (16)). Probit likelihood (the fractional tilted density is log-concave), vectorised:

    1. the mode and curvature width by Newton (``_probit_mode()``);
    2. panel edges on log-density level sets on both sides of the mode, ``n_levels`` per side
       down to 50 nats (the panel placement of the exact sigma* kernel,
       :func:`qpinfer.quadrature.level_sets.level_edges`), plus the probit's own breakpoints (where
       ``Phi`` turns from rising to flat, ``Probit._breakpoints``) clipped into that range, so that
       a wide cavity's flat stretch and the sharp probit edge land on different panels;
    3. ``n_nodes`` Gauss-Legendre nodes per panel give the normaliser (log-sum-exp) and the first
       two moments about the mode (no cancellation).

    Accurate to ~1e-9 relative against adaptive ``scipy.integrate.quad`` over mu in [-30, 30],
    sigma in [0.05, 40], power in [1e-3, 1] (``tests/inference/test_power_ep.py``).
    """
    from qpinfer.quadrature.level_sets import (
        level_edges as _level_edges,  # the sigma* kernel's panels
    )

    if getattr(likelihood, "name", None) != "probit":
        raise NotImplementedError(
            "Power EP with alpha < 1 is implemented for the probit likelihood only, got "
            f"{getattr(likelihood, 'name', likelihood)!r}"
        )
    mu, sigma, y = np.broadcast_arrays(
        np.asarray(mu, dtype=np.float64),
        np.asarray(sigma, dtype=np.float64),
        np.asarray(y, dtype=np.float64),
    )
    shape = mu.shape
    mu, sigma, y = (np.atleast_1d(a).ravel() for a in (mu, sigma, y))
    m, y1 = likelihood.canonical(mu, y)  # z = y f: the tilted density of z has y = +1
    mode, width = _probit_mode(m, sigma, y1, power)
    frac = _FractionalTilted(likelihood, power)
    inf = np.full_like(mode, np.inf)
    with np.errstate(invalid="ignore"):  # inf - inf in its bound guard, discarded by np.where
        edges = _level_edges(frac, mode, width, -inf, inf, m, sigma, y1, n_levels)
    breaks = likelihood._breakpoints(m, sigma, y1)
    if breaks is not None:
        base = breaks[1](1) if callable(breaks[1]) else breaks[1]  # the step's own edges
        extra = np.clip(base[None, :], edges[:, :1], edges[:, -1:])
        edges = np.sort(np.concatenate([edges, extra], axis=1), axis=1)
    x, w = _legendre_rule(int(n_nodes))
    half = 0.5 * (edges[:, 1:] - edges[:, :-1])
    z = (0.5 * (edges[:, 1:] + edges[:, :-1]))[..., None] + half[..., None] * x
    col = (slice(None), None, None)
    log_q, _ = frac._log_tilted(z, m[col], sigma[col], y1[col], derivative=False)
    with np.errstate(divide="ignore"):
        log_terms = (log_q + np.log(half)[..., None] + np.log(w)).reshape(len(m), -1)
    log_mass = logsumexp(log_terms, axis=1)
    wts = np.exp(log_terms - log_mass[:, None])
    dev = z.reshape(len(m), -1) - mode[:, None]  # moments about the mode: no cancellation
    m_dev = np.sum(wts * dev, axis=1)
    var = np.sum(wts * (dev - m_dev[:, None]) ** 2, axis=1)
    log_z = log_mass - np.log(sigma) - _LOG_SQRT_2PI
    mean = y * (mode + m_dev)
    return log_z.reshape(shape), mean.reshape(shape), np.sqrt(var).reshape(shape)


class PowerMomentMatching:
    """Power EP's projection: moment matching of ``N(f | cavity) p(y | f)^power`` (Sec. 3.4).

    Plugs into :func:`qpinfer.inference.ep.run_ep` (the loop reads ``power`` for the fractional
    cavity and site update). ``power = 1`` uses the likelihood's closed forms and is exactly
    :class:`qpinfer.MomentMatching`; otherwise
    :func:`~qpinfer.inference.power_ep.tilted_power_moments` (panel quadrature; probit only).
    """

    def __init__(self, likelihood: Any, power: float = 0.5) -> None:
        self.likelihood = likelihood
        self.power = check_power(power)

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.power == 1.0:
            return self.likelihood.tilted_moments(cavity_mean, cavity_std, y)
        _, mean, std = tilted_power_moments(self.likelihood, cavity_mean, cavity_std, y, self.power)
        return mean, std

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        """``log ∫ N(f | cavity) p(y | f)^power df`` (eq. (116))."""
        if self.power == 1.0:
            return self.likelihood.log_z(cavity_mean, cavity_std, y)
        log_z, _, _ = tilted_power_moments(self.likelihood, cavity_mean, cavity_std, y, self.power)
        return log_z

    def __repr__(self) -> str:
        name = getattr(self.likelihood, "name", self.likelihood)
        return f"PowerMomentMatching({name!r}, power={self.power!r})"


def power_ep_log_evidence(
    post: Any,
    tau: np.ndarray,
    nu: np.ndarray,
    y: np.ndarray,
    projection: Any,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Power EP approximate log marginal likelihood, paper 004 eq. (110) with ``u = f``.

    ``post`` is a :class:`qpinfer.inference.dense_posterior.Posterior` for the sites ``(tau, nu)``
    and ``projection`` has ``power`` and ``log_normalizer`` (e.g. :class:`PowerMomentMatching`)::

        log Z = -sum log L_ii + nu~^T mean / 2
                + (1/alpha) sum [ log Z^_n - log(1 - alpha tau~_n Sigma_nn) / 2
                                  + (nu_c^2 / tau_c - mean_n^2 / Sigma_nn) / 2 ]

    with the *fractional* cavity ``tau_c = 1/Sigma_nn - alpha tau~_n``,
    ``nu_c = mean_n/Sigma_nn - alpha nu~_n`` and ``log Z^_n`` the fractional tilted normaliser
    (eq. (116)). The bracket is ``G(q^{\\n}) - G(q)`` of eqs. (113)-(114) for the marginal of
    ``f_n``. Same signature and return value as :func:`qpinfer.inference.evidence.log_evidence`:
    ``(log Z, cavity_mean, cavity_var)``; for ``alpha = 1`` the two agree.
    """
    alpha = float(getattr(projection, "power", 1.0))
    var = post.var
    mean = post.mean
    tau_c = 1.0 / var - alpha * tau
    nu_c = mean / var - alpha * nu
    cav_var = 1.0 / tau_c
    cav_mean = nu_c * cav_var
    log_zhat = projection.log_normalizer(cav_mean, np.sqrt(cav_var), y)
    # G(q^\\n) - G(q) = -log(1 - a tau v)/2 + (nu_c^2/tau_c - m^2/v)/2, the second part written
    # as (a (tau m^2 - 2 nu m) + a^2 nu^2 v) / (2 (1 - a tau v)): no cancellation for tiny v
    shrink = 1.0 - alpha * tau * var
    delta_g = (
        -0.5 * np.log(shrink)
        + 0.5
        * (alpha * (tau * mean * mean - 2.0 * nu * mean) + alpha * alpha * nu * nu * var)
        / shrink
    )
    log_z = -post.half_logdet_B() + 0.5 * nu @ mean + np.sum(log_zhat + delta_g) / alpha
    return float(log_z), cav_mean, cav_var


class StepNoisePowerMatching:
    """Power EP projection for :class:`~qpinfer.likelihoods.step_noise.StepNoise` (paper 002 App. C,
    eq. (41)), closed form.

    ``p(y|f)^power = C StepNoise(eps_u)``, ``C = (1-eps)^power + eps^power``,
    ``eps_u = eps^power / C``; ``power = 1`` is EP exactly.
    """

    def __init__(self, likelihood: StepNoise, power: float = 0.8) -> None:
        self.likelihood = likelihood
        self.power = check_power(power)
        e = likelihood.eps
        c = (1.0 - e) ** self.power + e**self.power
        self._log_c = float(np.log(c)) if self.power != 1.0 else 0.0
        self._frac = likelihood if self.power == 1.0 else StepNoise(e**self.power / c)

    def project(self, cavity_mean, cavity_std, y):
        return self._frac.tilted_moments(cavity_mean, cavity_std, y)

    def log_normalizer(self, cavity_mean, cavity_std, y):
        return self._log_c + self._frac.log_z(cavity_mean, cavity_std, y)

    def __repr__(self) -> str:
        return f"StepNoisePowerMatching({self.likelihood!r}, power={self.power!r})"
