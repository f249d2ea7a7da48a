"""Logistic likelihood p(y | f) = 1 / (1 + exp(-y f)), y in {-1, +1}, for EP, QP, VB and Laplace.

The tilted distribution ``q(f) ~ sigma(y f) N(f | mu, s^2)`` has no closed-form moments; EP's
projection (Zhang et al., 2020, eq. (5)) and the QP standard deviation (eq. (7),
``sigma* = int phi(Phi^{-1}(F(f))) df``) are computed by the panel quadrature of
:mod:`qpinfer.sigma.exact` / :mod:`qpinfer.quadrature.tilted`. Mirror symmetry as for the probit:
``sigma*(mu, s, -1) = sigma*(-mu, s, +1)`` (``canonical``), so below ``y = +1``.

Two exact rewritings keep every term O(1) (``m' = mu + s^2``)::

    sigma(f) N(f | mu, s^2)  =  exp(-softplus(-f)) N(f | mu, s^2)                    (form 1)
                             =  exp(mu + s^2/2) exp(-softplus(f)) N(f | m', s^2)     (form 2)

**Closed forms** (sigma* = s, Gaussian tilts, to < e^-40 relative):

* *flat*: ``E_N(mu, s^2)[sigma(-f)] <= Phi(-mu/s) + exp(-mu + s^2/2) Phi(mu/s - s) < e^-40``:
  the tilt is the cavity (mean mu, std s, log Z = 0);
* *exponential*: ``E_N(m', s^2)[sigma(f)] <= Phi(m'/s) + exp(mu + 3 s^2/2) Phi(-(mu + 2 s^2)/s)
  < e^-40``: the tilt is N(m', s^2) (log Z = mu + s^2/2);
* *narrow*: ``s < 1e-3``: the tilt is Gaussian to double precision (measured
  ``1 - sigma*/sigma_EP ~ 2.5e-4 s^6``, < 1e-21 there: ``tests/likelihoods/test_logit_poisson_log.py``), so
  sigma* = sigma_EP.

**Kernel coordinate.** The quadrature works in ``x = f - A``: for ``s <= 2`` the anchor is
``A = mu`` (the mode is within s^2 of it and the tilt's width is ~s, so node positions are exact
relative to the width however large ``|mu|``); for ``s > 2``, ``A = 0`` (the logistic step is a
feature of width ~1 at f = 0, and graded panel edges +-0.5 * 2^k about it keep panels no longer
than their distance from it) with form 1 if ``mu + s^2/2 >= 0`` else form 2, each with the
quadratic centred at its own mean where the mass is there, and expanded about 0 where the mass
sits at the step. Cavities with ``s > 1e6`` are refused (ValueError naming sigma).

Holds: :class:`Logit` with its two exact rewritings and closed forms (here) and its cell-table
boxes (``boxes``). May import: what :mod:`qpinfer.likelihoods` may; never another likelihood.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_ndtr

from qpinfer.likelihoods.base import (
    Likelihood,
    check_sigma_at_most,
    check_sign_labels,
    fill_ep_std,
    flat_cavities,
    graded_step_edges,
)
from qpinfer.quadrature.expectation import T_MAX, panel_nodes

__all__ = ["SIGMA_MAX", "Logit"]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_WIDE = 2.0  # cavities wider than this use A = 0 and graded edges about the step
_CLOSED_NATS = 40.0
_NARROW = 1e-3  # below: sigma* = sigma_EP to double precision
_TINY = 1e-9  # below: the EP moments by their expansion in s^2
_HERMITE_NODES = 16  # the narrow regime's EP moments (s < 1e-3): Gauss-Hermite nodes
SIGMA_MAX = 1e6  # cavity standard deviations above this are refused
_MODE_STEPS = 64
_BREAKS = (-40.0, -8.0, 0.0, 8.0, 40.0)  # the expectations' panel edges in z = y f
_GUESS_STEPS = 3  # Newton steps of the level-set guesses (_level_guess)


def _softplus(x):
    return np.logaddexp(0.0, x)


def _frame(mu, sigma):
    """Per point: anchor A, Gaussian centre c (in x), form 2?, expanded quadratic?"""
    wide = sigma > _WIDE
    s2 = sigma * sigma
    form2 = wide & (mu + 0.5 * s2 < 0.0)
    c = np.where(form2, mu + s2, mu)
    expanded = wide & np.where(form2, c > 0.0, c < 0.0)
    anchor = np.where(wide, 0.0, mu)
    c_x = np.where(wide, c, 0.0)
    return anchor, c_x, form2, expanded


def _fold(mu, sigma):
    """The second symmetry's fold, ``max(mu, -mu - s^2)`` (the cell boxes hold folded
    cavities, :mod:`qpinfer.likelihoods.logit.boxes`)."""
    return np.maximum(mu, -mu - sigma * sigma)


_HERMITE_X, _HERMITE_W = np.polynomial.hermite_e.hermegauss(_HERMITE_NODES)


def _hermite_moments(mu, sigma):
    """``(log Z, mean, std)`` by the Gauss-Hermite rule of :data:`_HERMITE_NODES` nodes in
    ``x = (f - mu) / s``: for s < 1e-3 the factor ``sigma(mu + s x)`` is analytic in a strip
    of half-width ``pi / s > 3000`` about the real x axis, so the rule's error (of order
    ``(s / pi)^(2n) (2n - 1)!!``) is far below double precision; the weights are taken about
    their largest term (no overflow for any mu)."""
    x = _HERMITE_X
    log_p = -_softplus(-(mu[:, None] + sigma[:, None] * x)) + np.log(_HERMITE_W)
    top = log_p.max(axis=1, keepdims=True)
    w = np.exp(log_p - top)
    total = w.sum(axis=1)
    log_z = top[:, 0] + np.log(total) - _LOG_SQRT_2PI
    xbar = (w @ x) / total
    d = x[None, :] - xbar[:, None]
    var = np.einsum("ij,ij->i", w, d * d) / total
    return log_z, mu + sigma * xbar, sigma * np.sqrt(var)


def _closed_masks(mu, sigma):
    """``(flat, exponential, narrow)`` masks of the closed-form regimes (canonical y = +1)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s2 = sigma * sigma
        z = mu / sigma
        flat = np.logaddexp(log_ndtr(-z), -mu + 0.5 * s2 + log_ndtr(z - sigma)) < -_CLOSED_NATS
        expo = (
            np.logaddexp(log_ndtr(z + sigma), mu + 1.5 * s2 + log_ndtr(-z - 2.0 * sigma))
            < -_CLOSED_NATS
        )
    narrow = (sigma < _NARROW) & ~flat & ~expo
    return flat, expo & ~flat, narrow


