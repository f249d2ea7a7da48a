"""Derivatives of a table's sigma* lookup in the cavity mean and standard deviation.

Three routes, per query (:meth:`qpinfer.tables.SigmaTableReader.sigma_qp_gradient`):

* **The cells' own derivative** (:func:`box_gradient`): a v2 box that stores sigma*/sigma and
  knows its coordinates' Jacobian (``Box.coord_jacobian``; probit's core, every cavity of a
  probit fit) differentiates its Chebyshev (or power-basis) cell polynomial and applies the chain
  rule through the box's coordinate map (:func:`direct_box_gradient`); a box of a store holding
  EP's moments (``sigma* = rho std``) differentiates rho's cell polynomial, the coordinate map
  by differences of its closed form, and EP's std from the same box's cells (the logit, the
  Poisson log link) or by differences of the likelihood's own (Student-t, the square link;
  :func:`moment_box_gradient`, which also gives the std's own derivative). Both are the
  derivative of the interpolant (to ~1e-12; ~1e-10 where the std is differenced), continuous
  across cell edges to the table's accuracy.
* **A Richardson central difference of the lookup itself** (:func:`lookup_richardson`) for every
  other query the table answers (v1 grids, the other v2 boxes): steps ``1e-4 min(sigma,
  sigma*)`` and half that (4 lookups per derivative), truncation ``O(h^4)`` and rounding ~1e-12
  relative inside a cell; a stencil that straddles a cell edge sees the interpolant's kink
  there, ~the table's accuracy over the step.
* **The exact kernel's derivatives** (:func:`qpinfer.sigma.derivatives.sigma_qp_gradient`) for
  the queries the table does not answer (its exact fallbacks), and for the rest of those of
  likelihoods whose EP moments are a quadrature (their closed-form regimes, rescaled cavities
  and stencils across a fold of the symmetry: see ``_quadrature_moments``), within the table's
  error over a cell of the lookup's (measured <= 1e-10 of sigma*).
"""

from __future__ import annotations

import numpy as np

from qpinfer.likelihoods.layout import CellAxis
from qpinfer.sigma.derivatives import central_difference
from qpinfer.tables.chebyshev import _locate, _matvec, _vecdot

__all__ = [
    "box_gradient",
    "cell_gradient",
    "direct_box_gradient",
    "lookup_richardson",
    "moment_box_gradient",
    "reader_gradient",
]

_STEP = 1e-4  # Richardson step, relative to min(sigma, sigma*)
_COORD_STEP = 1e-3  # the coordinate maps' step, relative to sigma


def _basis_and_derivative(t: np.ndarray, n: int, power: bool):
    """``(B, dB/dt)``, each ``(n_points, n)``, at local coordinates ``t`` in [0, 1]: powers
    ``t^k``, or Chebyshev ``T_k(2t - 1)`` with ``d/dt = 2 k U_(k-1)``."""
    b = np.empty((n, t.size))
    db = np.empty((n, t.size))
    b[0], db[0] = 1.0, 0.0
    if power:
        for k in range(1, n):
            np.multiply(b[k - 1], t, out=b[k])
            np.multiply(b[k - 1], float(k), out=db[k])
        return b.T, db.T
    x = 2.0 * t - 1.0
    u_prev, u = np.zeros_like(x), np.ones_like(x)  # U_(-1), U_0
    if n > 1:
        b[1] = x
        db[1] = 2.0
    for k in range(2, n):
        b[k] = 2.0 * x * b[k - 1] - b[k - 2]
        u_prev, u = u, 2.0 * x * u - u_prev  # U_(k-1)
        db[k] = (2.0 * k) * u
    return b.T, db.T


def cell_gradient(
    coef: np.ndarray, axes: tuple[CellAxis, ...], points, power: bool, first_row=0
) -> tuple[np.ndarray, ...]:
    """``(value, d/dx_0[, d/dx_1])`` of a 1-D or 2-D cell interpolant
    (:mod:`qpinfer.tables.chebyshev`: ``coef`` rows as
    :func:`~qpinfer.tables.chebyshev.coefficients`, or
    :func:`~qpinfer.tables.chebyshev.power_coefficients` with ``power``) at ``points`` (one 1-D
    array per axis, inside the axes; ``first_row`` as for
    :func:`~qpinfer.tables.chebyshev.evaluate`), derivatives in the axes' own coordinates."""
    if len(axes) not in (1, 2):
        raise ValueError(f"cell_gradient needs a 1-D or 2-D box; got {len(axes)} axes")
    rows, local, _ = _locate(axes, tuple(points), first_row)
    a = axes[0]
    ba, dba = _basis_and_derivative(local[0], a.n, power)
    if len(axes) == 1:
        block = coef[rows]
        return _vecdot(block, ba), _vecdot(block, dba) / a.width
    b = axes[1]
    bb, dbb = _basis_and_derivative(local[1], b.n, power)
    block = coef[rows].reshape(-1, a.n, b.n)
    cb = _matvec(block, bb)
    value = _vecdot(cb, ba)
    d0 = _vecdot(cb, dba) / a.width
    d1 = _vecdot(_matvec(block, dbb), ba) / b.width
    return value, d0, d1


