# Over 400 lines: one class whose lookup paths (scalar, batched, bicubic) share its chunk maps.
"""Lookups in an open v1 (grid) sigma* table: bilinear or bicubic interpolation of the stored
``sigma_ratio`` on memory-mapped chunks, with the exact kernel outside the grid (see
:mod:`qpinfer.tables`); :func:`~qpinfer.tables.grid_table.open_grid_table` builds one from a
validated store.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from qpinfer.likelihoods.base import Likelihood
from qpinfer.sigma.exact import broadcast_query, sigma_qp
from qpinfer.tables.grid_cubic import interp_cubic
from qpinfer.tables.grid_store import GridAxis, check_grid_store
from qpinfer.tables.reader import SigmaTableReader, TableFallbackWarning, flat_moment
from qpinfer.tables.store import TableError, read_json, sha256_file

__all__ = ["SigmaTable", "open_grid_table"]

#: a query this close (in grid steps) outside the grid edge is clamped to the edge
_EDGE_TOL = 1e-9


class SigmaTable(SigmaTableReader):
    """An open sigma* table store of the grid layout; create with :func:`~qpinfer.open_table`.

    Attributes
    ----------
    likelihood : str
        Name of the likelihood the table was built for.
    y : ndarray of int64
        The labels the table holds.
    attrs : dict
        The store's root attributes (grid, verification report, ...).
    fallback_count : int
        How many queries were outside the table (domain or ``y``) and computed exactly.
    """

    def __init__(
        self,
        path: Path,
        attrs: dict[str, Any],
        likelihood: Likelihood,
        y: np.ndarray,
        mu_axis: GridAxis,
        ls_axis: GridAxis,
        tile_mu: int,
        chunk_files: dict[str, list[tuple[str, str]]],
        verify_checksums: bool | str,
    ) -> None:
        self.path = path
        self.attrs = attrs
        self.likelihood: str = attrs["likelihood"]
        self._lik = likelihood
        self.y = y
        self._mu = mu_axis
        self._ls = ls_axis
        self.tile_mu = tile_mu
        self._n_chunks = -(-mu_axis.n // tile_mu)
        self._chunk_files = chunk_files
        self._chunk_size = tile_mu * ls_axis.n
        self._maps: dict[str, list[np.ndarray | None]] = {
            v: [None] * len(files) for v, files in chunk_files.items()
        }
        self._verify = verify_checksums
        self._checksums: dict[str, str] = attrs["checksums"]
        self._y_index = {float(v): k for k, v in enumerate(y.tolist())}
        self.fallback_count = 0
        self.lookup_count = 0
        self._warned = False
        self.interpolation = "linear"

    # -- description --------------------------------------------------------------------------
    @property
    def domain(self) -> dict[str, tuple[float, float]]:
        """``{"mu": (lo, hi), "sigma": (lo, hi)}`` covered by the grid."""
        return {
            "mu": (self._mu.start, self._mu.stop),
            "sigma": (10.0**self._ls.start, 10.0**self._ls.stop),
        }

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.y.size, self._mu.n, self._ls.n)

    def __repr__(self) -> str:
        d = self.domain
        return (
            f"SigmaTable({str(self.path)!r}, likelihood={self.likelihood!r}, y={self.y.tolist()}, "
            f"mu=[{d['mu'][0]:g}, {d['mu'][1]:g}] step {self._mu.step:g}, "
            f"log10_sigma=[{self._ls.start:g}, {self._ls.stop:g}] step {self._ls.step:g})"
        )

    # -- chunk access -------------------------------------------------------------------------
    def _check_chunk(self, var: str, flat: int) -> None:
        file, key = self._chunk_files[var][flat]
        got = sha256_file(Path(file))
        if got != self._checksums.get(key):
            raise TableError(
                f"{self.path}: chunk {key} fails its checksum (expected "
                f"{self._checksums.get(key)}, found {got}); the store is corrupt"
            )

    def _chunk(self, var: str, flat: int) -> np.ndarray:
        arr = self._maps[var][flat]
        if arr is None:
            if self._verify == "lazy":
                self._check_chunk(var, flat)
            arr = np.memmap(
                self._chunk_files[var][flat][0], dtype="<f8", mode="r", shape=(self._chunk_size,)
            )
            self._maps[var][flat] = arr
        return arr

    def verify_checksums(self) -> None:
        """Hash every chunk file now and compare with ``attrs["checksums"]``."""
        for var, files in self._chunk_files.items():
            for flat in range(len(files)):
                self._check_chunk(var, flat)

    def close(self) -> None:
        """Drop the memory maps (the table can still be used; chunks are mapped again)."""
        for maps in self._maps.values():
            for i in range(len(maps)):
                maps[i] = None

    def __reduce__(self):
        """Pickle (and deep-copy) by path: the copy re-opens and re-validates the store."""
        return (_reopen, (str(self.path), self._verify, self.interpolation))

    # -- lookups ------------------------------------------------------------------------------
    def _prepare(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
        """Broadcast and validate a query; the labels ``y`` are checked against the store's
        likelihood (a label the table holds is valid by the check at open)."""
        mu = np.asarray(mu, dtype=np.float64)
        sigma = np.asarray(sigma, dtype=np.float64)
        if not (np.ndim(y) == 0 and isinstance(y, int | float) and float(y) in self._y_index):
            y = self._lik.check_y(y)
        mu, sigma, y = broadcast_query(mu, sigma, np.asarray(y, dtype=np.float64))
        shape = mu.shape
        mu, sigma, y = mu.ravel(), sigma.ravel(), y.ravel()
        if not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
            raise ValueError("mu and sigma must be finite")
        if not (sigma > 0).all():
            raise ValueError("sigma must be > 0 (a standard deviation)")
        return mu, sigma, y, shape

    def _interp(self, var: str, iy: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Bilinear interpolation of ``var`` at fractional grid indices ``(u, v)`` on slices iy.

        Queries are put in chunk order with a stable (radix) sort of the small chunk keys; each
        chunk then gathers the four neighbours of its contiguous run of queries with ``np.take``
        (one Python iteration per touched chunk, none per query), and the results are scattered
        back once.
        """
        n_ls = self._ls.n
        tile = self.tile_mu
        n = u.size
        i = u.astype(np.intp)  # u >= 0 here, so this is floor
        np.minimum(i, self._mu.n - 2, out=i)
        key = i // tile
        if iy is not None:
            key += iy * self._n_chunks
        if n and key[0] == key[-1] and (key == key[0]).all():
            order = None
            groups = [(int(key[0]), 0, n)]
        else:
            n_keys = self.y.size * self._n_chunks
            dtype = np.uint16 if n_keys < 65536 else np.uint32
            order = np.argsort(key.astype(dtype), kind="stable")
            counts = np.bincount(key, minlength=n_keys)
            ends = np.cumsum(counts)
            groups = [
                (int(k), int(ends[k] - counts[k]), int(ends[k])) for k in np.flatnonzero(counts)
            ]
            u = u[order]
            v = v[order]
            i = u.astype(np.intp)
            np.minimum(i, self._mu.n - 2, out=i)
        j = v.astype(np.intp)
        np.minimum(j, n_ls - 2, out=j)
        t = u - i
        s = v - j
        lr = i % tile
        off = lr * n_ls
        off += j
        v00 = np.empty(n)
        v01 = np.empty(n)
        v10 = np.empty(n)
        v11 = np.empty(n)
        last = self._chunk_size - 1
        edge_row = tile - 1
        for k, a, b in groups:
            data = self._chunk(var, k)
            o = off[a:b]
            np.take(data, o, out=v00[a:b])
            o1 = o + 1
            np.take(data, o1, out=v01[a:b])
            o1 += n_ls
            np.minimum(o1, last, out=o1)  # a chunk's last row is fixed below
            np.take(data, o1, out=v11[a:b])
            o1 -= 1
            np.take(data, o1, out=v10[a:b])
            e = np.flatnonzero(lr[a:b] == edge_row)
            if e.size:  # the upper neighbour row is row 0 of the next chunk
                nxt = self._chunk(var, k + 1)
                jj = o[e] - edge_row * n_ls
                v10[a + e] = nxt.take(jj)
                v11[a + e] = nxt.take(jj + 1)
        # bilinear: ((1-s) v00 + s v01)(1-t) + ((1-s) v10 + s v11) t, in place
        v01 -= v00
        v01 *= s
        v01 += v00
        v11 -= v10
        v11 *= s
        v11 += v10
        v11 -= v01
        v11 *= t
        v11 += v01
        if order is None:
            return v11
        out = np.empty(n)
        out[order] = v11
        return out

    def _interpolate(self, var: str, iy, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.interpolation == "cubic":  # one chunk per label (checked by open_table)

            def slices(k: int) -> np.ndarray:
                return self._chunk(var, k * self._n_chunks)

            return interp_cubic(slices, self._mu.n, self._ls.n, iy, u, v)
        return self._interp(var, iy, u, v)

    def _locate(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray):
        """Fractional grid indices and the mask of queries the table covers."""
        u = mu - self._mu.start
        u *= self._mu.inv_step
        v = np.log10(sigma)
        v -= self._ls.start
        v *= self._ls.inv_step
        hi_u = self._mu.n - 1 + _EDGE_TOL
        hi_v = self._ls.n - 1 + _EDGE_TOL
        inside = u >= -_EDGE_TOL
        inside &= u <= hi_u
        inside &= v >= -_EDGE_TOL
        inside &= v <= hi_v
        if self.y.size == 1:
            iy = None
            inside &= y == self.y[0]
        elif self.y.size <= 8:
            found = y == self.y[0]
            iy = None
            for idx in range(1, self.y.size):
                m = y == self.y[idx]
                if iy is None:
                    iy = m.astype(np.intp)
                else:
                    np.add(iy, idx, out=iy, where=m)
                found |= m
            inside &= found
        else:
            iy = np.searchsorted(self.y, y)
            np.minimum(iy, self.y.size - 1, out=iy)
            inside &= self.y[iy] == y
        return u, v, iy, inside

    def _scalar(self, mu: float, sigma: float, y: float) -> float | None:
        """One query in plain Python (the sequential EP schedule's case); ``None`` if outside."""
        mu_ax, ls_ax = self._mu, self._ls
        u = (mu - mu_ax.start) * mu_ax.inv_step
        v = (math.log10(sigma) - ls_ax.start) * ls_ax.inv_step
        iy = self._y_index.get(y)
        if iy is None or not (-_EDGE_TOL <= u <= mu_ax.n - 1 + _EDGE_TOL):
            return None
        if not (-_EDGE_TOL <= v <= ls_ax.n - 1 + _EDGE_TOL):
            return None
        u = min(max(u, 0.0), mu_ax.n - 1.0)
        v = min(max(v, 0.0), ls_ax.n - 1.0)
        i = min(int(u), mu_ax.n - 2)
        j = min(int(v), ls_ax.n - 2)
        t, s = u - i, v - j
        chunk, lr = divmod(i, self.tile_mu)
        key = iy * self._n_chunks + chunk
        data = self._chunk("sigma_ratio", key)
        base = lr * ls_ax.n + j
        v00, v01 = float(data[base]), float(data[base + 1])
        if lr == self.tile_mu - 1:
            nxt = self._chunk("sigma_ratio", key + 1)
            v10, v11 = float(nxt[j]), float(nxt[j + 1])
        else:
            v10, v11 = float(data[base + ls_ax.n]), float(data[base + ls_ax.n + 1])
        lo = v00 + s * (v01 - v00)
        hi = v10 + s * (v11 - v10)
        return lo + t * (hi - lo)

    def _lookup(
        self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Interpolated ``sigma_ratio`` at prepared (flat, validated) queries, and the indices of
        the queries outside the table (their entries of the result are undefined)."""
        if mu.size == 1 and self.interpolation == "linear":
            r = self._scalar(float(mu[0]), float(sigma[0]), float(y[0]))
            self.lookup_count += 1
            if r is not None:
                return np.array([r]), np.zeros(0, dtype=np.intp)
            return np.empty(1), np.zeros(1, dtype=np.intp)
        u, v, iy, inside = self._locate(mu, sigma, y)
        self.lookup_count += mu.size
        out = np.empty(mu.size)
        if inside.all():
            np.clip(u, 0.0, self._mu.n - 1, out=u)
            np.clip(v, 0.0, self._ls.n - 1, out=v)
            out[:] = self._interpolate("sigma_ratio", iy, u, v)
            return out, np.zeros(0, dtype=np.intp)
        ins = np.flatnonzero(inside)
        if ins.size:
            uu = np.clip(u[ins], 0.0, self._mu.n - 1)
            vv = np.clip(v[ins], 0.0, self._ls.n - 1)
            out[ins] = self._interpolate("sigma_ratio", None if iy is None else iy[ins], uu, vv)
        return out, np.flatnonzero(~inside)

    def _fallback(self, mu, sigma, y, outside: np.ndarray) -> np.ndarray:
        """Exact sigma* at the queries the table does not cover (counted, warned once)."""
        exact = sigma_qp(self._lik, mu[outside], sigma[outside], y[outside])
        self.fallback_count += outside.size
        if not self._warned:
            self._warned = True
            d = self.domain
            warnings.warn(
                f"{outside.size} sigma* queries fell outside the table (mu in "
                f"[{d['mu'][0]:g}, {d['mu'][1]:g}], sigma in [{d['sigma'][0]:.4g}, "
                f"{d['sigma'][1]:.4g}], y in {self.y.tolist()}); computed exactly "
                "(slower). table.fallback_count counts them. Warned once per table.",
                TableFallbackWarning,
                stacklevel=3,
            )
        return exact

    def sigma_ratio(self, mu, sigma, y, moments=None) -> np.ndarray:
        """``sigma_qp / sigma_ep`` at cavity ``(mu, sigma)`` and label ``y`` (vectorised).

        Bilinear interpolation in ``(mu, log10 sigma)`` -- the fast path, a pure lookup -- with the
        exact ratio outside the table (counted in
        :attr:`~qpinfer.tables.SigmaTableReader.fallback_count`; its sigma_ep from ``moments``, EP's
        ``(mean, std)`` at these cavities, if given).
        """
        mu, sigma, y, shape = self._prepare(mu, sigma, y)
        out, outside = self._lookup(mu, sigma, y)
        if outside.size:
            exact = self._fallback(mu, sigma, y, outside)
            if moments is None:
                s_ep = self._lik.tilted_moments(mu[outside], sigma[outside], y[outside])[1]
            else:
                s_ep = flat_moment(moments[1], shape)[outside]
            out[outside] = exact / s_ep
        return out.reshape(shape)

    def sigma_qp(self, mu, sigma, y, moments=None) -> np.ndarray:
        """QP standard deviation sigma* (eq. (7)) at cavity ``(mu, sigma)`` and label ``y``.

        ``sigma_ratio`` interpolated from the table times the exact EP std (eq. (5)) at the query
        point (``moments[1]`` if the caller passes EP's ``(mean, std)``); exact
        :func:`qpinfer.sigma_qp` outside the table.
        """
        mu, sigma, y, shape = self._prepare(mu, sigma, y)
        out, outside = self._lookup(mu, sigma, y)
        if moments is None:
            out *= self._lik.tilted_moments(mu, sigma, y)[1]
        else:
            out *= flat_moment(moments[1], shape)
        if outside.size:
            out[outside] = self._fallback(mu, sigma, y, outside)
        return out.reshape(shape)

    def qp_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(EP's mean, sigma_ratio * EP's std)``: a v1 table stores the ratio only, so EP's
        moments (eq. (5)) are computed at every cavity."""
        mean, std_ep = self._lik.tilted_moments(mu, sigma, y)
        return mean, self.sigma_ratio(mu, sigma, y) * std_ep

    def contains(self, mu, sigma, y) -> np.ndarray:
        """Boolean mask of the queries the table covers (no exact fallback needed)."""
        mu, sigma, y, shape = self._prepare(mu, sigma, y)
        return self._locate(mu, sigma, y)[3].reshape(shape)


def open_grid_table(
    root: Path, attrs: dict[str, Any], what: str, verify_checksums: bool | str, interpolation: str
) -> SigmaTable:
    """Validate the v1 store at ``root`` and open it (arguments as :func:`qpinfer.open_table`)."""
    store = check_grid_store(root, attrs, what)
    y, mu_axis, ls_axis, tile_mu, chunk_files, lik = store
    table = SigmaTable(
        root, attrs, lik, y, mu_axis, ls_axis, tile_mu, chunk_files, verify_checksums
    )
    if interpolation not in ("linear", "cubic"):
        raise ValueError(f"interpolation must be 'linear' or 'cubic', got {interpolation!r}")
    if interpolation == "cubic" and (tile_mu < mu_axis.n or min(mu_axis.n, ls_axis.n) < 4):
        raise TableError(
            f"{what}: interpolation='cubic' needs one chunk per label (the published layout, "
            f"tile_mu == {mu_axis.n}; this store has tile_mu={tile_mu}) and >= 4 points per axis"
        )
    table.interpolation = interpolation
    if verify_checksums is True:
        table.verify_checksums()
    return table


def _reopen(path: str, verify_checksums: bool | str, interpolation: str = "linear") -> SigmaTable:
    root = Path(path)
    what = f"table {str(root)!r}"
    attrs = read_json(root / "zarr.json", what).get("attributes") or {}
    return open_grid_table(root, attrs, what, verify_checksums, interpolation)
