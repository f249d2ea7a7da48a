"""v2 table boxes of the ``logit`` and ``poisson_log`` likelihoods (issue #15).

Both tables store ``rho = sigma* / sigma_EP`` (Theorem 2: in (0, 1]) at Chebyshev-Gauss nodes of
equal cells (:mod:`qpinfer.cheb_cells`, :mod:`qpinfer.reduced`); lookups follow the kernel's
path (canonical label, closed forms, then the first box holding the cavity; cavities in no box
go to the exact kernel and are counted).

**logit** (canonical y = +1). Besides the mirror symmetry, ``sigma(f) N(f | mu, s^2)`` is, up to
a constant, ``sigma(-f) N(f | mu + s^2, s^2)``: rho at ``mu`` equals rho at ``-mu - s^2`` (exact;
``tests/test_logit_poisson_log.py``). A box folds every cavity onto ``mu >= -s^2/2`` and then
uses ``tau = mu / sqrt(1 + s^2)``:

* ``small``: ``tau`` in [-1.5, 42.5] (cells of 1), ``log10 s`` in [-3, 0.5]: below s = 1e-3 the
  kernel's narrow closed form holds; beyond tau ~ 40 the flat one (``mu - s^2/2 > 40``);
* ``core``: ``tau`` in [-9, 14.5] (cells of 0.5), ``log10 s`` in [0.5, 6] (the flat regime
  starts at tau <= 14.1 for s >= 10^0.5, and s > 1e6 is refused);
* ``kink``: the folded cavities with ``tau < -8.5`` (s > 17: the tilt's mass sits at the
  logistic step f = 0, with exponential sides of rates ``-mu/s^2`` and ``1 + mu/s^2``):
  ``v = log(r) / log(r_max(s))`` in [0, 1], ``r = -tau / 8.5``, ``r_max = s^2 / (17 sqrt(1 +
  s^2))`` (the fold line), and ``log10 s`` in [1.25, 6].

**poisson_log**: every count y is the y = 0 tilt at ``m' = mu + y s^2`` (no count axis). The
coordinates are the tilted mode ``a = log alpha`` (:func:`qpinfer.poisson_log.mode_frame`) and
``log10 s``: the tilt is ``log-gamma(alpha) x N(0, s^2)`` about its mode, and rho depends on
(alpha, s) only. ``a`` >= 36.9 (skewness alpha^-1/2 < 1e-8) and s < 1e-8 are the kernel's
Gaussian closed form; ``a`` below the box's start is its flat closed form (for s <= 10).

* ``core``: ``a`` in [-44, 38] (cells of 1), ``log10 s`` in [-8, 1] (cells of 0.25 above
  s = 0.1, where 1 - rho is O(1e-3); 0.5 below, ``tiny``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.cheb_cells import CellAxis
from qpinfer.reduced import Box

__all__ = ["KINDS", "LogitBox", "LogitKink", "PoissonLogBox", "logit_boxes", "poisson_log_boxes"]

_KINK_TAU = 8.5


def _fold(mu, sigma):
    """The logit's second symmetry: rho(mu) = rho(-mu - s^2); fold onto mu >= -s^2/2."""
    mu = np.asarray(mu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.maximum(mu, -mu - sigma * sigma)


@dataclass(frozen=True)
class LogitBox(Box):
    """``tau = mu / sqrt(1 + s^2)`` (after the fold) and ``log10 s``."""

    def cavity(self, label, tau, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(tau) * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (_fold(mu, sigma) / np.hypot(1.0, sigma), np.log10(sigma))
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
        from qpinfer.poisson_log import mode_frame

        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            _, a, _, _ = mode_frame(mu, sigma, y)
            coords = (a, np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


def logit_boxes(nodes: int = 12) -> tuple[Box, ...]:
    return (
        LogitBox(
            "small",
            (CellAxis("tau", -1.5, 1.0, 44, nodes), CellAxis("log10_sigma", -3.0, 0.25, 14, nodes)),
            (1.0,),
        ),
        LogitBox(
            "core",
            (CellAxis("tau", -9.0, 0.5, 47, nodes), CellAxis("log10_sigma", 0.5, 0.25, 22, nodes)),
            (1.0,),
        ),
        LogitKink(
            "kink",
            (CellAxis("v", 0.0, 0.125, 8, nodes), CellAxis("log10_sigma", 1.25, 0.25, 19, nodes)),
            (1.0,),
        ),
    )


def poisson_log_boxes(nodes: int = 12) -> tuple[Box, ...]:
    return (
        PoissonLogBox(
            "core",
            (CellAxis("a", -44.0, 1.0, 82, nodes), CellAxis("log10_sigma", -1.0, 0.25, 8, nodes)),
            (0.0,),
        ),
        PoissonLogBox(
            "tiny",
            (CellAxis("a", -44.0, 1.0, 82, nodes), CellAxis("log10_sigma", -8.0, 0.5, 14, nodes)),
            (0.0,),
        ),
    )


KINDS = {"LogitBox": LogitBox, "LogitKink": LogitKink, "PoissonLogBox": PoissonLogBox}
