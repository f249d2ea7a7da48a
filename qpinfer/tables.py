"""Reader of precomputed sigma* tables (paper 000 App. J): memory-mapped, constant-time lookups.

The store layout is the contract in :mod:`qpinfer.schema` (written by ``qptables``). Published
stores hold one chunk file per ``(variable, y)`` (``tile_mu == n_mu``); the reader accepts any
``tile_mu``, but every chunk a lookup batch touches costs one Python iteration, so few chunks
keep small batches (EP's N sites per sweep) fast.

Opening (:func:`open_table`) reads metadata only -- the root and array ``zarr.json`` files and the
three small coordinate arrays -- and ``stat``-s every data chunk file; it never reads table data.
Chunks are uncompressed, so each chunk file is the raw little-endian float64 block
``(tile_mu, n_log10_sigma)`` of one ``y``; a chunk is memory-mapped with :class:`numpy.memmap`
the first time a lookup needs it, and a lookup touches only the pages holding its four
neighbours.

Validation at open (refused with :class:`TableError`, a ``ValueError``): zarr format 3, schema
version :data:`~qpinfer.schema.SCHEMA_VERSION`, every attribute of
:data:`~qpinfer.schema.REQUIRED_ATTRS`, ``complete == True``, a verification report with
``passed == True``, data variables with dims ``(y, mu, log10_sigma)``, float64, chunks
``(1, tile_mu, n_log10_sigma)`` with the bytes codec only, coordinates equal to the grid in
``attrs["grid"]`` (:func:`qpinfer.schema.grid_axis`), and every
chunk file present with exactly ``tile_mu * n_log10_sigma * 8`` bytes (a truncated chunk is
caught here) and listed in ``attrs["checksums"]``.

Checksums: hashing a paper-grid store (2 x 2 x 20001 x 2001 float64, 1.3 GB) takes seconds,
which would defeat the <= 20 ms open goal. So by default (``verify_checksums="lazy"``) each chunk
file's sha256 is checked the first time it is memory-mapped (about 1 ms per 800 kB chunk, once
per process), and a mismatch raises :class:`TableError` before any value from that chunk is
used. ``verify_checksums=True`` hashes every chunk at open; ``False`` trusts the sizes only.

Interpolation: the stored ``sigma_ratio = sigma_qp / sigma_ep`` (in (0, 1] by Theorem 2, and much
smoother than sigma* itself) is interpolated bilinearly in ``(mu, log10 sigma)`` on the exact
``y`` slice, and multiplied by the exact EP standard deviation (the tilted std, eq. (5)) at the
query point. Outside the grid, or for a ``y`` the table lacks, sigma* is computed exactly with
:func:`qpinfer.sigma_qp` -- not the paper's ``sigma_QP ~ sigma_EP`` fallback, which biases
variances upward -- counted in :attr:`SigmaTable.fallback_count`, with a one-time warning.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Self

import numpy as np

from qpinfer.grid_cubic import interp_cubic
from qpinfer.integrity import metadata_changes
from qpinfer.schema import DATA_VARS, DIMS, REQUIRED_ATTRS, SCHEMA_VERSION, grid_axis

__all__ = [
    "SigmaTable",
    "TableError",
    "download",
    "installed_table_path",
    "open_table",
    "tables_dir",
]

#: grid coordinates must match ``grid_axis`` to this absolute tolerance
_COORD_ATOL = 1e-9
#: a query this close (in grid steps) outside the grid edge is clamped to the edge
_EDGE_TOL = 1e-9


class TableError(ValueError):
    """A table store is missing, incomplete, of the wrong schema, or corrupt."""


def tables_dir() -> Path:
    """Where installed tables live: ``$QPINFER_TABLES``, else ``$XDG_CACHE_HOME/qpinfer/tables``
    (default ``~/.cache/qpinfer/tables``)."""
    env = os.environ.get("QPINFER_TABLES")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "qpinfer" / "tables"


def installed_table_path(likelihood: Any) -> Path:
    """Path of the installed table for ``likelihood`` (a name or likelihood object):
    ``tables_dir() / "<name>.zarr"``. It may not exist."""
    name = likelihood if isinstance(likelihood, str) else likelihood.name
    return tables_dir() / f"{name}.zarr"


def download(name: str, base_url: str | os.PathLike | None = None, **kwargs: Any) -> Path:
    """Download the prebuilt table ``name`` and install it where :func:`open_table` and the
    estimators' ``table=None`` find it; see :func:`qpinfer.download.download` (keyword
    arguments ``force``, ``make_default``, ``retries``, ``timeout``, ``progress``).

    ``base_url``: the ``http(s)://`` or ``file://`` URL of a directory holding ``manifest.json``
    (written by ``qptables publish``); default ``$QPINFER_TABLES_URL``. Returns
    ``tables_dir() / f"{name}.zarr"``.
    """
    from qpinfer.download import download as _download

    return _download(name, base_url, **kwargs)


def _check_likelihood_params(attrs: dict, what: str) -> None:
    """A step-noise store (one per eps) must name a valid eps, and the eps recorded in
    ``attrs["build"]["likelihood_params"]`` (if any) must be the one in the name."""
    from qpinfer.step_noise import parse_name

    name = attrs["likelihood"]
    if not (isinstance(name, str) and name.startswith("step_noise")):
        return
    try:
        eps = parse_name(name)
    except ValueError as exc:
        raise TableError(f"{what}: likelihood {name!r}: {exc}") from None
    if eps is None or name == "step_noise":
        raise TableError(
            f"{what}: likelihood {name!r} does not say its eps (expected 'step_noise(eps=...)')"
        )
    build = attrs.get("build")
    params = build.get("likelihood_params") if isinstance(build, dict) else None
    if isinstance(params, dict) and "eps" in params and params["eps"] != eps:
        raise TableError(
            f"{what}: likelihood {name!r} has eps={eps!r} but its build record says "
            f"eps={params['eps']!r}"
        )


def _store_likelihood(name: Any, y: np.ndarray, what: str):
    """The store's likelihood object; its labels ``y`` must be valid for it."""
    from qpinfer.likelihoods import get_likelihood

    try:
        lik = get_likelihood(name)
        lik.check_y(y)
    except (TypeError, ValueError) as exc:
        raise TableError(f"{what}: likelihood {name!r} with labels {y.tolist()}: {exc}") from None
    return lik


