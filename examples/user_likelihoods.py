"""Three likelihoods written by a user of qpinfer (the guide's "Write your own likelihood").

Each is a :class:`qpinfer.CustomLikelihood` subclass: the domain of ``y``, the fixed
hyperparameters and ``log p(y | f)`` written once over the math namespace ``m`` -- nothing
else. ``qptables build user_likelihoods:NegativeBinomial(r=2.3) OUT --grid cells`` builds a
verified table for one of them.
"""

import numpy as np

from qpinfer import CustomLikelihood


class NegativeBinomial(CustomLikelihood):
    """Overdispersed counts, mean ``e^f`` and dispersion ``r`` (variance ``e^f + e^2f / r``)."""

    y_domain = "counts"
    params = ("r",)
    max_count = 20  # a table holds counts 0..20 (larger ones: the exact kernel)
    table_tau, table_sigma = 5.0, (1e-2, 5.0)  # a smaller table: where GP fits take cavities

    def __init__(self, r=2.0):
        self.r = float(r)

    def log_lik(self, f, y, m):
        r = self.r
        log_norm = m.lgamma(y + r) - m.lgamma(r) - m.lgamma(y + 1)
        return log_norm + y * (f - m.log(r)) - (y + r) * m.softplus(f - m.log(r))


class BernoulliCloglog(CustomLikelihood):
    """Binary labels -1/+1 with the complementary log-log link, P(+1 | f) = 1 - exp(-e^f)."""

    y_domain = "binary"

    def log_lik(self, f, y, m):
        e = m.exp(f)
        # log(1 - exp(-e^f)); below f = -30 its series (the exp underflows at f < -745)
        positive = m.where(f < -30.0, f - e / 2, m.log1mexp(e))
        return m.where(y > 0, positive, -e)


class RightCensoredGaussian(CustomLikelihood):
    """Gaussian noise of scale ``s``; values at or above ``c`` are censored (known only to be
    >= c, e.g. a measurement that saturates)."""

    y_domain = "reals"
    params = ("c", "s")

    def __init__(self, c=1.0, s=0.5):
        self.c, self.s = float(c), float(s)

    def log_lik(self, f, y, m):
        z = (f - y) / self.s
        observed = -0.5 * z * z - m.log(self.s * m.sqrt(2.0 * m.pi))
        return m.where(y < self.c, observed, m.log_ndtr(z))

    def reduce_y(self, y):
        # an observed value is a shift of y = 0 (c > 0), a censored one is y = c
        censored = y >= self.c
        return np.where(censored, y - self.c, y), np.where(censored, self.c, 0.0)

    def table_labels(self):
        return (0.0, self.c)
