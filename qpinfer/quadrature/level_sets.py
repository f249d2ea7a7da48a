"""Panel edges on a lobe's log-density level sets: where the sigma* kernel
(:mod:`qpinfer.sigma.exact`) and the power-EP moments (:mod:`qpinfer.inference.power_ep`) put their
quadrature panels.

``lik`` is any likelihood with the ``_log_tilted(x, mu, sigma, y, derivative=True)`` hook
(optional ``_snap_to_bounds`` and ``_level_guess``; a likelihood whose lobes are not
log-concave places its own edges with ``_lobe_edges``, e.g. :mod:`qpinfer.likelihoods.student_t`);
this module imports none.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NEWTON_STEPS", "TAIL", "TiltedDensity", "level_edges"]

TAIL = 50.0  # nats below the mode where a lobe is cut (e^-50 ~ 2e-22)
NEWTON_STEPS = 3
_TAIL_SLACK = 10.0  # an outermost edge less than TAIL - this below the mode is re-placed
_STRAY = 0.5  # ... and, towards a finite bound, an edge this many level spacings off its level
_BISECTIONS = 24  # bracket / 1.7e7: an edge needs no more (it only bounds a panel)
_EXPANSIONS = 64


class TiltedDensity:
    """What the kernel's panels ask of an unnormalised log tilted density (every
    :class:`~qpinfer.Likelihood` is one; so are the lobe-relative and fractional densities
    some likelihoods and Power EP integrate): ``_log_tilted`` and the level sets' hooks,
    with their defaults."""

    _n_nodes: int = 20  # Gauss-Legendre nodes per panel in the sigma* quadrature
    #: a lobe of the tilted density ends exactly at its finite bounds (the density jumps or
    #: turns there): the kernel's level-set edges snap onto them
    _snap_to_bounds: bool = False
    #: cavities wider than this (canonical sigma) have the sigma* kernel check each lobe's
    #: outermost panel edge where it ends (one more log-density evaluation per side) and
    #: re-place one that stopped short of the tail cut (qpinfer.quadrature.level_sets): needed where
    #: sqrt(drop) bends sharply, at the link's step seen from a cavity much wider than it (a
    #: probit cavity at sigma 1.8e8 lost 2.5e-13; logit at sigma ~50, 4.4e-10); a tilt that is
    #: nearly Gaussian never stops short (inf: never checked)
    _tail_check_sigma: float = np.inf

    def _log_tilted(self, f, mu, sigma, y, derivative: bool = True):
        """Unnormalized log tilted density at ``f`` and (if ``derivative``) its f-derivative,
        else ``None`` in its place."""
        raise NotImplementedError

    def _lobe_edges(self, mode, width, lower, upper, mu, sigma, y, levels):
        """Panel edges of one lobe at the log-density ``levels`` below its mode, shape
        ``(N, 2K+1)``, or ``None`` (default): the kernel's Newton level sets then place them
        (a likelihood that is not log-concave places its own)."""
        return None

    def _level_guess(self, side, level, mode, x, mu, sigma, y) -> np.ndarray:
        """A better first guess than ``x`` (the Gaussian one) of the lobe's edge on ``side``
        at ``level`` nats below the mode, for the kernel's Newton level sets (default: ``x``)."""
        return x


def level_edges(lik, mode, width, lower, upper, mu, sigma, y, n_levels):
    """Panel edges of one lobe on log-density level sets, shape (N, 2K+1), ascending."""
    spacing = np.sqrt(2.0 * TAIL) / n_levels  # levels are equally spaced in sqrt(2 drop)
    levels = (np.arange(1, n_levels + 1) * spacing) ** 2 / 2.0
    # a likelihood that is not log-concave places its own (Student-t: bisection, edges ending
    # at the antimode)
    own = lik._lobe_edges(mode, width, lower, upper, mu, sigma, y, levels)
    if own is not None:
        return own
    log_peak, _ = lik._log_tilted(mode, mu, sigma, y, derivative=False)
    snap = lik._snap_to_bounds
    sides = []
    for side, bound in ((-1.0, lower), (1.0, upper)):
        edges = []
        prev = mode
        hit = np.zeros(mode.shape, dtype=bool)
        for k, level in enumerate(levels):
            # Newton on g(x) = sqrt(log q(mode) - log q(x)) - sqrt(level), which is linear in x
            # for a Gaussian (so one step is exact there), but not convex for every log-concave
            # lobe (concave where the drop is nearly linear: beyond the logistic step, near a
            # log-singular bound), which a likelihood's _level_guess then handles.
            # First guess: the Gaussian one, scaled from the previous level.
            if k == 0:
                x = mode + side * width * np.sqrt(2.0 * level)
            else:
                x = mode + (prev - mode) * np.sqrt(level / levels[k - 1])
            x = lik._level_guess(side, level, mode, x, mu, sigma, y)
            for _ in range(NEWTON_STEPS):
                lq, dlq = lik._log_tilted(x, mu, sigma, y)
                drop = np.maximum(log_peak - lq, 1e-300)
                x_new = x + 2.0 * drop * (1.0 - np.sqrt(level / drop)) / dlq
                ok = np.isfinite(x_new) & (side * (x_new - prev) > 0)
                x_new = np.where(ok, x_new, 0.5 * (x + prev))
                # stay strictly inside the lobe's hard bound (e.g. f = 0 for Poisson)
                with np.errstate(invalid="ignore"):  # NaN where bound is infinite (unused)
                    inside = bound + 0.05 * (prev - bound)
                out = side * (x_new - bound) >= 0
                hit |= out
                x = np.where(out, inside, x_new)
            last = k == len(levels) - 1
            x = _replace_strays(
                lik,
                side,
                level,
                spacing,
                last,
                mode,
                prev,
                x,
                drop,
                hit,
                bound,
                log_peak,
                mu,
                sigma,
                y,
            )
            edges.append(x)
            prev = x
        if snap:
            # a likelihood with a jump at its bound (step_noise): a lobe whose level sets reach
            # past the bound ends exactly on it, so no mass is lost between the lobes
            edges[-1] = np.where(hit, bound, edges[-1])
        sides.append(edges)
    left = np.stack(sides[0][::-1], axis=-1)
    right = np.stack(sides[1], axis=-1)
    return np.concatenate([left, mode[:, None], right], axis=-1)


