"""The v2 reader's evaluator for EP's sweeps: a few hundred cavities per call, every one inside
one box's cells (probit's core), in the fewest numpy calls (``docs/development/tables-v2.md``, "EP's
sweeps"). The same sums as :func:`qpinfer.tables.chebyshev.evaluate`, whose helpers it uses.
"""

from __future__ import annotations

import threading

import numpy as np

from qpinfer.tables.chebyshev import (
    _BATCH,
    CellAxis,
    _axis_constants,
    _evaluate_located,
    _matvec,
    _product_blocks,
    _vecdot,
)

__all__ = ["SweepEvaluator"]


class SweepEvaluator:
    """The interpolant of one table's cells at batches that lie inside them (EP's sweeps: a few
    hundred sites, every one inside probit's core box), with the axes' constants set up once.

    ``evaluator(u, factor)`` is ``factor`` times the interpolant at the points with coordinates
    ``u`` (shape ``(n_axes, n)``, float64, C-contiguous; overwritten), or ``None`` unless every
    point lies inside the axes' ranges, last edges excluded (a NaN or an infinity does not: the
    caller need not have checked its inputs; it silences floating-point warnings). ``power``:
    ``coef`` holds :func:`qpinfer.tables.chebyshev.power_coefficients`. The same sums as
    :func:`qpinfer.tables.chebyshev.evaluate` with the same ``power`` (bit for bit on small 2-D
    batches), in the fewest array operations: at a few hundred points a lookup costs per operation,
    not per flop, and more so inside a fit, where the linear algebra between two sweeps leaves the
    caches cold. So a 2-D evaluator keeps, per thread and batch size, the basis array with its
    constant row filled in and its views for the product blocks (``cheb_cells._power_basis``,
    ``cheb_cells._chebyshev_basis``); Chebyshev coefficients are pre-scaled by 1/4 (exact) for the
    doubled bases. In the power basis a sweep's lookup takes 16 array operations (Chebyshev: 22)."""

    def __init__(self, coef: np.ndarray, axes: tuple[CellAxis, ...], power: bool = False):
        self.coef = coef
        self.axes = axes
        self.power = power
        self._start, self._inv_width, self._last = _axis_constants(axes)
        self._top = tuple(float(ax.n_cells) for ax in axes)
        self._later = tuple(ax.n_cells for ax in axes[1:])
        n = {ax.n for ax in axes}
        self._n = n.pop() if len(axes) == 2 and len(n) == 1 else None  # the 2-D fast path
        self._coef_fast = None if self._n is None else (coef if power else coef * 0.25)
        self._local = threading.local()

    def _workspace(self, size: int):
        """``(t, blocks)``: the ``(n, 2, size)`` basis array of this thread (``t[0]`` filled
        in) and, per product block, the views ``(out, t_p, factors, subtrahends)``
        (``subtrahends`` ``None`` in the power basis)."""
        ws = getattr(self._local, "ws", None)
        if ws is None or ws[0].shape[2] != size:
            n = self._n
            t = np.empty((n, 2, size))
            t[0] = 1.0 if self.power else 2.0
            blocks = tuple(
                (
                    t[p + 1 : p + k + 1],
                    t[p],
                    t[1 : k + 1],
                    None if self.power else t[p - k : p][::-1],
                )
                for p, k in _product_blocks(n)
            )
            ws = self._local.ws = (t, blocks)
        return ws

    def __call__(self, u: np.ndarray, factor: np.ndarray) -> np.ndarray | None:
        u -= self._start
        u *= self._inv_width
        if not u.min() >= 0.0:  # (NaN fails)
            return None
        top = u.max(axis=1)
        for d, stop in enumerate(self._top):
            if not top[d] < stop:  # (a point on the last edge: the general path)
                return None
        n = self._n
        fast = n is not None and u.shape[1] <= _BATCH
        if fast:
            t, blocks = self._workspace(u.shape[1])
        # u >= 0: modf's integral part is floor(u), its fraction u - floor(u) (exact)
        frac, cell = np.modf(u, out=(t[1], u) if fast and self.power else (None, u))
        rows = cell[0]
        for d, n_cells in enumerate(self._later, 1):
            rows = rows * n_cells
            rows += cell[d]
        rows = rows.astype(np.intp)
        if not fast:
            out = _evaluate_located(self.coef, self.axes, rows, frac, self.power)
        else:  # _evaluate_gathered, inlined
            if not self.power:  # U_1 = 2 (2 frac - 1) = 4 frac - 2, exactly
                np.multiply(frac, 4.0, out=t[1])
                t[1] -= 2.0
            for block, t_p, factors, subtrahends in blocks:
                np.multiply(t_p, factors, out=block)
                if subtrahends is not None:
                    block -= subtrahends
            g = self._coef_fast[rows].reshape(-1, n, n)
            out = _vecdot(_matvec(g, t[:, 1].T), t[:, 0].T)
        out *= factor
        return out
