"""Independent mpmath reference for the label-noise step likelihood (Qi and Guo, 2012, eq. (8)).

``p(y|f) = (1 - eps) Theta(y f) + eps Theta(-y f)``. Unlike :mod:`qptables.reference.sigma` (panels
with spectral cumulative integration of the density), the tilted CDF here is known in closed form
and is evaluated directly in mpmath; only eq. (7) of Zhang et al. (2020) is integrated numerically::

    F(f) = eps Phi(t) / Z                                    (f < 0)
    S(f) = 1 - F(f) = (1 - eps) Phi(-t) / Z                  (f >= 0)
    sigma* = int phi(Phi^{-1}(min(F, S))) df,   t = (f - mu)/sigma,  Z = eps + (1-2eps)
    Phi(mu/sigma)

(canonical ``y = +1``; ``y = -1`` is the mirror ``mu -> -mu``). ``Phi^{-1}`` is mpmath's
``erfinv`` at ``dps + 10`` digits; each side of ``f = 0`` is split at quadratically spaced
points between the side's mode (``mu`` clipped into the side) and the point ``120`` nats below
it, and integrated by tanh-sinh quadrature. Shares no code or numerics with :mod:`qpinfer`.
"""

from __future__ import annotations

import mpmath
from mpmath import mp, mpf

from qptables.reference.tilted import ReferencePoint

__all__ = ["MODEL", "reference_point", "step_noise_moments_reference", "step_noise_sigma_reference"]

MODEL = None  # (its own closed-CDF reference, not the panel engine's)

_TAIL_NATS = 120
_N_SPLIT = 12


def _setup(eps, mu, sigma, y):
    if not (0 <= eps < 0.5):
        raise ValueError(f"eps must be in [0, 0.5), got {eps!r}")
    if y not in (-1, 1):
        raise ValueError(f"y must be -1 or +1, got {y!r}")
    e = mpf(eps)
    m = mpf(mu) * y
    s = mpf(sigma)
    # cavity masses on f < 0 and f >= 0, each computed directly (never as 1 - the other)
    big_z = e * mpmath.ncdf(-m / s) + (1 - e) * mpmath.ncdf(m / s)
    return e, m, s, big_z


def _side_points(m, s, side):
    """Breakpoints on one side of 0 (side -1: f < 0, +1: f > 0), from the bound outwards."""
    mode = min(m, 0) if side < 0 else max(m, 0)
    a = abs(mode - m)
    far = m + side * mpmath.sqrt(a * a + 2 * s * s * _TAIL_NATS)
    pts = [mode + (far - mode) * (mpf(j) / _N_SPLIT) ** 2 for j in range(_N_SPLIT + 1)]
    if mode != 0:  # the interior mode: from the bound 0 to the mode, then outwards
        pts = [mode * (1 - (mpf(j) / _N_SPLIT) ** 2) for j in range(_N_SPLIT + 1)] + pts
    return sorted(set(pts))


def step_noise_sigma_reference(eps, mu, sigma, y=1, dps: int = 20) -> mpf:
    """sigma* (Zhang et al., 2020, eq. (7)) of the step-noise tilted distribution, to ~``dps`` digits."""
    with mp.workdps(dps + 10):
        e, m, s, big_z = _setup(eps, mu, sigma, y)
        inv_sqrt_2pi = 1 / mpmath.sqrt(2 * mpmath.pi)

        def integrand(f):
            t = (f - m) / s
            if f < 0:
                u = e * mpmath.ncdf(t) / big_z
            else:
                u = (1 - e) * mpmath.ncdf(-t) / big_z
            u = min(u, 1 - u)
            if u <= 0:
                return mpf(0)
            x = mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * u)  # -Phi^{-1}(u) >= 0
            return mpmath.exp(-x * x / 2) * inv_sqrt_2pi

        total = mpf(0)
        sides = [1] if e == 0 else [-1, 1]
        for side in sides:
            pts = _side_points(m, s, side)
            total += mpmath.quad(integrand, pts)
        return +total


def step_noise_moments_reference(eps, mu, sigma, y=1, dps: int = 20):
    """``(log Z, mean, std)`` of the tilted distribution by mpmath quadrature of the density."""
    with mp.workdps(dps + 10):
        e, m, s, _ = _setup(eps, mu, sigma, y)

        def dens(f):
            w = e if f < 0 else 1 - e
            return w * mpmath.npdf(f, m, s)

        sides = [1] if e == 0 else [-1, 1]
        mom = [mpf(0)] * 3
        for side in sides:
            pts = _side_points(m, s, side)
            for k in range(3):
                mom[k] += mpmath.quad(lambda f, k=k: f**k * dens(f), pts)
        mean = mom[1] / mom[0]
        var = mom[2] / mom[0] - mean * mean
        return mpmath.log(mom[0]), mean * y, mpmath.sqrt(var)


def reference_point(name: str, mu, sigma, y, dps: int = 20, nodes: int = 0) -> ReferencePoint:
    """``ReferencePoint`` of a step-noise likelihood name (``"step_noise(eps=0.2)"``): sigma*
    and the moments by the routines above (``nodes`` unused: tanh-sinh quadrature)."""
    from qpinfer.likelihoods.step_noise import parse_name

    eps = parse_name(name)
    if eps is None:
        raise ValueError(f"likelihood_name must be a step_noise(eps=...) name, got {name!r}")
    sigma_qp = step_noise_sigma_reference(eps, float(mu), float(sigma), int(y), dps=dps)
    log_z, mean, std = step_noise_moments_reference(eps, float(mu), float(sigma), int(y), dps=dps)
    return ReferencePoint(sigma_qp, log_z, mean, std, 0)
