# Over 400 lines: one interpolation scheme -- its coefficients and their stored layout, two bases and two evaluation orders share the private locate and basis helpers.
"""Piecewise Chebyshev interpolation on tensor grids of equal cells (the v2 tables' scheme).

An axis ``[start, start + n_cells * width]`` is cut into ``n_cells`` equal cells; each cell holds
``n`` Chebyshev-Gauss nodes ``x_k = cos(pi (k + 1/2) / n)`` (mapped into the cell, ascending),
which never touch a cell's ends, so a function is never evaluated on a boundary where a limit
(tau -> -inf, sigma -> 0) would be needed. A table stores the function's *values* at the tensor
product of the axes' nodes (what the kernel computed, what mpmath verifies, what is checksummed);
the reader turns each cell's ``n x n`` block of values into Chebyshev coefficients once, at open
(``coefficients``), and evaluates a query as ``sum_ij c_ij T_i(x) T_j(y)`` of its cell
(``evaluate``): ``n^2`` multiply-adds against the cell's block, gathered per query or, for large
batches, read once per cell.

The interpolant's error on a cell is bounded by the sum of the discarded Chebyshev coefficients
of the function there; :func:`tail_size` reports the size of the last ones, which the build
uses to check that every cell is resolved.

A reader may also hold a box's cells in the *power basis* of the local coordinate
``t = (x - left) / width`` in [0, 1] (:func:`power_coefficients`; ``power=True`` below): the same
polynomials, whose basis ``1, t, .., t^(n-1)`` takes half the array operations of the Chebyshev
one (``_power_basis()``) -- what EP's sweeps pay for, per call. The conversion is exact in
exact arithmetic; in floating point the probit core's cells move by <= 4e-15 relative
(:func:`power_rounding_bound` bounds it).
"""

from __future__ import annotations

import functools

import numpy as np

from qpinfer.likelihoods.layout import CellAxis
from qpinfer.likelihoods.layout import chebyshev_nodes as _nodes

__all__ = [
    "COEFFICIENT_BITS",
    "cell_rows",
    "coefficients",
    "evaluate",
    "evaluate_inside",
    "evaluate_many",
    "node_values",
    "power_coefficients",
    "power_rounding_bound",
    "rounded_coefficients",
    "tail_size",
]


@functools.cache
def _values_to_coefficients(n: int) -> np.ndarray:
    """(n, n) matrix M with c = M @ values (discrete Chebyshev transform at the Gauss nodes)."""
    x = _nodes(n)
    theta = np.arccos(x)
    m = np.cos(np.outer(np.arange(n), theta)) * (2.0 / n)
    m[0] *= 0.5
    m.flags.writeable = False
    return m


