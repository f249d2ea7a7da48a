"""Likelihoods the user writes: :class:`CustomLikelihood`, from ``log p(y | f)`` alone to EP's
moments, the exact sigma* kernel, a cell table and the estimators.

The user subclasses :class:`CustomLikelihood`, declares the domain of ``y`` and writes
``log_lik(f, y, m)`` over the math namespace ``m``
(:mod:`~qpinfer.likelihoods.custom.namespace`): numpy here, mpmath in the table builder's
reference. Fixed hyperparameters (a dispersion, a noise scale) are constructor arguments named
in ``params``; a table is built for their values. Everything else is found numerically
(:mod:`~qpinfer.likelihoods.custom.features`): the tilted density's mode and width, each
label's centre and width, its log-concavity. The sigma* kernel (Zhang et al., 2020, eq. (7))
and EP's moments are the package's panel quadrature on the tilted density's log-density level
sets (:mod:`qpinfer.quadrature`), as for the shipped likelihoods.

**Kernel coordinate.** The quadrature works in ``x = f - A``: ``A`` is the cavity mean while
the cavity is narrower than the label's width ``w``, else the label's centre ``c``. Graded panel
edges at ``c`` and ``c +- w 2^k / 2`` keep panels no longer than their distance from the
likelihood's own feature, at every cavity (with them only from 2 label widths on, tilts just
narrower lost up to 5e-10 of their mean and std where a step's edge crossed a panel).

**Support.** ``log p(y | f)`` must be concave in ``f`` (every tilt then has one mode; checked
on each label, else a ``ValueError``), finite where the tilt has its mass, and not constant in
``f``; cavities wider than ``1e6`` label widths are refused (a ``ValueError`` naming sigma).

Holds: :class:`CustomLikelihood`. May import: what :mod:`qpinfer.likelihoods` may.
"""

from __future__ import annotations

import ast
import importlib

import numpy as np

from qpinfer.checks import finite_array
from qpinfer.likelihoods.base import (
    Likelihood,
    check_sign_labels,
    flat_cavities,
    graded_step_edges,
)
from qpinfer.likelihoods.custom.features import derivatives, label_features, tilt_mode
from qpinfer.likelihoods.custom.namespace import NUMPY
from qpinfer.quadrature.expectation import T_MAX, panel_nodes

__all__ = ["SIGMA_MAX", "Y_DOMAINS", "CustomLikelihood", "import_likelihood"]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
SIGMA_MAX = 1e6
#: the domains of ``y`` a user likelihood declares
Y_DOMAINS = ("binary", "counts", "reals")
_SLOTS = 64  # need = 2 + k + _SLOTS * label slot (the graded edges' encoding)


