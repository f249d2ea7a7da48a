"""Independent mpmath reference for Poisson counts with the log link:
``p(y|f) = exp(y f - e^f) / y!``, ``y in {0, 1, 2, ...}``, as a model of the panel engine
(:mod:`qptables.reference.tilted`) in the variable ``g = f - shift`` about its mode (mpmath's
Lambert W; see ``PoissonLogTilted``)."""

from __future__ import annotations

import mpmath
from mpmath import mp, mpf

from qptables.reference.tilted import Tilted

__all__ = ["LABELS", "MODEL", "PoissonLogTilted"]

#: the label: a count >= 0
LABELS = "count"


class PoissonLogTilted(Tilted):
    """``ell = y f - exp(f) - log y! + log N(f | mu, sigma^2)`` in the variable ``g = f - shift``
    about the mode ``shift`` (mpmath's Lambert W), as ``ell(shift) - alpha (e^g - 1 - g) -
    g^2 / (2 sigma^2)``, ``alpha = e^shift`` (exact: ``ell'(shift) = 0``), so no terms of size
    ``(mu + y sigma^2)^2 / sigma^2`` enter the panels (they cancel at 1e8)."""

    def __init__(self, name: str, mu: mpf, sigma: mpf, y: int) -> None:
        super().__init__(name, mu, sigma, y)
        s2 = sigma**2
        m = mu + y * s2
        # the mode solves f + s^2 e^f = m': f = m' - W(s^2 e^m')
        self.shift = m - mpmath.lambertw(s2 * mpmath.exp(m)).real
        self.alpha = mpmath.exp(self.shift)
        f = self.shift
        # log q at the mode: added to log Z only (``evaluate``), not to ell -- it reaches
        # -(s alpha)^2 / 2 ~ -1e17 for s alpha ~ 4e8, which would leave ell too few of the
        # working digits for the panels' tolerance (no convergence, e.g. a = 20, s = 2)
        self.log_offset = (
            y * f
            - self.alpha
            - (f - mu) ** 2 / (2 * s2)
            - mpmath.log(sigma)
            - mpmath.log(2 * mp.pi) / 2
            - mpmath.loggamma(y + 1)
        )

    def ell(self, g: mpf) -> mpf:
        return -self.alpha * (mpmath.expm1(g) - g) - g**2 / (2 * self.sigma**2)

    def neg_curvature(self, g: mpf) -> mpf:
        return self.alpha * mpmath.exp(g) + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        return [mpf(0)]


MODEL = PoissonLogTilted
