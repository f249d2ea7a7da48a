"""Cell-table boxes of the ``poisson_log`` likelihood: every count, every cavity.

The boxes store ``rho = sigma* / sigma_EP`` (Theorem 2: in (0, 1]) at Chebyshev-Gauss nodes of
equal cells (:mod:`qpinfer.tables.chebyshev`); lookups follow the kernel's path (closed forms,
then the first box holding the cavity). Every count y is the y = 0 tilt at ``m' = mu + y s^2``
(:mod:`qpinfer.likelihoods.poisson_log`), so the store has one label (0) and serves every count.
The tilt is ``exp(-e^f) N(f | m', s^2)``, about its mode ``a = log alpha``
(:func:`qpinfer.likelihoods.poisson_log.mode_frame`) a log-gamma(alpha) density times
``N(0, s^2)``: rho depends on (alpha, s) only. The kernel's closed forms: *flat* where
``P = -log E[min(1, e^f)] > 40`` under ``N(m', s^2)`` (:func:`qpinfer.likelihoods.poisson_log.flat_nats`), *Gaussian* where the
skewness ``alpha (alpha + 1/s^2)^-3/2 < 1e-8`` (every a > 36.84, and every s < 2.6e-8).

Narrow cavities (s <= 1), coordinates ``a`` and ``log10 s``:

* ``core``: a in [-46, 16] (cells of 1), ``log10 s`` in [-2, 0] (cells of 0.25); the flat
  closed form holds below a ~ -41;
* ``tiny``: a in [-6, 16], ``log10 s`` in [-8, -2] (cells of 0.5); below a = ln(1e-8) - 3 ln s
  (>= -4.6 there) the skewness ``~ alpha s^3`` is under 1e-8.

Wide cavities (1 < s <= 1e4, the kernel's ``SIGMA_MAX``). In ``(a, log10 s)`` the tilt's
wall at f ~ 0 moves by ``|a|/s`` standard deviations per unit of log s (the ``core`` cells give
6.9e-12 at s ~ 2.2, 2.4e-11 at s ~ 7), so the wide side has coordinates that hold the wall still:

* ``wall`` / ``wall_wide``: ``P`` in [3.5, 41] (the flat closed form's own measure: how many
  nats of the cavity the wall cuts; cells of 1.5 / 2.5) and ``log10 s`` in [-0.2, 1.2] /
  [1.2, 4] (cells of 0.2 / 0.7). ``P`` compresses where the mass reaches the wall (``P ~
  Phi(-w)`` for w = m'/s > 1; cells of 1 x 0.1 gave 1.3e-9 for P < 4.25, 4e-15 above), hence
* ``near``: ``w = m'/s`` (where the wall sits in cavity standard deviations) in [-4.5, 2]
  (cells of 0.5), ``log10 s`` in [-0.2, 4] (cells of 0.3); ``P < 3.5`` means w > -4.0;
* ``kappa`` / ``kappa_far``: ``b = a + ln s = ln(alpha s)`` (the log-gamma's left tail, 1/alpha,
  against the cavity's width) in [0.3, 12.9] / [12.9, 26.9] (cells of 0.7 / 2), ``log10 s`` in
  [-0.2, 4] (cells of 0.3 / 0.6); w > 2 means b > 0.44 for every s >= 1.

Every mode:

* ``high``: a in [15, 37] (cells of 2), ``log10 s`` in [-8, 4] (cells of 1): the mode's rate
  e^a above 3.3e6 (counts or means of 1e4 with s < 1e-2 reach a ~ 28); a > 36.84 is the Gaussian
  closed form, and ``b <= 26.9`` reaches a = 17.7 at s = 1e4.

Measured against the kernel on 20,000 random points per box (``benchmarks/probe_issue15_boxes.py
poisson_log``): high 5.8e-14, wall 7.1e-15, wall_wide 6.0e-14, near 8.4e-14, kappa 3.8e-14,
kappa_far 3.3e-15; the whole table 2.4e-13 (the ``core`` box) on 300,000 random cavities with no
fallback. The kernel agrees with mpmath there (<= 8.9e-16 on 36 points of the new boxes, the
mpmath engine run in the mode frame). Sizes, commands and the mpmath reference's own limit (it
does not converge where ``s alpha > ~1e7``): ``docs/development/tables-v2.md`` ("Logit and Poisson with the
log link").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, log_ndtr

from qpinfer.likelihoods.layout import Box, CellAxis
from qpinfer.likelihoods.poisson_log import flat_nats, laplace_moments, mode_frame

__all__ = [
    "LaplaceReference",
    "PoissonLogBox",
    "PoissonLogKappa",
    "PoissonLogNear",
    "PoissonLogWall",
    "ShiftedReference",
    "boxes",
    "mean_of_flat_nats",
    "poisson_log_boxes",
]

_LN10 = float(np.log(10.0))
_BISECTIONS = 120  # mean_of_flat_nats: to the ulp of any bracket below ~1e36, then Newton


def _label_zero(mu):
    return np.zeros(np.shape(mu), dtype=np.intp)


def _shifted_mean(mu, sigma, y):
    """``m' = mu + y s^2`` (as :func:`qpinfer.likelihoods.poisson_log.mode_frame` forms it)."""
    return np.asarray(mu, dtype=np.float64) + np.asarray(y) * sigma * sigma


