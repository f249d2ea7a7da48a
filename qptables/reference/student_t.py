"""Independent mpmath reference for Student-t regression noise.

``p(y|f) = t_nu((y - f)/s) / s``; the tilted density ``q(f) ~ p(y|f) N(f | mu, sigma^2)`` of
Zhang et al. (2020) eq. (5) has no closed-form CDF, so everything is integrated numerically in mpmath, in
the *original* coordinates (no shift, scaling or mirror as in :mod:`qpinfer.likelihoods.student_t`):

1. *Layout.* The stationary points of ``log q`` are the real roots of the cubic
   ``u^3 - m u^2 + (nu s^2 + (nu + 1) sigma^2) u - m nu s^2`` in ``u = f - y`` (``m = mu - y``),
   by ``mpmath.polyroots``; the ends are where ``log q`` is ``ln(10) (dps + 15)`` below its
   maximum (found by doubling and bisection from each extreme mode). Cuts: the stationary
   points, ``y`` and graded points ``y +- s 2^k`` (the t factor's tails are polynomial).
2. *Panels, CDF and eq. (7)* by the engine of :mod:`qptables.reference.tilted` (its
   Chebyshev-Lobatto rule with spectral cumulative integration, ``phi(Phi^{-1}(u))`` by
   Halley's iteration and fixed-point products): panels are bisected until the density's and
   then the eq. (7) integrand's last Chebyshev coefficients are below ``10^-(dps+3)``; ``F`` is
   summed from the left and ``S`` from the right; ``sigma* = int phi(Phi^{-1}(min(F, S))) df``.
3. *Moments.* ``log Z`` (with the t normaliser), mean and centred variance from the same panels.
"""

from __future__ import annotations

from functools import lru_cache

import mpmath
from mpmath import mp, mpf

from qptables.reference.tilted import (
    DEFAULT_NODES,
    GUARD_DIGITS,
    ReferencePoint,
    evaluate,
    tail_end,
)

__all__ = ["MODEL", "reference_point", "student_t_reference"]

MODEL = None  # (its own layout of the panels: the stationary points of a cubic)

_MAX_PANELS = 6000


class _Model:
    def __init__(self, nu, scale, mu, sigma, y):
        self.nu, self.s, self.mu, self.sigma, self.y = nu, scale, mu, sigma, y
        self.const = (
            mpmath.loggamma((nu + 1) / 2)
            - mpmath.loggamma(nu / 2)
            - mpmath.log(nu * mp.pi) / 2
            - mpmath.log(scale)
            - mpmath.log(sigma)
            - mpmath.log(2 * mp.pi) / 2
        )

    def ell(self, f):
        x = (self.y - f) / self.s
        gauss = -((f - self.mu) ** 2) / (2 * self.sigma**2)
        return self.const - (self.nu + 1) / 2 * mpmath.log1p(x * x / self.nu) + gauss

    def stationary(self):
        nu, s2, v, m = self.nu, self.s**2, self.sigma**2, self.mu - self.y
        roots = mpmath.polyroots(  # x^3 - m x^2 + (nu s^2 + (nu + 1) v) x - m nu s^2
            [1, -m, nu * s2 + (nu + 1) * v, -m * nu * s2],  # descending (mpmath 1.3 has no asc)
            maxsteps=400,
            extraprec=4 * mp.prec,
        )
        tol = mpf(10) ** (-mp.dps // 2) * (1 + abs(m))
        return sorted(self.y + mpmath.re(r) for r in roots if abs(mpmath.im(r)) <= tol)


def _layout(model, digits):
    pts = model.stationary()
    ells = [model.ell(p) for p in pts]
    top = max(ells)
    drop = mpf(digits) * mpmath.log(10)
    width = min(model.s, model.sigma)
    left = tail_end(model, pts[0], width, -1, top - drop)
    right = tail_end(model, pts[-1], width, 1, top - drop)
    cuts = {left, right, *(p for p in pts if left < p < right)}
    if left < model.y < right:
        cuts.add(model.y)
    k = model.s
    while k < max(model.y - left, right - model.y):
        cuts.update(c for c in (model.y - k, model.y + k) if left < c < right)
        k *= 2
    return sorted(cuts), top, width


def _compute(nu, scale, mu, sigma, y, dps, n):
    return evaluate(
        lambda: _Model(mpf(nu), mpf(scale), mpf(mu), mpf(sigma), mpf(y)),
        _layout,
        dps,
        n,
        what=f"student_t nu={nu} scale={scale} mu={mu} sigma={sigma} y={y}",
        start_width=4,  # the polynomial tails are wide: start finer than the default 16
        cutoff=-5 * (dps + GUARD_DIGITS),
        max_panels=_MAX_PANELS,
    )


@lru_cache(maxsize=4096)
def _cached(nu, scale, mu, sigma, y, dps, n):
    return _compute(nu, scale, mu, sigma, y, dps, n)


def student_t_reference(
    nu: float,
    scale: float,
    mu: float,
    sigma: float,
    y: float,
    dps: int = 30,
    n: int = DEFAULT_NODES,
) -> ReferencePoint:
    """``ReferencePoint(sigma_qp, log_z, mean, std, n_panels)`` of the Student-t tilted
    distribution to ~``dps`` digits (sigma* is Zhang et al. (2020) eq. (7); mean/std are EP's eq. (5))."""
    for name, value in (("nu", nu), ("scale", scale), ("sigma", sigma)):
        if not (mpmath.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    for name, value in (("mu", mu), ("y", y)):
        if not mpmath.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    return _cached(float(nu), float(scale), float(mu), float(sigma), float(y), dps, n)


def reference_point(name: str, mu, sigma, y, dps: int = 30, nodes: int = DEFAULT_NODES):
    """:func:`student_t_reference` of a Student-t likelihood name (``"student_t(nu=4.0,
    scale=1.0)"``)."""
    from qpinfer.likelihoods.student_t import parse_name

    params = parse_name(name)
    if params is None:
        raise ValueError(
            f"likelihood_name must be a student_t(nu=..., scale=...) name, got {name!r}"
        )
    return student_t_reference(*params, mu, sigma, y, dps=dps, n=nodes)
