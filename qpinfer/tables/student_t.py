"""One Student-t v2 table per nu serves every noise scale (issue #15).

A Student-t table is built for ``scale = 1`` (likelihood ``student_t(nu=..., scale=1.0)``, boxes
in :mod:`qpinfer.tables.boxes.student_t`). ``f' = (f - y) / scale`` maps the tilted family onto itself,
so for any scale ``sigma*(mu, sigma, y) = scale * sigma*_1((mu - y) / scale, sigma / scale, 0)``
and ``sigma* / sigma_EP`` is unchanged: :class:`ScaledTable` answers a scaled likelihood's queries
from the scale-1 table (the kernel does the same through ``StudentT.reduced``).
:func:`for_likelihood` adapts a table to the likelihood an estimator uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.likelihoods.student_t import StudentT, parse_name
from qpinfer.sigma.kernel import _prepare

__all__ = ["ScaledTable", "base_name", "for_likelihood"]


def base_name(likelihood_name: str) -> str | None:
    """The scale-1 name of a Student-t likelihood name (``None`` if not Student-t)."""
    params = parse_name(likelihood_name)
    return None if params is None else StudentT(params[0], 1.0).name


class ScaledTable:
    """A scale-1 Student-t table (``base``) answering for ``StudentT(nu, scale)``.

    Same interface as :class:`qpinfer.tables.reduced.ReducedTable` (``sigma_qp``, ``sigma_ratio``,
    ``contains``, ``fallback_count``, ``likelihood``); input checks and their messages are the
    scaled likelihood's."""

    accepts_moments = True

    def __init__(self, base: Any, scale: float) -> None:
        nu_scale = parse_name(getattr(base, "likelihood", None))
        if nu_scale is None or nu_scale[1] != 1.0:
            raise ValueError(
                f"base must be a Student-t table for scale 1.0; got {getattr(base, 'likelihood', base)!r}"
            )
        self.base = base
        self._lik = StudentT(nu_scale[0], scale)
        self.likelihood: str = self._lik.name
        self.path = getattr(base, "path", None)
        self.attrs = getattr(base, "attrs", {})
        self.fallback_count = 0

    def __repr__(self) -> str:
        return f"ScaledTable({self.base!r}, scale={self._lik.scale!r})"

    def __reduce__(self):
        return (ScaledTable, (self.base, self._lik.scale))

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (kept for the tables' interface)."""

    def _reduced(self, mu, sigma, y):
        lik, mu, sigma, y = _prepare(self._lik, mu, sigma, y)
        d, s, _ = lik.reduced(mu, sigma, y)  # ValueError naming sigma or mu, with this scale
        return d, s, mu.shape

    def _counted(self, method, *args, **kwargs):
        before = self.base.fallback_count
        try:
            return method(*args, **kwargs)
        finally:
            self.fallback_count += self.base.fallback_count - before

    def sigma_qp(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* (paper 000 eq. (7)) at cavities ``(mu, sigma)`` and observations ``y``;
        ``moments``: EP's ``(mean, std)`` there, if known (then ``ratio * std``)."""
        if moments is not None:
            std = np.asarray(moments[1], dtype=np.float64)
            return self.sigma_ratio(mu, sigma, y, moments=moments) * std
        d, s, shape = self._reduced(mu, sigma, y)
        out = self._counted(self.base.sigma_qp, d, s, np.zeros_like(d))
        return (out * self._lik.scale).reshape(shape)

    def sigma_ratio(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* / sigma_EP; ``moments``: EP's ``(mean, std)`` at these cavities, if known."""
        d, s, shape = self._reduced(mu, sigma, y)
        if moments is not None:  # the ratio only needs the std, in units of the scale
            std = np.broadcast_to(np.asarray(moments[1], dtype=np.float64), shape)
            moments = (d, std / self._lik.scale)
        out = self._counted(self.base.sigma_ratio, d, s, np.zeros_like(d), moments=moments)
        return out.reshape(shape)

    def contains(self, mu, sigma, y) -> np.ndarray:
        """True everywhere a lookup needs no exact fallback."""
        d, s, shape = self._reduced(mu, sigma, y)
        return self.base.contains(d, s, np.zeros_like(d)).reshape(shape)


def for_likelihood(table: Any, likelihood: Any) -> Any:
    """``table`` for ``likelihood``: itself if it is that likelihood's, a :class:`ScaledTable`
    if it is the scale-1 Student-t table of the same nu, else itself (the projection then
    refuses the mismatch, naming both)."""
    if table is None:
        return None
    lik = get_likelihood(likelihood)
    if not isinstance(lik, StudentT):
        return table
    if isinstance(table, ScaledTable):  # re-scaled (the noise scale is being fitted)
        if table._lik == lik:
            return table
        table = table.base
    have = getattr(table, "likelihood", None)
    if have == lik.name or lik.scale == 1.0:
        return table
    if isinstance(have, str) and have == base_name(lik.name):
        return ScaledTable(table, lik.scale)
    return table
