"""The panel quadrature of eq. (7) over given lobes: the engine of the sigma* kernel
(:func:`qpinfer.sigma.exact.sigma_qp` validates, splits regimes and batches; this module only
integrates), which Poisson's mode-relative path (:mod:`qpinfer.likelihoods.poisson_square.moments`) calls
too.

``lik`` is any object with the likelihood hooks ``_log_tilted`` (and the optional ones that
:func:`qpinfer.quadrature.level_sets.level_edges` reads); this module imports no likelihood.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import legendre
from scipy.special import ndtri

from qpinfer.quadrature.level_sets import level_edges

__all__ = [
    "N_LEVELS",
    "N_LEVELS_FINE",
    "PanelSums",
    "panel_moments_of",
    "panel_rule",
    "panel_sums",
    "sigma_qp_quadrature",
]

N_LEVELS = 4  # panels on each side of a lobe's mode
N_LEVELS_FINE = 7  # ... for points whose likelihood asks for finer levels (very wide cavities)


@functools.cache
def panel_rule(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes x and weights w on [-1, 1], and the (n, 2n+1) matrix whose columns
    give, from the density at the nodes, the panel integral, the partial integrals from -1 to
    each node and from each node to 1 (exact for polynomials of degree n-1)."""
    x, w = legendre.leggauss(n)
    # l_j(u) = w_j sum_k (2k+1)/2 P_k(x_j) P_k(u), exact by Gauss-Legendre orthogonality.
    p_nodes = legendre.legvander(x, n)  # P_k(x_i), k = 0..n
    integ = np.empty((n, n))  # integral_{-1}^{x_i} P_k, k = 0..n-1
    integ[:, 0] = x + 1.0
    for k in range(1, n):
        integ[:, k] = (p_nodes[:, k + 1] - p_nodes[:, k - 1]) / (2 * k + 1)
    coef = (2 * np.arange(n) + 1) / 2.0
    a_left = integ @ (coef[:, None] * p_nodes[:, :n].T) * w[None, :]
    a_right = a_left[::-1, ::-1]  # integral_{x_i}^{1} l_j by reflection u -> -u
    return x, w, np.column_stack([w, a_left.T, a_right.T])


def panel_moments_of(q, x, half, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mass, mean, std)`` of a density given at the Gauss-Legendre nodes ``x`` (shape
    (points, panels, nodes); ``q`` its values, max-normalised; ``half`` the panels' half-widths):
    the centred second moment in a second pass, so the variance never cancels. The one
    computation behind :func:`qpinfer.quadrature.tilted.panel_moments` and ``with_std`` below, so
    sigma* and sigma_EP from the same panels are the same numbers (Theorem 2 clamp)."""
    w = q * (half[..., None] * weights)
    total = w.sum(axis=(1, 2))
    m1 = (w * x).sum(axis=(1, 2)) / total
    d = x - m1[:, None, None]
    var = (w * d * d).sum(axis=(1, 2)) / total
    return total, m1, np.sqrt(var)


@dataclass
class PanelSums:
    """The lobe-adapted panels of one batch and the tilted density's integrals on them
    (:func:`panel_sums`): ``edges`` per lobe, nodes ``f`` (points x panels x nodes), half
    widths ``half``, the density ``q`` (scaled to max 1) at the nodes, ``sums`` (per panel: its
    mass, then the partial integrals from its start and to its end at each node), the panel
    masses ``mass``, the masses ``before`` and ``after`` each panel, and the ``total``."""

    edges: list
    f: np.ndarray
    half: np.ndarray
    q: np.ndarray
    sums: np.ndarray
    mass: np.ndarray
    before: np.ndarray
    after: np.ndarray
    total: np.ndarray
    weights: np.ndarray
    panel_ops: np.ndarray


def panel_sums(lik, mu, sigma, y, lobes, extra=None, n_levels=N_LEVELS) -> PanelSums:
    """The panels of :func:`sigma_qp_quadrature` and the density's integrals on them (one
    GEMM), shared with sigma*'s derivatives (:mod:`qpinfer.sigma.derivatives`)."""
    edges = [level_edges(lik, *lobe, mu, sigma, y, n_levels) for lobe in lobes]
    if extra is not None:
        # features of the likelihood itself (a sharp step after a flat stretch of the cavity)
        # that log-density level sets alone can straddle; clipped into each lobe's range
        edges = [
            np.sort(
                np.concatenate([ed, np.clip(extra[None, :], ed[:, :1], ed[:, -1:])], axis=-1),
                axis=-1,
            )
            for ed in edges
        ]
    lo = np.concatenate([ed[:, :-1] for ed in edges], axis=-1)
    hi = np.concatenate([ed[:, 1:] for ed in edges], axis=-1)
    half = 0.5 * (hi - lo)
    nodes, weights, panel_ops = panel_rule(lik._n_nodes)
    f = (0.5 * (hi + lo))[..., None] + half[..., None] * nodes
    col = (slice(None), None, None)
    log_q, _ = lik._log_tilted(f, mu[col], sigma[col], y[col], derivative=False)
    log_q -= log_q.max(axis=(1, 2), keepdims=True)
    q = np.exp(log_q)
    n_pts, n_pan, n_nodes = f.shape
    # one GEMM gives, per panel, its mass and the partial integrals from its start / to its end
    sums = (q.reshape(-1, n_nodes) @ panel_ops).reshape(n_pts, n_pan, -1)
    sums *= half[..., None]
    mass = sums[..., 0]
    before = np.cumsum(mass, axis=1) - mass
    after = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1] - mass
    total = mass.sum(axis=1)
    return PanelSums(edges, f, half, q, sums, mass, before, after, total, weights, panel_ops)


def sigma_qp_quadrature(lik, mu, sigma, y, lobes, extra=None, n_levels=N_LEVELS, with_std=False):
    """sigma* for 1-D arrays of canonical (mu, sigma, y) by lobe-adapted panel quadrature;
    ``with_std``: ``(sigma*, std)``, std the tilted std on the same panels (one lobe only)."""
    p = panel_sums(lik, mu, sigma, y, lobes, extra, n_levels)
    edges, f, half, q, sums, mass = p.edges, p.f, p.half, p.q, p.sums, p.mass
    before, after, total, weights = p.before, p.after, p.total, p.weights
    n_pts, n_pan, n_nodes = f.shape
    u = np.minimum(
        before[..., None] + sums[..., 1 : n_nodes + 1], after[..., None] + sums[..., n_nodes + 1 :]
    )
    u /= total[:, None, None]
    np.clip(u, 0.0, 0.5, out=u)  # spectral partial integrals can dip below 0 where q ~ 0
    z = ndtri(u)
    integrand = np.exp(-0.5 * z * z).reshape(-1, n_nodes) @ (weights / np.sqrt(2.0 * np.pi))
    result = (half * integrand.reshape(n_pts, n_pan)).sum(axis=1)
    # flat stretches of F between lobes contribute (gap length) * phi(Phi^{-1}(F))
    n_panels = [ed.shape[1] - 1 for ed in edges]
    start = 0
    for i in range(len(edges) - 1):
        start += n_panels[i]
        gap = np.maximum(edges[i + 1][:, 0] - edges[i][:, -1], 0.0)
        u_gap = np.minimum(mass[:, :start].sum(axis=1), mass[:, start:].sum(axis=1)) / total
        z_gap = ndtri(u_gap)
        result += gap * np.exp(-0.5 * z_gap * z_gap) / np.sqrt(2.0 * np.pi)
    if with_std:
        return result, panel_moments_of(q, f, half, weights)[2]
    return result
