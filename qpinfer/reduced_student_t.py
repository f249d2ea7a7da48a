"""v2 table boxes of the Student-t likelihood (issue #15): one table per nu, any scale.

**Reduced coordinates.** ``f' = (f - y) / scale`` maps the tilted family onto itself
(:mod:`qpinfer.student_t`), and ``f' -> -f'`` mirrors it, so ``sigma* / scale`` depends on
``d = |mu - y| / scale`` and ``s = sigma / scale`` only (for each nu): the table is built for
``scale = 1`` (likelihood ``student_t(nu=..., scale=1.0)``) and serves every scale through
:class:`qpinfer.tables_student_t.ScaledTable`. The fold ``d = |mu - y|`` is exact (the kernel's
own ``canonical``). The boxes store ``sigma* / sigma`` (``denominator = "sigma"``: a lookup needs
no EP moments) at Chebyshev-Gauss nodes of equal cells, in

* ``z = d / sqrt(1 + s^2)`` (d where the cavity is narrow, ``d / s`` where it is wide: the
  bimodal transition sits at ``z ~ 4 .. 10`` for s >= 1) and ``log10 s``;
* ``core``: ``z`` in [0, 25], ``log10 s`` in [-3.25, S_MAX]: below s = 8.7e-4 the kernel's
  Gaussian closed form (``r < 1e-3``) holds for every d;
* ``far``: ``u = 25 / z`` in [0, 1], ``log10 s`` in [-3.25, 10] (the kernel supports
  s <= 1e10): the cavity's lobe only (the t factor's lobe near ``f = y`` holds < e^-140 of the
  mass for z >= 25, s <= 1e10), where ``sigma*/sigma`` tends to its Gaussian value smoothly
  as ``u -> 0``.

**Gap** (answered by the exact kernel, counted in ``fallback_count``): ``z < 25`` with
``s > 10^S_MAX`` -- cavities much wider than the noise scale, near or across the bimodal
transition: there the t factor's lobe and the cavity's lobe exchange the mass over a width of
about ``1 / z`` in z, and ``sigma*`` moves by a factor of up to ``s`` (``sigma* / sigma_EP`` down
to 3e-5 at s = 1e10), which equal cells cannot follow to 1e-12 at a sane size
(``docs/tables-v2.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.cheb_cells import CellAxis
from qpinfer.reduced import Box

__all__ = ["KINDS", "S_MAX", "StudentTCore", "StudentTFar", "student_t_boxes"]

Z_FAR = 25.0  # z from which the t factor's lobe is negligible (for s <= 1e10)
S_MAX = 2.0  # log10 s: the core box's upper end (the gap above)
LOG10_S_MIN = -3.25  # below, the kernel's Gaussian closed form for every d
LOG10_S_TOP = 10.0  # the kernel's limit: s <= 1e10
U_MIN = Z_FAR / 2500.0  # z > 2236: the Gaussian closed form (r < 1e-3) for every s


def _z(mu, sigma):
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(over="ignore"):
        return mu / np.hypot(1.0, sigma)


@dataclass(frozen=True)
class StudentTCore(Box):
    """``z = d / sqrt(1 + s^2)`` and ``log10 s`` (canonical d = |mu - y| >= 0, scale 1)."""

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
    """The default Student-t boxes (see the module docstring): ``narrow``, ``mid``, ``wide``
    (z in [0, 25], log10 s in [-3.25, 0], [0, 1], [1, S_MAX]) and ``far``."""
    z_axis = lambda width: CellAxis("z", 0.0, width, round(Z_FAR / width), nodes)  # noqa: E731
    ls = lambda a, b, w: CellAxis("log10_sigma", a, w, round((b - a) / w), nodes)  # noqa: E731
    return (
        StudentTCore("narrow", (z_axis(0.5), ls(LOG10_S_MIN, 0.0, 0.25)), (0.0,)),
        StudentTCore("mid", (z_axis(0.25), ls(0.0, 1.0, 0.125)), (0.0,)),
        StudentTCore("wide", (z_axis(0.25), ls(1.0, S_MAX, 0.0625)), (0.0,)),
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