class CustomLikelihood(Likelihood):
    """Base class of a likelihood the user writes: subclass it and define ``log_lik``.

    Attributes
    ----------
    y_domain : {"binary", "counts", "reals"}
        Labels in {-1, +1}, counts 0, 1, 2, ..., or real values.
    params : tuple of str
        The names of the constructor's keyword arguments that fix hyperparameters (each a
        float attribute of the instance); a table is built for their values.
    max_count : int
        Counts: the largest count a table holds (larger ones are answered by the exact
        kernel).
    table_tau, table_sigma : float, (float, float)
        The domain of a table (default 10 and ``(1e-3, 1e3)``): cavities with ``|mu - c| <=
        table_tau sqrt(sigma^2 + w^2)`` and ``sigma >= table_sigma[0] w`` (``c``, ``w``: the
        label's centre and width, found from ``log_lik``), any ``sigma`` above; the exact
        kernel answers the others. A smaller domain is a smaller, faster build.

    Notes
    -----
    The methods a subclass defines: ``log_lik(f, y, m)``, ``log p(y | f)`` elementwise, written
    over the namespace ``m`` (``m.exp``, ``m.log``, ``m.lgamma``, ``m.log_ndtr``, ``m.where``,
    ...: :mod:`qpinfer.likelihoods.custom.namespace`), called with numpy arrays and
    :data:`~qpinfer.likelihoods.custom.namespace.NUMPY`, and by the table builder's reference
    with mpmath numbers and mpmath's namespace; and, for ``y_domain = "reals"`` where ``y`` is
    not a location, ``reduce_y(y)``: ``(offset, label)`` with ``log p(y | f) = log p(label | f
    - offset)``, the labels a finite set (``table_labels()``; default ``(y, 0)``, a location
    family).

    The class must live in an importable module: tables and dask workers name it as
    ``"package.module:ClassName(param=value)"`` (:attr:`name`).

    Examples
    --------
    A Bernoulli likelihood with the complementary log-log link, ``P(y = +1 | f) = 1 -
    exp(-e^f)``:

    >>> import numpy as np
    >>> from qpinfer import CustomLikelihood, sigma_qp, tilted_moments
    >>> class Cloglog(CustomLikelihood):
    ...     y_domain = "binary"
    ...     def log_lik(self, f, y, m):
    ...         e = m.exp(f)
    ...         return m.where(y > 0, m.log1mexp(e), -e)
    >>> lik = Cloglog()
    >>> mean, std = tilted_moments(lik, np.array([0.0]), np.array([1.0]), np.array([1.0]))
    >>> bool(sigma_qp(lik, np.array([0.0]), np.array([1.0]), np.array([1.0]))[0] <= std[0])
    True
    """

    y_domain: str = "reals"
    params: tuple = ()
    max_count: int = 100
    table_tau: float = 10.0
    table_sigma: tuple = (1e-3, 1e3)
    log_concave = True
    _ep_from_panels = True
    _tabulated_moments = True
    _tail_check_sigma = 0.0  # every cavity: a step-like likelihood bends sqrt(drop) sharply
    _boxes_module = "qpinfer.likelihoods.custom.boxes"

    # -- what the user writes ------------------------------------------------------------------
    def log_lik(self, f, y, m):
        """``log p(y | f)`` over the namespace ``m`` (see the class docstring)."""
        raise NotImplementedError(f"{type(self).__name__} must define log_lik(f, y, m)")

    def reduce_y(self, y) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, label)`` with ``log p(y | f) = log p(label | f - offset)``: identity for
        labels and counts, a location family ``(y, 0)`` for real ``y``."""
        y = np.asarray(y, dtype=np.float64)
        if self.y_domain == "reals":
            return y, np.zeros_like(y)
        return np.zeros_like(y), y

    def table_labels(self) -> tuple[float, ...]:
        """The labels a table of this likelihood holds (after :meth:`reduce_y`): -1, +1;
        0..``max_count``; or ``(0.0,)`` for a location family (override for others)."""
        if self.y_domain == "binary":
            return (-1.0, 1.0)
        if self.y_domain == "counts":
            return tuple(float(k) for k in range(int(self.max_count) + 1))
        return (0.0,)

    # -- identity --------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``"package.module:ClassName(param=value, ...)"``, what table stores record and
        :func:`qpinfer.get_likelihood` imports back."""
        cls = type(self)
        text = f"{cls.__module__}:{cls.__qualname__}"
        if self.params:
            text += "(" + ", ".join(f"{p}={float(getattr(self, p))!r}" for p in self.params) + ")"
        return text

    def table_params(self) -> dict:
        return {p: float(getattr(self, p)) for p in self.params}

    def __repr__(self) -> str:
        args = ", ".join(f"{p}={float(getattr(self, p))!r}" for p in self.params)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.table_params() == self.table_params()

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self.table_params().items()))))

    # -- checks ------------------------------------------------------------------------------------
    def check_y(self, y) -> np.ndarray:
        if self.y_domain == "binary":
            return check_sign_labels(y, self.name)
        y = finite_array("y", y)
        if self.y_domain == "counts":
            bad = (y < 0) | (y != np.floor(y))
            if bad.any():
                raise ValueError(
                    f"y must be a non-negative integer count for {self.name}; got "
                    f"{y[bad].flat[0]!r}"
                )
        elif self.y_domain != "reals":
            raise ValueError(f"y_domain must be one of {Y_DOMAINS}; got {self.y_domain!r}")
        return y

    def check_sigma(self, sigma) -> None:
        """Nothing here: the limit is relative to each label's width (:meth:`_check_wide`)."""

    def _check_wide(self, sigma, w) -> None:
        """``ValueError`` naming sigma where it exceeds :data:`SIGMA_MAX` times the label's
        width (the range the kernel is checked on)."""
        bad = np.asarray(sigma) > SIGMA_MAX * w * (1 + 1e-12)
        if bad.any():
            i = np.flatnonzero(bad.ravel())[0]
            raise ValueError(
                f"sigma must be <= {SIGMA_MAX:g} times the likelihood's width at the label "
                f"({np.ravel(w)[i]:.3g}) for {self.name}; got {np.ravel(sigma)[i]!r}"
            )

    # -- the function and what is found from it ----------------------------------------------
    def log_pdf(self, f, y) -> np.ndarray:
        f, y = np.broadcast_arrays(np.asarray(f, np.float64), np.asarray(y, np.float64))
        with np.errstate(all="ignore"):
            return np.asarray(self.log_lik(f, y, NUMPY), dtype=np.float64)

    def features(self, label: float):
        """The :class:`~qpinfer.likelihoods.custom.features.LabelFeatures` of one (reduced)
        label, found once per instance; ``ValueError`` if ``log p`` is not concave in ``f``."""
        cache = self.__dict__.setdefault("_features", {})
        label = float(label)
        if label not in cache:
            found = label_features(lambda f: self.log_pdf(f, label))
            if not found.concave:
                raise ValueError(
                    f"log_lik of {self.name} is not concave in f at y = {label!r}: the exact "
                    "kernel needs a log-concave likelihood (one mode per tilt)"
                )
            cache[label] = found
        return cache[label]

    def _label_arrays(self, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(centre, width, slot)`` per point of the reduced labels ``y`` (any shape)."""
        y = np.asarray(y, dtype=np.float64)
        flat = y.ravel()
        last = self.__dict__.get("_last_labels")  # the kernel asks many times per batch
        if last is not None and last[0].shape == flat.shape and np.array_equal(last[0], flat):
            return tuple(a.reshape(y.shape) for a in last[1:])
        labels, inverse = np.unique(flat, return_inverse=True)
        slots = self.__dict__.setdefault("_slots", {})
        feats = [self.features(v) for v in labels]
        for v in labels:
            slots.setdefault(float(v), len(slots))
        c = np.array([f.centre for f in feats])[inverse].reshape(y.shape)
        w = np.array([f.width for f in feats])[inverse].reshape(y.shape)
        k = np.array([slots[float(v)] for v in labels])[inverse].reshape(y.shape)
        self.__dict__["_last_labels"] = (flat.copy(), c.ravel(), w.ravel(), k.ravel())
        return c, w, k

    def canonical(self, mu, y):
        offset, label = self.reduce_y(y)
        return np.asarray(mu, dtype=np.float64) - offset, np.asarray(label, dtype=np.float64)

    def _canonical_slope(self, mu, y):
        return np.ones_like(np.asarray(mu, dtype=np.float64))

    # -- EP -------------------------------------------------------------------------------------
    def _canonical_arrays(self, mu, sigma, y):
        shape, mu, sigma, y = flat_cavities(mu, sigma, self.check_y(y), self.check_sigma)
        offset, label = self.reduce_y(y)
        return shape, mu - offset, sigma, label, offset

    def _moments(self, m, s, y):
        from qpinfer.quadrature.tilted import panel_moments

        with np.errstate(all="ignore"):
            return self._table_moments(m, s, y, lambda a, b, c: panel_moments(self, a, b, c))

    def ep_moments(self, mu, sigma, y):
        """``(log Z, mean, std)`` of the tilted distribution, by the kernel's panels (or a
        table's moment cells, :meth:`with_moment_table`)."""
        shape, m, s, label, offset = self._canonical_arrays(mu, sigma, y)
        log_z, mean, std = self._moments(m, s, label)
        bad = ~(np.isfinite(log_z) & np.isfinite(mean) & (std > 0) & np.isfinite(std))
        if bad.any():
            i = np.flatnonzero(bad)[0]
            raise ValueError(
                f"the tilted moments of {self.name} are not finite at mu={m[i] + offset[i]!r}, "
                f"sigma={s[i]!r}, y={np.ravel(y)[i]!r}: is log_lik finite there?"
            )
        return log_z.reshape(shape), (mean + offset).reshape(shape), std.reshape(shape)

    def log_z(self, mu, sigma, y) -> np.ndarray:
        return self.ep_moments(mu, sigma, y)[0]

    def tilted_moments(self, mu, sigma, y):
        return self.ep_moments(mu, sigma, y)[1:]

    # -- hooks of the sigma* kernel (canonical cavities, reduced labels) ------------------------
    def _anchor(self, mu, sigma, y):
        """The kernel coordinate's origin: the cavity mean, or the label's centre for a cavity
        wider than the label (module docstring)."""
        c, w, _ = self._label_arrays(y)
        return np.where(sigma > w, c, mu)

    def _log_tilted_offset(self, mu, sigma, y):
        return np.log(sigma) + _LOG_SQRT_2PI

    def _log_tilted(self, x, mu, sigma, y, derivative=True):
        x, mu, sigma, y = np.broadcast_arrays(x, mu, sigma, y)
        anchor = self._anchor(mu, sigma, y)
        t = (anchor - mu) + x
        if not derivative:
            return self.log_pdf(anchor + x, y) - 0.5 * (t / sigma) ** 2, None
        ell, d1, _ = derivatives(lambda f: self.log_pdf(f, y), anchor + x)
        return ell - 0.5 * (t / sigma) ** 2, d1 - t / (sigma * sigma)

    def _lobes(self, mu, sigma, y):
        c, w, _ = self._label_arrays(y)
        self._check_wide(sigma, w)
        anchor = self._anchor(mu, sigma, y)
        mode, width = tilt_mode(lambda f, sel: self.log_pdf(f, y[sel]), mu, sigma, c)
        inf = np.full(mu.shape, np.inf)
        return [(mode - anchor, width, -inf, inf)]

    def _breakpoints(self, mu, sigma, y):
        """Edges at the label's centre and ``+-w 2^k / 2`` up to the mass's extent, encoded per
        label slot in ``need`` (module docstring)."""
        c, w, slot = self._label_arrays(y)
        extent = (np.abs(mu - c) + 12.0 * sigma) / w
        k = np.clip(np.ceil(np.log2(np.maximum(extent, 1.0) / 0.5)) + 1, 1, _SLOTS - 3)
        need = 2 + k + _SLOTS * slot  # every cavity (module docstring)
        features = self.__dict__.get("_features", {})
        widths = {k: features[v].width for v, k in self.__dict__.get("_slots", {}).items()}

        def edges(code):
            code = int(code)
            return widths[code // _SLOTS] * graded_step_edges(code % _SLOTS - 1)

        return need.astype(np.int64), edges

    # -- the baselines' derivatives (by differences) ---------------------------------------------
    def _log_lik_derivatives(self, f, y):
        """``(l, l', l'', l''')`` of ``log p(y | f)`` by central differences."""
        return derivatives(lambda g: self.log_pdf(g, y), f, order=3)

    def _expected_log_lik(self, m, v, y):
        """``E[log p]``, ``dE/dm = E[l']`` and ``dE/dv = E[l''] / 2`` for ``f ~ N(m, v)`` on
        Gauss-Legendre panels (edges also at the label's centre +- 1, 4 and 16 widths)."""
        m, v, y = np.broadcast_arrays(m, v, y)
        off, label = self.reduce_y(y)
        c, w, _ = self._label_arrays(label)
        s = np.sqrt(v)
        inner = np.stack(
            [np.clip((off + c + k * w - m) / s, -T_MAX, T_MAX) for k in (-16, -4, -1, 0, 1, 4, 16)],
            axis=-1,
        )
        f, wts = panel_nodes(m, s, inner)
        ell, d1, d2 = derivatives(lambda g: self.log_pdf(g, y[..., None]), f)
        return np.sum(wts * ell, -1), np.sum(wts * d1, -1), 0.5 * np.sum(wts * d2, -1)


def import_likelihood(name: str) -> CustomLikelihood:
    """The likelihood named ``"package.module:ClassName"`` or
    ``"package.module:ClassName(param=value, ...)"`` (a :attr:`CustomLikelihood.name`):
    the class imported and constructed with the keyword values; ``ValueError`` naming what is
    wrong."""
    head, _, args = name.partition("(")
    module_name, _, qualname = head.strip().partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"likelihood {name!r}: cannot import {qualname!r} from module {module_name!r} "
            f"({exc}); a user likelihood must live in an importable module"
        ) from None
    if not (isinstance(obj, type) and issubclass(obj, CustomLikelihood)):
        raise ValueError(f"likelihood {name!r} is not a CustomLikelihood subclass")
    kwargs = {}
    if args.strip():
        try:
            call = ast.parse(f"f({args}", mode="eval").body
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            if call.args:
                raise ValueError("positional")
        except (SyntaxError, ValueError):
            raise ValueError(
                f"likelihood {name!r}: parameters must be keyword=value literals"
            ) from None
    return obj(**kwargs)
