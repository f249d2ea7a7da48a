"""One Student-t v2 table per nu serves every noise scale (issue #15).

A Student-t table is built for ``scale = 1`` (likelihood ``student_t(nu=..., scale=1.0)``, boxes
in :mod:`qpinfer.tables.boxes.student_t`). ``f' = (f - y) / scale`` maps the tilted family onto
itself, so for any scale ``sigma*(mu, sigma, y) = scale * sigma*_1((mu - y) / scale, sigma / scale,
0)`` and ``sigma* / sigma_EP`` is unchanged: :class:`ScaledTable` answers a scaled likelihood's
queries from the scale-1 table (the kernel does the same through ``StudentT.reduced``).
:func:`for_likelihood` adapts a table to the likelihood object an estimator uses, reading the
table's own likelihood object (:attr:`~qpinfer.tables.reader.SigmaTableReader.likelihood_object`):
no likelihood name is parsed and no :class:`~qpinfer.likelihoods.student_t.StudentT` built on the
way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qpinfer.likelihoods.registry import get_likelihood
from qpinfer.likelihoods.student_t import StudentT, student_t_name
from qpinfer.sigma.kernel import _prepare
from qpinfer.tables.reader import SigmaTableReader

__all__ = ["ScaledTable", "base_name", "for_likelihood"]


def base_name(likelihood: StudentT) -> str:
    """The name of the scale-1 Student-t likelihood of ``likelihood``'s nu: its table's."""
    return student_t_name(likelihood.nu, 1.0)


def _unit_scale_nu(table: Any) -> float | None:
    """nu if ``table`` is a reader of a scale-1 Student-t table (one that serves every scale)."""
    lik = table.likelihood_object if isinstance(table, SigmaTableReader) else None
    return lik.nu if isinstance(lik, StudentT) and lik.scale == 1.0 else None


class ScaledTable(SigmaTableReader):
    """A scale-1 Student-t table (``base``) answering for ``StudentT(nu, scale)``.

    ``scale``: the noise scale, or the :class:`~qpinfer.likelihoods.student_t.StudentT` likelihood
    (of the base's nu) itself, which is then used as it is. The readers' interface
    (:class:`~qpinfer.tables.reader.SigmaTableReader`); input checks and their messages are the
    scaled likelihood's."""

    def __init__(self, base: SigmaTableReader, scale: float | StudentT) -> None:
        nu = _unit_scale_nu(base)
        if nu is None:
            got = base.likelihood if isinstance(base, SigmaTableReader) else base
            raise ValueError(f"base must be a Student-t table for scale 1.0; got {got!r}")
        if isinstance(scale, StudentT):
            if scale.nu != nu:
                raise ValueError(f"scale is {scale!r}, whose nu is not the base table's {nu!r}")
            self._lik = scale
        else:
            self._lik = StudentT(nu, scale)
        # EP's moments of this scale from the base table, in units of the scale, where it has them
        self._lik = self._lik.with_moment_table(base.moment_table)
        self.base = base
        self.likelihood: str = self._lik.name
        self.path = base.path
        self.attrs = base.attrs
        self.fallback_count = 0

    @property
    def moment_table(self) -> SigmaTableReader | None:
        """The scale-1 table's (the likelihood's EP moments are looked up in units of the
        scale)."""
        return self.base.moment_table

    def __repr__(self) -> str:
        return f"ScaledTable({self.base!r}, scale={self._lik.scale!r})"

    def __reduce__(self):
        return (ScaledTable, (self.base, self._lik))

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

    def qp_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(EP's mean, sigma*)``: EP's moments (eq. (5)) of the scaled likelihood, the std
        passed on to the lookup (:meth:`sigma_qp`)."""
        mean, std_ep = self._lik.tilted_moments(mu, sigma, y)
        return mean, self.sigma_qp(mu, sigma, y, moments=(mean, std_ep))

    def sigma_qp_gradient(self, mu, sigma, y, ep_std_slope=False) -> tuple[np.ndarray, ...]:
        """``(sigma*, d sigma*/d mu, d sigma*/d sigma)``: sigma* as :meth:`qp_moments` gives
        it, the derivatives the base table's at the cavity in units of the scale (``sigma* =
        scale sigma*_1(|mu - y| / scale, sigma / scale)``: the scales cancel), and with
        ``ep_std_slope`` EP's std's derivative in ``mu`` likewise."""
        lik, mu, sigma, y = _prepare(self._lik, mu, sigma, y)
        value = self.qp_moments(mu, sigma, y)[1]
        d, s, sign = lik.reduced(mu, sigma, y)  # d = |mu - y| / scale
        before = self.base.fallback_count
        _, *grads = self.base.sigma_qp_gradient(d, s, np.zeros_like(d), ep_std_slope)
        self.base.fallback_count = before  # the value's fallbacks are counted by qp_moments
        grads[0] = sign * grads[0]
        if ep_std_slope:
            grads[2] = sign * grads[2]
        return (np.asarray(value), *grads)

    def contains(self, mu, sigma, y) -> np.ndarray:
        """True everywhere a lookup needs no exact fallback."""
        d, s, shape = self._reduced(mu, sigma, y)
        return self.base.contains(d, s, np.zeros_like(d)).reshape(shape)


def for_likelihood(table: Any, likelihood: Any) -> Any:
    """``table`` for ``likelihood`` (an object; a name is built into one): itself if it is that
    likelihood's, a :class:`ScaledTable` if it is the scale-1 Student-t table of the same nu,
    else itself (the projection then refuses the mismatch, naming both)."""
    if table is None:
        return None
    lik = get_likelihood(likelihood)
    if not isinstance(lik, StudentT):
        return table
    if isinstance(table, ScaledTable):  # re-scaled (the noise scale is being fitted)
        if table.likelihood_object == lik:
            return table
        table = table.base
    if lik.scale != 1.0 and _unit_scale_nu(table) == lik.nu:
        return ScaledTable(table, lik)
    return table
