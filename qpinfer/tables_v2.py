"""Reader of v2 sigma* tables: reduced coordinates, Chebyshev cells, near-exact lookups.

A v2 store (``qp_schema_version == 2``, written by ``qptables build LIK OUT --grid v2``) is a
zarr v3 group, uncompressed, that ``xarray.open_zarr`` opens. For each box of
:mod:`qpinfer.reduced` it holds one array ``rho_<box>`` of dims ``(<box>_y, <box>_<axis0>[,
<box>_<axis1>])``: ``rho = sigma* / sigma_EP`` at the Chebyshev-Gauss nodes of the box's cells
(:mod:`qpinfer.cheb_cells`), one slice per label, with the node positions as coordinate arrays.
Root attributes: ``likelihood``, ``boxes`` (each box's kind, axes and labels), ``grid`` (the
same, for tools that read v1's), ``coordinates`` / ``interpolation`` / ``claimed_domain``
(prose), ``arrays`` (every array of the store), ``verification`` (the build's check against the
exact kernel and mpmath), ``integrity`` and ``complete``.

Integrity: a v2 store is small (a few MB), so :func:`open_reduced` hashes every file of it at
open (~2 ms per MB) and compares with ``attrs["integrity"]``: one sha256 per file and per root
attribute (except ``integrity``, ``verification`` and ``complete``), and a digest over all of
them; any change -- a flipped byte in a chunk, an edited likelihood or box -- is refused with a
:class:`~qpinfer.tables.TableError` naming the file or attribute.

Lookups follow the exact kernel's path (:mod:`qpinfer.reduced`): closed-form regimes, the
likelihood's rescaling, then the first box holding the cavity. A cavity in no box (a Poisson
count above the table's labels) is computed by the exact kernel and counted in
:attr:`ReducedTable.fallback_count`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Self

import numpy as np

from qpinfer.cheb_cells import coefficients, evaluate
from qpinfer.likelihoods import get_likelihood
from qpinfer.reduced import Box, box_from_attrs
from qpinfer.sigma import _prepare

__all__ = ["SCHEMA_VERSION_V2", "ReducedTable", "integrity_record", "open_reduced"]

SCHEMA_VERSION_V2 = 2
UNSIGNED_ATTRS = ("integrity", "verification", "complete")
_BATCH = 4096  # queries per gathered block of cells (~4.7 MB at 12 x 12 nodes)


def array_names(box: Box) -> dict[str, tuple[str, ...]]:
    """``{array: dims}`` of one box: its data array and its coordinate arrays."""
    dims = (f"{box.name}_y", *(f"{box.name}_{ax.name}" for ax in box.axes))
    return {f"rho_{box.name}": dims, **{d: (d,) for d in dims}}


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def integrity_record(root: str | os.PathLike, attrs: dict) -> dict:
    """The ``integrity`` attribute of the store at ``root`` as it is now (see module doc)."""
    root = Path(root)
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel != "zarr.json":
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    attributes = {
        k: hashlib.sha256(_canonical(v)).hexdigest()
        for k, v in sorted(attrs.items())
        if k not in UNSIGNED_ATTRS
    }
    fields = {"files": files, "attributes": attributes}
    return {
        "algorithm": "sha256",
        "digest": hashlib.sha256(_canonical(fields)).hexdigest(),
        **fields,
    }


def _integrity_changes(root: Path, attrs: dict) -> list[str]:
    want = attrs.get("integrity")
    if not isinstance(want, dict) or "digest" not in want:
        return ["the integrity record is missing"]
    have = integrity_record(root, attrs)
    if have["digest"] == want["digest"]:
        return []
    out = []
    for kind in ("files", "attributes"):
        a, b = want.get(kind) or {}, have[kind]
        label = "file" if kind == "files" else "attribute"
        out += [f"{label} {k!r} changed" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
        out += [f"{label} {k!r} missing" for k in sorted(set(a) - set(b))]
        out += [f"{label} {k!r} added" for k in sorted(set(b) - set(a))]
    return out or ["the digest itself was changed"]


class ReducedTable:
    """An open v2 table: ``sigma_qp`` / ``sigma_ratio`` lookups in constant time per query.

    Attributes
    ----------
    path : Path
    likelihood : str
        The likelihood name (what :class:`qpinfer.ep.QuantileMatching` checks).
    attrs : dict
        The store's root attributes.
    fallback_count : int
        Queries in no box, answered by the exact kernel (never warned: exact is exact).
    """

    def __init__(self, path: Path, attrs: dict, boxes: list[Box], coefs: list[np.ndarray]):
        self.path = path
        self.attrs = attrs
        self.likelihood: str = attrs["likelihood"]
        self._lik = get_likelihood(self.likelihood)
        self._boxes = boxes
        self._coefs = coefs  # per box: (labels * cells, nodes...) rows
        self.fallback_count = 0

    def __repr__(self) -> str:
        names = ", ".join(b.name for b in self._boxes)
        return f"ReducedTable({str(self.path)!r}, likelihood={self.likelihood!r}, boxes=[{names}])"

    def __reduce__(self):
        return (open_reduced, (str(self.path),))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (the cells live in memory); kept for the v1 table's interface."""

    def _box_rho(self, k: int, label_index, coords) -> np.ndarray:
        """rho from box ``k``'s cells, in batches that keep the gathered blocks in cache."""
        out = np.empty(label_index.shape)
        for i in range(0, out.size, _BATCH):
            sl = slice(i, i + _BATCH)
            box = self._boxes[k]
            n_cells = int(np.prod([ax.n_cells for ax in box.axes]))
            points = tuple(c[sl] for c in coords)
            out[sl] = evaluate(self._coefs[k], box.axes, points, label_index[sl] * n_cells)
        return out

    accepts_moments = True  # QuantileMatching passes the EP moments it computed already

    def _ratio_flat(self, mu, sigma, y, moments=None, return_rest=False):
        """``(sigma* / sigma_EP, sigma_EP, shape)`` over the flattened broadcast queries (and,
        with ``return_rest``, the flat indices that needed the exact kernel).

        The EP moments are computed once; a cavity in a box that needed no rescaling gets its
        ratio straight from the cells (rho is that ratio)."""
        lik, mu, sigma, y = _prepare(self._lik, mu, sigma, y)  # the kernel's input checks
        shape = mu.shape
        m, yy = lik.canonical(mu.ravel(), y.ravel())
        s = sigma.ravel().astype(np.float64)
        ratio = np.empty(m.shape)
        todo = np.ones(m.shape, dtype=bool)
        with np.errstate(all="ignore"):
            if moments is None:
                moments = lik.tilted_moments(m, s, yy)
            else:  # the caller's, at the original cavities: the std is the canonical one's, and
                # the closed forms use |mean| only
                moments = tuple(
                    np.broadcast_to(np.asarray(a, dtype=np.float64), shape).ravel() for a in moments
                )
            ep = np.asarray(moments[1], dtype=np.float64).ravel()
            if getattr(lik, "_closed_form_takes_moments", False):
                closed = lik._sigma_closed_form(m, s, yy, moments=moments)
            else:
                closed = lik._sigma_closed_form(m, s, yy)
            if closed is not None:
                mask, values = closed
                ratio[mask] = values[mask] / ep[mask]
                todo &= ~mask
            rescaled = lik._rescale(m, s, yy)
            moved = np.zeros(m.shape, dtype=bool)
            scale = None
            if rescaled is not None:
                moved, m_r, s_r, scale = rescaled
                moved = moved & todo
                m, s = np.where(moved, m_r, m), np.where(moved, s_r, s)
            for k, box in enumerate(self._boxes):
                idx = np.flatnonzero(todo)
                if idx.size == 0:
                    break
                inside, label_index, coords = box.locate(m[idx], s[idx], yy[idx])
                if not inside.any():
                    continue
                sel = idx[inside]
                rho = self._box_rho(k, label_index[inside], tuple(c[inside] for c in coords))
                mv = moved[sel]
                if mv.any():  # rescaled: rho * sigma_EP(mu', sigma') * scale / sigma_EP
                    sm = sel[mv]
                    _, ep_r = lik.tilted_moments(m[sm], s[sm], yy[sm])
                    rho[mv] *= np.ravel(ep_r) * scale[sm] / ep[sm]
                ratio[sel] = rho
                todo[sel] = False
        rest = np.flatnonzero(todo)
        if rest.size:
            from qpinfer.sigma import sigma_qp  # the exact kernel, for cavities in no box

            self.fallback_count += rest.size
            exact = sigma_qp(lik, mu.ravel()[rest], sigma.ravel()[rest], y.ravel()[rest])
            ratio[rest] = exact / ep[rest]
        return (ratio, ep, shape, rest) if return_rest else (ratio, ep, shape)

    def sigma_qp(self, mu, sigma, y) -> np.ndarray:
        """sigma* (paper 000 eq. (7)) at cavities ``(mu, sigma)`` and labels ``y`` (broadcast)."""
        ratio, ep, shape = self._ratio_flat(mu, sigma, y)
        return (ratio * ep).reshape(shape)

    def sigma_ratio(self, mu, sigma, y, moments=None) -> np.ndarray:
        """sigma* / sigma_EP (what :class:`qpinfer.ep.QuantileMatching` multiplies by EP's std);
        ``moments``: EP's ``(mean, std)`` at these cavities if the caller has them."""
        ratio, _, shape = self._ratio_flat(mu, sigma, y, moments)
        return ratio.reshape(shape)

    def contains(self, mu, sigma, y) -> np.ndarray:
        """True everywhere a lookup needs no exact fallback."""
        before = self.fallback_count
        _, _, shape, rest = self._ratio_flat(mu, sigma, y, return_rest=True)
        self.fallback_count = before
        out = np.ones(int(np.prod(shape)), dtype=bool)
        out[rest] = False
        return out.reshape(shape)


