"""EP's tilted moments (Zhang et al., 2020, eq. (5)) by the sigma* kernel's own panels, for likelihoods
without closed-form moments (``logit``, ``poisson_log``).

The exact sigma* kernel (:mod:`qpinfer.sigma.exact`) places Gauss-Legendre panels on log-density
level sets of each lobe (down to 50 nats below the mode) plus a likelihood's own breakpoints. The
same panels integrate the density, its first moment and its *centred* second moment (two passes on
the same nodes, so the variance never cancels), and the log normaliser, to ~1e-15 relative.

A likelihood using this module works in its own *kernel coordinate* ``x = f - A(mu, sigma, y)``
(an anchor known exactly per point, e.g. the cavity mean or the tilted mode), so that node
positions are exact relative to the width of the tilted density; it provides

* ``_anchor(mu, sigma, y)`` -> ``A`` (f = A + x);
* ``_log_tilted_offset(mu, sigma, y)`` -> ``K`` with ``_log_tilted(x) = log p(y | A + x) +
  log N(A + x | mu, sigma^2) + K`` exactly (so ``log Z = log int exp(_log_tilted) dx - K``).
"""

from __future__ import annotations

import numpy as np

from qpinfer.quadrature.level_sets import level_edges as _level_edges
from qpinfer.quadrature.panels import N_LEVELS as _N_LEVELS
from qpinfer.quadrature.panels import N_LEVELS_FINE as _N_LEVELS_FINE
from qpinfer.quadrature.panels import panel_moments_of as _panel_moments_of
from qpinfer.quadrature.panels import panel_rule as _panel_rule

__all__ = ["panel_moments"]


def panel_moments(lik, mu, sigma, y, offset=True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log Z, mean, std)`` of the tilted distribution for 1-D canonical arrays (every point
    computed by quadrature; closed-form regimes are the caller's). The likelihood has one lobe.
    ``offset=False``: ``log Z + lik._log_tilted_offset(...)`` in place of log Z (the log of the
    integral of ``exp(lik._log_tilted)``, free of the offset's large terms)."""
    mu, sigma, y = (np.asarray(a, dtype=np.float64).ravel() for a in (mu, sigma, y))
    log_z, mean, std = (np.empty(mu.shape) for _ in range(3))
    if mu.size == 0:
        return log_z, mean, std
    with np.errstate(all="ignore"):
        breaks = lik._breakpoints(mu, sigma, y)
        need = breaks[0] if breaks is not None else np.zeros(mu.shape, dtype=np.int64)
        for key in np.unique(need):
            sel = need == key
            m, s, yy = mu[sel], sigma[sel], y[sel]
            (lobe,) = lik._lobes(m, s, yy)
            n_levels = _N_LEVELS_FINE if key >= 2 else _N_LEVELS
            ed = _level_edges(lik, *lobe, m, s, yy, n_levels)
            if key > 0:
                extra = breaks[1](key) if callable(breaks[1]) else breaks[1]
                ed = np.sort(
                    np.concatenate([ed, np.clip(extra[None, :], ed[:, :1], ed[:, -1:])], axis=-1),
                    axis=-1,
                )
            log_z[sel], mean[sel], std[sel] = _moments_on(lik, ed, m, s, yy, offset)
    return log_z, mean, std


def _moments_on(lik, ed, mu, sigma, y, offset=True):
    lo, hi = ed[:, :-1], ed[:, 1:]
    half = 0.5 * (hi - lo)
    nodes, weights, _ = _panel_rule(lik._n_nodes)
    x = (0.5 * (hi + lo))[..., None] + half[..., None] * nodes
    col = (slice(None), None, None)
    log_q, _ = lik._log_tilted(x, mu[col], sigma[col], y[col], derivative=False)
    peak = log_q.max(axis=(1, 2), keepdims=True)
    total, m1, std = _panel_moments_of(np.exp(log_q - peak), x, half, weights)
    log_z = np.log(total) + peak[:, 0, 0]
    if offset:
        log_z = log_z - lik._log_tilted_offset(mu, sigma, y)
    return log_z, lik._anchor(mu, sigma, y) + m1, std
