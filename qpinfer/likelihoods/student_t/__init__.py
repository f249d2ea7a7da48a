"""Student-t regression noise for EP and QP, y real.

    p(y | f) = t_nu((y - f) / s) / s,   t_nu(x) = C_nu (1 + x^2 / nu)^(-(nu + 1) / 2),
    C_nu = Gamma((nu + 1) / 2) / (Gamma(nu / 2) sqrt(nu pi)),   nu > 0, s > 0.

Not log-concave: the tilted density ``q(f) = p(y|f) N(f | mu, sigma^2) / Z`` (Zhang et al., 2020, eq. (5))
is bimodal when the cavity sits far from the observation, and EP/QP site precisions may be
negative (:mod:`qpinfer.inference.ep` keeps them for ``log_concave = False``).

Canonical coordinates. ``f' = (f - y) / s`` maps the tilted family onto itself with
``mu' = (mu - y) / s``, ``sigma' = sigma / s``, and ``f' -> -f'`` mirrors ``mu'``, so
``sigma*(mu, sigma, y) = s sigma*(|mu'|, sigma', 0)`` and ``sigma* / sigma_EP`` depends on
``(|mu - y| / s, sigma / s)`` for each nu only. In these units the tilted density's stationary
points, its two lobes split at the antimode, their panels and the moments (EP's projection, eq.
(5), and ``log Z``: no closed form) are :mod:`qpinfer.likelihoods.student_t.canonical`; the class
below hands them to the QP kernel (eq. (7), :mod:`qpinfer.sigma.exact`) as its hooks
(``_lobes``, ``_lobe_edges``, ``_breakpoints``).

Where the cavity is narrow relative to the t factor's curvature scale,
``r = sigma' sqrt((nu + 1) / (nu + mu'^2)) < 1e-3``, the tilted density is Gaussian to double
precision (its skewness and excess kurtosis are O(r^3) and O(r^4), and sigma*/sigma_EP - 1 is
second order in them: measured against mpmath <= 1e-19 at r = 1e-3 for nu = 0.1 ... 1e5), and
sigma* is the EP std (``_sigma_closed_form``). Supported: ``sigma / s <= 1e10`` (a ``ValueError``
naming sigma beyond); every finite mu.

Degrees of freedom: the likelihood takes every ``nu > 0``; the estimators take
``NU_RANGE = [0.1, 1e5]`` (:func:`check_nu_supported`), where the kernel's accuracy above was
measured and the fits are bounded. Below it the t factor's tails fall as ``|f|^-(nu + 1)``, close
to flat: a fit of 60 rows with ``nu = 1e-3`` ran 330 s and ended on a NaN cavity (with
``nu = 0.1``: 17 s, as ``nu = 1``); above it the t is a normal to within ``1/nu`` (use a Gaussian
likelihood).

Holds: :class:`StudentT` (here), its tilted density in canonical units (``canonical``), the
baselines' log p(y | f) and scale derivatives (``baselines``) and its cell-table boxes
(``boxes``). May import: what :mod:`qpinfer.likelihoods` may; never another likelihood.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from scipy.special import gammaln

from qpinfer.checks import finite_array as _finite
from qpinfer.likelihoods.base import Likelihood, fill_ep_std
from qpinfer.likelihoods.student_t import baselines
from qpinfer.likelihoods.student_t.canonical import (
    EXTRA_LEVEL,
    N_NODES,
    canonical_moments,
    cavity_shift,
    graded_edges,
    graded_need,
    level_offsets,
    lobes,
    panel_moments,
)

__all__ = [
    "DEFAULT_NU",
    "MAX_SIGMA_RATIO",
    "NU_RANGE",
    "StudentT",
    "check_nu_scale",
    "check_nu_supported",
    "parse_name",
    "student_t_name",
]

DEFAULT_NU = 4.0
#: largest supported cavity std in units of the noise scale
MAX_SIGMA_RATIO = 1e10
#: the degrees of freedom the estimators take (module docstring)
NU_RANGE = (0.1, 1e5)
#: r = sigma' sqrt((nu + 1) / (nu + mu'^2)) below which the tilt is Gaussian to double precision
GAUSSIAN_R = 1e-3


def _positive(name: str, value: Any) -> float:
    v = np.nan
    if not isinstance(value, bool | str):
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = np.nan
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0 for student_t, got {value!r}")
    return v


def check_nu_scale(nu: Any, scale: Any) -> tuple[float, float]:
    """``(float(nu), float(scale))``, each finite and > 0, else ``ValueError`` naming it."""
    return _positive("nu", nu), _positive("scale", scale)


def check_nu_supported(nu: float) -> float:
    """``nu`` if it lies in :data:`NU_RANGE`, else a ``ValueError`` naming nu and the range."""
    low, high = NU_RANGE
    if not low <= nu <= high:
        raise ValueError(
            "nu must be in [0.1, 1e5] for student_t (where the QP kernel is accurate "
            f"and fits are bounded; nu > 1e5 is a normal to within 1/nu), got {nu!r}"
        )
    return nu


def student_t_name(nu: float, scale: float) -> str:
    """The name of ``StudentT(nu, scale)`` (what table stores record; :func:`parse_name` reads
    it back)."""
    return f"student_t(nu={nu!r}, scale={scale!r})"


def parse_name(name: Any) -> tuple[float, float] | None:
    """``(nu, scale)`` of ``"student_t"`` (defaults) or ``"student_t(nu=4.0, scale=1.0)"``
    (:attr:`StudentT.name <qpinfer.Likelihood.name>`), else ``None``; a malformed number is a
    ``ValueError``."""
    if not isinstance(name, str) or not name.startswith("student_t"):
        return None
    if name == "student_t":
        return DEFAULT_NU, 1.0
    m = re.fullmatch(r"student_t\(nu=([^,()]*), scale=([^,()]*)\)", name)
    if m is None:
        return None
    try:
        nu, scale = float(m.group(1)), float(m.group(2))
    except ValueError:
        raise ValueError(f"nu or scale in likelihood name {name!r} is not a number") from None
    return check_nu_scale(nu, scale)


# ------------------------------------------------------------------------------ the likelihood


class StudentT(Likelihood):
    """Student-t noise p(y | f) = t_nu((y - f)/scale)/scale, y real."""

    _n_nodes = N_NODES
    #: not log-concave: EP/QP sites may have negative precisions (kept by qpinfer.inference.ep)
    log_concave = False
    _moments_by_quadrature = True  # (student_t_canonical)
    _snap_to_bounds = True  # lobes end exactly at the antimode
    _boxes_module = "qpinfer.likelihoods.student_t.boxes"

    def __init__(self, nu: float = DEFAULT_NU, scale: float = 1.0) -> None:
        self.nu, self.scale = check_nu_scale(nu, scale)
        self.name = student_t_name(self.nu, self.scale)
        self._log_c = float(
            gammaln(0.5 * (self.nu + 1.0)) - gammaln(0.5 * self.nu) - 0.5 * np.log(self.nu * np.pi)
        )

    def _log_lik_derivatives(self, f, y):
        return baselines.log_lik_derivatives(self, f, y)

    def _expected_log_lik(self, m, v, y):
        return baselines.expected_log_lik(self, m, v, y)

    def table_base(self) -> StudentT | None:
        """The scale-1 likelihood of this nu, whose table serves every scale: ``f' = (f - y) /
        scale`` maps the tilted family onto itself, so ``sigma*(mu, sigma, y) = scale
        sigma*_1((mu - y) / scale, sigma / scale, 0)`` and ``sigma* / sigma_EP`` is unchanged."""
        return None if self.scale == 1.0 else StudentT(self.nu, 1.0)

    def with_table_scale(self, scale: float) -> StudentT:
        if self.scale != 1.0:
            raise ValueError(f"{self!r}: only the scale-1 table serves other scales")
        return StudentT(self.nu, scale)

    def table_map(self, mu, sigma, y):
        d, s, sign = self.reduced(mu, sigma, y)  # ValueError naming sigma or mu, this scale
        return d, s, np.zeros_like(d), self.scale, sign

    def __repr__(self) -> str:
        return f"StudentT(nu={self.nu!r}, scale={self.scale!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StudentT) and (other.nu, other.scale) == (self.nu, self.scale)

    def __hash__(self) -> int:
        return hash(("student_t", self.nu, self.scale))

    def check_y(self, y) -> np.ndarray:
        return _finite("y", y)

    def log_pdf(self, f, y) -> np.ndarray:
        x = (np.asarray(y, dtype=np.float64) - np.asarray(f, dtype=np.float64)) / self.scale
        return self._log_c - np.log(self.scale) - 0.5 * (self.nu + 1.0) * np.log1p(x * x / self.nu)

    # canonical units ---------------------------------------------------------------------

    def reduced(self, mu, sigma, y):
        """``(|mu - y| / s, sigma / s, sign)``; ``ValueError`` naming sigma beyond the range."""
        mu, sigma, y = np.broadcast_arrays(
            np.asarray(mu, float), np.asarray(sigma, float), np.asarray(y, float)
        )
        with np.errstate(over="ignore"):
            d = (mu - y) / self.scale
            s = sigma / self.scale
        bad = ~(s <= MAX_SIGMA_RATIO)
        if bad.any():
            raise ValueError(
                f"sigma must be <= {MAX_SIGMA_RATIO:g} * scale for student_t (scale="
                f"{self.scale!r}); got {sigma[bad].flat[0]!r}"
            )
        bad = ~(s > 0) | ~np.isfinite(d)
        if bad.any():
            i = np.flatnonzero(bad)[0]
            name = "sigma" if not s.flat[i] > 0 else "mu"
            raise ValueError(
                f"{name} / scale is not a positive finite float64 for student_t: mu="
                f"{mu.flat[i]!r}, sigma={sigma.flat[i]!r}, y={y.flat[i]!r}"
            )
        return np.abs(d), s, np.where(d < 0, -1.0, 1.0)

    # EP's moments ---------------------------------------------------------------------------
    #: no closed form where the cavity is neither narrow nor far: the cell table of the scale-1
    #: likelihood of the same nu stores them (looked up in units of the scale)
    _tabulated_moments = True

    def _moment_table_name(self) -> str:
        return student_t_name(self.nu, 1.0)

    def _canonical_moments(self, d, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z', mean', std')`` at canonical cavities: closed forms and the Gauss-Hermite
        rule, else the moment table (:meth:`with_moment_table`) or the panels."""
        return canonical_moments(d, s, self.nu, panels=self._panels)

    def _panels(self, d, s) -> np.ndarray:
        """The moments no closed form serves: the table's, else (and in no box) the panels'."""

        def exact(m, sg, y):
            return tuple(panel_moments(m, sg, self.nu))

        return np.stack(self._table_moments(d, s, np.zeros_like(d), exact))

    def ep_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` in one pass (canonical units, :meth:`reduced`)."""
        mu, sigma, y = np.broadcast_arrays(
            np.asarray(mu, float), np.asarray(sigma, float), np.asarray(y, float)
        )
        d, s, sign = self.reduced(mu, sigma, y)
        log_z, mean, std = self._canonical_moments(d, s)
        near_cavity, shift = cavity_shift(d, s, self.nu)
        mean = np.where(near_cavity, mu + sign * self.scale * shift, y + sign * self.scale * mean)
        return log_z - np.log(self.scale), mean, self.scale * std

    def log_z(self, mu, sigma, y) -> np.ndarray:
        return self.ep_moments(mu, sigma, y)[0]

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of the tilted density (no closed form: :meth:`ep_moments`)."""
        return self.ep_moments(mu, sigma, y)[1:]

    # hooks of the exact sigma* kernel (qpinfer.sigma.exact) --------------------------------------

    def canonical(self, mu, y):
        """Shift and mirror: ``sigma*(mu, sigma, y) = sigma*(|mu - y|, sigma, 0)``."""
        return np.abs(mu - y), np.zeros_like(y)

    def _canonical_slope(self, mu, y):
        return np.sign(mu - y)  # canonical mu = |mu - y|

    def _rescale_jacobian(self, mu, sigma, mu_r, sigma_r, scale):
        """mu' = mu / k, sigma' = sigma / k, scale = k (k the noise scale: constant)."""
        one, zero, k = np.ones_like(mu), np.zeros_like(mu), self.scale
        return np.ones(mu.shape, bool), (one / k, zero, zero, one / k, zero, zero)

    def _anchor(self, mu, sigma, y):
        return _anchor(mu, sigma)

    _closed_form_takes_moments = True  # the cell table passes the EP moments it has already

    def _sigma_closed_form(self, mu, sigma, y, moments=None):
        """The Gaussian regime r = sigma' sqrt((nu+1)/(nu+mu'^2)) < GAUSSIAN_R: sigma* = EP std
        (``moments``: EP's ``(mean, std)`` at these cavities if the caller has them)."""
        d, s, _ = self.reduced(mu, sigma, y)
        mask = s * np.sqrt(self.nu + 1.0) < GAUSSIAN_R * np.sqrt(self.nu + d * d)
        values = fill_ep_std(
            np.zeros_like(d),
            mask,
            moments,
            lambda sel: self.scale * self._canonical_moments(d[sel], s[sel])[2],
        )
        return mask, values

    def _rescale(self, mu, sigma, y):
        """Every cavity is computed in units of the scale (y = 0 after :meth:`canonical`); none
        to do at scale 1 (the cell table's lookups then need no second EP moment computation)."""
        if self.scale == 1.0:
            return None
        return np.ones(mu.shape, dtype=bool), mu / self.scale, sigma / self.scale, self.scale

    # The kernel's coordinate is x = f - a, a = _anchor(mu, sigma): the cavity mean where the
    # t factor's lobe is negligible (mu > 30 sigma: it holds < e^-400 of the mass), else 0, so
    # that node positions are exact about the lobe that carries the mass (absolute nodes about
    # f ~ mu would carry 1e-16 mu / sigma relative errors).

    def _breakpoints(self, mu, sigma, y):
        need = np.where(_anchor(mu, sigma) > 0, 0, graded_need(mu, sigma, self.nu))
        return need, lambda w: graded_edges(int(w), self.nu)

    def _log_tilted(self, f, mu, sigma, y, derivative=True):
        """-(nu+1)/2 log(1 + f^2/nu) - (f - mu)^2/(2 sigma^2) at f = a + x (``f`` is x here).
        With a = 0 the Gaussian term about the t factor's lobe carries a rounding of
        ~1e-16 mu^2/(2 sigma^2) <= 5e-14 nats (mu <= 30 sigma)."""
        a = _anchor(mu, sigma)
        ft = f + a
        t = (f + (a - mu)) / sigma
        log_q = -0.5 * t * t - 0.5 * (self.nu + 1.0) * np.log1p(ft * ft / self.nu)
        if not derivative:
            return log_q, None
        return log_q, -(self.nu + 1.0) * ft / (self.nu + ft * ft) - t / sigma

    def _lobes(self, mu, sigma, y):
        a = _anchor(mu, sigma)
        return [(m - a, w, lo - a, up - a) for m, w, lo, up in lobes(mu, sigma, self.nu)]

    def _lobe_edges(self, mode, width, lower, upper, mu, sigma, y, levels):
        """Panel edges of one lobe (replaces the kernel's Newton level sets: not log-concave)."""
        a = _anchor(mu, sigma)
        levels = np.append(levels, EXTRA_LEVEL)
        off = level_offsets(
            mode + a, mode + (a - mu), lower - mode, upper - mode, sigma, self.nu, levels
        )
        edges = mode[:, None] + off
        # a side whose level sets reach the antimode ends exactly on it (no flat gap between
        # the lobes); otherwise the kernel adds the gap's constant integrand exactly
        edges[:, 0] = np.where(off[:, 0] == lower - mode, lower, edges[:, 0])
        edges[:, -1] = np.where(off[:, -1] == upper - mode, upper, edges[:, -1])
        return np.where(width[:, None] > 0, edges, mode[:, None])


def _anchor(mu, sigma):
    return np.where(mu > 30.0 * sigma, mu, 0.0)
