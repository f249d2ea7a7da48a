"""v2 table boxes of the ``logit`` and ``poisson_log`` likelihoods (issue #15).

Both tables store ``rho = sigma* / sigma_EP`` (Theorem 2: in (0, 1]) at Chebyshev-Gauss nodes of
equal cells (:mod:`qpinfer.tables.chebyshev`, :mod:`qpinfer.tables.boxes.probit`); lookups follow
the kernel's path (canonical label, closed forms, then the first box holding the cavity; cavities in
no box go to the exact kernel and are counted).

**logit** (canonical y = +1). Besides the mirror symmetry, ``sigma(f) N(f | mu, s^2)`` is, up to
a constant, ``sigma(-f) N(f | mu + s^2, s^2)``: rho at ``mu`` equals rho at ``-mu - s^2`` (exact;
``tests/test_logit_poisson_log.py``): every box holds folded cavities only (nodes on the
other side of the fold would be the far mirror image, badly resolved by the cells):

* ``small`` (``log10 s`` in [-3, 0.5]): ``T = |mu + s^2/2| / sqrt(1 + s^2)``, the distance from
  the fold line (rho is even in it), in [0, 43] (cells of 1); below s = 1e-3 the kernel's
  narrow closed form holds, beyond T ~ 40 the flat one;
* ``core``: ``tau = mu / sqrt(1 + s^2)`` in [-8.5, 14.5] (cells of 0.5), ``log10 s`` in
  [1.3, 6] (cells of 0.235; for s >= 17.06 the fold line lies below tau = -8.5; the flat
  regime starts at tau <= 8.6; s > 1e6 is refused);
* ``kink``: the folded cavities with ``tau < -8.5`` (the tilt's mass sits at the logistic step
  f = 0, with exponential sides of rates ``-mu/s^2`` and ``1 + mu/s^2``):
  ``v = log(r) / log(r_max(s))`` in [0, 1] (cells of 1/24), ``r = -tau / 8.5``, ``r_max =
  s^2 / (17 sqrt(1 + s^2))`` (the fold line), and ``log10 s`` in [1.3, 6].

**poisson_log**: every count y is the y = 0 tilt at ``m' = mu + y s^2`` (no count axis). The
coordinates are the tilted mode ``a = log alpha``
(:func:`qpinfer.likelihoods.poisson_log.mode_frame`) and ``log10 s``: the tilt is ``log-gamma(alpha)
x N(0, s^2)`` about its mode, and rho depends on (alpha, s) only. ``a`` >= 36.9 (skewness alpha^-1/2
< 1e-8) and s < 1e-8 are the kernel's Gaussian closed form; ``a`` below the box's start is its flat
closed form (for s <= 10).

* ``core``: ``a`` in [-46, 16] (cells of 1), ``log10 s`` in [-2, 0] (cells of 0.25): for
  s <= 1 the flat closed form holds below a ~ -41;
* ``tiny``: ``a`` in [-6, 16], ``log10 s`` in [-8, -2] (cells of 0.5): below a = ln(1e-8) -
  3 ln s (>= -4.6 there) the skewness ``~ alpha s^3`` is under 1e-8 (Gaussian closed form).

Tilts whose mode rate e^a exceeds e^16 = 8.9e6 (far beyond counts of 1e5 for any sensible
cavity) are in no box either: the mpmath reference that verifies the table does not converge
there for s ~ 2 (a >= 20). Cavities with s > 1 are in no box (the tilt's wall at f ~ 0 moves by
``|a|/s`` standard deviations per unit of log s, which these cells do not resolve to 1e-12: measured
1.6e-12 for s <= 10^0.25, 6.9e-12 at s ~ 2.2 and 2.4e-11 at s ~ 7): they use the exact kernel, as do
the logit cavities with 10^0.5 < s < 20 (the flat regime's onset is too steep in these coordinates
there; measured 4e-7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.tables.boxes.base import Box
from qpinfer.tables.chebyshev import CellAxis

__all__ = [
    "KINDS",
    "LogitBox",
    "LogitCentred",
    "LogitKink",
    "PoissonLogBox",
    "logit_boxes",
    "poisson_log_boxes",
]

_KINK_TAU = 8.5


def _fold(mu, sigma):
    """The logit's second symmetry: rho(mu) = rho(-mu - s^2); fold onto mu >= -s^2/2."""
    mu = np.asarray(mu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.maximum(mu, -mu - sigma * sigma)


@dataclass(frozen=True)
class LogitBox(Box):
    """``tau = mu / sqrt(1 + s^2)`` (after the fold) and ``log10 s``; used where every cavity of
    the box lies on the folded side (``s >= 17.06``)."""

    def cavity(self, label, tau, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(tau) * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (_fold(mu, sigma) / np.hypot(1.0, sigma), np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


@dataclass(frozen=True)
class LogitCentred(Box):
    """``T = |mu + s^2/2| / sqrt(1 + s^2)`` (the distance from the fold line; rho is even in
    ``mu + s^2/2``) and ``log10 s``."""

    def cavity(self, label, t, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(t) * np.hypot(1.0, s) - 0.5 * s * s, s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            t = np.abs(np.asarray(mu) + 0.5 * np.asarray(sigma) ** 2) / np.hypot(1.0, sigma)
            coords = (t, np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


def _log_r_max(sigma):
    return np.log(sigma * sigma / (2.0 * _KINK_TAU * np.hypot(1.0, sigma)))


@dataclass(frozen=True)
class LogitKink(Box):
    """``v = log(-tau / 8.5) / log(r_max(s))`` in [0, 1] (after the fold) and ``log10 s``."""

    def cavity(self, label, v, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        tau = -_KINK_TAU * np.exp(np.asarray(v) * _log_r_max(s))
        return tau * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            tau = _fold(mu, sigma) / np.hypot(1.0, sigma)
            v = np.log(-tau / _KINK_TAU) / _log_r_max(sigma)
            coords = (v, np.log10(sigma))
            inside = (tau < -_KINK_TAU) & self._inside_axes(coords)
        return inside, np.zeros(np.shape(mu), dtype=np.intp), coords


@dataclass(frozen=True)
class PoissonLogBox(Box):
    """``a`` (the tilted mode, log alpha) and ``log10 s``; one label (0): every count maps to
    y = 0 at ``m' = mu + y s^2``."""

    def cavity(self, label, a, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        a = np.asarray(a, dtype=np.float64)
        # mode a of the y = 0 tilt at m': a + s^2 e^a = m'
        return a + s * s * np.exp(a), s

    def locate(self, mu, sigma, y):
        from qpinfer.likelihoods.poisson_log import mode_frame

        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            _, a, _, _ = mode_frame(mu, sigma, y)
            coords = (a, np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


def logit_boxes(nodes: int = 12) -> tuple[Box, ...]:
    return (
        LogitCentred(
            "small",
            (CellAxis("t", 0.0, 1.0, 43, nodes), CellAxis("log10_sigma", -3.0, 0.25, 14, nodes)),
            (1.0,),
        ),
        LogitBox(
            "core",
            (CellAxis("tau", -8.5, 0.5, 46, nodes), CellAxis("log10_sigma", 1.3, 0.235, 20, nodes)),
            (1.0,),
        ),
        LogitKink(
            "kink",
            (
                CellAxis("v", 0.0, 1.0 / 24.0, 24, nodes),
                CellAxis("log10_sigma", 1.3, 0.235, 20, nodes),
            ),
            (1.0,),
        ),
    )


def poisson_log_boxes(nodes: int = 12) -> tuple[Box, ...]:
    return (
        PoissonLogBox(
            "core",
            (CellAxis("a", -46.0, 1.0, 62, nodes), CellAxis("log10_sigma", -2.0, 0.25, 8, nodes)),
            (0.0,),
        ),
        PoissonLogBox(
            "tiny",
            (CellAxis("a", -6.0, 1.0, 22, nodes), CellAxis("log10_sigma", -8.0, 0.5, 12, nodes)),
            (0.0,),
        ),
    )


KINDS = {
    "LogitBox": LogitBox,
    "LogitCentred": LogitCentred,
    "LogitKink": LogitKink,
    "PoissonLogBox": PoissonLogBox,
}
