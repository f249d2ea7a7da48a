"""Independent mpmath reference for the probit likelihood (Zhang et al., 2020, App. C.1):
``p(y|f) = Phi(y f)``, ``y in {-1, +1}``, as a model of the panel engine
(:mod:`qptables.reference.tilted`): its one mode by bisection on the monotone derivative, cuts at
``f = 0`` and graded about it (the step of ``Phi`` has width 1)."""

from __future__ import annotations

import mpmath
from mpmath import mpf

from qptables.reference.tilted import Tilted, bisect_decreasing

__all__ = ["LABELS", "MODEL", "ProbitTilted"]

#: the label: a class in {-1, +1}
LABELS = "sign"


class ProbitTilted(Tilted):
    """``ell(f) = log Phi(y f) + log N(f | mu, sigma^2)`` (App. C.1)."""

    graded_cuts = True  # the step of Phi(y f) at f = 0 has width 1

    def ell(self, f: mpf) -> mpf:
        gauss = -((f - self.mu) ** 2) / (2 * self.sigma**2) + self.const
        return mpmath.log(mpmath.ncdf(self.y * f)) + gauss

    def neg_curvature(self, f: mpf) -> mpf:
        """``-ell''(f)`` (positive: ``ell`` is concave)."""
        t = self.y * f
        lam = mpmath.npdf(t) / mpmath.ncdf(t)
        return lam * (t + lam) + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        """The one maximum of ``ell``: ``ell'(f) = y lam(y f) - (f - mu)/s2`` is strictly
        decreasing; its root lies between ``mu`` and ``mu + y s2 lam(y mu)``."""
        mu, s2, y = self.mu, self.sigma**2, self.y

        def dell(f: mpf) -> mpf:
            t = y * f
            return y * mpmath.npdf(t) / mpmath.ncdf(t) - (f - mu) / s2

        a, b = mu, mu + y * s2 * mpmath.npdf(y * mu) / mpmath.ncdf(y * mu)
        return [bisect_decreasing(dell, *((a, b) if a < b else (b, a)), steps=200)]


MODEL = ProbitTilted
