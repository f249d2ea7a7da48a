"""Where the probit sigma* needs no quadrature, or only quadrature at a smaller cavity width.

In z = (f - mu) / sigma the probit tilted density is the extended skew-normal
phi(z) Phi(mu + sigma z) (label +1 after the mirror symmetry), with
tau = mu / sqrt(1 + sigma^2) and delta = sigma / sqrt(1 + sigma^2). Three regimes are answered
from limits that are exact to double precision, so :mod:`qpinfer.sigma.exact`'s panel quadrature
only sees cavities whose node positions it can represent to ~1e-13 (``tests/sigma/test_sigma_wide.py``
holds all of them to the mpmath reference):

1. **The likelihood is flat over the cavity** (``mu - 8.5 > 9 sigma``): Phi(f) > 1 - 1e-17 for
   f > 8.5, and the cavity holds < 1e-19 of its mass below 8.5, so the tilted density is the
   cavity to double precision and sigma* = sigma.
2. **The tilted density is Gaussian to double precision** (``max(1, |m|) / s >= 500``, m and s
   the tilted mean and std): over the tilted width s the non-quadratic part of log Phi varies
   on the scale ``max(1, |f|)`` (``1/|f|`` in the left tail), so the standardized skewness is
   ``O((s / max(1, |m|))^3)`` and sigma*/s_EP - 1 is its square, measured at 0.1 R^-6 against mpmath
   (R = 17.9: 2.6e-9; 53.7: 4.5e-12; 179: 3.3e-15): below 1e-19 here, so sigma* = s_EP.
   This covers tiny cavities (sigma down to the smallest float) and the deep left tail
   (mu = -1e12), where node positions f ~ m would lose ulp(m) / s of the answer.
3. **Very wide cavities** (``sigma > 1e8 max(1, |tau|)``): at fixed tau the ratio sigma*/sigma
   tends to the truncated normal's as delta -> 1 (the ESN is delta U + sqrt(1 - delta^2) V with
   U a normal truncated at -tau and V an independent normal), with a correction
   O((1 + tau^2) / sigma^2) (at mu = 0: 1.2e-4, 1.4e-6, 1.7e-8, 1.9e-10 at sigma = 1e2 ... 1e5):
   the kernel computes the ratio at ``sigma' = 1e8 max(1, |tau|)`` with the same tau and scales
   it, an error ~2e-16.
"""

from __future__ import annotations

import functools

import numpy as np

SIGMA_WIDE = 1e8  # above this, sigma* = sigma * ratio(tau, 1e8) (regime 3)
_FLAT_EDGE = 8.5  # Phi(f) > 1 - 1e-17 for f > 8.5
_FLAT_SIGMAS = 9.0  # normal tail beyond 9 sd: < 1.2e-19
_GAUSSIAN_R = 500.0  # regime 2 threshold on max(1, |m|) / s
_STEP_EDGES = np.array([0.0, 2.0, 4.5, 8.5])  # where Phi(f) climbs from ~0 to 1 - 1e-17
_STEP_LEFT = np.array([-10.0, -8.0, -6.0, -4.0, -2.0])  # log Phi(-10) = -53


def rescale_wide(mu, sigma):
    """``(mask, mu', sigma', scale)`` for regime 3: sigma*(mu, sigma) = scale * sigma*(mu',
    sigma'), with tau = mu / sqrt(1 + sigma^2) kept and ``sigma' = 1e8 max(1, |tau|)`` where sigma
    is wider. The shape's correction is O((1 + tau^2) / sigma'^2) <= 2e-16 (the ESN's smoothing
    width sqrt(1 - delta^2) against the truncated normal's scale ``1 / max(1, |tau|)``)."""
    tau = mu / np.hypot(1.0, sigma)
    sigma_r = SIGMA_WIDE * np.maximum(1.0, np.abs(tau))
    mask = sigma > sigma_r
    mu_r = tau * np.hypot(1.0, sigma_r)
    return mask, mu_r, sigma_r, sigma / sigma_r


def sigma_qp_limits(probit, mu, sigma, moments=None):
    """``(mask, sigma*)`` for regimes 1 and 2 (canonical label +1); ``moments``: the tilted
    ``(mean, std)`` if the caller has them already."""
    flat = mu - _FLAT_EDGE > _FLAT_SIGMAS * sigma
    mean, std = probit.tilted_moments(mu, sigma, np.ones_like(mu)) if moments is None else moments
    gaussian = np.maximum(1.0, np.abs(mean)) >= _GAUSSIAN_R * std
    return flat | gaussian, np.where(flat, sigma, std)


@functools.cache
def _edges(need: int) -> np.ndarray:
    """need 1: the step's edges; need >= 2: also its left side down to f = -10 (where a lobe
    whose mode lies far right of the step, mu ~ 2 sigma, has level sets that cannot follow
    Phi's fall) and 8.5 * 2^k, k = 1 .. need - 2."""
    if need == 1:
        return _STEP_EDGES
    graded = _FLAT_EDGE * 2.0 ** np.arange(1, max(need - 1, 1))
    out = np.concatenate([_STEP_LEFT, _STEP_EDGES, graded])
    out.flags.writeable = False
    return out


def graded_breakpoints(mu, sigma):
    """``(need, edges_for_need)`` of ``qpinfer.likelihoods.Likelihood._breakpoints()``:
    sigma <= 2 none; (2, 20] the step's edges; > 20 also 8.5 * 2^k up to the first >= the
    extent of the mass right of the step: sigma, or ``60 / |c|`` (c = mu / (1 + sigma^2)) where
    c < 0 makes the density fall like e^(c f) first."""
    h = np.hypot(1.0, sigma)
    c = (mu / h) / h
    with np.errstate(divide="ignore"):
        extent = np.minimum(sigma, np.where(c < 0, 60.0 / np.abs(c), np.inf))
        n_graded = np.ceil(np.log2(np.maximum(extent, 1.0) / _FLAT_EDGE))
    need = np.where(sigma > 20.0, 2 + np.maximum(n_graded, 0), (sigma > 2.0).astype(np.float64))
    return need.astype(np.int64), _edges
