"""Cell-table boxes of the probit likelihood: a core box in ``(tau, log10 sigma)`` and a tail box
(``docs/development/tables-v2.md``; the :class:`~qpinfer.likelihoods.layout.Box` interface is in
:mod:`qpinfer.likelihoods.layout`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpinfer.likelihoods.layout import Box, CellAxis

__all__ = ["ProbitCore", "ProbitTail", "boxes", "probit_boxes"]

_TAU_SPLIT = 8.0  # the tail box starts at tau = -8


@dataclass(frozen=True)
class ProbitCore(Box):
    """tau = mu / sqrt(1 + sigma^2) and log10 sigma: see ``docs/development/tables-v2.md``."""

    fused_mean_z = True  # tau is the probit's z (Probit.tilted_mean_and_z)

    def cavity(self, label, tau, log10_sigma):
        s = 10.0**log10_sigma
        return tau * np.hypot(1.0, s), s

    def axis_coords(self, mu, sigma, y):
        return mu / np.hypot(1.0, sigma), np.log10(sigma)  # sigma > 0 (validated)

    def coord_jacobian(self, mu, sigma, y):
        """``((dtau/dmu, dtau/dsigma), (0, d log10(sigma)/dsigma))``, tau = mu / h,
        h = sqrt(1 + sigma^2)."""
        h = np.hypot(1.0, sigma)
        tau = mu / h
        zero = np.zeros(np.shape(sigma))
        return (1.0 / h, -tau * (sigma / h) / h), (zero, 1.0 / (sigma * np.log(10.0)))

    def axis_array(self, mu, sigma, y, tau=None):
        """(See :meth:`qpinfer.likelihoods.layout.Box.axis_array`.) ``tau``: the first coordinate if
        the caller has it (the probit likelihood's z, :meth:`qpinfer.Probit.tilted_mean_and_z`: the
        same operations); ``mu`` and ``y`` are then not read."""
        u = np.empty((2, sigma.size))
        if tau is None:
            np.hypot(1.0, sigma, out=u[1])
            np.divide(mu, u[1], out=u[0])
        else:
            u[0] = tau
        np.log10(sigma, out=u[1])  # sigma <= 0: NaN or -inf, outside
        return u


@dataclass(frozen=True)
class ProbitTail(Box):
    """u = -8 / tau in (0, 1] and log10 kappa, ``kappa = |tau| / sigma``: see
    ``docs/development/tables-v2.md``."""

    def cavity(self, label, u, log10_kappa):
        tau = -_TAU_SPLIT / u
        s = np.abs(tau) / 10.0**log10_kappa
        return tau * np.hypot(1.0, s), s

    def locate(self, mu, sigma, y):
        tau = mu / np.hypot(1.0, sigma)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coords = (-_TAU_SPLIT / tau, np.log10(np.abs(tau) / sigma))
        inside = (tau < -_TAU_SPLIT) & self._inside_axes(coords)
        return inside, np.zeros(np.shape(mu), dtype=np.intp), coords


def probit_boxes(nodes: int = 12) -> tuple[Box, ...]:
    """The default probit boxes ``core`` and ``tail`` (see the classes)."""
    return (
        ProbitCore(
            "core",
            (
                CellAxis("tau", -_TAU_SPLIT, 0.5, 41, nodes),
                CellAxis("log10_sigma", -2.75, 0.25, 47, nodes),
            ),
            (1.0,),
            "sigma",  # bounded below: sigma*/sigma >= 0.1 for tau >= -8 (docs/development/tables-v2.md)
        ),
        ProbitTail(
            "tail",
            (CellAxis("u", 0.0, 0.25, 4, nodes), CellAxis("log10_kappa", -8.0, 0.25, 43, nodes)),
            (1.0,),
        ),
    )


def boxes(likelihood) -> tuple[Box, ...]:
    """The boxes of ``likelihood``'s cell table (``Likelihood.table_boxes``)."""
    return probit_boxes()