def _installed_by_name(path: str | os.PathLike) -> Path | None:
    """``tables_dir()/<name>.zarr`` if ``path`` is a bare table name (no directory part, not an
    existing path) and such a table is installed."""
    if not isinstance(path, str) or not path or os.sep in path or "/" in path:
        return None
    if path.endswith(".zarr") or path in (".", "..") or os.path.lexists(path):
        return None
    candidate = tables_dir() / f"{path}.zarr"
    return candidate if candidate.is_dir() else None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise TableError(f"{what}: missing {path}") from None
    except (OSError, ValueError) as exc:
        raise TableError(f"{what}: cannot read {path} ({exc})") from None


def sha256_file(path: Path) -> str:
    """sha256 hex digest of the file at ``path`` (read in blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


class _Axis:
    """A uniform grid axis (values from :func:`qpinfer.schema.grid_axis`)."""

    __slots__ = ("inv_step", "n", "start", "step", "stop")

    def __init__(self, start: float, stop: float, step: float) -> None:
        self.start = float(start)
        self.step = float(step)
        self.n = round((stop - start) / step) + 1
        self.stop = self.start + self.step * (self.n - 1)
        self.inv_step = 1.0 / self.step


class SigmaTable:
    """An open sigma* table (see the module docstring); create with :func:`open_table`.

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
        y: np.ndarray,
        mu_axis: _Axis,
        ls_axis: _Axis,
        tile_mu: int,
        chunk_files: dict[str, list[tuple[str, str]]],
        verify_checksums: bool | str,
    ) -> None:
        self.path = path
        self.attrs = attrs
        self.likelihood: str = attrs["likelihood"]
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
        self._lik = None
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lookups ------------------------------------------------------------------------------
    def _likelihood(self):
        if self._lik is None:
            from qpinfer.likelihoods import get_likelihood

            self._lik = get_likelihood(self.likelihood)
        return self._lik

    def _prepare(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
        """Broadcast and validate a query; the labels ``y`` are checked against the store's
        likelihood (a label the table holds is valid by the check at open)."""
        mu = np.asarray(mu, dtype=np.float64)
        sigma = np.asarray(sigma, dtype=np.float64)
        if not (np.ndim(y) == 0 and isinstance(y, int | float) and float(y) in self._y_index):
            y = self._likelihood().check_y(y)
        y = np.asarray(y, dtype=np.float64)
        try:
            mu, sigma, y = np.broadcast_arrays(mu, sigma, y)
        except ValueError:
            raise ValueError(
                f"mu, sigma and y must broadcast together; got shapes {np.shape(mu)}, "
                f"{np.shape(sigma)}, {np.shape(y)}"
            ) from None
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
            slices = lambda k: self._chunk(var, k * self._n_chunks)
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

    def _fallback(self, mu, sigma, y, outside: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact sigma* and sigma_ep at the queries the table does not cover."""
        from qpinfer.sigma import sigma_qp

        lik = self._likelihood()
        m, s, yy = mu[outside], sigma[outside], y[outside]
        exact = sigma_qp(lik, m, s, yy)
        _, s_ep = lik.tilted_moments(m, s, yy)
        self.fallback_count += outside.size
        if not self._warned:
            self._warned = True
            d = self.domain
            warnings.warn(
                f"{outside.size} sigma* queries fell outside the table (mu in "
                f"[{d['mu'][0]:g}, {d['mu'][1]:g}], sigma in [{d['sigma'][0]:.4g}, "
                f"{d['sigma'][1]:.4g}], y in {self.y.tolist()}); computed exactly "
                "(slower). table.fallback_count counts them. Warned once per table.",
                RuntimeWarning,
                stacklevel=3,
            )
        return exact, s_ep

    def sigma_ratio(self, mu, sigma, y) -> np.ndarray:
        """``sigma_qp / sigma_ep`` at cavity ``(mu, sigma)`` and label ``y`` (vectorised).

        Bilinear interpolation in ``(mu, log10 sigma)`` -- the fast path, a pure lookup -- with the
        exact ratio outside the table (counted in :attr:`fallback_count`).
        """
        mu, sigma, y, shape = self._prepare(mu, sigma, y)
        out, outside = self._lookup(mu, sigma, y)
        if outside.size:
            exact, s_ep = self._fallback(mu, sigma, y, outside)
            out[outside] = exact / s_ep
        return out.reshape(shape)

    def sigma_qp(self, mu, sigma, y) -> np.ndarray:
        """QP standard deviation sigma* (eq. (7)) at cavity ``(mu, sigma)`` and label ``y``.

        ``sigma_ratio`` interpolated from the table times the exact EP std (eq. (5)) at the query
        point; exact :func:`qpinfer.sigma_qp` outside the table.
        """
        mu, sigma, y, shape = self._prepare(mu, sigma, y)
        out, outside = self._lookup(mu, sigma, y)
        _, s_ep = self._likelihood().tilted_moments(mu, sigma, y)
        out *= s_ep
        if outside.size:
            exact, _ = self._fallback(mu, sigma, y, outside)
            out[outside] = exact
        return out.reshape(shape)

    def contains(self, mu, sigma, y) -> np.ndarray:
        """Boolean mask of the queries the table covers (no exact fallback needed)."""
        mu, sigma, y, shape = self._prepare(mu, sigma, y)
        return self._locate(mu, sigma, y)[3].reshape(shape)


# --------------------------------------------------------------------------------------------
# Opening and validation
# --------------------------------------------------------------------------------------------
def _chunk_path(root: str, var: str, sep: str, indices: tuple[int, ...], encoding: str) -> str:
    """File path of a chunk under zarr v3's ``default`` or ``v2`` chunk key encoding."""
    parts = [str(i) for i in indices]
    if encoding == "default":
        parts = ["c", *parts]
    return (
        os.path.join(root, var, *parts) if sep == "/" else os.path.join(root, var, sep.join(parts))
    )


def _chunk_key(var: str, sep: str, indices: tuple[int, ...], encoding: str) -> str:
    """Store key (relative path with '/') of a chunk, as used in ``attrs["checksums"]``."""
    parts = [str(i) for i in indices]
    if encoding == "default":
        parts = ["c", *parts]
    return var + "/" + sep.join(parts)


def _check_array_meta(meta: dict, name: str, what: str) -> tuple[str, str]:
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        raise TableError(f"{what}: {name}/zarr.json is not zarr v3 array metadata")
    cke = meta.get("chunk_key_encoding") or {"name": "default"}
    enc = cke.get("name", "default")
    sep = (cke.get("configuration") or {}).get("separator", "/" if enc == "default" else ".")
    if enc not in ("default", "v2") or sep not in ("/", "."):
        raise TableError(f"{what}: {name} uses an unsupported chunk key encoding {cke!r}")
    if meta.get("storage_transformers"):
        raise TableError(f"{what}: {name} uses storage transformers, which the reader cannot map")
    return enc, sep


def _bytes_only(meta: dict) -> bool:
    codecs = meta.get("codecs") or []
    if len(codecs) != 1 or codecs[0].get("name") != "bytes":
        return False
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    return endian == "little"


def _read_coordinate(root: Path, name: str, what: str) -> np.ndarray:
    meta = _read_json(root / name / "zarr.json", what)
    enc, sep = _check_array_meta(meta, name, what)
    if list(meta.get("dimension_names") or []) != [name]:
        raise TableError(
            f"{what}: coordinate {name} must have dimension_names [{name!r}], found "
            f"{meta.get('dimension_names')!r}"
        )
    shape = tuple(meta.get("shape", ()))
    chunks = tuple(
        ((meta.get("chunk_grid") or {}).get("configuration") or {}).get("chunk_shape", ())
    )
    dtype = {"int64": "<i8", "float64": "<f8", "int32": "<i4", "float32": "<f4"}.get(
        meta.get("data_type")
    )
    if len(shape) != 1:
        raise TableError(f"{what}: coordinate {name} must be 1-d, found shape {shape}")
    if dtype is not None and chunks == shape and _bytes_only(meta):
        f = _chunk_path(str(root), name, sep, (0,), enc)
        try:
            data = np.fromfile(f, dtype=dtype)
        except OSError as exc:
            raise TableError(f"{what}: cannot read coordinate {name} ({exc})") from None
        if data.size != shape[0]:
            raise TableError(
                f"{what}: coordinate {name} chunk {f} holds {data.size} values, expected {shape[0]}"
            )
        return data
    # compressed or multi-chunk coordinates: let zarr decode them (slower, still small)
    import zarr

    try:
        return np.asarray(zarr.open_array(str(root / name), mode="r")[...])
    except Exception as exc:  # noqa: BLE001 - any zarr failure means a broken store
        raise TableError(f"{what}: cannot read coordinate {name} ({exc})") from None


def _reopen(path: str, verify_checksums: bool | str, interpolation: str = "linear") -> SigmaTable:
    return open_table(path, verify_checksums=verify_checksums, interpolation=interpolation)


def open_table(
    path: str | os.PathLike, *, verify_checksums: bool | str = "lazy", interpolation: str = "linear"
) -> SigmaTable:
    """Open and validate a sigma* table store (see the module docstring for what is checked).

    Parameters
    ----------
    path:
        The store directory (``<likelihood>.zarr``), or the bare name of an installed table
        (``"probit-paper"`` or a likelihood such as ``"probit"``: ``tables_dir()/<name>.zarr``,
        see :func:`download`) when no file or directory of that name exists here.
    verify_checksums:
        ``"lazy"`` (default): check each chunk's sha256 when it is first memory-mapped;
        ``True``: check every chunk now (seconds for a paper-grid store); ``False``: sizes only.
    interpolation:
        v1 (grid) stores: ``"linear"`` (bilinear, the paper's; ~1e-8 at the paper's step 0.001)
        or ``"cubic"`` (bicubic Lagrange, O(h^4): ~1e-12 at step 0.001, 1e-9 at 0.01; needs one
        chunk per label, the published layout). v2 stores always use their Chebyshev cells.

    Raises
    ------
    TableError
        (a ``ValueError``) naming what was expected and what was found.
    """
    if verify_checksums not in (True, False, "lazy"):
        raise ValueError(
            f"verify_checksums must be True, False or 'lazy', got {verify_checksums!r}"
        )
    root = Path(path)
    installed = _installed_by_name(path)
    if installed is not None:
        root = installed
    what = f"table {str(root)!r}"
    if not root.is_dir():
        hint = ""
        if isinstance(path, str) and "/" not in path and os.sep not in path:
            hint = (
                f" (nor an installed table {tables_dir() / (path.removesuffix('.zarr') + '.zarr')};"
                " install one with `qpinfer download NAME`)"
            )
        raise TableError(f"{what}: no such store directory{hint}")
    meta = _read_json(root / "zarr.json", what)
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "group":
        raise TableError(f"{what}: expected a zarr v3 group, found {meta.get('zarr_format')!r}")
    attrs = meta.get("attributes") or {}
    if attrs.get("qp_schema_version") == 2:  # reduced coordinates (qpinfer.tables_v2)
        from qpinfer.tables_v2 import open_reduced

        return open_reduced(root)
    missing = [a for a in REQUIRED_ATTRS if a not in attrs]
    if missing:
        raise TableError(f"{what}: missing root attributes {missing}")
    if attrs["qp_schema_version"] != SCHEMA_VERSION:
        raise TableError(
            f"{what}: schema version {attrs['qp_schema_version']!r}, this reader expects "
            f"{SCHEMA_VERSION}"
        )
    _check_likelihood_params(attrs, what)  # first: the more specific message
    changes = metadata_changes(root, attrs)
    if changes:
        raise TableError(
            f"{what}: its metadata no longer matches the integrity digest written when it was "
            f"built ({'; '.join(changes)}), so its numbers may not mean what it says; rebuild "
            "or re-download it"
        )
    if attrs["complete"] is not True:
        raise TableError(f"{what}: incomplete (attrs['complete'] is {attrs['complete']!r})")
    ver = attrs["verification"]
    if not isinstance(ver, dict) or ver.get("passed") is not True:
        raise TableError(f"{what}: verification did not pass (attrs['verification'] = {ver!r})")
    grid = attrs["grid"]
    try:
        mu_axis = _Axis(*grid["mu"])
        ls_axis = _Axis(*grid["log10_sigma"])
        y_grid = np.asarray(grid["y"], dtype=np.int64)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise TableError(f"{what}: malformed grid attribute {grid!r} ({exc})") from None
    lik = _store_likelihood(attrs["likelihood"], y_grid, what)
    if mu_axis.n < 2 or ls_axis.n < 2 or y_grid.size < 1:
        raise TableError(f"{what}: grid needs >= 2 points per axis and >= 1 label, got {grid!r}")
    tile_mu = attrs["tile_mu"]
    if not isinstance(tile_mu, int) or tile_mu < 1:
        raise TableError(f"{what}: tile_mu must be a positive integer, found {tile_mu!r}")

    # coordinates against the grid specification
    y = _read_coordinate(root, "y", what).astype(np.int64)
    if not np.array_equal(y, y_grid) or np.any(np.diff(y) <= 0):
        raise TableError(f"{what}: y coordinate {y.tolist()} != grid y {y_grid.tolist()} (sorted)")
    for name, axis, spec in (
        ("mu", mu_axis, grid["mu"]),
        ("log10_sigma", ls_axis, grid["log10_sigma"]),
    ):
        coord = _read_coordinate(root, name, what)
        expected = grid_axis(*spec)
        if coord.shape != expected.shape or not np.allclose(
            coord, expected, rtol=0, atol=_COORD_ATOL
        ):
            raise TableError(
                f"{what}: coordinate {name} (n={coord.size}) does not match grid {spec} "
                f"(n={expected.size})"
            )
    shape = (y.size, mu_axis.n, ls_axis.n)
    n_chunks = -(-mu_axis.n // tile_mu)
    chunk_bytes = tile_mu * ls_axis.n * 8
    checksums = attrs["checksums"]
    if not isinstance(checksums, dict):
        raise TableError(f"{what}: attrs['checksums'] must be a mapping, found {type(checksums)}")

    chunk_files: dict[str, list[tuple[str, str]]] = {}
    sroot = str(root)
    for var in ("sigma_ratio",) + tuple(v for v in DATA_VARS if v != "sigma_ratio"):
        ameta = _read_json(root / var / "zarr.json", what)
        enc, sep = _check_array_meta(ameta, var, what)
        dims = tuple(ameta.get("dimension_names") or ())
        if dims != DIMS:
            raise TableError(f"{what}: {var} has dims {dims}, expected {DIMS}")
        if tuple(ameta.get("shape", ())) != shape:
            raise TableError(
                f"{what}: {var} has shape {tuple(ameta.get('shape', ()))}, expected {shape}"
            )
        if ameta.get("data_type") != "float64":
            raise TableError(
                f"{what}: {var} has data type {ameta.get('data_type')!r}, expected float64"
            )
        cgrid = ameta.get("chunk_grid") or {}
        cshape = tuple((cgrid.get("configuration") or {}).get("chunk_shape", ()))
        if cgrid.get("name") != "regular" or cshape != (1, tile_mu, ls_axis.n):
            raise TableError(
                f"{what}: {var} chunks {cshape}, expected (1, {tile_mu}, {ls_axis.n}) (regular)"
            )
        if not _bytes_only(ameta):
            raise TableError(
                f"{what}: {var} must be stored uncompressed (bytes codec, little endian), found "
                f"codecs {ameta.get('codecs')!r}"
            )
        files = []
        fast = enc == "default" and sep == "/" and os.sep == "/"
        for iy in range(y.size):
            for k in range(n_chunks):
                if fast:  # the contract's layout: plain string building (open-time budget)
                    key = f"{var}/c/{iy}/{k}/0"
                    f = f"{sroot}/{key}"
                else:
                    key = _chunk_key(var, sep, (iy, k, 0), enc)
                    f = _chunk_path(sroot, var, sep, (iy, k, 0), enc)
                try:
                    size = os.stat(f).st_size
                except FileNotFoundError:
                    raise TableError(
                        f"{what}: chunk file {f} is missing (incomplete store)"
                    ) from None
                if size != chunk_bytes:
                    raise TableError(
                        f"{what}: chunk file {f} has {size} bytes, expected {chunk_bytes} "
                        "(truncated or foreign)"
                    )
                if key not in checksums:
                    raise TableError(f"{what}: no checksum recorded for chunk {key}")
                files.append((f, key))
        chunk_files[var] = files

    table = SigmaTable(root, attrs, y, mu_axis, ls_axis, tile_mu, chunk_files, verify_checksums)
    table._lik = lik
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
