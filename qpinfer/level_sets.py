"""Panel edges on a lobe's log-density level sets: where the sigma* kernel (:mod:`qpinfer.sigma`)
and the power-EP moments (:mod:`qpinfer.power_ep`) put their quadrature panels.

``lik`` is any likelihood with the ``_log_tilted(x, mu, sigma, y, derivative=True)`` hook
(optional ``_snap_to_bounds`` and ``_level_guess``; a likelihood whose lobes are not
log-concave places its own edges with ``_lobe_edges``, e.g. :mod:`qpinfer.student_t`); this
module imports none.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NEWTON_STEPS", "TAIL", "level_edges"]

TAIL = 50.0  # nats below the mode where a lobe is cut (e^-50 ~ 2e-22)
NEWTON_STEPS = 3


def level_edges(lik, mode, width, lower, upper, mu, sigma, y, n_levels):
    """Panel edges of one lobe on log-density level sets, shape (N, 2K+1), ascending."""
    levels = (np.arange(1, n_levels + 1) * (np.sqrt(2.0 * TAIL) / n_levels)) ** 2 / 2.0
    own = getattr(lik, "_lobe_edges", None)  # a non-log-concave likelihood places its own
    if own is not None:  # (qpinfer.student_t: bisection, edges ending at the antimode)
        return own(mode, width, lower, upper, mu, sigma, y, levels)
    log_peak, _ = lik._log_tilted(mode, mu, sigma, y, derivative=False)
    snap = getattr(lik, "_snap_to_bounds", False)
    guess = getattr(lik, "_level_guess", None)  # a likelihood's better first guesses
    sides = []
    for side, bound in ((-1.0, lower), (1.0, upper)):
        edges = []
        prev = mode
        hit = np.zeros(mode.shape, dtype=bool)
        for k, level in enumerate(levels):
            # Newton on g(x) = sqrt(log q(mode) - log q(x)) - sqrt(level), which is linear in x
            # for a Gaussian (so one step is exact there) and convex for log-concave lobes.
            # First guess: the Gaussian one, scaled from the previous level.
            if k == 0:
                x = mode + side * width * np.sqrt(2.0 * level)
            else:
                x = mode + (prev - mode) * np.sqrt(level / levels[k - 1])
            if guess is not None:
                x = guess(side, level, mode, x, mu, sigma, y)
            for _ in range(NEWTON_STEPS):
                lq, dlq = lik._log_tilted(x, mu, sigma, y)
                drop = np.maximum(log_peak - lq, 1e-300)
                x_new = x + 2.0 * drop * (1.0 - np.sqrt(level / drop)) / dlq
                ok = np.isfinite(x_new) & (side * (x_new - prev) > 0)
                x_new = np.where(ok, x_new, 0.5 * (x + prev))
                # stay strictly inside the lobe's hard bound (e.g. f = 0 for Poisson)
                inside = bound + 0.05 * (prev - bound)  # NaN where bound is infinite
                out = side * (x_new - bound) >= 0
                hit |= out
                x = np.where(out, inside, x_new)
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
