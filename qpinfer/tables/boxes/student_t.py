"""v2 table boxes of the Student-t likelihood (issue #15): one table per nu, any scale.

**Reduced coordinates.** ``f' = (f - y) / scale`` maps the tilted family onto itself
(:mod:`qpinfer.likelihoods.student_t`), and ``f' -> -f'`` mirrors it, so ``sigma* / scale`` depends
on ``d = |mu - y| / scale`` and ``s = sigma / scale`` only (for each nu). The table is built for
``scale = 1`` (likelihood ``student_t(nu=..., scale=1.0)``) and serves every scale through
:class:`qpinfer.tables.student_t.ScaledTable`. The fold ``d = |mu - y|`` is exact (the kernel's
own ``canonical``: ``sigma*`` at ``mu - y = +-a`` is bit for bit the same). The boxes store
``rho = sigma* / sigma_EP`` (in (0, 1], Theorem 2) at Chebyshev-Gauss nodes of equal cells, in

* ``z = d / sqrt(1 + s^2)`` (d where the cavity is narrow, ``d / s`` where it is wide) and
  ``log10 s``. For s >= ~3 the tilt is bimodal for z in about [4, 10]: the t factor's lobe
  near ``f = y`` (mass ~ e^(-z^2/2) / s) and the cavity's lobe (mass ~ (z s)^-(nu+1)) exchange
  the mass there, over about 1/z in z, and the exchange moves by ~(nu + 1) ln 10 / z in z per
  decade of s: the cells are finest there.

  - ``narrow``: ``log10 s`` in [-3.25, 0] (cells 0.5 in z x 0.25): below s = 8.7e-4 the
    kernel's Gaussian closed form (``r < 1e-3``) holds for every d;
  - ``mid``: ``log10 s`` in [0, 1] (cells 0.25 x 0.125);
  - ``wide``: z in [0, 12.5], ``log10 s`` in [1, 3] (cells 0.125 x 0.125): the bimodal
    transition (rho down to 0.06 at s = 1e3);
  - ``wide_out``: z in [12.5, 25], ``log10 s`` in [1, 3] (cells 0.25 x 0.125);

* ``far``: ``u = 25 / z`` in [0.01, 1] (8 cells) and ``log10 s`` in [-3.5, 10] (cells 0.5;
  the kernel supports s <= 1e10): for z >= 25 the t factor's lobe holds < e^-140 of the mass
  (s <= 1e10), the tilt is the cavity's lobe times the t factor's polynomial tail, and
  ``1 - rho ~ u^6`` is smooth in u. Beyond z = 2500 (u < 0.01) the kernel's Gaussian closed
  form holds for every s.

**Gap** (answered by the exact kernel, counted in ``fallback_count``): ``z < 25`` with
``s > 1e3`` -- cavities more than 1000 noise scales wide near the observation. The mass exchange
between the lobes sharpens as s grows (``sigma* / sigma_EP`` down to 3e-5 at s = 1e10, with the
bimodal window at z ~ 10 .. 12), and stored rho would need ever finer cells; in a regression fit
such cavities mean a prior far wider than the noise (signal sd > 1000 scales).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.tables.boxes.base import Box
from qpinfer.tables.chebyshev import CellAxis

__all__ = ["KINDS", "S_MAX", "StudentTCore", "StudentTFar", "student_t_boxes"]

Z_FAR = 25.0  # z from which the t factor's lobe is negligible (for s <= 1e10)
S_MAX = 3.0  # log10 s: the core box's upper end (the gap above)
LOG10_S_MIN = -3.25  # below, the kernel's Gaussian closed form for every d
LOG10_S_TOP = 10.0  # the kernel's limit: s <= 1e10
U_MIN = Z_FAR / 2500.0  # z > 2236: the Gaussian closed form (r < 1e-3) for every s


def _z(mu, sigma):
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(over="ignore"):
        return mu / np.hypot(1.0, sigma)


@dataclass(frozen=True)
class StudentTCore(Box):
    """``z = d / sqrt(1 + s^2)`` and ``log10 s`` (canonical ``d = |mu - y| >= 0``, scale 1)."""

    def cavity(self, label, z, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return np.asarray(z) * np.hypot(1.0, s), s

    def axis_coords(self, mu, sigma, y):
        return _z(mu, sigma), np.log10(sigma)

    def locate(self, mu, sigma, y):
        coords = self.axis_coords(mu, sigma, y)
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


@dataclass(frozen=True)
class StudentTFar(Box):
    """``u = 25 / z`` in [0, 1] and ``log10 s``: the cavities beyond the bimodal region."""

    def cavity(self, label, u, log10_sigma):
        s = 10.0 ** np.asarray(log10_sigma, dtype=np.float64)
        return Z_FAR / np.asarray(u) * np.hypot(1.0, s), s

    def axis_coords(self, mu, sigma, y):
        with np.errstate(divide="ignore"):
            return Z_FAR / _z(mu, sigma), np.log10(sigma)  # z = 0: u = inf, outside

    def locate(self, mu, sigma, y):
        coords = self.axis_coords(mu, sigma, y)
        return self._inside_axes(coords), np.zeros(np.shape(mu), dtype=np.intp), coords


def student_t_boxes(nodes: int = 12) -> tuple[Box, ...]:
    """The default Student-t boxes (see the module docstring)."""

    def z_axis(lo, hi, width):
        return CellAxis("z", lo, width, round((hi - lo) / width), nodes)

    def ls_axis(lo, hi, width):
        return CellAxis("log10_sigma", lo, width, round((hi - lo) / width), nodes)

    z_mid = 0.5 * Z_FAR
    return (
        StudentTCore("narrow", (z_axis(0.0, Z_FAR, 0.5), ls_axis(LOG10_S_MIN, 0.0, 0.25)), (0.0,)),
        StudentTCore("mid", (z_axis(0.0, Z_FAR, 0.25), ls_axis(0.0, 1.0, 0.125)), (0.0,)),
        StudentTCore("wide", (z_axis(0.0, z_mid, 0.125), ls_axis(1.0, S_MAX, 0.125)), (0.0,)),
        StudentTCore("wide_out", (z_axis(z_mid, Z_FAR, 0.25), ls_axis(1.0, S_MAX, 0.125)), (0.0,)),
        StudentTFar(
            "far",
            (
                CellAxis("u", U_MIN, (1.0 - U_MIN) / 8, 8, nodes),
                CellAxis("log10_sigma", -3.5, 0.5, 27, nodes),
            ),
            (0.0,),
        ),
    )


KINDS = {"StudentTCore": StudentTCore, "StudentTFar": StudentTFar}
