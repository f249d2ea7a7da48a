"""Independent mpmath reference for Poisson counts with the square link (Zhang et al., 2020,
App. C.2): ``p(y|f) = f^(2y) exp(-f^2) / y!``, ``y in {0, 1, 2, ...}``, as a model of the panel
engine (:mod:`qptables.reference.tilted`): its modes are the two roots of a quadratic, one each
side of 0 (one Gaussian mode for ``y = 0``), and the layout cuts at them and at ``f = 0``."""

from __future__ import annotations

import mpmath
from mpmath import mpf

from qptables.reference.tilted import Tilted

__all__ = ["LABELS", "MODEL", "PoissonSquareTilted"]

#: the label: a count >= 0
LABELS = "count"


class PoissonSquareTilted(Tilted):
    """``ell(f) = 2y log|f| - f^2 - log y! + log N(f | mu, sigma^2)`` (App. C.2)."""

    def __init__(self, name: str, mu: mpf, sigma: mpf, y: int) -> None:
        super().__init__(name, mu, sigma, y)
        self.const -= mpmath.loggamma(y + 1)

    def ell(self, f: mpf) -> mpf:
        gauss = -((f - self.mu) ** 2) / (2 * self.sigma**2) + self.const
        if self.y == 0:
            return gauss - f * f
        if f == 0:
            return mpf("-inf")
        return self.y * mpmath.log(f * f) - f * f + gauss

    def neg_curvature(self, f: mpf) -> mpf:
        """``-ell''(f)`` (positive on each side of 0)."""
        extra = 2 * self.y / (f * f) if self.y else 0
        return extra + 2 + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        """One Gaussian mode for ``y = 0``; otherwise one each side of 0."""
        mu, s2, y = self.mu, self.sigma**2, self.y
        a = 2 + 1 / s2
        if y == 0:
            return [mu / (s2 * a)]
        # f * ell'(f) = 2y - a f^2 + (mu/s2) f = 0 ; roots of opposite sign, product -2y/a
        b = mu / s2
        disc = mpmath.sqrt(b * b + 8 * y * a)
        big = (b + disc) / (2 * a) if b >= 0 else (b - disc) / (2 * a)
        small = -2 * y / (a * big)
        return sorted([big, small])


MODEL = PoissonSquareTilted