class Logit(Likelihood):
    """p(y | f) = 1 / (1 + exp(-y f)), labels y in {-1, +1} (see the module docstring)."""

    name = "logit"
    _boxes_module = "qpinfer.likelihoods.logit.boxes"

    def _log_lik_derivatives(self, f, y):
        """``log sigma(y f)`` and its derivatives ``y sigma(-y f)``, ``-p (1 - p)`` and
        ``-p (1 - p) (1 - 2 p)``, ``p = sigma(f)`` (log-concave)."""
        p = expit(f)
        return (
            -np.logaddexp(0.0, -y * f),
            y * expit(-y * f),
            -p * (1.0 - p),
            -p * (1.0 - p) * (1.0 - 2.0 * p),
        )

    def _expected_log_lik(self, m, v, y):
        """By the panels of :func:`qpinfer.quadrature.expectation.panel_nodes` in ``z = y f``
        with edges also where ``z = -+40, -+8, 0`` (the logistic's transition; ~1e-15 relative
        for any v), ``dE/dm = E[d log p/df]``, ``dE/dv = E[d^2 log p/df^2] / 2``."""
        m, v, y = np.broadcast_arrays(m, v, y)
        zm, s = y * m, np.sqrt(v)
        inner = np.stack([np.clip((b - zm) / s, -T_MAX, T_MAX) for b in _BREAKS], axis=-1)
        z, w = panel_nodes(zm, s, inner)  # z = y f ~ N(y m, v)
        lp = -np.logaddexp(0.0, -z)
        d1 = expit(-z)
        p = expit(z)
        d2 = -p * (1.0 - p)
        return np.sum(w * lp, -1), y * np.sum(w * d1, -1), 0.5 * np.sum(w * d2, -1)

    _n_nodes = 20
    _ep_from_panels = True  # tilted_moments by qpinfer.quadrature.tilted on the kernel's panels
    _tail_check_sigma = 0.0  # every cavity: sqrt(drop) bends at the link's kink
    _closed_form_takes_moments = True

    def check_y(self, y) -> np.ndarray:
        return check_sign_labels(y, "logit")

    def check_sigma(self, sigma) -> None:
        what = "the logit likelihood (the range where sigma* holds 1e-12 accuracy)"
        check_sigma_at_most(sigma, SIGMA_MAX, what)

    def log_pdf(self, f, y) -> np.ndarray:
        return -_softplus(-np.asarray(y, dtype=np.float64) * np.asarray(f, dtype=np.float64))

    def canonical(self, mu, y):
        """Mirror symmetry: sigma*(mu, sigma, -1) == sigma*(-mu, sigma, +1) exactly."""
        return y * mu, np.ones_like(y)

    def _canonical_slope(self, mu, y):
        return y.astype(np.float64)  # canonical mu = y mu

    # -- EP ------------------------------------------------------------------------------------
    _tabulated_moments = True

    def _moments(self, mu, sigma):
        """``(log Z, mean, std)`` for canonical 1-D arrays: closed forms and the narrow
        regime's Gauss-Hermite rule, else the moment table (:meth:`with_moment_table`) or the
        panel quadrature."""
        from qpinfer.quadrature.tilted import panel_moments

        flat, expo, _ = _closed_masks(mu, sigma)
        log_z = np.where(expo, mu + 0.5 * sigma * sigma, 0.0)
        mean = np.where(expo, mu + sigma * sigma, mu)
        std = sigma.copy()
        # s < 1e-9: second-order expansion about mu (what is left is O(s^4) relative)
        tiny = (sigma < _TINY) & ~(flat | expo)
        if tiny.any():
            m, s2 = mu[tiny], sigma[tiny] ** 2
            p = expit(m)
            log_z[tiny] = -_softplus(-m) + 0.5 * s2 * (1.0 - p) * (1.0 - 2.0 * p)
            mean[tiny] = m + s2 * (1.0 - p)
            std[tiny] = sigma[tiny] * (1.0 - 0.5 * s2 * p * (1.0 - p))
        narrow = (sigma < _NARROW) & ~(flat | expo | tiny)
        if narrow.any():
            log_z[narrow], mean[narrow], std[narrow] = _hermite_moments(mu[narrow], sigma[narrow])
        rest = ~(flat | expo | tiny | narrow)
        if rest.any():
            ones = np.ones(int(rest.sum()))
            log_z[rest], mean[rest], std[rest] = self._table_moments(
                mu[rest], sigma[rest], ones, lambda m, s, y: panel_moments(self, m, s, y)
            )
        return log_z, mean, std

    def _from_box_moments(self, mu, sigma, y, moments):
        """The boxes hold folded cavities ``m' = max(mu, -mu - s^2)``: at a folded one, log Z =
        mu + s^2/2 + log Z(m'), mean = -mean(m'), the same std (module docstring, form 2)."""
        folded = _fold(mu, sigma)
        log_z, mean, std = moments
        moved = folded != mu
        if moved.any():
            log_z[moved] += mu[moved] + 0.5 * sigma[moved] ** 2
            mean[moved] = -mean[moved]
        return log_z, mean, std

    def _canonical_arrays(self, mu, sigma, y):
        shape, mu, sigma, y = flat_cavities(mu, sigma, y, self.check_sigma)
        return shape, y * mu, sigma, y

    def log_z(self, mu, sigma, y) -> np.ndarray:
        """log Z = log E[sigma(y f)], f ~ N(mu, sigma^2), by quadrature (closed form where the
        tilt is Gaussian)."""
        shape, m, s, _ = self._canonical_arrays(mu, sigma, y)
        return self._moments(m, s)[0].reshape(shape)

    def tilted_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of sigma(y f) N(f | mu, sigma^2) / Z (EP's projection, eq. (5))."""
        return self.ep_moments(mu, sigma, y)[1:]

    def ep_moments(self, mu, sigma, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log Z, mean, std)`` in one pass."""
        shape, m, s, yy = self._canonical_arrays(mu, sigma, y)
        log_z, mean, std = self._moments(m, s)
        return log_z.reshape(shape), (yy * mean).reshape(shape), std.reshape(shape)

    # -- hooks of the exact sigma* kernel ----------------------------------------------------
    def _sigma_closed_form(self, mu, sigma, y, moments=None):
        self.check_sigma(sigma)
        flat, expo, narrow = _closed_masks(mu, sigma)
        out = fill_ep_std(
            sigma.astype(np.float64).copy(),
            narrow,
            moments,
            lambda sel: self._moments(mu[sel], sigma[sel])[2],
        )
        return flat | expo | narrow, out

    def _anchor(self, mu, sigma, y):
        return _frame(mu, sigma)[0]

    def _log_tilted_offset(self, mu, sigma, y):
        """K with _log_tilted = log sigma(f) + log N(f | mu, sigma^2) + K (module docstring)."""
        _, c, form2, expanded = _frame(mu, sigma)
        k = np.log(sigma) + _LOG_SQRT_2PI
        k = np.where(form2, k - (mu + 0.5 * sigma * sigma), k)
        return np.where(expanded, k + 0.5 * (c / sigma) ** 2, k)

    def _log_tilted(self, x, mu, sigma, y, derivative=True):
        anchor, c, form2, expanded = _frame(mu, sigma)
        f = anchor + x
        log_lik = np.where(form2, -_softplus(f), -_softplus(-f))
        t = x - c
        quad = np.where(
            expanded, (x / sigma) * (0.5 * x / sigma - c / sigma), 0.5 * (t / sigma) ** 2
        )
        log_q = log_lik - quad
        if not derivative:
            return log_q, None
        return log_q, np.where(form2, -expit(f), expit(-f)) - t / sigma / sigma

    def _lobes(self, mu, sigma, y):
        """One log-concave lobe: the mode by bracketed Newton on the decreasing derivative
        (fixed number of steps, so no point depends on its batch)."""
        anchor, c, form2, _ = _frame(mu, sigma)
        s2 = sigma * sigma
        lo = np.where(form2, c - s2, c)
        hi = np.where(form2, c, c + s2)
        x = 0.5 * (lo + hi)
        step_before = hi - lo
        for _ in range(_MODE_STEPS):
            f = anchor + x
            p = expit(f)
            g = np.where(form2, -p, 1.0 - p) - (x - c) / s2
            lo = np.where(g > 0, x, lo)
            hi = np.where(g > 0, hi, x)
            x_newton = x + g / (p * (1.0 - p) + 1.0 / s2)
            # rtsafe: Newton only inside the bracket and when it at least halves the step
            # before last (Newton alone can cycle on the sigmoid's flanks); else bisect
            ok = (x_newton > lo) & (x_newton < hi) & (np.abs(x_newton - x) < 0.5 * step_before)
            x_new = np.where(ok, x_newton, 0.5 * (lo + hi))
            step_before = np.abs(x_new - x)
            x = x_new
        p = expit(anchor + x)
        width = 1.0 / np.sqrt(p * (1.0 - p) + 1.0 / s2)
        inf = np.full_like(x, np.inf)
        return [(x, width, -inf, inf)]

    def _level_guess(self, side, level, mode, x, mu, sigma, y):
        """The level set itself, by Newton on the drop D(u) = log q(mode) - log q(mode + side u)
        (not on its square root) from the Gaussian point u = s sqrt(2 L), which is never short
        of it: D(u) >= u^2 / (2 s^2) (the log-likelihood lies below its tangent at the mode) and
        D is convex, so the steps decrease monotonically onto the level set; where the mass sits
        many widths from the logistic step, D is quadratic on the mode's side of the step and
        nearly linear beyond it, and _GUESS_STEPS steps land within 0.05 of a level spacing (the
        kernel's Newton steps then polish). The kernel's own Newton steps on sqrt(D), which is
        concave beyond the step, cycled from any farther start (edges stuck ~9 nats
        down, the outermost ~19 nats instead of 50: sigma* and the tilted moments off by up to
        4e-10 at sigma ~ 35..73)."""
        log_peak, _ = self._log_tilted(mode, mu, sigma, y, derivative=False)
        u = sigma * np.sqrt(2.0 * level)
        for _ in range(_GUESS_STEPS):
            log_q, dlog_q = self._log_tilted(mode + side * u, mu, sigma, y)
            u = u - (log_peak - log_q - level) / (-side * dlog_q)
        return mode + side * u

    def _breakpoints(self, mu, sigma, y):
        """Wide cavities (s > 2): edges at 0 and +-0.5 * 2^k up to the mass's extent."""
        _, c, _, _ = _frame(mu, sigma)
        extent = np.abs(c) + 12.0 * sigma
        k = np.ceil(np.log2(np.maximum(extent, 1.0) / 0.5)) + 1
        need = np.where(sigma > _WIDE, 1 + np.maximum(k, 1), 0)
        return need.astype(np.int64), graded_step_edges
