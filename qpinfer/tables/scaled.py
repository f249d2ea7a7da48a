"""One table serving a family of likelihoods that differ by a scale.

A likelihood whose :meth:`~qpinfer.Likelihood.table_base` names another (Student-t noise of
scale s: the same nu's scale-1 likelihood) has its lookups answered by that likelihood's table
at an equivalent cavity (:meth:`~qpinfer.Likelihood.table_map`: ``sigma* = scale
sigma*'(mu', sigma', y')``, and ``sigma* / sigma_EP`` unchanged): :class:`ScaledTable` does so
with the readers' interface. :func:`for_likelihood` adapts a table to the likelihood object an
estimator uses, reading the table's own likelihood object
(:attr:`~qpinfer.tables.reader.SigmaTableReader.likelihood_object`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.likelihoods.base import Likelihood
from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.sigma.exact import _prepare
from qpinfer.tables.reader import SigmaTableReader

__all__ = ["ScaledTable", "for_likelihood"]


def _serves(table: Any, lik: Likelihood) -> bool:
    """Whether ``table`` is a reader of ``lik``'s :meth:`~qpinfer.Likelihood.table_base`."""
    if not isinstance(table, SigmaTableReader) or isinstance(table, ScaledTable):
        return False
    base = lik.table_base()
    return base is not None and table.likelihood_object == base


class ScaledTable(SigmaTableReader):
    """The table ``base`` answering for another member of its likelihood's family.

    ``scale``: the member's scale (built by the base likelihood's
    :meth:`~qpinfer.Likelihood.with_table_scale`), or the member likelihood itself, used as it
    is. The readers' interface (:class:`~qpinfer.tables.reader.SigmaTableReader`); input checks
    and their messages are the member's."""

    def __init__(self, base: SigmaTableReader, scale: float | Likelihood) -> None:
        own = base.likelihood_object if isinstance(base, SigmaTableReader) else None
        if isinstance(scale, Likelihood):
            if not _serves(base, scale):
                raise ValueError(f"scale is {scale!r}, whose table is not base's {own!r}")
            lik = scale
        else:
            try:
                lik = own.with_table_scale(scale)
            except (AttributeError, ValueError):
                got = base.likelihood if isinstance(base, SigmaTableReader) else base
                raise ValueError(
                    f"base must be a table that serves other scales (e.g. a Student-t table "
                    f"for scale 1.0); got {got!r}"
                ) from None
        # EP's moments of this member from the base table, in its units, where it has them
        self._lik = lik.with_moment_table(base.moment_table)
        self.base = base
        self.likelihood: str = self._lik.name
        self.path = base.path
        self.attrs = base.attrs
        self.fallback_count = 0

    @property
    def moment_table(self) -> SigmaTableReader | None:
        """The base table's (the likelihood's EP moments are looked up in its units)."""
        return self.base.moment_table

    def __repr__(self) -> str:
        return f"ScaledTable({self.base!r}, {self._lik!r})"

    def __reduce__(self):
        return (ScaledTable, (self.base, self._lik))

    def _mapped(self, mu, sigma, y):
        lik, mu, sigma, y = _prepare(self._lik, mu, sigma, y)
        return (*lik.table_map(mu, sigma, y), mu.shape)

    def _counted(self, method, *args, **kwargs):
        before = self.base.fallback_count
        try:
            return method(*args, **kwargs)
        finally:
            self.fallback_count += self.base.fallback_count - before

    def sigma_qp(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* (Zhang et al., 2020, eq. (7)) at cavities ``(mu, sigma)`` and observations
        ``y``; ``moments``: EP's ``(mean, std)`` there, if known (then ``ratio * std``)."""
        if moments is not None:
            std = np.asarray(moments[1], dtype=np.float64)
            return self.sigma_ratio(mu, sigma, y, moments=moments) * std
        m, s, yy, scale, _, shape = self._mapped(mu, sigma, y)
        out = self._counted(self.base.sigma_qp, m, s, yy)
        return (out * scale).reshape(shape)

    def sigma_ratio(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* / sigma_EP; ``moments``: EP's ``(mean, std)`` at these cavities, if known."""
        m, s, yy, scale, _, shape = self._mapped(mu, sigma, y)
        if moments is not None:  # the ratio only needs the std, in the base's units
            std = np.broadcast_to(np.asarray(moments[1], dtype=np.float64), shape)
            moments = (m, std / scale)
        out = self._counted(self.base.sigma_ratio, m, s, yy, moments=moments)
        return out.reshape(shape)

    def qp_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(EP's mean, sigma*)``: EP's moments of this likelihood, the std passed on to the
        lookup (:meth:`sigma_qp`)."""
        mean, std_ep = self._lik.tilted_moments(mu, sigma, y)
        return mean, self.sigma_qp(mu, sigma, y, moments=(mean, std_ep))

    def sigma_qp_gradient(self, mu, sigma, y, ep_std_slope=False) -> tuple[np.ndarray, ...]:
        """``(sigma*, d sigma*/d mu, d sigma*/d sigma)``: sigma* as :meth:`qp_moments` gives
        it, the derivatives the base table's at the equivalent cavity (``sigma* = scale
        sigma*'(mu', sigma / scale)``: the scales cancel), and with ``ep_std_slope`` EP's
        std's derivative in ``mu`` likewise."""
        value = self.qp_moments(mu, sigma, y)[1]
        m, s, yy, _, slope, _ = self._mapped(mu, sigma, y)
        before = self.base.fallback_count
        _, *grads = self.base.sigma_qp_gradient(m, s, yy, ep_std_slope)
        self.base.fallback_count = before  # the value's fallbacks are counted by qp_moments
        grads[0] = slope * grads[0]
        if ep_std_slope:
            grads[2] = slope * grads[2]
        return (np.asarray(value), *grads)

    def contains(self, mu, sigma, y) -> np.ndarray:
        """True everywhere a lookup needs no exact fallback."""
        m, s, yy, _, _, shape = self._mapped(mu, sigma, y)
        return self.base.contains(m, s, yy).reshape(shape)


def for_likelihood(table: Any, likelihood: Any) -> Any:
    """``table`` for ``likelihood`` (an object; a name is built into one): itself if it is that
    likelihood's, a :class:`ScaledTable` if it is the table of the likelihood's
    :meth:`~qpinfer.Likelihood.table_base`, else itself (the projection then refuses the
    mismatch, naming both)."""
    if table is None:
        return None
    lik = get_likelihood(likelihood)
    if isinstance(table, ScaledTable):  # re-scaled (the scale is being fitted)
        if table.likelihood_object == lik:
            return table
        table = table.base
    return ScaledTable(table, lik) if _serves(table, lik) else table
