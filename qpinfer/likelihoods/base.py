# Over 400 lines: the one declared likelihood protocol, every hook with its default, in one place.
"""The likelihood interface for EP/QP site updates, vectorized over sites:
:class:`~qpinfer.Likelihood`.

Each likelihood is one small object (in the spirit of GPML's ``likErf.m``): given cavity
parameters ``(mu, sigma)`` (mean and *standard deviation* of N(f | mu, sigma^2)) and an
observation ``y`` it returns what a site update needs: ``log_z`` (the tilted normalizer),
``tilted_moments`` (EP's moment projection, Zhang et al. (2020) App. C) and, for the exact QP kernel
in :mod:`qpinfer.sigma.exact`, the unnormalized log tilted density and the location of its lobes.
Beside it, the checks and pieces several likelihoods share (labels in {-1, +1}, a largest cavity
std, flattened cavities, EP's std where sigma* has a closed form, edges graded about f = 0).
"""

from __future__ import annotations

import copy
import importlib
from abc import ABC, abstractmethod

import numpy as np

from qpinfer.checks import finite_array as _finite
from qpinfer.likelihoods.layout import Box
from qpinfer.quadrature.level_sets import TiltedDensity

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


def check_cavity(mu, sigma) -> tuple[np.ndarray, np.ndarray]:
    """Validate cavity mean ``mu`` and standard deviation ``sigma`` (finite, ``sigma > 0``)."""
    mu = _finite("mu", mu)
    sigma = _finite("sigma", sigma)
    bad = sigma <= 0
    if bad.any():
        raise ValueError(f"sigma must be > 0 (a standard deviation); got {sigma[bad].flat[0]!r}")
    return mu, sigma


def check_sign_labels(y, likelihood_name: str) -> np.ndarray:
    """Labels ``y`` in {-1, +1} as float64 (binary likelihoods), else ``ValueError`` naming y."""
    y = np.asarray(y)
    yf = _finite("y", y)
    bad = (yf != 1) & (yf != -1)
    if bad.any():
        raise ValueError(
            f"y must be -1 or +1 for the {likelihood_name} likelihood; got {y[bad].flat[0]!r}"
        )
    return yf


def check_sigma_at_most(sigma, limit: float, what: str) -> None:
    """``ValueError`` naming sigma if a cavity std exceeds ``limit`` (the range ``what``, the
    likelihood and why, supports)."""
    bad = np.asarray(sigma) > limit
    if bad.any():
        raise ValueError(
            f"sigma must be <= {limit:g} for {what}; got {np.asarray(sigma)[bad].flat[0]!r}"
        )


def flat_cavities(
    mu, sigma, y, check_sigma
) -> tuple[tuple[int, ...], np.ndarray, np.ndarray, np.ndarray]:
    """``(shape, mu, sigma, y)``: checked cavities (:func:`check_cavity`, then the likelihood's
    ``check_sigma``) and observations broadcast to ``shape``, flattened, float64."""
    mu, sigma = check_cavity(mu, sigma)
    check_sigma(sigma)
    mu, sigma, y = np.broadcast_arrays(mu, sigma, np.asarray(y, dtype=np.float64))
    return mu.shape, mu.ravel(), sigma.ravel().astype(np.float64), y.ravel()


def fill_ep_std(out: np.ndarray, mask: np.ndarray, moments, ep_std) -> np.ndarray:
    """``out`` with EP's standard deviation at ``mask`` (where a closed form says sigma* =
    sigma_EP): the caller's ``moments[1]`` (EP's ``(mean, std)``, broadcast to ``out``) if
    given, else ``ep_std(mask)``, computed at those points only."""
    if mask.any():
        if moments is not None:
            out[mask] = np.broadcast_to(moments[1], out.shape)[mask]
        else:
            out[mask] = ep_std(mask)
    return out


def graded_step_edges(need: int) -> np.ndarray:
    """Panel edges at 0 and ``+-0.5 * 2^k``, ``k < need - 1``: a link's scale-1 feature at
    f = 0 seen from a wide cavity (a likelihood's ``_breakpoints``)."""
    k = max(int(need) - 1, 1)
    g = 0.5 * 2.0 ** np.arange(k)
    return np.concatenate([-g[::-1], [0.0], g])


