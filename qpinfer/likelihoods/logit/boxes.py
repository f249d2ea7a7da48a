"""Cell-table boxes of the ``logit`` likelihood; the log link's are in
:mod:`qpinfer.likelihoods.poisson_log.boxes`.

The table stores ``rho = sigma* / sigma_EP`` (Theorem 2: in (0, 1]) at Chebyshev-Gauss nodes of
equal cells (:mod:`qpinfer.tables.chebyshev`, :mod:`qpinfer.likelihoods.probit.boxes`); lookups follow
the kernel's path (canonical label, closed forms, then the first box holding the cavity; a cavity
in no box would go to the exact kernel and be counted: none is, for any s in (0, 1e6]).

Canonical y = +1. Besides the mirror symmetry, ``sigma(f) N(f | mu, s^2)`` is, up to a constant,
``sigma(-f) N(f | mu + s^2, s^2)``: rho at ``mu`` equals rho at ``-mu - s^2`` (exact;
``tests/likelihoods/test_logit_poisson_log.py``): every box holds folded cavities only (nodes on the other
side of the fold would be the far mirror image, badly resolved by the cells). In lookup order:

* ``small`` (``log10 s`` in [-3, 0.5], cells of 0.25): ``T = |mu + s^2/2| / sqrt(1 + s^2)``,
  the distance from the fold line (rho is even in it), in [0, 43] (cells of 1); below s = 1e-3
  the kernel's narrow closed form holds, beyond T ~ 40 the flat one;
* ``core``: ``tau = mu / sqrt(1 + s^2)`` in [-8.5, 14.5] (cells of 0.5), ``log10 s`` in
  [1.3, 6] (cells of 0.235; for s >= 17.06 the fold line lies below tau = -8.5; the flat
  regime starts at tau <= 8.6; s > 1e6 is refused);
* ``kink``: the folded cavities with ``tau < -8.5`` (the tilt's mass sits at the logistic step
  f = 0, with exponential sides of rates ``-mu/s^2`` and ``1 + mu/s^2``):
  ``v = log(r) / log(r_max(s))`` in [0, 1] (cells of 1/24), ``r = -tau / 8.5``, ``r_max =
  s^2 / (17 sqrt(1 + s^2))`` (the fold line), and ``log10 s`` in [1.3, 6];
* ``mid`` (the former gap 10^0.5 < s < 20): T in [0, 20] (cells of 1) and ``s``
  itself in [3, 22.5] (cells of 1.5). At fixed T the flat regime's onset (a fixed tau, T = tau +
  ~s/2) moves by ~s/2 in T per unit of s, i.e. by ``s ln(10) / 2`` per decade: equal cells in
  log s are too coarse at the top (measured, T cells of 0.5: 4e-7 with log10 s cells of 0.25,
  5e-12 with 0.06, 5e-13 with 0.05), equal cells in s resolve it everywhere (7e-14). The flat
  closed form holds beyond T = 19.93 for every s in [3, 22.5]. A coordinate measuring the flat
  regime directly, ``L = -log E[min(1, e^-f)]`` (the flat closed form's own bound, <= 40 off
  it), was tried and dropped: near the fold line it compresses (L ~ 1e-23 there at s = 20),
  1.4e-10 with cells of 1 x 0.1 in (L, log10 s) for L >= 0.5.

Measured (``benchmarks/probe_issue15_boxes.py``, ``docs/development/tables-v2.md``): ``mid`` 7.1e-14 on
20,000 random points; the whole table, built by ``qptables build logit OUT --grid cells``, 1.4e-13
against the kernel on 300,000 random cavities with no fallback.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from qpinfer.likelihoods.layout import Box, CellAxis

__all__ = [
    "FoldedReference",
    "LogitBox",
    "LogitCentred",
    "LogitKink",
    "LogitMid",
    "boxes",
    "logit_boxes",
]

_KINK_TAU = 8.5


def _fold(mu, sigma):
    """The logit's second symmetry: rho(mu) = rho(-mu - s^2); fold onto mu >= -s^2/2."""
    mu = np.asarray(mu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.maximum(mu, -mu - sigma * sigma)


class FoldedReference:
    """EP's moments measured against the folded cavity ``(0, max(mu, -mu - s^2), s)`` (the
    boxes hold folded cavities; ``Likelihood._from_box_moments`` unfolds them)."""

    def reference_moments(self, mu, sigma, y):
        return np.zeros(np.shape(mu)), _fold(mu, sigma), np.asarray(sigma, dtype=np.float64)


@dataclass(frozen=True)
class LogitBox(FoldedReference, Box):
    """``tau = mu / sqrt(1 + s^2)`` (after the fold) and ``log10 s``; used where every cavity of
    the box lies on the folded side (``s >= 17.06``)."""

    def cavity(self, label, tau, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(tau) * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (_fold(mu, sigma) / np.hypot(1.0, sigma), np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


def _centred(mu, sigma):
    """``T = |mu + s^2/2| / sqrt(1 + s^2)``: the distance from the fold line."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.abs(np.asarray(mu) + 0.5 * np.asarray(sigma) ** 2) / np.hypot(1.0, sigma)


def _uncentred(t, s):
    """The folded cavity ``(mu, s)`` at distance ``t`` from the fold line (:func:`_centred`)."""
    return np.asarray(t) * np.hypot(1.0, s) - 0.5 * s * s, s


@dataclass(frozen=True)
class LogitCentred(FoldedReference, Box):
    """``T = |mu + s^2/2| / sqrt(1 + s^2)`` (the distance from the fold line; rho is even in
    ``mu + s^2/2``) and ``log10 s``."""

    def cavity(self, label, t, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return _uncentred(t, s)

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            coords = (_centred(mu, sigma), np.log10(sigma))
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


@dataclass(frozen=True)
class LogitMid(FoldedReference, Box):
    """``T`` (as :class:`LogitCentred`) and ``s`` itself: at fixed T the flat regime's onset
    (fixed tau) moves by ~s/2 in T, so equal cells in s, not in log s, resolve it."""

    def cavity(self, label, t, sigma):
        s = np.asarray(sigma, dtype=np.float64)
        return _uncentred(t, s)

    def locate(self, mu, sigma, y):
        coords = (_centred(mu, sigma), np.asarray(sigma, dtype=np.float64))
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

    def reference_moments(self, mu, sigma, y):
        """Mean 0: the mass of these tilts sits at the logistic step (the cavity mean, ~ -s^2/2
        at the fold, would leave an offset of ~s/2 sigmas)."""
        zero = np.zeros(np.shape(mu))
        return zero, zero, np.asarray(sigma, dtype=np.float64)

    def locate(self, mu, sigma, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            tau = _fold(mu, sigma) / np.hypot(1.0, sigma)
            v = np.log(-tau / _KINK_TAU) / _log_r_max(sigma)
            coords = (v, np.log10(sigma))
            inside = (tau < -_KINK_TAU) & self._inside_axes(coords)
        return inside, np.zeros(np.shape(mu), dtype=np.intp), coords


#: EP's moments: nodes per cell and axis, per box (the fewest whose last coefficients stay
#: below ~1e-13 on 20 cells of each box, corners included; 12 leave up to 2e-10 at the kink)
MOMENT_NODES = {"small": 14, "core": 16, "kink": 16, "mid": 14}


def logit_boxes(nodes: int = 12) -> tuple[Box, ...]:
    """The boxes of the module docstring, in lookup order (the first holding a cavity
    answers); EP's moments at :data:`MOMENT_NODES`."""
    boxes = (
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
        LogitMid(
            "mid",
            (CellAxis("t", 0.0, 1.0, 20, nodes), CellAxis("sigma", 3.0, 1.5, 13, nodes)),
            (1.0,),
        ),
    )
    return tuple(dataclasses.replace(b, moment_nodes=MOMENT_NODES[b.name]) for b in boxes)


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table (``Likelihood.table_boxes``)."""
    return logit_boxes()
