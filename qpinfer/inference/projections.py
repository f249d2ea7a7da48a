"""The local update of a site: what EP, QP, Power EP and relaxed EP differ in.

Given the cavity ``N(cavity_mean, cavity_std^2)`` of a site and its observation ``y``, a
projection returns the mean and standard deviation of the Gaussian that replaces the tilted
distribution ``q~(f) ∝ N(f | cavity) p(y | f)^power``:

* :class:`MomentMatching` -- EP, the KL projection, Zhang et al. (2020) eq. (5);
* :class:`QuantileMatching` -- QP, the L2-Wasserstein projection: the same mean (eq. (5)), the
  standard deviation sigma* of eq. (7), looked up in a table (:func:`qpinfer.open_table`) or
  computed exactly with :func:`qpinfer.sigma_qp`.

Power EP (:mod:`qpinfer.inference.power_ep`) and relaxed EP (:mod:`qpinfer.inference.relaxed_ep`)
add their own; the site loop (:mod:`qpinfer.inference.site_loop`) turns a projection into new site
parameters (eq. (6)).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from qpinfer.sigma.exact import sigma_qp
from qpinfer.tables.reader import SigmaTableReader

__all__ = ["MomentMatching", "Projection", "QuantileMatching"]


@runtime_checkable
class Projection(Protocol):
    """The local update of a site (what EP/QP/Power EP/relaxed EP differ in).

    ``power`` is the fraction of the site removed to form the cavity (1 for EP and QP).
    ``project(cavity_mean, cavity_std, y) -> (mean, std)`` is the Gaussian replacing the tilted
    distribution, vectorised over sites. ``log_normalizer(cavity_mean, cavity_std, y)`` is
    ``log Z^_i = log ∫ N(f | cavity) p(y_i | f) df``, needed by the evidence (eq. (4)).
    """

    power: float

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray: ...


class MomentMatching:
    """EP's projection: match the tilted mean and variance (Zhang et al. (2020), equation (5))."""

    power = 1.0

    def __init__(self, likelihood: Any) -> None:
        self.likelihood = likelihood

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The projected Gaussian's mean and standard deviation at each site.

        Parameters
        ----------
        cavity_mean, cavity_std : ndarray
            The cavity distributions' means and standard deviations (> 0), one per site.
        y : ndarray
            The sites' observations.

        Returns
        -------
        mean, std : ndarray
        """
        return self.likelihood.tilted_moments(cavity_mean, cavity_std, y)

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        """The tilted distribution's log normaliser ``log Z`` at each site (for the evidence).

        Parameters
        ----------
        cavity_mean, cavity_std : ndarray
            The cavity distributions' means and standard deviations (> 0), one per site.
        y : ndarray
            The sites' observations.

        Returns
        -------
        ndarray
        """
        return self.likelihood.log_z(cavity_mean, cavity_std, y)

    def __repr__(self) -> str:
        return f"MomentMatching({getattr(self.likelihood, 'name', self.likelihood)!r})"


class QuantileMatching:
    """QP's projection: EP's mean and the L2-Wasserstein standard deviation (equations (5), (7)).

    With a ``table`` (a :class:`~qpinfer.tables.reader.SigmaTableReader`, from
    :func:`qpinfer.open_table`) the table answers both, ``table.qp_moments(mu, sigma, y)``: one
    batched lookup per parallel sweep, EP's moments computed only where the table needs them
    (a cell table of the probit, whose core stores sigma* / sigma, computes EP's mean alone), with the
    table's own exact fallback outside its domain. Without a table, sigma* is computed exactly
    by :func:`qpinfer.sigma_qp` (slower).
    """

    power = 1.0

    def __init__(self, likelihood: Any, table: SigmaTableReader | None = None) -> None:
        if table is not None:
            if not isinstance(table, SigmaTableReader):
                raise ValueError(
                    "table must be a sigma* table from qpinfer.open_table (a SigmaTableReader) "
                    f"or None; got {type(table).__name__}"
                )
            if table.likelihood != likelihood.name:
                raise ValueError(
                    f"table is for likelihood {table.likelihood!r} but inference uses "
                    f"{likelihood.name!r}"
                )
        self.likelihood = likelihood
        self.table = table

    def project(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The projected Gaussian's mean and standard deviation at each site.

        Parameters
        ----------
        cavity_mean, cavity_std : ndarray
            The cavity distributions' means and standard deviations (> 0), one per site.
        y : ndarray
            The sites' observations.

        Returns
        -------
        mean, std : ndarray
        """
        if self.table is not None:
            return self.table.qp_moments(cavity_mean, cavity_std, y)
        mean, _ = self.likelihood.tilted_moments(cavity_mean, cavity_std, y)
        return mean, sigma_qp(self.likelihood, cavity_mean, cavity_std, y)

    def log_normalizer(
        self, cavity_mean: np.ndarray, cavity_std: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        """The tilted distribution's log normaliser ``log Z`` at each site (for the evidence).

        Parameters
        ----------
        cavity_mean, cavity_std : ndarray
            The cavity distributions' means and standard deviations (> 0), one per site.
        y : ndarray
            The sites' observations.

        Returns
        -------
        ndarray
        """
        return self.likelihood.log_z(cavity_mean, cavity_std, y)

    def __repr__(self) -> str:
        src = "exact" if self.table is None else "table"
        return f"QuantileMatching({getattr(self.likelihood, 'name', self.likelihood)!r}, {src})"