def direct_box_gradient(table, mu, sigma, y):
    """``(mask, d_mu, d_sigma)`` (derivatives at ``mask``) of flat checked queries to a v2
    table (:class:`qpinfer.tables.reduced.ReducedTable`) inside a box storing sigma*/sigma whose
    coordinates have a Jacobian (``Box.coord_jacobian``): sigma* = sigma * p(x(mu, sigma)), p
    the cell polynomial (:func:`cell_gradient`); ``None`` if no query can be."""
    lik = table.likelihood_object
    slope = lik._canonical_slope(mu, y)
    if slope is None or not table._direct:
        return None
    m, yy = lik.canonical(mu, y)
    mask = np.zeros(m.size, dtype=bool)
    d_mu, d_sigma = np.empty(m.size), np.empty(m.size)
    for k in table._direct:
        box = table._boxes[k]
        idx = np.flatnonzero(~mask)
        if idx.size == 0:
            break
        sub = (m[idx], sigma[idx], yy[idx])
        coords, jac = box.axis_coords(*sub), box.coord_jacobian(*sub)
        if coords is None or jac is None or len(box.axes) != 2:
            continue
        inside = box._inside_axes(coords)
        sel = idx[inside]
        v, d0, d1 = cell_gradient(
            table._coefs[k], box.axes, tuple(c[inside] for c in coords), table._power[k]
        )
        (a_m, a_s), (b_m, b_s) = (
            tuple(np.broadcast_to(j, inside.shape)[inside] for j in row) for row in jac
        )
        s = sigma[sel]
        d_mu[sel] = slope[sel] * s * (d0 * a_m + d1 * b_m)
        d_sigma[sel] = v + s * (d0 * a_s + d1 * b_s)
        mask[sel] = True
    return mask, d_mu[mask], d_sigma[mask]


def _coord_slopes(box, y, m, s, reference: bool):
    """Per box coordinate, and with ``reference`` for the log of the reference std
    (:meth:`~qpinfer.likelihoods.layout.Box.reference_moments`), rows of ``(d/dm, d/ds)`` at
    canonical cavities inside ``box``: Richardson central differences (steps ``1e-3 s`` and half
    that) of these closed-form maps, smooth where the cells are (truncation ~1e-12, rounding
    ~1e-13 relative)."""

    def maps(mm, ss):
        with np.errstate(all="ignore"):
            rows = list(box.locate(mm, ss, y)[2])
            if reference:
                rows.append(np.log(box.reference_moments(mm, ss, y)[2]))
        return np.array(rows)

    h = _COORD_STEP * s
    return (
        central_difference(lambda x: maps(x, s), m, h),
        central_difference(lambda x: maps(m, x), s, h),
    )


def _ep_std(lik, m, s, y):
    """EP's std at canonical cavities, as a table lookup takes it (``tilted_moments``)."""
    with np.errstate(all="ignore"):
        return np.asarray(lik.tilted_moments(m, s, y)[1], dtype=np.float64)


def _dot(grads, slopes):
    """The chain rule: ``sum_d grads[d] * slopes[d]`` over the box's axes."""
    return sum(g * d for g, d in zip(grads, slopes, strict=False))


