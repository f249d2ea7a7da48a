"""EP's moments from a v2 table: reading a store's moment arrays and looking them up.

Where a likelihood's EP moments have no closed form its v2 store holds, beside rho, the arrays
of :data:`qpinfer.tables.reduced_store.MOMENT_ARRAYS` on every box (at the box's moment nodes,
:meth:`qpinfer.likelihoods.layout.Box.moment_axes`): log Z, the mean and log std, each measured
against the box's :meth:`~qpinfer.likelihoods.layout.Box.reference_moments`.
:func:`read_moment_coefficients` reads their Chebyshev coefficients at open (what the
arrays hold, rounded: :func:`~qpinfer.tables.chebyshev.rounded_coefficients`);
:func:`stored_moments` answers canonical cavities from the first box holding each, what
``Likelihood._table_moments`` asks for (a likelihood given the table by
:meth:`qpinfer.Likelihood.with_moment_table`); :func:`sigma_from_moment_boxes` is sigma* of a
lookup without EP's moments, rho and the stored std from one pass over the boxes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from qpinfer.likelihoods.layout import Box
from qpinfer.tables.chebyshev import evaluate
from qpinfer.tables.reduced_store import MOMENT_ARRAYS, read_cells

__all__ = ["read_moment_coefficients", "sigma_from_moment_boxes", "stored_moments"]


def read_moment_coefficients(
    root: Path, files: dict[str, bytes], boxes: list[Box], what: str, stored: bool = True
) -> list[list[np.ndarray]]:
    """Per box, the Chebyshev coefficients of its moment arrays (in
    :data:`~qpinfer.tables.reduced_store.MOMENT_ARRAYS` order):
    :func:`~qpinfer.tables.reduced_store.read_cells` of each."""
    return [
        [
            read_cells(
                root, files, f"{p}_{box.name}", box.moment_axes(), len(box.labels), stored, what
            )
            for p in MOMENT_ARRAYS
        ]
        for box in boxes
    ]


def stored_moments(table: Any, mu, sigma, y) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """``((log Z, mean, std), rest)``: EP's moments at canonical 1-D cavities from the first box
    of ``table`` (a :class:`~qpinfer.tables.reduced.ReducedTable`) holding each -- at the
    cavity the box holds (a box of folded cavities gives the folded one's,
    ``Likelihood._from_box_moments`` unfolds them) -- and ``rest``, the indices in
    no box (NaN there; all of them if the store holds no moments). No input checks: the
    likelihood asking has made them, and its closed forms taken their cavities."""
    n = mu.size
    out = np.full((len(MOMENT_ARRAYS), n), np.nan)
    if table._moment_coefs is None:
        return tuple(out), np.arange(n)
    todo = _Todo(n)
    with np.errstate(all="ignore"):
        for k, box in enumerate(table._boxes):
            idx = todo.indices()
            if idx is not None and idx.size == 0:
                break
            sub = (mu, sigma, y) if idx is None else (mu[idx], sigma[idx], y[idx])
            found = table._in_box(k, sub, idx, table._moment_coefs[k])
            if found is not None:
                sel, (log_z, offset, log_std) = found
                s = sigma[sel]
                ref = box.reference_moments(mu[sel], s, y[sel])
                out[0, sel] = ref[0] + log_z
                out[1, sel] = ref[1] + box.moment_unit(s, ref) * offset
                out[2, sel] = ref[2] * np.exp(log_std)
                todo.done(sel)
    idx = todo.indices()
    return tuple(out), (np.arange(n) if idx is None else idx)


def sigma_from_moment_boxes(table: Any, lik: Any, m, s, y) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma*, rest)`` of canonical 1-D cavities of a table storing EP's moments (none given):
    the likelihood's closed forms (which compute EP's std where they need it), then each box
    located once for rho and the stored std (``sigma* = rho std``; the logit's fold and the log
    link's counts leave the std unchanged); ``rest``: indices in no box."""
    out = np.empty(m.size)
    todo = _Todo(m.size)
    closed = lik._table_closed_form(m, s, y, None)
    if closed is not None and closed[0].any():
        out[closed[0]] = closed[1][closed[0]]
        todo.done(np.flatnonzero(closed[0]))
    for k, box in enumerate(table._boxes):
        idx = todo.indices()
        if idx is not None and idx.size == 0:
            break
        sub = (m, s, y) if idx is None else (m[idx], s[idx], y[idx])
        inside, label_index, coords = box.locate(*sub)
        if not inside.any():
            continue
        sel = np.flatnonzero(inside)
        if sel.size < inside.size:
            label_index, coords = label_index[sel], tuple(c[sel] for c in coords)
        first = label_index * table._cells[k]
        rho = evaluate(table._coefs[k], box.axes, coords, first, table._power[k])
        log_std = evaluate(table._moment_coefs[k][2], box.moment_axes(), coords, first)
        pts = sel if idx is None else idx[sel]
        std = box.reference_moments(m[pts], s[pts], y[pts])[2] * np.exp(log_std)
        out[pts] = rho * (s[pts] if box.denominator == "sigma" else std)
        todo.done(pts)
    idx = todo.indices()
    return out, (np.arange(m.size) if idx is None else idx)


class _Todo:
    """Which of ``n`` queries are still unanswered, without an index array while all are."""

    def __init__(self, n: int):
        self.mask = None  # None: all
        self.n = n

    def indices(self):
        """Flat indices still to answer, or ``None`` for all of them."""
        return None if self.mask is None else np.flatnonzero(self.mask)

    def done(self, sel) -> None:
        if self.mask is None:
            if isinstance(sel, slice) and sel == slice(None):
                self.mask = np.zeros(self.n, dtype=bool)
                return
            self.mask = np.ones(self.n, dtype=bool)
        self.mask[sel] = False

    def restrict(self, mask: np.ndarray) -> np.ndarray:
        return mask if self.mask is None else mask & self.mask