def _shift(mu, sigma, y):
    """``y mu + y^2 s^2 / 2 - log y!``: log Z of count y at mu minus log Z of the y = 0 tilt at
    ``m' = mu + y s^2`` (the same tilted density; the boxes hold the latter)."""
    y = np.asarray(y, dtype=np.float64)
    return y * mu + 0.5 * y * y * sigma * sigma - gammaln(y + 1.0)


def _laplace_moments(mu, sigma, y):
    """``(log Z, mean, std)`` of the plain Laplace approximation of the tilt (mode a, width
    ``s / sqrt(1 + omega)``, :func:`qpinfer.likelihoods.poisson_log.laplace_moments`), at the
    count itself (no terms of size y^2 cancel): smooth in the boxes' coordinates a or b, within
    O(1) of the moments, where the tilt is narrow against e^f's scale or its mass sits at the
    wall."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return laplace_moments(
            np.asarray(mu, np.float64), np.asarray(sigma, np.float64), np.asarray(y, np.float64)
        )


def _mean_of_mode(a, s):
    """The shifted mean m' whose y = 0 tilt has its mode at ``a``: ``a + s^2 e^a = m'``."""
    return a + s * s * np.exp(a)


def mean_of_flat_nats(p, sigma):
    """The shifted mean m with ``flat_nats(m, sigma) = p`` (p >= 1, elementwise, a fixed number
    of steps: a node's cavity never depends on its batch): bisection on a bracket, then three
    Newton steps."""
    p = np.asarray(p, dtype=np.float64)
    s = np.asarray(sigma, dtype=np.float64)
    lo = -(60.0 + 12.0 * s + p)  # flat_nats(lo) > p (checked for 3.5 <= p <= 41, 0.6 <= s <= 1e4)
    hi = 2.0 * s + 5.0 + 0.0 * p  # flat_nats(hi) < 0.03
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        above = flat_nats(mid, s) > p
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    m = 0.5 * (lo + hi)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(3):
            q = flat_nats(m, s)
            slope = -np.exp(m + 0.5 * s * s + log_ndtr(-m / s - s) + q)
            m = m - (q - p) / slope
    return m


class LaplaceReference:
    """EP's moments measured against the Laplace approximation of the tilt (boxes over the mode
    a, or b = a + ln s)."""

    def reference_moments(self, mu, sigma, y):
        """The Laplace approximation of the tilt (``_laplace_moments``)."""
        return _laplace_moments(mu, sigma, y)

    def stored_log_z(self, likelihood, mu, sigma, y, log_z):
        """log Z minus the Laplace approximation's, without their shared terms of size
        ``(alpha s)^2`` (:meth:`qpinfer.likelihoods.poisson_log.PoissonLog.laplace_residual`;
        the nodes' label is 0)."""
        return likelihood.laplace_residual(mu, sigma)


class ShiftedReference:
    """EP's moments measured against the shifted cavity (boxes over the wall's position)."""

    def reference_moments(self, mu, sigma, y):
        """The shifted cavity ``(log Z(m', 0) - log Z(mu, y), m', s)`` (``_shift``; the mode
        moves from ~m' to ~0 within O(1) of m', a kink on the box's scale; the tilt's mean stays
        within a few s of m')."""
        return _shift(mu, sigma, y), _shifted_mean(mu, sigma, y), np.asarray(sigma, np.float64)


@dataclass(frozen=True)
class PoissonLogBox(LaplaceReference, Box):
    """``a`` (the tilted mode, log alpha) and ``log10 s``; one label (0): every count maps to
    y = 0 at ``m' = mu + y s^2``."""

    def cavity(self, label, a, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return _mean_of_mode(np.asarray(a, dtype=np.float64), s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            _, a, _, _ = mode_frame(mu, sigma, y)
            coords = (a, np.log10(sigma))
        return self._inside_axes(coords), _label_zero(mu), coords


@dataclass(frozen=True)
class PoissonLogWall(ShiftedReference, Box):
    """``P = flat_nats(m', s)`` and ``log10 s``: the wall far out in the cavity's tail."""

    def cavity(self, label, p, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return mean_of_flat_nats(p, s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (flat_nats(_shifted_mean(mu, sigma, y), sigma), np.log10(sigma))
        return self._inside_axes(coords), _label_zero(mu), coords


@dataclass(frozen=True)
class PoissonLogNear(ShiftedReference, Box):
    """``w = m'/s`` and ``log10 s``: the wall within a few cavity standard deviations."""

    def cavity(self, label, w, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(w, dtype=np.float64) * s, s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (_shifted_mean(mu, sigma, y) / sigma, np.log10(sigma))
        return self._inside_axes(coords), _label_zero(mu), coords


@dataclass(frozen=True)
class PoissonLogKappa(LaplaceReference, Box):
    """``b = a + ln s = ln(alpha s)`` and ``log10 s``: the mass at the wall, the log-gamma's
    left tail (scale 1/alpha) shorter than the cavity's width for b >> 0."""

    def cavity(self, label, b, log10_sigma):
        lg = np.asarray(log10_sigma, dtype=np.float64)
        s = 10.0**lg
        return _mean_of_mode(np.asarray(b, dtype=np.float64) - _LN10 * lg, s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            _, a, _, _ = mode_frame(mu, sigma, y)
            lg = np.log10(sigma)
            coords = (a + _LN10 * lg, lg)
        return self._inside_axes(coords), _label_zero(mu), coords


def _box(kind, name, first, log10_sigma):
    return kind(name, (CellAxis(*first), CellAxis("log10_sigma", *log10_sigma)), (0.0,))


#: EP's moments: nodes per cell and axis, per box (the fewest whose last coefficients stay
#: below ~2e-13 on 20 cells of each box, corners included; 12 leave up to 4e-10)
MOMENT_NODES = {
    "core": 16,
    "tiny": 14,
    "high": 16,
    "wall": 14,
    "wall_wide": 16,
    "near": 16,
    "kappa": 14,
    "kappa_far": 14,
}


def poisson_log_boxes(nodes: int = 12) -> tuple[Box, ...]:
    """The boxes of the module docstring, in lookup order (the first holding a cavity
    answers); EP's moments at :data:`MOMENT_NODES`."""
    n = nodes
    boxes = (
        _box(PoissonLogBox, "core", ("a", -46.0, 1.0, 62, n), (-2.0, 0.25, 8, n)),
        _box(PoissonLogBox, "tiny", ("a", -6.0, 1.0, 22, n), (-8.0, 0.5, 12, n)),
        _box(PoissonLogBox, "high", ("a", 15.0, 2.0, 11, n), (-8.0, 1.0, 12, n)),
        _box(PoissonLogWall, "wall", ("p", 3.5, 1.5, 25, n), (-0.2, 0.2, 7, n)),
        _box(PoissonLogWall, "wall_wide", ("p", 3.5, 2.5, 15, n), (1.2, 0.7, 4, n)),
        _box(PoissonLogNear, "near", ("w", -4.5, 0.5, 13, n), (-0.2, 0.3, 14, n)),
        _box(PoissonLogKappa, "kappa", ("b", 0.3, 0.7, 18, n), (-0.2, 0.3, 14, n)),
        _box(PoissonLogKappa, "kappa_far", ("b", 12.9, 2.0, 7, n), (-0.2, 0.6, 7, n)),
    )
    return tuple(dataclasses.replace(b, moment_nodes=MOMENT_NODES[b.name]) for b in boxes)


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table (``Likelihood.table_boxes``)."""
    return poisson_log_boxes()