def moment_box_gradient(table, mu, sigma, y):
    """``(mask, d_mu, d_sigma, d_std)`` (at ``mask``) of flat checked queries to a v2 table
    storing EP's moments: ``sigma* = rho(x) D`` at box coordinates ``x(mu, sigma)``, rho's cell
    polynomial differentiated exactly (:func:`cell_gradient`) and the coordinates by
    differences of their closed forms (``_coord_slopes``); ``D`` the cavity's sigma (a box
    storing sigma*/sigma) or EP's std. Where the lookup takes EP's std from the same box
    (:func:`qpinfer.tables.reduced_moments.sigma_from_moment_boxes`: the logit, the Poisson log
    link) it is ``ref(mu, sigma) exp(L(x))``, ``L`` the stored log std's cell polynomial,
    differentiated the same way; elsewhere (Student-t, the square link) the likelihood's own
    ``tilted_moments`` (from the table's moment cells or an exact rule), by Richardson
    differences of step ``1e-3 sigma``. ``d_std``: EP's std's derivative in ``mu`` (the tilted
    third cumulant over the cavity variance, over twice the std). Cavities of the likelihood's
    closed forms or rescaling, those in no box and those within a stencil of a fold of the
    likelihood's symmetry are left out (``mask`` False); ``None`` if the table stores no EP
    moments."""
    lik = table._lik
    slope = lik._canonical_slope(mu, y)
    if slope is None or not table.has_moments:
        return None
    fused = table._fused_sigma
    m, yy = lik.canonical(mu, y)
    # a stencil across a fold of the symmetry (|mu| of the square link) would difference
    # coordinates with a kink there: those few cavities take the kernel's derivatives
    h = _COORD_STEP * sigma
    todo = lik._canonical_slope(mu - h, y) == lik._canonical_slope(mu + h, y)
    with np.errstate(all="ignore"):
        for skip in (lik._table_closed_form(m, sigma, yy, None), lik._rescale(m, sigma, yy)):
            if skip is not None:
                todo &= ~skip[0]
    mask = np.zeros(m.size, dtype=bool)
    rho, rho_m, rho_s = np.empty((3, m.size))
    std, std_m, std_s = np.empty((3, m.size))
    direct = np.zeros(m.size, dtype=bool)
    for k, box in enumerate(table._boxes):
        idx = np.flatnonzero(todo)
        if idx.size == 0:
            break
        with np.errstate(all="ignore"):
            inside, label_index, coords = box.locate(m[idx], sigma[idx], yy[idx])
        sel = idx[inside]
        if sel.size == 0:
            continue
        first = label_index[inside] * table._cells[k]
        x = tuple(c[inside] for c in coords)
        rho[sel], *rho_x = cell_gradient(table._coefs[k], box.axes, x, table._power[k], first)
        ms, s, ys = m[sel], sigma[sel], yy[sel]
        dm, ds = _coord_slopes(box, ys, ms, s, fused)
        rho_m[sel], rho_s[sel] = _dot(rho_x, dm), _dot(rho_x, ds)
        if fused:
            log_std, *log_x = cell_gradient(
                table._moment_coefs[k][2], box.moment_axes(), x, False, first
            )
            with np.errstate(all="ignore"):
                std[sel] = box.reference_moments(ms, s, ys)[2] * np.exp(log_std)
            std_m[sel] = std[sel] * (dm[-1] + _dot(log_x, dm))
            std_s[sel] = std[sel] * (ds[-1] + _dot(log_x, ds))
        direct[sel] = box.denominator == "sigma"
        mask[sel] = True
        todo[sel] = False
    if not fused and mask.any():  # EP's std, all boxes' cavities at once
        sel = np.flatnonzero(mask)
        ms, s, ys = m[sel], sigma[sel], yy[sel]
        std[sel] = _ep_std(lik, ms, s, ys)
        h = _COORD_STEP * s
        std_m[sel] = central_difference(lambda v: _ep_std(lik, v, s, ys), ms, h)
        std_s[sel] = central_difference(lambda v: _ep_std(lik, ms, v, ys), s, h)
    # sigma* = rho std, or rho sigma in a box storing sigma*/sigma
    d_mu = np.where(direct, sigma * rho_m, std * rho_m + rho * std_m)
    d_sigma = np.where(direct, sigma * rho_s + rho, std * rho_s + rho * std_s)
    return mask, (slope * d_mu)[mask], d_sigma[mask], (slope * std_m)[mask]


def box_gradient(table, mu, sigma, y):
    """``(mask, d_mu, d_sigma, d_std)`` of flat checked queries to a v2 table from its cells'
    own derivatives: :func:`direct_box_gradient`, then :func:`moment_box_gradient` for the rest
    (``d_std``, EP's std's derivative in ``mu``: NaN where the first answers)."""
    mask = np.zeros(mu.size, dtype=bool)
    out = np.full((3, mu.size), np.nan)
    for route in (direct_box_gradient, moment_box_gradient):
        idx = np.flatnonzero(~mask)
        if idx.size == 0:
            break
        got = route(table, mu[idx], sigma[idx], y[idx])
        if got is not None:
            sel = idx[got[0]]
            out[: len(got) - 1, sel] = got[1:]
            mask[sel] = True
    return mask, *out[:, mask]


