"""Gaussian expectations E[g(f)], f ~ N(m, s^2), by composite Gauss-Legendre panels in
``t = (f - m) / s``: the nodes the Laplace and VB baselines' expectations of log p(y | f) use
(a likelihood adds the breaks of its own g, e.g. the logistic's transition or Student-t's
poles)."""

from __future__ import annotations

import numpy as np

__all__ = ["T_MAX", "panel_nodes"]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(32)
T_MAX = 10.0  # |t| > 10 carries < 1e-22 of the N(0, 1) mass
_T_EDGES = (-T_MAX, -5.0, -2.5, 0.0, 2.5, 5.0, T_MAX)  # the Gaussian's own panels


def panel_nodes(m: np.ndarray, s: np.ndarray, inner: np.ndarray):
    """Nodes f and weights of E[g(f)], f ~ N(m, s^2): 32-point Gauss-Legendre panels in
    t = (f - m) / s with edges at 0, +-2.5, +-5, +-10 and at ``inner`` (shape ``m.shape + (k,)``,
    the caller's breaks of g mapped to t and clipped to [-10, 10], so empty panels have zero
    weight)."""
    fixed = np.broadcast_to(np.asarray(_T_EDGES), m.shape + (len(_T_EDGES),))
    edges = np.sort(np.concatenate([fixed, inner], axis=-1), axis=-1)
    a, b = edges[..., :-1, None], edges[..., 1:, None]
    t = 0.5 * (a + b) + 0.5 * (b - a) * _GL_X
    w = 0.5 * (b - a) * _GL_W * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)
    shape = m.shape + (-1,)
    return m[..., None] + s[..., None] * t.reshape(shape), w.reshape(shape)
