"""
Poisson counts with predictive intervals
========================================

:class:`~qpinfer.GPPoissonRegressor` models counts with a Poisson likelihood whose rate is the
square of a GP (the square link of Zhang et al., 2020); the predictive distribution of a new
count is a negative binomial. :meth:`~qpinfer.GPPoissonRegressor.predict` gives its mean (as
scikit-learn's ``PoissonRegressor``), :meth:`~qpinfer.GPPoissonRegressor.predict_interval` its
5% and 95% quantiles, which bound where new counts fall.
"""

import matplotlib.pyplot as plt
import numpy as np

from qpinfer import GPPoissonRegressor

rng = np.random.default_rng(3)
X = np.sort(rng.uniform(0, 10, 120))[:, None]
rate = 4 + 3 * np.sin(X[:, 0] / 1.5)
y = rng.poisson(rate)

est = GPPoissonRegressor(method="qp", optimizer_maxiter=50).fit(X, y)


low_train, high_train = est.predict_interval(X, alpha=0.9)
inside = (low_train <= y) & (y <= high_train)
print(f"training counts inside their 90% interval: {inside.mean():.2f}")

grid = np.linspace(0, 10, 200)[:, None]
low, high = est.predict_interval(grid, alpha=0.9)

fig, ax = plt.subplots(figsize=(7, 4.5))
ax.scatter(X, y, color="k", s=12, label="counts")
ax.plot(grid, 4 + 3 * np.sin(grid[:, 0] / 1.5), "k:", label="true rate")
ax.plot(grid, est.predict(grid), color="C0", label="predictive mean")
ax.fill_between(grid[:, 0], low, high, step="mid", color="C0", alpha=0.2, label="90% interval")
ax.set_xlabel("x")
ax.set_ylabel("count")
ax.legend()
fig.tight_layout()
