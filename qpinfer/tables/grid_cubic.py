"""Bicubic Lagrange interpolation on a v1 grid store's slices (``open_table(...,
interpolation="cubic")``): 4 x 4 grid values about each query, the stencil shifted inwards at
the grid's edges; error O(h^4) against bilinear's O(h^2) (``tests/tables/test_tables_cubic.py``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["interp_cubic"]


def _lagrange4(x: np.ndarray) -> np.ndarray:
    """Cubic Lagrange weights of the nodes 0, 1, 2, 3 at x, shape (len(x), 4)."""
    x1, x2, x3 = x - 1.0, x - 2.0, x - 3.0
    return np.stack(
        [-x1 * x2 * x3 / 6.0, x * x2 * x3 / 2.0, -x * x1 * x3 / 2.0, x * x1 * x2 / 6.0], axis=1
    )


def interp_cubic(
    slice_of: Callable[[int], np.ndarray], n_mu: int, n_ls: int, iy, u: np.ndarray, v: np.ndarray
) -> np.ndarray:
    """Values at fractional grid indices ``(u, v)`` (inside the grid) of the label slices
    ``iy`` (``None``: slice 0); ``slice_of(k)`` is slice k, flat, ``n_mu * n_ls`` values."""
    bu = np.clip(u.astype(np.intp) - 1, 0, n_mu - 4)
    bv = np.clip(v.astype(np.intp) - 1, 0, n_ls - 4)
    wu, wv = _lagrange4(u - bu), _lagrange4(v - bv)
    base = bu * n_ls + bv
    keys = np.zeros(u.size, dtype=np.intp) if iy is None else iy
    out = np.empty(u.size)
    for k in np.unique(keys):
        sel = np.flatnonzero(keys == k)
        data = slice_of(int(k))
        b = base[sel]
        acc = np.zeros(sel.size)
        for a in range(4):
            row = np.zeros(sel.size)
            for c in range(4):
                row += wv[sel, c] * data.take(b + (a * n_ls + c))
            acc += wu[sel, a] * row
        out[sel] = acc
    return out
