"""Power EP for GP models with factorised likelihoods (Bui et al., 2017, Sec. 3.4).

Power EP removes only a fraction ``alpha`` of a site to form the cavity and brings in the same
fraction of the true likelihood (Bui et al., 2017, Sec. 3.4, steps 1-3):

* deletion: ``q^{\\n}(f) ∝ q(f) / t_n(f)^alpha``;
* projection: ``q_new = proj[q^{\\n}(f) p(y_n | f_n)^alpha]`` (moment matching);
* update: ``t_n <- (q_new / q^{\\n})^(1/alpha)``.

Fixed points are those of the alpha-divergence energy: ``alpha = 1`` is EP, ``alpha -> 0`` the
variational (exclusive-KL) solution. Damping the update with step ``alpha``,
``t_n <- t_n^(1 - alpha) (q_new / q^{\\n})`` (Bui et al., 2017, eqs. (108)-(109)), has the same fixed
points; :func:`qpinfer.inference.ep.run_ep` applies its own ``damping`` to the undamped update
instead.

What this module adds to the site-update loop of :mod:`qpinfer.inference.ep`:

* :class:`PowerMomentMatching` -- the projection of the *fractional* tilted distribution
  ``N(f | mu, sigma^2) p(y | f)^alpha``. Its ``power`` attribute is what
  :func:`qpinfer.inference.ep.run_ep` (:func:`qpinfer.inference.site_update.site_proposal`) uses for
  the fractional cavity and the fractional site update (``tau~ <- (1/sigma*^2 - tau_cav) / alpha``).
  With ``alpha = 1`` it calls the likelihood's closed forms, so it *is* EP (bit for bit). Otherwise
  the moments and the normaliser are the likelihood's :meth:`~qpinfer.Likelihood.power_moments`
  (the probit's panel quadrature about the mode of its log-concave fractional tilt,
  :mod:`qpinfer.likelihoods.probit.power`; the label-noise step's closed form).
* :func:`power_ep_log_evidence` -- the Power EP approximate log marginal likelihood, Bui et al. (2017)
  eq. (110) with the pseudo-points at the training inputs (``u = f``)::

      log Z = G(q) - G(p) + (1/alpha) sum_n [log Z^_n + G(q^{\\n}) - G(q)]

  ``G`` the log normaliser of a Gaussian (eqs. (113)-(115)); ``G(q) - G(p) = -sum log L_ii +
  nu~^T mean / 2`` (R&W's B-form) and ``G(q^{\\n}) - G(q)`` only involves the marginal of
  ``f_n``. For ``alpha = 1`` this is eq. (4) of Zhang et al. (2020)
  (:func:`qpinfer.inference.evidence.log_evidence`).

Its gradient in the kernel hyperparameters at a Power EP fixed point is the fixed-site gradient of
:func:`qpinfer.inference.evidence.log_evidence_gradient` (R&W eq. (5.27)): the bracket in eq. (110)
is ``log E_q[p^alpha / t_n^alpha]`` over the marginal of ``f_n``, which is stationary in that
marginal's mean and variance exactly when the fractional tilted moments match ``q`` (the fixed
point), so only ``G(q) - G(p)`` moves with ``K`` to first order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.checks import number_or_nan

__all__ = ["PowerMomentMatching", "check_power", "power_ep_log_evidence"]


def check_power(power: Any) -> float:
    """``float(power)`` if it is a number in (0, 1], else a ``ValueError`` naming ``alpha``."""
    p = number_or_nan(power)
    if not (0.0 < p <= 1.0):
        raise ValueError(
            f"alpha (the Power EP power) must be in (0, 1], got {power!r}; alpha = 1 is EP, "
            "alpha -> 0 the variational limit"
        )
    return p


class PowerMomentMatching:
    """Power EP's projection: moment matching of ``N(f | cavity) p(y | f)^power`` (Bui et al., 2017, Section 3.4).

    Plugs into :func:`qpinfer.inference.ep.run_ep` (the loop reads ``power`` for the fractional
    cavity and site update). ``power = 1`` uses the likelihood's closed forms and is exactly
    :class:`qpinfer.MomentMatching`; otherwise the likelihood's
    :meth:`~qpinfer.Likelihood.power_moments` (the probit's panel quadrature, the label-noise
    step's closed form; another likelihood refuses, naming itself).
    """

    def __init__(self, likelihood: Any, power: float = 0.5) -> None:
        self.likelihood = likelihood
        self.power = check_power(power)

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The projected Gaussian's mean and standard deviation at each site.

        Parameters
        ----------
        cavity_mean, cavity_std : ndarray
            The cavity distributions' means and standard deviations (> 0), one per site.
        y : ndarray
            The sites' observations.

        Returns
        -------
        mean, std : ndarray
        """
        if self.power == 1.0:
            return self.likelihood.tilted_moments(cavity_mean, cavity_std, y)
        _, mean, std = self.likelihood.power_moments(cavity_mean, cavity_std, y, self.power)
        return mean, std

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        """``log ∫ N(f | cavity) p(y | f)^power df`` (eq. (116))."""
        if self.power == 1.0:
            return self.likelihood.log_z(cavity_mean, cavity_std, y)
        log_z, _, _ = self.likelihood.power_moments(cavity_mean, cavity_std, y, self.power)
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
    """Power EP approximate log marginal likelihood, Bui et al. (2017) eq. (110) with ``u = f``.

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
