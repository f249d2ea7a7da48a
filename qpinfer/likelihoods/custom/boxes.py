"""Cell-table boxes of a likelihood the user writes: the standardised cavity, and a tail box
that reaches the limit sigma -> infinity.

Every label ``y`` (after :meth:`~qpinfer.CustomLikelihood.reduce_y`) has a centre ``c`` and a
width ``w`` (:mod:`~qpinfer.likelihoods.custom.features`). The boxes hold, for every label of
:meth:`~qpinfer.CustomLikelihood.table_labels`:

* ``narrow``, ``mid``, ``wide``: the standardised cavity ``tau = (mu - c) / sqrt(sigma^2 +
  w^2)`` in ``[-T, T]`` (``T``: the likelihood's ``table_tau``, default 10) and ``lambda =
  log10(sigma / w)`` from the likelihood's ``table_sigma[0]`` (default 1e-3) to 1 and from 21 to
  ``table_sigma[1]`` (default 1e3), and between them ``sigma / w`` itself in ``[1, 21]``
  (:class:`CustomMid`);
* ``tail``: the same ``tau`` and ``u = w / sigma`` from ``1e-6`` (the exact kernel's range: wider
  cavities are refused by both) to ``1 / table_sigma[1]``: at fixed ``tau`` the tilt converges as
  ``sigma -> infinity`` (to the likelihood itself for a peaked label, to a Gaussian cut by the
  likelihood's limits for a step), so what the box stores is smooth in ``u`` down to its limit
  and a few cells hold five decades of ``sigma``.

EP's moments are stored against a reference that carries their large and singular parts: for a
peaked label the product of the cavity and the likelihood's Laplace approximation (log Z, mean,
std of ``exp(l(c) - (f - c)^2 / (2 w^2)) N(f | mu, sigma^2)``), else the cavity itself.

The cells (how many per axis) are chosen when a table is planned
(:mod:`qptables.pipeline.custom_plan`: cell widths halved until the Chebyshev interpolant of rho
and of EP's moments on probe cells matches the exact kernel). A cavity outside both boxes (a
label the table does not hold, ``|tau| > T``, ``sigma < w 10^lambda_0``) is answered by the
exact kernel and counted.

Holds: :class:`CustomCore`, :class:`CustomMid`, :class:`CustomTail`, :func:`custom_boxes` and ``boxes(likelihood)``.
May import: what :mod:`qpinfer.likelihoods` may.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.likelihoods.layout import Box, CellAxis

__all__ = [
    "DEFAULT_CELLS",
    "NODES",
    "spans",
    "CustomCore",
    "CustomMid",
    "CustomTail",
    "boxes",
    "custom_boxes",
]

NODES = 12  # Chebyshev-Gauss nodes per cell and axis
MID_STOP = 21.0  # the mid box: sigma / w in [1, 21]
SIGMA_MAX = 1e6  # the kernel's range in label widths (qpinfer.likelihoods.custom.SIGMA_MAX)


@dataclass(frozen=True)
class _Standardised(Box):
    """What both boxes share: per-label features (same order as ``labels``) and the
    standardised mean ``tau``."""

    centres: tuple = ()
    widths: tuple = ()
    peaked: tuple = ()
    log_peaks: tuple = ()

    @classmethod
    def extra_from_attrs(cls, attrs: dict) -> dict:
        return {
            "centres": tuple(float(v) for v in attrs["centres"]),
            "widths": tuple(float(v) for v in attrs["widths"]),
            "peaked": tuple(bool(v) for v in attrs["peaked"]),
            "log_peaks": tuple(float(v) for v in attrs["log_peaks"]),
        }

    def _features(self, y):
        """``(known, index, c, w, peaked, log_peak)`` per reduced label ``y``."""
        labels = np.asarray(self.labels, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        idx = np.clip(np.searchsorted(labels, y), 0, labels.size - 1)
        known = labels[idx] == y
        pick = [
            np.asarray(v)[idx] for v in (self.centres, self.widths, self.peaked, self.log_peaks)
        ]
        return (known, idx, *pick)

    def _tau(self, mu, sigma, c, w):
        return (np.asarray(mu) - c) / np.hypot(sigma, w)

    def reference_moments(self, mu, sigma, y):
        """The Laplace product for peaked labels, the cavity for the others (module
        docstring)."""
        mu = np.asarray(mu, dtype=np.float64)
        s = np.asarray(sigma, dtype=np.float64)
        _, _, c, w, peaked, log_peak = self._features(y)
        v = s * s + w * w
        tau2 = (mu - c) ** 2 / v
        log_z = np.where(peaked, log_peak + np.log(w) - 0.5 * np.log(v) - 0.5 * tau2, 0.0)
        mean = np.where(peaked, (mu * w * w + c * s * s) / v, mu)
        std = np.where(peaked, s * w / np.sqrt(v), s)
        return log_z, mean, std

    def moment_unit(self, sigma, ref):
        return ref[2]

    # the second coordinate, a function of sigma and the label's width (each box its own)
    _coord = _sigma = _coord_slope = None

    def cavity(self, label, tau, x):
        _, _, c, w, _, _ = self._features(label)
        s = self._sigma(np.asarray(x, dtype=np.float64), w)
        return c + np.asarray(tau) * np.hypot(s, w), s

    def locate(self, mu, sigma, y):
        known, idx, c, w, _, _ = self._features(y)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (self._tau(mu, sigma, c, w), self._coord(np.asarray(sigma), w))
            inside = known & self._inside_axes(coords)
        return inside, idx, coords

    def coord_jacobian(self, mu, sigma, y):
        _, _, c, w, _, _ = self._features(y)
        h = np.hypot(sigma, w)
        tau = (mu - c) / h
        slope = self._coord_slope(sigma, w)
        return ((1.0 / h, -tau * sigma / (h * h)), (np.zeros_like(h), slope))


@dataclass(frozen=True)
class CustomCore(_Standardised):
    """``(tau, log10(sigma / w))``."""

    @staticmethod
    def _coord(s, w):
        return np.log10(s / w)

    @staticmethod
    def _sigma(x, w):
        return w * 10.0**x

    @staticmethod
    def _coord_slope(s, w):
        return 1.0 / (s * np.log(10.0))


@dataclass(frozen=True)
class CustomMid(_Standardised):
    """``(tau, sigma / w)``: where a step's exponential side meets the cavity (the tilt's mean
    ``~ mu + sigma^2 l'``) the moments move by ~1 standard deviation per unit of ``sigma / w``
    but by ``~sigma ln 10`` per unit of ``log10 sigma``, so equal cells in ``sigma`` resolve
    them."""

    @staticmethod
    def _coord(s, w):
        return s / w

    @staticmethod
    def _sigma(x, w):
        return w * x

    @staticmethod
    def _coord_slope(s, w):
        return 1.0 / w + 0.0 * s


@dataclass(frozen=True)
class CustomTail(_Standardised):
    """``(tau, w / sigma)``: the cavities wider than the core box, to the kernel's range."""

    def reference_order(self, sigma) -> np.ndarray:
        """The check's random points of this box in the order its mpmath sample takes them:
        narrowest first (the reference's adaptive panels take minutes beyond ~1e4 label
        widths; the kernel check covers the whole box)."""
        return np.argsort(np.asarray(sigma), kind="stable")

    @staticmethod
    def _coord(s, w):
        return w / s

    @staticmethod
    def _sigma(x, w):
        return w / x

    @staticmethod
    def _coord_slope(s, w):
        return -w / (s * s)


