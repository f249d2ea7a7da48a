"""What every open sigma* table answers: :class:`SigmaTableReader`, the one interface of the
v1 grid reader (:class:`qpinfer.tables.grid_table.SigmaTable`), the v2 reader
(:class:`qpinfer.tables.reduced.ReducedTable`) and the Student-t scale adapter
(:class:`qpinfer.tables.scaled.ScaledTable`).

QP's projection (:class:`qpinfer.inference.projections.QuantileMatching`) asks a table for
``qp_moments`` and nothing else; the estimators and the dask sweep
(:mod:`qpinfer.inference.sparse.dask_sweep`) read ``likelihood``, ``likelihood_object`` and
``path``. Every query method is vectorised, broadcasts ``(mu, sigma, y)`` (cavity mean, cavity
standard deviation, observation), answers points outside the table with the exact kernel
(counted in ``fallback_count``) and raises a ``ValueError`` naming the argument for invalid
input.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Self

import numpy as np

from qpinfer.likelihoods.base import Likelihood

__all__ = ["SigmaTableReader", "TableFallbackWarning", "flat_moment"]


class TableFallbackWarning(RuntimeWarning):
    """A table was asked for sigma* outside its domain and computed it exactly (slower; counted
    in the table's ``fallback_count``). Warned once per table, and shown even inside a
    hyperparameter search, which silences the inner loops' other ``RuntimeWarning``."""


class SigmaTableReader(ABC):
    """An open sigma* table (Zhang et al., 2020, eq. (7)); create one with :func:`qpinfer.open_table`.

    Attributes
    ----------
    path : Path
        The store the table reads. A table pickles (and deep-copies) as its path and how it was
        opened: the copy re-opens and re-validates the store (the dask sweep opens a table once
        per worker process this way).
    attrs : dict
        The store's root attributes.
    likelihood : str
        The likelihood name the store records (what QP's projection checks against its own).
    fallback_count : int
        Queries answered by the exact kernel (outside the table).

    Subclasses set ``_lik``, the likelihood object the table answers for (built once, when the
    table is opened), read through :attr:`likelihood_object`.
    """

    path: Path
    attrs: dict[str, Any]
    likelihood: str
    fallback_count: int
    _lik: Likelihood

    @property
    def likelihood_object(self) -> Likelihood:
        """The likelihood the table answers for (its ``name`` is :attr:`likelihood` or the
        same likelihood's canonical name)."""
        return self._lik

    @property
    def moment_table(self) -> SigmaTableReader | None:
        """The table serving EP's moments of this table's likelihood
        (:meth:`qpinfer.Likelihood.with_moment_table`), or ``None`` if the store holds none."""
        return None

    @abstractmethod
    def sigma_qp(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* at cavities ``(mu, sigma)`` and observations ``y``; ``moments``: EP's
        ``(mean, std)`` there (eq. (5)) if the caller has them (then not computed again)."""

    @abstractmethod
    def sigma_ratio(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* / sigma_EP (in (0, 1], Theorem 2); ``moments`` as in :meth:`sigma_qp`."""

    @abstractmethod
    def qp_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, sigma*)``: QP's projection of the tilted distribution, EP's mean (eq. (5))
        and the L2-Wasserstein standard deviation (eq. (7)), each table computing EP's moments
        only where it needs them."""

    @abstractmethod
    def contains(self, mu, sigma, y) -> np.ndarray:
        """Boolean mask of the queries the table answers without the exact kernel."""

    def sigma_qp_gradient(self, mu, sigma, y, ep_std_slope=False) -> tuple[np.ndarray, ...]:
        """``(sigma*, d sigma*/d mu, d sigma*/d sigma)``: sigma* as :meth:`qp_moments` gives it
        (bit for bit) and the derivatives of that lookup (:mod:`qpinfer.tables.gradient`: a
        Richardson central difference of the lookup where the table answers, the exact
        kernel's derivatives where it falls back; a reader may differentiate its cells).
        ``ep_std_slope``: a fourth array, the derivative of EP's std in ``mu`` where the reader
        has it from its cells (NaN elsewhere: here everywhere)."""
        from qpinfer.tables.gradient import reader_gradient

        return reader_gradient(self, mu, sigma, y, ep_std_slope=ep_std_slope)

    def close(self) -> None:  # noqa: B027 - a hook: most readers hold nothing open
        """Release what the table holds open (nothing, unless a reader says otherwise); the
        table stays usable."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def flat_moment(a: Any, shape: tuple[int, ...]) -> np.ndarray:
    """One of EP's moments passed by a caller (``moments=``), as a flat float64 array over the
    queries broadcast to ``shape``."""
    a = np.asarray(a, dtype=np.float64)
    return a.ravel() if a.shape == shape else np.broadcast_to(a, shape).ravel()