def _replace_strays(
    lik, side, level, spacing, last, mode, prev, x, drop, hit, bound, log_peak, mu, sigma, y
):
    """The few edges the Newton steps leave far from their level set, re-placed by bisection.

    Newton's steps stall or overshoot where sqrt(drop) is far from linear: a wide logit cavity
    whose mass sits many widths from the logistic step (sqrt(drop) bends sharply at f = 0, so
    the outermost edge may stop ~19 nats down instead of TAIL and lose e^-19 of the mass: 4e-10
    relative error in sigma* and sigma_EP at mu = 207.564, sigma = 49), or a Poisson lobe near
    its hard bound f = 0 (log-singular: an edge 36 nats down for the 12.5-nat level leaves one
    16-node panel across 33 nats, 2.6e-12 at y = 3, mu = 14.7187, sigma = 2). Both now start
    on the level set (``Logit._level_guess`` by Newton on the drop itself,
    ``PoissonSquare._level_guess`` in log(mode / f)), so for them this is a guard that no scanned
    cavity triggers any more (``tests/sigma/test_level_set_panel_edges.py``). Re-placed are the
    edges that did not hit the bound and (a) are outermost and less than TAIL - 10 nats down (for
    cavities wider than the likelihood's ``_tail_check_sigma``: every logit and log-link
    cavity, probit ones with sigma > 1; it costs a log-density evaluation per side), or
    (b) lie on a side with a finite bound more than half a level spacing (in sqrt(2 drop)) off
    their level. Elsewhere (unbounded sides) a stray inner edge only moves a panel boundary
    (the likelihood's breakpoints keep the panels resolved), so such points keep their edges and
    their values bit for bit. Inner edges are judged by the drop at the last Newton iterate
    (``drop``; no extra evaluation), the outermost at the edge itself. Per point, independent of
    the batch."""
    bounded = np.isfinite(bound)
    if not (last or bounded.any()):
        return x
    stray = np.zeros(x.shape, dtype=bool)
    if last:  # the tail cut is checked where it ends; inner edges by the last Newton iterate
        j = np.flatnonzero(sigma > lik._tail_check_sigma)
        if j.size:
            drop = drop.copy()
            drop[j] = (
                log_peak[j] - lik._log_tilted(x[j], mu[j], sigma[j], y[j], derivative=False)[0]
            )
            stray[j] = ~(drop[j] >= level - _TAIL_SLACK)
    off = np.abs(np.sqrt(2.0 * np.maximum(drop, 0.0)) - np.sqrt(2.0 * level))
    stray |= bounded & ~(off <= _STRAY * spacing)
    stray &= ~hit & np.isfinite(log_peak)
    if not stray.any():
        return x
    i = np.flatnonzero(stray)
    x = x.copy()
    x[i] = _bisect_level(
        lik,
        side,
        level,
        mode[i],
        prev[i],
        x[i],
        drop[i],
        bound[i],
        log_peak[i],
        mu[i],
        sigma[i],
        y[i],
    )
    return x


def _bisect_level(lik, side, level, mode, inner, x, drop, bound, log_peak, mu, sigma, y):
    """The point of the level set between ``inner`` (above it: the previous edge or the mode)
    and an outer point (``x`` if below the level, else ``x`` pushed out by doublings of its
    distance from the mode, at most to the bound), by bisection."""

    def drop_at(z):
        return log_peak - lik._log_tilted(z, mu, sigma, y, derivative=False)[0]

    outer = x
    t = np.abs(x - mode)
    t = np.where(t > 0.0, t, np.abs(inner - mode))
    need = ~(drop >= level)
    for _ in range(_EXPANSIONS):
        if not need.any():
            break
        t = np.where(need, 2.0 * t, t)
        cand = mode + side * t
        crossed = side * (cand - bound) >= 0
        cand = np.where(crossed, bound, cand)
        outer = np.where(need, cand, outer)
        need &= ~(drop_at(cand) >= level) & ~crossed
    lo, hi = inner, outer
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        below = drop_at(mid) < level
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)