def lookup_richardson(lookup, mu, sigma, y, value):
    """``(d/dmu, d/dsigma)`` of ``lookup(mu, sigma, y)`` (flat arrays) by Richardson-extrapolated
    central differences with steps ``h = 1e-4 min(sigma, value)`` and ``h/2``."""
    h = _STEP * np.minimum(sigma, value)
    d_mu = central_difference(lambda m: lookup(m, sigma, y), mu, h)
    return d_mu, central_difference(lambda s: lookup(mu, s, y), sigma, h)


def _quadrature_moments(lik) -> bool:
    """Whether the likelihood's EP moments are a quadrature of their own (logit, poisson_log,
    Student-t): a lookup outside the sigma*/sigma boxes then costs about one kernel call without
    a table serving them. With one (:meth:`qpinfer.Likelihood.with_moment_table`) the lookups
    are fast, but their Richardson differences (~1e-9 of sigma* where a stencil straddles a
    cell edge) left QP's total-gradient search of a Poisson log-link fit at a length-scale bound
    on one OpenBLAS kernel (Haswell) and inside on another: the kernel's derivatives stay."""
    return lik._ep_from_panels or lik._moments_by_quadrature


def reader_gradient(table, mu, sigma, y, exact=None, ep_std_slope=False):
    """:meth:`qpinfer.tables.SigmaTableReader.sigma_qp_gradient` of any reader: ``s`` from
    ``table.qp_moments`` (bit for bit), derivatives from ``exact(m, s, y)`` where it returns
    ``(mask, d_mu, d_sigma, d_std)`` over the flat broadcast queries (a reader's cells:
    :func:`box_gradient`), else by :func:`lookup_richardson` of ``qp_moments``' sigma* where
    the table answers, else the exact kernel's
    :func:`~qpinfer.sigma.derivatives.sigma_qp_gradient`: at the table's fallbacks, and at the
    queries the cells leave of a likelihood whose EP moments are a quadrature (logit,
    poisson_log, Student-t), where the eight lookups of a Richardson difference would cost ~4x
    the kernel's derivatives (those differ from the lookup's by the table's error over a cell, measured
    <= 1e-10 of sigma*). ``ep_std_slope``: a fourth array, EP's std's derivative in ``mu``
    where ``exact`` gave it (NaN elsewhere)."""
    from qpinfer.sigma.derivatives import sigma_qp_gradient
    from qpinfer.sigma.exact import _prepare

    lik, m, s, yy = _prepare(table.likelihood_object, mu, sigma, y)
    shape = m.shape
    value = np.asarray(table.qp_moments(m, s, yy)[1], dtype=np.float64).reshape(shape)
    counted = table.fallback_count
    m, s, yy = m.ravel(), s.ravel(), yy.ravel()
    v = value.ravel()
    d_mu, d_sigma, d_std = np.full((3, m.size), np.nan)
    todo = np.ones(m.size, dtype=bool)
    if exact is not None:
        got = exact(m, s, yy)
        if got is not None:
            mask, d_mu[mask], d_sigma[mask], d_std[mask] = got
            todo &= ~mask
    if todo.any():
        idx = np.flatnonzero(todo)
        if _quadrature_moments(lik):  # 8 lookups cost more than the kernel's derivatives
            inside = np.zeros(idx.size, dtype=bool)
        else:
            inside = table.contains(m[idx], s[idx], yy[idx])
        out_idx, in_idx = idx[~inside], idx[inside]
        if in_idx.size:

            def lookup(mm, ss, y_):
                return table.qp_moments(mm, ss, y_)[1]

            d_mu[in_idx], d_sigma[in_idx] = lookup_richardson(
                lookup, m[in_idx], s[in_idx], yy[in_idx], v[in_idx]
            )
        if out_idx.size:
            _, d_mu[out_idx], d_sigma[out_idx] = sigma_qp_gradient(
                lik, m[out_idx], s[out_idx], yy[out_idx]
            )
    table.fallback_count = counted  # the value's fallbacks; not the differences' queries
    out = (value, d_mu.reshape(shape), d_sigma.reshape(shape))
    return (*out, d_std.reshape(shape)) if ep_std_slope else out