def coefficients(values: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """Per-cell Chebyshev coefficients of node ``values`` (shape: the axes' node counts, with
    any number of leading batch axes, e.g. one slice per label).

    Returns an array of shape ``(batch * cells_0 * cells_1 * ..., n_0 * n_1 * ...)``: row
    ``b * n_cells + k`` is cell ``k`` (C order over the axes) of batch item ``b``, its
    coefficients flattened C order.
    """
    rows = cell_rows(values, axes)
    return _times_per_axis(rows, axes, [_values_to_coefficients(ax.n).T for ax in axes])


def cell_rows(blocks: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """An array in node layout (each cell's ``n_0 x n_1 x ...`` block where its nodes are, any
    leading batch axes) as one row per cell, in the row order of :func:`coefficients`."""
    v = np.asarray(blocks, dtype=np.float64)
    lead = v.shape[: v.ndim - len(axes)]
    shape = [int(np.prod(lead))]
    for ax in axes:
        shape += [ax.n_cells, ax.n]
    k = len(axes)  # cells first, then each cell's nodes: (batch, cells..., nodes...)
    order = [0] + [2 * d + 1 for d in range(k)] + [2 * d + 2 for d in range(k)]
    return v.reshape(shape).transpose(order).reshape(-1, int(np.prod([ax.n for ax in axes])))


#: the binary digits after the point a stored coefficient keeps (:func:`rounded_coefficients`)
COEFFICIENT_BITS = 50


def rounded_coefficients(
    values: np.ndarray, axes: tuple[CellAxis, ...], floor: int = 0
) -> np.ndarray:
    """Node ``values`` (node layout, leading batch axes) replaced cell by cell by the cell's
    Chebyshev coefficients, each rounded to a multiple of ``2^-50`` (:data:`COEFFICIENT_BITS`)
    of the cell's scale ``c`` (the power of two at or above its largest coefficient, and at
    least ``2^floor``: a quantity needed to an absolute accuracy takes ``floor=0``, a ratio
    needed relative to its smallest values a lower one), in the same layout: coefficient
    ``(a, b)`` of cell ``(i, j)`` where node ``(a, b)`` of it was.
    What a v2 store's data arrays hold: a smooth cell's coefficients fall off geometrically,
    so rounded they carry few significant bits and a deflated store is ~3-4x smaller than its
    node values'. The rounding moves a value by at most ``n_0 n_1 2^-51 c`` (6.4e-14 c for
    12 x 12 nodes, 1.1e-13 c for 16 x 16; typically ~``sqrt(n_0 n_1 / 3) 2^-51 c``, 3e-15 c).
    :func:`node_values` turns such an array back into values at the nodes."""
    v = np.asarray(values, dtype=np.float64)
    coef = coefficients(v, axes)
    # the quantum: 2^-50 of the power of two at or above the cell's largest coefficient
    scale = np.maximum(np.frexp(np.abs(coef).max(axis=1))[1], floor)
    shift = (COEFFICIENT_BITS - scale)[:, None]
    coef = np.ldexp(np.round(np.ldexp(coef, shift)), -shift)
    return _node_layout(coef, v.shape, axes)


def node_values(stored: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """The values at the nodes (node layout, as the build computed them, up to the rounding)
    of an array of per-cell coefficients as a v2 store holds it (:func:`rounded_coefficients`;
    e.g. ``xarray.open_zarr(store)["rho_core"].values`` with that box's axes)."""
    v = np.asarray(stored, dtype=np.float64)
    mats = [np.linalg.inv(_values_to_coefficients(ax.n)).T for ax in axes]
    return _node_layout(_times_per_axis(cell_rows(v, axes), axes, mats), v.shape, axes)


def _node_layout(rows: np.ndarray, shape: tuple[int, ...], axes: tuple[CellAxis, ...]):
    """Rows of per-cell blocks (:func:`cell_rows`' order) back in node layout, ``shape``."""
    k = len(axes)
    lead = int(np.prod(shape[: len(shape) - k]))
    cells = [ax.n_cells for ax in axes]
    nodes = [ax.n for ax in axes]
    order = [0] + [x for d in range(k) for x in (d + 1, k + d + 1)]
    out = rows.reshape([lead, *cells, *nodes]).transpose(order)
    return np.ascontiguousarray(out.reshape(shape))


@functools.cache
def _chebyshev_to_power(n: int) -> np.ndarray:
    """(n, n) matrix P with ``T_i(2t - 1) = sum_k P[i, k] t^k`` (integers, exact in float64)."""
    p = np.zeros((n, n))
    p[0, 0] = 1.0
    if n > 1:
        p[1, :2] = (-1.0, 2.0)
    for i in range(2, n):  # T_i = 2 (2t - 1) T_(i-1) - T_(i-2)
        p[i, 1:] = 4.0 * p[i - 1, :-1]
        p[i] -= 2.0 * p[i - 1] + p[i - 2]
    p.flags.writeable = False
    return p


def _times_per_axis(coef: np.ndarray, axes: tuple[CellAxis, ...], mats) -> np.ndarray:
    """Each cell's coefficient block with its axis d contracted against ``mats[d]``
    (``a[.., i, ..] M[i, k]``), in the rows of ``coef``."""
    shape = (coef.shape[0], *[ax.n for ax in axes])
    a = (coef.reshape(-1, shape[-1]) @ mats[-1]).reshape(shape)  # the last axis: one product
    for d in range(len(axes) - 1):  # the others: stacked products on contiguous blocks
        a = np.moveaxis(np.matmul(mats[d].T, np.moveaxis(a, d + 1, -2)), -2, d + 1)
    return np.ascontiguousarray(a.reshape(coef.shape))


def power_coefficients(coef: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """The cells of :func:`coefficients` (same rows) in the power basis of the local
    coordinates t in [0, 1]: ``sum_kl a_kl t_0^k t_1^l`` on a 2-D cell. One small matrix
    product per axis (~0.5 ms for the probit core's 1927 cells). The rounding this adds to a
    value is bounded by :func:`power_rounding_bound`."""
    return _times_per_axis(coef, axes, [_chebyshev_to_power(ax.n) for ax in axes])


def power_rounding_bound(coef: np.ndarray, axes: tuple[CellAxis, ...]) -> float:
    """A bound on the relative rounding that :func:`power_coefficients` adds to any value of the
    interpolant, over all cells: ``eps * (|P|^T |c| |P|)_sum / |c_0..0|`` (P:
    ``_chebyshev_to_power()``; the basis values lie in [0, 1]). 7.7e-15 for the probit core
    (12 x 12 nodes; the largest change measured on 2e5 random points: 4e-15): the Chebyshev
    coefficients decay fast, so the large entries of P meet tiny coefficients."""
    size = _times_per_axis(np.abs(coef), axes, [np.abs(_chebyshev_to_power(ax.n)) for ax in axes])
    with np.errstate(divide="ignore"):
        ratio = size.sum(axis=1) / np.abs(coef[:, 0])
    return float(np.max(ratio)) * np.finfo(float).eps


@functools.cache
def _product_blocks(n: int) -> tuple[tuple[int, int], ...]:
    """``(p, k)`` per block of :func:`_chebyshev_basis`: U_(p+1)..U_(p+k) from U_0..U_p."""
    out, p = [], 1
    while p + 1 < n:
        k = min(p, n - 1 - p)
        out.append((p, k))
        p += k
    return tuple(out)


def _chebyshev_basis(t: np.ndarray) -> np.ndarray:
    """``2 T_0(x) .. 2 T_(n-1)(x)`` for x of any shape, stacked on the first axis of ``t``
    (``(n, *x.shape)``, with ``t[1]`` = 2x filled in). (Twice the basis: the caller scales the
    sums by ``2^-n_axes``, exactly.)

    By blocks of the product formula ``U_(p+m) = U_p U_m - U_(p-m)`` for ``U_k = 2 T_k``
    (m = 1 .. p): from U_0..U_p it gives U_(p+1)..U_(2p) in two array operations, so n = 12
    takes 4 blocks instead of 10 steps of the three-term recurrence (EP's batches are small; the
    call count is the cost). Doubling is exact, so ``U_k / 2`` is what the same products give
    for ``T_k``."""
    t[0] = 2.0
    for p, k in _product_blocks(len(t)):
        block = t[p + 1 : p + k + 1]
        np.multiply(t[p], t[1 : k + 1], out=block)
        block -= t[p - k : p][::-1]
    return t


def _power_basis(t: np.ndarray) -> np.ndarray:
    """``1, x, .., x^(n-1)`` stacked on the first axis of ``t`` (``t[1]`` = x filled in), by
    the blocks of :func:`_product_blocks` (``x^(p+m) = x^p x^m``, one array operation per
    block)."""
    t[0] = 1.0
    for p, k in _product_blocks(len(t)):
        np.multiply(t[p], t[1 : k + 1], out=t[p + 1 : p + k + 1])
    return t


def _basis(frac: np.ndarray, n: int, power: bool) -> np.ndarray:
    """The basis at local coordinates ``frac`` in [0, 1]: powers of ``frac``, or the doubled
    Chebyshev basis at ``2 frac - 1`` (its ``U_1 = 4 frac - 2``, exactly ``2 (2 frac - 1)``)."""
    t = np.empty((n, *frac.shape))
    if power:
        t[1] = frac
        return _power_basis(t)
    np.multiply(frac, 4.0, out=t[1])
    t[1] -= 2.0
    return _chebyshev_basis(t)


def _locate(axes: tuple[CellAxis, ...], points: tuple[np.ndarray, ...], first_row, check=False):
    """``(rows, local, inside)``: row of ``coef`` (cell, C order over the axes, plus
    ``first_row``) and local coordinates in [0, 1], shape ``(n_axes, n)``, of the points;
    with ``check``, only of those inside the axes' ranges (``inside``: their mask, ``None``
    when all are), else ``inside`` is ``None`` and every point is taken as inside."""
    start, inv_width, last = _axis_constants(axes)
    u = np.empty((len(points), np.size(points[0])))
    for d, x in enumerate(points):  # (cheaper than np.stack on EP-sized batches)
        u[d] = x
    u -= start
    with np.errstate(over="ignore"):  # a coordinate far outside: inf, outside the axes
        u *= inv_width
    inside = None
    if check:
        ok = (u >= 0.0) & (u <= last + 1.0)
        ok = ok.all(axis=0) if len(axes) > 1 else ok[0]
        if not ok.all():
            inside, u = ok, u[:, ok]
            if np.ndim(first_row):
                first_row = first_row[ok]
    cell = np.floor(u)
    np.maximum(cell, 0.0, out=cell)  # (np.clip costs more than both on small batches)
    np.minimum(cell, last, out=cell)
    u -= cell
    cell = cell.astype(np.intp)
    rows = cell[0]
    for d in range(1, len(axes)):
        rows = rows * axes[d].n_cells + cell[d]
    return rows + first_row, u, inside


@functools.cache
def _axis_constants(axes: tuple[CellAxis, ...]):
    start = np.array([[ax.start] for ax in axes])
    inv_width = np.array([[1.0 / ax.width] for ax in axes])
    last = np.array([[ax.n_cells - 1.0] for ax in axes])
    return start, inv_width, last


_BATCH = 4096  # queries per gathered block of coefficients (~4.7 MB at 12 x 12 nodes)
_GROUPED_MIN = 4096  # queries from which sorting them by cell beats one gather per query
_GROUPED_FILL = 16  # ... if the touched cells hold this many queries each on average


def evaluate(
    coef: np.ndarray,
    axes: tuple[CellAxis, ...],
    points: tuple[np.ndarray, ...],
    first_row: np.ndarray | int = 0,
    power: bool = False,
) -> np.ndarray:
    """Interpolant at ``points`` (one 1-D array per axis, all inside the axes' ranges).

    ``first_row``: per query, the row of ``coef`` where its batch item's cells start (e.g.
    ``label_index * n_cells`` for one slice per label, see :func:`coefficients`). ``power``:
    ``coef`` holds :func:`power_coefficients`.

    Two evaluation orders, chosen per call (the same sums, equal to round-off): few queries per
    touched cell -- EP's sweeps -- gather each query's block (``n^2`` values per query); many
    queries per cell -- a large batch on a 2-D table -- sort the queries by cell (a radix sort
    of the row numbers) and evaluate each touched cell's queries with one matrix product against
    its block, which reads each block once instead of once per query."""
    rows, local = _locate(axes, points, first_row)[:2]
    return _evaluate_located(coef, axes, rows, local, power)


def evaluate_inside(
    coef: np.ndarray,
    axes: tuple[CellAxis, ...],
    points: tuple[np.ndarray, ...],
    first_row: np.ndarray | int = 0,
    power: bool = False,
) -> tuple[np.ndarray | None, np.ndarray]:
    """``(inside, values)``: which points lie inside the axes' ranges (``None``: all) and the
    interpolant at those (see :func:`evaluate`) -- one pass over the coordinates for both."""
    rows, local, inside = _locate(axes, points, first_row, check=True)
    return inside, _evaluate_located(coef, axes, rows, local, power)


def evaluate_many(coefs, axes, points, first_row=0, check=False):
    """``(inside, values)``: :func:`evaluate_inside` (``check``) or :func:`evaluate` of several
    interpolants on the same cells (a list of coefficient arrays), the points located once."""
    rows, local, inside = _locate(axes, points, first_row, check=check)
    # the bases once for all the interpolants, where one gather takes the batch (EP's sweeps)
    bases = _bases(axes, local, False) if rows.size <= _BATCH else None
    return inside, [_evaluate_located(c, axes, rows, local, False, bases) for c in coefs]


def _evaluate_located(coef, axes, rows, local, power, bases=None) -> np.ndarray:
    """:func:`evaluate` of located points; ``bases``: :func:`_bases` at ``local``, if the caller
    has them (used by a batch of at most :data:`_BATCH` that is not grouped)."""
    if len(axes) == 2 and rows.size >= _GROUPED_MIN and coef.shape[0] < 2**16:
        counts = np.bincount(rows, minlength=coef.shape[0])
        touched = np.flatnonzero(counts)
        if rows.size >= _GROUPED_FILL * touched.size:
            return _evaluate_grouped(coef, axes, rows, local, counts, touched, power)
    if rows.size <= _BATCH:
        return _evaluate_gathered(coef, axes, rows, local, power, bases)
    out = np.empty(rows.size)
    for i in range(0, rows.size, _BATCH):  # keeps the gathered blocks in cache
        sl = slice(i, i + _BATCH)
        out[sl] = _evaluate_gathered(coef, axes, rows[sl], local[:, sl], power)
    return out


def _bases(axes, local, power) -> list[np.ndarray]:
    """Per axis, the ``(n_points, n)`` basis (:func:`_basis`) at the local coordinates (strided
    views: the products below take them as they are)."""
    n = {ax.n for ax in axes}
    if len(n) == 1:  # one pass for all axes
        t = _basis(local, n.pop(), power)
        return [t[:, d].T for d in range(len(axes))]
    return [_basis(local[d], ax.n, power).T for d, ax in enumerate(axes)]


def _matvec(a, v):
    """``a @ v`` over stacked matrices ``a`` and vectors ``v``."""
    return np.matmul(a, v[..., None])[..., 0]


_matvec = getattr(np, "matvec", _matvec)  # numpy >= 2.2: one gufunc call
_vecdot = getattr(np, "vecdot", lambda a, b: np.einsum("pi,pi->p", a, b))


def _evaluate_gathered(coef, axes, rows, local, power, bases=None) -> np.ndarray:
    """The interpolant with one gathered block of coefficients per query (see :func:`evaluate`;
    ``bases``: :func:`_bases` at ``local`` if the caller has them)."""
    if bases is None:
        bases = _bases(axes, local, power)
    block = coef[rows]  # one contiguous row per query
    if len(axes) == 1:
        out = _vecdot(block, bases[0])
        if not power:
            out *= 0.5  # the doubled basis
        return out
    a, b = axes
    out = _vecdot(_matvec(block.reshape(-1, a.n, b.n), bases[1]), bases[0])
    if not power:
        out *= 0.25
    return out


def _evaluate_grouped(coef, axes, rows, local, counts, touched, power) -> np.ndarray:
    """2-D interpolant with the queries sorted by cell (see :func:`evaluate`)."""
    a, b = axes
    order = np.argsort(rows.astype(np.uint16), kind="stable")  # radix sort
    local = local[:, order]
    blocks = coef.reshape(-1, a.n, b.n)
    out = np.empty(rows.size)
    ends = np.cumsum(counts[touched])
    starts = ends - counts[touched]
    # bases in cache-sized runs of whole cells, as (n, run) arrays: a cell's queries are a
    # column range, each basis row contiguous, so the products take them without a copy
    run_start = 0
    while run_start < touched.size:
        lo = starts[run_start]
        run_end = int(np.searchsorted(ends, lo + _BATCH * 4, side="right"))
        run_end = max(run_end, run_start + 1)
        hi = ends[run_end - 1]
        if a.n == b.n:
            t = _basis(local[:, lo:hi], a.n, power)
            ta, tb = t[:, 0], t[:, 1]
        else:
            ta, tb = _basis(local[0, lo:hi], a.n, power), _basis(local[1, lo:hi], b.n, power)
        for row, s0, s1 in zip(
            touched[run_start:run_end].tolist(),
            (starts[run_start:run_end] - lo).tolist(),
            (ends[run_start:run_end] - lo).tolist(),
            strict=True,
        ):
            out[lo + s0 : lo + s1] = np.einsum(
                "jp,jp->p", blocks[row].T @ ta[:, s0:s1], tb[:, s0:s1]
            )
        run_start = run_end
    if not power:
        out *= 0.25  # the doubled bases
    result = np.empty(rows.size)
    result[order] = out
    return result


def tail_size(coef: np.ndarray, axes: tuple[CellAxis, ...]) -> np.ndarray:
    """Per cell, the largest absolute coefficient among the last two degrees of any axis."""
    shape = (coef.shape[0], *[ax.n for ax in axes])
    c = np.abs(coef.reshape(shape))
    out = np.zeros(coef.shape[0])
    for d in range(len(axes)):
        last = np.take(c, [-2, -1], axis=d + 1)
        out = np.maximum(out, last.reshape(coef.shape[0], -1).max(axis=1))
    return out