def _read_array(root: Path, name: str, what: str) -> np.ndarray:
    from qpinfer.tables import TableError, _chunk_path, _read_json

    meta = _read_json(root / name / "zarr.json", what)
    try:
        shape = tuple(meta["shape"])
        chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        enc = meta["chunk_key_encoding"]
        sep = enc.get("configuration", {}).get("separator", "/")
        codecs = meta["codecs"]
    except (KeyError, TypeError) as exc:
        raise TableError(f"{what}: malformed metadata of array {name!r} ({exc})") from None
    if meta.get("data_type") != "float64" or [c.get("name") for c in codecs] != ["bytes"]:
        raise TableError(f"{what}: array {name!r} must be uncompressed float64")
    out = np.empty(shape)
    grid = [range(0, n, c) for n, c in zip(shape, chunks, strict=True)]
    for starts in np.ndindex(*[len(g) for g in grid]):
        idx = tuple(s for s in starts)
        lo = [g[i] for g, i in zip(grid, idx, strict=True)]
        path = _chunk_path(str(root), name, sep, idx, enc.get("name", "default"))
        try:
            block = np.fromfile(path, dtype="<f8")
        except OSError as exc:
            raise TableError(f"{what}: chunk {path} unreadable ({exc})") from None
        if block.size != int(np.prod(chunks)):
            raise TableError(
                f"{what}: chunk {path} has {block.size * 8} bytes, expected "
                f"{int(np.prod(chunks)) * 8}"
            )
        block = block.reshape(chunks)
        sl = tuple(slice(a, min(a + c, n)) for a, c, n in zip(lo, chunks, shape, strict=True))
        out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def open_reduced(path: str | os.PathLike, *, finished: bool = True) -> ReducedTable:
    """Open and validate a v2 store (schema, completeness, verification, integrity, arrays).

    ``finished=False`` (the builder, verifying its own partial store): skip the checks of what
    only a finished store has -- integrity record, completeness, passed verification."""
    from qpinfer.tables import TableError, _read_json

    root = Path(path)
    what = f"table {str(root)!r}"
    meta = _read_json(root / "zarr.json", what)
    attrs = meta.get("attributes") or {}
    if attrs.get("qp_schema_version") != SCHEMA_VERSION_V2:
        raise TableError(f"{what}: schema version {attrs.get('qp_schema_version')!r}, expected 2")
    changes = _integrity_changes(root, attrs) if finished else []
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
        get_likelihood(attrs["likelihood"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TableError(f"{what}: malformed likelihood or boxes ({exc})") from None
    coefs = []
    for box in boxes:
        values = _read_array(root, f"rho_{box.name}", what)
        want = (len(box.labels), *(ax.n_cells * ax.n for ax in box.axes))
        if values.shape != want or not np.all((values > 0) & (values <= 1 + 1e-12)):
            raise TableError(f"{what}: array rho_{box.name} is not {want} values in (0, 1]")
        coefs.append(coefficients(values, box.axes))  # one slice per label
    return ReducedTable(root, attrs, boxes, coefs)