class Likelihood(TiltedDensity, ABC):
    """A likelihood p(y | f) with everything inference asks of it, vectorized over sites.

    Subclasses implement :meth:`check_y`, :meth:`log_pdf`, :meth:`log_z`,
    :meth:`tilted_moments` and the two hooks of the exact sigma* kernel, ``_log_tilted()`` and
    ``_lobes()``. Every other hook has its default here, which a likelihood overrides where it
    knows better: closed forms and limits of sigma*, the baselines' derivatives, Power EP's
    fractional moments, class predictions, the boxes of its cell table. Nothing outside a
    likelihood's own subpackage asks for its type or name.
    """

    name: str = ""
    #: EP moments by the sigma* kernel's own panels (qpinfer.quadrature.tilted): sigma_qp then
    #: takes sigma_EP for its Theorem 2 clamp from the same pass instead of tilted_moments
    _ep_from_panels: bool = False
    #: EP's moments are a quadrature of their own, not from the kernel's panels (Student-t):
    #: like ``_ep_from_panels``, a table lookup's numerical derivatives then cost more than the
    #: kernel's exact ones where the table's cells do not give them
    _moments_by_quadrature: bool = False
    #: closed forms (_sigma_closed_form, _rescale) that may round above sigma_EP: sigma_qp clamps
    #: them too (else only its quadrature points)
    _clamp_closed_forms: bool = False
    #: _sigma_closed_form takes EP's moments (``moments=``), which a table lookup has already
    _closed_form_takes_moments: bool = False
    #: EP's moments have no closed form: a cell table of this likelihood stores them beside sigma*
    #: (:data:`qpinfer.tables.reduced_store.MOMENT_ARRAYS`) and serves them to a likelihood that
    #: was given it (:meth:`with_moment_table`)
    _tabulated_moments: bool = False
    #: the table whose moment lookups this instance's ``log_z`` and ``tilted_moments`` take
    #: (``None``: exact quadrature; set by :meth:`with_moment_table`)
    _moment_table = None
    #: log p(y | f) is concave in f: EP's site precisions stay >= 0 and the Laplace and VB
    #: baselines may clip theirs (False: heavy tails, label noise)
    log_concave: bool = True
    #: p(y | f) = p(y | -f), two branches of f fit the same data: a fit starts its sites on
    #: the positive branch, never from another fit's sites (the square link)
    two_branches: bool = False
    #: the module of the likelihood's cell-table boxes (its ``boxes(likelihood)`` and classes),
    #: imported when a table is built or read (``None``: no cell table)
    _boxes_module: str | None = None
    #: EP's mean alone (:meth:`tilted_mean`) costs less than the mean and std together, and a
    #: table storing sigma* / sigma then needs no std
    _mean_alone: bool = False

    def with_moment_table(self, table) -> Likelihood:
        """A copy of this likelihood whose ``log_z`` and ``tilted_moments`` take EP's moments
        from ``table`` (an open cell table of this likelihood that stores them) where they have no
        closed form, and compute the rest -- cavities in no box -- exactly (counted in
        ``table.moment_fallback_count``). ``None``: exact moments. Returns ``self`` for a
        likelihood whose moments have closed forms."""
        if not self._tabulated_moments or table is self._moment_table:
            return self
        want = self._moment_table_name()
        if table is not None and (
            getattr(table, "likelihood", None) != want or not getattr(table, "has_moments", False)
        ):
            raise ValueError(
                f"table must be an open table of {want!r} that stores EP's moments (see "
                f"qpinfer.tables.shipped.shipped_table) or None; got {table!r}"
            )
        out = copy.copy(self)
        out._moment_table = table
        return out

    def smoothed_scale(self, h) -> np.ndarray | None:
        """``c`` with ``int N(f | a, h) p(y | f) df = p(y | a / c)`` where the likelihood's
        Gaussian smoothing is a rescaling of itself (the probit: ``c = sqrt(1 + h)``), else
        ``None`` (default). QP with pseudo-points needs it: its site variable ``a`` sees the
        smoothed likelihood (Bui, Yan and Turner, 2017, eq. (20))."""
        return None

    def table_params(self) -> dict:
        """The parameters a table store of this likelihood is built for and records beside its
        name (one store per value: the label-noise step's ``eps``); none by default."""
        return {}

    def table_base(self) -> Likelihood | None:
        """The likelihood whose table answers this one's lookups through :meth:`table_map`
        (for a family with a scale: its member of scale 1), or ``None`` (default): its own."""
        return None

    def with_table_scale(self, scale: float) -> Likelihood:
        """The member of this likelihood's family that a table of this one serves at ``scale``
        (:meth:`table_base` of it is this one); ``ValueError`` for a likelihood without
        one."""
        raise ValueError(f"{self!r} has no family of scales that its table serves")

    def table_map(self, mu, sigma, y) -> tuple[np.ndarray, ...]:
        """``(mu', sigma', y', scale, slope)``: the cavity of :meth:`table_base` equivalent to
        ``(mu, sigma, y)``, where ``sigma* = scale sigma*'(mu', sigma', y')``, EP's std scales
        the same and ``d mu' / d mu = slope / scale`` (``sigma' = sigma / scale``); only a
        likelihood with a :meth:`table_base` has one."""
        raise NotImplementedError(f"{self!r} is answered by its own table")

    def table_boxes(self) -> tuple:
        """The boxes of this likelihood's cell table (:class:`qpinfer.likelihoods.layout.Box`):
        ``boxes(self)`` of its ``_boxes_module``; ``ValueError`` for a likelihood without
        one."""
        if self._boxes_module is None:
            raise ValueError(f"no cell table layout for likelihood {self.name!r}")
        return importlib.import_module(self._boxes_module).boxes(self)

    @classmethod
    def box_kinds(cls) -> dict:
        """Box class name -> class, for the boxes :meth:`table_boxes` gives (read back from a
        store's attributes): every :class:`~qpinfer.likelihoods.layout.Box` its
        ``_boxes_module`` defines; none by default."""
        if cls._boxes_module is None:
            return {}
        module = importlib.import_module(cls._boxes_module)
        return {
            c.__name__: c
            for c in vars(module).values()
            if isinstance(c, type) and issubclass(c, Box) and c.__module__ == module.__name__
        }

    def _moment_table_name(self) -> str:
        """The likelihood a table serving this one's EP moments is built for: its own (a
        likelihood whose moments are looked up in other units names that table's)."""
        return self.name

    def _from_box_moments(self, mu, sigma, y, moments) -> tuple[np.ndarray, ...]:
        """``(log Z, mean, std)`` at canonical cavities from a table's lookup there, which gives
        them at the cavity its box holds (:meth:`qpinfer.tables.ReducedTable.stored_moments`):
        the same one, unless the boxes fold the cavities (a likelihood whose boxes do unfolds
        them here)."""
        return moments

    def _equivalent_cavities(self, mu, sigma, y, rng) -> tuple[np.ndarray, np.ndarray]:
        """``(mu', y')``: cavities with other labels whose tilts a table answers from the same
        stored values as ``(mu, sigma, y)`` (drawn with ``rng``), so that a table's check covers
        the labels its boxes do not hold; default the cavities themselves."""
        return mu, y

    def _table_moments(self, mu, sigma, y, exact) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` of canonical 1-D cavities outside the closed forms: from the
        moment table where it has them, else (and without a table) ``exact(mu, sigma, y)``."""
        table = self._moment_table
        if table is None:
            return exact(mu, sigma, y)
        moments, rest = table.stored_moments(mu, sigma, y)
        log_z, mean, std = self._from_box_moments(mu, sigma, y, moments)
        if rest.size:
            table.moment_fallback_count += rest.size
            log_z[rest], mean[rest], std[rest] = exact(mu[rest], sigma[rest], y[rest])
        return log_z, mean, std

    @abstractmethod
    def check_y(self, y) -> np.ndarray:
        """Validate observations, returning a float64 array; ``ValueError`` names ``y``."""

    @abstractmethod
    def log_pdf(self, f, y) -> np.ndarray:
        """log p(y | f)."""

    @abstractmethod
    def log_z(self, mu, sigma, y) -> np.ndarray:
        """log Z = log of the integral of p(y | f) N(f | mu, sigma^2) over f."""

    @abstractmethod
    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the tilted distribution (EP's projection, eq. (5))."""

    def log_lik_derivatives(self, f, y) -> tuple[np.ndarray, ...]:
        """``(log p(y|f), d/df, d^2/df^2, d^3/df^3)``, elementwise: the Laplace baseline's
        Newton steps and evidence gradient (Rasmussen and Williams, 2006, Alg. 3.1 and 5.1)."""
        return self._log_lik_derivatives(
            np.asarray(f, dtype=np.float64), np.asarray(y, dtype=np.float64)
        )

    def expected_log_lik(self, m, v, y) -> tuple[np.ndarray, ...]:
        """``E[log p(y|f)]`` for ``f ~ N(m, v)`` and its derivatives in ``m`` and ``v``,
        elementwise: the data term of the VB baseline's ELBO (Opper and Archambeau, 2009)."""
        return self._expected_log_lik(
            np.asarray(m, dtype=np.float64),
            np.asarray(v, dtype=np.float64),
            np.asarray(y, dtype=np.float64),
        )

    def _log_lik_derivatives(self, f, y):
        """:meth:`log_lik_derivatives` of float64 arrays; a likelihood without them refuses
        the Laplace and VB baselines."""
        raise self._no_baselines()

    def _expected_log_lik(self, m, v, y):
        """:meth:`expected_log_lik` of float64 arrays (see :meth:`_log_lik_derivatives`)."""
        raise self._no_baselines()

    def _no_baselines(self) -> ValueError:
        return ValueError(
            "Laplace and VB need the derivatives and Gaussian expectations of log p(y | f), "
            f"which this likelihood does not give; got {self!r}"
        )

    def tilted_expected_log_lik(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """``(log Z, E_q[log p(y | f)])`` under the tilt ``q ~ p(y | f) N(f | mu, sigma^2)``:
        relaxed EP's objective (Qi and Guo, 2012, eq. (35)); a likelihood without it refuses
        relaxed EP."""
        raise ValueError(f"relaxed EP needs E_q[log p(y | f)] under the tilt; got {self!r}")

    def power_moments(self, mu, sigma, y, power: float) -> tuple[np.ndarray, ...]:
        """``(log Z, mean, std)`` of the fractional tilt ``p(y | f)^power N(f | mu, sigma^2)``,
        ``power`` in (0, 1): Power EP's projection (Bui et al., 2017, Sec. 3.4). A likelihood
        without them refuses Power EP with ``alpha < 1``."""
        raise ValueError(
            "Power EP with alpha < 1 needs the moments of p(y | f)^alpha N(f | mu, sigma^2), "
            f"which this likelihood does not give; got {self!r}"
        )

    def ep_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` of the tilted distribution: :meth:`log_z` and
        :meth:`tilted_moments` together (a likelihood that computes them in one pass overrides
        this)."""
        return (self.log_z(mu, sigma, y), *self.tilted_moments(mu, sigma, y))

    def predictive_log_proba(self, mean, var) -> np.ndarray:
        """``[log P(y* = -1), log P(y* = +1)]`` per row of a binary likelihood (labels -1, +1)
        for the latent predictive ``N(mean, var)``: ``log E[p(-+1 | f*)]``, its tilt's
        normaliser :meth:`log_z`."""
        sd = np.sqrt(np.maximum(var, np.finfo(np.float64).tiny))
        return np.column_stack((self.log_z(mean, sd, -1.0), self.log_z(mean, sd, 1.0)))

    def class_probabilities(self, mean, var) -> np.ndarray:
        """``[P(y* = -1), P(y* = +1)]`` per row of a binary likelihood for the latent predictive
        ``N(mean, var)`` (default: :meth:`predictive_log_proba` exponentiated)."""
        return np.exp(self.predictive_log_proba(mean, var))

    def decision_values(self, mean, var) -> np.ndarray:
        """Positive for the class ``+1`` (default: ``log P(+1) - log P(-1)``)."""
        log_p = self.predictive_log_proba(mean, var)
        return log_p[:, 1] - log_p[:, 0]

    def canonical(self, mu, y) -> tuple[np.ndarray, np.ndarray]:
        """Map ``(mu, y)`` to an equivalent pair by an exact symmetry (default: identity)."""
        return mu, y

    def _canonical_slope(self, mu, y) -> np.ndarray | None:
        """d(canonical mu)/d mu of :meth:`canonical` (+-1; 0 on a fold, where sigma* is even):
        1 for the identity; a likelihood with a symmetry gives its own (``None``: unknown, the
        derivatives of sigma* are then taken numerically)."""
        if type(self).canonical is Likelihood.canonical:
            return np.ones_like(mu)
        return None

    def tilted_mean(self, mu, sigma, y) -> np.ndarray:
        """EP's mean alone (the first of :meth:`tilted_moments`; a likelihood that computes it
        for less sets ``_mean_alone``)."""
        return self.tilted_moments(mu, sigma, y)[0]

    def tilted_mean_and_z(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """EP's mean and the first coordinate of a table box whose ``fused_mean_z`` is set, in
        one pass (only such a likelihood's boxes set it)."""
        raise NotImplementedError(f"{self!r} has no fused mean and box coordinate")

    def _sigma_closed_form(self, mu, sigma, y):
        """``(mask, sigma_star)`` where sigma* is known in closed form, else ``None``."""
        return

    def _table_closed_form(self, mu, sigma, y, moments):
        """``(mask, sigma*)`` that a cell table lookup takes before its boxes, or ``None``, given
        EP's ``moments`` there: the kernel's closed forms (:meth:`_sigma_closed_form`, with the
        moments where it takes them); a likelihood whose closed forms include a quadrature the
        boxes answer faster leaves it out."""
        if self._closed_form_takes_moments:
            return self._sigma_closed_form(mu, sigma, y, moments=moments)
        return self._sigma_closed_form(mu, sigma, y)

    def _rescale(self, mu, sigma, y):
        """``(mask, mu', sigma', scale)``: where the kernel should compute
        ``scale * sigma*(mu', sigma', y)`` instead (a limit exact to double precision), or
        ``None``."""
        return

    def _sigma_qp_exact(self, mu, sigma, y) -> np.ndarray | None:
        """sigma* at every canonical cavity without panels (a closed form that holds
        everywhere), or ``None`` (default): the kernel's panels then compute it."""
        return None

    def _closed_form_slopes(self, mu, sigma, y, mask):
        """``(where, d_mu, d_sigma)``: exact derivatives of the closed forms of
        :meth:`_sigma_closed_form` at canonical cavities, for the subset ``where`` of ``mask``
        that has them beside the forms ``sigma* = sigma`` (which every likelihood shares), or
        ``None`` (default)."""
        return None

    def _rescale_jacobian(self, mu, sigma, mu_r, sigma_r, scale):
        """``(mask, (a_mu, a_sigma, b_mu, b_sigma, c_mu, c_sigma))``: the derivatives in the
        canonical cavity of :meth:`_rescale`'s ``mu' = a``, ``sigma' = b``, ``scale = c`` where
        they are exact, or ``None`` (default: the rescaled points are differentiated
        numerically)."""
        return None

    def _anchor(self, mu, sigma, y) -> np.ndarray:
        """The origin of the kernel's coordinate ``x = f - anchor`` in :meth:`_log_tilted` and
        :meth:`_lobes` (default 0: ``x = f``); a likelihood anchors on the mass's lobe where
        absolute nodes would lose digits."""
        return np.zeros_like(mu)

    def _breakpoints(self, mu, sigma, y):
        """``(need, edges)``: extra panel edges at features of the likelihood that log-density
        level sets can straddle, or ``None``. ``need`` is an int array per point: 0 none, 1 add
        the edges, >= 2 add them and use finer level sets (very wide cavities). ``edges`` is an
        array of shape (m,), or a function of ``need`` returning one."""
        return

    @abstractmethod
    def _log_tilted(self, f, mu, sigma, y, derivative: bool = True):
        """Unnormalized log tilted density log p(y|f) - (f-mu)^2/(2 sigma^2) and (if
        ``derivative``) its f-derivative, else ``None`` in its place."""

    @abstractmethod
    def _lobes(self, mu, sigma, y) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Log-concave pieces of the tilted density, left to right.

        Each lobe is ``(mode, width, lower, upper)``: the mode of the unnormalized density on the
        lobe, its curvature width ``(-d^2 log q / df^2)^(-1/2)`` at the mode, and hard bounds of
        the lobe (``-inf``/``inf`` or a zero of the likelihood such as f = 0).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
