"""Reader of v2 sigma* tables: reduced coordinates, Chebyshev cells, near-exact lookups.

The store (its layout, its integrity record, its arrays) is described in
:mod:`qpinfer.tables.reduced_store`; :func:`open_reduced` opens one after checking its schema,
integrity, completeness and verification, and refuses any change with a
:class:`~qpinfer.TableError` naming the file or attribute.

Lookups: a box whose ``denominator`` is ``"sigma"`` (probit's core) stores sigma*/sigma and is
tried first, on the canonical cavity as it is: its nodes hold the kernel's values in every regime,
so such a lookup needs neither EP's moments nor the regime tests, and sigma* is the value times
sigma. The other cavities follow the exact kernel's path (:mod:`qpinfer.likelihoods.probit.boxes`):
closed-form regimes, the likelihood's rescaling, then the first box holding the (rescaled) cavity. A
cavity in no box (a Poisson count above the table's labels) is computed by the exact kernel and
counted in :attr:`qpinfer.tables.SigmaTableReader.fallback_count`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from qpinfer.likelihoods.base import Likelihood
from qpinfer.likelihoods.layout import Box
from qpinfer.likelihoods.registry import box_from_attrs, get_likelihood
from qpinfer.sigma.exact import _prepare
from qpinfer.tables.chebyshev import (
    evaluate,
    evaluate_inside,
    evaluate_many,
    power_coefficients,
)
from qpinfer.tables.reader import SigmaTableReader, flat_moment
from qpinfer.tables.reduced_moments import (
    _Todo,
    read_moment_coefficients,
    sigma_from_moment_boxes,
    stored_moments,
)
from qpinfer.tables.reduced_store import (
    SCHEMA_VERSION_V2,
    array_names,
    integrity_changes,
    integrity_record,
    read_cells,
    store_files,
    stores_coefficients,
)
from qpinfer.tables.store import TableError, read_json
from qpinfer.tables.sweep_evaluator import SweepEvaluator

# SCHEMA_VERSION_V2, array_names and integrity_record: names of the 0.1 module qpinfer.tables_v2,
# kept
__all__ = ["SCHEMA_VERSION_V2", "ReducedTable", "array_names", "integrity_record", "open_reduced"]


class ReducedTable(SigmaTableReader):
    """An open v2 table: ``sigma_qp`` / ``sigma_ratio`` lookups in constant time per query.

    Attributes
    ----------
    path : Path
    likelihood : str
        The likelihood name (what :class:`qpinfer.QuantileMatching` checks).
    attrs : dict
        The store's root attributes.
    fallback_count : int
        Queries in no box, answered by the exact kernel (never warned: exact is exact).
    moment_fallback_count : int
        EP-moment queries of a likelihood given this table
        (:meth:`qpinfer.Likelihood.with_moment_table`) in no box, computed exactly.
    has_moments : bool
        The store holds EP's moments beside sigma* (:meth:`stored_moments`).
    """

    def __init__(
        self,
        path: Path,
        attrs: dict,
        likelihood: Likelihood,
        boxes: list[Box],
        coefs: list[np.ndarray],
        moment_coefs: list[list[np.ndarray]] | None = None,
    ):
        self.path = path
        self.attrs = attrs
        self.likelihood: str = attrs["likelihood"]
        self._lik = likelihood
        self._boxes = boxes
        self._coefs = coefs = list(coefs)  # per box: (labels * cells, nodes...) rows
        self._cells = [int(np.prod([ax.n_cells for ax in b.axes])) for b in boxes]
        self._direct = [k for k, b in enumerate(boxes) if b.denominator == "sigma"]
        k = self._direct[0] if self._direct else None  # the first: whole sweeps in it (_sweep)
        self._sweep_box = None if k is None else boxes[k]
        # the sweep box's cells in the power basis (half the array operations per sweep; the
        # same polynomials to <= 4e-15, cheb_cells.power_coefficients), for every lookup in it
        self._power = [i == k for i in range(len(boxes))]
        if k is not None:
            coefs[k] = power_coefficients(coefs[k], boxes[k].axes)
        self._sweep_cells = None if k is None else SweepEvaluator(coefs[k], boxes[k].axes, True)
        # qp_moments' one pass: the sweep box's first axis is the likelihood's z (probit)
        self._fused = self._sweep_box is not None and self._sweep_box.fused_mean_z
        self._moment_coefs = moment_coefs
        self.has_moments = moment_coefs is not None
        if self.has_moments:  # the lookups' own EP moments (rho's denominator) from the store
            self._lik = likelihood.with_moment_table(self)
        # sigma* without EP's moments given: rho and the stored std in one pass over the boxes
        # (reduced_moments.sigma_from_moment_boxes), where no cavity is rescaled first
        self._fused_sigma = self.has_moments and type(likelihood)._rescale is Likelihood._rescale
        self.fallback_count = 0
        self.moment_fallback_count = 0

    @property
    def moment_table(self) -> ReducedTable | None:
        return self if self.has_moments else None

    def __repr__(self) -> str:
        names = ", ".join(b.name for b in self._boxes)
        return f"ReducedTable({str(self.path)!r}, likelihood={self.likelihood!r}, boxes=[{names}])"

    def __reduce__(self):
        return (open_reduced, (str(self.path),))

    def _lookup(self, mu, sigma, y, moments=None, need_ep=False):
        """``(sigma*, sigma_EP, shape, rest)`` over the flattened broadcast queries; ``rest``:
        the flat indices the exact kernel answered. ``sigma_EP`` (the caller's ``moments[1]``,
        else computed if ``need_ep``) is ``None`` if neither.

        First the boxes that store sigma*/sigma, on the canonical cavity as it is (no moments,
        no regimes: their nodes hold the kernel's values in every regime); the rest follow the
        kernel's path (:meth:`_ratio_path`). The common case -- every query in the first box,
        EP's sweeps -- takes no index arrays."""
        lik, mu, sigma, y = _prepare(self._lik, mu, sigma, y)  # the kernel's input checks
        shape = mu.shape
        m, yy = lik.canonical(mu.ravel(), y.ravel())
        s = sigma.ravel()
        if moments is not None:  # the caller's, at the original cavities: the std is the
            # canonical one's, and the closed forms use |mean| only
            moments = tuple(flat_moment(a, shape) for a in moments)
        elif need_ep:
            with np.errstate(all="ignore"):
                moments = lik.tilted_moments(m, s, yy)
        out = np.empty(m.size)
        todo = _Todo(m.size)
        for k in self._direct:  # finite coordinates, no warnings to silence
            idx = todo.indices()
            if idx is not None and idx.size == 0:
                break
            found = self._in_box(k, (m, s, yy) if idx is None else (m[idx], s[idx], yy[idx]), idx)
            if found is not None:
                sel, value = found
                out[sel] = value * s[sel]
                todo.done(sel)
        idx = todo.indices()
        rest = idx
        if idx is None or idx.size:
            sub = (m, s, yy) if idx is None else (m[idx], s[idx], yy[idx])
            sub_moments = moments
            if moments is not None and idx is not None:
                sub_moments = tuple(a[idx] for a in moments)
            with np.errstate(all="ignore"):
                if sub_moments is None and self._fused_sigma:  # one pass: rho and EP's std
                    sig, rest = sigma_from_moment_boxes(self, lik, *sub)
                else:
                    sig, rest = self._ratio_path(lik, *sub, sub_moments)
            if idx is None:
                out = sig
            else:
                out[idx] = sig
                rest = idx[rest]
            if rest.size:
                from qpinfer.sigma.exact import sigma_qp  # the exact kernel, in no box

                self.fallback_count += rest.size
                out[rest] = sigma_qp(lik, mu.ravel()[rest], s[rest], y.ravel()[rest])
        return out, None if moments is None else moments[1], shape, rest

    def _in_box(self, k: int, sub, idx, many=None):
        """``(selection, stored values)`` of the queries ``sub`` (at flat indices ``idx``, or
        all) inside box ``k``; ``None`` if none is. ``many``: other arrays of the box's cells
        (Chebyshev coefficients) to evaluate instead of rho, the values then a list."""
        box = self._boxes[k]
        coords = box.axis_coords(*sub)
        if coords is not None and many is not None:
            inside, values = evaluate_many(many, box.moment_axes(), coords, 0, check=True)
        elif coords is not None:  # one pass locates, checks and evaluates
            inside, values = evaluate_inside(self._coefs[k], box.axes, coords, 0, self._power[k])
        else:
            inside, label_index, coords = (box.locate if many is None else box.locate_moments)(*sub)
            if inside.all():
                inside = None
            elif inside.any():
                label_index, coords = label_index[inside], tuple(c[inside] for c in coords)
            else:
                return None
            first = label_index * self._cells[k]
            if many is not None:
                values = evaluate_many(many, box.moment_axes(), coords, first)[1]
            else:
                values = evaluate(self._coefs[k], box.axes, coords, first, self._power[k])
        if inside is None:
            return (slice(None) if idx is None else idx), values
        if not inside.any():
            return None
        return (np.flatnonzero(inside) if idx is None else idx[inside]), values

    def stored_moments(self, mu, sigma, y) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """``((log Z, mean, std), rest)`` at canonical 1-D cavities
        (:func:`qpinfer.tables.reduced_moments.stored_moments`)."""
        return stored_moments(self, mu, sigma, y)

    def _ratio_path(self, lik, m, s, yy, moments):
        """``(sigma*, rest)`` of canonical queries along the kernel's path: closed forms,
        rescaling, then every box; ``rest``: indices in none."""
        if moments is None:
            moments = lik.tilted_moments(m, s, yy)
        ep = moments[1]
        closed = lik._table_closed_form(m, s, yy, moments)
        out = np.empty(m.size)
        todo = _Todo(m.size)
        if closed is not None and closed[0].any():
            mask, values = closed
            out[mask] = values[mask]
            todo.done(np.flatnonzero(mask))
        rescaled = lik._rescale(m, s, yy)
        moved = None
        if rescaled is not None:
            moved, m_r, s_r, scale = rescaled
            moved = todo.restrict(moved)
            if moved.any():
                m, s = np.where(moved, m_r, m), np.where(moved, s_r, s)
            else:
                moved = None
        for k, box in enumerate(self._boxes):  # a rescaled cavity may land in any box
            idx = todo.indices()
            if idx is not None and idx.size == 0:
                break
            sub = (m, s, yy) if idx is None else (m[idx], s[idx], yy[idx])
            found = self._in_box(k, sub, idx)
            if found is None:
                continue
            sel, value = found
            mv = None if moved is None else moved[sel]
            if box.denominator == "sigma":  # at the (rescaled) cavity's sigma
                sig = value * s[sel]
                if mv is not None and mv.any():
                    sig[mv] *= scale[sel][mv]
            else:
                sig = value * ep[sel]
                if mv is not None and mv.any():
                    # rescaled: sigma* = rho * sigma_EP(mu', sigma') * scale
                    sm = np.arange(m.size)[sel][mv]
                    _, ep_r = lik.tilted_moments(m[sm], s[sm], yy[sm])
                    sig[mv] = value[mv] * np.ravel(ep_r) * scale[sm]
            out[sel] = sig
            todo.done(sel)
        idx = todo.indices()
        return out, np.arange(m.size) if idx is None else idx

    def _is_sweep_batch(self, mu, sigma, y) -> bool:
        """1-D float arrays of one shape, and a box for the sweep path (:meth:`sigma_qp_core`)."""
        return (
            self._sweep_cells is not None
            and type(mu) is np.ndarray
            and type(sigma) is np.ndarray
            and mu.ndim == 1
            and mu.dtype == sigma.dtype == np.float64
            and mu.shape == sigma.shape == np.shape(y)
        )

    def sigma_qp_core(self, mu, sigma, y):
        """sigma* of a sweep's queries -- 1-D float arrays of one shape -- if every one lies in
        the first box that stores sigma*/sigma (probit's core, a fit's every cavity), else
        ``None`` (then :meth:`sigma_qp` answers them). Needs no EP moments, so QP's projection
        (:class:`qpinfer.inference.projections.QuantileMatching`) asks for sigma* without them and
        computes EP's mean alone (:meth:`qp_moments`).

        No input checks but the labels': a cavity inside the box's axes has a finite mean and a
        finite sigma > 0 (:meth:`qpinfer.likelihoods.layout.Box.axis_array`), any other one gives
        ``None``, and :meth:`sigma_qp` sends the whole batch to ``_lookup()``, which checks
        it."""
        if not self._is_sweep_batch(mu, sigma, y):
            return None
        m, yy = self._lik.canonical(mu, self._lik.check_y(y))
        with np.errstate(all="ignore"):  # (outside: NaN, inf; the batch goes to _lookup)
            u = self._sweep_box.axis_array(m, sigma, yy)
            return None if u is None else self._sweep_cells(u, sigma)

    def qp_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(EP's mean, sigma*)`` at cavities ``(mu, sigma)`` and labels ``y``: QP's projection
        (:class:`qpinfer.inference.projections.QuantileMatching` uses it for likelihoods with
        ``tilted_mean``; for the others the EP moments it computes are passed on to the lookup).

        On probit's sweeps one pass serves both: the tilted mean's ``z = y mu / sqrt(1 +
        sigma^2)`` is the core box's first coordinate
        (:meth:`qpinfer.Probit.tilted_mean_and_z`), so the labels are checked, and z
        computed, once; a batch with a cavity outside the core takes :meth:`sigma_qp`'s general
        lookup (which checks the inputs). The same values as ``tilted_mean`` and :meth:`sigma_qp`,
        bit for bit."""
        lik = self._lik
        if self._fused and self._is_sweep_batch(mu, sigma, y):
            yy = lik.check_y(y)
            with np.errstate(all="ignore"):  # (outside: NaN, inf; the batch goes to _lookup)
                mean, z = lik.tilted_mean_and_z(mu, sigma, yy)
                std = self._sweep_cells(self._sweep_box.axis_array(None, sigma, None, z), sigma)
            if std is None:
                std = self._lookup(mu, sigma, y)[0]
            return mean, std
        if lik._mean_alone:
            return lik.tilted_mean(mu, sigma, y), self.sigma_qp(mu, sigma, y)
        mean, std_ep = lik.tilted_moments(mu, sigma, y)
        return mean, self.sigma_qp(mu, sigma, y, moments=(mean, std_ep))

    def sigma_qp(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* (Zhang et al., 2020, eq. (7)) at cavities ``(mu, sigma)`` and labels ``y`` (broadcast);
        ``moments``: EP's ``(mean, std)`` at these cavities if the caller has them (used only
        outside the boxes that store sigma*/sigma)."""
        sig = self.sigma_qp_core(mu, sigma, y)
        if sig is not None:
            return sig
        sig, _, shape, _ = self._lookup(mu, sigma, y, moments)
        return sig.reshape(shape)

    def sigma_ratio(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* / sigma_EP; ``moments``: EP's ``(mean, std)`` at these cavities if the caller
        has them."""
        sig, ep, shape, _ = self._lookup(mu, sigma, y, moments, need_ep=True)
        return (sig / ep).reshape(shape)

    def sigma_qp_gradient(self, mu, sigma, y, ep_std_slope=False) -> tuple[np.ndarray, ...]:
        """``(sigma*, d sigma*/d mu, d sigma*/d sigma)``: sigma* as :meth:`qp_moments` gives it
        (bit for bit); in a box storing sigma*/sigma with a coordinate Jacobian (probit's core)
        or a box of a store holding EP's moments (rho's denominator) the derivatives of its
        cell polynomials by the chain rule
        (:func:`qpinfer.tables.gradient.box_gradient`), elsewhere the routes of
        :func:`qpinfer.tables.gradient.reader_gradient`. ``ep_std_slope``: a fourth array, the
        derivative of EP's std in ``mu`` from the same cells (NaN where they do not give it)."""
        from qpinfer.tables.gradient import box_gradient, reader_gradient

        return reader_gradient(
            self, mu, sigma, y, lambda m, s, yy: box_gradient(self, m, s, yy), ep_std_slope
        )

    def contains(self, mu, sigma, y) -> np.ndarray:
        """True everywhere a lookup needs no exact fallback."""
        before = self.fallback_count
        _, _, shape, rest = self._lookup(mu, sigma, y)
        self.fallback_count = before
        out = np.ones(int(np.prod(shape)), dtype=bool)
        out[rest] = False
        return out.reshape(shape)


def open_reduced(path: str | os.PathLike, *, finished: bool = True) -> ReducedTable:
    """Open and validate a v2 store (schema, completeness, verification, integrity, arrays).

    ``finished=False`` (the builder, verifying its own partial store): skip the checks of what
    only a finished store has -- integrity record, completeness, passed verification."""
    root = Path(path)
    what = f"table {str(root)!r}"
    meta = read_json(root / "zarr.json", what)
    attrs = meta.get("attributes") or {}
    if attrs.get("qp_schema_version") != SCHEMA_VERSION_V2:
        raise TableError(f"{what}: schema version {attrs.get('qp_schema_version')!r}, expected 2")
    try:
        files = store_files(root)  # each file read once: hashed, then decoded
    except OSError as exc:
        raise TableError(f"{what}: unreadable ({exc})") from None
    changes = integrity_changes(attrs, files) if finished else []
    if changes:
        raise TableError(
            f"{what}: does not match its integrity record ({'; '.join(changes)}); its numbers "
            "may not mean what it says -- rebuild it (or reinstall the package)"
        )
    if finished and attrs.get("complete") is not True:
        raise TableError(f"{what}: incomplete (attrs['complete'] is {attrs.get('complete')!r})")
    ver = attrs.get("verification")
    if finished and (not isinstance(ver, dict) or ver.get("passed") is not True):
        raise TableError(f"{what}: verification did not pass (attrs['verification'] = {ver!r})")
    try:
        boxes = [box_from_attrs(b) for b in attrs["boxes"]]
        likelihood = get_likelihood(attrs["likelihood"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TableError(f"{what}: malformed likelihood or boxes ({exc})") from None
    stored = stores_coefficients(attrs, what)
    coefs = []
    for box in boxes:
        name = f"rho_{box.name}"
        coefs.append(read_cells(root, files, name, box.axes, len(box.labels), stored, what))
        if not np.all((coefs[-1][:, 0] > 0) & (coefs[-1][:, 0] <= 1 + 1e-12)):
            raise TableError(f"{what}: array {name} has cells whose mean is not in (0, 1]")
    moment_coefs = None
    if attrs.get("moments"):  # EP's moments beside rho (reduced_store.MOMENT_ARRAYS)
        moment_coefs = read_moment_coefficients(root, files, boxes, what, stored)
    return ReducedTable(root, attrs, likelihood, boxes, coefs, moment_coefs)
