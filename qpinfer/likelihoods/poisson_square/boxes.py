"""Cell-table boxes of the Poisson (square link) likelihood.

The probit boxes live in :mod:`qpinfer.likelihoods.probit.boxes`; the measurements behind the choices
below are in ``docs/development/tables-v2.md`` (section "Poisson (square link) and step_noise") and
``benchmarks/probe_v2_boxes.py``.

**Poisson, square link.** With ``a = 1 + 2 sigma^2`` the tilted density is
``|f|^(2y) N(f | mu / a, sigma^2 / a)``, an affine image of ``|b + t|^(2y) N(t | 0, 1)`` with
``b = r = mu / (sigma sqrt(a))``: ``rho = sigma* / sigma_EP`` depends on the count y and on r only,
and is even in r (``canonical`` takes ``|mu|``). y = 0 is closed form (a Gaussian tilt). For y >= 1
the density has two lobes, near ``t = +-sqrt(2y)`` when r = 0, and rho has two features:

* the *far lobe*: its mass relative to the main one is about ``exp(-w)``,
  ``w = |r| sqrt(8 y)``, and rho has poles at about ``w = log(8 y) +- i pi`` (where the two
  masses' sum vanishes) and at ``w ~ +-2.2 i`` (zeros of the normalizer). In w these sit at a
  distance of about pi from the real axis *for every count*, so equal cells in w resolve them.
  For ``w > 60`` the far lobe changes rho by less than ``8 y exp(-60) < 1e-22``.
* the *main lobe's shape*, a function of ``beta = |r| / sqrt(8 y)`` through
  ``kappa = exp(-2 asinh(beta))`` (the lobe's curvature share ``2y / mode^2``); measured,
  ``1 - rho = C kappa^3 / y`` with ``C = 0.0556`` for ``beta >= 5`` and every count
  (``tests/tables/test_reduced_boxes.py``). So ``rho = 1`` to 1e-17 relative beyond
  ``kappa_end = (1e-17 y / C)^(1/3)``: ``|r| = 594`` for y = 1, ``5950`` for y = 1000.

Three boxes, one 1-D axis each, one slice per count 1..1000 (the label axis):

* ``near``: ``w`` in [0, 16] (the two-lobe region and the far-lobe poles, fine cells);
* ``far``: ``w`` in [16, 60] (coarse cells: the poles are >= 7 away);
* ``lobe``: ``x = (s - s_0(y)) / (s_end(y) - s_0(y))`` in [0, 1], ``s = asinh(beta)``,
  ``s_0 = asinh(60 / (8 y))`` (where ``far`` ends), ``s_end`` where rho = 1 to 1e-17; cavities
  beyond ``s_end`` are clipped to ``x = 1`` (exact to 1e-17, and more accurate than the kernel
  there, whose sigma* loses ~1e-17 ``|r|`` relative to the positions of its nodes, 2e-13 at
  ``|r| = 3e4``).

**EP's moments** are functions of ``b = r`` and the count too: in units ``x = f / sv`` of the
Gaussian factor ``N(f | beta, sv^2)`` the tilt is ``|x|^(2y) phi(x - b)``, so each box stores
``log I`` (log Z less the log density at the main lobe's mode, Loader's saddle-point form),
``E[x] - b`` and ``log sd(x)`` (:meth:`PoissonSquareBox.stored_moments`), and a lookup adds the
reference ``(saddle-point log Z, beta, sv)`` of the cavity asked for. The lobe box's moments
are not clipped: beyond ``s_end`` (and wherever ``b >= max(100, 20 sqrt(2y))``) the main lobe's
Gauss-Hermite rule answers (:func:`qpinfer.likelihoods.poisson_square.moments.hermite_min_b`).

Nodes are built at ``sigma = 2`` (``a = 9``, ``mu = 6 r``). Counts above the labels (1000) are in
no box: lookups fall back to the exact kernel, which holds to 1e8
(``qpinfer.likelihoods.poisson_square.moments``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.likelihoods.layout import Box, CellAxis
from qpinfer.likelihoods.poisson_square.moments import lobe_moments_x, saddle_log_z, scaled_cavity

__all__ = ["MAX_COUNT", "PoissonSquareBox", "PoissonSquareLobe", "boxes", "poisson_boxes"]

MAX_COUNT = 1000  # counts 1..MAX_COUNT are tabulated; above, the exact kernel answers

SIGMA_NODE = 2.0  # the cavity sd of the nodes: 1 + 2 sigma^2 = 9, so mu = 6 r
_W_NEAR = 16.0  # w = |r| sqrt(8 y): the near box ends, the far box starts here
_W_FAR = 60.0  # ... and the far box ends (far-lobe effect < 8 y e^-60 beyond)
_SHAPE_C = 0.0556  # 1 - rho = C kappa^3 / y for beta >= 5 (measured for y = 1..1000)
_RHO_TOL = 1e-17  # the lobe box ends where 1 - rho < _RHO_TOL


def poisson_r(mu, sigma) -> np.ndarray:
    """``|r| = |mu| / (sigma sqrt(1 + 2 sigma^2))`` without overflow in sigma^2 (inf if the
    quotient overflows, 0 if the denominator does)."""
    mu = np.asarray(mu, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.abs(mu) / (sigma * np.hypot(1.0, np.sqrt(2.0) * sigma))


def lobe_s_range(y) -> tuple[np.ndarray, np.ndarray]:
    """``(s_0, s_end)`` of the lobe box for counts ``y``: ``s = asinh(|r| / sqrt(8 y))``."""
    y = np.asarray(y, dtype=np.float64)
    s0 = np.arcsinh(_W_FAR / (8.0 * y))
    kappa_end = np.cbrt(_RHO_TOL * y / _SHAPE_C)
    return s0, -0.5 * np.log(kappa_end)


@dataclass(frozen=True)
class PoissonSquareBox(Box):
    """A box over ``w = |r| sqrt(8 y)`` (its axis' range), one slice per count (labels
    1, 2, ..., consecutive)."""

    def __post_init__(self) -> None:
        labels = np.asarray(self.labels)
        if labels.size == 0 or np.any(labels != labels[0] + np.arange(labels.size)):
            raise ValueError(f"box {self.name!r}: labels must be consecutive counts")
        if labels[0] < 1:
            raise ValueError(f"box {self.name!r}: y = 0 is closed form, labels start at >= 1")

    def _label_index(self, y):
        y = np.asarray(y, dtype=np.float64)
        first = self.labels[0]
        ok = (y >= first) & (y <= self.labels[-1])
        return ok, np.where(ok, y - first, 0).astype(np.intp)

    def cavity(self, label, w):
        r = np.asarray(w, dtype=np.float64) / np.sqrt(8.0 * label)
        return 3.0 * SIGMA_NODE * r, np.full_like(r, SIGMA_NODE)

    # EP's moments (module docstring): functions of (b, y) about the Gaussian factor
    def reference_moments(self, mu, sigma, y):
        """``(saddle-point log Z, beta, sv)``: the log density at the main lobe's mode
        (:func:`~qpinfer.likelihoods.poisson_square.moments.saddle_log_z`), the Gaussian factor's
        mean and std."""
        beta, sv, _ = scaled_cavity(mu, sigma)
        return saddle_log_z(mu, sigma, np.asarray(y, dtype=np.float64)), beta, sv

    def moment_unit(self, sigma, ref):
        """The Gaussian factor's std, ``sv`` (the reference's std)."""
        return ref[2]

    def stored_moments(self, likelihood, mu, sigma, y, moments):
        """``(log I, E[x] - b, log sd(x))`` of the tilt in units of its Gaussian factor by the
        lobes for every count (:func:`~qpinfer.likelihoods.poisson_square.moments.lobe_moments_x`):
        log Z less the reference, without the cancellation of the series' terms of size
        ``mu^2 / (1 + 2 sigma^2)`` at the nodes (~1e-11 at b ~ 150)."""
        _, _, b = scaled_cavity(mu, sigma)
        log_i, shift, var_x = lobe_moments_x(np.abs(b), np.asarray(y, dtype=np.float64))
        return log_i, shift, 0.5 * np.log(var_x)

    def locate(self, mu, sigma, y):
        ok, index = self._label_index(y)
        w = poisson_r(mu, sigma) * np.sqrt(8.0 * np.asarray(y, dtype=np.float64))
        coords = (w,)
        return ok & self._inside_axes(coords), index, coords


@dataclass(frozen=True)
class PoissonSquareLobe(PoissonSquareBox):
    """The main lobe's shape: ``x = (s - s_0(y)) / (s_end(y) - s_0(y))``, clipped at 1 (see the
    module docstring)."""

    def cavity(self, label, x):
        s0, s_end = lobe_s_range(label)
        s = s0 + np.asarray(x, dtype=np.float64) * (s_end - s0)
        r = np.sinh(s) * np.sqrt(8.0 * label)
        return 3.0 * SIGMA_NODE * r, np.full_like(r, SIGMA_NODE)

    def locate(self, mu, sigma, y):
        ok, index = self._label_index(y)
        yy = np.where(ok, np.asarray(y, dtype=np.float64), 1.0)
        s0, s_end = lobe_s_range(yy)
        with np.errstate(over="ignore", invalid="ignore"):
            s = np.arcsinh(poisson_r(mu, sigma) / np.sqrt(8.0 * yy))
            x = np.minimum((s - s0) / (s_end - s0), 1.0)  # rho = 1 to 1e-17 beyond s_end
        coords = (x,)
        return ok & self._inside_axes(coords), index, coords

    def locate_moments(self, mu, sigma, y):
        """Not clipped: EP's moments beyond ``s_end`` are the main lobe's Gauss-Hermite rule's
        (:func:`~qpinfer.likelihoods.poisson_square.moments.hermite_min_b`), not the box's."""
        ok, index = self._label_index(y)
        yy = np.where(ok, np.asarray(y, dtype=np.float64), 1.0)
        s0, s_end = lobe_s_range(yy)
        with np.errstate(over="ignore", invalid="ignore"):
            s = np.arcsinh(poisson_r(mu, sigma) / np.sqrt(8.0 * yy))
            coords = ((s - s0) / (s_end - s0),)
        return ok & self._inside_axes(coords), index, coords


def poisson_boxes(
    max_count: int = MAX_COUNT, nodes=(16, 16, 12), cells=(16, 11, 8)
) -> tuple[Box, ...]:
    """The default Poisson (square link) boxes ``near``, ``far``, ``lobe`` for counts
    1..``max_count``."""
    labels = tuple(float(k) for k in range(1, max_count + 1))
    (n_near, n_far, n_lobe), (c_near, c_far, c_lobe) = nodes, cells
    return (
        PoissonSquareBox("near", (CellAxis("w", 0.0, _W_NEAR / c_near, c_near, n_near),), labels),
        PoissonSquareBox(
            "far",
            (CellAxis("w", _W_NEAR, (_W_FAR - _W_NEAR) / c_far, c_far, n_far),),
            labels,
        ),
        PoissonSquareLobe("lobe", (CellAxis("x", 0.0, 1.0 / c_lobe, c_lobe, n_lobe),), labels),
    )


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table (``Likelihood.table_boxes``)."""
    return poisson_boxes()
