"""Independent mpmath reference for the ``logit`` and ``poisson_log`` likelihoods.

The tilted densities (Zhang et al. (2020): ``q(f) ~ p(y|f) N(f | mu, sigma^2)``, eq. (7) for sigma*)::

    logit:        p(y | f) = 1 / (1 + exp(-y f)),            y in {-1, +1}
    poisson_log:  p(y | f) = exp(y f - e^f) / y!,            y in {0, 1, 2, ...}

are handed, as log densities in mpmath, to the panel engine of :mod:`qptables.reference.tilted`
(adaptive Chebyshev panels to ``dps + 15`` digits, the tilted CDF by spectral cumulative
integration from both ends, ``phi(Phi^{-1}(u))`` by Halley's iteration in mpmath). That engine
shares no numerics with :mod:`qpinfer`: no level-set panels, no Gauss-Legendre rules, no
closed-form regimes, no Wright omega -- the Poisson mode is mpmath's Lambert W of
``s^2 exp(mu + y s^2)`` (the density is integrated about it, in ``g = f - mode``, at 35+ digits),
the logit mode a bisection in the original variable f.

Results agree with the engine's own self-consistency (other panel degree) to ~1e-30; the claim is
25 significant digits at the default ``dps = 40``.
"""

from __future__ import annotations

import mpmath
from mpmath import mpf

from qptables.reference.tilted import Tilted, bisect_decreasing

__all__ = ["LABELS", "MODEL", "LogitTilted"]


class LogitTilted(Tilted):
    """``ell(f) = -log(1 + exp(-y f)) + log N(f | mu, sigma^2)``."""

    graded_cuts = True  # the logistic step at f = 0 has width ~1: cuts at +-2^k

    def ell(self, f: mpf) -> mpf:
        return (
            -mpmath.log1p(mpmath.exp(-self.y * f))
            - (f - self.mu) ** 2 / (2 * self.sigma**2)
            + self.const
        )

    def _sig(self, t: mpf) -> mpf:
        return 1 / (1 + mpmath.exp(-t))

    def neg_curvature(self, f: mpf) -> mpf:
        p = self._sig(f)
        return p * (1 - p) + 1 / self.sigma**2

    def modes(self) -> list[mpf]:
        # ell'(f) = y sig(-y f) - (f - mu)/s^2 decreases; its root lies between mu and mu + y s^2
        mu, s2, y = self.mu, self.sigma**2, self.y

        def dell(f: mpf) -> mpf:
            return y * self._sig(-y * f) - (f - mu) / s2

        lo, hi = (mu, mu + s2) if y > 0 else (mu - s2, mu)
        return [bisect_decreasing(dell, lo, hi, steps=400)]


#: the label: a class in {-1, +1}
LABELS = "sign"
MODEL = LogitTilted