def spans(likelihood) -> dict:
    """Each box's second axis, ``name: (axis, start, stop)``, from the likelihood's
    ``table_sigma = (lo, hi)`` (cavity stds in label widths): narrow from ``lo`` to ``min(1,
    hi)``, mid to ``min(21, hi)``, wide to ``hi`` (boxes with nothing to hold left out), the
    tail from ``hi`` to the kernel's range, 1e6 label widths."""
    lo, hi = (float(v) for v in likelihood.table_sigma)
    out = {}
    if lo < 1.0:
        out["narrow"] = ("log10_sigma_over_w", float(np.log10(lo)), float(np.log10(min(1.0, hi))))
    if hi > 1.0:
        out["mid"] = ("sigma_over_w", max(lo, 1.0), min(MID_STOP, hi))
    if hi > MID_STOP:
        out["wide"] = ("log10_sigma_over_w", float(np.log10(MID_STOP)), float(np.log10(hi)))
    out["tail"] = ("w_over_sigma", 1.0 / SIGMA_MAX, 1.0 / hi)
    return out


#: the cells of :func:`boxes`, per box (tau, second axis); ``qptables build`` plans its own
DEFAULT_CELLS = {"narrow": (20, 6), "mid": (20, 40), "wide": (20, 4), "tail": (20, 2)}
_KINDS = {"narrow": "CustomCore", "mid": "CustomMid", "wide": "CustomCore", "tail": "CustomTail"}


def custom_boxes(likelihood, cells: dict) -> tuple[Box, ...]:
    """The boxes of ``likelihood`` (module docstring) for every label of its
    ``table_labels()``, tau in ``[-table_tau, table_tau]``, with ``cells[name] = (tau cells,
    second-axis cells)`` per box of :func:`spans`."""
    labels = tuple(float(v) for v in likelihood.table_labels())
    feats = [likelihood.features(v) for v in labels]
    fields = {
        "centres": tuple(f.centre for f in feats),
        "widths": tuple(f.width for f in feats),
        "peaked": tuple(bool(f.peaked) for f in feats),
        "log_peaks": tuple(f.log_peak for f in feats),
    }
    t_max = float(likelihood.table_tau)
    out = []
    for name, (axis, start, stop) in spans(likelihood).items():
        n_tau, n_second = cells[name]
        tau = CellAxis("tau", -t_max, 2 * t_max / n_tau, int(n_tau), NODES)
        second = CellAxis(axis, start, (stop - start) / n_second, int(n_second), NODES)
        out.append(globals()[_KINDS[name]](name, (tau, second), labels, **fields))
    return tuple(out)


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table at :data:`DEFAULT_CELLS` (``qptables build``
    refines them until its kernel check holds, :mod:`qptables.pipeline.custom_plan`)."""
    return custom_boxes(likelihood, DEFAULT_CELLS)
