"""What the package finds numerically about a user's log-likelihood: derivatives by
differences, each label's centre and width, log-concavity, and the tilted density's mode.

A :class:`~qpinfer.CustomLikelihood` gives ``log p(y | f)`` and nothing else, so everything the
sigma* kernel and the table layout ask beyond it is found here from that function:

* derivatives in ``f`` by central differences (:func:`derivatives`; steps scaled to ``|f|``, so
  the first derivative is good to ~1e-9 relative, the second to ~1e-7 -- they only place panel
  edges and the mode, never enter a quadrature sum);
* per label (:func:`label_features`): on a grid from ``-1e3`` to ``1e3`` either the
  likelihood's *peak* (an interior maximum: centre = the maximiser, width = the curvature width
  there) or, for a likelihood monotone in ``f`` (a class probability, a censored observation, a
  zero count), its *step* (centre where ``log p`` is ``log 2`` below its supremum, width =
  ``1 / |d log p / df|`` there); and whether ``log p`` is concave in ``f`` on that grid;
* the tilted density's mode (:func:`tilt_mode`): the root of ``d/df [log p(y | f) - (f -
  mu)^2 / (2 sigma^2)]``, decreasing for a log-concave likelihood, by safeguarded Newton steps
  inside the bracket ``[mu, mu + sigma^2 d log p / df (mu)]`` (a fixed number of steps: no point
  depends on its batch).

Holds: these functions and :class:`LabelFeatures`. May import: numpy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["LabelFeatures", "derivatives", "label_features", "tilt_mode"]

_H1 = 2.0**-14  # first / second derivative steps, relative to max(1, |f|)
_H3 = 2.0**-8  # the third derivative's (five-point stencil)
_GRID = np.concatenate([-np.geomspace(1e3, 1e-3, 241), [0.0], np.geomspace(1e-3, 1e3, 241)])
_MODE_STEPS = 80
_CONCAVE_SLACK = 1e-5  # second differences above this (relative) count as convex


class LabelFeatures(NamedTuple):
    """One label's shape in ``f``: ``centre`` and ``width`` (module docstring), ``peaked``
    (an interior maximum), ``log_peak`` (``log p`` at the centre) and ``concave``."""

    centre: float
    width: float
    peaked: bool
    log_peak: float
    concave: bool


def derivatives(log_lik, f, order: int = 2) -> tuple[np.ndarray, ...]:
    """``(l, l', l'')`` (``order=2``) or ``(l, l', l'', l''')`` (``order=3``) of the function
    ``log_lik(f)`` by central differences."""
    with np.errstate(all="ignore"):  # log p = -inf far out: NaN slopes, handled by callers
        return _differences(log_lik, np.asarray(f, dtype=np.float64), order)


def _differences(log_lik, f, order):
    scale = np.maximum(1.0, np.abs(f))
    h = _H1 * scale
    lo, mid, hi = log_lik(f - h), log_lik(f), log_lik(f + h)
    d1 = (hi - lo) / (2.0 * h)
    d2 = (hi - 2.0 * mid + lo) / (h * h)
    if order < 3:
        return mid, d1, d2
    k = _H3 * scale
    a, b, c, d = log_lik(f - 2 * k), log_lik(f - k), log_lik(f + k), log_lik(f + 2 * k)
    d3 = (d - 2.0 * c + 2.0 * b - a) / (2.0 * k**3)
    return mid, d1, d2, d3


def label_features(log_lik) -> LabelFeatures:
    """The :class:`LabelFeatures` of ``log_lik(f)`` (one label); ``ValueError`` if it is
    constant or not finite anywhere on the grid."""
    with np.errstate(all="ignore"):
        values = log_lik(_GRID)
    ok = np.isfinite(values)
    if ok.sum() < 3:
        raise ValueError("log_lik must be finite for some f in [-1e3, 1e3]")
    f, v = _GRID[ok], values[ok]
    i = int(np.argmax(v))
    with np.errstate(all="ignore"):
        if 0 < i < f.size - 1 and v[i] > max(v[0], v[-1]) + 1.0:
            centre = _refine_peak(log_lik, f[i - 1], f[i + 1])
            _, _, d2 = derivatives(log_lik, np.array([centre]))
            width, peaked = float((-d2[0]) ** -0.5), True
        else:
            top = max(v[0], v[-1])
            if not top > v.min() + np.log(2.0):
                raise ValueError("log_lik must not be constant in f")
            centre = _crossing(log_lik, f, v, top - np.log(2.0))
            _, d1, _ = derivatives(log_lik, np.array([centre]))
            width, peaked = float(1.0 / abs(d1[0])), False
        # concavity where the likelihood lives: the grid and the centre's neighbourhood
        probe = np.concatenate([f, centre + width * np.linspace(-60.0, 60.0, 481)])
        ell, _, d2 = derivatives(log_lik, probe)
        live = np.isfinite(d2) & np.isfinite(ell)
        slack = _CONCAVE_SLACK * np.maximum(1.0, np.abs(ell[live]))
        concave = bool(np.all(d2[live] <= slack))
        log_peak = float(log_lik(np.array([centre]))[0])
    if not (np.isfinite(centre) and np.isfinite(width) and width > 0 and np.isfinite(log_peak)):
        raise ValueError("log_lik has no finite centre and width in f in [-1e3, 1e3]")
    return LabelFeatures(float(centre), width, peaked, log_peak, concave)


def _refine_peak(log_lik, lo: float, hi: float) -> float:
    """The maximiser of a unimodal ``log_lik`` in ``[lo, hi]`` by golden-section search."""
    g = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    for _ in range(120):
        c, d = b - g * (b - a), a + g * (b - a)
        if log_lik(np.array([c]))[0] > log_lik(np.array([d]))[0]:
            b = d
        else:
            a = c
    return 0.5 * (a + b)


def _crossing(log_lik, f, v, level: float) -> float:
    """Where the monotone ``log_lik`` (values ``v`` on the grid ``f``) crosses ``level``."""
    above = v > level
    j = np.flatnonzero(above[:-1] != above[1:])
    if j.size == 0:
        raise ValueError("log_lik must not be constant in f")
    a, b = f[j[0]], f[j[0] + 1]
    fa_above = above[j[0]]
    for _ in range(200):
        m = 0.5 * (a + b)
        if (log_lik(np.array([m]))[0] > level) == fa_above:
            a = m
        else:
            b = m
    return 0.5 * (a + b)


def tilt_mode(log_lik_at, mu, sigma, centre) -> tuple[np.ndarray, np.ndarray]:
    """``(mode, width)`` of ``exp(log_lik_at(f)) N(f | mu, sigma^2)`` for a log-concave
    likelihood (1-D arrays; ``log_lik_at(f, sel)`` evaluates the points ``sel`` (an index
    array or ``slice(None)``) at their own labels, ``centre`` the labels' centres): a bracket by
    steps of sigma doubled from ``mu`` (from the centre where ``l'(mu)`` is not finite) towards
    the side the log tilt's slope points to, then safeguarded Newton steps in it; the width
    ``(1 / sigma^2 - l''(mode))^(-1/2)``. Where ``l'`` is not finite (``log p`` under- or
    overflows far from the centre) the slope counts as pointing back towards the centre."""
    s2 = sigma * sigma
    centre = np.asarray(centre, dtype=np.float64) + np.zeros_like(mu)

    def slope(f, sel=slice(None)):
        _, d1, d2 = derivatives(lambda x: log_lik_at(x, sel), f)
        g = d1 - (f - mu[sel]) / s2[sel]
        return np.where(np.isnan(g), np.where(f > centre[sel], -np.inf, np.inf), g), d2

    g0, _ = slope(mu)
    f0 = np.where(np.isfinite(g0), mu, centre)
    g0 = np.where(np.isfinite(g0), g0, slope(f0)[0])
    side = np.where(g0 > 0, 1.0, -1.0)
    far = f0.copy()
    step = sigma.copy()
    todo = np.flatnonzero(g0 != 0)
    for _ in range(2 * _MODE_STEPS):
        if todo.size == 0:
            break
        far[todo] = f0[todo] + side[todo] * step[todo]
        g, _ = slope(far[todo], todo)
        going = side[todo] * g > 0
        step[todo[going]] *= 2.0
        todo = todo[going]
    lo, hi = np.minimum(f0, far), np.maximum(f0, far)
    f = 0.5 * (lo + hi)
    step_before = hi - lo
    for _ in range(_MODE_STEPS):
        g, d2 = slope(f)
        lo = np.where(g > 0, f, lo)
        hi = np.where(g > 0, hi, f)
        newton = f + g / (1.0 / s2 - np.minimum(d2, 0.0))
        ok = (newton > lo) & (newton < hi) & (np.abs(newton - f) < 0.5 * step_before)
        new = np.where(ok, newton, 0.5 * (lo + hi))
        step_before = np.abs(new - f)
        f = new
    _, _, d2 = derivatives(lambda x: log_lik_at(x, slice(None)), f)
    width = 1.0 / np.sqrt(1.0 / s2 - np.minimum(d2, 0.0))
    return f, width
