"""Relaxed EP (REP, Qi and Guo (2012)) for the label-noise step likelihood, as a projection for
:func:`qpinfer.inference.ep.run_ep`.

Derivation of the update implemented here (Qi and Guo, 2012, eqs. (4)-(5), (11)-(16), (35)-(40); the
printed equations have errors -- eq. (16) says "remove r_i" but multiplies by it, ``b_i`` acts as
a *precision*, eq. (14) drops the label -- so everything below is re-derived and checked against
objective (5) by quadrature in ``tests/inference/test_rep.py``).

Site ``i`` with cavity ``N(f | m_c, 1/tau_c)``, old site mean ``m_i = nu~_i / tau~_i`` (0 while the
site is still flat, the paper's initialisation) and relaxation factor (eq. (11), ``b >= 0`` a
precision)::

    r_b(f) = exp(-b (f - m_i)^2 / 2)          (r_0 = 1: EP)

1. *Relaxed cavity* ``r_b q^{\\i} = N(f | m_r, 1/tau_r)`` (up to a constant), ``tau_r = tau_c + b``,
   ``m_r = (tau_c m_c + b m_i) / tau_r`` (eq. (13) with ``b`` a precision).
2. *Relaxed tilted* ``p_b(f) ∝ t_i(f) N(f | m_r, 1/tau_r)``, ``t_i = p(y_i | f)`` *with* its label
   (eq. (14) corrected); its moments ``(mu_b, sigma_b^2)`` are the closed forms of
   :class:`qpinfer.likelihoods.step_noise.StepNoise` at the relaxed cavity.
3. *Objective (5)* over ``q`` (Gaussian) and ``b``: ``KL(t r_b q^{\\i} || q r_b) + c |b|``, the KL
   taken between the normalised densities (the normaliser is the ``-log Z^_i`` term of eq. (36)).
   For fixed ``b`` the minimising ``q r_b`` is the moment match ``N(mu_b, sigma_b^2)``, and the
   KL to it is the negentropy of ``p_b``::

       Q(b) = E_pb[log t] - log Z_b + 1/2 log(sigma_b^2 tau_r) + 1/2
              - tau_r (sigma_b^2 + (mu_b - m_r)^2) / 2 + c b,
       E_pb[log t] = A log(1 - eps) + (1 - A) log eps,   A = (1 - eps) Phi(z) / Z_b,
       Z_b = eps + (1 - 2 eps) Phi(z),   z = y m_r sqrt(tau_r),

   which is eq. (36) after simplification (its ``F_{i,b}``, eqs. (37)-(40), is the second moment
   ``sigma_b^2 + mu_b^2`` written through the old posterior).
4. *Line search* over ``b`` (eq. (35)): ``b = g tau_c`` on ``g in {0} ∪ 10^[-4, 3]`` (36 points),
   then golden-section refinement between the neighbours of the best grid point (skipped when
   ``b = 0`` is the best grid point at every site of the call); the result is kept only if it
   is no worse than the best grid point, and ``b = 0`` (EP) is always a candidate, so
   ``Q(b*) <= Q(0)``. Admissible ``b`` keep ``q`` proper: ``1/sigma_b^2 - b > 0``.
5. *Remove r* (eq. (16) corrected: divide, not multiply): ``q = N(mu_b, sigma_b^2) / r_b``,
   ``tau_q = 1/sigma_b^2 - b``, ``nu_q = mu_b/sigma_b^2 - b m_i``; the loop then forms the site
   ``q / q^{\\i}`` (eq. (6)): ``tau~ = 1/sigma_b^2 - tau_c - b``, i.e. EP's site from the relaxed
   cavity.

Since ``dQ/db`` at ``b = 0`` is finite, any ``c`` above ``max_i |dNegentropy/db|(0)`` makes
``b* = 0`` at every site and REP *is* EP (tested with ``c = 1e6``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.checks import number_or_nan
from qpinfer.likelihoods.base import Likelihood

__all__ = ["RelaxedMomentMatching", "check_penalty", "rep_objective"]

_GRID = np.concatenate([[0.0], np.logspace(-4.0, 3.0, 36)])
_GOLDEN = 0.5 * (np.sqrt(5.0) - 1.0)


def check_penalty(c: Any) -> float:
    """``float(c)`` if ``c`` is a finite number >= 0, else ``ValueError`` naming ``c``."""
    v = number_or_nan(c)
    if not (np.isfinite(v) and v >= 0.0):
        raise ValueError(f"c (the REP relaxation penalty) must be a finite number >= 0, got {c!r}")
    return v


def _relaxed(lik, m_c, tau_c, m_i, b, y):
    tau_r = tau_c + b
    m_r = (tau_c * m_c + b * m_i) / tau_r
    mu_b, sigma_b = lik.tilted_moments(m_r, 1.0 / np.sqrt(tau_r), y)
    return tau_r, m_r, mu_b, sigma_b


def rep_objective(lik: Likelihood, m_c, tau_c, m_i, b, y, c):
    """Q(b) of eq. (35) in the closed form of the module docstring (vectorised).

    Returns ``(Q, mu_b, sigma_b)``; ``Q = inf`` where ``b`` would make ``q`` improper.
    """
    tau_r, m_r, mu_b, sigma_b = _relaxed(lik, m_c, tau_c, m_i, b, y)
    log_zb, e_log_t = lik.tilted_expected_log_lik(m_r, 1.0 / np.sqrt(tau_r), y)
    with np.errstate(divide="ignore", invalid="ignore"):
        s2 = sigma_b * sigma_b
        q = (
            e_log_t
            - log_zb
            + 0.5 * np.log(s2 * tau_r)
            + 0.5
            - 0.5 * tau_r * (s2 + (mu_b - m_r) ** 2)
            + c * b
        )
        ok = np.isfinite(q) & (1.0 / s2 - b > 0) & (s2 > 0)
    return np.where(ok, q, np.inf), mu_b, sigma_b


class RelaxedMomentMatching:
    """REP's projection (Qi and Guo, 2012, derivation in the module docstring) for :func:`~qpinfer.run_ep`.

    The loop calls :meth:`project_with_site` (it needs the old site for the relaxation factor's
    mean); ``last_b`` holds the relaxation precisions ``b*`` chosen in the last call.
    """

    power = 1.0

    def __init__(self, likelihood: Any, c: float = 1.0, refine_steps: int = 30) -> None:
        if type(likelihood).tilted_expected_log_lik is Likelihood.tilted_expected_log_lik:
            raise ValueError(
                "REP needs a likelihood with E_q[log p(y | f)] under its tilt (objective (35) of "
                "Qi and Guo, 2012; the label-noise step has it in closed form); got "
                f"{getattr(likelihood, 'name', likelihood)!r}"
            )
        self.likelihood = likelihood
        self.c = check_penalty(c)
        self.refine_steps = int(refine_steps)
        self.last_b = np.zeros(0)

    def project(self, cavity_mean, cavity_std, y):
        """Without the old site: EP's projection (``b = 0``)."""
        return self.likelihood.tilted_moments(cavity_mean, cavity_std, y)

    def log_normalizer(self, cavity_mean, cavity_std, y):
        return self.likelihood.log_z(cavity_mean, cavity_std, y)

    def choose_b(self, m_c, tau_c, m_i, y):
        """Line search of eq. (35): ``b*`` per site, with ``Q(b*) <= Q(0)``."""
        lik, c = self.likelihood, self.c
        col = (slice(None), None)
        grid_b = tau_c[col] * _GRID[None, :]
        q, _, _ = rep_objective(lik, m_c[col], tau_c[col], m_i[col], grid_b, y[col], c)
        k = np.argmin(q, axis=1)
        rows = np.arange(m_c.size)
        best_b = grid_b[rows, k]
        best_q = q[rows, k]
        if not np.any(k):  # b = 0 beats every grid point at every site: EP's update (no search)
            return best_b
        # golden section on log g between the neighbours of the best grid point (g > 0 only)
        kl = np.clip(k - 1, 1, _GRID.size - 1)
        kr = np.clip(k + 1, 1, _GRID.size - 1)
        lo = np.log(_GRID[kl] * (k > 1) + _GRID[1] * 1e-2 * (k <= 1))
        hi = np.log(_GRID[kr])
        x1 = hi - _GOLDEN * (hi - lo)
        x2 = lo + _GOLDEN * (hi - lo)

        def qf(x):
            return rep_objective(lik, m_c, tau_c, m_i, tau_c * np.exp(x), y, c)[0]

        f1, f2 = qf(x1), qf(x2)
        for _ in range(self.refine_steps):
            left = f1 <= f2  # the minimum is in [lo, x2]: drop (x2, hi]
            hi = np.where(left, x2, hi)
            lo = np.where(left, lo, x1)
            x_keep, f_keep = np.where(left, x1, x2), np.where(left, f1, f2)
            x_new = np.where(left, hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo))
            f_new = qf(x_new)
            x1, f1 = np.where(left, x_new, x_keep), np.where(left, f_new, f_keep)
            x2, f2 = np.where(left, x_keep, x_new), np.where(left, f_keep, f_new)
        xr = np.where(f1 <= f2, x1, x2)
        fr = np.minimum(f1, f2)
        better = fr < best_q
        return np.where(better, tau_c * np.exp(xr), best_b)

    def project_with_site(self, cavity_mean, cavity_std, y, site_tau, site_nu):
        m_c = np.atleast_1d(np.asarray(cavity_mean, dtype=np.float64))
        tau_c = 1.0 / np.atleast_1d(np.asarray(cavity_std, dtype=np.float64)) ** 2
        y = np.atleast_1d(np.asarray(y, dtype=np.float64))
        site_tau = np.atleast_1d(site_tau)
        flat = site_tau <= 1e-8 * tau_c
        m_i = np.where(flat, 0.0, np.atleast_1d(site_nu) / np.where(flat, 1.0, site_tau))
        b = self.choose_b(m_c, tau_c, m_i, y) if self.c < np.inf else np.zeros_like(m_c)
        self.last_b = b
        self.last_site_mean = m_i
        _, _, mu_b, sigma_b = _relaxed(self.likelihood, m_c, tau_c, m_i, b, y)
        tau_q = 1.0 / (sigma_b * sigma_b) - b
        nu_q = mu_b / (sigma_b * sigma_b) - b * m_i
        relaxed = b > 0  # b = 0: EP's moments exactly (no round trip through natural parameters)
        mean = np.where(relaxed, nu_q / np.where(relaxed, tau_q, 1.0), mu_b)
        return mean, np.where(relaxed, 1.0 / np.sqrt(np.where(relaxed, tau_q, 1.0)), sigma_b)

    def __repr__(self) -> str:
        return f"RelaxedMomentMatching({self.likelihood!r}, c={self.c!r})"
